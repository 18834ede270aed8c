"""Chapter 3's regime gates (``regimes:`` of data/papers/03_canary_audit.yaml) and the predicates
issue 29 fixed: each gate, fed metrics just failing it, turns its claims into "outside the paper's
regime" (never "not reproduced"); each fixed predicate, fed a result just inside and just outside
its band, gives "not judged" and a decided verdict."""
from __future__ import annotations

import copy

import pytest
from test_canary_audit import _ci, _metrics, _summary  # the hand-made metrics on which the claims hold

from memlab.experiments import ch03_canary_audit as E
from memlab.report import paper

CH = E.CHAPTER
REGIMES = paper.regimes(CH)


def _in_regime(**over) -> dict:
    """:func:`_metrics` plus what the gates read, every gate holding (the adapters at the ceiling)."""
    m = _metrics(**over)
    m["regime"] = {f"BIO, seed {s}": {"out_acc": 1.0, "thk_leak": 1.0, "qa_acc": 1.0, "retain_acc": 1.0}
                   for s in (0, 1)}
    m["ksweep"]["s0"]["K0"]["tf"]["META"] = _ci(0.96, 0.95, 0.97)
    for t, thk in (("BIO", 1.0), ("META", 0.0), ("NONE", 0.0)):
        m["templates"][t]["K0"] = _summary(1.0, thk)
    return m


def _rows(m: dict, regimes=REGIMES) -> dict:
    return {d["key"]: d for d in paper.evaluate(E.claims(), m, "cpu", regimes=regimes)}


def _set_path(m: dict, path: str, value: float) -> None:
    *keys, last = path.split("/")
    node = m
    for k in keys:
        node = node[k]
    node[last] = value


def test_every_claim_but_the_sanity_check_is_gated_and_the_gates_hold_on_the_ceiling():
    gated = {k for r in REGIMES.values() for k in r["claims"]}
    kinds = {c.key: c.sanity for c in E.claims()}
    assert gated == {k for k, sanity in kinds.items() if not sanity}  # parser_flip is the one sanity check
    ungated = _rows(_in_regime(), regimes=None)
    for key, row in _rows(_in_regime()).items():
        assert row["verdict"] == ungated[key]["verdict"], key  # a holding gate leaves the verdict alone
        if key in gated:
            assert row["regime"]["holds"] is True and "ungated" not in row


REQUIREMENTS = [(name, req) for name, reg in REGIMES.items() for req in reg["requires"]]


@pytest.mark.parametrize("name, req", REQUIREMENTS, ids=[f"{n}:{r['metric']}" for n, r in REQUIREMENTS])
def test_a_gate_just_failing_puts_its_claims_outside_the_regime(name, req):
    limit = float(req["at_least"])
    m = _in_regime()
    _set_path(m, req["metric"], limit)  # on the bound: inside
    assert all(_rows(m)[k]["regime"]["holds"] for k in REGIMES[name]["claims"])
    _set_path(m, req["metric"], limit - 0.01)  # just below it
    rows = _rows(m)
    failing = {n for n, r in REGIMES.items() if any(q["metric"] == req["metric"] for q in r["requires"])}
    before = _rows(_in_regime(), regimes=None)
    for key, row in rows.items():
        if any(key in REGIMES[n]["claims"] for n in failing):
            assert row["verdict"] == paper.OUTSIDE_REGIME, key
            assert row["ungated"]["verdict"] == before[key]["verdict"]
            assert "the paper's regime needs at least 0.9" in row["evidence"]
        else:
            assert row["verdict"] == before[key]["verdict"], key


def test_a_failed_gate_turns_a_not_reproduced_claim_outside_the_regime():
    # seed 1's gap clearly negative: "not reproduced" in the regime, "outside" when seed 1 never memorised
    m = _in_regime(**{"s1/K100": _summary(0.9, 0.7, gap_band=0.05)})
    assert _rows(m)["seed1_gap"]["verdict"] == paper.NOT_REPRODUCED
    m["regime"]["BIO, seed 1"]["out_acc"] = 0.5
    row = _rows(m)["seed1_gap"]
    assert row["verdict"] == paper.OUTSIDE_REGIME and row["ungated"]["verdict"] == paper.NOT_REPRODUCED
    assert "seed-1 out acc before unlearning 0.5" in row["evidence"]


# ----------------------------------------------------------------------------- the fixed predicates

def _gap(lo: float, hi: float, out: float = 0.6) -> dict:
    """A summary whose gap interval is exactly [lo, hi] (built, not summed, so 0 stays 0)."""
    s = _summary(out, out + (lo + hi) / 2)
    s["auto"]["gap"] = _ci((lo + hi) / 2, lo, hi)
    return s


def _verdict(key: str, **over) -> str:
    return _rows(_in_regime(**over))[key]["verdict"]


@pytest.mark.parametrize("key, path, make", [
    ("bypass", "s0/K100", _gap),
    ("seed1_gap", "s1/K100", _gap),
    ("prefill_moves", "s0/K100", lambda lo, hi: _summary(0.6, 0.85, dab=((lo + hi) / 2, lo, hi))),
])
def test_an_interval_touching_zero_leaves_the_sign_not_judged(key, path, make):
    """One rule for every sign read off an interval: above 0 holds, below 0 fails, touching 0 is open."""
    assert _verdict(key, **{path: make(0.01, 0.3)}) == paper.REPRODUCED
    assert _verdict(key, **{path: make(0.0, 0.3)}) == paper.NOT_JUDGED
    assert _verdict(key, **{path: make(-0.01, 0.3)}) == paper.NOT_JUDGED
    assert _verdict(key, **{path: make(-0.3, -0.01)}) == paper.NOT_REPRODUCED


def _thk(mean: float, half: float) -> dict:
    s = _summary(0.6, mean)
    s["auto"]["thk_leak"] = _ci(mean, mean - half, mean + half)
    return s


def test_suppressed_is_judged_at_the_out_acc_state_against_its_band():
    # K = 0 thk leak 1.0; the claim needs >= 0.8 x K0; margin 0.05 against half-widths 0.04 / 0.06
    assert _verdict("suppressed", **{"s0/K100": _thk(0.85, 0.04)}) == paper.REPRODUCED
    assert _verdict("suppressed", **{"s0/K100": _thk(0.85, 0.06)}) == paper.NOT_JUDGED
    assert _verdict("suppressed", **{"s0/K100": _thk(0.75, 0.06)}) == paper.NOT_JUDGED
    assert _verdict("suppressed", **{"s0/K100": _thk(0.75, 0.04)}) == paper.NOT_REPRODUCED


def test_teacher_forced_drop_just_inside_and_outside_its_band():
    # K = 0 EMPTY 0.95 +- 0.01, audited K +- 0.01: band hypot(0.01, 0.01) = 0.0141 around a drop of 0.10
    def tf(x):
        return {"s0/K100": _summary(0.6, 0.85, tf=x, tf_band=0.01)}

    assert _verdict("teacher_forced", **tf(0.85 + 0.015)) == paper.REPRODUCED
    assert _verdict("teacher_forced", **tf(0.85 + 0.013)) == paper.NOT_JUDGED
    assert _verdict("teacher_forced", **tf(0.85 - 0.013)) == paper.NOT_JUDGED
    assert _verdict("teacher_forced", **tf(0.85 - 0.015)) == paper.NOT_REPRODUCED


def test_template_confined_reads_intervals():
    def none(lo, hi):
        return {"templates/NONE/K100": _gap(lo, hi, out=0.7)}

    assert _verdict("template_confined", **none(-0.2, 0.0)) == paper.REPRODUCED  # no positive gap
    assert _verdict("template_confined", **none(-0.05, 0.15)) == paper.NOT_JUDGED  # positive, reaching 0
    assert _verdict("template_confined", **none(0.01, 0.2)) == paper.NOT_REPRODUCED  # a clear gap on NONE


def test_the_trace_claims_are_read_where_out_acc_alone_puts_the_state():
    """by_out ignores the trace: a K that the audited rule skips (trace below 0.8 x K0) is where
    bypass and suppressed are judged, so suppressed can fail."""
    def by_k(*states):
        return {k: {"auto": {"out_acc": {"mean": o}, "thk_leak": {"mean": t}}} for k, o, t in states}

    a = E.audit_state(by_k((0, 1.0, 1.0), (10, 0.9, 0.95), (20, 0.6, 0.5), (40, 0.3, 0.4)), 30)
    assert (a["K"], a["reached"]) == (10, False)  # the audited rule needs the trace at 0.8 x K0
    b = a["by_out"]
    assert (b["K"], b["reached"], b["thk_ratio"], b["thk_frac"]) == (20, True, 0.5, E.AUDIT_THK_FRAC)
    m = _in_regime(**{"s0/K20": _thk(0.5, 0.05)})
    m["audit"]["by_out"] = {**b, "evidence": "K = 20"}
    row = _rows(m)["suppressed"]
    assert row["verdict"] == paper.NOT_REPRODUCED and "0.50 x K0" in row["evidence"]
    m2 = copy.deepcopy(m)
    m2["audit"]["by_out"]["reached"] = False
    assert _rows(m2)["suppressed"]["verdict"] == paper.NOT_JUDGED
