"""Chapter 2's regime gates (data/papers/02_sde.yaml, issue 29) and its fixed predicate (``size``).

The gates are the chapter's real yaml; the metrics are constructed (``fake_metrics`` of
tests/test_sde_experiments.py: every claim reproduced, outside every band) with the regime
quantities set just inside or just outside each requirement.
"""
import importlib

import pytest
from regime_checks import check_requirements_flip, judge, set_path
from test_sde_experiments import fake_metrics

from memlab.experiments import ch02_sde as ex
from memlab.report import paper

CH = "02_sde"
REGIMES = paper.regimes(CH)


def _inside() -> dict:
    """fake_metrics with the paper's regime: the Original at the paper's accuracies, Retrain's OTR 87 %."""
    m = fake_metrics()
    m["regime"] = {"ours: Original": {"train accuracy (%)": 98.57, "test accuracy (%)": 93.25}}
    return m


def _judge(m: dict) -> dict[str, dict]:
    return judge(CH, ex.claims(), m)


def test_every_paper_claim_is_gated_once_and_the_sanity_check_never():
    gated = [k for r in REGIMES.values() for k in r["claims"]]
    claims = ex.claims()
    assert sorted(gated) == sorted(c.key for c in claims if not c.sanity)
    assert "spread_identity" not in gated
    for name, reg in REGIMES.items():
        assert reg["decide"] and set(reg["decide_cost"]) == {"cpu_2core_min", "gpu_min"}, name
        # every gate metric path exists in a run's metrics (here the constructed ones)
        for req in reg["requires"]:
            paper._read_path(_inside(), req["metric"])


def test_gates_hold_in_the_paper_regime_and_keep_the_verdicts():
    v = _judge(_inside())
    assert all(d["verdict"] == paper.REPRODUCED for d in v.values()), v
    assert all(d["regime"]["holds"] is True for k, d in v.items() if k != "spread_identity")


@pytest.mark.parametrize("name", list(REGIMES))
def test_each_requirement_just_failing_puts_its_claims_outside_the_regime(name):
    check_requirements_flip(CH, ex.claims(), _inside(), name)


def test_a_contrary_result_outside_the_regime_is_not_called_not_reproduced():
    # the cpu run's regime (Original 56.9 % train, 53.2 % test) with SDE's F1 far below 0.8
    m = _inside()
    m["regime"]["ours: Original"] = {"train accuracy (%)": 56.9, "test accuracy (%)": 53.2}
    m["f1"] = {**m["f1"], "SDE": {"R=5%": 0.3, "R=10%": 0.37, "R=20%": 0.21}}
    v = _judge(m)["controlled"]
    assert v["ungated"]["verdict"] == paper.NOT_REPRODUCED
    assert v["verdict"] == paper.OUTSIDE_REGIME and "reason" not in v
    assert "Original train accuracy 56.9%" in v["evidence"] and "88.57%" in v["evidence"]


def test_unroll_needs_retrain_recognised_as_unseen():
    m = set_path(_inside(), "table3/Retrain/OTR (%)", 45.0)  # the cpu run's Retrain OTR
    v = _judge(m)
    assert v["unroll"]["verdict"] == paper.OUTSIDE_REGIME and "Retrain's OTR 45%" in v["unroll"]["evidence"]
    assert v["controlled"]["verdict"] == paper.REPRODUCED  # another regime: untouched


# ----------------------------------------------------------------------------- the size predicate


def _sizes(f1s, band):
    return {"size_sweep": {"SDE": {str(k): v for k, v in f1s.items()}},
            "size_band": {"SDE": {str(k): band for k in f1s}}}


def _size(f1s, band):
    (v,) = [d for d in paper.evaluate(ex.claims(), fake_metrics(**_sizes(f1s, band)), "cpu")
            if d["key"] == "size"]
    return v


def test_size_drop_between_sizes_carries_the_band_of_a_difference():
    band = 0.05
    pair = 2 ** 0.5 * band  # the band of a difference of two F1s with band 0.05 each
    tol = importlib.import_module("memlab.experiments.ch02_sde.claims").SIZE_MAX_DROP
    # F1 grows 0.5 -> 0.95 overall (beyond its band); the middle step drops by tol + pair +- 0.01
    just_out = _size({20: 0.5, 40: 0.9, 80: 0.9 - (tol + pair + 0.01), 160: 0.95}, band)
    assert just_out["verdict"] == paper.NOT_REPRODUCED
    just_in = _size({20: 0.5, 40: 0.9, 80: 0.9 - (tol + pair - 0.01), 160: 0.95}, band)
    assert just_in["verdict"] == paper.NOT_JUDGED and "against a drop of 0.1" in just_in["evidence"]
    # a drop that stays below the tolerance by more than its band: the claim holds
    held = _size({20: 0.5, 40: 0.9, 80: 0.9 - (tol - pair - 0.01), 160: 0.95}, band)
    assert held["verdict"] == paper.REPRODUCED
    # growth from the smallest to the largest size inside its band: not judged, whatever the drops
    flat = _size({20: 0.6, 40: 0.9, 80: 0.5, 160: 0.6 + pair - 0.01}, band)
    assert flat["verdict"] == paper.NOT_JUDGED and "largest minus the smallest" in flat["evidence"]
    # F1 falling from the smallest to the largest size beyond its band: not reproduced
    assert _size({20: 0.9, 40: 0.9, 80: 0.9, 160: 0.9 - pair - 0.01}, band)["verdict"] == paper.NOT_REPRODUCED
