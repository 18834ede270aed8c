"""Unit tests of memlab.mia: Q-Skew, Min-K%++, the cyclic sampler and bad input."""
import numpy as np
import pytest
import torch
from scipy import stats

from memlab import mia


def _samples(kind: str, n: int = 4000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "right":
        return rng.exponential(1.0, n)
    if kind == "left":
        return -rng.exponential(1.0, n)
    return rng.normal(0.0, 1.0, n)


def test_qskew_sign_follows_skew():
    assert mia.qskew(_samples("right")) > 0.3
    assert mia.qskew(_samples("left")) < -0.3
    assert abs(mia.qskew(_samples("sym"))) < 0.1


def test_qskew_symmetric_sample_is_exactly_zero():
    # A sample symmetric about its median has mirrored ranks, hence mirrored weights.
    x = np.array([-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0])
    assert mia.qskew(x) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("shift,scale", [(5.0, 1.0), (-2.0, 3.0), (0.0, 0.01)])
def test_qskew_invariant_to_shift_and_positive_scale(shift, scale):
    x = _samples("right", 300, seed=1)
    assert mia.qskew(shift + scale * x) == pytest.approx(mia.qskew(x), rel=1e-9)
    assert mia.qskew(-x) == pytest.approx(-mia.qskew(x), rel=1e-9)


def test_qskew_matches_written_formula():
    x = np.array([0.1, 0.4, 0.2, 2.5, -0.3, 0.0, 1.1, 0.7])
    h = 0.1
    f = (stats.rankdata(x) - 0.5) / x.size
    w = np.exp(-(f - 0.15) ** 2 / (2 * h * h)) + np.exp(-(f - 0.85) ** 2 / (2 * h * h))
    expected = np.mean(w / w.mean() * 3 * (x - np.median(x)) / x.std())
    assert mia.qskew(x, h=h) == pytest.approx(expected, rel=1e-12)


def test_median_skew_and_weighted_mean_reference():
    x = _samples("right", 200, seed=2)
    assert mia.median_skew(x) == pytest.approx(3 * (x.mean() - np.median(x)) / x.std())
    # Constant weights in the limit of a huge bandwidth: weighted mean -> plain mean.
    assert mia.weighted_mean(x, h=1e6) == pytest.approx(x.mean(), rel=1e-6)


def test_min_k_plus_plus_matches_direct_formula():
    probs = np.array([[0.7, 0.2, 0.1], [0.25, 0.25, 0.5], [0.05, 0.9, 0.05], [0.4, 0.3, 0.3], [1 / 3, 1 / 3, 1 / 3]])
    tokens = np.array([0, 2, 0, 1, 2])
    logp = np.log(probs)
    z = []
    for p, lp, t in zip(probs, logp, tokens):
        mu = np.sum(p * lp)
        sigma = np.sqrt(max(np.sum(p * lp ** 2) - mu ** 2, 0))
        z.append((lp[t] - mu) / max(sigma, 1e-6))
    z = np.sort(z)
    assert mia.min_k_plus_plus(logp, tokens, k=0.4) == pytest.approx(z[:2].mean(), rel=1e-9)
    # k * L < 1 still keeps one token; the uniform row (sigma = 0) stays finite.
    assert mia.min_k_plus_plus(logp, tokens, k=0.1) == pytest.approx(z[0], rel=1e-9)


def test_min_k_takes_worst_tokens():
    nll = np.array([0.1, 5.0, 0.2, 3.0, np.nan, 0.3, 0.4, 0.5, 0.6, 0.7])
    assert mia.min_k(nll, k=0.25) == pytest.approx(-(5.0 + 3.0) / 2)


def test_cyclic_sampler_covers_each_position_once_per_round():
    eligible = torch.tensor([False, True, True, True, True, True, True, True, True, True, False, True])
    masks = mia.cyclic_masks(eligible, rho=0.35, rounds=4, generator=torch.Generator().manual_seed(0))
    c = round(1 / 0.35)
    assert masks.shape == (4 * c, eligible.numel())
    per_round = masks.view(4, c, -1).sum(1)
    assert torch.equal(per_round, eligible.long().expand(4, -1))
    sizes = masks.sum(1)
    assert sizes.max() - sizes.min() <= 1  # batches of about rho * n tokens
    assert not masks[:, ~eligible].any()


def test_secmi_masks_deterministic_and_nested():
    e = torch.ones(20, dtype=torch.bool)
    a, b = mia.secmi_masks(e, (0.2, 0.5, 0.8)), mia.secmi_masks(e, (0.2, 0.5, 0.8))
    assert torch.equal(a, b)
    assert a.sum(1).tolist() == [4, 10, 16]
    assert (a[0] <= a[1]).all() and (a[1] <= a[2]).all()


def test_sama_vote_extremes():
    rng = np.random.default_rng(0)
    t, r = np.zeros(10), np.ones(10)
    assert mia.sama_vote(t, r, 4, 32, rng) == 1.0
    assert mia.sama_vote(r, t, 4, 32, rng) == 0.0


@pytest.mark.parametrize("rho", [0.0, 1.0, -0.1, 1.5])
def test_bad_rho(rho):
    with pytest.raises(ValueError, match="rho"):
        mia.cyclic_masks(torch.ones(8, dtype=torch.bool), rho, 1, torch.Generator())


@pytest.mark.parametrize("h", [0.0, -1.0, float("nan")])
def test_bad_h(h):
    with pytest.raises(ValueError, match="'h'"):
        mia.qskew(np.arange(5.0), h=h)


def test_too_short_sequence():
    with pytest.raises(ValueError, match="at least two"):
        mia.cyclic_masks(torch.tensor([True, False, False]), 0.35, 1, torch.Generator())
    with pytest.raises(ValueError, match="at least two"):
        mia.qskew([1.0])


def test_unknown_score_name():
    with pytest.raises(ValueError, match="unknown score 'zlib'"):
        mia.check_score_names(["loss", "zlib"])


def test_cyclic_sampler_short_sequence_keeps_pattern_count():
    e = torch.tensor([True, True, False, False])
    masks = mia.cyclic_masks(e, rho=0.35, rounds=2, generator=torch.Generator().manual_seed(1))
    assert masks.shape == (6, 4)  # same count as for long sequences, so probes stack
    assert torch.equal(masks.view(2, 3, 4).sum(1), e.long().expand(2, -1))


def test_probe_scores_agree_with_direct_deltas():
    from memlab.models import diffusion_lm as dlm

    torch.manual_seed(0)
    arch = dlm.DLMConfig(vocab_size=30, mask_id=29, block_size=10, n_layer=1, n_head=1, n_embd=8)
    target, ref = dlm.MaskedDiffusionLM(arch).eval(), dlm.MaskedDiffusionLM(arch).eval()
    ids = torch.randint(0, 29, (3, 10))
    probe = mia.make_probe(torch.ones(3, 10, dtype=torch.bool), rounds=2, sama_steps=2, seed=0)
    tv, rv = mia.model_view(target, ids, probe), mia.model_view(ref, ids, probe)
    out = mia.compute_scores(tv, rv, probe, ["qskew", "calibration", "loss"])
    for i in range(3):
        d = []
        for m in probe.cyclic[i]:
            t = dlm.masked_nll(target, ids[i:i + 1], m[None])[0]
            r = dlm.masked_nll(ref, ids[i:i + 1], m[None])[0]
            d.append((r - t)[m])
        d = torch.cat(d).numpy()
        assert out["qskew"][i] == pytest.approx(mia.qskew(d), rel=1e-5)
        assert out["calibration"][i] == pytest.approx(d.mean(), rel=1e-5, abs=1e-7)
