"""Pooled verdicts over seeds (memlab.report.pooling) and the margins evaluate records (memlab.report.paper)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from memlab.report import paper, pooling
from memlab.report.paper import NOT_JUDGED, NOT_REPRODUCED, NOT_RUN, OUTSIDE_REGIME, REPRODUCED, SEED_DEPENDENT

# Claims whose verdict rests on more than their recorded margins (a p-value, a per-kind count, a
# second comparison, margins that only select which rows to compare, or a check that stops at a
# margin inside its band although another already fails): pooling falls back to a vote of the
# seeds for them whenever a seed's verdict does not follow from its margins (read from each
# chapter's claims.py; every other margin claim holds exactly when every margin is past its band).
BEYOND_MARGINS = {
    "01_bn_illusion": {"corr_reauc", "pre_r_separates"},
    "02_sde": {"unroll"},
    "04_qskew": {"pii_combine"},
    "06_cross_lens": {"npo_keeps_bits", "ga_removes_bits"},
}


def _row(verdict, margin=None, band=None, key="c", kind=paper.CLAIM, **extra):
    row = {"key": key, "claim": "A claim", "source": "Table 1", "verdict": verdict, "evidence": "e", "kind": kind}
    if margin is not None:
        row.update(margin=margin, band=band, what="q")
    return {**row, **extra}


# ----------------------------------------------------------------------------- capture (paper.evaluate)

def _claim(key, check):
    return paper.Claim(key, f"claim {key}", "Table 1", check)


def test_evaluate_records_one_margin_several_and_none():
    def one(m):
        paper.outside_noise(m["x"] - 1.0, 0.5, "x past 1")
        return m["x"] > 1.0, "ev"

    def two(m):
        paper.outside_noise(2.0, 0.5, "first")
        try:  # a caught inside-the-band call is recorded too (checks that combine several rows do so)
            paper.outside_noise(0.1, 0.5, "second")
        except paper.NotJudged:
            pass
        return True, "ev"

    rows = paper.evaluate([_claim("one", one), _claim("two", two), _claim("plain", lambda m: (True, "ev"))],
                          {"x": 3.0}, "cpu")
    by = {r["key"]: r for r in rows}
    assert (by["one"]["margin"], by["one"]["band"], by["one"]["what"]) == (2.0, 0.5, "x past 1")
    assert [m["margin"] for m in by["two"]["margins"]] == [2.0, 0.1] and "margin" not in by["two"]
    assert not {"margin", "margins"} & set(by["plain"])
    # outside evaluate nothing is recorded, and evaluate leaves no collector set behind
    assert paper._MARGINS.get() is None
    with paper.recording_margins() as rec:
        paper.outside_noise(1.0, 0.0, "q")
    assert rec == [{"margin": 1.0, "band": 0.0, "what": "q"}]


def test_evaluate_records_the_margin_of_a_not_judged_claim():
    def inside(m):
        paper.outside_noise(0.2, 0.5, "inside")
        return True, "never"

    row = paper.evaluate([_claim("c", inside)], {}, "cpu")[0]
    assert row["verdict"] == NOT_JUDGED and (row["margin"], row["band"]) == (0.2, 0.5)


# ----------------------------------------------------------------------------- the pooled band

def test_one_seed_is_that_seed():
    assert pooling.pooled_margin([1.5], [0.4]) == (1.5, 0.4)
    p = pooling.pool_rows([_row(REPRODUCED, 1.5, 0.4)])
    assert (p["verdict"], p["margin"], p["band"], p["n_seeds"]) == (REPRODUCED, 1.5, 0.4, 1)
    assert "single seed" in p["evidence"]


def test_equal_seeds_give_the_within_run_band_of_their_mean():
    # no spread between seeds: the t part is 0 and the band is sqrt(n b^2) / n = b / sqrt(n)
    mean, band = pooling.pooled_margin([0.7, 0.7, 0.7, 0.7], [0.6] * 4)
    assert mean == pytest.approx(0.7) and band == pytest.approx(0.6 / 2)
    # 0.5 lies inside each seed's band of 0.6, but past the pooled band of 0.3: four seeds decide it
    assert pooling.pool_rows([_row(NOT_JUDGED, 0.5, 0.6)] * 4)["verdict"] == REPRODUCED


def test_seeds_equal_to_rounding_have_no_spread():
    # 0.05 - |0 - 0| summed in another order: last-bit differences are no between-seed spread
    m = [0.05, 0.05 + 1e-17, 0.05 - 2e-17]
    assert pooling.pooled_margin(m, [0.0, 0.0, 0.0]) == (pytest.approx(0.05), 0.0)
    assert pooling.pooled_margin([0.05, 0.0501, 0.05], [0.0, 0.0, 0.0])[1] > 0  # a real spread stays


def test_t_interval_when_seeds_spread():
    from scipy import stats

    m = np.array([1.0, 2.0, 3.0])
    mean, band = pooling.pooled_margin(m, [0.01] * 3)
    assert mean == pytest.approx(2.0)
    assert band == pytest.approx(stats.t.ppf(0.975, 2) * 1.0 / math.sqrt(3))


def test_pooled_margin_just_inside_and_outside_its_band():
    # three equal seeds with band 0.3 each: pooled band 0.3 / sqrt(3) = 0.1732
    b = 0.3 / math.sqrt(3)
    inside = pooling.pool_rows([_row(NOT_JUDGED, b * 0.99, 0.3)] * 3)
    outside = pooling.pool_rows([_row(NOT_JUDGED, b * 1.01, 0.3)] * 3)
    below = pooling.pool_rows([_row(NOT_JUDGED, -b * 1.01, 0.3)] * 3)
    assert (inside["verdict"], outside["verdict"], below["verdict"]) == (NOT_JUDGED, REPRODUCED, NOT_REPRODUCED)
    assert outside["basis"] == "margins"


def _coverage(n_seeds, true, tau, sigma, draws=3000, seed=0):
    rng = np.random.default_rng(seed)
    band = 1.96 * sigma  # each run's own 95% band, as diff_band gives it
    hits = 0
    for _ in range(draws):
        m = true + tau * rng.standard_normal(n_seeds) + sigma * rng.standard_normal(n_seeds)
        mean, half = pooling.pooled_margin(m, np.full(n_seeds, band))
        hits += abs(mean - true) <= half
    return hits / draws


@pytest.mark.parametrize("n_seeds, tau, sigma", [(3, 0.0, 1.0), (3, 1.0, 1.0), (3, 3.0, 0.3), (5, 1.0, 0.5),
                                                 (2, 1.0, 1.0)])
def test_pooled_band_covers_the_true_margin_at_about_95_percent(n_seeds, tau, sigma):
    # margins = true + seed effect (sd tau) + within-run noise (sd sigma); the band covers the mean
    # margin over seeds at roughly its nominal rate, never far below it
    cov = _coverage(n_seeds, true=0.8, tau=tau, sigma=sigma)
    assert 0.90 <= cov <= 0.995, cov


# ----------------------------------------------------------------------------- verdicts

def test_seeds_that_disagree_outside_their_bands_are_seed_dependent():
    p = pooling.pool_rows([_row(REPRODUCED, 2.0, 0.5), _row(NOT_REPRODUCED, -2.0, 0.5), _row(REPRODUCED, 2.0, 0.5)])
    assert p["verdict"] == SEED_DEPENDENT and p["per_seed"] == [REPRODUCED, NOT_REPRODUCED, REPRODUCED]
    assert p["across"] == "reproduced in 2 of 3 runs"
    # one seed inside its band is not a disagreement: the mean decides
    seeds = [_row(REPRODUCED, m, 0.5) for m in (2.0, 2.2, 2.1, 1.9)] + [_row(NOT_JUDGED, 0.3, 0.5)]
    q = pooling.pool_rows(seeds)
    assert q["verdict"] == REPRODUCED and q["across"] == "reproduced in 4 of 4 runs (1 not judged)"
    # the same seeds with a wide spread (t interval over 3 seeds) leave it not judged
    wide = pooling.pool_rows([seeds[0], seeds[-1], _row(REPRODUCED, 2.5, 0.5)])
    assert wide["verdict"] == NOT_JUDGED


def test_several_margins_pool_as_and():
    both = [{"margin": 1.0, "band": 0.1, "what": "a"}, {"margin": 1.0, "band": 0.1, "what": "b"}]
    one_fails = [{"margin": 1.0, "band": 0.1, "what": "a"}, {"margin": -1.0, "band": 0.1, "what": "b"}]
    p = pooling.pool_rows([_row(REPRODUCED, margins=both)] * 3)
    f = pooling.pool_rows([_row(NOT_REPRODUCED, margins=one_fails)] * 3)
    assert p["verdict"] == REPRODUCED and len(p["margins"]) == 2
    assert f["verdict"] == NOT_REPRODUCED


def test_verdict_claims_vote():
    vote = lambda *vs: pooling.pool_rows([_row(v) for v in vs])["verdict"]  # noqa: E731
    assert vote(REPRODUCED, REPRODUCED, REPRODUCED) == REPRODUCED
    assert vote(NOT_REPRODUCED, NOT_REPRODUCED) == NOT_REPRODUCED
    assert vote(REPRODUCED, NOT_REPRODUCED, NOT_JUDGED) == SEED_DEPENDENT
    assert vote(REPRODUCED, NOT_JUDGED) == NOT_JUDGED
    assert vote(NOT_RUN, NOT_RUN) == NOT_RUN
    sanity = pooling.pool_rows([_row(REPRODUCED, kind=paper.SANITY), _row(NOT_REPRODUCED, kind=paper.SANITY)])
    assert sanity["verdict"] == SEED_DEPENDENT and sanity["basis"] == "verdicts"


def test_margins_that_do_not_decide_fall_back_to_the_vote():
    # reproduced with a clearly negative margin: something beyond the margin decided it (a p-value)
    rows = [_row(NOT_REPRODUCED, 1.0, 0.1), _row(NOT_REPRODUCED, 1.2, 0.1)]
    p = pooling.pool_rows(rows)
    assert p["basis"] == "verdicts" and p["verdict"] == NOT_REPRODUCED and "margin" not in p


def test_regime_pools_on_the_mean_measured_value():
    def gated(value, verdict=REPRODUCED):
        holds = value >= 90
        reg = {"name": "r", "text": "a strong original", "why": "w", "holds": holds,
               "measured": [{"label": "acc (%)", "metric": "a", "value": value, "at_least": 90}]}
        row = _row(OUTSIDE_REGIME if not holds else verdict, 2.0, 0.5, regime=reg)
        if not holds:
            row["ungated"] = {"verdict": verdict, "evidence": "e"}
        return row

    inside = pooling.pool_rows([gated(95), gated(86)])  # mean 90.5: inside the regime
    outside = pooling.pool_rows([gated(93), gated(86)])  # mean 89.5: outside
    assert inside["verdict"] == REPRODUCED and inside["regime"]["holds"] is True
    assert outside["verdict"] == OUTSIDE_REGIME and outside["ungated"]["verdict"] == REPRODUCED
    assert outside["regime"]["measured"][0]["value"] == pytest.approx(89.5)
    assert "mean over the 2 seeds" in outside["evidence"] and "89.5" in outside["evidence"]


def test_pool_claims_and_bad_input():
    runs = [[_row(REPRODUCED, 1.0, 0.1, key="a"), _row(REPRODUCED, key="b")], [_row(REPRODUCED, 1.1, 0.1, key="a")]]
    pooled = {r["key"]: r for r in pooling.pool_claims(runs)}
    assert pooled["a"]["n_seeds"] == 2 and pooled["b"]["n_seeds"] == 1
    with pytest.raises(ValueError, match="at least one seed"):
        pooling.pool_rows([])
    with pytest.raises(ValueError, match="one claim"):
        pooling.pool_rows([_row(REPRODUCED, key="a"), _row(REPRODUCED, key="b")])
    with pytest.raises(ValueError, match="is not one of"):
        pooling.pool_rows([_row("maybe")])
    with pytest.raises(ValueError, match="bands finite and >= 0"):
        pooling.pooled_margin([1.0], [-1.0])
    with pytest.raises(ValueError, match="one length"):
        pooling.pooled_margin([1.0, 2.0], [1.0])


def test_pooled_rows_read_as_words():
    p = pooling.pool_rows([_row(REPRODUCED, 1.0, 0.1), _row(REPRODUCED, 1.2, 0.1)])
    table = paper.claims_table([p])
    for text in (p["evidence"], repr(table), table._repr_html_()):
        assert "{" not in text and "'" not in text.replace("paper's", "")


def test_a_runs_closing_line_says_its_verdicts_are_single_seed(monkeypatch):
    import IPython
    import IPython.display

    from memlab.core import results

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj.data))
    results._show_closing_line({"profile": "smoke", "chapter": "02_sde",
                                "provenance": {"wall_time_s": 3.0, "device": "cpu"}})
    assert len(shown) == 1 and "verdicts are single-seed" in shown[0]
    # a page whose code has a published seed sweep says what its findings and Across seeds column pool
    results._show_closing_line({"profile": "cpu", "chapter": "02_sde",
                                "provenance": {"wall_time_s": 3.0, "device": "cpu"}},
                               results.POOLED_ON_PAGE.format(n=3))
    assert "own verdicts (the claims table's Verdict column) are single-seed" in shown[1]
    assert "pool them over 3 seeds" in shown[1]


# ----------------------------------------------------------------------------- every chapter at smoke

def check_signs(chapter: str, rows: list[dict]) -> list[str]:
    """Rows of a chapter whose recorded margins disagree with their verdict (none allowed outside
    BEYOND_MARGINS), as readable lines."""
    bad = []
    for r in rows:
        if pooling.row_margins(r) and r["key"] not in BEYOND_MARGINS.get(chapter, set()):
            if pooling._own_verdict(r) in (REPRODUCED, NOT_REPRODUCED, NOT_JUDGED) and not pooling.margins_decide(r):
                bad.append(f"{chapter} {r['key']}: {pooling._own_verdict(r)} with margins "
                           f"{[(m['margin'], m['band']) for m in pooling.row_margins(r)]}")
    return bad


def test_counts_in_words_never_read_zero_of_zero():
    from memlab.report.paper import NOT_RUN, OUTSIDE_REGIME

    assert pooling.k_of_n([REPRODUCED, NOT_REPRODUCED, NOT_JUDGED]) == "reproduced in 1 of 2 runs (1 not judged)"
    assert pooling.k_of_n([REPRODUCED]) == "reproduced in 1 of 1 run"
    assert pooling.k_of_n([OUTSIDE_REGIME] * 3) == f"{OUTSIDE_REGIME} in all 3 runs"
    assert pooling.k_of_n([NOT_RUN]) == f"{NOT_RUN} in 1 run"
    mixed = pooling.k_of_n([NOT_JUDGED, NOT_JUDGED, OUTSIDE_REGIME], ["1 without this claim"])
    assert mixed == f"judged in no run (2 not judged; 1 {OUTSIDE_REGIME}; 1 without this claim)"
