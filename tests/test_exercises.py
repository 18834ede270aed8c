"""The course kit (memlab.course.exercises): otter-grader masters, student versions, autograders.

The autograder is proven both ways for every chapter's master: the solved notebook scores
100%, the untouched student notebook scores 0 on every autograded question, and a
deliberately wrong answer fails exactly the question it should. The student versions (the
build's and the book's copies) carry no solution line, sample answer or hidden test.
Grading is otter's local runner (no Docker), one kernel per notebook; every exercise is tiny.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import nbformat
import pytest

from memlab import cli
from memlab.core.chapters import CHAPTERS
from memlab.course import exercises

REPO = Path(__file__).resolve().parents[1]
MASTERS = exercises.masters(REPO)

# One deliberately wrong answer per chapter: (text of the solution, wrong text, the question
# that must fail). The others must still score in full: a wrong answer costs only its own points.
WRONG = {
    "01_bn_illusion": ("m.momentum = None", "pass", "q1"),  # exponential, not cumulative, average
    "02_sde": ("np.trace(k @ h @ l @ h)", "np.trace(k @ l)", "q1"),  # HSIC without centring
    "03_canary_audit": ("2.0 / len(logp) * torch.sigmoid", "2.0 * torch.sigmoid", "q4"),  # sum, not mean
    "04_qskew": ("w / w.mean() * 3", "w * 3", "q2"),  # Q-Skew weights not normalised
    "05_capacity": ("first, ids = math.log2(lp.shape[1]), ids[1:]", "first, ids = 0.0, ids[1:]",
                    "q1"),  # token 0 coded for free (caught by a hidden test only)
}
# The chapters that reproduce a paper (a chapter judging the book's own hypotheses has none).
PAPER_CHAPTERS = [c for c, ch in CHAPTERS.items() if not getattr(ch, "hypotheses", False)]


@pytest.fixture(scope="module", autouse=True)
def _one_thread(monkeypatch_module):
    monkeypatch_module.setenv("OMP_NUM_THREADS", "1")
    monkeypatch_module.setenv("MEMLAB_PROGRESS", "0")


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


@pytest.fixture(scope="module")
def built(tmp_path_factory, _one_thread):
    out = tmp_path_factory.mktemp("exercises-build")
    t0 = time.perf_counter()
    paths = exercises.build(out=out, root=REPO)
    print(f"exercises: built {len(paths)} assignments in {time.perf_counter() - t0:.1f} s")
    return paths


def _graded_questions(chapter: str) -> dict[str, float]:
    qs = exercises.questions(exercises.read_master(MASTERS[chapter]))
    return {q["name"]: float(q["points"]) for q in qs if not q["manual"]}


def test_every_chapter_has_a_master_with_graded_and_rerun_exercises():
    assert set(PAPER_CHAPTERS) <= set(MASTERS) <= set(CHAPTERS), "one exercises/<chapter>.py per chapter"
    assert sorted(WRONG) == sorted(MASTERS), "every master has a deliberately wrong answer below"
    for chapter, path in MASTERS.items():
        qs = exercises.questions(exercises.read_master(path))
        auto = [q for q in qs if not q["manual"]]
        assert len(qs) >= 3, f"{chapter}: at least three exercises"
        assert len(auto) >= 2, f"{chapter}: at least two autograded exercises"
        assert any(q["manual"] for q in qs), f"{chapter}: a manually graded re-run exercise"
        text = path.read_text()
        assert f"memlab run {chapter}" in text, f"{chapter}: the open exercise re-runs the chapter"
        for q in auto:
            assert q["n_tests"] > q["n_hidden"] >= 1, f"{chapter} {q['name']}: public and hidden tests"


@pytest.mark.parametrize("chapter", sorted(MASTERS))
def test_autograder_gives_the_master_full_marks_and_the_stub_none(built, chapter):
    paths = built[chapter]
    graded = _graded_questions(chapter)
    t0 = time.perf_counter()
    solved = exercises.grade_one(paths["solved"], paths["autograder"])
    # debug: a cell that raises fails the test (the student notebook must run top to bottom).
    stub = exercises.grade_one(paths["student"], paths["autograder"], debug=True)
    print(f"{chapter}: graded master and stub in {time.perf_counter() - t0:.1f} s")
    assert solved["error"] is None and stub["error"] is None, (solved["error"], stub["error"])
    assert set(solved["questions"]) == set(graded), "the autograder grades exactly the autograded questions"
    for q, pts in graded.items():
        got = {k: solved["questions"][q][k] for k in ("score", "possible", "status")}
        assert got == {"score": pts, "possible": pts, "status": "passed"}, f"master {q}: {got}"
        assert stub["questions"][q]["score"] == 0, f"untouched stub scores on {q}: {stub['questions'][q]}"
    assert solved["percent"] == 1.0 and stub["score"] == 0


@pytest.mark.parametrize("chapter", sorted(WRONG))
def test_a_wrong_answer_fails_the_question_it_should(built, chapter, tmp_path):
    old, new, failing = WRONG[chapter]
    wrong = exercises.with_answer_replaced(built[chapter]["solved"], old, new, tmp_path / f"{chapter}.ipynb")
    res = exercises.grade_one(wrong, built[chapter]["autograder"])
    for q, pts in _graded_questions(chapter).items():
        got = res["questions"][q]["score"]
        if q == failing:
            assert got < pts, f"{chapter}: {new!r} instead of {old!r} must fail {q} (scored {got}/{pts})"
        else:
            assert got == pts, f"{chapter}: the wrong {failing} must not cost {q} its points ({got}/{pts})"


def _secrets(chapter: str, autograder: Path) -> list[str]:
    """Solution lines, sample answers and hidden tests (as written and as otter stored them)."""
    stored = [l[4:] for code in exercises.hidden_test_code(autograder) for l in code.splitlines()]
    return exercises.secret_fragments(exercises.read_master(MASTERS[chapter]), extra=stored)


def test_student_versions_carry_no_solutions_or_hidden_tests(built):
    for chapter, paths in built.items():
        frags = _secrets(chapter, paths["autograder"])
        assert len(frags) >= 10, f"{chapter}: the secret fragments were not found (parser broken?)"
        student = nbformat.read(str(paths["student"]), as_version=4)
        text = "\n".join(c.source for c in student.cells) + json.dumps(student.metadata)
        leaked = [f for f in frags if f in text]
        assert not leaked, f"{chapter}: the student notebook shows {leaked[:3]}"
        solved = "\n".join(c.source for c in nbformat.read(str(paths["solved"]), as_version=4).cells)
        own = exercises.secret_fragments(exercises.read_master(MASTERS[chapter]))
        present = sum(f in solved for f in own)
        assert present > 0, f"{chapter}: the solved notebook lost its solutions"


def test_book_pages_are_the_current_student_versions(built):
    """book/exercises/<chapter>.ipynb (what the book renders) equals a fresh student build."""
    for chapter, paths in built.items():
        page = REPO / exercises.BOOK_SUBDIR / f"{chapter}.ipynb"
        assert page.exists(), f"{page} missing: run `memlab exercises build --book`"
        fresh = [c.source for c in nbformat.read(str(paths["student"]), as_version=4).cells]
        pub = [c.source for c in nbformat.read(str(page), as_version=4).cells]
        assert pub == fresh, f"{page} is stale: run `memlab exercises build --book`"
        text = page.read_text()
        assert not [f for f in _secrets(chapter, paths["autograder"]) if f in text]


def test_a_students_variant_changes_only_their_knobs_and_grades_in_full(built, tmp_path):
    paths = built["02_sde"]
    a = exercises.make_variant(paths["solved"], "student-17", tmp_path / "a" / "02_sde.ipynb")
    b = exercises.make_variant(paths["solved"], "student-17", tmp_path / "b" / "02_sde.ipynb")
    c = exercises.make_variant(paths["solved"], "student-18", tmp_path / "c" / "02_sde.ipynb")
    assert a == b and set(a) == {"SEED", "STUDENT"} and a != c, "stable per student, different between students"
    src = (tmp_path / "a" / "02_sde.ipynb").read_text()
    assert f"SEED = {a['SEED']}  # per-student" in src and 'STUDENT = \\"student-17\\"  # per-student' in src
    res = exercises.grade_one(tmp_path / "a" / "02_sde.ipynb", paths["autograder"])
    assert res["percent"] == 1.0, "one autograder grades every student's variant"


def test_bad_requests_fail_in_one_line_before_any_work(tmp_path, capsys):
    assert cli.main(["exercises", "build", "09_nonsense"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "'09_nonsense'" in err and "02_sde" in err
    assert cli.main(["exercises", "build", "--out", str(REPO / "book" / "x")]) == 2
    assert "inside book/" in capsys.readouterr().err
    assert cli.main(["exercises", "grade", str(tmp_path / "nothing.ipynb")]) == 2
    assert "nothing.ipynb" in capsys.readouterr().err
    sub = tmp_path / "sub" / "02_sde.ipynb"
    sub.parent.mkdir()
    sub.write_text(json.dumps({"cells": [], "metadata": {"otter": {"assignment_name": "02_sde"}},
                               "nbformat": 4, "nbformat_minor": 5}))
    assert cli.main(["exercises", "grade", str(sub.parent), "--build-dir", str(tmp_path / "nobuild")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "02_sde-autograder.zip does not exist" in err
    with pytest.raises(exercises.ExerciseError, match="student id"):
        exercises.variant_values("bad id!", ["SEED"])


def test_rendered_leak_check_finds_a_shown_solution(tmp_path):
    """rendered_leaks (run on the smoke book by tests/test_chapters.py) is not vacuous: it finds a
    solution line shown as highlighted code, and a page without its exercises."""
    pages = tmp_path / "html" / "book" / "exercises"
    pages.mkdir(parents=True)
    for chapter, src in MASTERS.items():
        nb = exercises.read_master(src)
        title = next(l[2:] for c in nb.cells if c.cell_type == "markdown"
                     for l in c.source.splitlines() if l.startswith("# "))
        (pages / f"{chapter}.html").write_text(f"<h1>{title.replace('(', '&#40;')}</h1>")
    assert exercises.rendered_leaks(tmp_path / "html", REPO) == []
    (pages / "02_sde.html").write_text(
        "<h1>Exercises: split-half dependence &#40;Chapter 2&#41;</h1><pre><span class='k'>return</span> "
        "<span class='nb'>float</span>(np.trace(k <span class='o'>@</span> h @ l @ h) / (n - 1) ** 2)</pre>")
    (pages / "04_qskew.html").unlink()
    problems = exercises.rendered_leaks(tmp_path / "html", REPO)
    assert any("02_sde.html shows a secret" in p and "np.trace(k @ h @ l @ h)" in p for p in problems)
    assert any("04_qskew: no exercise page" in p for p in problems)


def test_book_exercise_pages_in_markdown_carry_no_secrets():
    """book/exercises.md and book/instructor.md name every exercise but show no master's secrets."""
    page = (REPO / "book" / "exercises.md").read_text()
    guide = (REPO / "book" / "instructor.md").read_text()
    for chapter, src in MASTERS.items():
        nb = exercises.read_master(src)
        assert f"(exercises-{chapter.replace('_', '-')})=" in page, f"{chapter}: no anchor on the page"
        assert f"{{doc}}`exercises/{chapter}`" in page
        n = int(chapter[:2])
        for q in range(1, len(exercises.questions(nb)) + 1):
            assert f"| {n}.{q} |" in page, f"exercise {n}.{q} missing from book/exercises.md"
        leaked = [f for f in exercises.secret_fragments(nb) if f in page or f in guide]
        assert not leaked, f"{chapter}: {leaked[:2]}"


# ----------------------------------------------------------------------------- feedback, rehearsal

DEMOS = REPO / exercises.DEMOS


def _csv(path: Path) -> list[dict]:
    import csv

    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_demo_submissions_get_feedback_naming_each_failing_test(built, tmp_path, capfd):
    """`memlab exercises grade exercises/demo-submissions/`: every rehearsal submission fails exactly
    the tests demos.yaml says, and the terminal, the CSV and each student's report name them, with
    the question's hint; the open question is flagged for manual grading; no kernel chatter."""
    demos = exercises.read_demos(REPO)
    assert len(demos) >= 3 and {d["chapter"] for d in demos.values()} <= set(MASTERS)
    build_dir = built["02_sde"]["autograder"].parent.parent
    csv_path, fb = tmp_path / "demo.csv", tmp_path / "feedback"
    t0 = time.perf_counter()
    rc = cli.main(["exercises", "grade", str(DEMOS), "--build-dir", str(build_dir), "--csv", str(csv_path),
                   "--feedback", str(fb)])
    print(f"exercises: graded {len(demos)} demo submissions in {time.perf_counter() - t0:.1f} s")
    out, err = capfd.readouterr()
    assert rc == 0, err
    assert "without encryption" not in out + err and "IPKernelApp" not in out + err, "kernel warnings not silenced"
    rows = _csv(csv_path)
    assert list(rows[0]) == ["submission", "student", "assignment", "question", "score", "possible", "status",
                             "failed_tests", "feedback", "error"]
    for name, demo in demos.items():
        mine = [r for r in rows if r["student"] == name]
        assert mine and {r["assignment"] for r in mine} == {demo["chapter"]}, f"{name}: no rows in the CSV"
        failed = {r["question"]: [t.replace(" (hidden)", "") for t in r["failed_tests"].split("; ") if t]
                  for r in mine if r["question"] != "TOTAL"}
        assert {q: t for q, t in failed.items() if t} == demo["fails"], f"{name}: {failed}"
        for q, tests in demo["fails"].items():
            for t in tests:
                assert f"{q} failed {t}" in out, f"{name}: the terminal does not name {t}"
                assert t in next(r["feedback"] for r in mine if r["question"] == q)
        manual = [r for r in mine if r["status"] == "needs manual grading"]
        assert manual and all(r["score"] == "" for r in manual), f"{name}: open question not flagged"
        report = (fb / name / f"{demo['chapter']}.md").read_text()
        info = exercises.questions(exercises.read_master(MASTERS[demo["chapter"]]))
        for q in info:
            assert f"## {q['name']}: {q['title']}" in report
            if q["name"] in demo["fails"]:
                assert q["hint"][:40] in report, f"{name}: the report lacks {q['name']}'s hint"
                for t in demo["fails"][q["name"]]:
                    assert f"`{t}`" in report
            if q["manual"]:
                assert "Needs manual grading" in report
    # A student's report names a failing hidden test but never shows its code.
    hidden_code = [l[4:].strip() for z in (built[c]["autograder"] for c in {d["chapter"] for d in demos.values()})
                   for code in exercises.hidden_test_code(z) for l in code.splitlines() if len(l.strip()) > 16]
    hidden = {(r["student"], t[:-len(" (hidden)")]) for r in rows for t in r["failed_tests"].split("; ")
              if t.endswith(" (hidden)")}
    assert {n for n, _ in hidden} == set(demos), "every demo fails a hidden test too"
    for name, demo in demos.items():
        report = (fb / name / f"{demo['chapter']}.md").read_text()
        assert all(f"`{t}` (hidden test)" in report for n, t in hidden if n == name)
        assert not [c for c in hidden_code if c in report], f"{name}: the report shows hidden test code"
    assert "demo-exception" in out and "cell error" in out, "the exception's own cell is not reported"
    sheet = (fb / "open-questions.md").read_text()
    for name, demo in demos.items():
        for answer in demo.get("written", []):
            assert " ".join(answer.split())[:60] in " ".join(sheet.split())
    assert "Sample answer" in sheet


def test_roster_values_are_balanced_and_students_get_their_own_bundle(tmp_path, capsys):
    ids = [f"s{i:02d}" for i in range(12)]
    values = exercises.balanced_variants(ids, ["FORGET_CLASS", "SEED", "STUDENT"])
    classes = [values[i]["FORGET_CLASS"] for i in ids]
    assert sorted(classes[:10]) == list(range(10)), "no forget class repeats before all ten are used"
    assert max(classes.count(c) for c in range(10)) - min(classes.count(c) for c in range(10)) <= 1
    assert len({values[i]["SEED"] for i in ids}) == len(ids)
    assert all(values[i]["STUDENT"] == i for i in ids)
    more = exercises.balanced_variants(ids + ["late"], ["FORGET_CLASS", "SEED"])
    assert all(more[i]["FORGET_CLASS"] == values[i]["FORGET_CLASS"] for i in ids), "appending keeps values"

    roster = tmp_path / "roster.txt"
    roster.write_text("ada\nalan  # a comment\n\ngrace\n")
    assert cli.main(["exercises", "build", "01_bn_illusion", "--out", str(tmp_path / "b"),
                     "--roster", str(roster)]) == 0
    out = capsys.readouterr().out
    assert "balanced: no two students share a value until every value is used" in out
    seen = set()
    for sid in ("ada", "alan", "grace"):
        nb = nbformat.read(str(tmp_path / "b" / "01_bn_illusion" / "students" / sid / "01_bn_illusion.ipynb"), 4)
        src = "\n".join(c.source for c in nb.cells)
        assert f'STUDENT = "{sid}"  # per-student' in src
        seen.add(next(l for l in src.splitlines() if l.startswith("FORGET_CLASS = ")))
        import zipfile

        with zipfile.ZipFile(tmp_path / "b" / "student-zips" / f"{sid}.zip") as z:
            mine = z.read("memlab-course/assignments/01_bn_illusion.ipynb").decode()
        assert f'STUDENT = \\"{sid}\\"' in mine, f"{sid}'s bundle zip lacks their own notebook"
    assert len(seen) == 3, f"three students, three forget classes: {seen}"


def test_open_exercises_write_under_each_students_own_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMLAB_RUNS", str(tmp_path / "runs"))
    assert exercises.runs_dir("ada") == tmp_path / "runs" / "ada"
    monkeypatch.setenv("USER", "bob")
    monkeypatch.setenv("LOGNAME", "bob")
    assert exercises.runs_dir("") == tmp_path / "runs" / "bob", "no id: the login name"
    monkeypatch.setenv("USER", "carol")
    monkeypatch.setenv("LOGNAME", "carol")
    assert exercises.runs_dir("") == tmp_path / "runs" / "carol"
    with pytest.raises(exercises.ExerciseError, match="student id 'a b'"):
        exercises.runs_dir("a b")
    for chapter, path in MASTERS.items():
        text = path.read_text()
        assert "/tmp/" not in text, f"{chapter}: an open exercise still writes to a shared /tmp folder"
        assert "RUNS = runs_dir(STUDENT)" in text and 'STUDENT = ""  # per-student' in text
        assert f"memlab run {chapter}" in text and "--book-dir {" in text, "the printed command uses RUNS"


def test_fetch_for_the_open_exercises_names_what_it_needs(monkeypatch, tmp_path, capsys):
    assert cli.main(["exercises", "fetch", "06_cross_lens"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "'06_cross_lens'" in err and "05_capacity" in err
    have = __import__("os").environ.get("MEMLAB_DATA_ROOT")
    # Offline, with no data: one line, exit 2, nothing left behind.
    monkeypatch.setenv("MEMLAB_DATA_ROOT", str(tmp_path / "empty"))
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("MEMLAB_DOWNLOAD_DIR", str(tmp_path / "dl"))
    monkeypatch.setenv("MEMLAB_OFFLINE", "1")
    assert cli.main(["exercises", "fetch", "05_capacity"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "downloading the data of 05_capacity failed" in err, err
    if have:  # CI's shared data: nothing to fetch, and the command says where each split is
        monkeypatch.setenv("MEMLAB_DATA_ROOT", have)
        assert cli.main(["exercises", "fetch", "05_capacity"]) == 0
        out = capsys.readouterr().out
        assert out.startswith("05_capacity: WikiText-2") and "fetched" not in out


def test_a_roster_listing_a_student_twice_is_refused(tmp_path, capsys):
    roster = tmp_path / "roster.txt"
    roster.write_text("ada\nalan\nada\n")
    assert cli.main(["exercises", "build", "--roster", str(roster), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "'ada'" in err and "more than once" in err
    assert not (tmp_path / "b").exists(), "refused before any work"
