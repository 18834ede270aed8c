"""Unit tests of memlab.science.sde: HSIC closed forms, the vectorised shuffles, the decision, the baselines."""
import numpy as np
import pytest
from scipy.spatial.distance import cdist

from memlab.science import sde


def rng(seed=0):
    return np.random.default_rng(seed)


def trace_hsic(x, y, sx, sy):
    """Direct textbook formula: trace(K H L H) / (n-1)^2 with an explicit centring matrix."""
    n = len(x)
    k = np.exp(-cdist(x, x, "sqeuclidean") / (2 * sx**2))
    l = np.exp(-cdist(y, y, "sqeuclidean") / (2 * sy**2))
    h = np.eye(n) - np.ones((n, n)) / n
    return np.trace(k @ h @ l @ h) / (n - 1) ** 2


def test_hsic_matches_trace_formula():
    x, y = rng(0).normal(size=(30, 5)), rng(1).normal(size=(30, 3))
    assert sde.hsic(x, y) == pytest.approx(trace_hsic(x, y, np.sqrt(5), np.sqrt(3)), rel=1e-10)
    assert sde.hsic(x, y, 0.7, 2.0) == pytest.approx(trace_hsic(x, y, 0.7, 2.0), rel=1e-10)


def test_hsic_two_far_clusters_closed_form():
    # K = L = blockdiag(1_2x1_2): HKH = K - 1/2, so trace(KHLH) = 8 * 1/2 = 4, HSIC = 4 / 3^2.
    x = np.array([[0.0], [0.0], [100.0], [100.0]])
    assert sde.hsic(x, x, 1.0, 1.0) == pytest.approx(4 / 9, abs=1e-12)


def test_hsic_constant_input_is_zero_and_independent_is_small():
    x = rng(0).normal(size=(200, 4))
    assert sde.hsic(x, np.ones((200, 2))) == pytest.approx(0.0, abs=1e-15)
    dep = sde.hsic(x, x)
    indep = sde.hsic(x, rng(1).normal(size=(200, 4)))
    assert indep >= 0 and dep > 20 * indep


def test_hsic_invariant_to_joint_permutation_not_to_single():
    x, y = rng(0).normal(size=(40, 3)), None
    y = x + 0.1 * rng(1).normal(size=(40, 3))
    p = rng(2).permutation(40)
    assert sde.hsic(x[p], y[p]) == pytest.approx(sde.hsic(x, y), rel=1e-12)
    assert sde.hsic(x, y[p]) < 0.5 * sde.hsic(x, y)


def test_split_half_matches_loop_reference():
    x = rng(3).normal(size=(41, 7))  # odd n: one sample dropped
    fast = sde.split_half_dependence(x, n_shuffles=37, seed=5)
    slow = sde.split_half_dependence_loop(x, n_shuffles=37, seed=5)
    assert fast.shape == (37,)
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(fast, sde.split_half_dependence(x, n_shuffles=37, seed=5))
    assert not np.allclose(fast, sde.split_half_dependence(x, n_shuffles=37, seed=6))


def test_shuffle_products_torch_path_matches_numpy_path():
    # the batched torch path a GPU run takes (forced here on the CPU) against the NumPy loop;
    # 70 permutations of m = 33
    x = rng(6).normal(size=(66, 4))
    k, l = sde.center(sde.rbf_kernel(x[:33], 2.0)), sde.center(sde.rbf_kernel(x[33:], 2.0))
    perms = np.stack([rng(7 + i).permutation(33) for i in range(70)])
    ref = sde.shuffle_products(k, l, perms)
    np.testing.assert_allclose(sde.shuffle_products(k, l, perms, device="cpu"), ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(ref, [np.sum(k * l[p][:, p]) for p in perms], rtol=1e-12)


def test_mmd_torch_path_matches_numpy_path():
    x, y = rng(8).normal(size=(30, 5)), rng(9).normal(loc=0.5, size=(25, 5))
    assert sde.mmd2(x, y, device="cpu") == pytest.approx(sde.mmd2(x, y), rel=1e-12)
    assert sde.mmd2(x, y, 0.8, device="cpu") == pytest.approx(sde.mmd2(x, y, 0.8), rel=1e-12)


def test_split_half_values_are_hsic_of_halves():
    x = rng(4).normal(size=(20, 3))
    vals = sde.split_half_dependence(x, n_shuffles=5, seed=1, sigma=1.3)
    # Every shuffle value is an HSIC between the first half and a re-ordering of the second.
    r = np.random.default_rng(1)
    a, b = sde.split_halves(20, int(r.integers(2**32)))
    perms = [r.permutation(10) for _ in range(5)]
    expect = [sde.hsic(x[a], x[b][p], 1.3, 1.3) for p in perms]
    np.testing.assert_allclose(vals, expect, rtol=1e-10)


def test_decide_picks_nearer_reference():
    r = rng(5)
    in_ref, out_ref = r.normal(1.0, 0.1, 200), r.normal(0.0, 0.1, 200)
    assert sde.decide(r.normal(0.02, 0.1, 200), in_ref, out_ref)["out"]
    assert not sde.decide(r.normal(0.98, 0.1, 200), in_ref, out_ref)["out"]
    # Disjoint from both references: both JSDs saturate at 1 bit; the nearer median decides.
    far = sde.decide(np.full(200, 0.4), in_ref, out_ref)
    assert far["jsd_out"] == pytest.approx(1.0) and far["jsd_in"] == pytest.approx(1.0) and far["out"]


def test_js_divergence_bounds():
    edges = np.linspace(0, 1, 11)
    a = rng(0).uniform(0, 0.5, 100)
    assert sde.js_divergence(a, a, edges) == pytest.approx(0.0, abs=1e-12)
    assert sde.js_divergence(a, a + 0.5, edges) == pytest.approx(1.0)


def test_mmd_and_wasserstein_closed_forms():
    x = rng(6).normal(size=(50, 4))
    assert sde.mmd2(x, x) == pytest.approx(0.0, abs=1e-12)
    c = np.array([3.0, 0.0, 4.0, 0.0])
    assert sde.wasserstein(x, x + c) == pytest.approx(5.0, rel=1e-9)
    y = rng(7).normal(size=(30, 4)) + 1.0
    k = lambda a, b: np.exp(-cdist(a, b, "sqeuclidean") / (2 * 4))
    ref = k(x, x).mean() + k(y, y).mean() - 2 * k(x, y).mean()
    assert sde.mmd2(x, y) == pytest.approx(ref, rel=1e-10)


def test_distance_test_direction():
    r = rng(8)
    in_ref, out_ref = r.normal(size=(40, 3)) + 5, r.normal(size=(40, 3))
    for metric in ("mmd", "wasserstein"):
        assert sde.distance_test(r.normal(size=(40, 3)), in_ref, out_ref, metric)["out"]
        assert not sde.distance_test(r.normal(size=(40, 3)) + 5, in_ref, out_ref, metric)["out"]


def test_sde_test_on_synthetic_shared_component():
    # Subsets sharing a common component (like trained-on outputs pulled toward one
    # solution) differ in dependence distribution from a broad one; a target drawn
    # like out_ref is judged out.
    r = rng(9)
    tight = lambda: r.normal(size=(60, 4)) * 0.3
    broad = lambda: r.normal(size=(60, 4)) * 3.0
    res = sde.sde_test(broad(), tight(), broad(), n_shuffles=50)
    assert res["out"] and res["h_target"].shape == (50,)
    assert not sde.sde_test(tight(), tight(), broad(), n_shuffles=50)["out"]


@pytest.mark.parametrize("bad, msg", [
    (np.full((10, 3), np.nan), "NaN or infinite"),
    (np.array([[np.inf, 0.0]] * 10), "NaN or infinite"),
    (np.zeros((3, 2)), "at least 4"),
    (np.zeros((2, 2, 2)), "2-D"),
])
def test_bad_features(bad, msg):
    with pytest.raises(ValueError, match=msg):
        sde.split_half_dependence(bad)
    with pytest.raises(ValueError, match=msg):
        sde.hsic(bad, bad)


def test_bad_arguments():
    x = rng(0).normal(size=(10, 2))
    with pytest.raises(ValueError, match="n_shuffles"):
        sde.split_half_dependence(x, n_shuffles=0)
    with pytest.raises(ValueError, match="sigma"):
        sde.split_half_dependence(x, sigma=-1.0)
    with pytest.raises(ValueError, match="same size"):
        sde.sde_test(x, x[:8], x)
    with pytest.raises(ValueError, match="same number"):
        sde.hsic(x, x[:8])
    with pytest.raises(ValueError, match="same size"):
        sde.wasserstein(x, x[:8])
    with pytest.raises(ValueError, match="metric"):
        sde.distance_test(x, x, x, "kl")


# ----------------------------------------------------------------------------- what the statistic measures

def test_shuffle_mean_identity_exhaustive_tiny_case():
    # m = 6: average HSIC over all 720 re-orderings of the second half equals
    # tr(HKH) tr(HLH) / (m-1)^3 to rounding error.
    import itertools

    x = rng(11).normal(size=(12, 3))
    k, l = sde.split_half_kernels(x, seed=4, sigma=1.1)
    m = len(k)
    kc, lc = sde.center(k), sde.center(l)
    vals = [np.vdot(kc, lc[np.ix_(p, p)]) / (m - 1) ** 2 for p in map(list, itertools.permutations(range(m)))]
    assert len(vals) == 720
    assert abs(np.mean(vals) - sde.shuffle_mean(k, l)) < 1e-10
    assert sde.shuffle_mean(k, l) == pytest.approx(
        sde.kernel_spread(k) * sde.kernel_spread(l) / (m - 1) ** 3, rel=1e-12)
    # tr(HKH) = m (1 - mean K) for an RBF kernel (unit diagonal).
    assert sde.kernel_spread(k) == pytest.approx(m * (1 - k.mean()), rel=1e-12)
    assert sde.split_half_shuffle_mean(x, seed=4, sigma=1.1) == pytest.approx(sde.shuffle_mean(k, l), rel=1e-12)


def test_shuffle_mean_matches_large_shuffle_average():
    x = rng(12).normal(size=(60, 5)) * np.linspace(0.5, 2, 60)[:, None]
    vals = sde.split_half_dependence(x, n_shuffles=20000, seed=3)
    sem = vals.std() / np.sqrt(len(vals))
    assert abs(vals.mean() - sde.split_half_shuffle_mean(x, seed=3)) < 4 * sem


def test_shuffle_mean_tracks_spread_not_dependence():
    # Scaling the outputs changes only the spread; the shuffle mean moves with it.
    x = rng(13).normal(size=(40, 4))
    means = [sde.split_half_shuffle_mean(c * x, sigma=2.0) for c in (0.25, 0.5, 1.0, 2.0)]
    spreads = [sde.subset_spread(c * x, sigma=2.0) for c in (0.25, 0.5, 1.0, 2.0)]
    assert np.all(np.diff(means) > 0) and np.all(np.diff(spreads) > 0)
    assert 0.0 <= spreads[0] < spreads[-1] <= 1.0


def test_standardised_split_half_has_zero_mean_unit_sd():
    x = rng(14).normal(size=(50, 3))
    z = sde.standardised_split_half(x, n_shuffles=4000, seed=2)
    assert z.shape == (4000,)
    assert abs(z.mean()) < 0.1 and z.std() == pytest.approx(1.0, rel=1e-12)
    # Rescaling the outputs (spread) and the bandwidth together leaves z unchanged.
    z2 = sde.standardised_split_half(3 * x, n_shuffles=4000, seed=2, sigma=3 * np.sqrt(3))
    np.testing.assert_allclose(z, z2, atol=1e-8)


def test_saturation_guard_fires_on_near_constant_kernels():
    far = rng(15).normal(size=(30, 10)) * 1e3  # spread >> sigma: K ~ I
    with pytest.warns(sde.SaturationWarning, match="near-constant.*far below"):
        vals = sde.split_half_dependence(far, n_shuffles=20)
    assert np.ptp(vals) < 1e-12  # every shuffle gives the same value
    near = 1e-6 * rng(16).normal(size=(30, 10))  # spread << sigma: K ~ 1 1^T
    with pytest.warns(sde.SaturationWarning, match="far above"):
        sde.split_half_dependence(near, n_shuffles=5)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", sde.SaturationWarning)
        sde.split_half_dependence(rng(17).normal(size=(30, 10)), n_shuffles=5)  # no warning
    assert not sde.check_saturation(np.eye(1))
    with pytest.raises(ValueError, match="square"):
        sde.kernel_spread(np.ones((2, 3)))
    with pytest.raises(ValueError, match="same size"):
        sde.shuffle_mean(np.eye(3), np.eye(4))
