"""Chapter 3's claims: the recorded metric keys, the claims' thresholds, their predicates and :func:`claims`.

Each predicate reads the recorded metrics (``run.metrics``) only; a claim made at the audited
K is "not judged" when the sweep never reached the paper's audited state (``audit``), and one
whose margin lies inside its noise band (half the width of the recorded 95% intervals, or
:func:`memlab.metrics.diff_band` for the retain probes) is "not judged" too.
"""
from __future__ import annotations

import numpy as np

from memlab import metrics as M
from memlab import paper
from memlab.paper import Claim, declare

from .spec import CHAPTER

#: smoke models are untrained toys: a verdict there would mean nothing
JUDGED = ("cpu", "paper")


def _paper(table: str, row: str, col: str) -> float:
    """One cell of a paper table (``data/papers/03_canary_audit.yaml``), quoted in the evidence."""
    return float(paper.table(CHAPTER, table).loc[row, col])


#: App. I: teacher-forced top-1 "remains 0.90-1.00"; the floor is the paper's own minimum (EMPTY, 0.90)
TF_FLOOR = float(paper.table(CHAPTER, "teacher_forced").loc["seed 0"].min())


def _paper_gap(table: str) -> str:
    """The paper's gap at its K = 1600 with its interval, as the evidence quotes it: ``+0.23 [0.13, 0.35]``."""
    return (f"{_paper(table, 'K=1600', 'gap'):+.2f} [{_paper(table, 'K=1600', 'gap_low'):.2f}, "
            f"{_paper(table, 'K=1600', 'gap_high'):.2f}]")


def _paper_range(table: str, row: str) -> str:
    """Lowest-highest value of one paper table row, as ``0.90-0.96``."""
    vals = paper.table(CHAPTER, table).loc[row]
    return f"{vals.min():.2f}-{vals.max():.2f}"


def _seed(m: dict, i: int) -> dict:
    """The K-sweep summaries of the i-th seed run (a missing metric, so "not run", when there is none)."""
    runs = list(m["ksweep"].values())
    if i >= len(runs):
        raise paper.MetricMissing(f"ksweep seed #{i + 1}")
    return runs[i]


def _audit(m: dict, by_k: dict) -> dict:
    """The summary at the audited K; not judged when the sweep never reached the paper's state."""
    a = m["audit"]
    if not a["reached"]:
        raise paper.NotJudged(f"the sweep never reached the paper's audited state ({a['evidence']})")
    return by_k[f"K{a['K']}"]


def _last(by_k: dict) -> dict:
    return by_k[max(by_k, key=lambda k: int(k[1:]))]


def _first_k(by_k: dict) -> dict:
    return by_k[min((k for k in by_k if k != "K0"), key=lambda k: int(k[1:]))]


def _gap(sm: dict) -> tuple[float, float, float]:
    g = sm["auto"]["gap"]
    return g["mean"], g["low"], g["high"]


def _half(ci: dict) -> float:
    """Half-width of a ``{"mean", "low", "high"}`` interval (the noise band of its mean)."""
    return (ci["high"] - ci["low"]) / 2


def _ci(ci: dict, fmt: str = "+.2f") -> str:
    return f"{ci['mean']:{fmt}} [{ci['low']:{fmt}}, {ci['high']:{fmt}}]"


def _claim_bypass(m):
    by_k = _seed(m, 0)
    s = _audit(m, by_k)
    g, lo, hi = _gap(s)
    g0 = _gap(by_k["K0"])[0]
    return lo > 0, (f"seed 0, audited K = {m['audit']['K']}: gap {g:+.2f} [{lo:+.2f}, {hi:+.2f}] "
                    f"(K=0: {g0:+.2f}; paper {_paper_gap('ksweep_seed0')})")


def _claim_suppressed(m):
    # the claim is that a state like the paper's exists in the sweep; the audit rule looks for it
    a, s0 = m["audit"], _seed(m, 0)["K0"]["auto"]
    return a["reached"], (f"{a['evidence']}; K=0 out acc {s0['out_acc']['mean']:.2f}, thk leak "
                          f"{s0['thk_leak']['mean']:.2f} (paper {_paper('ksweep_seed0', 'K=0', 'out_acc'):.2f} -> "
                          f"{_paper('ksweep_seed0', 'K=1600', 'out_acc'):.2f}, "
                          f"thk {_paper('ksweep_seed0', 'K=1600', 'thk_leak'):.2f})")


def _claim_grows(m):
    by_k = _seed(m, 0)
    first, last = _first_k(by_k)["auto"]["gap"], _audit(m, by_k)["auto"]["gap"]
    margin, band = last["mean"] - first["mean"], float(np.hypot(_half(first), _half(last)))
    ev = (f"seed 0 gap {first['mean']:+.2f} at the smallest K -> {last['mean']:+.2f} at the audited K "
          f"(margin {margin:+.2f}, band +-{band:.2f}; paper {_paper('ksweep_seed0', 'K=100', 'gap'):+.2f} -> "
          f"{_paper('ksweep_seed0', 'K=1600', 'gap'):+.2f})")
    paper.outside_noise(margin, band, ev)
    return margin > 0, ev


def _claim_prefill(m):
    by_k = _seed(m, 0)
    s = _audit(m, by_k)
    p, p0 = s["prefill"]["BIO"]["auto_minus"], by_k["K0"]["prefill"]["BIO"]["auto_minus"]
    # the paper's sign: the prefill *lowers* out acc (0.60 -> 0.37), so Delta_AB = AUTO - BIO > 0
    return p["low"] > 0, (f"seed 0 Delta_AB = {_ci(p)} at the audited K (K=0: {_ci(p0)}) vs gap "
                          f"{_gap(s)[0]:+.2f} (paper {_paper('ksweep_seed0', 'K=1600', 'delta_ab'):+.2f} vs "
                          f"{_paper('ksweep_seed0', 'K=1600', 'gap'):+.2f})")


def _claim_seed_sensitive(m):
    d = [_audit(m, _seed(m, s))["prefill"]["BIO"]["auto_minus"] for s in (0, 1)]
    d0 = [_seed(m, s)["K0"]["prefill"]["BIO"]["auto_minus"]["mean"] for s in (0, 1)]
    ev = (f"Delta_AB seed 0 {_ci(d[0])}, seed 1 {_ci(d[1])} (K=0: {d0[0]:+.2f}, {d0[1]:+.2f}; "
          f"paper {_paper('ksweep_seed0', 'K=1600', 'delta_ab'):+.2f}, then out acc at ceiling)")
    signs = [1 if x["low"] > 0 else -1 if x["high"] < 0 else 0 for x in d]
    if 0 in signs:  # an interval holding 0 leaves that seed's direction undetermined
        raise paper.NotJudged(f"{ev}: an interval contains 0, so a direction is not determined")
    return signs[0] != signs[1], ev


def _claim_tf(m):
    by_k = _seed(m, 0)
    tf, tf0 = _audit(m, by_k)["tf"], by_k["K0"]["tf"]
    mode = min(tf, key=lambda k: tf[k]["mean"])
    margin, band = tf[mode]["mean"] - TF_FLOOR, _half(tf[mode])
    ev = ("teacher-forced top-1 " + ", ".join(f"{k} {v['mean']:.3f} (K=0 {tf0[k]['mean']:.3f})"
                                              for k, v in tf.items())
          + f"; lowest ({mode}) margin {margin:+.3f} to {TF_FLOOR}, band +-{band:.3f} (paper "
             f"{_paper_range('teacher_forced', 'seed 0')})")
    paper.outside_noise(margin, band, ev)
    return margin > 0, ev


def _claim_flip(m):
    f = m["parser_flip"]
    t, a = f["trace"]["gap"]["mean"], f["answer"]["gap"]["mean"]
    return t > 0 > a, (f"gap {t:+.2f} (missing -> trace) vs {a:+.2f} (missing -> answer); {f['source']} "
                       f"(paper {_paper('parser_flip', 'missing -> trace', 'gap'):+.2f} / "
                       f"{_paper('parser_flip', 'missing -> answer', 'gap'):+.2f})")


def _claim_templates(m):
    _audit(m, _seed(m, 0))  # not judged unless the paper's state was reached
    k = f"K{m['audit']['K']}"
    gaps = {t: _gap(by_k[k])[0] for t, by_k in m["templates"].items()}
    others = [g for t, g in gaps.items() if t != "BIO"]
    holds = gaps["BIO"] > 0 and bool(others) and all(g <= 0 for g in others)
    return holds, f"gap at the audited {k}: " + ", ".join(f"{t} {g:+.2f}" for t, g in gaps.items())


def _claim_ga(m):
    s = _last(m["ga"])["auto"]
    o, t = s["out_acc"]["mean"], s["thk_leak"]["mean"]
    return o == 0 and t == 0, f"GA at the largest K: out acc {o:.2f}, thk leak {t:.2f} (paper 0.00 / 0.00)"


def _claim_retain(m):
    by_k = _seed(m, 0)
    r0, r = by_k["K0"]["retain"], _last(by_k)["retain"]
    n = int(r0.get("n", 60))
    margin = r0["acc"] - r["acc"]
    band = M.diff_band(r0["acc"], n, r["acc"], n)
    ev = (f"retain acc {r0['acc']:.2f} -> {r['acc']:.2f} ({-100 * margin:+.0f} pp, "
          f"band +-{100 * band:.0f} pp over {n} probes; paper {-paper.number(CHAPTER, 'retain_drop_pp_k1600'):.0f} pp)")
    paper.outside_noise(margin, band, ev)
    return margin > 0, ev


def _claim_seed1(m):
    by_k = _seed(m, 1)
    g, lo, hi = _gap(_audit(m, by_k))
    return lo > 0, (f"seed 1, audited K = {m['audit']['K']}: gap {g:+.2f} [{lo:+.2f}, {hi:+.2f}] "
                    f"(K=0: {_gap(by_k['K0'])[0]:+.2f}; paper {_paper_gap('ksweep_seed1')})")


# Every metric key the chapter records (run.record); a claim reading another key is a typo
# and fails loudly (memlab.paper.evaluate), one reading a key this run lacks is 'not run'.
METRIC_KEYS: tuple[str, ...] = (
    'k_values', 'ksweep', 'audit_k', 'audit', 'regime', 'anatomy', 'parser_flip', 'parser_flip_by_k',
    'natural_tag_missing', 'templates', 'ga', 'retain', 'npo_retain_variant',
)


def claims():
    """The paper's claims as predicates over this chapter's metrics."""
    return declare(METRIC_KEYS, [
        Claim("bypass", "After answer-masked NPO the parser-split gap (thk leak - out acc) is positive with a CI "
              "excluding 0", "Sec. 4.1", _claim_bypass, profiles=JUDGED),
        Claim("suppressed", "NPO lowers out acc to about 0.6 of its K = 0 value while the thinking trace "
              "keeps emitting the canary (thk leak >= 0.8 of K = 0)", "Sec. 4.1", _claim_suppressed,
              profiles=JUDGED),
        Claim("gap_grows", "The gap grows from about zero at the smallest K to its value at the audited K",
              "Sec. 4.1, App. B", _claim_grows, profiles=JUDGED),
        Claim("prefill_moves", "At fixed weights, replacing the thinking trace by a non-canary BIO prefill "
              "lowers out acc (Delta_AB = AUTO - BIO > 0, CI excluding 0)", "Sec. 4.2", _claim_prefill,
              profiles=JUDGED),
        Claim("seed_sensitive", "The prefill effect is seed-sensitive: Delta_AB's direction differs between "
              "seeds (both intervals exclude 0, on opposite sides)", "Sec. 4.2, App. F",
              _claim_seed_sensitive, profiles=JUDGED),
        Claim("teacher_forced", f"Teacher-forced top-1 on the canary continuation stays >= {TF_FLOOR} under "
              "every prefill", "App. I", _claim_tf, profiles=JUDGED),
        Claim("parser_flip", "With the closing tag missing, the two parser conventions give gaps of opposite sign "
              "on the same outputs (true by construction once the tag is banned at decode)", "Sec. 4.4",
              _claim_flip, profiles=JUDGED, sanity=True),
        Claim("template_confined", "The bypass gap is confined to the BIO template (META and NONE give gap <= 0)",
              "App. A", _claim_templates, profiles=JUDGED),
        Claim("ga_collapse", "Gradient Ascent drives both out acc and thk leak to 0", "App. D", _claim_ga,
              profiles=JUDGED),
        Claim("retain_drop", "NPO costs retain accuracy on generic probes by the largest K", "App. G",
              _claim_retain, profiles=JUDGED),
        Claim("seed1_gap", "On a second seed the audited gap is again positive with a CI excluding 0",
              "App. F", _claim_seed1, profiles=JUDGED),
    ])
