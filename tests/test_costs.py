"""The cost ledger, the book's cost log and the estimate `memlab run` prints before any work."""

import json
import re

import pytest

from conftest import SEED_SPEC, install_fake_chapter, seed_chapter_notebook
from memlab import cli
from memlab.core import costs


@pytest.fixture(autouse=True)
def _fresh_ledger():
    costs.reset()
    yield
    costs.reset()


class Clock:
    """A fake process and wall clock, advanced by hand."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_a_nested_training_is_charged_only_its_own_seconds(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(costs.time, "process_time", clock)
    monkeypatch.setattr(costs.time, "perf_counter", clock)
    costs.begin("outer", "retrain")
    clock.t += 3          # outer's own work
    costs.begin("inner", "original")
    clock.t += 5          # the model outer needs, trained inside it
    costs.end("inner")
    clock.t += 2          # outer again
    costs.end("outer")
    costs.loaded("other", "probe")
    cost = costs.run_cost(cpu_s=12.0, wall_s=6.0, threads=2)
    assert cost["keys"]["inner"]["train_cpu_s"] == 5.0
    assert cost["keys"]["outer"]["train_cpu_s"] == 5.0  # 10 s inclusive minus the inner 5
    assert (cost["trained"], cost["loaded"], cost["train_cpu_s"], cost["threads"]) == (2, 1, 10.0, 2)
    assert costs.kind(cost) == "partial"
    assert costs.kind({"trained": 0, "loaded": 3}) == "warm" and costs.kind({"trained": 2, "loaded": 0}) == "cold"


def _payload(chapter="c", params=None, cpu=100.0, train=80.0, wall=60.0, threads=2, keys=None):
    keys = keys if keys is not None else {"k1": {"stage": "s", "trained": True, "train_cpu_s": 50.0},
                                          "k2": {"stage": "s", "trained": True, "train_cpu_s": 30.0}}
    trained = sum(e["trained"] for e in keys.values())
    return {"chapter": chapter, "profile": "cpu", "params": params or {"seed": 0},
            "provenance": {"date": "2026-12-01T00:00:00+00:00", "device": "cpu (X)", "git_commit": "abc",
                           "cost": {"cpu_s": cpu, "wall_s": wall, "threads": threads, "peak_memory_mb": 10.0,
                                    "trained": trained, "loaded": len(keys) - trained,
                                    "train_cpu_s": train, "keys": keys}}}


def test_the_estimate_counts_cached_models_and_charges_only_the_missing_ones(tmp_path):
    book = tmp_path / "book"
    book.mkdir()
    rec = costs.record(book, _payload(), wall_s=65.0, estimate_cpu_s=None)
    assert rec["kind"] == "cold" and rec["wall_s"] == 65.0
    est = costs.estimate("c", "cpu", {"seed": 0}, 2, [book], is_cached=lambda k: k == "k1")
    # the run's own 20 s (100 - 80 of training) plus k2's 30 s: k1 is cached
    assert (est["models"], est["cached"], est["cold_cpu_s"], est["this_cpu_s"]) == (2, 1, 100.0, 50.0)
    assert est["cold_wall_s"] == pytest.approx(100 / (100 / 60))  # the recorded run's CPU/wall ratio at 2 threads
    line = costs.estimate_line("c", "cpu", est)
    assert line.startswith("estimate: c at cpu: a cold run ~1.7 CPU-min (~1.0 min wall at 2 threads); "
                           "1 of 2 models cached, so this run ~0.8 CPU-min")
    at_four = costs.estimate("c", "cpu", {"seed": 0}, 4, [book], is_cached=lambda k: False)
    assert at_four["cold_wall_s"] is None and "wall at 4 threads not yet measured" in costs.estimate_line("c", "cpu", at_four)
    at_one = costs.estimate("c", "cpu", {"seed": 0}, 1, [book], is_cached=lambda k: False)
    assert at_one["cold_wall_s"] == at_one["cold_cpu_s"]  # one thread: wall about CPU, until a run says better
    other = costs.estimate("c", "cpu", {"seed": 0, "width": 16}, 2, [book], is_cached=lambda k: False)
    assert not other["known"]
    assert costs.estimate_line("c", "cpu", other) == ("estimate: no recorded run of c at cpu with these parameters "
                                                     "(1 recorded with other parameters); running at 2 threads")


def test_wall_time_comes_from_this_cpus_runs_weighted_by_their_length(tmp_path):
    # Thread efficiency is a property of the CPU, and a warm run of seconds (start-up at one busy
    # thread) says little about a cold run of minutes: the ratio is of sums, on this device first.
    def rec(device, cpu, wall, keys=None):
        payload = _payload(cpu=cpu, wall=wall, keys=keys)
        payload["provenance"]["device"] = device
        costs.record(tmp_path, payload, wall_s=wall)

    warm = {"k1": {"stage": "s", "trained": False}, "k2": {"stage": "s", "trained": False}}
    rec("cpu (A)", cpu=100.0, wall=100.0)            # 1.0 CPU-s per wall-s on A
    rec("cpu (B)", cpu=190.0, wall=100.0)            # 1.9 on B, a long cold run
    rec("cpu (B)", cpu=5.0, wall=10.0, keys=warm)    # 0.5 on B, a short warm one
    on_b = costs.estimate("c", "cpu", {"seed": 0}, 2, [tmp_path], is_cached=lambda k: False, device="cpu (B)")
    assert on_b["speed"] == pytest.approx(195.0 / 110.0)  # not the mean of ratios, (1.9 + 0.5) / 2
    on_a = costs.estimate("c", "cpu", {"seed": 0}, 2, [tmp_path], is_cached=lambda k: False, device="cpu (A)")
    assert on_a["speed"] == pytest.approx(1.0)
    elsewhere = costs.estimate("c", "cpu", {"seed": 0}, 2, [tmp_path], is_cached=lambda k: False, device="cpu (C)")
    assert elsewhere["speed"] == pytest.approx(295.0 / 210.0)  # no run on C: every run at 2 threads


def test_costs_come_from_runs_at_the_same_thread_count_or_are_converted_to_it(tmp_path):
    # A second thread never halves the wall time, so a run at 2 threads burns more CPU seconds
    # than at 1: the estimate for a 1-thread run prefers 1-thread records, and converts 2-thread
    # ones by the ratio of the runs recorded at both thread counts (pooled over chapters).
    def rec(chapter, threads, cpu, k1):  # k1 and k2 trained, the rest the run's own
        keys = {f"{chapter}1": {"stage": "s", "trained": True, "train_cpu_s": k1},
                f"{chapter}2": {"stage": "s", "trained": True, "train_cpu_s": 10.0}}
        costs.record(tmp_path, _payload(chapter=chapter, cpu=cpu, train=k1 + 10.0, threads=threads, keys=keys),
                     wall_s=cpu / threads)

    rec("a", 1, cpu=100.0, k1=60.0)
    rec("a", 2, cpu=150.0, k1=100.0)  # later, at the other thread count
    rec("c", 2, cpu=100.0, k1=50.0)
    rec("c", 1, cpu=50.0, k1=20.0)
    rec("b", 2, cpu=240.0, k1=170.0)  # never run at one thread
    ratio = (100.0 + 50.0) / (150.0 + 100.0)
    assert costs._setup_ratio(costs.read_log(tmp_path), (None, 1), ("cpu (X)", 2)) == pytest.approx(ratio)

    def cold(chapter, threads):
        return costs.estimate(chapter, "cpu", {"seed": 0}, threads, [tmp_path], is_cached=lambda k: False)["cold_cpu_s"]

    assert cold("a", 1) == pytest.approx(100.0)  # its own 1-thread run, not the later 2-thread one
    assert cold("a", 2) == pytest.approx(150.0)
    assert cold("b", 2) == pytest.approx(240.0)
    assert cold("b", 1) == pytest.approx(240.0 * ratio, abs=0.1)


def test_costs_recorded_on_another_cpu_are_converted_by_the_runs_recorded_on_both(tmp_path):
    def rec(chapter, device, threads, cpu):
        payload = _payload(chapter=chapter, cpu=cpu, train=cpu * 0.8, threads=threads,
                           keys={f"{chapter}1": {"stage": "s", "trained": True, "train_cpu_s": cpu * 0.8}})
        payload["provenance"]["device"] = device
        costs.record(tmp_path, payload, wall_s=cpu / threads)

    rec("a", "cpu (X)", 2, 100.0)
    rec("a", "cpu (Y)", 2, 50.0)   # Y burns half X's CPU seconds on the same run
    rec("a", "cpu (Y)", 1, 40.0)   # and 0.8 of them at one thread
    rec("b", "cpu (X)", 2, 200.0)  # b never ran on Y

    def cold(device, threads):
        return costs.estimate("b", "cpu", {"seed": 0}, threads, [tmp_path], is_cached=lambda k: False,
                              device=device)["cold_cpu_s"]

    assert cold("cpu (X)", 2) == pytest.approx(200.0)
    assert cold("cpu (Y)", 2) == pytest.approx(100.0)
    assert cold("cpu (Y)", 1) == pytest.approx(80.0)  # Y's CPU ratio, then Y's thread ratio
    assert cold("cpu (Z)", 2) == pytest.approx(200.0)  # nothing recorded on Z: taken as it is


def test_a_model_only_a_cold_run_trains_is_charged_only_when_the_models_it_serves_are_missing(tmp_path):
    # k2 is trained only to train k1; a run with k1 cached never touches it, so the last (warm)
    # run's keys miss it, yet a cold run pays for it.
    costs.record(tmp_path, _payload(), wall_s=65.0)  # cold: k1 50 s, k2 30 s, its own 20 s
    costs.record(tmp_path, _payload(cpu=20.0, train=0.0, keys={"k1": {"stage": "s", "trained": False}}), wall_s=15.0)
    none = costs.estimate("c", "cpu", {"seed": 0}, 2, [tmp_path], is_cached=lambda k: False)
    assert (none["models"], none["cold_cpu_s"], none["this_cpu_s"]) == (1, 100.0, 100.0)
    k1 = costs.estimate("c", "cpu", {"seed": 0}, 2, [tmp_path], is_cached=lambda k: k == "k1")
    assert (k1["cached"], k1["cold_cpu_s"], k1["this_cpu_s"]) == (1, 100.0, 20.0)


def test_the_estimate_is_checked_against_the_runs_recorded_after_it(tmp_path):
    costs.record(tmp_path, _payload(cpu=100.0, train=80.0), wall_s=60.0)
    costs.record(tmp_path, _payload(cpu=125.0, train=80.0), wall_s=70.0)  # the same run, measured 25 % dearer
    log = costs.read_log(tmp_path)
    (check,) = costs.backtest(log)  # the first had nothing before it to be estimated from
    assert (check["cpu_s"], check["estimate_cpu_s"], check["error"], check["same_cpu"]) == (125.0, 100.0, -0.2, True)
    assert "within 20 % of the CPU time measured" in costs.backtest_sentence(log, "cpu")
    assert "How close the estimate is" in costs.page_markdown(log, {"c": "C"})


def test_a_new_seed_is_estimated_from_the_run_of_another_seed_and_charged_as_cold(tmp_path):
    # A seed sweep's seeds 1, 2, ... have never run, but they train the same models for the same
    # steps as seed 0: its cost is theirs. Seed 0's models are cached, yet none of them is seed 1's.
    costs.record(tmp_path, _payload(params={"seed": 0, "steps": 10}), wall_s=65.0)
    est = costs.estimate("c", "cpu", {"seed": 1, "steps": 10}, 2, [tmp_path], is_cached=lambda k: True)
    assert est["known"] and est["other_seed"] and est["cached"] is None
    assert (est["models"], est["cold_cpu_s"], est["this_cpu_s"]) == (2, 100.0, 100.0)
    assert costs.estimate_line("c", "cpu", est) == (
        "estimate: c at cpu: a cold run ~1.7 CPU-min (~1.0 min wall at 2 threads), from the recorded run with "
        "another seed; which of this seed's 2 models are cached is known only once one has run, so at most that")
    longer = costs.estimate("c", "cpu", {"seed": 1, "steps": 20}, 2, [tmp_path], is_cached=lambda k: True)
    assert not longer["known"]  # another schedule is not the same cost
    same = costs.estimate("c", "cpu", {"seed": 0, "steps": 10}, 2, [tmp_path], is_cached=lambda k: True)
    assert not same["other_seed"] and same["cached"] == 2


def test_after_a_code_change_the_estimate_counts_no_recorded_model_as_cached(tmp_path):
    # The cache keys hash the chapter's CODE_VERSION: the old models are still in the cache, but
    # the new code trains its own.
    costs.record(tmp_path, _payload(), wall_s=65.0, code="2")
    same = costs.estimate("c", "cpu", {"seed": 0}, 2, [tmp_path], is_cached=lambda k: True, code="2")
    assert same["cached"] == 2 and "stale_code" not in same
    new = costs.estimate("c", "cpu", {"seed": 0}, 2, [tmp_path], is_cached=lambda k: True, code="3")
    assert (new["cached"], new["this_cpu_s"], new["cold_cpu_s"], new["stale_code"]) == (0, 100.0, 100.0, "2")
    assert ("the chapter's code changed since the recorded run (version 2): none of its models is reused, "
            "so this run ~1.7 CPU-min") in costs.estimate_line("c", "cpu", new)


def test_the_log_keeps_the_latest_records_of_each_chapter(tmp_path):
    for i in range(costs.KEEP_PER_CHAPTER + 3):
        costs.record(tmp_path, _payload(cpu=100.0 + i), wall_s=1.0)
    costs.record(tmp_path, _payload(chapter="d"), wall_s=1.0)
    runs = costs.read_log(tmp_path)
    c = [r for r in runs if r["chapter"] == "c"]
    assert len(c) == costs.KEEP_PER_CHAPTER and c[-1]["cpu_s"] == 100.0 + costs.KEEP_PER_CHAPTER + 2
    assert [r["chapter"] for r in runs].count("d") == 1
    assert costs.record(tmp_path, {"provenance": {}}, wall_s=1.0) is None  # results without a cost
    costs.record(tmp_path, _payload(chapter="d"), wall_s=1.0)  # the same run published again: one record
    assert [r["chapter"] for r in costs.read_log(tmp_path)].count("d") == 1
    costs.record(tmp_path, _payload(chapter="d", cpu=123.0), wall_s=2.0)  # another run of it
    assert [r["chapter"] for r in costs.read_log(tmp_path)].count("d") == 2


NOTEBOOK = seed_chapter_notebook("costs_spec", """
for stage in ("a", "b"):
    t = cache.load_or_compute("fake", stage, {"seed": cfg.seed}, lambda: {"x": torch.randn(64, 64) @ torch.randn(64, 64)})
run.record(x=float(t["x"].sum()))
run.save(claims=[])
""")


def test_a_run_says_its_cost_before_it_starts_and_records_it_after(tmp_path, monkeypatch, capsys):
    install_fake_chapter(tmp_path, monkeypatch, SEED_SPEC, NOTEBOOK, module="costs_spec")
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path / "cache"))
    assert cli.main(["run", "fake", "--profile", "smoke", "--threads", "1"]) == 0
    first = capsys.readouterr().out
    assert first.splitlines()[0] == ("estimate: no recorded run of fake at smoke with these parameters; "
                                      "running at 1 thread")
    log = json.loads((tmp_path / "book" / "costs.json").read_text())["runs"]
    assert [(r["kind"], r["trained"], r["loaded"], r["threads"]) for r in log] == [("cold", 2, 0, 1)]
    assert cli.main(["run", "fake", "--profile", "smoke", "--threads", "1"]) == 0
    second = capsys.readouterr().out.splitlines()[0]
    assert second.startswith("estimate: fake at smoke: a cold run ~") and "2 of 2 models cached" in second
    log = json.loads((tmp_path / "book" / "costs.json").read_text())["runs"]
    assert [(r["kind"], r["trained"], r["loaded"]) for r in log] == [("cold", 2, 0), ("warm", 0, 2)]
    assert log[1]["estimate_cpu_s"] is not None and log[1]["peak_memory_mb"] > 0
    # the dry run says the same, on stderr, leaving stdout to the configuration's JSON
    assert cli.main(["run", "fake", "--profile", "smoke", "--dry-run"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["seed"] == 0 and "2 of 2 models cached" in out.err


def test_the_cost_page_shows_the_last_cold_and_warm_run_of_every_chapter(tmp_path):
    costs.record(tmp_path, _payload(chapter="a", cpu=600.0, wall=300.0), wall_s=320.0)
    warm = {"k1": {"stage": "s", "trained": False}, "k2": {"stage": "s", "trained": False}}
    costs.record(tmp_path, _payload(chapter="a", cpu=60.0, train=0.0, wall=40.0, keys=warm), wall_s=45.0,
                 estimate_cpu_s=66.0)
    runs = costs.read_log(tmp_path)
    page = costs.page_markdown(runs, {"a": "Chapter A", "b": "Chapter B"})
    rows = _cost_rows(page)
    assert rows == [["1. Chapter A", "5.3 / 10", "2", "0.8 / 1.0", "0.0", "1.1 vs 1.0"],
                    ["2. Chapter B", "no recorded run yet"]]
    labels = re.findall(r'<td class="card-short" data-label="([^"]+)">', page)
    assert labels == list(costs.COST_COLUMNS), "on a phone each number is a card line under its column's name"
    assert "## Profile `cpu`" in page
    assert "- X, 2 threads: the cold run of chapter 1; the warm run of chapter 1 (2026-12-01)" in page
    assert "No run has recorded" in costs.page_markdown([], {"a": "Chapter A"})
    summary = costs.summary_markdown(runs, {"a": "Chapter A", "b": "Chapter B"})
    assert summary.startswith("Measured cold (empty model cache) at `cpu`: the chapters took 5.3 minutes wall "
                              "and 10 CPU-minutes in all (1 of 2 chapters recorded), at 2 thread(s)")
    assert "No cold run" in costs.summary_markdown([], {"a": "Chapter A"})


def _cost_rows(page: str) -> list[list[str]]:
    """The cost table's body rows as cell texts (the page's HTML table)."""
    body = page[page.index("<tbody>"):page.index("</tbody>")]
    return [[re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", body)]


def test_the_cost_page_groups_its_runs_by_machine(tmp_path):
    """Each machine and thread count is named once, with the chapters' cold and warm runs made there."""
    costs.record(tmp_path, _payload(chapter="a"), wall_s=60.0)
    costs.record(tmp_path, _payload(chapter="b"), wall_s=60.0)
    warm = _payload(chapter="a", train=0.0, keys={"k1": {"stage": "s", "trained": False}}, threads=1)
    warm["provenance"].update(device="cpu (Y, AVX2)", date="2026-12-03T00:00:00+00:00")
    costs.record(tmp_path, warm, wall_s=30.0)
    page = costs.page_markdown(costs.read_log(tmp_path), {"a": "A", "b": "B"})
    assert "- X, 2 threads: cold runs of chapters 1, 2 (2026-12-01)" in page
    assert "- Y, AVX2, 1 thread: the warm run of chapter 1 (2026-12-03)" in page
    assert page.count("X, 2 threads") == 1


def test_the_book_total_counts_each_shared_model_once():
    """A later chapter's cold run trains again what an earlier one trained (chapter 6 reads 1 and 3)."""
    first = {"chapter": "a", "wall_s": 600.0, "cpu_s": 1000.0,
             "keys": {"m1": {"trained": True, "train_wall_s": 200.0, "train_cpu_s": 380.0}}}
    later = {"chapter": "b", "wall_s": 300.0, "cpu_s": 500.0,
             "keys": {"m1": {"trained": True, "train_wall_s": 210.0, "train_cpu_s": 400.0},
                      "m2": {"trained": True, "train_wall_s": 50.0, "train_cpu_s": 90.0}}}
    assert costs.book_cold_s([first, later]) == (600.0 + 300.0 - 210.0, 1000.0 + 500.0 - 400.0)
    assert costs.book_cold_s([later, first]) == (300.0 + 600.0 - 200.0, 500.0 + 1000.0 - 380.0)
    assert costs.book_cold_s([first]) == (600.0, 1000.0)


def _staged_chapter(tmp_path, chapter, profile):
    """A staged page (one markdown cell) and its published results, as `memlab render` sees them."""
    nb = tmp_path / "stage" / f"{chapter}.ipynb"
    nb.parent.mkdir(parents=True)
    nb.write_text(json.dumps({"cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# A"]}],
                              "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / f"{chapter}.json").write_text(json.dumps({"profile": profile}))
    return nb


def test_a_chapter_page_states_its_measured_cold_and_warm_cost_and_why_a_slow_one_is_slow(tmp_path):
    keys = {"o": {"stage": "original", "trained": True, "train_cpu_s": 700.0, "train_wall_s": 400.0},
            "u1": {"stage": "unlearned", "trained": True, "train_cpu_s": 100.0, "train_wall_s": 60.0},
            "u2": {"stage": "unlearned", "trained": True, "train_cpu_s": 100.0, "train_wall_s": 60.0}}
    costs.record(tmp_path, _payload(chapter="a", cpu=1200.0, train=900.0, wall=640.0, keys=keys), wall_s=650.0)
    runs = costs.read_log(tmp_path)
    text = costs.chapter_markdown(runs, "a", "cpu")
    # cold: 650 s wall, 1200 s CPU; training 400 + 120 s wall by stage, the costliest first; the rest 130 s
    assert ("**From an empty model cache**: 11 min wall and 20 CPU-minutes (X, 2 threads, 2026-12-01). "
            "Training its 3 models took 8.7 min by stage (\u201coriginal\u201d: 1 model, 6.7 min; "
            "\u201cunlearned\u201d: 2 models, 2.0 min); the rest, 2.2 min, is the page's own evaluation.") in text
    # no warm run yet: the cold run's CPU less its training (1200 - 900 s)
    assert "**With every model cached**: not recorded yet; about 5.0 CPU-minutes" in text
    # 650 s is over the 8-minute target: the page says so and what share is training (520 / 650)
    assert f"longer than the {costs.TARGET_COLD_MIN} minutes" in text and "80 % of its wall time" in text
    assert "`memlab run a --dry-run`" in text and "](../cost.md)" in text
    warm = {k: {"stage": v["stage"], "trained": False} for k, v in keys.items()}
    costs.record(tmp_path, _payload(chapter="a", cpu=300.0, train=0.0, wall=200.0, keys=warm), wall_s=210.0)
    text = costs.chapter_markdown(costs.read_log(tmp_path), "a", "cpu")
    assert "**With every model cached**: 3.5 min wall and 5.0 CPU-minutes (X, 2 threads, 2026-12-01)." in text
    # a fast chapter makes no excuse; a profile without records says so
    costs.record(tmp_path, _payload(chapter="b", cpu=200.0, train=80.0, wall=100.0), wall_s=120.0)
    assert "longer than" not in costs.chapter_markdown(costs.read_log(tmp_path), "b", "cpu")
    assert "No run of this chapter at `paper`" in costs.chapter_markdown(runs, "a", "paper")


def test_render_appends_the_cost_section_at_the_pages_own_profile(tmp_path):
    from memlab.report import book

    costs.record(tmp_path, _payload(chapter="a", cpu=600.0, wall=300.0), wall_s=320.0)
    nb = _staged_chapter(tmp_path, "a", "cpu")
    assert book.add_cost_section(nb, tmp_path)
    cells = json.loads(nb.read_text())["cells"]
    assert len(cells) == 2 and "".join(cells[1]["source"]).startswith("## What a run of this chapter costs")
    assert "5.3 min wall" in "".join(cells[1]["source"])
    (tmp_path / "results" / "a.json").unlink()  # a page without published results gets no section
    assert not book.add_cost_section(nb, tmp_path)


def test_a_later_partial_run_is_shown_beside_the_cold_one():
    """Chapter 3 after its thread change: a run that trained 3 of 5 models is newer than its cold record."""
    cold = {"chapter": "a", "profile": "cpu", "kind": "cold", "wall_s": 1140.0, "cpu_s": 1120.0, "threads": 1,
            "trained": 5, "loaded": 0, "train_cpu_s": 700.0, "device": "cpu (X)", "date": "2026-12-02",
            "keys": {"m": {"stage": "s", "trained": True, "train_wall_s": 700.0}}}
    part = {**cold, "kind": "partial", "wall_s": 578.0, "cpu_s": 1117.0, "threads": 2, "trained": 3, "loaded": 2,
            "date": "2026-12-03"}
    text = costs.chapter_markdown([cold, part], "a", "cpu")
    assert ("- **The last run** trained 3 of its 5 models and loaded the rest: 9.6 min wall and 19 CPU-minutes "
            "(X, 2 threads, 2026-12-03).") in text
    assert "The last run" not in costs.chapter_markdown([part, cold], "a", "cpu")  # older than the cold run


def test_the_book_estimate_charges_a_shared_model_to_the_first_chapter_only(tmp_path):
    # chapter b reads chapter a's model k1 (as chapter 6 reads chapters 1 and 3's): a book trains it once
    costs.record(tmp_path, _payload(chapter="a"), wall_s=65.0)
    shared = {"k1": {"stage": "s", "trained": True, "train_cpu_s": 50.0},
              "k3": {"stage": "s", "trained": True, "train_cpu_s": 10.0}}
    costs.record(tmp_path, _payload(chapter="b", cpu=70.0, train=60.0, wall=35.0, keys=shared), wall_s=40.0)
    ests = {c: costs.estimate(c, "cpu", {"seed": 0}, 2, [tmp_path], is_cached=lambda k: k == "k2") for c in "ab"}
    book = costs.book_estimate(ests)
    # a: its own 20 s + k1 50 (k2 cached); b: its own 10 s + k3 10, k1 already charged to a
    assert book["chapters"]["a"]["cpu_s"] == 70.0 and book["chapters"]["b"]["cpu_s"] == 20.0
    assert (book["cpu_s"], book["models"], book["cached"], book["unknown"]) == (90.0, 3, 1, [])
    assert book["chapters"]["b"]["wall_s"] == pytest.approx(20.0 / (70.0 / 35.0))  # b's own CPU/wall ratio
    assert costs.book_left_s(book, ["b"]) == pytest.approx(10.0)
    # chapter a ran in half its estimate (70 CPU-s at its 100/60 CPU per wall second): what is left is scaled too
    assert book["chapters"]["a"]["wall_s"] == pytest.approx(42.0)
    assert costs.book_left_s(book, ["b"], {"a": 21.0}) == pytest.approx(5.0)
    assert costs.book_estimate_line("cpu", 2, book).startswith(
        "book estimate: 2 chapters at cpu, ~1.5 CPU-min (~")
    assert "1 of 3 models cached, each shared model trained once" in costs.book_estimate_line("cpu", 2, book)
    ests["c"] = costs.estimate("c", "cpu", {"seed": 0}, 2, [tmp_path], is_cached=lambda k: False)
    book = costs.book_estimate(ests)
    assert book["unknown"] == ["c"] and book["wall_s"] is None and costs.book_left_s(book, ["a", "c"]) is None
    assert costs.book_estimate_line("cpu", 1, book).endswith("not counted: c (no recorded run at these parameters)")
    none = costs.book_estimate({"c": ests["c"]})
    assert costs.book_estimate_line("cpu", 1, none) == "book estimate: no recorded run of its 1 chapter at cpu; running at 1 thread"


def test_a_book_run_is_recorded_whole_and_the_pages_report_it(tmp_path):
    a = costs.record(tmp_path, _payload(chapter="a", cpu=600.0, wall=300.0), wall_s=320.0)
    reads_a = {"k1": {"stage": "s", "trained": False}, "k3": {"stage": "s", "trained": True, "train_cpu_s": 9.0}}
    b = costs.record(tmp_path, _payload(chapter="b", cpu=100.0, train=9.0, wall=60.0, keys=reads_a), wall_s=70.0)
    rec = costs.record_book(tmp_path, "cpu", 400.0, [a, b])
    assert rec["from_empty_cache"] and rec["kind"] == "book" and rec["cpu_s"] == 700.0
    assert [c["kind"] for c in rec["chapters"]] == ["cold", "partial"]
    # b alone loaded k1, which no earlier chapter of that book run trained: not a cold book
    assert not costs.record_book(tmp_path, "cpu", 70.0, [b])["from_empty_cache"]
    assert costs.record_book(tmp_path, "cpu", 1.0, []) is None
    runs = costs.read_log(tmp_path)
    titles = {"a": "Chapter A", "b": "Chapter B"}
    summary = costs.summary_markdown(runs, titles)
    assert summary.startswith("Measured at `cpu` in one `memlab book` from an empty model cache: the 2 chapters "
                              "took 6.7 minutes wall and 12 CPU-minutes (X, 2 threads, 2026-12-01); the longest, "
                              "Chapter A, 5.3 minutes.")
    page = costs.page_markdown(runs, titles)
    assert ("**The whole book from an empty model cache**, in one `memlab book`: 6.7 min wall and 12 CPU-minutes "
            "for its 2 chapters") in page
    assert "Per chapter, wall: 1. 5.3 min; 2. 1.2 min, 1 of its models loaded from earlier chapters." in page
    assert page.index("The whole book") < page.index("<table")  # the book first, then its chapters
    assert "On another CPU" not in page
    elsewhere = costs.record_book(tmp_path, "cpu", 500.0, [dict(a, device="cpu (Y)")])  # a later book on Y
    page = costs.page_markdown(costs.read_log(tmp_path), titles)
    assert ("from an empty model cache**, in one `memlab book`: 8.3 min wall and 10 CPU-minutes for its 1 chapter "
            "(Y, 2 threads, 2026-12-01; the render after them not counted). On another CPU the last cold book took "
            "6.7 min wall and 12 CPU-minutes (X, 2 threads, 2026-12-01, commit abc).") in page
    assert elsewhere["device"] == "cpu (Y)"
    for _ in range(costs.KEEP_PER_CHAPTER + 2):
        costs.record_book(tmp_path, "cpu", 400.0, [a, b])
    assert sum(r["kind"] == "book" for r in costs.read_log(tmp_path)) == costs.KEEP_PER_CHAPTER
    assert [r["chapter"] for r in costs.read_log(tmp_path)].count("a") == 1  # chapters' records untouched


def test_memlab_book_prints_its_estimate_first_and_records_itself(tmp_path, monkeypatch, capsys):
    install_fake_chapter(tmp_path, monkeypatch, SEED_SPEC, NOTEBOOK, module="costs_spec")
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path / "cache"))
    rendered = []
    monkeypatch.setattr(cli, "render", lambda *a, **k: rendered.append(1))
    assert cli.main(["book", "--profile", "smoke", "--chapters", "fake", "--threads", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == ["book: 1 chapter at profile smoke; checking every chapter's parameters before any runs",
                       "book estimate: no recorded run of its 1 chapter at smoke; running at 1 thread",
                       "book: chapter 1 of 1: fake"]
    assert out[-1].startswith("book: its 1 chapter ran in ") and "from an empty model cache" in out[-1]
    assert rendered == [1]
    log = costs.read_log(tmp_path / "book")
    assert [r["kind"] for r in log] == ["cold", "book"] and log[1]["from_empty_cache"]
    assert log[1]["chapters"][0]["trained"] == 2 and log[1]["wall_s"] >= log[0]["wall_s"]
    assert cli.main(["book", "--profile", "smoke", "--chapters", "fake", "--threads", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("book estimate: 1 chapter at smoke, ~") and "2 of 2 models cached" in out[1]
    assert out[2].startswith("book: chapter 1 of 1: fake (estimated ~") and out[2].endswith(" min of the book left)")
    assert "with some models cached" in out[-1]
    assert not costs.read_log(tmp_path / "book")[-1]["from_empty_cache"]


def test_the_readmes_book_time_is_the_latest_cold_book_in_the_cost_log():
    # The README states what the whole book costs; it must be the measurement, not a promise.
    import re

    from memlab.core.config import repo_root

    root = repo_root()
    whole = costs._latest_book(costs.read_log(root / "book"), "cpu")
    assert whole is not None, "book/costs.json holds no cold `memlab book` run at cpu"
    text = " ".join((root / "README.md").read_text().split())
    said = re.search(r"[Ff]rom an empty model cache it took \*\*(\d+) minutes\*\* wall on an idle (\d+)-core", text)
    assert said, "the README's 'Build the whole book' paragraph no longer states the measured time"
    assert costs._minutes(whole["wall_s"]) == said.group(1)
    assert int(said.group(2)) == whole["threads"] * whole.get("jobs", 1)  # every core the book used
    if whole.get("jobs", 1) > 1:
        assert f"{whole['jobs']} chapters at a time" in text
