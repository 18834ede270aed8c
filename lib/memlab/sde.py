"""Split-half dependence evaluation (SDE): HSIC, its shuffle distribution, the JSD decision.

Training ties the outputs of trained-on samples together (shared gradient
updates), so two random halves of a trained-on subset are more dependent than
two halves of unseen data. SDE measures that dependence with HSIC and decides
whether a target subset looks in-training or out-of-training by comparing its
dependence distribution with those of two references.

Normalisation used everywhere in this module (the biased estimator of
Gretton et al., 2005)::

    K_ij = exp(-||x_i - x_j||^2 / (2 sigma_x^2))      (Gaussian RBF kernel)
    L_ij = exp(-||y_i - y_j||^2 / (2 sigma_y^2))
    H    = I - 1 1^T / n                              (centring matrix)
    HSIC = trace(K H L H) / (n - 1)^2

with sigma = sqrt(feature dimension) unless given.
"""
from __future__ import annotations

import numpy as np
from scipy.spatial.distance import jensenshannon

MIN_SUBSET = 4


# ----------------------------------------------------------------------------- checks

def check_features(features: np.ndarray, name: str = "features", min_rows: int = MIN_SUBSET) -> np.ndarray:
    """Return ``features`` as a finite float64 array of shape (n, d), n >= min_rows, or raise ValueError."""
    arr = np.asarray(features, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"{name}: must be a 2-D array of shape (n, d) (got shape {arr.shape})")
    if arr.shape[0] < min_rows:
        raise ValueError(f"{name}: a subset needs at least {min_rows} samples (got {arr.shape[0]})")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or infinite values; features must be finite")
    return arr


def _check_sigma(sigma: float | None, dim: int, name: str) -> float:
    if sigma is None:
        return float(np.sqrt(dim))
    if not np.isfinite(sigma) or sigma <= 0:
        raise ValueError(f"{name}: bandwidth must be a positive finite number (got {sigma!r})")
    return float(sigma)


def _check_n_shuffles(n_shuffles: int) -> int:
    if isinstance(n_shuffles, bool) or not isinstance(n_shuffles, (int, np.integer)) or n_shuffles < 1:
        raise ValueError(f"n_shuffles: must be an integer >= 1 (got {n_shuffles!r})")
    return int(n_shuffles)


# ----------------------------------------------------------------------------- HSIC

def rbf_kernel(x: np.ndarray, sigma: float) -> np.ndarray:
    """Gaussian RBF Gram matrix exp(-||x_i - x_j||^2 / (2 sigma^2)) of x (n, d) -> (n, n)."""
    sq = np.sum(x * x, axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * (x @ x.T), 0.0)
    return np.exp(-d2 / (2.0 * sigma * sigma))


def center(k: np.ndarray) -> np.ndarray:
    """H K H for a square (n, n) matrix K, computed without forming H."""
    return k - k.mean(axis=0, keepdims=True) - k.mean(axis=1, keepdims=True) + k.mean()


def hsic(x: np.ndarray, y: np.ndarray, sigma_x: float | None = None, sigma_y: float | None = None) -> float:
    """Biased HSIC between paired samples x (n, d_x) and y (n, d_y): trace(K H L H) / (n-1)^2.

    sigma_x, sigma_y: RBF bandwidths (feature units); default sqrt(d_x), sqrt(d_y).
    Returns a non-negative float; 0 means no dependence detectable by the kernels.
    """
    x = check_features(x, "x")
    y = check_features(y, "y")
    if len(x) != len(y):
        raise ValueError(f"x, y: must have the same number of samples (got {len(x)} and {len(y)})")
    kx = center(rbf_kernel(x, _check_sigma(sigma_x, x.shape[1], "sigma_x")))
    ly = rbf_kernel(y, _check_sigma(sigma_y, y.shape[1], "sigma_y"))
    n = len(x)
    # sum(HKH * L) == trace(K H L H) because H is symmetric and idempotent.
    return float(np.sum(kx * ly) / (n - 1) ** 2)


def split_halves(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random disjoint halves of range(n): two index arrays of length n // 2 (an odd sample is dropped)."""
    order = np.random.default_rng(seed).permutation(n)
    m = n // 2
    return order[:m], order[m:2 * m]


def split_half_dependence(
    features: np.ndarray,
    n_shuffles: int = 200,
    seed: int = 0,
    sigma: float | None = None,
) -> np.ndarray:
    """Distribution of split-half HSIC values of one subset: array of shape (n_shuffles,).

    features: (n, d) model outputs of the subset's samples, n >= 4.
    The subset is split once into random halves S1, S2 (seeded); the second half
    is re-ordered by ``n_shuffles`` random permutations and HSIC(S1, S2[perm]) is
    returned for each. Both centred kernel matrices are computed once: permuting
    the samples of S2 permutes the rows and columns of its centred Gram matrix,
    so each shuffle costs two contiguous gathers and one elementwise product
    (O(m^2) for halves of m samples, against O(m^3) when the kernels are rebuilt).
    sigma: RBF bandwidth for both halves (default sqrt(d)).
    """
    x = check_features(features)
    n_shuffles = _check_n_shuffles(n_shuffles)
    sigma = _check_sigma(sigma, x.shape[1], "sigma")
    rng = np.random.default_rng(seed)
    a, b = split_halves(len(x), int(rng.integers(2**32)))
    m = len(a)
    kc = center(rbf_kernel(x[a], sigma))
    lc = center(rbf_kernel(x[b], sigma))
    perms = [rng.permutation(m) for _ in range(n_shuffles)]
    out = np.array([np.vdot(kc, lc.take(p, axis=0).take(p, axis=1)) for p in perms])
    return out / (m - 1) ** 2


def split_half_dependence_loop(
    features: np.ndarray, n_shuffles: int = 200, seed: int = 0, sigma: float | None = None
) -> np.ndarray:
    """Reference implementation of :func:`split_half_dependence`: kernels recomputed per shuffle.

    Same split and permutations (same seed), so the values agree; used by tests and the benchmark.
    """
    x = check_features(features)
    n_shuffles = _check_n_shuffles(n_shuffles)
    rng = np.random.default_rng(seed)
    a, b = split_halves(len(x), int(rng.integers(2**32)))
    m = len(a)
    perms = [rng.permutation(m) for _ in range(n_shuffles)]
    h = np.eye(m) - np.ones((m, m)) / m
    s = _check_sigma(sigma, x.shape[1], "sigma")
    out = []
    for p in perms:
        k = rbf_kernel(x[a], s)
        l = rbf_kernel(x[b][p], s)
        out.append(np.trace(k @ h @ l @ h) / (m - 1) ** 2)
    return np.array(out)


# ----------------------------------------------------------------------------- decision

def js_divergence(p_values: np.ndarray, q_values: np.ndarray, edges: np.ndarray) -> float:
    """Jensen-Shannon divergence (bits, in [0, 1]) between two samples binned on shared ``edges``."""
    p, _ = np.histogram(p_values, bins=edges)
    q, _ = np.histogram(q_values, bins=edges)
    return float(jensenshannon(p / p.sum(), q / q.sum(), base=2) ** 2)


def shared_edges(*samples: np.ndarray, n_bins: int = 30) -> np.ndarray:
    """``n_bins + 1`` equal-width bin edges spanning the pooled range of all samples."""
    pooled = np.concatenate([np.ravel(s) for s in samples])
    lo, hi = float(pooled.min()), float(pooled.max())
    if hi <= lo:  # all values equal: one bin around them
        lo, hi = lo - 0.5, hi + 0.5
    return np.linspace(lo, hi, n_bins + 1)


def decide(
    target: np.ndarray, in_ref: np.ndarray, out_ref: np.ndarray, n_bins: int = 30
) -> dict:
    """Judge a target subset from three dependence distributions (each of shape (n_shuffles,)).

    The three samples are histogrammed on ``n_bins`` equal-width bins spanning
    their pooled range, and the target counts as out-of-training (forgotten)
    when JSD(target, out_ref) < JSD(target, in_ref). When both divergences are
    equal (typically both saturated at 1 bit because the target overlaps
    neither reference) the reference whose median is nearer decides.
    Returns {"out": bool, "jsd_out": float, "jsd_in": float}.
    """
    if n_bins < 2:
        raise ValueError(f"n_bins: must be an integer >= 2 (got {n_bins!r})")
    edges = shared_edges(target, in_ref, out_ref, n_bins=n_bins)
    d_out = js_divergence(target, out_ref, edges)
    d_in = js_divergence(target, in_ref, edges)
    if np.isclose(d_out, d_in, rtol=0, atol=1e-12):
        t = np.median(target)
        out = abs(t - np.median(out_ref)) < abs(t - np.median(in_ref))
    else:
        out = d_out < d_in
    return {"out": bool(out), "jsd_out": d_out, "jsd_in": d_in}


def check_equal_sizes(**subsets: np.ndarray) -> int:
    """Raise ValueError unless every subset has the same number of rows (>= 4); return it."""
    sizes = {k: len(v) for k, v in subsets.items()}
    if len(set(sizes.values())) != 1:
        listed = ", ".join(f"{k}={v}" for k, v in sizes.items())
        raise ValueError(f"subsets: must all have the same size for a fair comparison (got {listed})")
    n = next(iter(sizes.values()))
    if n < MIN_SUBSET:
        raise ValueError(f"subsets: a subset needs at least {MIN_SUBSET} samples (got {n})")
    return n


def sde_test(
    target: np.ndarray,
    in_ref: np.ndarray,
    out_ref: np.ndarray,
    n_shuffles: int = 200,
    seed: int = 0,
    sigma: float | None = None,
    n_bins: int = 30,
) -> dict:
    """SDE decision for one target subset from features of three equal-size subsets, each (n, d).

    Returns :func:`decide`'s dict plus the three dependence distributions
    ("h_target", "h_in", "h_out", each of shape (n_shuffles,)).
    """
    check_equal_sizes(target=np.asarray(target), in_ref=np.asarray(in_ref), out_ref=np.asarray(out_ref))
    h = {
        name: split_half_dependence(f, n_shuffles=n_shuffles, seed=seed + i, sigma=sigma)
        for i, (name, f) in enumerate((("h_target", target), ("h_in", in_ref), ("h_out", out_ref)))
    }
    return {**decide(h["h_target"], h["h_in"], h["h_out"], n_bins=n_bins), **h}


# ----------------------------------------------------------------------------- baselines

def mmd2(x: np.ndarray, y: np.ndarray, sigma: float | None = None) -> float:
    """Biased squared MMD between samples x (n, d) and y (m, d) with the RBF kernel (default sigma sqrt(d))."""
    x = check_features(x, "x")
    y = check_features(y, "y")
    s = _check_sigma(sigma, x.shape[1], "sigma")
    z = np.concatenate([x, y])
    k = rbf_kernel(z, s)
    n = len(x)
    return float(k[:n, :n].mean() + k[n:, n:].mean() - 2.0 * k[:n, n:].mean())


def wasserstein(x: np.ndarray, y: np.ndarray) -> float:
    """Exact 1-Wasserstein distance between two equal-size point clouds x, y of shape (n, d).

    For uniform weights on n points each, optimal transport is an assignment
    problem; it is solved exactly with the Hungarian algorithm on Euclidean costs.
    """
    from scipy.optimize import linear_sum_assignment
    from scipy.spatial.distance import cdist

    check_equal_sizes(x=np.asarray(x), y=np.asarray(y))
    x = check_features(x, "x")
    y = check_features(y, "y")
    cost = cdist(x, y)
    rows, cols = linear_sum_assignment(cost)
    return float(cost[rows, cols].mean())


def distance_test(target: np.ndarray, in_ref: np.ndarray, out_ref: np.ndarray, metric: str) -> dict:
    """Baseline decision: the target (n, d) is out-of-training when nearer to out_ref than to in_ref.

    metric: "mmd" (squared MMD, RBF, sigma sqrt(d)) or "wasserstein" (exact W1).
    Returns {"out": bool, "d_out": float, "d_in": float}.
    """
    check_equal_sizes(target=np.asarray(target), in_ref=np.asarray(in_ref), out_ref=np.asarray(out_ref))
    fns = {"mmd": mmd2, "wasserstein": wasserstein}
    if metric not in fns:
        raise ValueError(f"metric: must be one of {', '.join(fns)} (got {metric!r})")
    d_out, d_in = fns[metric](target, out_ref), fns[metric](target, in_ref)
    return {"out": bool(d_out < d_in), "d_out": d_out, "d_in": d_in}
