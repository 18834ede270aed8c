import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from memlab.core import results
from memlab.core.config import Config
from memlab.report import paper

REPO = Path(__file__).resolve().parents[1]


def test_run_save_writes_metrics_params_and_provenance(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLAB_OUTPUT_DIR", str(tmp_path))
    cfg = Config("02_sde", "smoke", {"seed": 3})
    run = results.Run(cfg)
    run.record(acc=np.float32(0.5), table={"GA": {"x": np.int64(2)}}, arr=torch.tensor([1.0, float("nan")]))
    path = run.save(claims=[{"key": "c", "verdict": "reproduced"}])
    data = json.loads(path.read_text())
    assert path == tmp_path / "results" / "02_sde.json"
    assert data["metrics"] == {"acc": 0.5, "table": {"GA": {"x": 2}}, "arr": [1.0, None]}
    assert data["params"] == {"chapter": "02_sde", "profile": "smoke", "seed": 3}
    prov = data["provenance"]
    for field in ("git_commit", "memlab_version", "profile", "device", "torch", "transformers", "wall_time_s", "date"):
        assert field in prov
    assert prov["profile"] == "smoke" and prov["wall_time_s"] >= 0
    assert not list((tmp_path / "results").glob(".*tmp"))


def test_atomic_json_failure_keeps_old_file(tmp_path):
    path = tmp_path / "r.json"
    results.write_json_atomic(path, {"ok": 1})

    class Boom:
        def tolist(self):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        results.write_json_atomic(path, {"bad": Boom()})
    assert json.loads(path.read_text()) == {"ok": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_provenance_markdown_names_profile_and_rerun_command():
    md = results.provenance_markdown(Config("01_bn_illusion", "cpu", {"seed": 0}))
    assert "profile `cpu`" in md and "memlab run 01_bn_illusion --profile cpu" in md and "`seed=0`" in md


def test_box_and_results_file_name_the_same_commit(monkeypatch):
    """HEAD read once per run: a commit made while a chapter runs cannot split the page from its JSON."""
    heads = iter(["a" * 40, "b" * 40 + "+dirty", "c" * 40])
    monkeypatch.setattr(results, "git_commit", lambda: next(heads))
    run = results.Run(Config("01_bn_illusion", "cpu", {"seed": 0}))
    box = results.provenance_markdown(run.cfg, run.commit)
    assert run.payload()["provenance"]["git_commit"] == "a" * 40 and f"commit `{'a' * 12}`" in box
    dirty = results.provenance_markdown(run.cfg, "d" * 40 + "+dirty")
    assert "+dirty" not in dirty and "with uncommitted changes" in dirty and "fingerprint" in dirty


@pytest.fixture
def fake_paper(tmp_path, monkeypatch):
    (tmp_path / "ch.yaml").write_text(yaml.safe_dump({
        "paper": {"title": "T", "bibkey": "k"},
        "tables": {"t1": {"source": "Table 1", "rows": {"GA": {"acc": 1.0, "f": 2.0}, "SalUn": {"acc": 3.0}}}},
        "numbers": {"alpha": {"value": 3.6, "source": "Section 3"}},
    }))
    monkeypatch.setattr(paper, "papers_dir", lambda: tmp_path)
    return tmp_path


def test_paper_tables_and_numbers(fake_paper):
    t = paper.table("ch", "t1")
    assert t.loc["GA", "acc"] == 1.0 and np.isnan(t.loc["SalUn", "f"]) and t.attrs["source"] == "Table 1"
    assert paper.number("ch", "alpha") == 3.6 and paper.source("ch", "alpha") == "Section 3"
    with pytest.raises(KeyError, match="has no paper table 'nope'"):
        paper.table("ch", "nope")


def test_paper_yaml_must_name_sources(tmp_path, monkeypatch):
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"numbers": {"x": {"value": 1}}}))
    monkeypatch.setattr(paper, "papers_dir", lambda: tmp_path)
    with pytest.raises(ValueError, match="needs 'value' and 'source'"):
        paper.load("bad")


def test_side_by_side_aligns_rows_and_labels_sources():
    ours = pd.DataFrame({"acc": [10.0, 20.0]}, index=["GA", "Ours-only"])
    theirs = pd.DataFrame({"acc": [11.0, 30.0], "other": [1, 2]}, index=["GA", "SalUn"])
    sbs = paper.side_by_side(ours, theirs)
    assert list(sbs.columns) == [("acc", "paper"), ("acc", "ours")]
    assert list(sbs.index) == ["GA", "Ours-only", "SalUn"]
    assert sbs.loc["GA", ("acc", "paper")] == 11.0 and sbs.loc["GA", ("acc", "ours")] == 10.0
    assert np.isnan(sbs.loc["SalUn", ("acc", "ours")]) and np.isnan(sbs.loc["Ours-only", ("acc", "paper")])
    with pytest.raises(ValueError):
        paper.side_by_side(ours, pd.DataFrame({"zzz": [1]}))


def test_claim_verdicts():
    claims = [
        paper.Claim("big", "x is above 1", "Table 1", lambda m: (m["x"] > 1, f"x = {m['x']}")),
        paper.Claim("small", "x is below 1", "Table 1", lambda m: (m["x"] < 1, f"x = {m['x']}")),
        paper.Claim("gpu", "needs paper scale", "Fig. 2", lambda m: (True, ""), profiles=("paper",)),
        paper.Claim("missing", "uses y", "Fig. 3", lambda m: (m["y"] > 0, "")),
    ]
    v = {d["key"]: d for d in paper.evaluate(claims, {"x": 2}, "cpu")}
    assert v["big"]["verdict"] == paper.REPRODUCED and v["big"]["evidence"] == "x = 2"
    assert v["small"]["verdict"] == paper.NOT_REPRODUCED
    assert v["gpu"]["verdict"] == paper.NOT_RUN and v["missing"]["verdict"] == paper.NOT_RUN
    assert paper.tally(list(v.values())) == {paper.REPRODUCED: 1, paper.NOT_REPRODUCED: 1, paper.OUTSIDE_REGIME: 0,
                                             paper.NOT_JUDGED: 0, paper.SEED_DEPENDENT: 0, paper.NOT_RUN: 2}
    table = paper.claims_table(list(v.values()))
    assert list(table.columns) == ["Verdict", "Claim", "Paper source", "Our numbers"]
    with pytest.raises(ValueError, match="unique"):
        paper.evaluate(claims[:1] * 2, {"x": 2}, "cpu")


def test_shipped_paper_numbers_all_name_their_source():
    files = sorted((REPO / "data" / "papers").glob("*.yaml"))
    for f in files:
        data = paper.load(f.stem)
        assert data.get("tables") or data.get("numbers"), f


def test_a_check_that_cannot_decide_is_not_judged_with_its_reason():
    def undecided(m):
        raise paper.NotJudged("needs two sizes")

    claim = paper.Claim("k", "text", "Table 1", undecided)
    (v,) = paper.evaluate([claim], {}, "cpu")
    assert v["verdict"] == paper.NOT_JUDGED and v["evidence"] == "needs two sizes"


@pytest.mark.parametrize("margin,band,judged", [(0.05, 0.04, True), (-0.05, 0.04, True), (0.04, 0.04, False),
                                                (-0.01, 0.04, False), (0.0, 0.0, False)])
def test_a_margin_inside_its_noise_band_is_not_judged(margin, band, judged):
    def check(m):
        paper.outside_noise(margin, band, "ΔF")
        return margin > 0, f"ΔF margin {margin:+.2f}"

    (v,) = paper.evaluate([paper.Claim("k", "text", "Table 1", check)], {}, "cpu")
    if judged:
        assert v["verdict"] == (paper.REPRODUCED if margin > 0 else paper.NOT_REPRODUCED)
    else:
        assert v["verdict"] == paper.NOT_JUDGED
        assert "inside the noise band" in v["evidence"] and f"{band:.3g}" in v["evidence"]
    with pytest.raises(ValueError, match="band"):
        paper.outside_noise(0.1, float("nan"), "ΔF")


def test_sanity_checks_are_labelled_and_counted_apart():
    claims = [paper.Claim("paper", "a paper claim", "Table 1", lambda m: (True, "")),
              paper.Claim("built", "true by construction", "Theorem 1", lambda m: (True, ""), sanity=True)]
    rows = paper.evaluate(claims, {}, "cpu")
    assert [r["kind"] for r in rows] == [paper.CLAIM, paper.SANITY]
    assert paper.tally(rows, paper.CLAIM)[paper.REPRODUCED] == 1
    assert paper.tally(rows, paper.SANITY)[paper.REPRODUCED] == 1
    table = paper.claims_table(rows)
    html = table._repr_html_()
    assert html.count('class="claim-kind"') == 1 and "sanity check" in html
    assert table.frame["Claim"].tolist() == ["a paper claim", "[sanity check] true by construction"]
    # rows from before "kind" existed count as paper claims
    assert paper.tally([{"verdict": paper.REPRODUCED}], paper.CLAIM)[paper.REPRODUCED] == 1


def test_scale_changes_read_from_the_yaml_and_shown_as_sentences(fake_paper):
    from memlab.report import pagekit

    assert paper.scale_changes("ch") == [] and pagekit.scale_changes_text("ch") == ""
    data = yaml.safe_load((fake_paper / "ch.yaml").read_text())
    data["scale_changes"] = [{"change": "60 authors instead of 30", "why": "The paper uses 60.",
                              "cost": "5 more minutes"}]
    (fake_paper / "ch.yaml").write_text(yaml.safe_dump(data))
    text = pagekit.scale_changes_text("ch")
    assert "60 authors instead of 30. The paper uses 60. **Cost:** 5 more minutes." in text
    assert "What it bought" not in text  # not measured yet
    data["scale_changes"][0]["bought"] = "two claims decided"
    (fake_paper / "ch.yaml").write_text(yaml.safe_dump(data))
    assert "**What it bought:** two claims decided." in pagekit.scale_changes_text("ch")
    for bad, msg in (({"change": "x", "why": "y"}, r"missing \['cost'\]"),
                     ({"change": "x", "why": "y", "cost": "z", "price": "p"}, r"unknown keys \['price'\]"),
                     ({"change": "x", "why": " ", "cost": "z"}, r"empty \['why'\]")):
        data["scale_changes"] = [bad]
        (fake_paper / "ch.yaml").write_text(yaml.safe_dump(data))
        with pytest.raises(ValueError, match=r"data/papers/ch\.yaml: scale_changes\[0\]: " + msg):
            paper.scale_changes("ch")
