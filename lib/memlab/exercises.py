"""The course kit: otter-grader masters in ``exercises/``, student releases, autograders, grading.

Each chapter has one master, ``exercises/<chapter>.py`` (jupytext percent), in otter-grader's
assign format: raw ``# BEGIN QUESTION`` / ``# BEGIN SOLUTION`` / ``# BEGIN TESTS`` cells,
solution lines between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` comments, hidden tests
marked by a ``hidden: true`` test config. :func:`build` turns every master into

    <out>/<chapter>/student/<chapter>.ipynb        the student notebook (no solutions, public tests)
    <out>/<chapter>/autograder/<chapter>.ipynb     the solved notebook with every test
    <out>/<chapter>/<chapter>-autograder.zip       otter's autograder (all tests, hidden included)

(``out`` defaults to ``_build/exercises``; never ``book/``). :func:`publish` copies the
student notebooks to ``book/exercises/`` for the book, :func:`grade` grades submissions with
otter's local, Docker-free runner, :func:`make_variant` gives a student their own seed.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import shutil
import tempfile
import warnings
import zipfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Iterable, Sequence

from memlab.config import ConfigError, repo_root

MASTERS = "exercises"
DEFAULT_OUT = Path("_build") / "exercises"
BOOK_SUBDIR = Path("book") / "exercises"
# A master's per-student knobs: a line `NAME = <int>  # per-student` in a code cell.
VARIANT_LINE = re.compile(r"^(?P<name>[A-Z_]+) = (?P<value>-?\d+)(?P<rest>\s+# per-student.*)$", re.M)
# How far a variant's knobs may range: SEED over [0, 10000), FORGET_CLASS over the 10 classes.
VARIANT_RANGE = {"SEED": 10000, "FORGET_CLASS": 10}


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
    """The master's questions in order: {name, points, manual, n_tests, n_hidden}."""
    import yaml

    out, cur, in_tests = [], None, False
    for cell in nb.cells:
        mark = _raw_marker(cell)
        if mark == "begin question":
            conf = yaml.safe_load("\n".join(_cell_lines(cell)[1:])) or {}
            cur = {"name": conf["name"], "points": conf.get("points", 1), "manual": bool(conf.get("manual")),
                   "n_tests": 0, "n_hidden": 0}
            out.append(cur)
        elif mark == "begin tests":
            in_tests = True
        elif mark == "end tests":
            in_tests = False
        elif in_tests and cell["cell_type"] == "code" and cur is not None:
            cur["n_tests"] += 1
            cur["n_hidden"] += int(_is_hidden_test(cell))
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
            secret.extend(l for l in lines if "TEST CONFIG" not in l and not re.match(r"\s*hidden:", l))
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


def build(chapters: Sequence[str] | None = None, out: Path | None = None,
          root: Path | None = None) -> dict[str, dict[str, Path]]:
    """Student notebook, solved notebook and autograder zip of each chapter's master.

    Returns chapter -> {"student", "solved", "autograder"} paths under ``out`` (default
    ``<root>/_build/exercises``). A folder inside ``book/`` is refused: the book must only
    ever receive student versions, through :func:`publish`.
    """
    root = Path(root) if root else repo_root()
    chosen = select(chapters, root)
    out = Path(out).expanduser().resolve() if out else root / DEFAULT_OUT
    book = (root / "book").resolve()
    if out == book or book in out.parents:
        raise ExerciseError(f"parameter 'out': {str(out)!r} is inside book/; build elsewhere "
                            "(default _build/exercises) and use --book to publish the student versions")
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
        built[chapter] = {"student": dest / "student" / f"{chapter}.ipynb",
                          "solved": dest / "autograder" / f"{chapter}.ipynb", "autograder": ag}
    return built


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

def variant_values(student_id: str, names: Iterable[str]) -> dict[str, int]:
    """A student's own value of each per-student knob, stable across builds (SHA-256 of the id)."""
    sid = str(student_id).strip()
    if not sid or not re.fullmatch(r"[A-Za-z0-9._@-]+", sid):
        raise ExerciseError(f"student id {student_id!r}: use letters, digits and . _ @ - only")
    out = {}
    for name in names:
        digest = hashlib.sha256(f"{sid}:{name}".encode()).digest()
        out[name] = int.from_bytes(digest[:8], "big") % VARIANT_RANGE.get(name, 10000)
    return out


def make_variant(student_nb: Path, student_id: str, dest: Path) -> dict[str, int]:
    """Write ``student_nb`` with its per-student knobs set for ``student_id`` to ``dest``.

    The knobs are lines ``NAME = 0  # per-student`` of the master (SEED, FORGET_CLASS); the
    tests compare with the library at the notebook's own values, so one autograder grades
    every variant. Returns the values written.
    """
    import nbformat

    nb = nbformat.read(str(student_nb), as_version=4)
    names = sorted({m.group("name") for c in nb.cells if c.cell_type == "code"
                    for m in VARIANT_LINE.finditer(c.source)})
    values = variant_values(student_id, names)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = VARIANT_LINE.sub(
                lambda m: f"{m.group('name')} = {values[m.group('name')]}{m.group('rest')}", cell.source)
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(dest))
    return values


def read_roster(path: Path) -> list[str]:
    """Student ids, one a line (blank lines and # comments skipped)."""
    path = Path(path)
    if not path.is_file():
        raise ExerciseError(f"parameter 'roster': {str(path)!r} is not a file (one student id a line)")
    ids = [l.split("#")[0].strip() for l in path.read_text().splitlines()]
    ids = [i for i in ids if i]
    for i in ids:
        variant_values(i, [])
    return ids


# ----------------------------------------------------------------------------- grading

def chapter_of(submission: Path) -> str:
    """The assignment a submission belongs to: its otter metadata's name, else its file stem."""
    try:
        meta = json.loads(Path(submission).read_text()).get("metadata", {})
    except (OSError, ValueError) as e:
        raise ExerciseError(f"submission {str(submission)!r}: not a readable notebook ({e})") from e
    return meta.get("otter", {}).get("assignment_name") or Path(submission).stem


def grade_one(submission: Path, autograder: Path, debug: bool = False) -> dict:
    """Grade one notebook with otter's local runner (no Docker; the current environment runs it).

    debug: raise an ExerciseError when a cell of the submission raises (otter otherwise
    ignores cell errors and grades what ran); used to prove student notebooks run clean.

    Returns {"submission", "assignment", "score", "possible", "percent", "questions": {q: {score,
    possible}}, "error"}; ``error`` is the otter error that stopped grading, else None.
    """
    from otter.api import grade_submission

    submission, autograder = Path(submission), Path(autograder)
    if not autograder.is_file():
        raise ExerciseError(f"parameter 'autograder': {str(autograder)!r} does not exist "
                            "(run `memlab exercises build` first)")
    sink = io.StringIO()
    with redirect_stdout(sink), redirect_stderr(sink), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # otter's own pandas deprecations, not the student's
        try:
            res = grade_submission(str(submission), str(autograder), quiet=True, debug=debug)
        except Exception as e:
            if not debug:
                raise
            raise ExerciseError(f"{submission}: a cell raised while grading: {str(e)[-1500:]}") from e
    err = res.catastrophic_error
    return {"submission": str(submission), "assignment": chapter_of(submission),
            "score": float(res.total), "possible": float(res.possible), "percent": float(res.percent),
            "questions": {q: {"score": float(t["score"]), "possible": float(t["possible"])}
                          for q, t in res.to_dict().items()},
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


def grade(paths: Sequence[Path], build_dir: Path | None = None, autograder: Path | None = None,
          csv_path: Path | None = None) -> list[dict]:
    """Grade every submission under ``paths``; each one with its chapter's autograder zip.

    The zip is ``autograder`` when given, else ``<build_dir>/<chapter>/<chapter>-autograder.zip``
    (build_dir defaults to ``_build/exercises``). Writes one CSV row per submission and
    question to ``csv_path`` when given. Manually graded questions are not in the scores.
    """
    subs = find_submissions(paths)
    build_dir = Path(build_dir) if build_dir else repo_root() / DEFAULT_OUT
    zips = {}
    for s in subs:
        name = chapter_of(s)
        zips[s] = Path(autograder) if autograder else build_dir / name / f"{name}-autograder.zip"
    missing = sorted({str(z) for z in zips.values() if not z.is_file()})
    if missing:  # checked for every submission before any is graded
        raise ExerciseError(f"autograder {', '.join(missing)} does not exist (run `memlab exercises build`, "
                            "or pass --build-dir / --autograder)")
    rows = [grade_one(s, zips[s]) for s in subs]
    if csv_path:
        Path(csv_path).parent.mkdir(parents=True, exist_ok=True)
        with open(csv_path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["submission", "assignment", "question", "score", "possible", "error"])
            for r in rows:
                err = r["error"] or ""
                for q, v in r["questions"].items():
                    w.writerow([r["submission"], r["assignment"], q, v["score"], v["possible"], err])
                w.writerow([r["submission"], r["assignment"], "TOTAL", r["score"], r["possible"], err])
    return rows


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


def summary_lines(rows: list[dict]) -> list[str]:
    """One line per graded submission: score/possible and each question's score."""
    lines = []
    for r in rows:
        qs = " ".join(f"{q}={v['score']:g}/{v['possible']:g}" for q, v in r["questions"].items())
        err = f"  ERROR {r['error']}" if r["error"] else ""
        score = f"{r['score']:g}/{r['possible']:g} ({100 * r['percent']:.0f}%)"
        lines.append(f"{r['submission']}: {score}  {qs}{err}")
    return lines


def set_threads_for_grading() -> None:
    """Grading kernels inherit the environment: one BLAS/torch thread each, as the exercises assume."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MEMLAB_PROGRESS", "0")


# ----------------------------------------------------------------------------- command line

def add_subparser(sub) -> None:
    """``memlab exercises build|grade`` (wired into :func:`memlab.cli.build_parser`)."""
    ex = sub.add_parser("exercises", help="build the course exercises (otter-grader) or grade submissions")
    exs = ex.add_subparsers(dest="exercises_command", required=True)
    b = exs.add_parser("build", help="student notebooks + autograder zips from exercises/*.py")
    b.add_argument("chapters", nargs="*", help="chapter ids (default: every master in exercises/)")
    b.add_argument("--out", default=None, help="build folder (default _build/exercises; never inside book/)")
    b.add_argument("--book", action="store_true", help="also copy the student notebooks to book/exercises/")
    b.add_argument("--roster", default=None, metavar="FILE",
                   help="student ids, one a line: one notebook per student with their own SEED/FORGET_CLASS")
    g = exs.add_parser("grade", help="grade submitted notebooks locally (otter run, no Docker)")
    g.add_argument("paths", nargs="+", help="submitted .ipynb files or folders of them")
    g.add_argument("--build-dir", default=None, help="the build folder holding the autograder zips "
                                                     "(default _build/exercises)")
    g.add_argument("--autograder", default=None, help="one autograder zip for every submission")
    g.add_argument("--csv", default=None, help="write the scores (one row per question) to this CSV file")


def main(args) -> int:
    """Run ``memlab exercises build|grade`` from parsed arguments; returns the exit status."""
    if args.exercises_command == "build":
        built = build(args.chapters or None, Path(args.out) if args.out else None)
        roster = read_roster(Path(args.roster)) if args.roster else []
        for chapter, paths in built.items():
            pad = " " * len(chapter)
            print(f"{chapter}: student {paths['student']}\n{pad}  autograder {paths['autograder']}")
            for sid in roster:
                dest = paths["student"].parent.parent / "students" / sid / paths["student"].name
                values = make_variant(paths["student"], sid, dest)
                print(f"{pad}  {sid}: {dest} {values}")
        if args.book:
            for p in publish(built):
                print(f"book: {p}")
        return 0
    set_threads_for_grading()
    rows = grade([Path(p) for p in args.paths], Path(args.build_dir) if args.build_dir else None,
                 Path(args.autograder) if args.autograder else None, Path(args.csv) if args.csv else None)
    print("\n".join(summary_lines(rows)))
    if args.csv:
        print(f"scores: {args.csv}")
    return 1 if any(r["error"] for r in rows) else 0
