"""`memlab book`: several chapters at once, what waits for what, and the book's time left."""

import json

import pytest

from conftest import SEED_SPEC, install_fake_chapter, seed_chapter_notebook
from memlab import cli
from memlab.core import chapters, costs
from memlab.run import bookrun


def test_the_makespan_gives_each_chapter_to_the_first_free_slot_longest_first():
    assert costs.makespan_s([10, 9, 8, 7, 6, 5], [], 1) == 45
    # 10 | 9, then 8 -> the 9 slot (17), 7 -> the 10 slot (17), 6 -> 23, 5 -> 22
    assert costs.makespan_s([10, 9, 8, 7, 6, 5], [], 2) == 23
    assert costs.makespan_s([5], [20, 1], 2) == 20      # the short one fits beside the running 20
    assert costs.makespan_s([], [3], 2) == 3
    assert costs.makespan_s([4, 4, 4], [], 3) == 4
    assert costs.makespan_s([], [], 2) == 0


def test_a_chapter_waits_only_for_the_earlier_chapters_that_train_a_model_it_reads():
    ests = {"a": {"keys": ["k1", "k2"], "to_train": {"k1": 5.0, "k2": 5.0}},
            "b": {"keys": ["k3"], "to_train": {"k3": 1.0}},
            "c": {"keys": ["k1", "k3", "k4"], "to_train": {"k4": 1.0}},   # reads a's k1 and b's k3
            "d": {"keys": ["k2"], "to_train": {}},                        # k2 will be trained by a
            "e": {"known": False}}                                        # never recorded: waits for none
    assert bookrun.needs(list(ests), ests) == {"a": set(), "b": set(), "c": {"a", "b"}, "d": {"a"}, "e": set()}
    # a model already cached (not in anyone's to_train) makes no one wait
    ests["a"]["to_train"] = {"k2": 5.0}
    assert bookrun.needs(list(ests), ests)["c"] == {"b"}


def _two_chapters(tmp_path, monkeypatch, body_b: str = ""):
    """Chapters ``fake`` and ``fake2``: each notes when it starts and ends (3 s apart) in ``times.jsonl``."""
    times = tmp_path / "times.jsonl"
    body = f"""
import json, time
t0 = time.time()
time.sleep(3)
{{extra}}
with open({str(times)!r}, "a") as f:
    f.write(json.dumps([cfg.chapter, t0, time.time()]) + "\\n")
run.record(x=1.0)
run.save(claims=[])
"""
    nb = seed_chapter_notebook("book_spec", body.replace("{extra}", ""))
    install_fake_chapter(tmp_path, monkeypatch, SEED_SPEC, nb, module="book_spec")
    nb2 = seed_chapter_notebook("book_spec", body.replace("{extra}", body_b)).replace('"fake"', '"fake2"')
    (tmp_path / "notebooks" / "fake2.py").write_text(nb2.replace("{spec_dir!r}", repr(str(tmp_path / "specs"))))
    monkeypatch.setitem(chapters.CHAPTERS, "fake2", chapters.Chapter("fake2", "Fake 2", "book_spec", "none.txt"))
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path / "cache"))
    rendered = []
    monkeypatch.setattr(cli, "render", lambda *a, **k: rendered.append(1))
    return times, rendered


def test_memlab_book_with_jobs_runs_chapters_at_once_and_records_the_book(tmp_path, monkeypatch, capsys):
    times, rendered = _two_chapters(tmp_path, monkeypatch)
    assert cli.main(["book", "--profile", "smoke", "--chapters", "fake", "fake2", "--jobs", "2",
                     "--threads", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("book: 2 chapters at profile smoke, 2 at a time; "
                      "checking every chapter's parameters before any runs")
    assert out[1] == "book estimate: no recorded run of its 2 chapters at smoke; running at 1 thread each, 2 chapters at a time"
    assert {line for line in out if line.startswith("book: starting")} == {
        "book: starting fake (chapter 1 of 2, 1 thread)", "book: starting fake2 (chapter 2 of 2, 1 thread)"}
    # what each chapter's run prints reaches this terminal
    assert any(line.startswith("fake: ran at profile smoke") for line in out)
    assert any(line.startswith("fake2: ran at profile smoke") for line in out)
    assert out[-1].startswith("book: its 2 chapters ran in ")
    spans = {c: (a, b) for c, a, b in map(json.loads, times.read_text().splitlines())}
    (a0, a1), (b0, b1) = spans["fake"], spans["fake2"]
    assert a0 < b1 and b0 < a1, f"the two chapters did not overlap: {spans}"
    log = costs.read_log(tmp_path / "book")
    assert sorted(r["chapter"] for r in log if r["kind"] != "book") == ["fake", "fake2"]
    book = log[-1]
    assert (book["kind"], book["jobs"], len(book["chapters"])) == ("book", 2, 2)
    # both in one book: its wall is less than the two chapters' walls added up
    assert book["wall_s"] < sum(c["wall_s"] for c in book["chapters"])
    # each shared the cores with the other: no cost of its own on the cost page's per-chapter columns
    assert [r.get("alongside") for r in log if r["kind"] != "book"] == [1, 1]
    assert costs._latest(log, "fake", "smoke", ("cold",)) is None
    assert rendered == [1]
    for c in ("fake", "fake2"):
        assert (tmp_path / "book" / "chapters" / f"{c}.ipynb").is_file()


def test_a_failing_chapter_stops_the_book_and_the_other_still_publishes(tmp_path, monkeypatch, capsys):
    times, rendered = _two_chapters(tmp_path, monkeypatch, body_b='raise ValueError("fake2 breaks")')
    assert cli.main(["book", "--profile", "smoke", "--chapters", "fake", "fake2", "--jobs", "2",
                     "--threads", "1"]) == 1
    cap = capsys.readouterr()
    assert "memlab: error: the book stopped: fake2: chapter 'fake2' failed" in cap.err
    assert (tmp_path / "book" / "chapters" / "fake.ipynb").is_file()
    assert not (tmp_path / "book" / "chapters" / "fake2.ipynb").exists()
    assert rendered == [] and not [r for r in costs.read_log(tmp_path / "book") if r["kind"] == "book"]


@pytest.mark.parametrize("jobs", ["0", "99"])
def test_a_bad_jobs_value_is_refused_before_any_work(tmp_path, monkeypatch, capsys, jobs):
    install_fake_chapter(tmp_path, monkeypatch, SEED_SPEC, seed_chapter_notebook("book_spec", ""), module="book_spec")
    assert cli.main(["book", "--profile", "smoke", "--chapters", "fake", "--jobs", jobs]) == 2
    cap = capsys.readouterr()
    assert cap.err.startswith(f"memlab: error: parameter 'jobs': must be an integer from 1 to {len(chapters.CHAPTERS)}")
    assert f"(got {jobs})" in cap.err and cap.out == ""
    assert not (tmp_path / "book" / "costs.json").exists()


def test_by_default_a_book_runs_as_many_chapters_as_the_cores_hold(monkeypatch):
    from types import SimpleNamespace

    from memlab.core import config

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(config, "available_cores", lambda: 4)
    assert bookrun.jobs_count(None) == 4 and bookrun.threads_per_job(None, 4) == 1
    assert bookrun.jobs_count(None, threads=2) == 2         # --threads 2: two chapters fill 4 cores
    assert bookrun.jobs_count(3) == 3                        # --jobs wins
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    assert bookrun.jobs_count(None) == 1 and bookrun.threads_per_job(None, 1) == 4
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(config, "available_cores", lambda: 64)
    assert bookrun.jobs_count(None) == len(chapters.CHAPTERS) and bookrun.threads_per_job(None, 6) == 10
    monkeypatch.setattr(config, "device", lambda *a: SimpleNamespace(type="cuda"))
    assert bookrun.jobs_count(None) == 1                     # chapters sharing one GPU each slow down


def test_a_long_silent_step_keeps_its_bar_ticking():
    # A bar redraws only when its loop advances; a 1 s step inside it (a cold import, the render)
    # would leave the terminal silent without the ticker.
    import io
    import time as _time

    from memlab.core.progress import ticking
    from tqdm.std import tqdm

    out = io.StringIO()
    with tqdm(total=1, desc="step", file=out, mininterval=0, bar_format="{desc} [{elapsed}]") as bar, ticking(bar, 0.2):
        _time.sleep(1.1)
    draws = [d for d in out.getvalue().split("\r") if d.startswith("step")]
    assert len(draws) >= 5, draws
    assert "step [00:01]" in draws
