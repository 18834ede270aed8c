"""End to end: a smoke run of every chapter (network off), the book build, a real browser.

The smoke outputs go to a temporary book folder, never over the published
cpu-profile outputs in book/.
"""
from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import threading
from pathlib import Path

import pytest

from memlab import cli
from memlab.report import book
from memlab.core.chapters import CHAPTERS
from conftest import RUNNABLE, launch_chromium  # smoke_project: one smoke book per session (conftest)
from test_pooling import check_signs

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("chapter", RUNNABLE)
def test_chapter_runs_at_smoke_profile(smoke_project, chapter):
    root, outcomes = smoke_project
    assert outcomes[chapter] is None, outcomes[chapter]
    import json

    res = json.loads((root / "book" / "results" / f"{chapter}.json").read_text())
    assert res["profile"] == "smoke" and res["metrics"], "results must hold metrics"
    assert res["claims"], "every chapter ends with a claims table"
    from memlab.report.paper import VERDICTS

    assert {c["verdict"] for c in res["claims"]} <= set(VERDICTS)
    assert list((root / "book" / "figures" / chapter).glob("*.png")), "every chapter publishes figures"
    assert list((root / "book" / "figures" / chapter).glob("*.svg"))


@pytest.mark.parametrize("chapter", RUNNABLE)
def test_recorded_sign_agrees_with_the_verdict_at_smoke(smoke_project, chapter):
    """Each margin claim's recorded sign agrees with its verdict (``test_pooling.check_signs``), and pooling
    a seed with itself keeps that verdict (its band narrows by sqrt(2))."""
    import json

    from memlab.report import pooling
    from memlab.report.paper import NOT_JUDGED

    root, outcomes = smoke_project
    assert outcomes[chapter] is None, outcomes[chapter]
    rows = json.loads((root / "book" / "results" / f"{chapter}.json").read_text())["claims"]
    assert not check_signs(chapter, rows)
    for r in rows:
        if pooling.margins_decide(r) and r["verdict"] != NOT_JUDGED:
            assert pooling.pool_rows([r, r])["verdict"] == r["verdict"], r["key"]


def test_chapter5_trains_every_text_size_for_the_same_steps_at_smoke(smoke_project):
    # the paper's design (Sections 3.2 and 4): one step count for every text data set size,
    # and the double-descent gate's quantity recorded (tests/test_capacity_experiments.py)
    import json

    from test_capacity_experiments import check_fixed_step_results

    root, outcomes = smoke_project
    if "05_capacity" not in outcomes:
        pytest.skip("chapter 5 is not runnable in this checkout")
    assert outcomes["05_capacity"] is None, outcomes["05_capacity"]
    check_fixed_step_results(json.loads((root / "book" / "results" / "05_capacity.json").read_text()))


@pytest.fixture(scope="session")
def built_book(smoke_project):
    root, outcomes = smoke_project
    index = book.render(root=root, out=root / "_build")
    return root / "_build" / "html", index


def test_book_renders_every_chapter_without_errors(built_book, smoke_project):
    html, index = built_book
    assert index.exists()
    for page in ("book/scorecard.html", "book/robustness.html", "book/rerunning.html", "book/bibliography.html",
                 "book/exercises.html"):
        assert (html / page).exists(), page
    for chapter in RUNNABLE:
        page = html / "book" / "chapters" / f"{chapter}.html"
        assert page.exists(), f"{chapter} missing from the book"
        text = page.read_text()
        assert "Traceback" not in text and 'class="output traceback' not in text, f"{chapter} shows an error"
        assert "Provenance" in text, f"{chapter} has no provenance box"
        imgs = re.findall(r'<img[^>]+src="([^"]+)"', text)
        assert imgs, f"{chapter} shows no figure"
        for src in imgs:
            if not src.startswith(("http", "data:")):
                assert (page.parent / src).resolve().exists(), f"{chapter}: broken image {src}"
    score = (html / "book" / "scorecard.html").read_text()
    for chapter in RUNNABLE:
        assert CHAPTERS[chapter].title in score


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_browser_sees_no_console_errors_and_every_image_loads(built_book):
    chromium = shutil.which("chromium")
    if chromium is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have Debian's chromium (scripts/setup.sh installs it)")
        pytest.skip("needs Debian's chromium")
    from playwright.sync_api import sync_playwright

    html, _ = built_book
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(html)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    pages = ["index.html", "book/scorecard.html"] + [f"book/chapters/{c}.html" for c in RUNNABLE]
    problems = []
    try:
        with sync_playwright() as p:
            browser = launch_chromium(p, chromium)
            for path in pages:
                page = browser.new_page()
                external_failed = set()
                errors = []
                # The book is read online; here only loopback exists, so requests to CDNs
                # (MathJax) are blocked and their load failures are not the page's errors.
                page.route(re.compile(r"^https?://(?!127\.0\.0\.1).*"), lambda route: route.abort())
                page.on("requestfailed", lambda req: external_failed.add(req.url) if not req.url.startswith(base) else None)
                page.on("console", lambda msg: errors.append(msg) if msg.type == "error" else None)
                page.on("pageerror", lambda exc: problems.append(f"{path}: page error {exc}"))
                resp = page.goto(f"{base}/{path}", wait_until="load")
                assert resp is not None and resp.ok, f"{path}: HTTP {resp.status if resp else 'none'}"
                page.wait_for_timeout(300)
                for msg in errors:
                    url = (msg.location or {}).get("url", "")
                    if url in external_failed or (not url.startswith(base) and "Failed to load resource" in msg.text):
                        continue
                    problems.append(f"{path}: console error {msg.text} ({url})")
                broken = page.evaluate(
                    "Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)"
                )
                problems += [f"{path}: image did not load {src}" for src in broken if src.startswith(base)]
                n_images = page.evaluate("document.images.length")
                if path.startswith("book/chapters/"):
                    assert n_images > 0, f"{path}: no images"
                page.close()
            browser.close()
    finally:
        server.shutdown()
    assert not problems, "\n".join(problems)


def test_reader_surfaces_of_smoke_book(built_book, smoke_project):
    """Figures on the page, claims in full, no NaN/paths/tracebacks, fits a 390 px phone, math
    typeset (when MathJax is installed locally); screenshots in $MEMLAB_TEST_ARTIFACTS/smoke-book
    (default _build/screenshots/smoke-book). See tests/test_book_surfaces.py."""
    from test_book_surfaces import artifacts_dir, check_book_surfaces, chromium_or_skip

    chromium_or_skip()
    html, _ = built_book
    root, outcomes = smoke_project
    chapters = [c for c in RUNNABLE if outcomes[c] is None]
    problems = check_book_surfaces(html, root / "book", chapters, artifacts_dir("smoke-book"))
    assert not problems, "\n".join(problems)


def test_rendered_exercises_are_student_versions(built_book):
    """The book's exercise pages show every chapter's exercises but no solution line, sample
    answer or hidden test of any master (memlab.course.exercises.rendered_leaks; tests/test_exercises.py)."""
    from memlab.course import exercises

    html, _ = built_book
    problems = exercises.rendered_leaks(html, REPO)
    assert not problems, "\n".join(problems)
