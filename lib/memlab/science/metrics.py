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
# A claim whose margin lies inside one of these bands is "not judged" (memlab.report.paper.outside_noise).

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


def paired_diff_band(a, b, z: float = 1.96) -> float:
    """Half-width of an interval on ``mean(a) - mean(b)``, two 0/1 outcomes of the same items.

    ``a``, ``b``: (n,) 0/1 outcomes of two methods on the same n items (e.g. top-1 hits of two
    rankings on the same targets). Only the items they disagree on carry noise: with ``n10`` items
    a got and b missed and ``n01`` the reverse, the Agresti-Min interval of a difference of paired
    proportions (the Wald interval behind McNemar's test with half an item added to each of the four
    cells, so that two methods that agree everywhere still get a band): with
    p10 = (n10 + 1/2) / (n + 2) and p01 = (n01 + 1/2) / (n + 2), z * sqrt((p10 + p01 - (p10 - p01)^2) / (n + 2)).
    Narrower than :func:`diff_band`, which treats the two as independent samples.
    """
    a, b = _as_1d("a", a), _as_1d("b", b)
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"paired_diff_band: a and b must be outcomes of the same items (got {a.size} and {b.size})")
    if not (np.isin(a, (0, 1)).all() and np.isin(b, (0, 1)).all()):
        raise ValueError("paired_diff_band: outcomes must be 0 or 1")
    m = a.size + 2
    p10 = (np.sum((a == 1) & (b == 0)) + 0.5) / m
    p01 = (np.sum((a == 0) & (b == 1)) + 0.5) / m
    return float(z * np.sqrt((p10 + p01 - (p10 - p01) ** 2) / m))


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval (fractions) for ``k`` successes in ``n`` trials."""
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"wilson_interval: need 0 <= k <= n and n >= 1 (got k={k}, n={n})")
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


def bootstrap_ci(values, stat=np.mean, n_boot: int = 2000, seed: int = 0,
                 level: float = 0.95, vectorized: bool = False) -> tuple[float, float]:
    """Percentile bootstrap interval of ``stat`` over the items of ``values`` (shape (n,) or (n, ...)).

    Resamples the first axis with replacement ``n_boot`` times with a fixed ``seed``, so the band a
    chapter prints is reproducible; ``stat`` maps the resampled array to a number, or, with
    ``vectorized``, the stack of all resamples (n_boot, n, ...) to their (n_boot,) numbers at once.
    """
    a = np.asarray(values, dtype=float)
    if a.ndim == 0 or len(a) == 0:
        raise ValueError("bootstrap_ci: values must be a non-empty array")
    if not 0.0 < level < 1.0:
        raise ValueError(f"bootstrap_ci: level must be in (0, 1) (got {level})")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(a), size=(n_boot, len(a)))
    boots = np.asarray(stat(a[idx]), dtype=float) if vectorized else np.array([stat(a[i]) for i in idx], dtype=float)
    lo, hi = np.quantile(boots, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


# ----------------------------------------------------------------------------- F1 of a binary detection

def f1_score(verdicts, labels) -> float:
    """F1 of a binary detection: ``verdicts`` (n,) bool against the truth ``labels`` (n,) bool.

    The positive class is True (e.g. "this subset is out-of-training"): F1 = 2 TP / (2 TP + FP + FN),
    a fraction in [0, 1]; 0.0 when there is no true positive.
    """
    v, lab = np.asarray(verdicts, bool), np.asarray(labels, bool)
    if v.shape != lab.shape or v.ndim != 1:
        raise ValueError(f"f1_score: verdicts and labels must be (n,) arrays of one shape "
                         f"(got {v.shape} and {lab.shape})")
    tp, fp, fn = np.sum(v & lab), np.sum(v & ~lab), np.sum(~v & lab)
    return float(2 * tp / (2 * tp + fp + fn)) if tp else 0.0


def t_half_width(values, level: float = 0.95) -> float:
    """Half-width of the Student-t ``level`` interval of the mean of ``values`` (shape (n,), n >= 2).

    ``t(0.5 + level/2, n - 1) * s / sqrt(n)`` with ``s`` the sample standard deviation, in the
    values' units.
    """
    from scipy import stats

    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or len(x) < 2:
        raise ValueError(f"t_half_width: needs a 1-d sequence of at least 2 values (got shape {x.shape})")
    return float(stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)))


def f1_band(labels, verdicts, other=None, seed: int = 0) -> float:
    """Half-width of the 95% bootstrap interval of F1 (or of F1(verdicts) - F1(other), paired).

    labels, verdicts, other: (n,) bool arrays over the same n items. Resamples the items (labels and
    verdicts together, 2000 times, fixed ``seed``, :func:`bootstrap_ci`): the noise of an F1 measured
    on n items. Units: F1 (fraction).
    """
    cols = [labels, verdicts] + ([other] if other is not None else [])
    a = np.stack([np.asarray(c, float) for c in cols], axis=1)

    def stat(b):
        lab = b[:, 0] > 0.5
        return f1_score(b[:, 1] > 0.5, lab) - (f1_score(b[:, 2] > 0.5, lab) if b.shape[1] > 2 else 0.0)

    lo, hi = bootstrap_ci(a, stat=stat, seed=seed)
    return (hi - lo) / 2


# ----------------------------------------------------------------------------- membership tables (chapter 4)

# The TPR columns of a membership table and the FPR each is read at.
TPR_COLUMNS = {"TPR@10%FPR": 0.1, "TPR@1%FPR": 0.01}


def tpr_supported(fpr: float, n_nonmembers: int, min_fp: int) -> bool:
    """Whether ``n_nonmembers`` support a TPR at FPR ``fpr`` (a fraction): at least ``min_fp`` false positives.

    With fewer, the ROC point at that FPR is the one at (or next to) zero false
    positives, a different and much noisier quantity (64 non-members: TPR at 1% FPR
    is the TPR at FPR 0).
    """
    if not 0.0 < fpr <= 1.0:
        raise ValueError(f"parameter 'fpr': must be a fraction in (0, 1] (got {fpr!r})")
    return fpr * n_nonmembers >= min_fp


def roc_row(scores, labels, min_fp: int = 1, columns: dict[str, float] | None = None) -> dict[str, float]:
    """One row of a membership table: ``{"AUC": %, "TPR@10%FPR": %, "TPR@1%FPR": %}`` (percent).

    scores: (N,) membership scores (higher = member); labels: (N,) in {0, 1}.
    ``columns`` maps a TPR column name to its FPR (default :data:`TPR_COLUMNS`); a TPR the
    non-members do not support (:func:`tpr_supported` with ``min_fp``) is NaN.
    """
    columns = TPR_COLUMNS if columns is None else columns
    n_non = int((np.asarray(labels) == 0).sum())
    m = roc_metrics(scores, labels, fprs=tuple(columns.values()))
    row = {"AUC": 100 * m["auc"]}
    for metric, f in columns.items():
        row[metric] = 100 * m[f"tpr@{f * 100:g}%fpr"] if tpr_supported(f, n_non, min_fp) else float("nan")
    return row


def auc_variance(auc: float, n_pos: int, n_neg: int) -> float:
    """Hanley & McNeil (1982) variance of an AUC (a fraction) from ``n_pos`` members and ``n_neg`` non-members.

    Returns the variance as a float in fraction units squared; ``auc`` is clipped to
    (1e-6, 1 - 1e-6) so that a perfect AUC keeps a finite, positive variance.
    """
    if int(n_pos) < 1 or int(n_neg) < 1:
        raise ValueError(f"auc_variance: n_pos and n_neg must be positive counts (got {n_pos}, {n_neg})")
    a = min(max(auc, 1e-6), 1 - 1e-6)
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    return (a * (1 - a) + (n_pos - 1) * (q1 - a * a) + (n_neg - 1) * (q2 - a * a)) / (n_pos * n_neg)


def auc_diff_band(auc1: float, auc2: float, n_pos: int, n_neg: int, runs: int = 1, z: float = 1.96) -> float:
    """Half-width (AUC points) of a band on ``auc1 - auc2``, two AUCs in % each averaged over ``runs`` runs.

    Each AUC is measured on ``n_pos`` members and ``n_neg`` non-members per run
    (:func:`auc_variance`). Treats the two AUCs as independent, which overstates the
    noise of a difference measured on the same members (their errors are positively
    correlated): a cautious band.
    """
    for name, a in (("auc1", auc1), ("auc2", auc2)):
        if not 0.0 <= a <= 100.0:
            raise ValueError(f"auc_diff_band: {name} must be an AUC in % in [0, 100] (got {a})")
    if int(runs) < 1:
        raise ValueError(f"auc_diff_band: runs must be a positive count (got {runs})")
    var = (auc_variance(auc1 / 100, n_pos, n_neg) + auc_variance(auc2 / 100, n_pos, n_neg)) / runs
    return float(100 * z * np.sqrt(var))


def context_regime(model, ids, train_ids, vocab_size: int, *, rho: float, exclude=(), batch_size: int = 64,
                   seed: int = 7) -> dict:
    """Does a masked LM read context? Its masked NLL beside an add-one unigram model's, in nats/token.

    ids: (N, L) evaluation blocks; train_ids: (T,) the token stream the unigram
    model counts (``exclude``: special ids left out). The model's NLL is the mean
    over one round of cyclic masks at ratio ``rho`` (every token scored once, masks
    drawn with ``seed``). Returns ``{"base masked NLL", "unigram NLL", "context gain"
    (unigram minus masked, nats), "ln V", "blocks"}``: a model that only learned
    token frequencies has a gain near 0.
    """
    import torch

    from memlab.models.diffusion_lm import unigram_nll
    from memlab.science import mia

    if ids.ndim != 2 or ids.shape[0] == 0:
        raise ValueError(f"context_regime: ids must be a non-empty (N, L) tensor (got shape {tuple(ids.shape)})")
    probe = mia.make_probe(torch.ones_like(ids, dtype=torch.bool), rho=rho, rounds=1, sama_steps=1, mc_steps=0,
                           seed=seed)
    nll = mia.model_view(model, ids, probe, None, batch_size, groups={"cyclic"}, stats=False)["cyclic"]
    base = float(torch.nanmean(nll))
    uni = unigram_nll(train_ids, ids, vocab_size, exclude=exclude)
    return {"base masked NLL": base, "unigram NLL": uni, "context gain": uni - base,
            "ln V": float(np.log(vocab_size)), "blocks": int(ids.shape[0])}


CORRELATION_TESTS = ("Pearson", "Spearman", "Kendall")


def correlation_tests(x, y) -> dict[str, tuple[float, float]]:
    """Pearson's r, Spearman's rho and Kendall's tau of paired samples, each with its two-sided p-value.

    x, y: (n,) arrays of floats, paired item by item (drop pairs with a missing value first).
    Returns ``{"Pearson": (r, p), "Spearman": (rho, p), "Kendall": (tau, p)}`` as floats
    (scipy.stats' pearsonr, spearmanr and kendalltau); every entry is ``(nan, nan)`` when
    n < 3 or either sample is constant (no correlation to test). Raises ValueError if x or y
    is not 1-D, holds a non-finite number, or their lengths differ.
    """
    from scipy import stats

    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xa.ndim != 1 or ya.ndim != 1 or len(xa) != len(ya):
        raise ValueError(f"correlation_tests: x and y must be 1-D and pair up (shapes {xa.shape} and {ya.shape})")
    if not (np.all(np.isfinite(xa)) and np.all(np.isfinite(ya))):
        raise ValueError("correlation_tests: x and y must hold finite numbers (drop missing pairs first)")
    if len(xa) < 3 or len(np.unique(xa)) < 2 or len(np.unique(ya)) < 2:
        return {name: (float("nan"), float("nan")) for name in CORRELATION_TESTS}
    out = {}
    for name, fn in zip(CORRELATION_TESTS, (stats.pearsonr, stats.spearmanr, stats.kendalltau)):
        res = fn(xa, ya)
        out[name] = (float(res[0]), float(res[1]))
    return out


def gain_summary(gains, ratio: float, epochs: int) -> dict[str, float]:
    """Summary of per-token memorisation gains (nats; NLL before minus after fine-tuning at mask ``ratio``).

    gains: (n,) finite per-token gains. A token is trained in an epoch with
    probability ``ratio``, so dividing the mean by ``ratio * epochs`` gives the gain per
    training step in which the token was masked (the quantity of Q-Skew's Assumption 3.1).
    Returns ``{"mean gain (nats)", "median gain", "gain per masked step", "skewness", "tokens"}``.
    """
    from scipy.stats import skew

    g = np.asarray(gains)
    if g.ndim != 1 or g.size == 0:
        raise ValueError(f"gain_summary: gains must be a non-empty (n,) array (got shape {g.shape})")
    if not 0.0 < ratio <= 1.0 or epochs < 1:
        raise ValueError(f"gain_summary: need 0 < ratio <= 1 and epochs >= 1 (got {ratio}, {epochs})")
    return {"mean gain (nats)": float(g.mean()), "median gain": float(np.median(g)),
            "gain per masked step": float(g.mean() / (ratio * epochs)),
            "skewness": float(skew(g)), "tokens": int(g.size)}
