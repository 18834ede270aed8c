"""Tests of the science chapter 5 moved out of its package: memlab.science.capacity's data grid, noise and
law helpers, and the one optimiser step the language-model trainers share (memlab.models.train)."""

import math

import numpy as np
import pytest
import torch

from memlab.models.train import optimizer_step
from memlab.report import paper
from memlab.science import capacity as cap
from memlab.science import metrics

LAW = {c: paper.number("05_capacity", f"law_{c}") for c in ("c1", "c2", "c3")}


# ----------------------------------------------------------------------------- data grid


def test_samples_for_bits_is_the_fewest_sequences_reaching_the_target():
    h = cap.uniform_entropy_bits(16, 32)  # 80 bits a sequence
    assert cap.samples_for_bits(80.0, 16, 32) == 1
    assert cap.samples_for_bits(80.1, 16, 32) == 2
    assert cap.samples_for_bits(0.0, 16, 32) == 1  # never an empty data set
    for target in (1.0, 123.4, 1e6):
        n = cap.samples_for_bits(target, 16, 32)
        assert n * h >= target > (n - 1) * h or n == 1
    with pytest.raises(ValueError, match="target_bits"):
        cap.samples_for_bits(-1.0, 16, 32)
    with pytest.raises(ValueError, match="target_bits"):
        cap.samples_for_bits(float("nan"), 16, 32)


# ----------------------------------------------------------------------------- noise


def test_relative_half_width_is_the_bootstrap_band_of_the_total():
    rng = np.random.default_rng(0)
    per = rng.exponential(2.0, size=200)
    lo, hi = metrics.bootstrap_ci(per, stat=np.sum, n_boot=1000, seed=0)
    assert cap.relative_half_width(per) == pytest.approx((hi - lo) / 2 / per.sum())
    # scale invariant: the band is relative to the total
    assert cap.relative_half_width(10 * per) == pytest.approx(cap.relative_half_width(per))
    # about 1.96 * sd(sum) / sum for i.i.d. samples
    assert cap.relative_half_width(per) == pytest.approx(1.96 * per.std() * math.sqrt(200) / per.sum(), rel=0.15)
    assert cap.relative_half_width(np.full(10, 3.0)) == 0.0  # no spread, no band
    assert math.isnan(cap.relative_half_width(np.zeros(5)))
    assert math.isnan(cap.relative_half_width(np.ones(1)))
    with pytest.raises(ValueError, match="per_sample"):
        cap.relative_half_width(np.ones((2, 2)))


def test_fit_alpha_noise_is_zero_without_noise_and_grows_with_it():
    p = np.array([100.0, 200.0, 400.0])
    c = 3.6 * p
    none = cap.fit_alpha_noise(p, c, np.zeros(3))
    assert none["alpha_band"] == pytest.approx(0.0, abs=1e-12)
    small = cap.fit_alpha_noise(p, c, np.full(3, 0.01))
    big = cap.fit_alpha_noise(p, c, np.full(3, 0.10))
    assert 0 < small["alpha_band"] < big["alpha_band"]
    assert small["r2_band"] < big["r2_band"]
    # a common relative noise e moves alpha by about alpha * e (95%): the band is close to it
    assert big["alpha_band"] == pytest.approx(3.6 * 0.10, rel=0.35)
    nan = cap.fit_alpha_noise(p, c, np.array([np.nan, 0.01, 0.01]))  # NaN noise counts as none
    assert np.isfinite(nan["alpha_band"])
    assert cap.fit_alpha_noise(p, c, np.full(3, 0.05)) == cap.fit_alpha_noise(p, c, np.full(3, 0.05))
    with pytest.raises(ValueError, match="capacities"):
        cap.fit_alpha_noise(p, c[:2], np.zeros(3))


# ----------------------------------------------------------------------------- the law's constants


def test_the_law_takes_its_constants_from_the_caller():
    # the paper's constants as printed live in data/papers/05_capacity.yaml only
    assert LAW == {"c1": 1.34, "c2": -0.034, "c3": -33.14}
    assert not hasattr(cap, "C1")
    f1 = cap.membership_f1_law(1e6, 1e5, 64, 2048, **LAW)
    # closed form: 1/2 (1 + c1 sigmoid(c3 (|D|/|θ| + c2)))
    want = 0.5 * (1 + LAW["c1"] / (1 + math.exp(-LAW["c3"] * (0.1 + LAW["c2"]))))
    assert f1 == pytest.approx(want)
    assert cap.membership_f1_law(1.0, 0.5, 64, 2048, c1=1.0, c2=-0.5, c3=-4.0) == pytest.approx(0.75)
    with pytest.raises(TypeError):
        cap.membership_f1_law(1e6, 1e5, 64, 2048)  # no hidden default constants
    d = cap.law_dataset_size(1e6, 0.7, **LAW)
    assert cap.membership_f1_law(1e6, d, 64, 2048, **LAW) == pytest.approx(0.7)


def test_law_fit_start_does_not_change_a_clean_fit():
    x = np.linspace(0.05, 2.0, 25)
    y = 0.5 * (1 + 1.2 / (1 + np.exp(6.0 * (x - 0.5))))
    a = cap.fit_membership_law(x, y, c1_start=1.34)
    b = cap.fit_membership_law(x, y)
    assert a["rmse"] < 1e-4 and b["rmse"] < 1e-4
    assert (a["c1"], a["c2"], a["c3"]) == pytest.approx((b["c1"], b["c2"], b["c3"]), rel=1e-3)


# ----------------------------------------------------------------------------- the shared optimiser step


def _model_and_batch(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    return model, x, y


@pytest.mark.parametrize("max_norm", [1.0, 1e-3, None])
def test_optimizer_step_equals_the_written_out_step(max_norm):
    ref, x, y = _model_and_batch()
    new, _, _ = _model_and_batch()
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (ref, new)]
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0 / (s + 1)) for o in opts]
    for _ in range(3):
        loss = torch.nn.functional.cross_entropy(ref(x), y)
        opts[0].zero_grad(set_to_none=True)
        loss.backward()
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm)
        opts[0].step()
        scheds[0].step()
        optimizer_step(torch.nn.functional.cross_entropy(new(x), y), opts[1], scheds[1], new.parameters(), max_norm)
    for a, b in zip(ref.parameters(), new.parameters()):
        assert torch.equal(a, b)
    assert scheds[0].last_epoch == scheds[1].last_epoch == 3


def test_optimizer_step_uses_the_given_clip_and_refuses_bad_input():
    model, x, y = _model_and_batch()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    optimizer_step(torch.nn.functional.cross_entropy(model(x), y), opt, None, list(model.parameters()), 0.5,
                   clip=lambda ps, n: seen.append((len(ps), n)))
    assert seen == [(4, 0.5)]
    with pytest.raises(ValueError, match="loss"):
        optimizer_step(model(x).sum(1), opt, params=model.parameters())
    with pytest.raises(ValueError, match="params"):
        optimizer_step(torch.nn.functional.cross_entropy(model(x), y), opt)
