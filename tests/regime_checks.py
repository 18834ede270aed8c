"""Shared checks of a chapter's regime gates (``regimes:`` in data/papers/<chapter>.yaml) on
constructed metrics, used by tests/test_regimes_chNN.py."""
import copy

from memlab.report import paper


def set_path(metrics: dict, path: str, value: float) -> dict:
    """A deep copy of ``metrics`` with ``value`` at ``path`` ('/'-separated dict keys, as in the yaml)."""
    out = copy.deepcopy(metrics)
    *head, last = path.split("/")
    node = out
    for part in head:
        node = node[part]
    node[last] = value
    return out


def judge(chapter: str, claims, metrics: dict) -> dict[str, dict]:
    """Verdict rows by claim key, evaluated at ``cpu`` with the chapter's reasons and real regimes."""
    rows = paper.evaluate(claims, metrics, "cpu", paper.reasons(chapter), paper.regimes(chapter))
    return {v["key"]: v for v in rows}


def check_requirements_flip(chapter: str, claims, inside: dict, name: str) -> None:
    """For each requirement of regime ``name``: its value exactly at the bound keeps every claim of
    ``inside`` (all reproduced) reproduced; just past the bound, every claim of each regime reading
    that metric is "outside the paper's regime" (its own verdict kept as ``ungated``, the label in
    the evidence) and every other claim stays reproduced."""
    regimes = paper.regimes(chapter)
    for req in regimes[name]["requires"]:
        bound = "at_least" if "at_least" in req else "at_most"
        limit = float(req[bound])
        at = judge(chapter, claims, set_path(inside, req["metric"], limit))
        assert all(at[k]["verdict"] == paper.REPRODUCED for k in regimes[name]["claims"]), at
        past = judge(chapter, claims, set_path(inside, req["metric"], limit + (1e-6 if bound == "at_most" else -1e-6)))
        hit = {k for r in regimes.values() if any(q["metric"] == req["metric"] for q in r["requires"])
               for k in r["claims"]}
        assert set(regimes[name]["claims"]) <= hit
        for k, d in past.items():
            if k in hit:
                assert d["verdict"] == paper.OUTSIDE_REGIME, (k, d)
                assert d["ungated"]["verdict"] == paper.REPRODUCED and "reason" not in d
                assert paper._label_unit(req["label"])[0] in d["evidence"]
            else:
                assert d["verdict"] == paper.REPRODUCED, (k, d)
