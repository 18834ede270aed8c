"""The noise bands that decide "not judged" (memlab.science.metrics): closed forms and simple references."""
import numpy as np
import pytest
from scipy import stats

from memlab.science import metrics


def test_diff_band_is_the_normal_interval_of_a_difference():
    # two accuracies on 250 images each: z * sqrt(sum of binomial variances)
    band = metrics.diff_band(0.6, 250, 0.5, 250)
    assert band == pytest.approx(1.96 * np.sqrt(0.6 * 0.4 / 250 + 0.5 * 0.5 / 250), rel=1e-12)
    # it shrinks like 1/sqrt(n) and vanishes at p in {0, 1}
    assert metrics.diff_band(0.6, 1000, 0.5, 1000) == pytest.approx(band / 2, rel=1e-12)
    assert metrics.diff_band(0.0, 10, 1.0, 10) == 0.0
    with pytest.raises(ValueError, match="p1"):
        metrics.diff_band(60.0, 250, 0.5, 250)  # percent, not a fraction
    with pytest.raises(ValueError, match="n2"):
        metrics.diff_band(0.6, 250, 0.5, 0)


def test_diff_band_covers_simulated_differences_at_its_level():
    rng = np.random.default_rng(0)
    p1, p2, n = 0.62, 0.55, 250
    d = rng.binomial(n, p1, 20000) / n - rng.binomial(n, p2, 20000) / n
    inside = np.mean(np.abs(d - (p1 - p2)) <= metrics.diff_band(p1, n, p2, n))
    assert inside == pytest.approx(0.95, abs=0.01)


def test_paired_diff_band_closed_form_and_refusals():
    # 100 items: a alone right on 10, b alone on 4, both on 50: only the 14 discordant items count
    a = np.r_[np.ones(10), np.zeros(4), np.ones(50), np.zeros(36)]
    b = np.r_[np.zeros(10), np.ones(4), np.ones(50), np.zeros(36)]
    p10, p01 = 10.5 / 102, 4.5 / 102  # half an item added to each cell (Agresti-Min)
    want = 1.96 * np.sqrt((p10 + p01 - (p10 - p01) ** 2) / 102)
    assert metrics.paired_diff_band(a, b) == pytest.approx(want, rel=1e-12)
    # about the plain Wald band of the 14 discordant items, z * sqrt(14 - 6^2 / 100) / 100
    assert metrics.paired_diff_band(a, b) == pytest.approx(1.96 * np.sqrt(14 - 36 / 100) / 100, rel=0.05)
    # two methods that agree on every item: a band of half an item each way, not zero
    assert metrics.paired_diff_band(a, a) == pytest.approx(1.96 * np.sqrt(1 / 102 / 102), rel=1e-12)
    assert metrics.paired_diff_band(a, b) < metrics.diff_band(a.mean(), 100, b.mean(), 100)
    with pytest.raises(ValueError, match="same items"):
        metrics.paired_diff_band(a, b[:50])
    with pytest.raises(ValueError, match="0 or 1"):
        metrics.paired_diff_band(a * 2, b)


def test_paired_diff_band_covers_simulated_paired_differences_at_its_level():
    # Two correlated rankings on n = 200 targets: both right with 0.5, only a with 0.12, only b with 0.06.
    rng = np.random.default_rng(0)
    n, truth = 200, 0.12 - 0.06
    covered = []
    for _ in range(5000):
        cell = rng.choice(4, size=n, p=[0.5, 0.12, 0.06, 0.32])  # both, a only, b only, neither
        a, b = np.isin(cell, (0, 1)).astype(float), np.isin(cell, (0, 2)).astype(float)
        covered.append(abs(a.mean() - b.mean() - truth) <= metrics.paired_diff_band(a, b))
    assert np.mean(covered) == pytest.approx(0.95, abs=0.012)


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (125, 250), (250, 250)])
def test_wilson_interval_matches_scipy(k, n):
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    lo, hi = metrics.wilson_interval(k, n)
    assert lo == pytest.approx(ci.low, abs=2e-4) and hi == pytest.approx(ci.high, abs=2e-4)
    with pytest.raises(ValueError, match="k <= n"):
        metrics.wilson_interval(n + 1, n)


def test_bootstrap_ci_is_reproducible_and_brackets_the_mean():
    x = np.random.default_rng(1).normal(3.0, 1.0, 400)
    lo, hi = metrics.bootstrap_ci(x)
    assert (lo, hi) == metrics.bootstrap_ci(x)  # fixed seed
    assert lo < x.mean() < hi
    # the percentile interval of a mean is close to the t interval on a large sample
    t_lo, t_hi = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    assert lo == pytest.approx(t_lo, abs=0.03) and hi == pytest.approx(t_hi, abs=0.03)
    with pytest.raises(ValueError, match="non-empty"):
        metrics.bootstrap_ci([])


def test_t_half_width_closed_form_and_refusal():
    import pytest
    from scipy import stats

    from memlab.science.metrics import t_half_width

    # two values 0 and 2: s = sqrt(2), so the half-width is t(0.975, 1) * sqrt(2) / sqrt(2)
    assert t_half_width([0.0, 2.0]) == pytest.approx(stats.t.ppf(0.975, 1), rel=1e-12)
    assert t_half_width([1.0, 1.0, 1.0]) == 0.0
    with pytest.raises(ValueError, match="at least 2 values"):
        t_half_width([1.0])
