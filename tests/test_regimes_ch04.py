"""Chapter 4's regime gates (``regimes:`` of data/papers/04_qskew.yaml) and the predicates issue 29
fixed: each gate, fed metrics just failing it, turns its claims into "outside the paper's regime"
(never "not reproduced"); each fixed predicate, fed a result just inside and just outside its band,
gives "not judged" and a decided verdict; the bands' own functions against closed forms."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_qskew_experiments import _paper_like  # hand-made metrics on which every claim holds

from memlab.experiments import ch04_qskew as qs
from memlab.report import paper
from memlab.science import metrics

CH = qs.CHAPTER
REGIMES = paper.regimes(CH)
G = qs.HEADLINE


def _in_regime() -> dict:
    m = _paper_like()
    m["regime"] = {"same": {"context gain": 1.8}, "gap": {"context gain": 1.0}}
    return m


def _rows(m: dict, regimes=REGIMES) -> dict:
    return {d["key"]: d for d in paper.evaluate(qs.claims(), m, "cpu", regimes=regimes)}


def test_gated_claims_are_the_regime_dependent_ones():
    gated = {k: n for n, r in REGIMES.items() for k in r["claims"]}
    assert set(gated) == {"dft_best", "member_skew", "ablation", "gain10", "mismatch", "ift_best", "asymmetry"}
    # the domain-gap claims are gated on the docstrings' context gain, the instruction side on WikiText's
    for key in ("dft_best", "member_skew", "ablation", "gain10", "mismatch"):
        assert any(q["metric"] == f"regime/{G}/context gain" for q in REGIMES[gated[key]]["requires"]), key
    assert {c.key for c in qs.claims() if c.sanity} == {"per_step"}  # never gated
    rows, plain = _rows(_in_regime()), _rows(_in_regime(), regimes=None)
    assert {k: r["verdict"] for k, r in rows.items()} == {k: r["verdict"] for k, r in plain.items()}
    assert all(rows[k]["regime"]["holds"] for k in gated)


@pytest.mark.parametrize("setting", ["same", "gap"])
def test_a_context_gain_just_below_the_guard_puts_its_claims_outside_the_regime(setting):
    path = f"regime/{setting}/context gain"
    failing = {k for r in REGIMES.values() if any(q["metric"] == path for q in r["requires"])
               for k in r["claims"]}
    assert failing
    m = _in_regime()
    m["regime"][setting]["context gain"] = 0.5  # on the bound: inside
    assert all(_rows(m)[k]["regime"]["holds"] for k in failing)
    m["regime"][setting]["context gain"] = 0.49
    rows, before = _rows(m), _rows(_in_regime(), regimes=None)
    for key, row in rows.items():
        if key in failing:
            assert row["verdict"] == paper.OUTSIDE_REGIME, key
            assert row["ungated"]["verdict"] == before[key]["verdict"] == paper.REPRODUCED
            assert "the paper's regime needs at least 0.5 nats" in row["evidence"]
        else:
            assert row["verdict"] == before[key]["verdict"], key


def test_the_published_domain_gap_is_outside_the_regime_not_a_failure_of_the_paper():
    m = _in_regime()
    m["domain"][G]["Calibration"]["AUC"] = 85.0  # Q-Skew (80) beaten: "not reproduced" in the regime
    assert _rows(m)["dft_best"]["verdict"] == paper.NOT_REPRODUCED
    m["regime"]["gap"]["context gain"] = -0.074  # the cpu run's docstrings: the base reads no context
    row = _rows(m)["dft_best"]
    assert row["verdict"] == paper.OUTSIDE_REGIME and row["ungated"]["verdict"] == paper.NOT_REPRODUCED
    assert "-0.074 nats" in row["evidence"] and "0.574 nats below" in row["evidence"]


# ----------------------------------------------------------------------------- the fixed predicates

def _verdict(key: str, edit) -> str:
    m = _in_regime()
    edit(m)
    return _rows(m)[key]["verdict"]


def test_member_skew_carries_the_bootstrap_band():
    # members 0.4; band 0.05 on the difference
    def non(x):
        return lambda m: m["delta_stats"][G]["non-members"].__setitem__("Q-Skew (pooled)", x)

    assert _verdict("member_skew", non(0.4 - 0.051)) == paper.REPRODUCED
    assert _verdict("member_skew", non(0.4 - 0.049)) == paper.NOT_JUDGED
    assert _verdict("member_skew", non(0.4 + 0.049)) == paper.NOT_JUDGED
    assert _verdict("member_skew", non(0.4 + 0.051)) == paper.NOT_REPRODUCED


def test_gain10_is_judged_against_the_papers_own_tables():
    # Tables 1-3: 13.2, 10.0, 9.7 (LLaDA DFT), 7.7, 12.3, 7.1 (LLaDA IFT), 2.7, 4.0 (Dream): mean 8.3375
    assert qs.paper_mean_gain() == pytest.approx(66.7 / 8)
    assert qs.GAIN_MIN == 8.3
    m = _in_regime()
    b = [qs.auc_diff_band(80.0, 68.0, m), qs.auc_diff_band(82.0, 70.0, m)]
    band = float(np.sqrt(np.sum(np.square(b))) / 2)

    def mean_gain(g):  # both sections' gains equal g: SAMA (domain) and Calibration (instruction) moved
        def edit(m):
            m["domain"][G]["SAMA"]["AUC"] = 80.0 - g
            m["instruction"]["Calibration"]["AUC"] = 82.0 - g
        return edit

    # the band moves slightly with the AUCs; 0.1 points of slack either side of it
    assert _verdict("gain10", mean_gain(8.3 + band + 0.1)) == paper.REPRODUCED
    assert _verdict("gain10", mean_gain(8.3 + band - 0.1)) == paper.NOT_JUDGED
    assert _verdict("gain10", mean_gain(8.3 - band + 0.1)) == paper.NOT_JUDGED
    assert _verdict("gain10", mean_gain(8.3 - band - 0.1)) == paper.NOT_REPRODUCED
    assert _verdict("gain10", mean_gain(9.5)) != paper.NOT_REPRODUCED  # below 10, above the tables' 8.3


def test_asymmetry_steps_carry_bands():
    # SE 0.005 each: a step's band is 1.96 x hypot(0.005, 0.005) = 0.01386
    band = 1.96 * np.hypot(0.005, 0.005)

    def last(x):
        return lambda m: m["asymmetry"][0.75].__setitem__("mean gain (nats)", x)

    assert _verdict("asymmetry", last(0.2 - band - 0.001)) == paper.REPRODUCED
    assert _verdict("asymmetry", last(0.2 - band + 0.001)) == paper.NOT_JUDGED
    assert _verdict("asymmetry", last(0.2 + band - 0.001)) == paper.NOT_JUDGED
    assert _verdict("asymmetry", last(0.2 + band + 0.001)) == paper.NOT_REPRODUCED


def test_per_step_is_a_sanity_check_that_any_saturating_gain_passes():
    # totals 0.10, 0.15, 0.18 nats (rising, concave in the ratio): per step they fall regardless
    m = _in_regime()
    for r, g in ((0.25, 0.10), (0.5, 0.15), (0.75, 0.18)):
        m["asymmetry"][r].update({"mean gain (nats)": g, "gain per masked step": g / (4 * r)})
    rows = _rows(m)
    assert rows["per_step"]["kind"] == paper.SANITY and rows["per_step"]["verdict"] == paper.REPRODUCED
    assert rows["asymmetry"]["verdict"] == paper.NOT_REPRODUCED


def test_ablation_quotes_the_same_domain_control():
    m = _in_regime()
    m["ablation"]["same"] = {"Q-Skew": {"AUC": 85.3}, "mean instead of skewness": {"AUC": 92.1},
                             "w/o cyclic sampling": {"AUC": 83.2}}
    ev = _rows(m)["ablation"]["evidence"]
    assert "same-domain control: full minus mean instead of skewness -6.8" in ev


# ----------------------------------------------------------------------------- the recorded bands

def _examples(n_mem=40, n_non=40, seed=0):
    rng = np.random.default_rng(seed)
    deltas = [rng.gamma(2.0, 1.0, 30) for _ in range(n_mem)] + [rng.normal(0, 1, 30) for _ in range(n_non)]
    return {"deltas": deltas, "labels": np.r_[np.ones(n_mem), np.zeros(n_non)]}


def test_skew_gap_band_is_invariant_to_shift_and_scale_and_shrinks_with_data():
    ex = _examples()
    band = qs.skew_gap_band(ex, n_boot=100, seed=1)
    assert band > 0
    moved = {**ex, "deltas": [3.0 * d + 2.0 for d in ex["deltas"]]}  # Q-Skew is shift- and scale-invariant
    assert qs.skew_gap_band(moved, n_boot=100, seed=1) == pytest.approx(band, rel=1e-9)
    four = {"deltas": ex["deltas"] * 4, "labels": np.tile(ex["labels"], 4)}  # 4x the sequences
    assert 0.3 < qs.skew_gap_band(four, n_boot=100, seed=1) / band < 0.7  # about 1 / sqrt(4)
    with pytest.raises(ValueError, match="n_boot"):
        qs.skew_gap_band(ex, n_boot=5)
    with pytest.raises(ValueError, match="labels 1 and 0"):
        qs.skew_gap_band({"deltas": ex["deltas"][:3], "labels": np.ones(3)})


def test_delta_and_asymmetry_metrics_record_their_bands():
    g = np.array([0.0, 0.0, 0.0, 4.0])  # sample sd 2, so the standard error of the mean is 1
    asym = {"gains": {0.5: g}, "table": pd.DataFrame([{"mask ratio": 0.5, **metrics.gain_summary(g, 0.5, 4)}])
            .set_index("mask ratio")}
    assert qs.asymmetry_metrics(asym)["asymmetry"][0.5]["mean gain SE"] == pytest.approx(1.0)
    rows = {G: pd.DataFrame({"Q-Skew (pooled)": {"members": 0.4, "non-members": 0.1}})}
    out = qs.delta_metrics(rows, {G: 0.07})
    assert out["delta_band"] == {G: 0.07} and out["delta_stats"][G]["members"]["Q-Skew (pooled)"] == 0.4


def test_mismatch_comparisons_carry_auc_bands():
    # instruct side: golden 82.0, SAMA 75.0; the para-modification reference is the worst mismatched one
    m = _in_regime()
    band = qs.auc_diff_band(82.0, 76.0, m)

    def para(x):
        return lambda m: m["table4_instruct"]["Para-modification reference"].__setitem__("AUC", x)

    # a drop of 6 points is the claim's limit; the band moves little with the AUC, hence 0.1 of slack
    assert _verdict("mismatch", para(76.0 + band + 0.1)) == paper.REPRODUCED
    assert _verdict("mismatch", para(76.0 + band - 0.1)) == paper.NOT_JUDGED
    assert _verdict("mismatch", para(76.0 - band + 0.1)) == paper.NOT_JUDGED
    assert _verdict("mismatch", para(76.0 - band - 0.1)) == paper.NOT_REPRODUCED
