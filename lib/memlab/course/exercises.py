"""The course kit: otter-grader masters in ``exercises/``, student releases, autograders, grading.

Each chapter has one master, ``exercises/<chapter>.py`` (jupytext percent), in otter-grader's
assign format: raw ``# BEGIN QUESTION`` / ``# BEGIN SOLUTION`` / ``# BEGIN TESTS`` cells,
solution lines between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` comments, hidden tests
marked by a ``hidden: true`` test config. :func:`build` turns every master into

    <out>/<chapter>/student/<chapter>.ipynb        the student notebook (no solutions, public tests)
    <out>/<chapter>/autograder/<chapter>.ipynb     the solved notebook with every test
    <out>/<chapter>/<chapter>-autograder.zip       otter's autograder (all tests, hidden included)

(``out`` defaults to ``_build/exercises`` of the project folder memlab runs in; never ``book/``),
and ``memlab exercises build`` adds the student bundle (:mod:`memlab.course.bundle`: the notebooks, a wheel
of the library alone, what the open exercises' runs read). :func:`publish` copies the student
notebooks to ``book/exercises/`` for the book; :func:`grade` grades submissions with otter's local,
Docker-free runner and writes per-test feedback (:mod:`memlab.course.feedback`); :func:`balanced_variants`
gives each student of a roster their own seed and forget class; :func:`runs_dir` is a student's
own folder for the open exercises' runs; :func:`write_demos` writes the rehearsal submissions.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import shutil
import sys
import tempfile
import warnings
import zipfile
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Iterable, Sequence

from memlab.core.config import ConfigError, path_kind, repo_root
from memlab.course import feedback

# a student's own folder for the open exercises' runs: $MEMLAB_RUNS/<id>, default ~/memlab-runs/<id>
from memlab.course.bundle import RUNS_DEFAULT, RUNS_ENV

MASTERS = "exercises"
DEFAULT_OUT = Path("_build") / "exercises"
BOOK_SUBDIR = Path("book") / "exercises"
# A master's per-student knobs: a line `NAME = <int>  # per-student` (or `NAME = "<text>"`) in a
# code cell.
VARIANT_LINE = re.compile(r'^(?P<name>[A-Z_]+) = (?P<value>-?\d+|"[^"\n]*")(?P<rest>\s+# per-student.*)$', re.M)
# How far a variant's integer knobs range: SEED over [0, 10000), FORGET_CLASS over the 10 classes.
VARIANT_RANGE = {"SEED": 10000, "FORGET_CLASS": 10}
# The text knob naming the student: their id in a roster build, "" (the login name) otherwise.
STUDENT_KNOB = "STUDENT"
STUDENT_ID = re.compile(r"[A-Za-z0-9._@-]+")
# Written into each autograder zip: the master's questions (title, hint, points, manual, sample answer).
QUESTIONS_FILE = "memlab-questions.json"
DEMOS = Path(MASTERS) / "demo-submissions"


class ExerciseError(ConfigError):
    """A bad exercise request (unknown chapter, missing build, unreadable submission)."""


# ----------------------------------------------------------------------------- masters

def masters(root: Path | None = None) -> dict[str, Path]:
    """Chapter id -> master source ``exercises/<chapter>.py`` for every master present, sorted."""
    root = Path(root) if root else repo_root()
    return {p.stem: p for p in sorted((root / MASTERS).glob("[0-9][0-9]_*.py"))}


def select(chapters: Sequence[str] | None, root: Path | None = None) -> dict[str, Path]:
    """The masters of ``chapters`` (all when None), or one ExerciseError naming the unknown id."""
    found = masters(root)
    if not found:
        raise ExerciseError(f"no exercise masters in {(Path(root) if root else repo_root()) / MASTERS}")
    if not chapters:
        return found
    bad = [c for c in chapters if c not in found]
    if bad:
        raise ExerciseError(f"parameter 'chapters': no exercises for {', '.join(map(repr, bad))}; "
                            f"allowed: {', '.join(found)}")
    return {c: found[c] for c in chapters}


def read_master(path: Path):
    """The master as an nbformat notebook (jupytext percent -> ipynb, no outputs)."""
    import jupytext

    return jupytext.read(str(path), fmt="py:percent")


def _cell_lines(cell) -> list[str]:
    src = cell["source"]
    return (src if isinstance(src, list) else src.split("\n"))


def _raw_marker(cell) -> str:
    if cell["cell_type"] != "raw":
        return ""
    first = _cell_lines(cell)[0].strip().lower() if cell["source"] else ""
    m = re.match(r"#\s+(begin|end)\s+(question|solution|tests|prompt)", first)
    return f"{m.group(1)} {m.group(2)}" if m else ""


def questions(nb) -> list[dict]:
    """The master's questions in order: {name, points, manual, n_tests, n_hidden, title, hint, sample}.

    ``title`` is the prompt's bold opening (``Exercise 2.1 (warm-up): HSIC by hand``), ``hint`` its
    ``*Hint:*`` paragraph, ``sample`` the markdown of its solution block (an open question's sample
    answer; "" for an autograded one).
    """
    import yaml

    out, cur, block = [], None, ""
    for cell in nb.cells:
        mark = _raw_marker(cell)
        if mark == "begin question":
            conf = yaml.safe_load("\n".join(_cell_lines(cell)[1:])) or {}
            cur = {"name": conf["name"], "points": conf.get("points", 1), "manual": bool(conf.get("manual")),
                   "n_tests": 0, "n_hidden": 0, "title": "", "hint": "", "sample": ""}
            out.append(cur)
        elif mark in ("begin tests", "begin solution"):
            block = mark.split()[1]
        elif mark in ("end tests", "end solution"):
            block = ""
        elif cur is None or mark:
            continue
        elif block == "tests" and cell["cell_type"] == "code":
            cur["n_tests"] += 1
            cur["n_hidden"] += int(_is_hidden_test(cell))
        elif block == "solution" and cell["cell_type"] == "markdown":
            cur["sample"] = (cur["sample"] + "\n\n" + "\n".join(_cell_lines(cell))).strip()
        elif not block and cell["cell_type"] == "markdown" and not cur["title"]:
            prompt = "\n".join(_cell_lines(cell))
            cur["title"], cur["hint"] = feedback.title_of(prompt), feedback.hint_of(prompt)
    return out


def _is_hidden_test(cell) -> bool:
    lines = _cell_lines(cell)
    head = "\n".join(lines[:4])
    return bool(re.search(r"hidden:\s*true", head, re.I)) or bool(
        lines and lines[0].lstrip().startswith("#") and re.search(r"\bhidden\b", lines[0], re.I))


def secret_fragments(nb, min_len: int = 12, extra: Iterable[str] = (), public: str = "") -> list[str]:
    """Lines a student must never see: solution code, sample answers, hidden tests.

    Solution lines are those between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` comments of
    solution cells and lines ending in ``# SOLUTION``; sample answers are the markdown cells
    of solution blocks; hidden tests are the code of tests with ``hidden: true``. Lines shorter
    than ``min_len`` characters or also present in the public parts of the master (a shared
    ``return`` line, a call a hint names) are left out, so every fragment is specific to a
    secret. ``extra``: more secret lines (the hidden tests as otter stored them), filtered alike;
    ``public``: more public text (other masters' prompts, for a search across a whole book).
    """
    secret, shown = _secret_and_public(nb)
    public_text = "\n".join(shown) + "\n" + public
    frags = []
    for line in [*secret, *extra]:
        s = line.strip().lstrip("*").strip()
        # A line the prompt itself shows (a hint naming a call) is no secret.
        if len(s) >= min_len and s not in public_text and s not in frags:
            frags.append(s)
    return frags


def public_text(nb) -> str:
    """Every line of the master that the student version shows (prompts, setup, public tests)."""
    return "\n".join(_secret_and_public(nb)[1])


def _test_code(lines: list[str]) -> list[str]:
    """A test cell's code without its ``BEGIN/END TEST CONFIG`` block: the config (hidden, a
    failure message students see in their feedback) is no secret."""
    out, in_config = [], False
    for line in lines:
        if "# BEGIN TEST CONFIG" in line:
            in_config = True
        elif "# END TEST CONFIG" in line:
            in_config = False
        elif not in_config:
            out.append(line)
    return out


def _secret_and_public(nb) -> tuple[list[str], set[str]]:
    """The master's secret lines (solutions, sample answers, hidden tests) and public lines."""
    secret, public = [], set()
    block: list[str] = []
    for cell in nb.cells:
        mark = _raw_marker(cell)
        if mark:
            if mark.startswith("begin"):
                block.append(mark.split()[1])
            elif block:
                block.pop()
            continue
        lines = _cell_lines(cell)
        kind = block[-1] if block else ""
        if kind == "solution" and cell["cell_type"] == "markdown":
            secret.extend(lines)
        elif kind == "solution":
            inside = False
            for line in lines:
                if line.strip().endswith("# END SOLUTION"):
                    inside = False
                elif line.strip().startswith("# BEGIN SOLUTION"):
                    inside = True
                elif inside or line.rstrip().endswith("# SOLUTION"):
                    secret.append(line)
                else:
                    public.add(line.strip())
        elif kind == "tests" and _is_hidden_test(cell):
            secret.extend(_test_code(lines))
        elif cell["cell_type"] != "raw":
            public.update(l.strip() for l in lines)
    return secret, public


# ----------------------------------------------------------------------------- build

def _assign(master_ipynb: Path, dest: Path) -> None:
    """Run ``otter assign`` in-process (no PDFs; the tests are run by :func:`grade` instead)."""
    from otter.assign import main as otter_assign

    sink = io.StringIO()
    try:
        with redirect_stdout(sink), redirect_stderr(sink):
            otter_assign(str(master_ipynb), str(dest), no_pdfs=True, no_run_tests=True)
    except Exception as e:
        raise ExerciseError(f"otter assign failed on {master_ipynb.name}: {type(e).__name__}: {e}\n"
                            + sink.getvalue()[-2000:]) from e


def build_folder(out: Path | None, root: Path) -> Path:
    """The build folder: ``out`` (absolute) or ``<root>/_build/exercises``; one inside ``book/`` is refused."""
    out = Path(out).expanduser().resolve() if out else root / DEFAULT_OUT
    book = (root / "book").resolve()
    if out == book or book in out.parents:
        raise ExerciseError(f"parameter 'out': {str(out)!r} is inside book/; build elsewhere "
                            "(default _build/exercises) and use --book to publish the student versions")
    blocker = next((p for p in (out, *out.parents) if path_kind(p) not in (None, "folder")), None)
    if blocker is not None:
        raise ExerciseError(f"parameter 'out': {str(out)!r} cannot be a folder ({str(blocker)!r} is a file)")
    return out


def build(chapters: Sequence[str] | None = None, out: Path | None = None,
          root: Path | None = None) -> dict[str, dict[str, Path]]:
    """Student notebook, solved notebook and autograder zip of each chapter's master.

    Returns chapter -> {"student", "solved", "autograder"} paths under ``out`` (default
    ``<root>/_build/exercises``). A folder inside ``book/`` is refused: the book must only
    ever receive student versions, through :func:`publish`.
    """
    root = Path(root) if root else repo_root()
    chosen = select(chapters, root)
    out = build_folder(out, root)
    import nbformat

    built = {}
    for chapter, src in chosen.items():
        dest = out / chapter
        if dest.exists():
            shutil.rmtree(dest)
        with tempfile.TemporaryDirectory(prefix=f"memlab-ex-{chapter}-") as tmp:
            nb_path = Path(tmp) / f"{chapter}.ipynb"
            nbformat.write(read_master(src), str(nb_path))
            _assign(nb_path, Path(tmp) / "dist")
            shutil.copytree(Path(tmp) / "dist", dest)
        zips = sorted((dest / "autograder").glob(f"{chapter}-autograder_*.zip"))
        if len(zips) != 1:
            raise ExerciseError(f"otter assign wrote {len(zips)} autograder zips for {chapter} (expected 1)")
        ag = dest / f"{chapter}-autograder.zip"
        zips[0].replace(ag)
        add_question_info(ag, questions(read_master(src)))
        built[chapter] = {"student": dest / "student" / f"{chapter}.ipynb",
                          "solved": dest / "autograder" / f"{chapter}.ipynb", "autograder": ag}
    return built


def add_question_info(autograder: Path, qs: list[dict]) -> None:
    """Store the master's questions (title, hint, points, manual, sample answer) in the autograder zip,
    for the feedback of :func:`grade` (otter ignores the extra file; the zip is the instructor's)."""
    keep = ("name", "points", "manual", "title", "hint", "sample")
    with zipfile.ZipFile(autograder, "a") as z:
        z.writestr(QUESTIONS_FILE, json.dumps({q["name"]: {k: q[k] for k in keep} for q in qs}, indent=1))


def question_info(autograder: Path) -> dict[str, dict]:
    """The questions :func:`add_question_info` stored in an autograder zip ({} for another zip)."""
    with zipfile.ZipFile(autograder) as z:
        if QUESTIONS_FILE not in z.namelist():
            return {}
        return json.loads(z.read(QUESTIONS_FILE))


def publish(built: dict[str, dict[str, Path]], root: Path | None = None) -> list[Path]:
    """Copy the student notebooks of a :func:`build` into ``book/exercises/`` (the book's pages)."""
    root = Path(root) if root else repo_root()
    dest = root / BOOK_SUBDIR
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for chapter, paths in built.items():
        target = dest / f"{chapter}.ipynb"
        shutil.copy(paths["student"], target)
        written.append(target)
    return written


def hidden_test_code(autograder_zip: Path) -> list[str]:
    """The code of every hidden test case in an autograder zip (as otter stores it)."""
    codes = []
    with zipfile.ZipFile(autograder_zip) as z:
        for name in z.namelist():
            if name.startswith("tests/") and name.endswith(".py"):
                ns: dict = {}
                exec(compile(z.read(name).decode(), name, "exec"), ns)  # noqa: S102 - our own build output
                for suite in ns["test"]["suites"]:
                    codes.extend(c["code"] for c in suite["cases"] if c.get("hidden"))
    return codes


_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-",
                         "\u2014": "-"})


def _plain(text: str) -> str:
    """Text with markup symbols dropped, typographic quotes undone, whitespace collapsed."""
    return " ".join(re.sub(r"[`*$_\\]", "", text.translate(_QUOTES)).split())


def rendered_leaks(html_root: Path, root: Path | None = None) -> list[str]:
    """Problems of a rendered book: a master's secret shown on any page, an exercise page missing.

    html_root: the ``_build/html`` folder of a book build. Every page's text (tags dropped,
    entities decoded) is searched for every :func:`secret_fragments` line of every master;
    each chapter's page ``book/exercises/<chapter>.html`` must exist and show the master's
    title (so an empty page cannot pass). Returns one line per problem; [] is a clean book.
    """
    import html as html_mod

    html_root = Path(html_root)
    # Tags dropped without a space: highlighted code is one span per token, with the
    # whitespace between tokens kept as text.
    pages = {p: _plain(html_mod.unescape(re.sub(r"<[^>]+>", "", re.sub(
        r"<(script|style)\b.*?</\1>", " ", p.read_text(encoding="utf-8"), flags=re.S))))
        for p in html_root.rglob("*.html")}
    problems = []
    books = {chapter: read_master(src) for chapter, src in masters(root).items()}
    # A line one master shows publicly (a shared `with torch.no_grad():`) is no leak of another's.
    shown = "\n".join(public_text(nb) for nb in books.values())
    for chapter, nb in books.items():
        page = html_root / "book" / "exercises" / f"{chapter}.html"
        title = next((l.lstrip("# ").strip() for c in nb.cells if c.cell_type == "markdown"
                      for l in _cell_lines(c) if l.startswith("# ")), chapter)
        if page not in pages:
            problems.append(f"{chapter}: no exercise page {page.relative_to(html_root)}")
        elif _plain(title) not in pages[page]:
            problems.append(f"{chapter}: {page.name} does not show {title!r}")
        for frag in secret_fragments(nb, public=shown):
            f = _plain(frag)
            for p, text in pages.items():
                if len(f) >= 12 and f in text:
                    problems.append(f"{chapter}: {p.relative_to(html_root)} shows a secret: {frag!r}")
    return problems


# ----------------------------------------------------------------------------- variants

def check_student_id(student_id: str) -> str:
    """The id, stripped, or one ExerciseError naming it (letters, digits and . _ @ - only)."""
    sid = str(student_id).strip()
    if not STUDENT_ID.fullmatch(sid):
        raise ExerciseError(f"student id {student_id!r}: use letters, digits and . _ @ - only")
    return sid


def variant_values(student_id: str, names: Iterable[str]) -> dict[str, int | str]:
    """A lone student's value of each per-student knob, stable across builds (SHA-256 of the id).

    Integer knobs range over :data:`VARIANT_RANGE`; the ``STUDENT`` knob is the id itself. Two ids
    may share a value (three students, ten forget classes); :func:`balanced_variants` avoids that
    for a roster.
    """
    sid = check_student_id(student_id)
    out: dict[str, int | str] = {}
    for name in names:
        if name == STUDENT_KNOB:
            out[name] = sid
            continue
        digest = hashlib.sha256(f"{sid}:{name}".encode()).digest()
        out[name] = int.from_bytes(digest[:8], "big") % VARIANT_RANGE.get(name, 10000)
    return out


def balanced_variants(ids: Sequence[str], names: Iterable[str]) -> dict[str, dict[str, int | str]]:
    """Each roster student's knob values, balanced: no two students share a value of a knob until
    every value of its range has been given out (then the order repeats).

    ids: the roster in order. The values of each knob follow one fixed shuffle of its range
    (seeded by the knob's name), the i-th student getting its i-th entry: a rebuild with the same
    roster, or with students appended, keeps every earlier student's values.
    """
    import random

    names = sorted(set(names))
    out = {check_student_id(i): {} for i in ids}
    for name in names:
        if name == STUDENT_KNOB:
            for sid in out:
                out[sid][name] = sid
            continue
        span = VARIANT_RANGE.get(name, 10000)
        seed = int.from_bytes(hashlib.sha256(f"balanced:{name}".encode()).digest()[:8], "big")
        order = random.Random(seed).sample(range(span), span)
        for i, sid in enumerate(out):
            out[sid][name] = order[i % span]
    return out


def variant_names(nb) -> list[str]:
    """The per-student knobs of a notebook (names of its ``NAME = ...  # per-student`` lines)."""
    return sorted({m.group("name") for c in nb.cells if c.cell_type == "code"
                   for m in VARIANT_LINE.finditer(c.source)})


def make_variant(student_nb: Path, student_id: str, dest: Path,
                 values: dict[str, int | str] | None = None) -> dict[str, int | str]:
    """Write ``student_nb`` with its per-student knobs set for ``student_id`` to ``dest``.

    The knobs are lines ``NAME = 0  # per-student`` of the master (SEED, FORGET_CLASS) and
    ``STUDENT = ""  # per-student`` (the id); ``values`` (from :func:`balanced_variants`) overrides
    the lone student's hash (:func:`variant_values`); a knob it leaves out keeps its value. The
    tests compare with the library at the notebook's own values, so one autograder grades every
    variant. Returns the values written.
    """
    import nbformat

    nb = nbformat.read(str(student_nb), as_version=4)
    names = variant_names(nb)
    values = {n: v for n, v in (values or variant_values(student_id, names)).items() if n in names}
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = VARIANT_LINE.sub(
                lambda m: m.group(0) if m.group("name") not in values else
                f"{m.group('name')} = {json.dumps(values[m.group('name')])}{m.group('rest')}", cell.source)
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(dest))
    return values


def read_roster(path: Path) -> list[str]:
    """Student ids, one a line (blank lines and # comments skipped), each valid and listed once."""
    path = Path(path)
    if not path.is_file():
        raise ExerciseError(f"parameter 'roster': {str(path)!r} is not a file (one student id a line)")
    ids = [l.split("#")[0].strip() for l in path.read_text().splitlines()]
    ids = [check_student_id(i) for i in ids if i]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ExerciseError(f"parameter 'roster': student id {dup[0]!r} is listed more than once in {path}")
    if not ids:
        raise ExerciseError(f"parameter 'roster': {str(path)!r} lists no student id")
    return ids


def roster_note(n_students: int, names: Iterable[str]) -> str:
    """One line saying how a roster's values were assigned (what the build prints)."""
    spans = [f"{n} over {VARIANT_RANGE.get(n, 10000)} values" for n in sorted(set(names)) if n != STUDENT_KNOB]
    return (f"roster: {n_students} students; {', '.join(spans)}, balanced: no two students share a value "
            "until every value is used (values follow the roster's order: append new students at the end)")


def login_name() -> str:
    """The login name ($USER, else the account's name), made a valid student id."""
    import getpass

    try:
        name = getpass.getuser()
    except (KeyError, OSError):  # no USER/LOGNAME and no passwd entry (a bare container)
        name = "student"
    return re.sub(r"[^A-Za-z0-9._@-]", "_", name) or "student"


def runs_dir(student: str = "") -> Path:
    """A student's own folder for the open exercises' ``memlab run --book-dir``:
    ``$MEMLAB_RUNS/<student>``, by default ``~/memlab-runs/<student>``.

    student: the notebook's ``STUDENT`` (the roster id); "" means the login name, so students
    sharing one server never write into one folder. The folder is not created here.
    """
    sid = check_student_id(student) if str(student).strip() else login_name()
    return Path(os.environ.get(RUNS_ENV) or RUNS_DEFAULT).expanduser() / sid


# ----------------------------------------------------------------------------- grading

def chapter_of(submission: Path) -> str:
    """The assignment a submission belongs to: its otter metadata's name, else its file stem."""
    try:
        meta = json.loads(Path(submission).read_text()).get("metadata", {})
    except (OSError, ValueError) as e:
        raise ExerciseError(f"submission {str(submission)!r}: not a readable notebook ({e})") from e
    return meta.get("otter", {}).get("assignment_name") or Path(submission).stem


@contextmanager
def quiet_kernels():
    """Grading kernels that keep their own log to errors: ipykernel warns on every start that its
    local TCP sockets are unencrypted, a line per submission that says nothing about the student.

    A ``python3`` kernelspec in a temporary folder first on ``JUPYTER_PATH`` (found before the
    built-in one) starts the same interpreter with ``--IPKernelApp.log_level=ERROR``.
    """
    with tempfile.TemporaryDirectory(prefix="memlab-kernels-") as tmp:
        spec = Path(tmp) / "kernels" / "python3"
        spec.mkdir(parents=True)
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}",
                "--IPKernelApp.log_level=ERROR"]
        (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "Python 3",
                                                      "language": "python"}))
        before = os.environ.get("JUPYTER_PATH")
        os.environ["JUPYTER_PATH"] = os.pathsep.join(p for p in (tmp, before) if p)
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("JUPYTER_PATH", None)
            else:
                os.environ["JUPYTER_PATH"] = before


def student_of(nb, submission: Path) -> str:
    """Whose submission: the notebook's ``STUDENT`` knob when set, else its folder's name."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            for m in VARIANT_LINE.finditer(cell.source):
                if m.group("name") == STUDENT_KNOB and m.group("value").strip('"'):
                    return m.group("value").strip('"')
    return Path(submission).resolve().parent.name


def _run_otter(submission: Path, autograder: Path, debug: bool):
    """otter's GradingResults of one submission, with otter's and the kernel's chatter swallowed."""
    from otter.api import grade_submission

    sink = io.StringIO()
    with redirect_stdout(sink), redirect_stderr(sink), warnings.catch_warnings(), quiet_kernels():
        warnings.simplefilter("ignore")  # otter's own pandas deprecations, not the student's
        try:
            return grade_submission(str(submission), str(autograder), quiet=True, debug=debug)
        except Exception as e:
            if not debug:
                raise
            raise ExerciseError(f"{submission}: a cell raised while grading: {str(e)[-1500:]}") from e


def grade_one(submission: Path, autograder: Path, debug: bool = False) -> dict:
    """Grade one notebook with otter's local runner (no Docker; the current environment runs it).

    debug: raise an ExerciseError when a cell of the submission raises (otter otherwise
    ignores cell errors and grades what ran); used to prove student notebooks run clean.

    Returns a JSON-able row: {"submission", "submission_name", "student", "assignment", "score",
    "possible", "percent" (a fraction in [0, 1]), "questions": {q: {score, possible, status, title,
    hint, tests}} (autograded questions; :func:`memlab.course.feedback.question_records`), "manual": {q:
    {possible, title, answer}} (open questions, not in the score), "cell_errors": [{cell, error}]
    (the notebook's cells that raised), "error"}; ``error`` is the otter error that stopped
    grading, else None.
    """
    import nbformat

    submission, autograder = Path(submission), Path(autograder)
    if not autograder.is_file():
        raise ExerciseError(f"parameter 'autograder': {str(autograder)!r} does not exist "
                            "(run `memlab exercises build` first)")
    res = _run_otter(submission, autograder, debug)
    info = question_info(autograder)
    nb = nbformat.read(str(submission), as_version=4)
    manual = [q for q, v in info.items() if v.get("manual")]
    answers = feedback.written_answers(nb, manual)
    err = res.catastrophic_error
    return {"submission": str(submission), "submission_name": submission.name,
            "student": student_of(nb, submission), "assignment": chapter_of(submission), "score": float(res.total), "possible": float(res.possible),
            "percent": float(res.percent), "questions": feedback.question_records(res, info),
            "manual": {q: {"possible": float(info[q]["points"]), "title": info[q].get("title", ""),
                           "answer": answers.get(q, "")} for q in manual},
            "cell_errors": feedback.cell_errors(res.notebook),
            "error": None if err is None else f"{type(err).__name__}: {err}"}


def find_submissions(paths: Sequence[Path]) -> list[Path]:
    """Every .ipynb named by ``paths`` (files, or folders searched recursively), sorted."""
    found = []
    for p in map(Path, paths):
        if p.is_dir():
            found.extend(q for q in p.rglob("*.ipynb") if ".ipynb_checkpoints" not in q.parts)
        elif p.is_file() and p.suffix == ".ipynb":
            found.append(p)
        else:
            raise ExerciseError(f"submission {str(p)!r}: neither a notebook (.ipynb) nor a folder")
    if not found:
        raise ExerciseError(f"no .ipynb submissions under {', '.join(map(str, paths))}")
    return sorted(set(found))


def _autograders(subs: list[Path], build_dir: Path | None, autograder: Path | None) -> dict[Path, Path]:
    """Each submission's autograder zip, all checked to exist before any submission is graded."""
    build_dir = Path(build_dir) if build_dir else repo_root() / DEFAULT_OUT
    zips = {}
    for s in subs:
        name = chapter_of(s)
        zips[s] = Path(autograder) if autograder else build_dir / name / f"{name}-autograder.zip"
    missing = sorted({str(z) for z in zips.values() if not z.is_file()})
    if missing:
        raise ExerciseError(f"autograder {', '.join(missing)} does not exist (run `memlab exercises build`, "
                            "or pass --build-dir / --autograder)")
    return zips


def grade(paths: Sequence[Path], build_dir: Path | None = None, autograder: Path | None = None,
          csv_path: Path | None = None, feedback_dir: Path | None = None) -> list[dict]:
    """Grade every submission under ``paths``; each one with its chapter's autograder zip.

    The zip is ``autograder`` when given, else ``<build_dir>/<chapter>/<chapter>-autograder.zip``
    (build_dir defaults to ``_build/exercises``). Writes :data:`memlab.course.feedback.CSV_COLUMNS` rows to
    ``csv_path`` (a row per question and a TOTAL per submission) and, under ``feedback_dir``, one
    markdown report per submission and ``open-questions.md`` (see :func:`write_feedback`).
    Open (manually graded) questions are not in the scores.
    """
    subs = find_submissions(paths)
    zips = _autograders(subs, build_dir, autograder)
    rows = [grade_one(s, zips[s]) for s in subs]
    if csv_path:
        Path(csv_path).parent.mkdir(parents=True, exist_ok=True)
        with open(csv_path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(feedback.CSV_COLUMNS)
            for r in rows:
                w.writerows(feedback.csv_rows(r))
    if feedback_dir:
        write_feedback(rows, {r["assignment"]: question_info(zips[Path(r["submission"])]) for r in rows},
                       Path(feedback_dir))
    return rows


def write_feedback(rows: list[dict], info: dict[str, dict], dest: Path) -> list[Path]:
    """One markdown report per submission, ``<dest>/<path below the submissions' common folder>.md``
    (what to send each student), and ``<dest>/open-questions.md`` (the instructor's sheet for the
    written answers). info: assignment -> its questions (:func:`question_info`). Returns the paths."""
    subs = [Path(r["submission"]).resolve() for r in rows]
    # Below the common folder of the submissions' folders, so ada/02_sde.ipynb -> ada/02_sde.md
    # even when only ada's is graded.
    common = Path(os.path.commonpath([s.parent.parent for s in subs])) if subs else dest
    written = []
    for r, s in zip(rows, subs):
        target = dest / s.relative_to(common).with_suffix(".md")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(feedback.student_report(r))
        written.append(target)
    if any(r.get("manual") for r in rows):
        sheet = dest / "open-questions.md"
        sheet.write_text(feedback.open_questions_sheet(rows, info))
        written.append(sheet)
    return written


def with_answer_replaced(notebook: Path, old: str, new: str, dest: Path) -> Path:
    """A copy of ``notebook`` with the code text ``old`` replaced by ``new`` (exactly once).

    Used to prove that the autograder fails a deliberately wrong answer.
    """
    import nbformat

    nb = nbformat.read(str(notebook), as_version=4)
    hits = [c for c in nb.cells if c.cell_type == "code" and old in c.source]
    if len(hits) != 1 or hits[0].source.count(old) != 1:
        n = sum(c.source.count(old) for c in hits)
        raise ExerciseError(f"{notebook.name}: the text to replace occurs {n} times (expected once): {old!r}")
    hits[0].source = hits[0].source.replace(old, new)
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(dest))
    return dest


# ----------------------------------------------------------------------------- rehearsal submissions

def _tagged(nb, kind: str, tag: str | None) -> list:
    """The cells of ``kind`` (code, markdown) carrying ``tag`` (any cell of that kind when None)."""
    return [c for c in nb.cells if c.cell_type == kind and (tag is None or tag in c.metadata.get("tags", []))]


def fill_in(student_nb: Path, solved_nb: Path, dest: Path, change: tuple[str, str] | None = None,
            written: Sequence[str] = (), student: str = "") -> Path:
    """A submission as a student would hand it in: ``student_nb`` with each answer cell holding the
    solved notebook's solution (otter's solution markers dropped), then one ``change`` (old, new)
    made exactly once, the open questions' answer cells set to ``written`` (in order), and the
    ``STUDENT`` knob set to ``student``. Returns ``dest``."""
    import nbformat

    nb = nbformat.read(str(student_nb), as_version=4)
    solved = nbformat.read(str(solved_nb), as_version=4)
    sols = _tagged(solved, "code", "otter_assign_solution_cell")
    code, text = _tagged(nb, "code", "otter_answer_cell"), _tagged(nb, "markdown", "otter_answer_cell")
    if len(sols) != len(code) or len(written) > len(text):
        raise ExerciseError(f"{student_nb.name}: {len(code)} answer cells for {len(sols)} solutions, "
                            f"{len(text)} written answers for {len(written)} given")
    for cell, sol in zip(code, sols):
        cell.source = "\n".join(l for l in sol.source.splitlines()
                                if l.strip() not in ("# BEGIN SOLUTION", "# END SOLUTION"))
    for cell, answer in zip(text, written):
        cell.source = answer.strip()
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(dest))
    if student:
        make_variant(dest, student, dest, {STUDENT_KNOB: student})
    return with_answer_replaced(dest, *change, dest) if change else dest


def read_demos(root: Path | None = None) -> dict[str, dict]:
    """The rehearsal submissions declared in ``exercises/demo-submissions/demos.yaml``: name ->
    {chapter, why, change: [old, new], written: [answers], fails: {question: [test names]}}."""
    import yaml

    path = (Path(root) if root else repo_root()) / DEMOS / "demos.yaml"
    if not path.is_file():
        raise ExerciseError(f"no rehearsal submissions: {path} does not exist")
    return yaml.safe_load(path.read_text())


def write_demos(built: dict[str, dict[str, Path]], root: Path | None = None) -> list[Path]:
    """Write each declared rehearsal submission to ``exercises/demo-submissions/<name>/<chapter>.ipynb``
    from a build's student and solved notebooks (the chapters of ``built`` only)."""
    root = Path(root) if root else repo_root()
    written = []
    for name, demo in read_demos(root).items():
        paths = built.get(demo["chapter"])
        if paths is None:
            continue
        dest = root / DEMOS / name / f"{demo['chapter']}.ipynb"
        written.append(fill_in(paths["student"], paths["solved"], dest, tuple(demo["change"]),
                               demo.get("written", []), student=name))
    return written


# ----------------------------------------------------------------------------- data for the open exercises

def fetch_data(chapters: Sequence[str] | None = None) -> list[str]:
    """Download what the open exercises' smoke runs of ``chapters`` read (default: every chapter
    with exercises) into the project's ``data/``, unless it is already there; one line per chapter.

    The data a chapter needs is the preflight's (:mod:`memlab.run.preflight`): CIFAR-10 for chapters
    1-2, WikiText-2 splits for 3-5. A failed download raises one ConfigError.
    """
    from memlab.core.chapters import CHAPTERS
    from memlab.core.config import resolve
    from memlab.run import preflight

    paper = [c for c, ch in CHAPTERS.items() if not ch.hypotheses]
    chosen = list(chapters or paper)
    bad = [c for c in chosen if c not in paper]
    if bad:
        raise ExerciseError(f"parameter 'chapters': no exercises for {', '.join(map(repr, bad))}; "
                            f"allowed: {', '.join(paper)}")
    lines = []
    for chapter in chosen:
        cfg = resolve(chapter, profile="smoke")
        fetched = preflight.fetch(chapter, cfg, allow_download=True)
        have = preflight.check(chapter, cfg, allow_download=False)[1:]  # [0] is the device line
        got = f"fetched {', '.join(fetched)}; " if fetched else ""
        lines.append(f"{chapter}: {got}{'; '.join(have)}")
    return lines


def summary_lines(rows: list[dict]) -> list[str]:
    """Per graded submission: score/possible and each question's score, then one indented line per
    failing test, per open question (needs manual grading) and per cell that raised."""
    return [line for r in rows for line in feedback.terminal_lines(r)]


def set_threads_for_grading() -> None:
    """Grading kernels inherit the environment: one BLAS/torch thread each, as the exercises assume."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MEMLAB_PROGRESS", "0")


# ----------------------------------------------------------------------------- command line

def add_subparser(sub) -> None:
    """``memlab exercises build|grade|fetch`` (wired into :func:`memlab.cli.build_parser`)."""
    ex = sub.add_parser("exercises", help="build the course exercises (otter-grader), grade submissions, "
                                          "fetch the open exercises' data")
    exs = ex.add_subparsers(dest="exercises_command", required=True)
    b = exs.add_parser("build", help="student notebooks, autograder zips and the student bundle "
                                     "from exercises/*.py")
    b.add_argument("chapters", nargs="*", help="chapter ids (default: every master in exercises/)")
    b.add_argument("--out", default=None, help="build folder (default _build/exercises; never inside book/)")
    b.add_argument("--book", action="store_true", help="also copy the student notebooks to book/exercises/")
    b.add_argument("--roster", default=None, metavar="FILE",
                   help="student ids, one a line: one notebook and bundle zip per student, with SEED and "
                        "FORGET_CLASS balanced across the roster")
    b.add_argument("--demos", action="store_true",
                   help="also (re)write the rehearsal submissions exercises/demo-submissions/*/ "
                        "from its demos.yaml")
    g = exs.add_parser("grade", help="grade submitted notebooks locally (otter run, no Docker), with feedback")
    g.add_argument("paths", nargs="+", help="submitted .ipynb files or folders of them")
    g.add_argument("--build-dir", default=None, help="the build folder holding the autograder zips "
                                                     "(default _build/exercises)")
    g.add_argument("--autograder", default=None, help="one autograder zip for every submission")
    g.add_argument("--csv", default=None, help="write the scores and feedback (a row per question) to this CSV")
    g.add_argument("--feedback", default=None, metavar="DIR",
                   help="folder of the markdown reports, one per submission (default <build-dir>/feedback)")
    f = exs.add_parser("fetch", help="download the data the open exercises' runs read (CIFAR-10, WikiText-2)")
    f.add_argument("chapters", nargs="*", help="chapter ids (default: every chapter with exercises)")


def _build_command(args) -> int:
    """``memlab exercises build``: chapters, the student bundle, roster variants, --book, --demos."""
    from memlab.course import bundle

    root = repo_root()
    roster = read_roster(Path(args.roster)) if args.roster else []  # checked before any work
    if args.demos:
        read_demos(root)
    out = build_folder(Path(args.out) if args.out else None, root)
    built = build(args.chapters or None, out, root)
    for chapter, paths in built.items():
        pad = " " * len(chapter)
        print(f"{chapter}: student {paths['student']}\n{pad}  autograder {paths['autograder']}")
    made = bundle.write_bundle(built, out, root)
    print(f"student bundle: {made['folder']} (zipped: {made['zip']}; library: {made['wheel'].name}, "
          "no exercises/ inside)")
    if roster:
        _roster_variants(built, roster, made["folder"], out)
    if args.book:
        for p in publish(built, root):
            print(f"book: {p}")
    if args.demos:
        for p in write_demos(built, root):
            print(f"demo submission: {p}")
    return 0


def _roster_variants(built, roster: list[str], bundle_folder: Path, out: Path) -> None:
    """Each roster student's notebooks (balanced knob values) and their own bundle zip."""
    import nbformat

    from memlab.course import bundle

    names = {n for p in built.values() for n in variant_names(nbformat.read(str(p["student"]), as_version=4))}
    values = balanced_variants(roster, names)
    print(roster_note(len(roster), names))
    mine: dict[str, dict[str, Path]] = {sid: {} for sid in roster}
    for chapter, paths in built.items():
        pad = " " * len(chapter)
        for sid in roster:
            dest = paths["student"].parent.parent / "students" / sid / paths["student"].name
            got = make_variant(paths["student"], sid, dest, values[sid])
            mine[sid][chapter] = dest
            print(f"{pad}  {sid}: {dest} {got}")
    for sid, z in bundle.roster_zips(bundle_folder, mine, out).items():
        print(f"bundle for {sid}: {z}")


def main(args) -> int:
    """Run ``memlab exercises build|grade|fetch`` from parsed arguments; returns the exit status."""
    if args.exercises_command == "build":
        return _build_command(args)
    if args.exercises_command == "fetch":
        print("\n".join(fetch_data(args.chapters or None)))
        return 0
    set_threads_for_grading()
    build_dir = Path(args.build_dir) if args.build_dir else repo_root() / DEFAULT_OUT
    fb = Path(args.feedback) if args.feedback else build_dir / "feedback"
    rows = grade([Path(p) for p in args.paths], build_dir, Path(args.autograder) if args.autograder else None,
                 Path(args.csv) if args.csv else None, fb)
    print("\n".join(summary_lines(rows)))
    sheet = "; open-questions.md: the written answers to grade" if any(r["manual"] for r in rows) else ""
    print(f"feedback: {fb} (a markdown report per submission{sheet})")
    if args.csv:
        print(f"scores: {args.csv}")
    return 1 if any(r["error"] for r in rows) else 0
