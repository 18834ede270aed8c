"""The Robustness page and the scorecard's 'Across seeds' column, from sweep summaries."""
from __future__ import annotations

import json

import pytest

from memlab.core.chapters import CHAPTERS
from memlab.core.config import ConfigError
from memlab.report import book, robustness

CHAPTER = next(iter(CHAPTERS))


def _summary(k: int, n: int) -> dict:
    """A seed sweep of three runs whose one claim held in ``k`` of ``n`` judged runs."""
    runs = [f"seed-{s}" for s in range(3)]
    return {
        "chapter": CHAPTER, "profile": "cpu", "axes": {"seed": [0, 1, 2]}, "runs_done": runs, "runs_failed": [],
        "groups": [{"params": {}, "runs": runs, "metrics": {},
                    "claims": {"c1": {"claim": "A claim & more", "reproduced": k, "n": n,
                                      "text": f"reproduced in {k} of {n} runs"}}}],
        "provenance": {r: {"params": {"seed": s}, "git_commit": "abcdef123456", "wall_time_s": 60.0}
                       for s, r in enumerate(runs)},
    }


def _book(tmp_path, summary: dict | None) -> "Path":  # noqa: F821
    root = tmp_path / "book"
    (root / "results").mkdir(parents=True)
    (root / "results" / f"{CHAPTER}.json").write_text(json.dumps({
        "profile": "cpu", "claims": [{"key": "c1", "claim": "A claim & more", "source": "T1",
                                      "verdict": "reproduced", "evidence": "x=1"}]}))
    if summary is not None:
        sweep_dir = tmp_path / "sweep"
        sweep_dir.mkdir()
        (sweep_dir / "summary.json").write_text(json.dumps(summary))
        assert robustness.publish(sweep_dir, root) == root / "robustness" / f"{CHAPTER}.json"
    return root


def test_page_says_how_often_each_claim_held_and_names_the_command_where_no_sweep(tmp_path):
    root = _book(tmp_path, _summary(2, 3))
    text = robustness.write_page(root).read_text()
    section = text.split(f"## {CHAPTERS[CHAPTER].title}")[1].split("\n## ")[0]
    assert "reproduced in 2 of 3 runs" in section and "A claim &amp; more" in section
    assert "seeds 0, 1, 2" in section and "3 runs, 3 min" in section and "`abcdef12`" in section
    assert '<tr class="robust-some">' in section and "claim-kind" not in section
    summary = _summary(3, 3)
    summary["groups"][0]["claims"]["c1"]["kind"] = "sanity check"
    section = robustness.write_page(_book(tmp_path / "sanity", summary)).read_text()
    assert '<td data-label="Claim"><span class="claim-kind">sanity check</span>A claim &amp; more' in section
    other = [c for c in CHAPTERS if c != CHAPTER][0]
    assert robustness.SEED_SWEEP.format(chapter=other) in text.split(f"## {CHAPTERS[other].title}")[1]


@pytest.mark.parametrize("k, n, css", [(3, 3, "robust-all"), (0, 3, "robust-none"), (1, 3, "robust-some")])
def test_rows_are_classed_by_how_many_runs_reproduce(tmp_path, k, n, css):
    text = robustness.write_page(_book(tmp_path, _summary(k, n))).read_text()
    assert f'<tr class="{css}">' in text


def test_scorecard_has_an_across_seeds_column_only_with_a_published_sweep(tmp_path):
    with_sweep = book.write_scorecard(_book(tmp_path / "a", _summary(3, 3))).read_text()
    assert "<th>Across seeds</th>" in with_sweep and "reproduced in 3 of 3 runs" in with_sweep
    without = book.write_scorecard(_book(tmp_path / "b", None)).read_text()
    assert "Across seeds</th>" not in without


def test_publish_refuses_a_folder_without_a_summary(tmp_path):
    with pytest.raises(ConfigError, match="is not a sweep summary"):
        robustness.publish(tmp_path, tmp_path / "book")
    (tmp_path / "summary.json").write_text(json.dumps({"chapter": "99_nope"}))
    with pytest.raises(ConfigError, match="not a chapter of the book"):
        robustness.publish(tmp_path, tmp_path / "book")


def test_a_sweep_of_earlier_chapter_code_is_marked_and_left_off_the_scorecard(tmp_path):
    summary = _summary(3, 3)
    for p in summary["provenance"].values():
        p["chapter_code"] = "0ld0ld0ld0ld"
    root = _book(tmp_path, summary)
    res = json.loads((root / "results" / f"{CHAPTER}.json").read_text())
    res["provenance"] = {"git_commit": "fedcba987654", "chapter_code": "n3wn3wn3wn3w"}
    (root / "results" / f"{CHAPTER}.json").write_text(json.dumps(res))
    assert not robustness.is_current(robustness.load(root, CHAPTER), res)
    page = robustness.write_page(root).read_text()
    section = page.split(f"## {CHAPTERS[CHAPTER].title}")[1].split("\n## ")[0]
    assert "Earlier code" in section and "`fedcba98`" not in section and "fedcba98" in section
    assert "Across seeds" not in book.write_scorecard(root).read_text().split("## ")[-1]
    # the same fingerprint on both sides: current again, the column comes back
    res["provenance"]["chapter_code"] = "0ld0ld0ld0ld"
    (root / "results" / f"{CHAPTER}.json").write_text(json.dumps(res))
    assert robustness.is_current(robustness.load(root, CHAPTER), res)
    assert "reproduced in 3 of 3 runs" in book.write_scorecard(root).read_text()


def test_the_chapter_code_fingerprint_follows_the_chapter_sources():
    from memlab.core import results

    fp = results.chapter_code(CHAPTER)
    assert fp is not None and len(fp) == 12 and fp == results.chapter_code(CHAPTER)
    assert results.chapter_code("99_not_a_chapter") is None


def test_a_chapter_that_runs_another_changes_its_fingerprint_with_that_chapters_code(tmp_path, monkeypatch):
    """Chapter 6 runs chapters 1 and 3 at their defaults: editing chapter 3's spec changes chapter 6's
    numbers, so it must change chapter 6's fingerprint (its published sweep is then earlier code)."""
    from memlab.core import chapters, config, results

    for name in ("zz_up", "zz_down"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"X = '{name}'\n")
        (tmp_path / "notebooks").mkdir(exist_ok=True)
        (tmp_path / "notebooks" / f"{name}.py").write_text("# %%\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(config, "repo_root", lambda: tmp_path)
    monkeypatch.setitem(chapters.CHAPTERS, "zz_up", chapters.Chapter("zz_up", "Up", "zz_up", ""))
    monkeypatch.setitem(chapters.CHAPTERS, "zz_down", chapters.Chapter("zz_down", "Down", "zz_down", "", uses=("zz_up",)))
    down, up = results.chapter_code("zz_down"), results.chapter_code("zz_up")
    assert down and up and down != up
    (tmp_path / "zz_up" / "__init__.py").write_text("X = 'edited'\n")
    assert results.chapter_code("zz_up") != up
    assert results.chapter_code("zz_down") != down  # only the used chapter changed
    monkeypatch.setitem(chapters.CHAPTERS, "zz_down", chapters.Chapter("zz_down", "Down", "zz_down", "",
                                                                      uses=("99_missing",)))
    assert results.chapter_code("zz_down") is None


def _axis_summary() -> dict:
    """Chapter 1 over three forget classes at seed 0: one claim held for two of them."""
    groups = [{"params": {"forget_class": fc}, "runs": [f"fc-{fc}"], "metrics": {},
               "claims": {"c1": {"claim": "A claim & more", "verdicts": {v: 1}, "reproduced": int(v == "reproduced"),
                                 "n": int(v != "not judged"), "text": ""},
                          "c2": {"claim": "Gated", "verdicts": {"outside the paper's regime": 1}, "reproduced": 0,
                                 "n": 0, "text": ""}}}
              for fc, v in ((0, "reproduced"), (3, "reproduced"), (7, "not judged"))]
    return {"chapter": CHAPTER, "profile": "cpu", "axes": {"forget_class": [0, 3, 7]},
            "runs_done": ["fc-0", "fc-3", "fc-7"], "runs_failed": [], "groups": groups,
            "provenance": {f"fc-{fc}": {"params": {"forget_class": fc, "seed": 0}, "wall_time_s": 120.0}
                           for fc in (0, 3, 7)},
            "timing": [{"wall_s": 300.0, "workers": 2, "executed": 3}]}


def test_a_sweep_over_forget_classes_gets_its_own_file_and_a_column_per_class(tmp_path):
    root = _book(tmp_path, _summary(3, 3))
    other = tmp_path / "fc-sweep"
    other.mkdir()
    (other / "summary.json").write_text(json.dumps(_axis_summary()))
    assert robustness.publish(other, root) == root / "robustness" / f"{CHAPTER}--forget_class.json"
    assert robustness.load(root, CHAPTER)["axes"] == {"seed": [0, 1, 2]}  # the seed sweep is kept
    section = robustness.write_page(root).read_text().split(f"## {CHAPTERS[CHAPTER].title}")[1].split("\n## ")[0]
    across = section.split("### Across forget_class")[1]
    assert "<th>forget class 0</th><th>forget class 3</th><th>forget class 7</th>" in across
    assert "(all at seed 0; the rest at the profile's defaults)" in across and "3 runs, 6 min of runs in all, 5 min wall on 2 workers" in across
    # the pooled count: judged in two runs (not judged in the third), reproduced in both
    assert "<td data-label=\"forget class 7\">not judged</td>" in across
    assert "reproduced in 2 of 2 runs (1 not judged)" in across and '<tr class="robust-all">' in across
    # a claim no setting judged says why, in words, never "0 of 0"
    assert "outside the paper&#x27;s regime in all 3 runs" in across and "0 of 0" not in across
    timing = dict(_axis_summary(), timing=[{"wall_s": 300.0, "workers": 1, "executed": 3}])
    assert "5 min wall on 1 worker." in robustness._cost(timing) + "."
    # the scorecard's column stays the seed sweep's
    assert "reproduced in 3 of 3 runs" in book.write_scorecard(root).read_text()


def _sweep_run(sweep_dir, chapter: str, run: str, params: dict, code: str | None, cost: dict | None = None) -> None:
    folder = sweep_dir / run
    (folder / "results").mkdir(parents=True)
    (folder / "chapters").mkdir()
    (folder / "figures" / chapter).mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"chapter": chapter, "profile": "cpu", "params": params}))
    prov = {"chapter_code": code, "wall_time_s": 612.5, "device": "cpu (Some CPU, AVX2)", "date": "2026-12-01T10:00:00+00:00",
            **({"cost": cost} if cost else {})}
    (folder / "results" / f"{chapter}.json").write_text(json.dumps(
        {"chapter": chapter, "profile": "cpu", "params": params, "claims": [], "provenance": prov}))
    (folder / "chapters" / f"{chapter}.ipynb").write_text(f"notebook of {run}")
    (folder / "figures" / chapter / "fig.png").write_bytes(b"png of " + run.encode())


def test_publish_page_copies_the_default_run_and_refuses_any_other(tmp_path):
    from memlab.core import results

    chapter = "05_capacity"
    sweep_dir = tmp_path / "sweep"
    code = results.chapter_code(chapter)
    cold = {"cpu_s": 1100.0, "wall_s": 600.0, "threads": 2, "peak_memory_mb": 900.0, "trained": 3,
            "loaded": 0, "train_cpu_s": 800.0, "keys": {}}
    _sweep_run(sweep_dir, chapter, "seed-0", {"seed": 0}, code, cost=cold)
    _sweep_run(sweep_dir, chapter, "seed-1", {"seed": 1}, code)
    _sweep_run(sweep_dir, chapter, "old", {}, "0ld0ld0ld0ld")
    (sweep_dir / "summary.json").write_text(json.dumps(
        {"chapter": chapter, "profile": "cpu", "runs_done": ["seed-0", "seed-1", "old"]}))
    # seed-0 ran in an invocation of 2 workers: one other run shared its cores
    (sweep_dir / "timing.json").write_text(json.dumps([
        {"date": "2026-11-30T10:00:00Z", "wall_s": 600.0, "executed": 1, "workers": 1},
        {"date": "2026-12-01T10:05:00Z", "wall_s": 900.0, "executed": 3, "workers": 2}]))
    assert robustness.runs_alongside(sweep_dir, "2026-12-01T09:55:00+00:00") == 1
    assert robustness.runs_alongside(sweep_dir, "2026-11-30T09:59:00+00:00") == 0  # alone in its invocation
    assert robustness.runs_alongside(sweep_dir, "2026-12-02T00:00:00+00:00") == 0  # in no recorded invocation
    root = tmp_path / "book"
    for run, match in (("seed-1", "'seed-1' has parameters {'seed': 1} that are not the cpu defaults"),
                       ("old", "ran chapter code 0ld0ld0ld0ld, not the current"),
                       ("seed-9", "'seed-9' is not a complete run of .*runs: seed-0, seed-1, old")):
        with pytest.raises(ConfigError, match=match):
            robustness.publish_page(sweep_dir, run, root)
        assert not (root / "chapters").exists() and not (root / "results").exists()
    assert robustness.publish_page(sweep_dir, "seed-0", root) == root / "chapters" / f"{chapter}.ipynb"
    assert (root / "chapters" / f"{chapter}.ipynb").read_text() == "notebook of seed-0"
    assert (root / "figures" / chapter / "fig.png").read_bytes() == b"png of seed-0"
    assert json.loads((root / "results" / f"{chapter}.json").read_text())["provenance"]["chapter_code"] == code
    assert (sweep_dir / "seed-0" / "chapters" / f"{chapter}.ipynb").exists()  # the sweep keeps its run
    assert not [p for p in root.iterdir() if p.name.startswith(".")]  # no staging folder left
    # the run that made the page is in the cost log, as a memlab run's would be: a cold run here
    from memlab.core import costs

    (rec,) = costs.read_log(root)
    assert (rec["chapter"], rec["kind"], rec["cpu_s"], rec["wall_s"], rec["trained"]) == (chapter, "cold", 1100.0, 612.5, 3)
    assert rec["alongside"] == 1  # its wall shared the cores: the cost table leaves it out
    assert rec["code"] == costs.code_version(chapter)


def test_a_published_sweep_figure_is_shown_under_its_table(tmp_path):
    root = _book(tmp_path, None)
    sweep_dir = tmp_path / "with-figure"
    sweep_dir.mkdir()
    (sweep_dir / "summary.json").write_text(json.dumps(_summary(2, 3)))
    (sweep_dir / "summary.png").write_bytes(b"\x89PNG fake")
    robustness.publish(sweep_dir, root)
    assert (root / "robustness" / f"{CHAPTER}.png").read_bytes() == b"\x89PNG fake"
    section = robustness.write_page(root).read_text().split(f"## {CHAPTERS[CHAPTER].title}")[1].split("\n## ")[0]
    assert section.index("</table>") < section.index(f"```{{figure}} robustness/{CHAPTER}.png")
    # re-published without a figure: the old one goes, the page shows none
    (sweep_dir / "summary.png").unlink()
    robustness.publish(sweep_dir, root)
    assert not (root / "robustness" / f"{CHAPTER}.png").exists()
    assert "{figure}" not in robustness.write_page(root).read_text()


def _pooled_sweep(tmp_path, margins, code="c0de"):
    """A sweep folder of one run per margin (seeds 0, 1, ...) of claim c1 (band 0.5), summarised."""
    from memlab.report import sweep_summary

    sweep_dir = tmp_path / "pooled-sweep"
    runs = [f"seed-{s}" for s in range(len(margins))]
    for s, (run, m) in enumerate(zip(runs, margins)):
        _sweep_run(sweep_dir, CHAPTER, run, {"seed": s}, code)
        verdict = "reproduced" if m > 0.5 else "not reproduced" if m < -0.5 else "not judged"
        (sweep_dir / run / "results" / f"{CHAPTER}.json").write_text(json.dumps(
            {"profile": "cpu", "provenance": {"chapter_code": code},
             "claims": [{"key": "c1", "claim": "A claim & more", "source": "T1", "verdict": verdict,
                         "evidence": f"m={m}", "kind": "claim", "margin": m, "band": 0.5, "what": "q"}]}))
    (sweep_dir / "sweep.json").write_text(json.dumps(
        {"chapter": CHAPTER, "profile": "cpu", "axes": {"seed": list(range(len(margins)))}, "runs": runs}))
    summary = sweep_summary.summarize(sweep_dir)
    (sweep_dir / "summary.json").write_text(json.dumps(summary))
    return sweep_dir, summary


@pytest.mark.parametrize("margins, verdict", [([0.4, 0.45, 0.42], "reproduced"),
                                              ([2.0, -2.0, 2.0], "seed-dependent"),
                                              ([-0.4, -0.45, -0.42], "not reproduced")])
def test_summary_pools_each_claim_over_the_seeds(tmp_path, margins, verdict):
    # every seed is inside its own band (0.5) in the first and last case: pooled over three, it is not
    _, summary = _pooled_sweep(tmp_path, margins)
    group = summary["groups"][0]
    pooled = {r["key"]: r for r in group["pooled"]}
    assert pooled["c1"]["verdict"] == verdict and pooled["c1"]["n_seeds"] == 3
    assert group["claims"]["c1"]["text"].endswith("3 runs")  # the per-seed counts stay


def test_page_and_scorecard_show_the_pooled_verdict_of_a_current_sweep(tmp_path):
    from memlab.report import pagekit

    sweep_dir, _ = _pooled_sweep(tmp_path, [0.4, 0.45, 0.42])
    root = tmp_path / "book"
    (root / "results").mkdir(parents=True)
    published = {"profile": "cpu", "provenance": {"chapter_code": "c0de"},
                 "claims": [{"key": "c1", "claim": "A claim & more", "source": "T1", "verdict": "not judged",
                             "evidence": "m=0.4", "kind": "claim", "margin": 0.4, "band": 0.5}]}
    (root / "results" / f"{CHAPTER}.json").write_text(json.dumps(published))
    robustness.publish(sweep_dir, root)
    page = robustness.write_page(root).read_text()
    section = page.split(f"## {CHAPTERS[CHAPTER].title}")[1].split("\n## ")[0]
    assert "<th>Pooled over seeds</th>" in section and "<strong>reproduced</strong>" in section
    assert "not judged in all 3 runs" in section and "0 of 0" not in section
    card = book.write_scorecard(root).read_text()
    assert "verdicts pooled over 3 seeds" in card
    from memlab.report.paper import VERDICTS

    line = next(l for l in card.splitlines() if l.startswith(f"| {CHAPTERS[CHAPTER].title} |"))
    cells = dict(zip(VERDICTS, [c.strip() for c in line.strip("|").split("|")][2:]))
    assert cells["reproduced"] == "1" and cells["not judged"] == "0"  # the pooled verdict, not seed 0's
    rows, basis = pagekit.published_verdicts(CHAPTER, published["claims"], book=root)
    assert basis == pooling_basis(1) and rows[0]["verdict"] == "not judged"  # the sweep is not of today's code
    # a sweep of earlier code: the scorecard falls back to the page's single-seed verdicts
    published["provenance"]["chapter_code"] = "n3w"
    (root / "results" / f"{CHAPTER}.json").write_text(json.dumps(published))
    assert "single-seed verdicts" in book.write_scorecard(root).read_text()


def test_findings_read_the_pooled_verdicts_of_a_sweep_of_todays_code(tmp_path):
    from memlab.core.results import chapter_code
    from memlab.report import pagekit

    sweep_dir, _ = _pooled_sweep(tmp_path, [0.4, 0.45, 0.42], code=chapter_code(CHAPTER))
    root = tmp_path / "book"
    robustness.publish(sweep_dir, root)
    own = [{"key": "c1", "claim": "A claim", "source": "T1", "verdict": "not judged", "evidence": "m=0.4"}]
    rows, basis = pagekit.published_verdicts(CHAPTER, own, book=root)
    assert rows[0]["verdict"] == "reproduced" and "pooled over 3 seeds" in basis
    text = pagekit.findings_markdown(rows, ["c1"], basis=basis)
    assert "pooled over 3 seeds" in text and "Reproduced" in text
    assert "single-seed" in pagekit.published_verdicts(CHAPTER, own, book=tmp_path / "nothing")[1]
    # the chapter's claims table gets the pooled verdicts beside this run's, as its Across seeds column
    across = pagekit.pooled_across(CHAPTER, book=root)
    assert across == {"c1": "reproduced, pooled over 3 seeds; per seed: not judged in all 3 runs"}
    from memlab.report import paper

    html = paper.claims_table(own, across=across)._repr_html_()
    assert "<th>Across seeds</th>" in html and "reproduced, pooled over 3 seeds" in html
    assert pagekit.pooled_across(CHAPTER, book=tmp_path / "nothing") is None
    stale, _ = _pooled_sweep(tmp_path / "old", [0.4, 0.45, 0.42], code="0ld")
    robustness.publish(stale, tmp_path / "old-book")
    assert pagekit.pooled_across(CHAPTER, book=tmp_path / "old-book") is None  # earlier code: no column
    # the terminal's closing line of a run says the same
    from memlab.run import runner

    assert "pooled over 3 seeds" in runner.verdict_basis(CHAPTER, book=root)
    assert runner.verdict_basis(CHAPTER, book=tmp_path / "old-book") == "verdicts single-seed (one run)"


def test_an_old_summary_without_pooled_rows_still_renders(tmp_path):
    text = robustness.write_page(_book(tmp_path, _summary(2, 3))).read_text()
    section = text.split(f"## {CHAPTERS[CHAPTER].title}")[1].split("\n## ")[0]
    assert '<td data-label="Pooled over seeds">–</td>' in section


def pooling_basis(n):
    from memlab.report import pooling

    return pooling.basis_words(n)
