"""Classification and membership-inference metrics shared by the chapters."""
from __future__ import annotations

import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve


def _as_1d(name: str, a) -> np.ndarray:
    a = np.asarray(a, dtype=float).ravel()
    if a.size == 0 or not np.all(np.isfinite(a)):
        raise ValueError(f"parameter {name!r}: must be a non-empty array of finite numbers")
    return a


def tpr_at_fpr(fpr: np.ndarray, tpr: np.ndarray, target: float) -> float:
    """Highest TPR among ROC points whose FPR is at most ``target``."""
    ok = fpr <= target + 1e-12
    return float(tpr[ok].max()) if ok.any() else 0.0


def roc_metrics(scores, labels, fprs=(0.1, 0.01)) -> dict[str, float]:
    """AUC and TPR at fixed FPRs; higher score means 'member' (label 1).

    scores: (N,) membership scores; labels: (N,) in {0, 1} with both present.
    Returns ``{"auc": .., "tpr@10%fpr": .., "tpr@1%fpr": ..}`` (fractions in [0, 1]).
    """
    s, y = _as_1d("scores", scores), _as_1d("labels", labels).astype(int)
    if s.shape != y.shape:
        raise ValueError(f"parameter 'labels': must have the shape of scores {s.shape} (got {y.shape})")
    if set(np.unique(y)) != {0, 1}:
        raise ValueError("parameter 'labels': must contain both 0 (non-member) and 1 (member)")
    fpr, tpr, _ = roc_curve(y, s)
    out = {"auc": float(roc_auc_score(y, s))}
    for f in fprs:
        out[f"tpr@{f * 100:g}%fpr"] = tpr_at_fpr(fpr, tpr, f)
    return out


def best_f1(scores, labels) -> tuple[float, float]:
    """Best F1 over thresholds ``score >= t`` (member = 1); returns (f1, threshold).

    scores, labels: (N,) arrays; computed in one sort (O(N log N)).
    """
    s, y = _as_1d("scores", scores), _as_1d("labels", labels).astype(int)
    order = np.argsort(-s, kind="stable")
    s_sorted, y_sorted = s[order], y[order]
    tp = np.cumsum(y_sorted)
    predicted = np.arange(1, len(s) + 1)
    last = np.r_[s_sorted[1:] != s_sorted[:-1], True]  # ties share one threshold
    f1 = np.where(last, 2 * tp / (predicted + y.sum()), -1.0)
    i = int(np.argmax(f1))
    return float(max(f1[i], 0.0)), float(s_sorted[i])


def accuracy(pred, target) -> float:
    """Share of equal entries of two (N,) label arrays, in [0, 1]."""
    pred, target = np.asarray(pred), np.asarray(target)
    if pred.shape != target.shape or pred.size == 0:
        raise ValueError("parameter 'pred': must be a non-empty array of the same shape as target")
    return float((pred == target).mean())


# ----------------------------------------------------------------------------- noise bands
# A claim whose margin lies inside one of these bands is "not judged" (memlab.paper.outside_noise).

def diff_band(p1: float, n1: int, p2: float, n2: int, z: float = 1.96) -> float:
    """Half-width of a normal-approximation interval on ``p1 - p2``, two independent proportions.

    ``p1``, ``p2`` are fractions in [0, 1] measured on ``n1``, ``n2`` items (e.g. forget accuracy on
    250 test images); the result is in the same units (a fraction): z * sqrt(p1(1-p1)/n1 + p2(1-p2)/n2).
    """
    for name, p in (("p1", p1), ("p2", p2)):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"diff_band: {name} must be a fraction in [0, 1] (got {p})")
    for name, n in (("n1", n1), ("n2", n2)):
        if int(n) < 1:
            raise ValueError(f"diff_band: {name} must be a positive count (got {n})")
    return float(z * np.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2))


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval (fractions) for ``k`` successes in ``n`` trials."""
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"wilson_interval: need 0 <= k <= n and n >= 1 (got k={k}, n={n})")
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


def bootstrap_ci(values, stat=np.mean, n_boot: int = 2000, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of ``stat`` over the items of ``values`` (shape (n,) or (n, ...)).

    Resamples the first axis with replacement ``n_boot`` times with a fixed ``seed``, so the band a
    chapter prints is reproducible; ``stat`` maps the resampled array to a number.
    """
    a = np.asarray(values, dtype=float)
    if a.ndim == 0 or len(a) == 0:
        raise ValueError("bootstrap_ci: values must be a non-empty array")
    if not 0.0 < level < 1.0:
        raise ValueError(f"bootstrap_ci: level must be in (0, 1) (got {level})")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(a), size=(n_boot, len(a)))
    boots = np.array([stat(a[i]) for i in idx], dtype=float)
    lo, hi = np.quantile(boots, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)
