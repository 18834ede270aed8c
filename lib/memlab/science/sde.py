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

What the split-half statistic measures (see :func:`shuffle_mean`): the two halves of a
subset hold different samples, so pairing sample i of S1 with sample i of S2 is arbitrary,
and every shuffle value is HSIC under a uniformly random pairing, a draw from HSIC's
permutation (null) distribution. Its mean over all m! re-orderings is exactly
``trace(HKH) * trace(HLH) / (m - 1)^3``, a product of the two halves' kernel spreads
(``trace(HKH) = m (1 - mean(K))`` for an RBF kernel), with no dependence term at all.
:func:`standardised_split_half` removes that location and the shuffle spread.
"""
from __future__ import annotations

import warnings

import numpy as np
from scipy.spatial.distance import jensenshannon

MIN_SUBSET = 4
SATURATION_TOL = 1e-3  # off-diagonal kernel sd below which a Gram matrix counts as near-constant


class SaturationWarning(UserWarning):
    """A kernel matrix is near-constant: every shuffle gives almost the same HSIC."""


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


def kernel_spread(k: np.ndarray) -> float:
    """trace(H K H) of a square (n, n) Gram matrix K: n * (1 - mean(K)) when diag(K) = 1.

    Dimensionless, in [0, n - 1] for an RBF kernel: 0 when all samples coincide
    (K = 1 1^T), n - 1 when all are far apart relative to sigma (K = I).
    """
    k = np.asarray(k, dtype=np.float64)
    if k.ndim != 2 or k.shape[0] != k.shape[1]:
        raise ValueError(f"k: must be a square (n, n) matrix (got shape {k.shape})")
    return float(np.trace(k) - k.sum() / len(k))


def shuffle_mean(k: np.ndarray, l: np.ndarray) -> float:
    """Exact mean over all m! re-orderings P of HSIC(K, P L P^T) = tr(K H P L P^T H) / (m-1)^2.

    k, l: (m, m) Gram matrices of the two halves (m >= 2). Returns
    ``kernel_spread(k) * kernel_spread(l) / (m - 1)^3``.

    Derivation: with Kc = HKH and Lc = HLH, HSIC = sum_ij Kc_ij Lc_{pi(i) pi(j)} / (m-1)^2.
    For a uniform permutation pi, E[Lc_{pi(i) pi(i)}] = tr(Lc) / m, and for i != j
    E[Lc_{pi(i) pi(j)}] = (1^T Lc 1 - tr Lc) / (m (m-1)) = -tr(Lc) / (m (m-1)) because Lc's rows
    sum to zero. Likewise sum_{i != j} Kc_ij = -tr(Kc). Hence
    E = [tr(Kc) tr(Lc) / m + tr(Kc) tr(Lc) / (m (m-1))] / (m-1)^2 = tr(Kc) tr(Lc) / (m-1)^3.
    """
    k, l = np.asarray(k, dtype=np.float64), np.asarray(l, dtype=np.float64)
    if k.shape != l.shape or k.ndim != 2 or k.shape[0] != k.shape[1] or len(k) < 2:
        raise ValueError(f"k, l: must be square matrices of the same size m >= 2 (got {k.shape}, {l.shape})")
    m = len(k)
    return kernel_spread(k) * kernel_spread(l) / (m - 1) ** 3


def check_saturation(k: np.ndarray, name: str = "kernel", sigma: float | None = None,
                     tol: float = SATURATION_TOL) -> bool:
    """Warn (:class:`SaturationWarning`) and return True when a Gram matrix (n, n) is near-constant.

    Near-constant means the standard deviation of its off-diagonal entries is below ``tol``:
    either every pair is far apart relative to sigma (K ~ I, the outputs' spread >> sigma)
    or every pair nearly coincides (K ~ 1 1^T, spread << sigma). Then the centred kernel is
    almost fixed and every shuffle of the split-half statistic gives the same value: the
    dependence distribution collapses to a point and says nothing about the subset.
    """
    k = np.asarray(k, dtype=np.float64)
    off = k[~np.eye(len(k), dtype=bool)]
    if len(off) == 0 or off.std() >= tol:
        return False
    where = "far below" if off.mean() < 0.5 else "far above"
    bw = f"bandwidth sigma={sigma:.3g}" if sigma is not None else "the bandwidth"
    warnings.warn(
        f"{name}: kernel matrix is near-constant (off-diagonal sd {off.std():.2g} < {tol:g}, "
        f"mean {off.mean():.3g}): {bw} is {where} the spread of the outputs, so the split-half "
        f"HSIC saturates (every shuffle gives almost the same value)", SaturationWarning, stacklevel=3)
    return True


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
    k, l = rbf_kernel(x[a], sigma), rbf_kernel(x[b], sigma)
    check_saturation(k, "first half", sigma) or check_saturation(l, "second half", sigma)
    kc, lc = center(k), center(l)
    perms = [rng.permutation(m) for _ in range(n_shuffles)]
    return shuffle_products(kc, lc, np.stack(perms)) / (m - 1) ** 2


def shuffle_products(kc: np.ndarray, lc: np.ndarray, perms: np.ndarray, device=None) -> np.ndarray:
    """<kc, lc[p][:, p]> (Frobenius inner product) for every row p of ``perms``: array (S,) float64.

    kc, lc: (m, m) centred Gram matrices; perms: (S, m) permutations of range(m). With no
    ``device`` and a run on the CPU, one NumPy gather and product per permutation; on a GPU (the
    run's, :func:`memlab.core.config.device`) or any ``device`` given, the permutations go in batches
    through torch in float64: the same values up to the order of the sums (relative 1e-15). At the
    paper's largest subsets (halves of 1000 samples, 200 shuffles) that is 7.5 ms on an H200
    (``benchmarks/results/gpu.json``) against about 0.75 s for the whole split-half statistic with
    NumPy on an idle 2-core AMD EPYC, so the CPU is not the bottleneck of a GPU run.
    """
    if (device := gpu_device(device)) is None:
        return np.array([np.vdot(kc, lc.take(p, axis=0).take(p, axis=1)) for p in perms])
    import torch

    k = torch.as_tensor(kc, dtype=torch.float64, device=device)
    l = torch.as_tensor(lc, dtype=torch.float64, device=device)
    idx = torch.as_tensor(np.asarray(perms), dtype=torch.long, device=device)
    chunk = max(1, 2**25 // max(1, k.numel()))  # at most 2^25 gathered values (256 MiB) at a time
    out = [(l[p[:, :, None], p[:, None, :]] * k).sum(dim=(1, 2)) for p in idx.split(chunk)]
    return torch.cat(out).cpu().numpy()


def split_half_kernels(features: np.ndarray, seed: int = 0, sigma: float | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
    """The two halves' (m, m) Gram matrices exactly as :func:`split_half_dependence` draws them."""
    x = check_features(features)
    sigma = _check_sigma(sigma, x.shape[1], "sigma")
    rng = np.random.default_rng(seed)
    a, b = split_halves(len(x), int(rng.integers(2**32)))
    return rbf_kernel(x[a], sigma), rbf_kernel(x[b], sigma)


def split_half_shuffle_mean(features: np.ndarray, seed: int = 0, sigma: float | None = None) -> float:
    """Exact expectation over re-orderings of :func:`split_half_dependence`'s values (same split).

    features: (n, d) array of one subset's outputs; returns a float (HSIC units, as the values).
    """
    return shuffle_mean(*split_half_kernels(features, seed, sigma))


def subset_spread(features: np.ndarray, sigma: float | None = None) -> float:
    """Kernel spread of a whole subset (n, d): 1 - mean off-diagonal RBF kernel value, in [0, 1].

    0 when all outputs coincide, 1 when all are far apart relative to sigma (default sqrt(d)).
    """
    x = check_features(features)
    k = rbf_kernel(x, _check_sigma(sigma, x.shape[1], "sigma"))
    n = len(k)
    return float(1.0 - (k.sum() - np.trace(k)) / (n * (n - 1)))


def standardised_split_half(
    features: np.ndarray, n_shuffles: int = 200, seed: int = 0, sigma: float | None = None
) -> np.ndarray:
    """Split-half values standardised by their own permutation mean and sd: array (n_shuffles,).

    z_k = (h_k - E_pi[h]) / sd(h) with E_pi the exact shuffle mean (:func:`shuffle_mean`) and
    sd the standard deviation of the n_shuffles values h_k of :func:`split_half_dependence`
    (same split and shuffles for the same seed). Dimensionless. The two halves' kernel
    spreads set the location and scale of h; after standardising, only the shape of the
    shuffle distribution is left to tell subsets apart. A collapsed distribution (sd 0,
    saturation) gives zeros.
    """
    h = split_half_dependence(features, n_shuffles=n_shuffles, seed=seed, sigma=sigma)
    sd = h.std()
    if sd == 0:
        return np.zeros_like(h)
    return (h - split_half_shuffle_mean(features, seed, sigma)) / sd


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

def mmd2(x: np.ndarray, y: np.ndarray, sigma: float | None = None, device=None) -> float:
    """Biased squared MMD between samples x (n, d) and y (m, d) with the RBF kernel (default sigma sqrt(d)).

    Computed with NumPy on a CPU run; on a GPU run (or any ``device`` given) the (n + m)^2 kernel
    is formed there with torch in float64 (:func:`gpu_device` says which).
    """
    x = check_features(x, "x")
    y = check_features(y, "y")
    s = _check_sigma(sigma, x.shape[1], "sigma")
    z = np.concatenate([x, y])
    n = len(x)
    if (dev := gpu_device(device)) is None:
        k = rbf_kernel(z, s)
    else:
        import torch

        t = torch.as_tensor(z, dtype=torch.float64, device=dev)
        sq = (t * t).sum(dim=1)
        k = torch.exp(-(sq[:, None] + sq[None, :] - 2.0 * (t @ t.T)).clamp_min(0.0) / (2.0 * s * s))
    return float(k[:n, :n].mean() + k[n:, n:].mean() - 2.0 * k[:n, n:].mean())


def gpu_device(device=None):
    """Where the batched statistics run through torch: ``device`` when given, else the run's device
    (:func:`memlab.core.config.device`) when it is a GPU; None for NumPy on the CPU."""
    if device is not None:
        return device
    from memlab.core.config import device as run_device

    dev = run_device()
    return None if dev.type == "cpu" else dev


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
