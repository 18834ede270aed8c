"""Chapter 1 experiment code: parameter checks, metric definitions, and the paper-profile path at toy size."""
import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from memlab import config, probes
from memlab.config import ConfigError
from memlab.data import vision
from memlab.experiments import ch01_bn_illusion as E

CH = "01_bn_illusion"


def _fake_cifar(split="train", dataset="cifar10", root=None, download=False, n_per_class=None, seed=0):
    k = 100 if dataset == "cifar100" else 10
    per = n_per_class or (1000 if split == "test" else 30)
    g = torch.Generator().manual_seed(hash((split, dataset)) % 1000)
    y = torch.arange(k).repeat_interleave(per)
    x = torch.randn(len(y), 3, 32, 32, generator=g) * 0.5 + (y.float() / k).view(-1, 1, 1, 1)
    return x, y


@pytest.fixture()
def fake_data(monkeypatch, tmp_path):
    monkeypatch.setattr(vision, "load_cifar", _fake_cifar)
    monkeypatch.setattr(vision, "load_raw", lambda split, dataset="cifar10", *a, **k: (
        np.random.default_rng(0).integers(0, 255, (200, 32, 32, 3), dtype=np.uint8), np.zeros(200, np.int64)))
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path))
    monkeypatch.setenv("MEMLAB_PROGRESS", "0")


@pytest.mark.parametrize("override, param", [
    (dict(methods=["GA", "Salun"]), "methods"),
    (dict(forget_class=10), "forget_class"),
    (dict(forget_class=9, n_forget_classes=2), "n_forget_classes"),
    (dict(budgets=[10, 10**6]), "budgets"),
    (dict(recovery_b=5000), "budgets"),
    (dict(width=0), "width"),
    (dict(train_per_class=0), "train_per_class"),
    (dict(test_per_class=2000), "test_per_class"),
    (dict(dataset="mnist"), "dataset"),
    (dict(salun_mix_sweep=[1.0]), "salun_mix_sweep"),
    (dict(methods=["Retrain", "GA"]), "recovery_methods"),
])
def test_bad_parameters_fail_before_any_work(override, param):
    with pytest.raises(ConfigError, match=f"parameter '{param}'"):
        config.resolve(CH, "cpu", **override)


def test_profiles_resolve_and_paper_uses_reference_settings():
    p = config.resolve(CH, "paper")
    assert (p.width, p.n_seeds, p.epochs, p.ood_source, max(p.budgets)) == (64, 3, 182, "cifar100", 9000)
    assert E.method_hparams(p, "SalUn", 0) == {"seed": 0}  # module DEFAULTS = reference values
    c = config.resolve(CH, "cpu")
    assert set(c.methods) == set(E.METHODS) and c.width < p.width


def test_patch_shuffle_permutes_tiles_only():
    x = torch.arange(2 * 3 * 32 * 32, dtype=torch.float32).view(2, 3, 32, 32)
    y = E.patch_shuffle(x, 8, seed=0)
    assert not torch.equal(x, y)
    for i in range(2):
        tiles = lambda t: sorted(t[:, r:r + 8, c:c + 8].flatten().tolist()[0] for r in range(0, 32, 8)
                                 for c in range(0, 32, 8))
        assert tiles(x[i]) == tiles(y[i])  # the same 16 tiles, reordered
        torch.testing.assert_close(x[i].flatten().sort().values, y[i].flatten().sort().values)
    with pytest.raises(ValueError, match="parameter 'patch'"):
        E.patch_shuffle(x, 5)


def test_relearn_auc_is_zero_for_retrain_one_for_original_and_linear_between():
    orig, retr = np.array([90.0, 95, 97]), np.array([0.0, 40, 60])
    assert probes.relearn_auc(retr, orig, retr) == 0.0
    assert probes.relearn_auc(orig, orig, retr) == 1.0
    mid = (orig + retr) / 2
    assert probes.relearn_auc(mid, orig, retr) == pytest.approx(0.5)
    assert probes.relearn_auc(retr - 10, orig, retr) == 0.0  # clipped
    assert np.isnan(probes.relearn_auc(orig, orig, orig))


def test_summarise_and_lp_decomposition_identities():
    rows = []
    for s in (0, 1):
        for m, lp, lpc in (("Original", 90, 91), ("Retrain", 70, 70), ("SalUn", 60, 85)):
            row = dict(method=m, seed=s, norm="bn", bn_mode="train", **{k: v + s for k, v in zip(E.METRICS, range(7))})
            row.update({"LP-50": lp + s, "LP-50 (recal)": lpc + s})
            rows.append(row)
    long = pd.DataFrame(rows)
    summ = E.summarise(long)
    assert list(summ.index) == ["Original", "Retrain", "SalUn"]
    assert summ.loc["SalUn", "LP-50"] == 60.5 and summ.loc["SalUn", "LP-50 std"] == pytest.approx(np.sqrt(0.5))
    t2 = E.lp_decomposition(long)
    r = t2.loc["SalUn"]
    assert (r["BN-residual"], r["NC-residual"]) == (-25, 15)
    assert r["BN-residual"] + r["NC-residual"] == r["LP - LP_retrain"]  # Proposition 1 is an identity


def test_correlations_agree_with_scipy():
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"Post-F": rng.uniform(0, 100, 8), "ReAUC": rng.uniform(0, 1, 8), "LP-50": rng.uniform(0, 100, 8)})
    c = E.correlations(df).set_index(["y", "test"])
    assert c.loc[("ReAUC", "Pearson"), "statistic"] == pytest.approx(stats.pearsonr(df["Post-F"], df["ReAUC"])[0])
    assert c.loc[("LP-50", "Kendall"), "p-value"] == pytest.approx(stats.kendalltau(df["Post-F"], df["LP-50"])[1])
    const = df.assign(ReAUC=0.0)
    assert np.isnan(E.correlations(const).set_index(["y", "test"]).loc[("ReAUC", "Spearman"), "statistic"])


def test_claims_give_verdicts_from_metrics():
    from memlab import paper

    t1 = {m: {"ΔF": 0.0, "Pre-F": 0.0, "Post-F": 0.0, "Pre-R": 90.0} for m in E.METHODS}
    t1["BadTeacher"].update({"ΔF": 70.0, "Pre-F": 20.0, "Post-F": 90.0})
    v = {d["key"]: d["verdict"] for d in paper.evaluate(E.claims(), {"table1": t1}, "cpu")}
    assert v["six_of_nine"] == paper.NOT_REPRODUCED and v["badteacher_flip"] == paper.REPRODUCED
    assert v["zero_rows"] == paper.REPRODUCED and v["vit_zero"] == paper.NOT_RUN


def test_paper_profile_path_at_toy_size(fake_data, monkeypatch):
    # The paper profile's structure (several seeds, CIFAR-100 OOD source, all methods, ViT control)
    # with toy sizes and the smoke profile's step counts.
    monkeypatch.setitem(E.METHOD_HPARAMS, "paper", E.METHOD_HPARAMS["smoke"])
    cfg = config.resolve(CH, "paper", width=2, train_per_class=12, test_per_class=6, eval_retain=20, epochs=1,
                         batch_size=16, n_seeds=2, budgets=[10, 20], recovery_b=10, lp_per_class=4,
                         relearn_samples=4, relearn_epochs=1, ga_steps_sweep=[1, 2], salun_mix_sweep=[0.0, 0.5],
                         vit_dim=12, vit_depth=1, methods=["Retrain", "GA", "SalUn", "BadTeacher", "NoiseInject"])
    data = E.load_data(cfg)
    assert data.ood_x.shape == (200, 3, 32, 32) and "CIFAR-100" in data.ood_note
    assert len(data.splits.forget_x) == 12 and len(data.test_forget_x) == 6
    assert not torch.isin(data.splits.forget_y, data.splits.retain_y).any()
    long, models = E.run_method_table(cfg, data)
    summ = E.summarise(long)
    assert set(summ.index) == {"Original", *cfg.methods} and "ΔF std" in summ.columns
    assert np.allclose(summ["ΔF"], summ["Post-F"] - summ["Pre-F"])
    assert summ.loc["Retrain", "ReAUC"] == 0.0 and summ.loc["Original", "ReAUC"] in (1.0,) or np.isnan(
        summ.loc["Original", "ReAUC"])
    sweep = E.budget_sweep(cfg, data, models)
    assert len(sweep) == 2 * 3 * 3 * 2 and sweep["forget_acc"].between(0, 100).all()
    gn = E.groupnorm_control(cfg, data)
    assert (gn["ΔF"] == 0).all() and "PGU" not in set(gn["method"])
    vit = E.vit_control(cfg, data)
    assert (vit["ΔF"] == 0).all() and vit["weights unchanged"].all()
    assert list(E.ga_step_sweep(cfg, data, cfg.seed).index) == [1, 2]
    assert list(E.salun_mix_sweep(cfg, data, cfg.seed).index) == [0.0, 0.5]
    mis = E.misalignment_profile(cfg, data, models)
    assert (mis.loc[mis["method"] == "BadTeacher", "before"] >= 0).all() and mis["layer"].max() == 19
