"""Chapter 3's claims: the recorded metric keys, the claims' thresholds, their predicates and :func:`claims`.

Each predicate reads the recorded metrics (``run.metrics``) only; a claim made at the audited
K is "not judged" when the sweep never reached the paper's audited state (``audit``), and one
whose margin lies inside its noise band (half the width of the recorded 95% intervals, or
:func:`memlab.science.metrics.diff_band` for the retain probes) is "not judged" too. A sign read off a
95% interval (a gap, Delta_AB) is decided only when the interval excludes 0: one that holds or
touches 0 leaves the sign "not judged" in every claim (:func:`_sign`). The claims about the
trace at the audited state (bypass, suppressed, gap_grows) are read at the K chosen by out acc
alone (``audit["by_out"]``): at a K picked with the trace's help they would hold by construction.
The regime gates (the memorised adapters at the paper's ceiling) are in the chapter's yaml.
"""
from __future__ import annotations

import numpy as np

from memlab.report import paper
from memlab.report.paper import Claim, declare
from memlab.science import metrics as M

from .spec import CHAPTER

#: smoke models are untrained toys: a verdict there would mean nothing
JUDGED = ("cpu", "paper")


def _paper(table: str, row: str, col: str) -> float:
    """One cell of a paper table (``data/papers/03_canary_audit.yaml``), quoted in the evidence."""
    return float(paper.table(CHAPTER, table).loc[row, col])


#: App. I: teacher-forced top-1 "remains 0.90-1.00" after NPO on adapters memorised to the ceiling
#: (out acc 1.00 at K = 0): the most the paper's continuation scores fall is 1.00 minus its own
#: minimum (EMPTY, 0.90). Judged as a drop from our own K = 0 value, because our EMPTY arm sits on
#: the paper's minimum before any unlearning (0.906), where a floor of 0.90 could not fail fairly.
TF_DROP = round(1.0 - float(paper.table(CHAPTER, "teacher_forced").loc["seed 0"].min()), 6)


def _paper_gap(table: str) -> str:
    """The paper's gap at its K = 1600 with its interval, as the evidence quotes it: ``+0.23 [0.13, 0.35]``."""
    return (f"{_paper(table, 'K=1600', 'gap'):+.2f} [{_paper(table, 'K=1600', 'gap_low'):.2f}, "
            f"{_paper(table, 'K=1600', 'gap_high'):.2f}]")


def _paper_change(col: str, k_from: str, fmt: str = ".2f") -> str:
    """The paper's seed-0 ``col`` from ``k_from`` to its K = 1600, as ``1.00 -> 0.60``."""
    return f"{_paper('ksweep_seed0', k_from, col):{fmt}} -> {_paper('ksweep_seed0', 'K=1600', col):{fmt}}"


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


def _sign(ci: dict, what: str) -> bool:
    """Whether a ``{"mean", "low", "high"}`` 95% interval lies above 0 (True) or below it (False).

    An interval that holds or touches 0 leaves the sign undetermined: :class:`paper.NotJudged`,
    in every claim of the chapter alike. ``what`` names the quantity in the evidence.
    """
    if ci["low"] > 0:
        return True
    if ci["high"] < 0:
        return False
    raise paper.NotJudged(f"{what}: the interval {_ci(ci)} reaches 0, so its sign is not determined")


def _decided(margin: float, band: float, ev: str) -> tuple[bool, str]:
    """(margin > 0, ev) once the margin lies outside its noise band (else not judged)."""
    paper.outside_noise(margin, band, ev)
    return margin > 0, ev


def _by_out(m: dict, by_k: dict) -> tuple[int, dict]:
    """(K, summary) of the state chosen by out acc alone; not judged when out acc never came near 0.6 x K0."""
    b = m["audit"]["by_out"]
    if not b["reached"]:
        raise paper.NotJudged(f"the sweep never brought out acc to the paper's share of K = 0 ({b['evidence']})")
    return b["K"], by_k[f"K{b['K']}"]


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
    """Seed 0's gap at the K chosen by out acc alone lies above 0 (its interval excludes 0)."""
    by_k = _seed(m, 0)
    k, s = _by_out(m, by_k)
    gap = s["auto"]["gap"]
    ev = (f"seed 0, K = {k} (out acc nearest 0.6 x K0): gap {_ci(gap)} "
          f"(K=0: {_gap(by_k['K0'])[0]:+.2f}; paper {_paper_gap('ksweep_seed0')})")
    return _sign(gap, ev), ev


def _claim_suppressed(m):
    """At the K chosen by out acc alone (out acc near 0.6 x K0), thk leak stays at least
    ``thk_frac`` (0.8) of its K = 0 value, outside the band of the thk-leak interval there."""
    b, by_k = m["audit"]["by_out"], _seed(m, 0)
    k, s = _by_out(m, by_k)
    thk0, thk = by_k["K0"]["auto"]["thk_leak"]["mean"], s["auto"]["thk_leak"]
    if thk0 <= 0:
        raise paper.NotJudged(f"K = 0 thk leak {thk0:.2f}: the trace never emitted the canary")
    margin, band = thk["mean"] / thk0 - b["thk_frac"], _half(thk) / thk0
    ev = (f"{b['evidence']}, thk leak {thk['mean'] / thk0:.2f} x K0 (claim >= {b['thk_frac']:.2f}, band "
          f"+-{band:.2f}); K=0 out acc {by_k['K0']['auto']['out_acc']['mean']:.2f}, thk leak {thk0:.2f} "
          f"(paper {_paper_change('out_acc', 'K=0')}, thk {_paper('ksweep_seed0', 'K=1600', 'thk_leak'):.2f})")
    return _decided(margin, band, ev)


def _claim_grows(m):
    by_k = _seed(m, 0)
    k, s = _by_out(m, by_k)
    first, last = _first_k(by_k)["auto"]["gap"], s["auto"]["gap"]
    margin, band = last["mean"] - first["mean"], float(np.hypot(_half(first), _half(last)))
    ev = (f"seed 0 gap {first['mean']:+.2f} at the smallest K -> {last['mean']:+.2f} at K = {k} "
          f"(margin {margin:+.2f}, band +-{band:.2f}; paper {_paper_change('gap', 'K=100', '+.2f')})")
    return _decided(margin, band, ev)


def _claim_prefill(m):
    by_k = _seed(m, 0)
    s = _audit(m, by_k)
    p, p0 = s["prefill"]["BIO"]["auto_minus"], by_k["K0"]["prefill"]["BIO"]["auto_minus"]
    # the paper's sign: the prefill *lowers* out acc (0.60 -> 0.37), so Delta_AB = AUTO - BIO > 0
    ev = (f"seed 0 Delta_AB = {_ci(p)} at the audited K (K=0: {_ci(p0)}) vs gap "
          f"{_gap(s)[0]:+.2f} (paper {_paper('ksweep_seed0', 'K=1600', 'delta_ab'):+.2f} vs "
          f"{_paper('ksweep_seed0', 'K=1600', 'gap'):+.2f})")
    return _sign(p, ev), ev


def _claim_seed_sensitive(m):
    d = [_audit(m, _seed(m, s))["prefill"]["BIO"]["auto_minus"] for s in (0, 1)]
    d0 = [_seed(m, s)["K0"]["prefill"]["BIO"]["auto_minus"]["mean"] for s in (0, 1)]
    ev = (f"Delta_AB seed 0 {_ci(d[0])}, seed 1 {_ci(d[1])} (K=0: {d0[0]:+.2f}, {d0[1]:+.2f}; "
          f"paper {_paper('ksweep_seed0', 'K=1600', 'delta_ab'):+.2f}, then out acc at ceiling)")
    signs = [_sign(x, f"{ev}; seed {s}") for s, x in enumerate(d)]
    return signs[0] != signs[1], ev


def _claim_tf(m):
    """Under every prefill, teacher-forced top-1 at the audited K is at most TF_DROP below its
    K = 0 value; the prefill with the largest drop decides, its band the two intervals' half-widths
    combined."""
    by_k = _seed(m, 0)
    tf, tf0 = _audit(m, by_k)["tf"], by_k["K0"]["tf"]
    mode = max(tf, key=lambda k: tf0[k]["mean"] - tf[k]["mean"])
    drop = tf0[mode]["mean"] - tf[mode]["mean"]
    margin, band = TF_DROP - drop, float(np.hypot(_half(tf[mode]), _half(tf0[mode])))
    ev = ("teacher-forced top-1 " + ", ".join(f"{k} {v['mean']:.3f} (K=0 {tf0[k]['mean']:.3f})"
                                              for k, v in tf.items())
          + f"; largest drop ({mode}) {drop:+.3f} against at most {TF_DROP:.2f}, band +-{band:.3f} (paper "
             f"{_paper_range('teacher_forced', 'seed 0')} after NPO, from the ceiling)")
    return _decided(margin, band, ev)


def _claim_flip(m):
    f = m["parser_flip"]
    t, a = f["trace"]["gap"]["mean"], f["answer"]["gap"]["mean"]
    return t > 0 > a, (f"gap {t:+.2f} (missing -> trace) vs {a:+.2f} (missing -> answer); {f['source']} "
                       f"(paper {_paper('parser_flip', 'missing -> trace', 'gap'):+.2f} / "
                       f"{_paper('parser_flip', 'missing -> answer', 'gap'):+.2f})")


def _claim_templates(m):
    """BIO's gap at the audited K lies above 0 (:func:`_sign`) and no other template's gap is
    positive: one whose interval excludes 0 above fails the claim, one whose mean is positive but
    whose interval reaches 0 leaves it not judged."""
    _audit(m, _seed(m, 0))  # not judged unless the paper's state was reached
    k = f"K{m['audit']['K']}"
    gaps = {t: by_k[k]["auto"]["gap"] for t, by_k in m["templates"].items()}
    ev = f"gap at the audited {k}: " + ", ".join(f"{t} {_ci(g)}" for t, g in gaps.items())
    others = {t: g for t, g in gaps.items() if t != "BIO"}
    if not others:
        raise paper.NotJudged(f"{ev}: no template other than BIO was run")
    if any(g["low"] > 0 for g in others.values()):
        return False, ev
    unclear = [t for t, g in others.items() if g["mean"] > 0]
    if unclear:
        raise paper.NotJudged(f"{ev}: the positive gap of {', '.join(unclear)} reaches 0")
    return _sign(gaps["BIO"], f"{ev}; BIO"), ev


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
    return _decided(margin, band, ev)


def _claim_seed1(m):
    by_k = _seed(m, 1)
    gap = _audit(m, by_k)["auto"]["gap"]
    ev = (f"seed 1, audited K = {m['audit']['K']}: gap {_ci(gap)} "
          f"(K=0: {_gap(by_k['K0'])[0]:+.2f}; paper {_paper_gap('ksweep_seed1')})")
    return _sign(gap, ev), ev


# Every metric key the chapter records (run.record); a claim reading another key is a typo
# and fails loudly (memlab.report.paper.evaluate), one reading a key this run lacks is 'not run'.
METRIC_KEYS: tuple[str, ...] = (
    'k_values', 'ksweep', 'audit_k', 'audit', 'regime', 'anatomy', 'parser_flip', 'parser_flip_by_k',
    'natural_tag_missing', 'templates', 'ga', 'retain', 'npo_retain_variant',
)


def claims():
    """The paper's claims as predicates over this chapter's metrics."""
    return declare(METRIC_KEYS, [
        Claim("bypass", "After answer-masked NPO has lowered out acc to about 0.6 of its K = 0 value, the "
              "parser-split gap (thk leak - out acc) is positive with a CI excluding 0", "Sec. 4.1",
              _claim_bypass, profiles=JUDGED),
        Claim("suppressed", "When NPO has lowered out acc to about 0.6 of its K = 0 value, the thinking trace "
              "keeps emitting the canary (thk leak >= 0.8 of K = 0)", "Sec. 4.1", _claim_suppressed,
              profiles=JUDGED),
        Claim("gap_grows", "The gap grows from about zero at the smallest K to its value where out acc is "
              "about 0.6 of K = 0", "Sec. 4.1, App. B", _claim_grows, profiles=JUDGED),
        Claim("prefill_moves", "At fixed weights, replacing the thinking trace by a non-canary BIO prefill "
              "lowers out acc (Delta_AB = AUTO - BIO > 0, CI excluding 0)", "Sec. 4.2", _claim_prefill,
              profiles=JUDGED),
        Claim("seed_sensitive", "The prefill effect is seed-sensitive: Delta_AB's direction differs between "
              "seeds (both intervals exclude 0, on opposite sides)", "Sec. 4.2, App. F",
              _claim_seed_sensitive, profiles=JUDGED),
        Claim("teacher_forced", "Teacher-forced top-1 on the canary continuation stays high under every prefill "
              f"after NPO: at most {TF_DROP:.2f} below its value before unlearning", "App. I", _claim_tf,
              profiles=JUDGED),
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
