"""Chapter 5's regime gates (data/papers/05_capacity.yaml, issue 29), the quantities they read
(``tables.regime_metrics``) and the fixed predicates (``law_text``'s noise floor, ``tfidf``'s
missing p-value).

The gates are the chapter's real yaml; the metrics are constructed (``_good_metrics`` of
tests/test_capacity_experiments.py: every claim reproduced, outside every band) with the regime
quantities set just inside or just outside each requirement.
"""
import importlib
import math

import numpy as np
import pandas as pd
import pytest
from regime_checks import check_requirements_flip, judge, set_path
from test_capacity_experiments import _good_metrics

from memlab.experiments import ch05_capacity as ex
from memlab.report import paper

claims_mod = importlib.import_module("memlab.experiments.ch05_capacity.claims")

CH = "05_capacity"
REGIMES = paper.regimes(CH)
# Claims the paper states about text runs whose regime no recorded quantity measures (their
# training has no convergence record), and the sanity check of the law's arithmetic.
UNGATED = {"mia_text", "extraction", "law_text", "table2"}


def _inside() -> dict:
    """_good_metrics with every run converged (no second-half gain), the oracle ahead by 1 bit/token
    and every text set below capacity memorised whole."""
    m = _good_metrics()
    m["regime"] = {"capacity_gain_half_pct": 0.0, "sweep_gain_half_pct": 0.0, "precision_gain_half_pct": 0.0,
                   "a1_gain_half_pct": 0.0, "oracle_margin_bits": 1.0, "below_capacity_memorised_pct": 100.0}
    return m


def _judge(m: dict) -> dict[str, dict]:
    return judge(CH, ex.claims(), m)


def test_gated_claims_and_their_costs():
    gated = [k for r in REGIMES.values() for k in r["claims"]]
    keys = [c.key for c in ex.claims()]
    assert sorted(gated + sorted(UNGATED)) == sorted(keys)
    assert not any(c.sanity for c in ex.claims() if c.key in gated)
    for name, reg in REGIMES.items():
        assert reg["decide"] and set(reg["decide_cost"]) == {"cpu_2core_min", "gpu_min"}, name
        for req in reg["requires"]:
            assert req["metric"].startswith("regime/") and req["metric"].split("/")[1] in _inside()["regime"]
    # one rule for every convergence gate: at most 2.5 % gained over the second half
    conv = [q for r in REGIMES.values() for q in r["requires"] if q["metric"].endswith("gain_half_pct")]
    assert conv and all(q.get("at_most") == 2.5 for q in conv)


def test_gates_hold_in_the_paper_regime_and_keep_the_verdicts():
    v = _judge(_inside())
    assert all(d["verdict"] == paper.REPRODUCED for d in v.values()), v
    assert all("regime" not in v[k] for k in UNGATED)


@pytest.mark.parametrize("name", list(REGIMES))
def test_each_requirement_just_failing_puts_its_claims_outside_the_regime(name):
    check_requirements_flip(CH, ex.claims(), _inside(), name)


def test_unconverged_capacities_are_outside_the_regime_not_not_judged():
    # the cpu run: the capacity-setting runs still gained up to 12 % over their second half
    m = set_path(_inside(), "regime/capacity_gain_half_pct", 12.4)
    m["capacity"]["2x16"]["converged"] = False
    v = _judge(m)
    assert v["alpha"]["ungated"]["verdict"] == paper.NOT_JUDGED
    for k in ("linear", "alpha", "a1"):
        assert v[k]["verdict"] == paper.OUTSIDE_REGIME
        assert "run 12.4%, the paper's regime needs at most 2.5%" in v[k]["evidence"]


def test_a_gate_metric_the_run_lacks_is_not_run():
    m = _inside()
    del m["regime"]["oracle_margin_bits"]
    v = _judge(m)
    assert v["double_descent"]["verdict"] == v["tfidf"]["verdict"] == paper.NOT_RUN


def test_double_descent_gate_just_inside_and_just_outside_its_bound():
    # the paper's precondition (Section 3.2): every text set below capacity memorised, >= 90 %
    # of the oracle's bits; the real yaml's bound, read from the chapter's own regime
    gate = REGIMES["small_sets_memorised"]
    assert gate["claims"] == ["double_descent"]
    req = next(q for q in gate["requires"] if q["metric"] == "regime/below_capacity_memorised_pct")
    bound = req["at_least"]
    assert bound == 90
    inside = _judge(set_path(_inside(), req["metric"], bound + 0.01))["double_descent"]
    assert inside["verdict"] == paper.REPRODUCED and inside["regime"]["holds"] is True
    out = _judge(set_path(_inside(), req["metric"], bound - 0.01))
    d = out["double_descent"]
    assert d["verdict"] == paper.OUTSIDE_REGIME and d["ungated"]["verdict"] == paper.REPRODUCED
    assert "89.99%, the paper's regime needs at least 90%" in d["evidence"]
    assert "decide" in gate and "text_steps" in gate["decide"]  # what would pass it, priced
    # the gate reads only double descent: the other text claims keep their verdicts
    assert all(out[k]["verdict"] == paper.REPRODUCED for k in out if k != "double_descent")
    # no text set below ratio 1: the precondition cannot be shown, so the claim is outside it
    nan = _judge(set_path(_inside(), req["metric"], float("nan")))["double_descent"]
    assert nan["verdict"] == paper.OUTSIDE_REGIME and "undefined" in nan["evidence"]


def test_below_capacity_memorised_pct_reads_the_runs_below_ratio_one():
    text = pd.DataFrame({"data_to_capacity": [0.2, 0.8, 1.5], "oracle_share": [0.99, 0.92, 0.05]})
    assert ex.below_capacity_memorised_pct(text) == pytest.approx(92.0)
    assert math.isnan(ex.below_capacity_memorised_pct(text[text["data_to_capacity"] > 1]))


# ----------------------------------------------------------------------------- regime_metrics


def test_regime_metrics_closed_form():
    def run(model, prec, n, mem, gain):
        return {"model": model, "precision": prec, "n_samples": n, "mem_bits": mem, "gain_half": gain}

    sweep = pd.DataFrame([run("a", "fp32", 10, 100.0, 0.01), run("a", "fp32", 20, 120.0, 0.03),
                          run("b", "fp32", 10, 200.0, 0.08), run("b", "fp32", 20, 190.0, 0.20),
                          run("a", "bf16", 10, 500.0, 0.50)])  # another precision: not alpha's
    prec = pd.DataFrame([run("a", "fp32", 10, 100.0, 0.01), run("a", "bf16", 10, 90.0, 0.04),
                         run("a", "bf16", 20, 80.0, 0.30)])
    a1 = pd.DataFrame({"gain_half": [0.02, -0.01, 0.015]})
    text = pd.DataFrame({"test_loss": [5.0, 4.5, 6.0], "data_to_capacity": [0.3, 0.99, 1.0],
                         "oracle_share": [0.97, 0.91, 0.10]})
    r = ex.regime_metrics(sweep, "fp32", prec, a1, text, {"test loss (bits/token)": 4.0})["regime"]
    assert r["capacity_gain_half_pct"] == pytest.approx(8.0)  # a: N=20 (3 %), b: N=10 (8 %)
    assert r["sweep_gain_half_pct"] == pytest.approx(20.0)  # every fp32 run; bf16's 50 % not read
    assert r["precision_gain_half_pct"] == pytest.approx(4.0)  # fp32 N=10 (1 %), bf16 N=10 (4 %)
    assert r["a1_gain_half_pct"] == pytest.approx(2.0)
    assert r["oracle_margin_bits"] == pytest.approx(0.5)  # 4.5 - 4.0
    assert r["below_capacity_memorised_pct"] == pytest.approx(91.0)  # ratio 1.0 is not below capacity
    assert "regime" in ex.METRIC_KEYS


# ----------------------------------------------------------------------------- law_text and tfidf


def _law_points(k: int, f1: float, n: int) -> list[dict]:
    return [{"model": "1x16", "n_samples": 64, "membership_f1": f1, "membership_n": n} for _ in range(k)]


def test_law_noise_closed_form():
    floor, band = claims_mod.law_noise(_law_points(8, 0.8, 64))
    assert floor == pytest.approx(math.sqrt(0.8 * 0.2 / 64))  # 0.05
    assert band == pytest.approx(1.96 * 0.05 / math.sqrt(16))
    # F1 = 1 carries no binomial noise; the floor is the root mean square over the points
    floor2, _ = claims_mod.law_noise(_law_points(1, 0.8, 64) + _law_points(1, 1.0, 64))
    assert floor2 == pytest.approx(0.05 / math.sqrt(2))
    with pytest.raises(ValueError, match="law_noise"):
        claims_mod.law_noise([])


def _law_verdict(rmse: float, points: list[dict]) -> dict:
    m = _good_metrics()
    m["text"] = [dict(p, extract_train=0.0, extract_test=0.0, extract_n_train=1, extract_n_test=1)
                 for p in points]
    m["law_fit"] = {"text": {"c1": 1.0, "c2": -0.01, "c3": -30.0, "rmse": rmse}}
    return {d["key"]: d for d in paper.evaluate(ex.claims(), m, "cpu")}["law_text"]


def test_law_text_is_judged_beyond_the_points_own_noise():
    points = _law_points(8, 0.8, 64)  # floor 0.05, band 0.0245
    floor, band = claims_mod.law_noise(points)
    limit = math.hypot(claims_mod.LAW_RMSE, floor)
    assert _law_verdict(limit - band - 1e-3, points)["verdict"] == paper.REPRODUCED
    assert _law_verdict(limit - band + 1e-3, points)["verdict"] == paper.NOT_JUDGED
    assert _law_verdict(limit + band - 1e-3, points)["verdict"] == paper.NOT_JUDGED
    assert _law_verdict(limit + band + 1e-3, points)["verdict"] == paper.NOT_REPRODUCED
    # an exact law on noisy points scores about the floor, above the bare 0.02: it now holds
    assert floor > claims_mod.LAW_RMSE + band
    assert _law_verdict(floor, _law_points(1000, 0.8, 64))["verdict"] == paper.REPRODUCED  # band 0.002


def test_law_text_threshold_moves_the_verdict(monkeypatch):
    points = _law_points(200, 0.98, 256)  # floor 0.0087, band 0.0009
    assert _law_verdict(0.015, points)["verdict"] == paper.REPRODUCED  # limit 0.0218
    monkeypatch.setattr(claims_mod, "LAW_RMSE", 0.005)  # limit 0.0101
    assert _law_verdict(0.015, points)["verdict"] == paper.NOT_REPRODUCED


@pytest.mark.parametrize("p", [None, float("nan")])
def test_tfidf_without_a_p_value_is_not_judged(p):
    m = _good_metrics()
    m["tfidf_pvalue"] = p
    d = {v["key"]: v for v in paper.evaluate(ex.claims(), m, "cpu")}["tfidf"]
    assert d["verdict"] == paper.NOT_JUDGED and "no p-value" in d["evidence"]
    m["tfidf_pvalue"] = np.float64(0.04)
    assert {v["key"]: v for v in paper.evaluate(ex.claims(), m, "cpu")}["tfidf"]["verdict"] == paper.REPRODUCED


def test_plateau_share_of_entropy_carries_its_noise():
    # 2x16's largest N (row 5 of the sweep: H = 1600 bits) at PLATEAU_SHARE of H(X) +- its noise
    limit = claims_mod.PLATEAU_SHARE * 1600.0

    def plateau(mem, noise):
        m = _good_metrics()
        m["sweep"] = [dict(r, mem_bits=mem, mem_noise_rel=noise) if i == 5 else r for i, r in enumerate(m["sweep"])]
        m["sweep"][4] = dict(m["sweep"][4], mem_bits=mem)  # flat over the two largest N
        return {d["key"]: d for d in paper.evaluate(ex.claims(), m, "cpu")}["plateau"]

    noise = 0.02
    below, above = limit / (1 + noise) - 1.0, limit / (1 - noise) + 1.0  # just outside +- mem * noise
    assert plateau(below, noise)["verdict"] == paper.REPRODUCED
    assert plateau(above, noise)["verdict"] == paper.NOT_REPRODUCED
    inside = plateau(limit * (1 - noise / 2), noise)
    assert inside["verdict"] == paper.NOT_JUDGED and "share of H(X) within the noise" in inside["evidence"]
