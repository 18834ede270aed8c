"""Chapter 2's claims: the metric keys it records, the gates, one predicate per paper claim, and
:func:`claims`.

Every predicate reads recorded metrics only, computes its noise band there (bootstrap half-widths
of F1 recorded by the tables, binomial bands on OTR and ASR by :func:`memlab.science.metrics.diff_band`)
and hands a margin inside its band to :func:`memlab.report.paper.outside_noise` ("not judged").
"""
from __future__ import annotations

import numpy as np

from memlab.report.paper import Claim, NotJudged, declare, outside_noise
from memlab.science.metrics import diff_band

from .spec import ACC_KEPT_PP

JUDGED = ("cpu", "paper")  # smoke-profile numbers (toy sizes) say nothing about the claims
CONTROLLED_F1 = 0.8  # SDE F1 at every R (Table 1)
SIZE_MAX_DROP = 0.1  # largest F1 drop between consecutive sizes that still counts as growing
UNROLL_OTR_GAP_PP = 50  # Retrain's OTR minus Unroll's, points
UNROLL_ASR_MATCH = 0.05  # |ASR Retrain - ASR Unroll|
BANDWIDTH_SPREAD = 0.1  # F1 range over sigma multipliers 0.5x-2x, and below the best
EARLY_F1 = 0.7  # SDE F1 of the early checkpoint
IDENTITY_SHARE = 0.95  # share of subsets within 3 standard errors of the shuffle-mean identity


def _pm(band: float) -> str:
    return f"\u00b1{band:.2f}"


def _sde_controlled(m):
    f1s, bands = m["f1"]["SDE"], m["f1_band"]["SDE"]
    worst = min(f1s, key=lambda k: f1s[k])
    ev = "SDE F1: " + ", ".join(f"{k} {v:.2f} {_pm(bands[k])}" for k, v in f1s.items())
    outside_noise(f1s[worst] - CONTROLLED_F1, bands[worst], f"lowest SDE F1 ({worst}) against {CONTROLLED_F1:g}; {ev}")
    return f1s[worst] >= CONTROLLED_F1, ev


def _beats_baselines(m):
    col = m["main_column"]
    s, mm, w = m["f1"]["SDE"][col], m["f1"]["MMD"][col], m["f1"]["Wasserstein"][col]
    band = m["beats_band"][col]
    ev = f"{col}: SDE {s:.2f}, MMD {mm:.2f}, Wasserstein {w:.2f} (paired band on the difference {_pm(band)})"
    outside_noise(s - max(mm, w), band, f"SDE minus the best baseline; {ev}")
    return s > mm and s > w, ev


def _grows_with_size(m):
    pairs = sorted((int(k), v) for k, v in m["size_sweep"]["SDE"].items())
    bands = {int(k): v for k, v in m["size_band"]["SDE"].items()}
    f = [v for _, v in pairs]
    band = float(np.hypot(bands[pairs[0][0]], bands[pairs[-1][0]]))
    ev = ("SDE F1 by size: " + ", ".join(f"{k}: {v:.2f}" for k, v in pairs)
          + f" (band on last - first {_pm(band)})")
    outside_noise(f[-1] - f[0], band, f"F1 at the largest minus the smallest size; {ev}")
    if f[-1] <= f[0]:
        return False, ev
    # No step between consecutive sizes may drop F1 by more than SIZE_MAX_DROP; each drop is a
    # difference of two noisy F1s, so it carries the band of that difference.
    steps = [(a, b, fa - fb, float(np.hypot(bands[a], bands[b])))
             for (a, fa), (b, fb) in zip(pairs, pairs[1:])]
    if any(drop - SIZE_MAX_DROP > b_drop for _, _, drop, b_drop in steps):
        return False, ev  # a drop beyond the tolerance and beyond its noise
    for a, b, drop, b_drop in steps:
        outside_noise(SIZE_MAX_DROP - drop, b_drop,
                      f"F1 change from size {a} to {b} ({-drop:+.2f}) against a drop of {SIZE_MAX_DROP:g}; {ev}")
    return True, ev


def _unroll_hidden(m):
    t, n = m["table3"], m["counts"]
    kept = t["Unroll"]["Acc_r (%)"] >= t["Original"]["Acc_r (%)"] - ACC_KEPT_PP
    acc = (f"Unroll Acc_r {t['Unroll']['Acc_r (%)']:.1f}% vs Original {t['Original']['Acc_r (%)']:.1f}% "
           f"(recalibrated {t['Unroll']['Acc_r recal. (%)']:.1f}%)")
    if not kept:
        raise NotJudged(f"precondition failed: Unroll does not keep accuracy "
                        f"(within {ACC_KEPT_PP:g} points): {acc}")
    o_r, o_u = t["Retrain"]["OTR (%)"] / 100, t["Unroll"]["OTR (%)"] / 100
    a_r, a_u = t["Retrain"]["ASR"], t["Unroll"]["ASR"]
    b_otr = 100 * diff_band(o_r, n["targets"], o_u, n["targets"])
    b_asr = diff_band(a_r, n["forget"], a_u, n["forget"])
    gap = 100 * (o_r - o_u)
    ev = (f"OTR Retrain {100 * o_r:.0f}% vs Unroll {100 * o_u:.0f}% (band \u00b1{b_otr:.0f} points); "
          f"ASR {a_r:.2f} vs {a_u:.2f} (band {_pm(b_asr)}); {acc}")
    outside_noise(gap - UNROLL_OTR_GAP_PP, b_otr, f"OTR gap against {UNROLL_OTR_GAP_PP:g} points; {ev}")
    outside_noise(UNROLL_ASR_MATCH - abs(a_r - a_u), b_asr, f"ASR difference against {UNROLL_ASR_MATCH:g}; {ev}")
    return gap >= UNROLL_OTR_GAP_PP and abs(a_r - a_u) <= UNROLL_ASR_MATCH, ev


def _bandwidth_robust(m):
    b = {float(k): v for k, v in m["bandwidth"].items()}
    bands = {float(k): v for k, v in m["bandwidth_band"].items()}
    near = [k for k in b if 0.5 <= k <= 2.0]
    spread = max(max(b[k] for k in near) - min(b[k] for k in near), max(b.values()) - b[1.0])
    band = float(np.sqrt(2) * max(bands[k] for k in b))
    sat = {float(k): v for k, v in m["saturated"].items() if v}
    ev = ("SDE F1 by sigma multiplier: " + ", ".join(f"x{k:g} {v:.2f}" for k, v in sorted(b.items()))
          + f" (band on a difference {_pm(band)})"
          + ("; saturated subsets: " + ", ".join(f"x{k:g}: {v}" for k, v in sorted(sat.items()))
             if sat else ""))
    outside_noise(BANDWIDTH_SPREAD - spread, band, f"largest F1 difference against {BANDWIDTH_SPREAD:g}; {ev}")
    return spread <= BANDWIDTH_SPREAD, ev


def _deeper_better(m):
    d, bd = m["depth"], m["depth_band"]
    deep, shallow = np.mean([d["penultimate"], d["logits"]]), np.mean([d["layer2"], d["layer3"]])
    band = 0.5 * float(np.sqrt(sum(bd[k] ** 2 for k in ("penultimate", "logits", "layer2", "layer3"))))
    ev = "SDE F1 by depth: " + ", ".join(f"{k} {v:.2f}" for k, v in d.items()) + f" (band {_pm(band)})"
    outside_noise(deep - shallow, band, f"deep minus shallow mean F1; {ev}")
    return deep > shallow, ev


def _early(m):
    ev = (f"early-model SDE F1 {m['early_f1']:.2f} {_pm(m['early_band'])} "
          f"(final model {m['f1']['SDE'][m['main_column']]:.2f})")
    outside_noise(m["early_f1"] - EARLY_F1, m["early_band"], f"early-model F1 against {EARLY_F1:g}; {ev}")
    return m["early_f1"] >= EARLY_F1, ev


def _identity(m):
    i = m["identity"]
    return i["share_within_3se"] >= IDENTITY_SHARE, (
        f"{i['share_within_3se'] * 100:.0f}% of {i['n_subsets']} subsets have a shuffle mean within 3 "
        f"standard "
        f"errors of tr(HKH) tr(HLH) / (m-1)^3 (largest relative gap {i['max_rel_err'] * 100:.1f}%)")


# Every metric key the chapter records (run.record); a claim reading another key is a typo
# and fails loudly (memlab.report.paper.evaluate), one reading a key this run lacks is 'not run'.
METRIC_KEYS: tuple[str, ...] = (
    'f1', 'f1_band', 'beats_band', 'main_column', 'table3', 'counts', 'size_sweep', 'size_band',
    'bandwidth', 'bandwidth_band', 'saturated', 'depth', 'depth_band', 'early_f1', 'early_band',
    'early_epochs', 'variant_f1', 'variant_band', 'regime', 'identity', 'sensitivity', 'cost',
)


def claims() -> list[Claim]:
    """The paper's claims as predicates over this chapter's metrics (see memlab.report.paper.Claim).

    Judged at the cpu and paper profiles (JUDGED); smoke-profile numbers (toy sizes) say nothing
    about them. A claim whose margin lies inside its noise band (bootstrap over the target subsets
    for F1, binomial for OTR and ASR) is "not judged", with the band in the evidence.
    """
    return declare(METRIC_KEYS, [
        Claim("controlled",
              "SDE separates in- from out-of-training subsets of CIFAR-10 (F1 >= 0.8 at every R)",
              "Table 1", _sde_controlled, profiles=JUDGED),
        Claim("beats_baselines", "SDE beats MMD and Wasserstein distance on the same task", "Table 2",
              _beats_baselines, profiles=JUDGED),
        Claim("size", "F1 grows with the subset size", "Findings; Table 1", _grows_with_size, profiles=JUDGED),
        Claim("unroll", "Unroll keeps accuracy, and its OTR is far below Retrain's (>= 50 points) while "
              "its ASR "
              "matches (within 0.05)", "Table 3", _unroll_hidden, profiles=JUDGED),
        Claim("bandwidth", "sigma = sqrt(dim) is robust (F1 within 0.1 for 0.5x-2x and of the best)",
              "Findings", _bandwidth_robust, profiles=JUDGED),
        Claim("depth", "Deeper features separate better (penultimate/logits above layer2/layer3)", "Findings",
              _deeper_better, profiles=JUDGED),
        Claim("early", "Even a model at 20% of its training shows the dependence (SDE F1 >= 0.7)", "Findings",
              _early, profiles=JUDGED),
        Claim("spread_identity", "The mean of the split-half statistic over shuffles equals "
              "tr(HKH) tr(HLH) / (m-1)^3 (arithmetic identity, checked on this run's subsets)",
              "this chapter", _identity, profiles=JUDGED, sanity=True),
    ])
