"""Chapter 1 experiment code: parameter checks, metric definitions, and the paper-profile path at toy size."""
import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from memlab.core import config
from memlab.core.config import ConfigError
from memlab.data import vision
from memlab.experiments import ch01_bn_illusion as E
from memlab.experiments.ch01_bn_illusion.claims import _band
from memlab.science import probes

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
    (dict(recovery_b=10000), "budgets"),
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
    assert (p.arch, p.width, p.n_seeds, p.epochs, p.ood_source, max(p.budgets)) == \
        ("resnet18", 64, 3, 182, "cifar100", 9000)
    assert E.method_hparams(p, "SalUn", 0) == {"seed": 0}  # module DEFAULTS = reference values
    c = config.resolve(CH, "cpu")
    assert set(c.methods) == set(E.METHODS) and (c.arch, c.train_per_class) == ("fastcnn", 5000)
    # the paper's schedules where a regime gate reads them: GA's 500 steps, relearning's 50 epochs
    assert E.method_hparams(c, "GA", 0) == {"seed": 0} and c.relearn_epochs == 50 and max(c.ga_steps_sweep) == 500


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


SIZES = {"forget_test": 250, "eval_retain": 300, "test": 2500}


def _row(pre, post, pre_r=90.0):
    return {"Pre-F": pre, "Post-F": post, "ΔF": post - pre, "Pre-R": pre_r}


def _verdicts(**metrics):
    from memlab.report import paper

    out = paper.evaluate(E.claims(), {"sizes": SIZES, **metrics}, "cpu")
    return {d["key"]: d for d in out}


def _table1(**rows):
    # The Original at 100%/100%: its own ΔF is 0 with no binomial noise, so the zero-gap rows'
    # excess over it (claims._excess) is their ΔF.
    t1 = {"Original": _row(100.0, 100.0), **{m: _row(0.0, 0.0) for m in E.METHODS}}
    t1["GA+FT"] = _row(60.0, 60.0)
    t1["GA+FT"]["Flips-F"] = 0.0  # no image changes: ΔF = 0 exactly, paired band 0
    t1.update(rows)
    return t1


def test_claims_give_verdicts_from_metrics():
    from memlab.report import paper

    v = _verdicts(table1=_table1(BadTeacher=_row(20.0, 90.0)))
    assert v["six_of_nine"]["verdict"] == paper.NOT_REPRODUCED
    assert v["badteacher_flip"]["verdict"] == paper.REPRODUCED and "noise band" in v["badteacher_flip"]["evidence"]
    assert v["zero_rows"]["verdict"] == paper.REPRODUCED and v["vit_zero"]["verdict"] == paper.NOT_RUN


def test_construction_true_checks_are_sanity_checks():
    from memlab.report import paper

    kinds = {c.key: c.sanity for c in E.claims()}
    assert {k for k, s in kinds.items() if s} == {"weights_fixed", "groupnorm_zero", "vit_zero"}
    gn = {m: {"ΔF": 0.0, "ReAUC": 0.97} for m in ["Original", "Retrain", "GA", "SalUn"]}
    v = _verdicts(gn_table=gn)
    assert v["groupnorm_zero"]["kind"] == paper.SANITY and v["groupnorm_zero"]["verdict"] == paper.REPRODUCED
    assert v["groupnorm_reauc"]["kind"] == paper.CLAIM and v["groupnorm_reauc"]["verdict"] == paper.REPRODUCED
    gn_low = {m: dict(r, ReAUC=0.6) for m, r in gn.items()}  # below the paper's 0.95, no spread
    assert _verdicts(gn_table=gn_low)["groupnorm_reauc"]["verdict"] == paper.NOT_REPRODUCED


def test_band_is_the_binomial_band_of_250_images():
    from memlab.science import metrics

    m = {"sizes": SIZES}
    assert _band(m, (60.0, 50.0)) == pytest.approx(100 * metrics.diff_band(0.6, 250, 0.5, 250))
    assert _band(m, (50.0, 50.0), (50.0, 50.0)) == pytest.approx(
        np.sqrt(2) * 100 * metrics.diff_band(0.5, 250, 0.5, 250))


def test_six_of_nine_counts_the_threshold_and_its_noise():
    from memlab.report import paper

    big = {k: _row(5.0, 5.0 + 40.0) for k in E.NINE[:6]}  # six clear gaps of 40 pp
    assert _verdicts(table1=_table1(**big))["six_of_nine"]["verdict"] == paper.REPRODUCED
    assert _verdicts(table1=_table1(**dict(big, **{E.NINE[5]: _row(0.0, 26.0)})))["six_of_nine"][
        "verdict"] == paper.REPRODUCED  # 7.1 pp past 18.9, band ±5.4 pp
    near = dict(big, **{E.NINE[5]: _row(5.0, 5.0 + 19.9)})  # the sixth 1 pp past 18.9
    v = _verdicts(table1=_table1(**near))["six_of_nine"]
    assert v["verdict"] == paper.NOT_JUDGED and "inside the noise band" in v["evidence"]
    clear_low = dict(big, **{E.NINE[5]: _row(0.0, 11.0)})  # sixth at 11 pp, band ±3.9 pp
    assert _verdicts(table1=_table1(**clear_low))["six_of_nine"]["verdict"] == paper.NOT_REPRODUCED


def test_badteacher_flip_inside_noise_is_not_judged():
    from memlab.report import paper

    # The audited case: BadTeacher ahead by 0.8 pp (2 of 250 images).
    v = _verdicts(table1=_table1(BadTeacher=_row(5.0, 55.8), SalUn=_row(5.0, 55.0)))["badteacher_flip"]
    assert v["verdict"] == paper.NOT_JUDGED and "±" in v["evidence"]
    v = _verdicts(table1=_table1(BadTeacher=_row(5.0, 35.0), SalUn=_row(5.0, 75.0)))["badteacher_flip"]
    assert v["verdict"] == paper.NOT_REPRODUCED


def test_zero_rows_skips_a_row_at_the_floor_that_the_paper_has_above_it():
    from memlab.report import paper

    v = _verdicts(table1=_table1(**{"GA+FT": _row(0.0, 0.0)}))["zero_rows"]
    assert v["verdict"] == paper.REPRODUCED and "GA+FT not judged" in v["evidence"]
    # SCRUB is at the floor in the paper too: a hidden gap there is judged and fails (8 pp,
    # band ±3.4 pp on 250 images); one image of 250 (0.4 pp, band ±0.8 pp) is no gap.
    assert _verdicts(table1=_table1(SCRUB=_row(0.0, 8.0)))["zero_rows"]["verdict"] == paper.NOT_REPRODUCED
    assert _verdicts(table1=_table1(SCRUB=_row(0.0, 0.4)))["zero_rows"]["verdict"] == paper.REPRODUCED
    # 2.5 pp: past the 2 pp tolerance by less than its band (±1.9 pp): not judged
    assert _verdicts(table1=_table1(SCRUB=_row(0.0, 2.5)))["zero_rows"]["verdict"] == paper.NOT_JUDGED


def test_pre_r_separates_only_among_the_zero_gap_rows():
    from memlab.report import paper

    t1 = _table1(GA=_row(0.0, 0.0, 30.0), SalUn=_row(5.0, 60.0, 20.0))  # SalUn lower, but not a zero row
    v = _verdicts(table1=t1)["pre_r_separates"]
    assert v["verdict"] == paper.REPRODUCED and "SalUn" not in v["evidence"]
    t1["GA"]["Pre-R"] = 88.0  # 2 pp below the others on 300 images: inside the band (~5 pp)
    assert _verdicts(table1=t1)["pre_r_separates"]["verdict"] == paper.NOT_JUDGED
    t1["SCRUB"]["Pre-R"] = 60.0  # SCRUB clearly below GA
    assert _verdicts(table1=t1)["pre_r_separates"]["verdict"] == paper.NOT_REPRODUCED


def test_ten_images_needs_a_full_gap_to_judge_recovery():
    from memlab.report import paper

    t1 = _table1(BadTeacher=_row(5.0, 65.0), NoiseInject=_row(50.0, 51.6))  # NoiseInject: 1.6 pp gap
    v = _verdicts(table1=t1, recovery_b10_test={"BadTeacher": 60.0, "NoiseInject": 50.0})["ten_images"]
    assert v["verdict"] == paper.REPRODUCED and "NoiseInject" in v["evidence"] and "not judged" in v["evidence"]
    v = _verdicts(table1=t1, recovery_b10_test={"BadTeacher": 10.0, "NoiseInject": 50.0})["ten_images"]
    assert v["verdict"] == paper.NOT_REPRODUCED
    t1["BadTeacher"] = _row(5.0, 5.0 + 17.9)  # below the 18.9 pp precondition as well
    v = _verdicts(table1=t1, recovery_b10_test={"BadTeacher": 20.0, "NoiseInject": 50.0})["ten_images"]
    assert v["verdict"] == paper.NOT_JUDGED


def _table2(bn, nc, lp=45.0):
    lp_cal = lp - bn
    return {"LP": lp, "LP (recal)": lp_cal, "BN-residual": bn, "NC-residual": nc, "LP - LP_retrain": bn + nc}


def test_no_sign_flip_within_noise_is_not_judged():
    from memlab.report import paper

    # The audited case: residuals of about ±5.6 pp where the band on 250 images is about ±8.7 pp.
    v = _verdicts(table2={"SalUn": _table2(5.6, -5.6), "GA": _table2(-20.0, 3.0)})["no_sign_flip"]
    assert v["verdict"] == paper.NOT_JUDGED and "SalUn" in v["evidence"] and "±" in v["evidence"]
    v = _verdicts(table2={"SalUn": _table2(20.0, -20.0), "GA": _table2(-20.0, 3.0)})["no_sign_flip"]
    assert v["verdict"] == paper.NOT_REPRODUCED
    v = _verdicts(table2={"SalUn": _table2(-20.0, 20.0), "GA": _table2(-20.0, 3.0)})["no_sign_flip"]
    assert v["verdict"] == paper.REPRODUCED


def test_salun_mix_needs_a_gap_at_share_zero():
    from memlab.report import paper

    q = {"0.0": _row(5.0, 60.0), "0.25": _row(5.0, 6.0), "0.5": _row(5.0, 5.0)}
    assert _verdicts(appendix_q=q)["salun_mix"]["verdict"] == paper.REPRODUCED
    q["0.0"] = _row(5.0, 5.0 + 16.9)  # below the 18.9 pp precondition
    assert _verdicts(appendix_q=q)["salun_mix"]["verdict"] == paper.NOT_JUDGED
    q["0.0"], q["0.25"] = _row(5.0, 60.0), _row(5.0, 35.0)
    assert _verdicts(appendix_q=q)["salun_mix"]["verdict"] == paper.NOT_REPRODUCED


def test_ga_steps_shrinkage_inside_noise_is_not_judged():
    from memlab.report import paper

    h = {"10": _row(10.0, 50.0), "40": _row(0.0, 0.4)}
    assert _verdicts(table1=_table1(), appendix_h=h)["ga_steps"]["verdict"] == paper.REPRODUCED
    h["10"] = _row(0.0, 2.0)  # shrinks by 1.6 pp, band ±1.9 pp on 250 images
    assert _verdicts(table1=_table1(), appendix_h=h)["ga_steps"]["verdict"] == paper.NOT_JUDGED


@pytest.mark.slow  # an end-to-end run: left out of the ISA legs (scripts/test.sh)
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
