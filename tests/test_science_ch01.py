"""Science that chapter 1 uses, tested on its own: the patch shuffle of memlab.data.vision, the
correlation tests of memlab.science.metrics and the unlearning step loop of memlab.science.unlearning._common."""
import numpy as np
import pytest
import torch
from scipy import stats
from torch import nn

from memlab.data.vision import patch_shuffle
from memlab.science import metrics
from memlab.science.unlearning._common import index_stream, optimise_steps


def _tiles(img: torch.Tensor, patch: int) -> list:
    _, h, w = img.shape
    return sorted(img[:, r:r + patch, c:c + patch].flatten().tolist()
                  for r in range(0, h, patch) for c in range(0, w, patch))


def test_patch_shuffle_permutes_whole_tiles_per_image():
    x = torch.arange(2 * 3 * 32 * 32, dtype=torch.float32).view(2, 3, 32, 32)
    y = patch_shuffle(x, 8, seed=0)
    assert y.shape == x.shape and not torch.equal(x, y)
    for i in range(2):
        assert _tiles(x[i], 8) == _tiles(y[i], 8)  # the same 16 tiles (all channels), reordered
    assert torch.equal(patch_shuffle(x, 8, seed=0), y)  # deterministic for a seed
    assert not torch.equal(patch_shuffle(x, 8, seed=1), y)


def test_patch_shuffle_with_one_tile_is_the_identity():
    x = torch.randn(3, 2, 8, 8)
    assert torch.equal(patch_shuffle(x, 8), x)


def test_patch_shuffle_refuses_bad_input():
    x = torch.zeros(2, 3, 32, 32)
    with pytest.raises(ValueError, match="parameter 'patch'"):
        patch_shuffle(x, 5)
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        patch_shuffle(x[0], 8)


def test_correlation_tests_closed_forms():
    x = np.arange(10.0)
    lin = metrics.correlation_tests(x, 3 * x + 1)
    assert set(lin) == {"Pearson", "Spearman", "Kendall"}
    assert all(r == pytest.approx(1.0) for r, _ in lin.values())
    assert all(p < 1e-5 for _, p in lin.values())
    mono = metrics.correlation_tests(x, np.exp(x))  # monotone, not linear: the rank tests are exactly 1
    assert mono["Spearman"][0] == pytest.approx(1.0) and mono["Kendall"][0] == pytest.approx(1.0)
    assert mono["Pearson"][0] < 1.0
    anti = metrics.correlation_tests(x, -x)
    assert all(r == pytest.approx(-1.0) for r, _ in anti.values())


def test_correlation_tests_agree_with_scipy_and_are_nan_when_undefined():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=12), rng.normal(size=12)
    got = metrics.correlation_tests(x, y)
    for name, fn in (("Pearson", stats.pearsonr), ("Spearman", stats.spearmanr), ("Kendall", stats.kendalltau)):
        ref = fn(x, y)
        assert got[name] == (float(ref[0]), float(ref[1]))
    for a, b in ((x[:2], y[:2]), (np.ones(5), y[:5]), (x[:5], np.zeros(5))):
        assert all(np.isnan(r) and np.isnan(p) for r, p in metrics.correlation_tests(a, b).values())


def test_correlation_tests_refuse_bad_input():
    with pytest.raises(ValueError, match="pair up"):
        metrics.correlation_tests([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="1-D"):
        metrics.correlation_tests(np.ones((3, 2)), np.ones((3, 2)))
    with pytest.raises(ValueError, match="finite"):
        metrics.correlation_tests([1.0, np.nan, 3.0], [1.0, 2.0, 3.0])


def test_optimise_steps_is_plain_gradient_descent_on_a_quadratic():
    # loss = 0.5 * w^2 with SGD(lr) gives w_t = w_0 (1 - lr)^t.
    net = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        net.weight.fill_(2.0)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    seen = []
    batches = index_stream(4, 2, torch.Generator().manual_seed(0))
    out = optimise_steps(net, batches, opt, 5, lambda step, idx: 0.5 * (net.weight ** 2).sum(), desc="test",
                         on_step=lambda step, n: seen.append(step))
    assert out is net and not net.training
    assert float(net.weight.detach()) == pytest.approx(2.0 * 0.9 ** 5)
    assert seen == [1, 2, 3, 4, 5]


def test_optimise_steps_edits_gradients_before_each_step_and_passes_0_based_steps():
    net = nn.Linear(2, 1, bias=False)
    before = net.weight.detach().clone()
    opt = torch.optim.SGD(net.parameters(), lr=1.0)
    steps, drawn = [], []

    def loss_fn(step, idx):
        steps.append(step)
        drawn.append(idx)
        return net.weight.sum()

    def zero_second():  # a projection that keeps only the first coordinate's gradient
        net.weight.grad[:, 1] = 0.0

    optimise_steps(net, index_stream(3, 2, torch.Generator().manual_seed(0)), opt, 3, loss_fn, desc="test",
                   bn_mode="eval", edit_grads=zero_second)
    assert steps == [0, 1, 2] and [len(i) for i in drawn] == [2, 1, 2]
    w = net.weight.detach()
    assert float(w[0, 0]) == pytest.approx(float(before[0, 0]) - 3.0)
    assert float(w[0, 1]) == float(before[0, 1])
