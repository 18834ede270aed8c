"""Chapter 4 (Q-Skew) claims: the paper's claims as predicates over the recorded metrics.

``METRIC_KEYS`` lists every key the chapter records; ``MEASURED`` the profiles the claims are
judged at and ``HEADLINE`` the domain setting they judge; each predicate returns (holds, evidence)
and computes its noise band from the recorded metrics (``memlab.metrics.auc_diff_band``,
``memlab.metrics.diff_band``); :func:`claims` declares them.
"""
from __future__ import annotations

import numpy as np

from memlab import paper
from memlab.metrics import auc_diff_band as _auc_band
from memlab.metrics import diff_band

# At `smoke` the models are toys, so the claims are only judged at `cpu` and `paper`.
MEASURED = ("cpu", "paper")


# The domain setting the claims judge: fine-tuning on another domain than pre-training, as
# LLaDA (web-scale pre-training) fine-tuned on WikiText; "same" is shown beside it as a control.
HEADLINE = "gap"


def auc_diff_band(a1: float, a2: float, m: dict, z: float = 1.96) -> float:
    """Half-width (AUC points) of the band on a1 - a2 (AUCs in %), from the run's members, non-members
    and runs (``m["setup"]``): :func:`memlab.metrics.auc_diff_band`."""
    s = m["setup"]
    return _auc_band(a1, a2, int(s["n_members"]), int(s["n_nonmembers"]), int(s["runs"]), z)


def _section(m: dict, section: str) -> dict:
    """The score table of a section: "instruction", or "domain" in the HEADLINE domain setting."""
    return m["domain"][HEADLINE] if section == "domain" else m[section]


def best_baseline(m: dict, section: str) -> tuple[str, float]:
    """Name and AUC of the best score other than Q-Skew in ``section`` ("domain": the HEADLINE setting)."""
    rows = {k: v["AUC"] for k, v in _section(m, section).items() if k != "Q-Skew"}
    if not rows:
        raise paper.NotJudged(f"{section}: no baseline score was run to compare with")
    name = max(rows, key=rows.get)
    return name, rows[name]


def _beats_all(m: dict, section: str) -> tuple[bool, str]:
    """Checks that Q-Skew's AUC is above every other score's, by more than the noise band."""
    name, auc = best_baseline(m, section)
    q = _section(m, section)["Q-Skew"]["AUC"]
    band = auc_diff_band(q, auc, m)
    what = f"Q-Skew AUC {q:.1f} vs best baseline {name} {auc:.1f}"
    paper.outside_noise(q - auc, band, what)
    return q > auc, f"{what} (band \u00b1{band:.1f})"


def _dft_best(m: dict) -> tuple[bool, str]:
    """Checks that Q-Skew has the highest AUC under domain fine-tuning (domain-gap setting)."""
    return _beats_all(m, "domain")


def _ift_best(m: dict) -> tuple[bool, str]:
    """Checks that Q-Skew has the highest AUC under instruction fine-tuning."""
    return _beats_all(m, "instruction")


def _gain10(m: dict) -> tuple[bool, str]:
    """Checks that Q-Skew's AUC minus the best baseline's, averaged over domain and instruction, exceeds 10."""
    gains, bands = [], []
    for section in ("domain", "instruction"):
        q, (_, b) = _section(m, section)["Q-Skew"]["AUC"], best_baseline(m, section)
        gains.append(q - b)
        bands.append(auc_diff_band(q, b, m))
    mean, band = float(np.mean(gains)), float(np.sqrt(np.sum(np.square(bands))) / 2)
    what = "Q-Skew minus best baseline AUC: " + ", ".join(f"{g:+.1f}" for g in gains) + f" (mean {mean:+.1f})"
    paper.outside_noise(mean - 10, band, what + " against the paper's +10")
    return mean > 10, f"{what}, band \u00b1{band:.1f}"


def _right_skew(m: dict) -> tuple[bool, str]:
    """Checks that the members' pooled Q-Skew of Δ is positive and above the non-members'."""
    d = m["delta_stats"][HEADLINE]
    mq, nq = d["members"]["Q-Skew (pooled)"], d["non-members"]["Q-Skew (pooled)"]
    return mq > 0 and mq > nq, (
        f"pooled Q-Skew members {d['members']['Q-Skew (pooled)']:.3f}, non-members {d['non-members']['Q-Skew (pooled)']:.3f}")


def _falls_with_ratio(t: dict, column: str) -> tuple[bool, list[tuple[float, float]]]:
    """Checks that ``column`` of the asymmetry table strictly falls as the mask ratio grows."""
    # The ratios are float keys in run.metrics and strings once read back from the results JSON;
    # sorting and formatting them as floats gives the same order and text either way.
    rows = [(float(r), t[r][column]) for r in sorted(t, key=float)]
    if len(rows) < 2:
        raise paper.NotJudged(f"one fixed mask ratio ({', '.join(f'{r:g}' for r, _ in rows)}); a trend needs at least two")
    values = [v for _, v in rows]
    return all(a > b for a, b in zip(values, values[1:])), rows


def _asymmetry(m: dict) -> tuple[bool, str]:
    """Checks that the total per-token gain after fine-tuning falls as the fixed mask ratio grows (Figure 1)."""
    ok, rows = _falls_with_ratio(m["asymmetry"], "mean gain (nats)")
    return ok, "mean gain by ratio " + ", ".join(f"{r:g}: {v:.3f}" for r, v in rows)


def _per_step(m: dict) -> tuple[bool, str]:
    """Checks that the gain per masked training step falls as the fixed mask ratio grows (Assumption 3.1)."""
    ok, rows = _falls_with_ratio(m["asymmetry"], "gain per masked step")
    return ok, "gain per masked step by ratio " + ", ".join(f"{r:g}: {v:.3f}" for r, v in rows)


def _mismatched(m: dict) -> tuple[bool, str]:
    """Checks that on both sides of Table 4 the worst mismatched reference loses at most 6 AUC points
    against the golden one and stays above SAMA."""
    parts, ok = [], True
    for side in ("base", "instruct"):
        t = m["table4_base"][HEADLINE] if side == "base" else m["table4_instruct"]
        golden = t["Golden reference"]["AUC"]
        worst = min(t["Other-variant reference"]["AUC"], t["Para-modification reference"]["AUC"])
        ok &= golden - worst <= 6 and worst > t["SAMA (w/ Ref)"]["AUC"]
        parts.append(f"{side}: golden {golden:.1f}, worst mismatched {worst:.1f}, SAMA {t['SAMA (w/ Ref)']['AUC']:.1f}")
    return ok, "; ".join(parts)


def _ablation(m: dict) -> tuple[bool, str]:
    """Checks that full Q-Skew has a higher AUC than every ablated variant (Table 5)."""
    t = m["ablation"][HEADLINE]
    full = t["Q-Skew"]["AUC"]
    others = {k: v["AUC"] for k, v in t.items() if k != "Q-Skew"}
    best = max(others, key=others.get)
    band = auc_diff_band(full, others[best], m)
    what = f"full {full:.1f}; " + ", ".join(f"{k} {v:.1f}" for k, v in others.items())
    paper.outside_noise(full - others[best], band, what + f"; full minus best ablation ({best})")
    return all(full > v for v in others.values()), f"{what} (band \u00b1{band:.1f})"


def _pii_judgeable(m: dict) -> tuple[dict, int, str]:
    """(hits, targets per kind, oracle evidence); NotJudged when no target's truth is among its candidates."""
    p = m["pii"]
    h, n, o = p["hits"], int(p["targets_per_kind"]), p["oracle"]
    oracle = f"truth among candidates phone {o['phone']}/{n}, email {o['email']}/{n}"
    if o["phone"] + o["email"] == 0:
        raise paper.NotJudged(f"{oracle}: no ranking can pick the true PII, so none can be compared")
    return h, n, oracle


def _pii_margin(h: dict, a: str, b: str, n: int, what: str) -> float:
    """Total top-1 hit rate of ranking a minus b over 2n targets; NotJudged inside the diff_band."""
    pa, pb = sum(h[a].values()) / (2 * n), sum(h[b].values()) / (2 * n)
    band = diff_band(pa, 2 * n, pb, 2 * n)
    paper.outside_noise(pa - pb, band, f"{what}: hit rate {100 * pa:.0f}% vs {100 * pb:.0f}% of {2 * n}")
    return band


def _pii_combine(m: dict) -> tuple[bool, str]:
    """Checks that the combined CE + skewness ranking has at least CE's top-1 hits for phone and e-mail,
    and more in total, by more than the noise band on the total hit rates."""
    h, n, oracle = _pii_judgeable(m)
    comb = [k for k in h if k.startswith("Combine")][0]
    band = _pii_margin(h, comb, "CE", n, f"{comb} minus CE ({oracle})")
    ok = all(h[comb][kind] >= h["CE"][kind] for kind in ("phone", "email")) and sum(h[comb].values()) > sum(h["CE"].values())
    return ok, (f"top-1 hits CE phone {h['CE']['phone']}/{n}, email {h['CE']['email']}/{n}; "
                f"{comb} phone {h[comb]['phone']}/{n}, email {h[comb]['email']}/{n}; {oracle}; "
                f"band \u00b1{100 * band:.0f} points")


def _pii_skew_alone(m: dict) -> tuple[bool, str]:
    """Checks that ranking by Q-Skew over the PII tokens alone gives fewer top-1 hits in total than CE."""
    h, n, oracle = _pii_judgeable(m)
    q = "Q-Skew (PII mask)"
    band = _pii_margin(h, "CE", q, n, f"CE minus {q} ({oracle})")
    return sum(h[q].values()) < sum(h["CE"].values()), (
        f"{q} {sum(h[q].values())} hits vs CE {sum(h['CE'].values())} of {2 * n}; {oracle}; "
        f"band \u00b1{100 * band:.0f} points")


# Every metric key the chapter records (run.record); a claim reading another key is a typo
# and fails loudly (memlab.paper.evaluate), one reading a key this run lacks is 'not run'.
METRIC_KEYS: tuple[str, ...] = (
    'setup', 'regime', 'domain', 'delta_stats', 'instruction', 'epochs_sweep_auc', 'table4_base',
    'table4_instruct', 'ablation', 'asymmetry', 'pii',
)


def claims():
    """The paper's claims as predicates over this chapter's metrics, judged at `cpu` and `paper`."""
    from memlab.paper import Claim

    return paper.declare(METRIC_KEYS, [
        Claim("dft_best", "Q-Skew has the highest AUC under domain fine-tuning", "Table 1", _dft_best,
              profiles=MEASURED),
        Claim("ift_best", "Q-Skew has the highest AUC under instruction fine-tuning", "Table 2", _ift_best,
              profiles=MEASURED),
        Claim("gain10", "Q-Skew beats the best baseline by more than 10 AUC points on average", "Section 4", _gain10,
              profiles=MEASURED),
        Claim("member_skew", "Members' per-token differences are right-skewed, more than non-members'",
              "Section 3 (Theorem 3.2)", _right_skew, profiles=MEASURED),
        Claim("asymmetry", "After fine-tuning at a lower mask ratio, tokens have gained more (0.25 > 0.5 > 0.75)",
              "Figure 1", _asymmetry, profiles=MEASURED),
        Claim("per_step", "A masked token gains more per training step at a lower mask ratio", "Assumption 3.1",
              _per_step, profiles=MEASURED),
        Claim("mismatch", "With a mismatched reference Q-Skew loses at most a few AUC points and stays above SAMA",
              "Table 4", _mismatched, profiles=MEASURED),
        Claim("ablation", "Each component (cyclic sampling, skewness, quantile weighting) adds AUC", "Table 5",
              _ablation, profiles=MEASURED),
        Claim("pii_combine", "Combining CE with skewness (alpha = 0.1) recovers more PII than CE alone", "Table 6",
              _pii_combine, profiles=MEASURED),
        Claim("pii_skew_alone", "Skewness alone recovers less PII than CE", "Table 6", _pii_skew_alone,
              profiles=MEASURED),
    ])
