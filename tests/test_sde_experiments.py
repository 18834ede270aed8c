"""Tests of chapter 2's orchestration (the package memlab.experiments.ch02_sde) and its unlearning methods."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from memlab.core import config
from memlab.core.config import ConfigError
from memlab.experiments import ch02_sde as ex
from memlab.experiments.ch02_sde import stages
from memlab.models.resnet import resnet18
from memlab.science import probes
from memlab.science.unlearning import registry
from memlab.science.unlearning.sparsity import l1_coefficient, l1_norm
from memlab.science.unlearning.unroll import accumulate_forget_gradient, forget_gradient


def toy_splits(n_forget=12, n_retain=24, d=6, k=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return registry.Splits(torch.randn(n_forget, d, generator=g), torch.randint(0, k, (n_forget,), generator=g),
                           torch.randn(n_retain, d, generator=g), torch.randint(0, k, (n_retain,), generator=g), k)


def linear(d=6, k=3, seed=0):
    torch.manual_seed(seed)
    return nn.Linear(d, k)


# ----------------------------------------------------------------------------- configuration

def test_profiles_resolve_and_fit():
    for profile in config.PROFILES:
        cfg = config.resolve("02_sde", profile)
        assert len(cfg.subset_sizes) == len(cfg.holdout_fractions)


@pytest.mark.parametrize("override, name", [
    (dict(subset_sizes=[8, 10]), "subset_sizes"),
    (dict(subset_sizes=[8, 10, 500]), "subset_sizes"),
    (dict(feature="pixels"), "feature"),
    (dict(n_shuffles=0), "n_shuffles"),
    (dict(methods=["Retrain", "Magic"]), "methods"),
    (dict(size_sweep=[4, 1000]), "size_sweep"),
    (dict(subset_sizes=[2, 10, 12]), "subset_sizes"),
    (dict(augment=False), "augment"),  # the fastcnn recipe always shifts and flips
])
def test_bad_parameters_fail_before_work(override, name):
    with pytest.raises(ConfigError, match=name):
        config.resolve("02_sde", "smoke", **override)


# ----------------------------------------------------------------------------- outputs and subsets

def test_model_outputs_depths():
    model = resnet18(num_classes=10, width=2).eval()
    x = torch.randn(5, 3, 32, 32)
    dims = {"layer2": 4, "layer3": 8, "penultimate": 16, "logits": 10, "softmax": 10}
    for depth, d in dims.items():
        out = ex.model_outputs(model, x, depth, batch_size=2)
        assert out.shape == (5, d) and out.dtype == np.float64
    probs = ex.model_outputs(model, x, "softmax")
    np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-6)
    with torch.no_grad():
        np.testing.assert_allclose(ex.model_outputs(model, x, "logits"), model(x).double().numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="feature"):
        ex.model_outputs(model, x, "pixels")


def test_draw_subsets_respects_pools():
    pools = ex.Pools(in_pool=np.arange(0, 60), out_pool=np.arange(60, 80))
    s = ex.draw_subsets(pools, n_test=30, size=10, n_targets=4, rng=np.random.default_rng(0))
    assert s["in_targets"].shape == (4, 10) and s["out_targets"].shape == (4, 10)
    assert not set(s["in_ref"]) & set(s["in_targets"].ravel())
    assert set(s["in_targets"].ravel()) <= set(pools.in_pool)
    assert set(s["out_targets"].ravel()) <= set(pools.out_pool)
    assert s["out_ref"].max() < 30 and len(set(s["out_ref"])) == 10
    with pytest.raises(ValueError, match="size"):
        ex.draw_subsets(pools, n_test=30, size=21, n_targets=1, rng=np.random.default_rng(0))


def test_judge_targets_separates_tight_from_broad_outputs():
    # Seen samples: outputs pulled together; unseen (held-out and test): spread out.
    r = np.random.default_rng(1)
    train_out = np.concatenate([0.3 * r.normal(size=(120, 4)), 3.0 * r.normal(size=(40, 4))])
    test_out = 3.0 * r.normal(size=(60, 4))
    cfg = config.resolve("02_sde", "smoke", n_shuffles=40, n_targets=4)
    res = ex.classify(train_out, test_out, ex.Pools(np.arange(120), np.arange(120, 160)), 20, cfg)
    assert res["SDE"] == 1.0 and res["MMD"] == 1.0 and res["Wasserstein"] == 1.0
    assert res["raw"]["h_targets"].shape == (8, 40)
    assert set(res["band"]) == set(ex.DETECTORS) and all(0 <= b <= 1 for b in res["band"].values())


def test_f1_band_zero_for_perfect_and_wide_for_chance():
    labels = np.array([False] * 20 + [True] * 20)
    assert ex.f1_band(labels, labels) == 0.0
    coin = np.random.default_rng(0).random(40) < 0.5
    assert 0.1 < ex.f1_band(labels, coin) < 0.5
    # A paired band on identical verdicts is zero: the difference never moves.
    assert ex.f1_band(labels, coin, coin) == 0.0


def test_one_pass_outputs_match_single_depth_and_cache():
    model = resnet18(num_classes=10, width=2).eval()
    data = synthetic_data(n_per_class=2, n_test_per_class=1)
    tr, te = ex.all_outputs(model, data, "penultimate")
    assert tr.shape == (20, 16) and te.shape == (10, 16)
    np.testing.assert_allclose(ex.all_outputs(model, data, "layer3")[0],
                               ex.model_outputs(model, data.x_train, "layer3"), atol=1e-6)
    assert ex.all_outputs(model, data, "logits")[0] is ex.all_outputs(model, data, "logits")[0]
    with pytest.raises(ValueError, match="feature"):
        ex.all_outputs(model, data, "pixels")


def test_variant_detector_and_saturation_count():
    r = np.random.default_rng(3)
    train_out = np.concatenate([0.3 * r.normal(size=(120, 4)), 3.0 * r.normal(size=(40, 4))])
    test_out = 3.0 * r.normal(size=(60, 4))
    cfg = config.resolve("02_sde", "smoke", n_shuffles=30, n_targets=3)
    res = ex.classify(train_out, test_out, ex.Pools(np.arange(120), np.arange(120, 160)), 20, cfg,
                      ("SDE", ex.VARIANT))
    assert res["raw"][ex.VARIANT].shape == (6,) and res["raw"]["saturated"] == 0
    # sigma far below the outputs' spread: every kernel is ~I, all 8 subsets saturate.
    with pytest.warns(UserWarning, match="near-constant kernel matrices"):
        res = ex.classify(1e3 * train_out, 1e3 * test_out, ex.Pools(np.arange(120), np.arange(120, 160)), 20,
                          cfg, ("SDE",))
    assert res["raw"]["saturated"] == 8


def test_spread_analysis_identity_on_synthetic_outputs(monkeypatch):
    # The shuffle means of real subsets follow the identity and track the subsets' spread.
    r = np.random.default_rng(4)
    train_out = np.concatenate([0.5 * r.normal(size=(120, 4)), 2.0 * r.normal(size=(40, 4))])
    test_out = 2.0 * r.normal(size=(60, 4))
    data = synthetic_data(n_per_class=16, n_test_per_class=6)
    cfg = config.resolve("02_sde", "smoke", n_shuffles=400, n_targets=4, holdout_fractions=[0.2, 0.25, 0.3],
                         subset_sizes=[12, 12, 12], forget_fraction=0.25, size_sweep=[8])
    monkeypatch.setattr(stages, "holdout_split", lambda cfg, n, f: (np.arange(120, 160), np.arange(120)))
    monkeypatch.setattr(stages, "all_outputs", lambda model, data, feature: (train_out, test_out))
    df = ex.spread_analysis(cfg, data, None, 0.25, 12)
    assert len(df) == 2 * 4 + 2 and set(df["kind"]) == {"in-ref", "out-ref", "in-target", "out-target"}
    s = ex.identity_summary(df)
    assert s["share_within_3se"] >= 0.9 and s["pearson_spread"] > 0.8


def test_f1_positive_class_is_out():
    labels = np.array([False, False, True, True])
    assert ex.f1(np.array([False, False, True, True]), labels) == 1.0
    assert ex.f1(np.array([True, True, False, False]), labels) == 0.0


def test_mia_asr_direction():
    r = np.random.default_rng(2)
    k = 5
    y = r.integers(0, k, 200)
    confident = np.full((200, k), 0.01)
    confident[np.arange(200), y] = 1 - 0.01 * (k - 1)
    flat = r.dirichlet(np.ones(k), 200)
    assert probes.confidence_attack_asr(confident, y, flat, y, confident[:50], y[:50]) == 0.0
    assert probes.confidence_attack_asr(confident, y, flat, y, flat[:50], y[:50]) > 0.9


# ----------------------------------------------------------------------------- unlearning methods

def test_methods_registered():
    for name in ("RandLabel", "Unroll", "Sparsity"):
        assert registry.get(name).fn is not None
    assert registry.bn_mode("Unroll") == "eval"


def test_unroll_adds_scaled_forget_gradient_at_reference():
    splits = toy_splits()
    model, ref = linear(seed=0), linear(seed=1)
    cfg = {"lr": 0.1, "epochs": 3, "batch_size": 4, "reference_state": ref.state_dict()}
    out = registry.get("Unroll").fn(model, splits, cfg)
    ref.zero_grad()
    F.cross_entropy(ref(splits.forget_x), splits.forget_y, reduction="sum").backward()
    scale = 0.1 * 3 / 4
    np.testing.assert_allclose(out.weight.detach(), model.weight.detach() + scale * ref.weight.grad, atol=1e-6)
    np.testing.assert_allclose(out.bias.detach(), model.bias.detach() + scale * ref.bias.grad, atol=1e-6)
    # Batching does not change the summed gradient.
    g1 = forget_gradient(linear(seed=1), splits.forget_x, splits.forget_y, 5)
    g2 = forget_gradient(linear(seed=1), splits.forget_x, splits.forget_y, 100)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_unroll_adds_recorded_accumulated_contribution():
    splits = toy_splits()
    model, along = linear(seed=0), linear(seed=2)
    acc = {}
    for step in (0.1, 0.05):  # two "epochs" at different learning rates
        acc = accumulate_forget_gradient(along, splits.forget_x, splits.forget_y, step, 4, acc)
    along.zero_grad()
    F.cross_entropy(along(splits.forget_x), splits.forget_y, reduction="sum").backward()
    np.testing.assert_allclose(acc["weight"], 0.15 * along.weight.grad, atol=1e-6)
    out = registry.get("Unroll").fn(model, splits, {"accumulated": acc})
    np.testing.assert_allclose(out.weight.detach(), model.weight.detach() + acc["weight"], atol=1e-7)
    half = registry.get("Unroll").fn(model, splits, {"accumulated": acc, "scale": 0.5})
    np.testing.assert_allclose(half.weight.detach(), model.weight.detach() + 0.5 * acc["weight"], atol=1e-7)
    with pytest.raises(ValueError, match="lacks parameter"):
        registry.get("Unroll").fn(model, splits, {"accumulated": {"weight": acc["weight"]}})


def test_epoch_mean_lrs_follow_cosine():
    cfg = config.resolve("02_sde", "smoke", arch="resnet18", epochs=4, batch_size=10)
    lrs = ex.epoch_mean_lrs(cfg, 100)
    assert lrs.shape == (4,) and np.all(np.diff(lrs) < 0)
    # Mean of the cosine schedule over the run is half the peak learning rate.
    assert lrs.mean() == pytest.approx(cfg.lr / 2, rel=0.05)


def test_unroll_zero_lr_is_identity_and_original_untouched():
    splits = toy_splits()
    model = linear()
    before = [p.detach().clone() for p in model.parameters()]
    out = registry.get("Unroll").fn(model, splits, {"lr": 0.0})
    for a, b, c in zip(before, model.parameters(), out.parameters()):
        assert torch.equal(a, b) and torch.equal(a, c)


def test_sparsity_l1_decay_and_effect():
    assert l1_coefficient(0.5, 0, 10) == 0.5 and l1_coefficient(0.5, 5, 10) == 0.25
    splits = toy_splits()
    model = linear()
    strong = registry.get("Sparsity").fn(model, splits, {"steps": 30, "alpha": 0.05, "lr": 0.05,
                                                         "batch_size": 8, "weight_decay": 0.0})
    plain = registry.get("Sparsity").fn(model, splits, {"steps": 30, "alpha": 0.0, "lr": 0.05,
                                                        "batch_size": 8, "weight_decay": 0.0})
    assert float(l1_norm(strong).detach()) < float(l1_norm(plain).detach())


def test_randlabel_moves_forget_predictions_and_checks_keys():
    splits = toy_splits(n_forget=30, k=3)
    model = linear()
    torch.manual_seed(0)
    # Fit the forget labels first, so random relabelling has something to undo.
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(200):
        opt.zero_grad()
        F.cross_entropy(model(splits.forget_x), splits.forget_y).backward()
        opt.step()
    acc = lambda m: float((m(splits.forget_x).argmax(1) == splits.forget_y).float().mean())
    out = registry.get("RandLabel").fn(model, splits, {"steps": 100, "lr": 0.1, "batch_size": 8,
                                                       "retain_mix": 0.0})
    assert acc(out) < acc(model)
    with pytest.raises(ValueError, match="unknown hyperparameter"):
        registry.get("RandLabel").fn(model, splits, {"epochs": 1})
    with pytest.raises(ValueError, match="retain_mix"):
        registry.get("RandLabel").fn(model, splits, {"retain_mix": 1.0})


# ----------------------------------------------------------------------------- paper profile at toy size

def synthetic_data(n_per_class=20, n_test_per_class=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(10).repeat_interleave(n_per_class)
    yt = torch.arange(10).repeat_interleave(n_test_per_class)
    return ex.Data(torch.randn(len(y), 3, 32, 32, generator=g), y, torch.randn(len(yt), 3, 32, 32, generator=g), yt)


def test_paper_profile_structure_at_toy_size(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path))
    monkeypatch.setenv("MEMLAB_PROGRESS", "0")
    cfg = config.resolve("02_sde", "paper", n_per_class=20, n_test_per_class=6, width=2, epochs=2,
                         batch_size=64, subset_sizes=[4, 6, 8], size_sweep=[4, 8], n_targets=2,
                         n_shuffles=5, unlearn_steps=1)
    assert cfg.augment and cfg.feature == "logits"
    data = synthetic_data()
    controlled = ex.controlled_experiment(cfg, data)
    table = controlled["f1"]
    final, early = controlled["models"][0.2]
    sweep, sweep_band = ex.size_sweep(cfg, data, final, 0.2)
    assert list(sweep.index) == list(sweep_band.index) == [4, 8]
    bw = ex.bandwidth_ablation(cfg, data, final, 0.1, 6)
    assert list(bw.index) == cfg.bandwidth_mults and list(bw.columns) == ["SDE F1", "band", "saturated subsets"]
    assert list(ex.depth_ablation(cfg, data, final, 0.1, 6).index) == list(ex.FEATURES)
    e_f1, e_band = ex.early_check(cfg, data, early, 0.1, 6)
    assert 0.0 <= e_f1 <= 1.0 and e_band >= 0
    assert list(table.index) == list(ex.DETECTORS) and list(table.columns) == ["R=5%", "R=10%", "R=20%"]
    assert ((table >= 0) & (table <= 1)).all().all()
    models = ex.unlearn_all(cfg, data)
    assert list(models) == ["Original", *ex.METHODS]
    res = ex.evaluate_unlearning(cfg, data, models)
    assert ((res["table"]["OTR (%)"] >= 0) & (res["table"]["OTR (%)"] <= 100)).all()
    assert res["dists"]["Unroll"]["target"].shape == (5,)
    assert {"Acc_r recal. (%)", "OTR (%)", "ASR"} <= set(res["table"].columns)
    assert list(ex.regime(cfg, data).columns) == ["paper", "ours: Original", "ours: Retrain"]
    costs = ex.training_costs(cfg)
    assert {"R=0%", "R=10%"} <= set(costs.index) and (costs["CPU s"] > 0).all()
    # A second call returns the same objects; a fresh process would hit the disk cache: identical weights.
    assert ex.train_model(cfg, data, 0.1)[0] is models["Retrain"]
    ex._MODELS.clear()
    again = ex.train_model(cfg, data, 0.1)[0]
    for a, b in zip(again.state_dict().values(), models["Retrain"].state_dict().values()):
        assert torch.equal(a, b)
    fm = ex.feature_metrics(cfg, data, models, res["table"], "softmax")
    assert set(fm["variant_f1"]) == {"R=5%", "R=10%", "R=20%"} and "Unroll" in fm["table3"]


def fake_metrics(**changes):
    cols = ("R=5%", "R=10%", "R=20%")
    band = {d: {c: 0.02 for c in cols} for d in ex.DETECTORS}
    m = {
        "f1": {"SDE": {"R=5%": 0.9, "R=10%": 0.95, "R=20%": 1.0}, "MMD": {"R=5%": 0.6, "R=10%": 0.7, "R=20%": 0.8},
               "Wasserstein": {"R=5%": 0.7, "R=10%": 0.89, "R=20%": 0.9}},
        "f1_band": band, "beats_band": {c: 0.03 for c in cols},
        "main_column": "R=10%",
        "size_sweep": {"SDE": {"20": 0.6, "40": 0.8, "80": 0.9}},
        "size_band": {"SDE": {"20": 0.05, "40": 0.05, "80": 0.05}},
        "table3": {"Original": {"Acc_r (%)": 99.5, "Acc_r recal. (%)": 99.5},
                   "Retrain": {"OTR (%)": 87.0, "ASR": 0.30, "Acc_r (%)": 98.6, "Acc_r recal. (%)": 98.6},
                   "Unroll": {"OTR (%)": 3.0, "ASR": 0.31, "Acc_r (%)": 99.4, "Acc_r recal. (%)": 99.4}},
        "counts": {"targets": 50, "forget": 5000},
        "bandwidth": {"0.25": 0.7, "0.5": 0.9, "1.0": 0.95, "2.0": 0.92, "4.0": 0.8},
        "bandwidth_band": {"0.25": 0.02, "0.5": 0.02, "1.0": 0.02, "2.0": 0.02, "4.0": 0.02},
        "saturated": {"0.25": 3, "0.5": 0, "1.0": 0, "2.0": 0, "4.0": 0},
        "depth": {"layer2": 0.6, "layer3": 0.7, "penultimate": 0.9, "logits": 0.95, "softmax": 0.9},
        "depth_band": {"layer2": 0.05, "layer3": 0.05, "penultimate": 0.05, "logits": 0.05, "softmax": 0.05},
        "early_f1": 0.8, "early_band": 0.05,
        "identity": {"n_subsets": 42, "max_rel_err": 0.01, "share_within_3se": 1.0, "pearson_spread": 0.99},
    }
    m.update(changes)
    return m


def test_claims_on_paper_like_and_contrary_metrics():
    from memlab.report import paper

    good = paper.evaluate(ex.claims(), fake_metrics(), "cpu")
    assert all(v["verdict"] == paper.REPRODUCED for v in good), good
    bad = fake_metrics(
        table3={**fake_metrics()["table3"],
                "Retrain": {"OTR (%)": 60.0, "ASR": 0.30, "Acc_r (%)": 98.6, "Acc_r recal. (%)": 98.6},
                "Unroll": {"OTR (%)": 40.0, "ASR": 0.31, "Acc_r (%)": 99.0, "Acc_r recal. (%)": 99.0}},
        size_sweep={"SDE": {"20": 0.5, "40": 0.3, "80": 0.95}}, early_f1=0.5)
    verdicts = {v["key"]: v["verdict"] for v in paper.evaluate(ex.claims(), bad, "cpu")}
    assert verdicts["unroll"] == verdicts["size"] == verdicts["early"] == paper.NOT_REPRODUCED
    assert all(v["verdict"] == paper.NOT_RUN for v in paper.evaluate(ex.claims(), fake_metrics(), "smoke"))
    kinds = {v["key"]: v["kind"] for v in good}
    assert kinds["spread_identity"] == paper.SANITY and kinds["controlled"] == paper.CLAIM


def test_claims_inside_noise_and_failed_preconditions_are_not_judged():
    from memlab.report import paper

    t3 = fake_metrics()["table3"]
    wrecked = {**t3, "Unroll": {**t3["Unroll"], "Acc_r (%)": 30.0, "Acc_r recal. (%)": 60.0}}
    noisy = fake_metrics(
        f1={**fake_metrics()["f1"], "SDE": {"R=5%": 0.82, "R=10%": 0.95, "R=20%": 1.0}},
        f1_band={d: {c: 0.1 for c in ("R=5%", "R=10%", "R=20%")} for d in ex.DETECTORS},
        early_f1=0.72, early_band=0.1, table3=wrecked)
    verdicts = {v["key"]: v for v in paper.evaluate(ex.claims(), noisy, "cpu")}
    for key in ("controlled", "early", "unroll"):
        assert verdicts[key]["verdict"] == paper.NOT_JUDGED, verdicts[key]
    assert "inside the noise band" in verdicts["controlled"]["evidence"]
    assert "does not keep accuracy" in verdicts["unroll"]["evidence"]
    assert "\u00b1" in verdicts["early"]["evidence"]


def test_the_original_asked_for_as_r_0_or_0_0_is_one_model_trained_once():
    """The regime table asks train_model(cfg, data, 0.0) and unlearning asks (cfg, data, 0): one key."""
    import json

    cfg = config.resolve("02_sde", "smoke")
    key = lambda r: json.dumps(stages._train_key(cfg, r), sort_keys=True)  # noqa: E731 - as the cache hashes it
    assert key(0) == key(0.0)  # ({"holdout": 0} == {"holdout": 0.0} in Python, but not serialised)
    assert key(0.1) != key(0.0)
