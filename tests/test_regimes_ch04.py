"""Chapter 4's regime gates (``regimes:`` of data/papers/04_qskew.yaml) and the predicates issue 29
fixed: each gate, fed metrics just failing it, turns its claims into "outside the paper's regime"
(never "not reproduced"); each fixed predicate, fed a result just inside and just outside its band,
gives "not judged" and a decided verdict; the bands' own functions against closed forms."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from regime_checks import check_requirements_flip
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


def _levels(m: dict) -> dict:
    """``baseline_level`` as the notebook records it, from the score tables as they stand now."""
    frame = lambda t: pd.DataFrame.from_dict(t, orient="index")  # noqa: E731
    return qs.baseline_level_metrics({d: frame(t) for d, t in m["domain"].items()}, frame(m["instruction"]))


def _rows(m: dict, regimes=REGIMES) -> dict:
    # the best baseline's level is read off the score tables after a test's edits, as in a run
    m = {**m, **_levels(m)} if "baseline_level" not in m else m
    return {d["key"]: d for d in paper.evaluate(qs.claims(), m, "cpu", regimes=regimes)}


def test_gated_claims_are_the_regime_dependent_ones():
    gated = {k: n for n, r in REGIMES.items() for k in r["claims"]}
    assert set(gated) == {"dft_best", "member_skew", "ablation", "gain10", "mismatch", "ift_best", "asymmetry",
                          "pii_combine", "pii_skew_alone"}
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
    # Q-Skew (70) beaten by a baseline no stronger than the paper's level allows: "not reproduced"
    m["domain"][G]["Q-Skew"]["AUC"], m["domain"][G]["Calibration"]["AUC"] = 70.0, 78.0
    assert _rows(m)["dft_best"]["verdict"] == paper.NOT_REPRODUCED
    m["regime"]["gap"]["context gain"] = -0.074  # the cpu run's docstrings: the base reads no context
    row = _rows(m)["dft_best"]
    assert row["verdict"] == paper.OUTSIDE_REGIME and row["ungated"]["verdict"] == paper.NOT_REPRODUCED
    assert "-0.074 nats" in row["evidence"] and "0.574 nats below" in row["evidence"]


# ----------------------------------------------------------------------------- how hard the task is

def _bound_requirements(setting: str) -> list[dict]:
    return [q for r in REGIMES.values() for q in r["requires"] if q["metric"] == f"baseline_level/{setting}/AUC"]


def test_the_baseline_bounds_are_the_papers_strongest_best_baseline_plus_its_claimed_margin():
    # paper Tables 1-3: best baselines 70.2, 70.3, 71.0, 60.7 (domain); 65.1, 69.1, 60.1, 55.1 (instruction)
    levels = qs.paper_baseline_levels()
    assert len(levels) == len(qs.PAPER_SETTINGS) == 8
    strongest = levels.groupby("fine-tuning")["best baseline AUC"].max()
    assert strongest.to_dict() == {"domain": 71.0, "instruction": 69.1}
    margin = paper.number(CH, "mean_auc_gain")  # Section 4: "more than 10" AUC points
    for setting, kind in (("gap", "domain"), ("instruction", "instruction")):
        reqs = _bound_requirements(setting)
        assert reqs and all(q["at_most"] == pytest.approx(strongest[kind] + margin) for q in reqs), setting
        assert qs.level_bound(setting) == pytest.approx(strongest[kind] + margin)
    assert not _bound_requirements("same") and qs.level_bound("same") is None  # the control is not gated
    # the best and margin claims, and only they, are gated on the task's difficulty
    gated = {k for r in REGIMES.values() if any(q["metric"].startswith("baseline_level/") for q in r["requires"])
             for k in r["claims"]}
    assert gated == {"dft_best", "ift_best", "gain10"}


@pytest.mark.parametrize("setting,bound", [("gap", 81.0), ("instruction", 79.1)])
def test_a_best_baseline_just_above_the_papers_level_puts_best_and_margin_outside_the_regime(setting, bound):
    failing = {k for r in REGIMES.values() if _bound_requirements(setting)[0] in r["requires"] for k in r["claims"]}
    assert failing == {"gap": {"dft_best", "gain10"}, "instruction": {"ift_best", "gain10"}}[setting]

    def level(auc):  # the strongest baseline at auc, Q-Skew far above it: every claim holds ungated
        m = _in_regime()
        table = m["domain"][G] if setting == "gap" else m["instruction"]
        table["Q-Skew"]["AUC"], table["Calibration"]["AUC"] = 95.0, auc
        return m

    rows, plain = _rows(level(bound)), _rows(level(bound), regimes=None)  # on the bound: inside
    assert all(rows[k]["regime"]["holds"] and rows[k]["verdict"] == paper.REPRODUCED for k in failing)
    rows, plain = _rows(level(bound + 0.1)), _rows(level(bound + 0.1), regimes=None)
    for key, row in rows.items():
        if key in failing:
            assert row["verdict"] == paper.OUTSIDE_REGIME, key
            assert row["ungated"]["verdict"] == plain[key]["verdict"] == paper.REPRODUCED
            assert f"the paper's regime needs at most {bound:g}% (0.1 points above)" in row["evidence"], key
        else:
            assert row["verdict"] == plain[key]["verdict"], key


@pytest.mark.parametrize("name", sorted(REGIMES))
def test_every_requirement_flips_its_claims_just_past_its_bound(name):
    inside = _in_regime()
    check_requirements_flip(CH, qs.claims(), {**inside, **_levels(inside)}, name)


def test_baseline_level_reads_the_best_score_other_than_qskew():
    dft = {G: pd.DataFrame({"AUC": {"Q-Skew": 90.0, "Loss": 60.0, "SAMA": 72.5}}),
           "same": pd.DataFrame({"AUC": {"Q-Skew": 80.0}})}  # no baseline run: left out
    ift = pd.DataFrame({"AUC": {"Q-Skew": 70.0, "Calibration": 75.0, "Min-K%": 74.9}})
    m = {"domain": {d: t.to_dict(orient="index") for d, t in dft.items()},
         "instruction": ift.to_dict(orient="index"), **qs.baseline_level_metrics(dft, ift)}
    assert m["baseline_level"] == {G: {"best baseline": "SAMA", "AUC": 72.5},
                                   "instruction": {"best baseline": "Calibration", "AUC": 75.0}}
    assert qs.best_baseline(m, "instruction") == qs.best_of(m["instruction"]) == ("Calibration", 75.0)
    table = qs.baseline_level_table(m)
    ours = table.loc[f"ours, {qs.OUR_SETTINGS[G][0]}"]
    assert (ours["best baseline"], ours["best baseline AUC"], ours["Q-Skew AUC"]) == ("SAMA", 72.5, 90.0)
    assert ours["gate: best baseline AUC at most"] == 81.0
    assert table.loc["LLaDA-8B-Base, WikiText (paper Table 1)", "best baseline AUC"] == 70.3
    assert table.loc["LLaDA-8B-Instruct, Tulu-3 (paper Table 2)", "best baseline"] == "Calibration"
    assert len(table) == 2 + len(qs.PAPER_SETTINGS)


# ----------------------------------------------------------------------------- the fixed predicates

def _verdict(key: str, edit) -> str:
    m = _in_regime()
    edit(m)
    return _rows(m)[key]["verdict"]


def _skews(members, non, zero_band=0.05):
    def edit(m):
        m["delta_stats"][G]["members"]["Q-Skew (pooled)"] = members
        m["delta_stats"][G]["non-members"]["Q-Skew (pooled)"] = non
        m["delta_zero_band"][G] = zero_band
    return edit


def test_member_skew_carries_the_bootstrap_band():
    # members 0.04, non-members just below zero (near zero by about 0.01, band 0.005); band 0.05 on
    # the difference
    assert _verdict("member_skew", _skews(0.04, -0.011, 0.005)) == paper.REPRODUCED  # difference 0.051
    assert _verdict("member_skew", _skews(0.04, -0.009, 0.005)) == paper.NOT_JUDGED  # difference 0.049
    assert _verdict("member_skew", _skews(0.4, 0.4 + 0.051)) == paper.NOT_REPRODUCED


def test_member_skew_needs_the_non_members_near_zero():
    # members 0.4: near zero means |non-members| <= 0.2 (qs.NEAR_ZERO x members), band 0.05
    assert qs.NEAR_ZERO == 0.5
    assert _verdict("member_skew", _skews(0.4, 0.2 - 0.051)) == paper.REPRODUCED
    assert _verdict("member_skew", _skews(0.4, 0.2 - 0.049)) == paper.NOT_JUDGED
    assert _verdict("member_skew", _skews(0.4, 0.2 + 0.049)) == paper.NOT_JUDGED
    assert _verdict("member_skew", _skews(0.4, 0.2 + 0.051)) == paper.NOT_REPRODUCED
    assert _verdict("member_skew", _skews(0.4, -0.2 - 0.051)) == paper.NOT_REPRODUCED  # left-skewed counts too
    m = _in_regime()
    _skews(0.465, 0.347)(m)  # the cpu run of code version 3: above the members' half
    assert "|0.347| against 0.5 x members = 0.233" in _rows(m)["member_skew"]["evidence"]


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
    rng = np.random.default_rng(0)
    # 3 runs x 200 sequences of 64 tokens; each sequence's tokens share a sequence effect (sd 1) on
    # top of token noise (sd 1): the mean's SE is that of 600 sequence means, not of 38,400 tokens
    seq = rng.normal(0, 1, (600, 1)) + rng.normal(0, 1, (600, 64))
    g = seq.ravel()
    asym = {"gains": {0.5: g}, "sequence_gains": {0.5: seq.mean(1)}, "runs": 3,
            "table": pd.DataFrame([{"mask ratio": 0.5, **metrics.gain_summary(g, 0.5, 4)}]).set_index("mask ratio")}
    row = qs.asymmetry_metrics(asym)["asymmetry"][0.5]
    by_sequence = np.sqrt((1 + 1 / 64) / 600)  # 0.0411
    assert row["mean gain SE"] == pytest.approx(by_sequence, rel=0.1) and row["runs"] == 3
    assert row["mean gain SE"] > 5 * np.std(g, ddof=1) / np.sqrt(g.size)  # the per-token SE: 0.0072
    with pytest.raises(ValueError, match="runs"):
        qs.sequence_bootstrap_se(np.ones(10), runs=3)
    rows = {G: pd.DataFrame({"Q-Skew (pooled)": {"members": 0.4, "non-members": 0.1}})}
    out = qs.delta_metrics(rows, {G: 0.07}, {G: 0.04})
    assert out["delta_band"] == {G: 0.07} and out["delta_stats"][G]["members"]["Q-Skew (pooled)"] == 0.4
    assert out["delta_zero_band"] == {G: 0.04}


def test_skew_zero_band_resamples_the_same_sequences():
    ex = _examples()
    from memlab.experiments.ch04_qskew import tables
    b = tables._skew_boot(ex, 50, 2)
    half = lambda x: (np.quantile(x, 0.975) - np.quantile(x, 0.025)) / 2  # noqa: E731
    assert qs.skew_zero_band(ex, n_boot=50, seed=2) == pytest.approx(half(b[:, 0] / 2 - np.abs(b[:, 1])))
    assert qs.skew_gap_band(ex, n_boot=50, seed=2) == pytest.approx(half(b[:, 0] - b[:, 1]))


def test_mismatch_is_judged_on_its_cost_with_the_standing_a_labelled_part():
    # instruct side: worst mismatched 79.0 against Calibration, the instruction section's best baseline
    m = _in_regime()
    band = qs.auc_diff_band(79.0, 77.0, m)

    def cal(x):
        return lambda m: m["instruction"]["Calibration"].__setitem__("AUC", x)

    for x, where in ((79.0 - band - 0.1, "above"), (79.0 - band + 0.1, "inside the band"),
                     (79.0 + band + 0.1, "below")):
        m = _in_regime()
        cal(x)(m)
        row = _rows(m)["mismatch"]
        assert row["verdict"] == paper.REPRODUCED  # the cost alone decides: drops of 4 and 3 points
        assert row["evidence"].endswith(f"instruct 79.0 vs Calibration {x:.1f} (band \u00b1"
                                        f"{qs.auc_diff_band(79.0, x, m):.1f}): {where}]")
        assert "[separate part, not in this verdict: still above the strongest baseline?" in row["evidence"]


def test_pii_claims_are_gated_on_a_ce_ranking_off_its_ceiling():
    def ce(x):
        return lambda m: m["pii"].__setitem__("ce_rate", x)

    for key in ("pii_combine", "pii_skew_alone"):
        assert _verdict(key, ce(50.0)) == paper.REPRODUCED  # on the bound: inside
        assert _verdict(key, ce(50.5)) == paper.OUTSIDE_REGIME


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
