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
