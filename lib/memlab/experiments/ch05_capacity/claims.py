"""Chapter 5's claims: the paper's statements as predicates over the recorded metrics.

:data:`METRIC_KEYS` lists every metric the chapter records; the thresholds are one named
constant each (tests mutate them and see the verdict flip); each predicate computes its noise
band from recorded metrics (:func:`memlab.science.metrics.diff_band`, the recorded bootstrap bands) and
leaves a claim *not judged* when its margin lies inside it or when a capacity it rests on is a
lower bound. :func:`claims` declares them.
"""

from __future__ import annotations

import math

import numpy as np

from memlab.report import paper
from memlab.science import metrics

from .spec import CHAPTER

# Thresholds of the predicates, one constant each (tests mutate them and see the verdict flip).
LINEAR_R2 = 0.95  # capacity ~ alpha * params: R^2 at least this (the paper: > 0.99)
ALPHA_TOL = 0.5  # |alpha - 3.64| at most this many bits/parameter
PLATEAU_TOL = 0.10  # memorisation over the two largest N changes by at most 10%, either way
PLATEAU_SHARE = 0.5  # ... and stays below this share of H(X) at the largest N
PRECISION_MAX = 1.25  # alpha fp32 / bf16 in (1, 1.25] (the paper: 1.091)
A1_ERROR_PCT = 5.0  # min(capacity, H(X)) within 5% mean error (the paper: 1.7%, 1.8%)
DD_RANGE = (0.25, 4.0)  # double descent's onset ratio within this range
EXTRACT_TOL = 0.05  # training extraction within 0.05 of test extraction at the largest N
TFIDF_P = 0.05  # Spearman p-value below this
LAW_RMSE = 0.02  # the law fitted on text within 2 points of F1 (the paper: 1-2%)
TABLE2_TOL = 0.01  # the law's arithmetic against Table 2's printed F1


def _per_model(results: list, ev: list[str], inside: str) -> tuple[bool, str]:
    """One verdict from per-model ones (True, False, None = inside the noise): any False fails the
    claim, else any None leaves it not judged (evidence + ``inside``), else it holds."""
    text = "; ".join(ev)
    if False in results:
        return False, text
    if None in results:
        raise paper.NotJudged(text + inside)
    return True, text


def _side(margin: float, band: float, what: str) -> bool | None:
    """One condition of a per-model claim: True past ``+band``, False below ``-band``, None inside.

    Records the margin through :func:`memlab.report.paper.outside_noise` (inside the band it raises, which
    is caught here), so that a claim checking several models pools each model's margin over seeds
    (:mod:`memlab.report.pooling`) instead of a vote of the seeds' verdicts.
    """
    try:
        paper.outside_noise(margin, band, what)
    except paper.NotJudged:
        return None
    return margin > 0


def _unconverged(m, what: str) -> None:
    """NotJudged when a capacity that ``what`` rests on is only a lower bound (its run still rose)."""
    bad = [k for k, v in m["capacity"].items() if not v["converged"]]
    if bad:
        bpp = ", ".join(f"{k}: {v['bpp']:.2f}" for k, v in m["capacity"].items())
        raise paper.NotJudged(
            f"{what} rests on capacities that are lower bounds: the run setting the capacity of "
            f"{', '.join(bad)} still gained over the second half of its schedule (bits/param {bpp}; "
            f"alpha = {m['alpha']:.2f}, R² = {m['alpha_r2']:.3f})"
        )


def _linear(m):
    """Capacity ~ alpha * params fits with R^2 >= LINEAR_R2 (capacities of converged runs)."""
    _unconverged(m, "linearity")
    margin, band = m["alpha_r2"] - LINEAR_R2, m["alpha_r2_band"]
    paper.outside_noise(margin, band, f"R² - {LINEAR_R2}")
    return margin > 0, f"R² = {m['alpha_r2']:.3f} ± {band:.3f} vs ≥ {LINEAR_R2} (paper > 0.99)"


def _alpha(m):
    """Fitted alpha within ALPHA_TOL bits/parameter of the paper's mean alpha (converged runs only)."""
    ref = paper.number(CHAPTER, "alpha_mean")
    trend = ""
    if m.get("paperlike"):
        pl = m["paperlike"]
        trend = (
            f"; paper-like {pl['model']} (V = {pl['V']}, S = {pl['S']}): {pl['bits_per_param']:.2f} "
            f"bits/param after {pl['steps']} steps, {'converged' if pl['converged'] else 'still rising'}"
        )
    try:
        _unconverged(m, f"alpha = 3.6 ({m['alpha_precision']})")
    except paper.NotJudged as e:
        raise paper.NotJudged(f"not testable at this training length: {e}{trend}") from None
    margin, band = ALPHA_TOL - abs(m["alpha"] - ref), m["alpha_band"]
    paper.outside_noise(margin, band, f"{ALPHA_TOL} - |alpha - {ref}|")
    return margin > 0, (
        f"alpha = {m['alpha']:.2f} ± {band:.2f} ({m['alpha_precision']}) vs {ref} ± {ALPHA_TOL}" f"{trend}"
    )


def _plateau_one(pts) -> tuple[bool | None, str]:
    """pts: sorted (N, mem, H, noise_rel, converged) of one model. (verdict or None = inside noise, text)."""
    (n0, m0, _, e0, c0), (n1, m1, h1, e1, c1) = pts[-2], pts[-1]
    growth = m1 / max(m0, 1e-9)
    band = growth * math.hypot(np.nan_to_num(e0), np.nan_to_num(e1))
    text = f"x{growth:.2f} ± {band:.2f} from N={n0} to {n1} (H x{n1 / n0:.1f}), {m1 / h1:.2f} of H(X)"
    if growth < 1 - PLATEAU_TOL - band:
        return False, text + " (falls: under-trained at the larger N)"
    # the largest N's memorisation against PLATEAU_SHARE of its (exact) entropy, with its own noise
    share_margin, share_band = PLATEAU_SHARE * h1 - m1, m1 * float(np.nan_to_num(e1))
    if growth > 1 + PLATEAU_TOL + band or share_margin < -share_band:
        return False, text + " (still growing)"
    if abs(growth - 1) > PLATEAU_TOL - band:  # the nearer edge is within the noise
        return None, text + " (edge inside the noise)"
    if abs(share_margin) <= share_band:
        return None, text + f" (its share of H(X) within the noise of {PLATEAU_SHARE:g})"
    if not (c0 and c1):
        return None, text + " (flat, but a run still rose over its second half)"
    return True, text


def _plateau(m):
    """Per model at alpha's precision: memorisation over its two largest N changes by <= PLATEAU_TOL.

    A fall counts against the plateau (it is the signature of under-training at
    the larger N), as does growth; flat runs that were still rising, or an edge
    inside the noise, leave the claim not judged.
    """
    last = {}
    for r in m["sweep"]:
        if r["precision"] == m["alpha_precision"]:
            last.setdefault(r["model"], []).append(
                (r["n_samples"], r["mem_bits"], r["data_bits"], r["mem_noise_rel"], r["converged"])
            )
    results, ev = [], []
    for model, pts in last.items():
        if len(pts) < 2:
            raise paper.NotJudged(
                f"{model}: one data set size at {m['alpha_precision']}; a plateau needs two"
            )
        ok, text = _plateau_one(sorted(pts))
        results.append(ok)
        ev.append(f"{model}: {text}")
    return _per_model(results, ev, "")


def _precision(m):
    """alpha in fp32 above alpha in bf16 by at most PRECISION_MAX (converged runs only)."""
    r = m["alpha_fp32"] / m["alpha_bf16"]
    text = f"alpha fp32 / bf16 = {m['alpha_fp32']:.3f} / {m['alpha_bf16']:.3f} = {r:.3f}"
    if not m["precision_converged"]:
        raise paper.NotJudged(f"{text}, but a capacity run of the comparison still rose over its second half")
    band = r * m["precision_noise_rel"]
    paper.outside_noise(min(r - 1.0, PRECISION_MAX - r), band, "alpha ratio's distance to (1, 1.25]")
    return 1.0 < r <= PRECISION_MAX, f"{text} ± {band:.3f} (paper 1.091)"


def _a1(m):
    """min(capacity, H(X)) predicts memorisation within A1_ERROR_PCT mean error for the S and V sweeps."""
    e = m["a1_error_pct"]
    text = "mean error " + ", ".join(f"{k}: {v:.1f}%" for k, v in e.items()) + " (paper 1.7%, 1.8%)"
    if not m["a1_converged"]:
        raise paper.NotJudged(text + "; some A.1 runs still rose over their second half")
    _unconverged(m, "the prediction's alpha")
    margin, band = A1_ERROR_PCT - max(e.values()), m["a1_noise_pct"]
    paper.outside_noise(margin, band, f"{A1_ERROR_PCT}% - error")
    return margin > 0, text + f", noise ± {band:.1f}%"


def _double_descent(m):
    """Every text model's test loss first rises (beyond noise) at a data-to-capacity ratio in DD_RANGE."""
    on = m["double_descent_onset"]
    lo, hi = DD_RANGE
    ok = all(v is not None and lo <= v <= hi for v in on.values())
    return ok, (
        "test loss first rises beyond 1.96 SE at ratio "
        + ", ".join(f"{k}: {'never' if v is None else round(v, 2)}" for k, v in on.items())
        + f" (claim: in [{lo}, {hi}])"
    )


def _mia_falls(runs, n_key):
    """Per model: F1 at the smallest N minus F1 at the largest, against the band of a difference."""
    by = {}
    for r in runs:
        by.setdefault(r["model"], []).append(
            (r["n_samples"], r["membership_f1"], r[n_key] if n_key else r["n_samples"])
        )
    results, ev = [], []
    for model, pts in by.items():
        pts.sort()
        (_, f0, k0), (_, f1, k1) = pts[0], pts[-1]
        margin, band = f0 - f1, metrics.diff_band(f0, k0, f1, k1)
        results.append(_side(margin, band, f"{model}: F1 at N = {pts[0][0]} minus at N = {pts[-1][0]}"))
        ev.append(f"{model}: F1 {f0:.2f} -> {f1:.2f} (fall {margin:+.2f} ± {band:.2f})")
    return _per_model(results, ev, ": a fall inside the noise band")


def _mia(m):
    """Membership F1 on uniform tokens falls from the smallest to the largest N, for every model."""
    return _mia_falls([r for r in m["sweep"] if r["precision"] == m["alpha_precision"]], None)


def _mia_text(m):
    """Membership F1 on text falls from the smallest to the largest N, for every model."""
    return _mia_falls(m["text"], "membership_n")


def _extraction(m):
    """Per text model: train extraction above test at the smallest N, within EXTRACT_TOL of test at
    the largest."""
    rows = {}
    for r in m["text"]:
        rows.setdefault(r["model"], []).append(r)
    results, ev = [], []
    for model, pts in rows.items():
        pts.sort(key=lambda r: r["n_samples"])
        a, b = pts[0], pts[-1]
        m0 = a["extract_train"] - a["extract_test"]
        b0 = metrics.diff_band(
            a["extract_train"], a["extract_n_train"], a["extract_test"], a["extract_n_test"]
        )
        m1 = EXTRACT_TOL - abs(b["extract_train"] - b["extract_test"])
        b1 = metrics.diff_band(
            b["extract_train"], b["extract_n_train"], b["extract_test"], b["extract_n_test"]
        )
        sides = (_side(m0, b0, f"{model}: train minus test extraction at N = {a['n_samples']}"),
                 _side(m1, b1, f"{model}: {EXTRACT_TOL} - |train - test extraction| at N = {b['n_samples']}"))
        results.append(False if False in sides else None if None in sides else True)
        ev.append(
            f"{model}: train {a['extract_train']:.2f} vs test {a['extract_test']:.2f} (± {b0:.2f}) at "
            f"N = {a['n_samples']}; {b['extract_train']:.2f} vs {b['extract_test']:.2f} (± {b1:.2f}) at "
            f"N = {b['n_samples']}"
        )
    return _per_model(results, ev, ": a margin inside the noise band")


def _tfidf(m):
    """Spearman rho of TF-IDF against unintended memorisation is positive with p < TFIDF_P."""
    rho, p = m["tfidf_spearman"], m["tfidf_pvalue"]
    if rho is None or not np.isfinite(rho):
        raise paper.NotJudged(
            f"{m['tfidf_positive_samples']} samples with positive memorisation: too few for a " "correlation"
        )
    if p is None or not np.isfinite(p):  # no test of significance: this run cannot decide the claim
        raise paper.NotJudged(
            f"Spearman rho = {rho:.3f} over {m['tfidf_positive_samples']} samples, but no p-value"
        )
    return rho > 0 and p < TFIDF_P, (
        f"Spearman rho = {rho:.3f}, p = {p:.3g} over "
        f"{m['tfidf_positive_samples']} samples (claim: rho > 0, p < {TFIDF_P})"
    )


def law_noise(points) -> tuple[float, float]:
    """(noise floor, band) of the RMSE of a law fitted to membership-F1 points, in F1 units.

    points: records with ``membership_f1`` (F) and ``membership_n`` (n, the members it is measured
    on). Each F carries the binomial standard error sqrt(F (1 - F) / n) (the model of
    :func:`memlab.science.metrics.diff_band`); the floor is their root mean square, the RMSE a law that is
    exact would still show. The band is the 95% half-width of an RMSE of k points at that floor,
    1.96 floor / sqrt(2 k) (the chi-square approximation sd(s) / s = 1 / sqrt(2 k)).
    """
    se2 = [r["membership_f1"] * (1.0 - r["membership_f1"]) / r["membership_n"] for r in points]
    if not se2:
        raise ValueError("law_noise: needs at least one point (got none)")
    floor = math.sqrt(sum(se2) / len(se2))
    return floor, 1.96 * floor / math.sqrt(2 * len(se2))


def _law_text(m):
    """The sigmoid law, fitted to our text points only, misses them by at most LAW_RMSE in F1 beyond
    what the points' own noise gives: RMSE <= sqrt(LAW_RMSE^2 + floor^2) (:func:`law_noise`).

    The paper's points (hundreds of members each, Table 2's sd 0.3-1.3 points) carry little
    noise; ours carry a few points of F1 each, which an exact law would show as RMSE too.
    """
    f = m["law_fit"]["text"]
    if "error" in f:
        raise paper.NotJudged(f"the law could not be fitted to the text points: {f['error']}")
    floor, band = law_noise(m["text"])
    limit = math.hypot(LAW_RMSE, floor)
    text = (
        f"RMSE {f['rmse']:.3f} ± {band:.3f} over the text runs (c1 = {f['c1']:.2f}, c2 = "
        f"{f['c2']:.3g}, c3 = {f['c3']:.3g}); claim ≤ {limit:.3f} ({LAW_RMSE} beyond the points' "
        f"own noise, {floor:.3f})"
    )
    paper.outside_noise(limit - f["rmse"], band, text)
    return f["rmse"] <= limit, text


def _table2(m):
    """The law's arithmetic: its F1 at Table 2's |D| equals Table 2's predicted F1 within TABLE2_TOL."""
    return m["table2_max_abs_error"] <= TABLE2_TOL, f"max |law - Table 2| = {m['table2_max_abs_error']:.4f}"


# Every metric key the chapter records (run.record); a claim reading another key is a typo
# and fails loudly (memlab.report.paper.evaluate), one reading a key this run lacks is 'not run'.
METRIC_KEYS: tuple[str, ...] = (
    "sweep",
    "runs",
    "converged_runs",
    "capacity",
    "alpha",
    "alpha_r2",
    "alpha_band",
    "alpha_r2_band",
    "convergence_model",
    "alpha_fp32",
    "alpha_bf16",
    "alpha_precision",
    "precision_converged",
    "precision_noise_rel",
    "paperlike",
    "a1",
    "a1_error_pct",
    "a1_converged",
    "a1_noise_pct",
    "text",
    "double_descent_onset",
    "reference",
    "table2_max_abs_error",
    "table2_law_f1",
    "law_fit",
    "paper_law_rmse",
    "tfidf_spearman",
    "tfidf_pvalue",
    "tfidf_positive_samples",
    "tfidf_n_samples",
    "cost",
    "regime",
)


def claims():
    """The paper's claims as predicates over this chapter's metrics (see memlab.report.paper.Claim).

    Judged at every profile: the smoke run still exercises each predicate.
    """
    from memlab.report.paper import Claim

    return paper.declare(
        METRIC_KEYS,
        [
            Claim("linear", "Capacity is linear in parameter count", "Section 3.2, Figure 6", _linear),
            Claim("alpha", "GPT-style models store about 3.6 bits per parameter", "Section 3.2", _alpha),
            Claim(
                "plateau",
                "Total memorisation plateaus at capacity as data grows",
                "Section 3.2, Figure 1",
                _plateau,
            ),
            Claim(
                "precision",
                "fp32 stores slightly more than bf16 (3.83 vs 3.51 bits/param)",
                "Section 3.2",
                _precision,
            ),
            Claim(
                "a1",
                "min(capacity, H(X)) predicts memorisation when S or V change (< 2% error)",
                "Appendix A.1",
                _a1,
            ),
            Claim(
                "double_descent",
                "Double descent starts where data information reaches capacity",
                "Section 4, Figure 3",
                _double_descent,
            ),
            Claim(
                "mia_decreases",
                "Membership inference on uniform tokens gets harder as the data set grows",
                "Section 5.1, Figure 14",
                _mia,
            ),
            Claim(
                "mia_text",
                "Membership inference on text gets harder as the data set grows",
                "Section 5.1, Figure 9",
                _mia_text,
            ),
            Claim(
                "extraction",
                "Small training sets are extractable; with enough data, training extraction falls to "
                "the test rate",
                "Section 4, Figure 17",
                _extraction,
            ),
            Claim(
                "tfidf",
                "Rare-token (high TF-IDF) sequences are memorised most",
                "Appendix A.3, Figure 16",
                _tfidf,
            ),
            Claim(
                "law_text",
                "A sigmoid in data per parameter fits loss-based membership F1 on text (1-2% error)",
                "Section 5.2.1, Figure 7",
                _law_text,
            ),
            Claim(
                "table2",
                "The law's arithmetic: its F1 at Table 2's |D| is Table 2's predicted F1",
                "Table 2",
                _table2,
                sanity=True,
            ),
        ],
    )
