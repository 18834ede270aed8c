"""The science chapter 6 moved into memlab.science.lenses: SDE on a forget set and membership AUCs."""
import numpy as np
import pytest

from memlab.science import lenses, metrics, sde


def _cloud(rng, n, d, scale):
    return rng.normal(0.0, scale, size=(n, d))


def _refs(seed=0, s=30, d=4):
    rng = np.random.default_rng(seed)
    return rng, _cloud(rng, s, d, 0.3), _cloud(rng, s, d, 2.0)


def test_sde_out_of_training_is_chapter_2s_decision_with_its_seeds():
    rng, ins, outs = _refs()
    targets = [_cloud(rng, 30, 4, 0.3), _cloud(rng, 30, 4, 2.0), _cloud(rng, 30, 4, 1.0)]
    got = lenses.sde_out_of_training(ins, outs, targets, n_shuffles=40, n_bins=20, seed=5)
    kw = dict(n_shuffles=40, sigma=2.0)  # sqrt(d) with d = 4
    h_in = sde.split_half_dependence(ins, seed=5, **kw)
    h_out = sde.split_half_dependence(outs, seed=6, **kw)
    want = [sde.decide(sde.split_half_dependence(t, seed=7 + i, **kw), h_in, h_out, n_bins=20)["out"]
            for i, t in enumerate(targets)]
    assert got.dtype == bool and got.shape == (3,)
    assert got.tolist() == want


def test_a_target_like_the_in_reference_is_in_and_one_like_the_out_reference_is_out():
    # the split-half HSIC of a subset grows with its kernel spread: a tight cloud and a wide one
    # give well-separated dependence distributions
    rng, ins, outs = _refs(seed=1)
    targets = np.stack([_cloud(rng, 30, 4, 0.3), _cloud(rng, 30, 4, 2.0)])  # a (n_targets, s, d) array works
    assert lenses.sde_out_of_training(ins, outs, targets, n_shuffles=50).tolist() == [False, True]


def test_sde_verdict_of_a_target_does_not_depend_on_the_targets_after_it():
    rng, ins, outs = _refs(seed=2)
    t0, t1 = _cloud(rng, 30, 4, 1.0), _cloud(rng, 30, 4, 0.5)
    one = lenses.sde_out_of_training(ins, outs, [t0], n_shuffles=30)
    two = lenses.sde_out_of_training(ins, outs, [t0, t1], n_shuffles=30)
    assert one[0] == two[0]


def test_sde_out_of_training_refuses_mismatched_shapes():
    _, ins, outs = _refs()
    with pytest.raises(ValueError, match="in_ref"):
        lenses.sde_out_of_training(ins, outs[:, :3], [ins])
    with pytest.raises(ValueError, match="targets"):
        lenses.sde_out_of_training(ins, outs, [ins[:, :2]])
    with pytest.raises(ValueError, match="targets"):
        lenses.sde_out_of_training(ins, outs, [])


def test_membership_aucs_of_separated_reversed_and_tied_scores():
    mem = {"a": [3.0, 4.0, 5.0], "b": [0.0, 0.0, 1.0], "c": [1.0, 1.0, 1.0]}
    non = {"a": [0.0, 1.0], "b": [2.0, 3.0], "c": [1.0, 1.0]}
    auc = lenses.membership_aucs(mem, non)
    assert list(auc) == ["a", "b", "c"]
    assert auc["a"] == pytest.approx(1.0) and auc["b"] == pytest.approx(0.0) and auc["c"] == pytest.approx(0.5)


def test_membership_aucs_match_roc_metrics_and_refuse_other_scores():
    rng = np.random.default_rng(0)
    m, n = rng.normal(1.0, 1.0, 20), rng.normal(0.0, 1.0, 15)
    want = metrics.roc_metrics(np.r_[m, n], np.r_[np.ones(20), np.zeros(15)])["auc"]
    assert lenses.membership_aucs({"Loss": m}, {"Loss": n})["Loss"] == pytest.approx(want, abs=0)
    with pytest.raises(ValueError, match="nonmember_scores"):
        lenses.membership_aucs({"Loss": m}, {"Min-K%": n})
