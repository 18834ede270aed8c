"""Feedback from a graded submission: per test, per question, per student (used by memlab.course.exercises).

otter's :class:`otter.test_files.GradingResults` holds one ``TestFile`` per autograded question,
and each test file one ``TestCaseResult`` per test case: the case (``name`` such as ``q1 - 2``,
``hidden``, ``points``, the master's optional ``failure_message``), whether it passed, and otter's
own output for it (the doctest transcript of the failing line and its exception). This module
turns those into

- a *record* of each question (:func:`question_records`): score, status and the failing tests,
  each with a one-line summary of otter's message;
- a *student report* in markdown (:func:`student_report`): what an instructor sends back. Hidden
  tests are named but their code is not shown (only the exception's type, or the master's
  ``failure_message``); failing questions repeat the question's hint; open questions say they
  need manual grading and quote the written answer;
- the instructor's *open-questions sheet* (:func:`open_questions_sheet`): each open question's
  sample answer followed by every student's written answer, to grade by hand;
- CSV rows (:data:`CSV_COLUMNS`, :func:`csv_rows`) and terminal lines (:func:`terminal_lines`).

A record is a plain dict (JSON-able), so reports can be rebuilt from saved results.
"""
from __future__ import annotations

import re
from typing import Any

# The placeholder otter puts into an open question's answer cell.
ANSWER_PLACEHOLDER = "_Type your answer here, replacing this text._"
CSV_COLUMNS = ["submission", "student", "assignment", "question", "score", "possible", "status",
               "failed_tests", "feedback", "error"]
NEEDS_MANUAL = "needs manual grading"


# ----------------------------------------------------------------------------- otter's results

def _indented(lines: list[str], start: int) -> list[str]:
    """The lines from ``start`` on that are indented (a doctest block), without the indent."""
    out = []
    for l in lines[start:]:
        if not l.startswith("    "):
            break
        out.append(l[4:])
    return out


def _failures(lines: list[str]) -> list[dict[str, str]]:
    """Each failed example of a doctest transcript: its code, its error, the student's line it hit."""
    out = []
    for i, l in enumerate(lines):
        if l != "Failed example:":
            continue
        code = _indented(lines, i + 1)
        j = i + 1 + len(code)
        head = lines[j] if j < len(lines) else ""
        block = _indented(lines, j + 1)
        error, where = "", ""
        if head == "Exception raised:":
            error = next((b.strip() for b in reversed(block) if b.strip()), "")
            # A frame in an ipykernel cell file is the student's own code; its next line is the source.
            frames = [k for k, b in enumerate(block) if "ipykernel_" in b and b.strip().startswith("File ")]
            if frames and frames[-1] + 1 < len(block):
                where = block[frames[-1] + 1].strip()
        elif head == "Expected:":
            got = lines.index("Got:", j) if "Got:" in lines[j:] else -1
            error = "got " + " ".join(b.strip() for b in _indented(lines, got + 1))[:200] if got >= 0 else ""
        out.append({"line": " ".join(c.strip() for c in code), "error": error, "where": where})
    return out


def summarise_message(message: str | None) -> dict[str, str]:
    """otter's output for one failed test, condensed to its first failing line:
    {"line": that code, "error": its exception (``AssertionError``, ``TypeError: 'int' object is not
    callable``) or ``got ...`` for wrong output, "where": the line of the student's own code the
    exception came from ("" when it came from the test), "more": how many more lines failed}.

    otter runs an OK-format test as a doctest; its message is the transcript, each failing
    example under ``Failed example:`` followed by ``Exception raised:`` and the traceback (or
    ``Expected:``/``Got:``). A message without one (another test format) gives its last line.
    """
    lines = (message or "").splitlines()
    fails = _failures(lines)
    if not fails:
        last = next((l.strip() for l in reversed(lines) if l.strip() and "Test case failed" not in l), "")
        return {"line": "", "error": last, "where": "", "more": "0"}
    return {**fails[0], "more": str(len(fails) - 1)}


def _test_record(tcr) -> dict[str, Any]:
    """One test case's result: name, hidden, points, passed, otter's message and its summary."""
    case = tcr.test_case
    summary = summarise_message(None if tcr.passed else tcr.message)
    return {"name": case.name, "hidden": bool(case.hidden), "points": float(case.points or 0),
            "passed": bool(tcr.passed), "message": "" if tcr.passed else (tcr.message or ""),
            "line": summary["line"], "error": summary["error"], "where": summary["where"],
            "more": int(summary["more"]),
            "failure_message": (case.failure_message or "") if not tcr.passed else ""}


def _status(score: float, possible: float) -> str:
    if possible and score >= possible - 1e-9:
        return "passed"
    return "failed" if score <= 1e-9 else "partial"


def question_records(results, info: dict[str, dict]) -> dict[str, dict]:
    """Autograded question -> {score, possible, status, title, hint, tests: [test records]}.

    results: otter's GradingResults; info: the master's questions (title, hint) by name, as
    stored in the autograder zip (may be empty: then titles and hints are "").
    """
    out = {}
    for name, tf in results.results.items():
        score, possible = float(tf.score), float(tf.possible)
        meta = info.get(name, {})
        out[name] = {"score": score, "possible": possible, "status": _status(score, possible),
                     "title": meta.get("title", ""), "hint": meta.get("hint", ""),
                     "tests": [_test_record(t) for t in tf.test_case_results]}
    return out


def failed_tests(question: dict) -> list[dict]:
    return [t for t in question.get("tests", []) if not t["passed"]]


# ----------------------------------------------------------------------------- the notebook itself

def cell_errors(executed_nb) -> list[dict[str, str]]:
    """Each code cell of the executed submission that raised: {"cell": its first line, "error"}."""
    out = []
    for cell in getattr(executed_nb, "cells", []) or []:
        if cell.get("cell_type") != "code":
            continue
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                first = next((l for l in cell.source.splitlines() if l.strip()), "")[:70]
                error = f"{o.get('ename', 'Error')}: {str(o.get('evalue', ''))[:200]}"
                out.append({"cell": first, "error": error})
    return out


def _cell_error_line(e: dict[str, str], md: bool) -> str:
    return f"`{e['cell']}` raised {e['error']}" if md else f"{e['cell']} raised {e['error']}"


def written_answers(nb, manual: list[str]) -> dict[str, str]:
    """Open question -> the student's written answer (the markdown answer cells of its block).

    nb: the submitted notebook; manual: the names of its open questions in order. otter marks
    each open question's block with ``<!-- BEGIN QUESTION -->`` / ``<!-- END QUESTION -->``
    markdown and the answer cells with the tag ``otter_answer_cell``. An untouched answer is "".
    """
    blocks, cur = [], None
    for cell in nb.cells:
        src = cell.source if isinstance(cell.source, str) else "".join(cell.source)
        if cell.cell_type == "markdown" and "<!-- BEGIN QUESTION -->" in src:
            cur = []
            blocks.append(cur)
        if cur is not None and cell.cell_type == "markdown" and \
                "otter_answer_cell" in cell.get("metadata", {}).get("tags", []):
            text = src.strip()
            if text and text != ANSWER_PLACEHOLDER:
                cur.append(text)
        if cell.cell_type == "markdown" and "<!-- END QUESTION -->" in src:
            cur = None
    return {q: "\n\n".join(b) for q, b in zip(manual, blocks)}


# ----------------------------------------------------------------------------- reports

def _fmt(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


def _test_line(t: dict, for_student: bool, md: bool = True) -> str:
    """A failing test in one line. A student never sees a hidden test's code, nor its exception's
    text (it may quote hidden inputs): only the type, and the master's failure message if any."""
    q = (lambda s: f"`{s}`") if md else (lambda s: s)
    hide = for_student and t["hidden"]
    error = t["error"].split(":", 1)[0] if hide else t["error"]
    parts = [t["failure_message"]] if t["failure_message"] else []
    if t["line"] and not hide:
        parts.append(f"{q(t['line'])} raised {error}" if error else f"{q(t['line'])} failed")
    elif error:
        parts.append(error)
    if t.get("where"):  # the student's own line the exception came from: safe to show for any test
        parts.append(f"in your code: {q(t['where'])}")
    if t.get("more"):
        parts.append(f"{t['more']} more line{'s' if t['more'] > 1 else ''} of this test failed")
    kind = " (hidden test)" if t["hidden"] else ""
    return f"{q(t['name'])}{kind}: " + "; ".join(parts)


def student_report(row: dict) -> str:
    """The markdown feedback of one graded submission (a :func:`memlab.course.exercises.grade_one` row)."""
    who = f" for {row['student']}" if row.get("student") else ""
    lines = [f"# {row['assignment']}: feedback{who}", ""]
    if row.get("error"):
        lines += [f"**This submission could not be graded:** {row['error']}", ""]
    manual_pts = sum(m["possible"] for m in row.get("manual", {}).values())
    total = (f"**{_fmt(row['score'])} / {_fmt(row['possible'])}** autograded points "
             f"({100 * row['percent']:.0f}%)")
    rest = f"; {_fmt(manual_pts)} more points are graded by hand" if manual_pts else ""
    lines += [f"Submission `{row['submission_name']}`: {total}{rest}.", ""]
    for name, q in row["questions"].items():
        lines += _question_section(name, q)
    for name, m in row.get("manual", {}).items():
        title = f": {m['title']}" if m.get("title") else ""
        lines += [f"## {name}{title}", "", f"*{NEEDS_MANUAL.capitalize()}* ({_fmt(m['possible'])} points): "
                  "your instructor grades the written answer.", ""]
        answer = m.get("answer", "")
        quoted = [f"> {l}" if l else ">" for l in answer.splitlines()]
        lines += quoted or ["*(no answer written)*"]
        lines.append("")
    if row.get("cell_errors"):
        lines += ["## Cells that raised while grading", ""]
        lines += [f"- {_cell_error_line(e, md=True)}" for e in row["cell_errors"]] + [""]
    return "\n".join(lines).rstrip() + "\n"


def _question_section(name: str, q: dict) -> list[str]:
    title = f": {q['title']}" if q.get("title") else ""
    head = f"## {name}{title}"
    score = f"{_fmt(q['score'])} / {_fmt(q['possible'])}"
    failed = failed_tests(q)
    if not failed:
        return [head, "", f"{score}: every test passed.", ""]
    out = [head, "", f"{score}: {len(failed)} of {len(q['tests'])} tests failed.", ""]
    out += [f"- {_test_line(t, for_student=True)}" for t in failed] + [""]
    if q.get("hint"):
        out += [f"*Hint:* {q['hint']}", ""]
    return out


def open_questions_sheet(rows: list[dict], info: dict[str, dict[str, dict]]) -> str:
    """The instructor's sheet for the open questions: per assignment and question, the sample
    answer, then each submission's written answer. info: assignment -> question -> master info."""
    lines = ["# Open questions to grade by hand", "",
             "Instructor only: each question's sample answer (from the master) is followed by every "
             "submission's written answer. Enter the points in the `score` column of the CSV rows whose "
             f"status is '{NEEDS_MANUAL}'.", ""]
    by_assignment: dict[str, list[dict]] = {}
    for r in rows:
        by_assignment.setdefault(r["assignment"], []).append(r)
    for assignment, subs in sorted(by_assignment.items()):
        names = sorted({q for r in subs for q in r.get("manual", {})})
        for q in names:
            meta = info.get(assignment, {}).get(q, {})
            pts = next(r["manual"][q]["possible"] for r in subs if q in r.get("manual", {}))
            lines += [f"## {assignment} {q}: {meta.get('title', '')} ({_fmt(pts)} points)", ""]
            if meta.get("sample"):
                lines += ["**Sample answer.**", "", meta["sample"], ""]
            for r in subs:
                if q in r.get("manual", {}):
                    answer = r["manual"][q].get("answer") or "*(no answer written)*"
                    lines += [f"### {r.get('student') or r['submission_name']} (`{r['submission_name']}`)", "",
                              answer, ""]
    return "\n".join(lines).rstrip() + "\n"


def csv_rows(row: dict) -> list[list[Any]]:
    """The CSV rows (:data:`CSV_COLUMNS`) of one graded submission: a row per question and a TOTAL."""
    base = [row["submission"], row.get("student", ""), row["assignment"]]
    out = []
    for name, q in row["questions"].items():
        failed = failed_tests(q)
        names = "; ".join(t["name"] + (" (hidden)" if t["hidden"] else "") for t in failed)
        notes = " | ".join(_test_line(t, for_student=False, md=False) for t in failed)
        out.append(base + [name, q["score"], q["possible"], q["status"], names, notes, ""])
    for name, m in row.get("manual", {}).items():
        words = len(m.get("answer", "").split())
        note = f"written answer: {words} words" if words else "no answer written"
        out.append(base + [name, "", m["possible"], NEEDS_MANUAL, "", note, ""])
    err = row.get("error") or "; ".join(_cell_error_line(e, md=False) for e in row.get("cell_errors", []))
    out.append(base + ["TOTAL", row["score"], row["possible"], "autograded total", "", "", err])
    return out


def terminal_lines(row: dict) -> list[str]:
    """What ``memlab exercises grade`` prints for one submission: a score line, then one indented
    line per failing test and per open question (the instructor's view: hidden code included)."""
    qs = " ".join(f"{q}={_fmt(v['score'])}/{_fmt(v['possible'])}" for q, v in row["questions"].items())
    who = f" ({row['student']})" if row.get("student") else ""
    err = f"  ERROR {row['error']}" if row.get("error") else ""
    score = f"{_fmt(row['score'])}/{_fmt(row['possible'])} ({100 * row['percent']:.0f}%)"
    lines = [f"{row['submission']}{who}: {score}  {qs}{err}"]
    for name, q in row["questions"].items():
        lines += [f"    {name} failed {_test_line(t, for_student=False, md=False)}" for t in failed_tests(q)]
    for name, m in row.get("manual", {}).items():
        state = "answered" if m.get("answer") else "no answer written"
        lines.append(f"    {name} ({_fmt(m['possible'])} points): {NEEDS_MANUAL} ({state})")
    lines += [f"    cell error: {_cell_error_line(e, md=False)}" for e in row.get("cell_errors", [])]
    return lines


def hint_of(prompt: str) -> str:
    """The hint paragraph of a question's prompt (the text after ``*Hint:*``), on one line."""
    m = re.search(r"\*Hint:\*\s*(.*?)(?:\n\s*\n|$)", prompt, re.S)
    return " ".join(m.group(1).split()) if m else ""


def title_of(prompt: str) -> str:
    """The bold title that opens a question's prompt (``Exercise 2.1 (warm-up): HSIC by hand``)."""
    m = re.search(r"\*\*(.+?)\*\*", prompt, re.S)
    return " ".join(m.group(1).split()).rstrip(".") if m else ""
