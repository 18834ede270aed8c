"""The book as its readers see it, checked in a real browser (Chromium through Playwright).

:func:`check_book_surfaces` opens every page of a rendered book at 1280 px and 390 px and
collects what a reader would notice: figures that are not on the page, cut claim texts,
NaN / PosixPath / staging paths / tracebacks, pages that scroll sideways, tables wider than
their column outside a scroll box with a cue, figure text below 9 px (:func:`figure_problems`),
verdicts off screen, untypeset math. It also writes a screenshot of every page at both widths.

It runs on two books:

* the smoke book that ``tests/test_chapters.py`` builds (``test_reader_surfaces_of_smoke_book``
  there), so every change to a chapter or to the rendering is checked from the browser;
* the committed ``cpu`` book in ``book/`` (below: rendered only, never re-run). This one checks
  what is published, so it fails until the chapters are republished after a change to how
  they show figures or claims; it is skipped only when ``book/chapters`` holds no chapter.
"""
from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import threading
from pathlib import Path

import pytest

from conftest import launch_chromium

REPO = Path(__file__).resolve().parents[1]
WIDTHS = (1280, 390)
BAD_TEXT = re.compile(r"\bNaN\b|\bnan\b|PosixPath|\.staging-|Traceback")


def artifacts_dir(name: str) -> Path:
    """Where screenshots go: ``$MEMLAB_TEST_ARTIFACTS/<name>`` or ``_build/screenshots/<name>``."""
    base = os.environ.get("MEMLAB_TEST_ARTIFACTS")
    path = (Path(base) if base else REPO / "_build" / "screenshots") / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def chromium_or_skip() -> str:
    chromium = shutil.which("chromium")
    if chromium is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have Debian's chromium (scripts/setup.sh installs it)")
        pytest.skip("needs Debian's chromium")
    return chromium


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _norm(text: str) -> str:
    return " ".join(text.split())


def expected_figures(book: Path, chapter: str) -> int:
    """How many figures the chapter published: the list in its results JSON, else its PNG files."""
    res = json.loads((book / "results" / f"{chapter}.json").read_text())
    if "figures" in res:
        return len(res["figures"])
    return len(list((book / "figures" / chapter).glob("*.png")))


def check_book_surfaces(html: Path, book: Path, chapters: list[str], shots: Path,
                        reader_first: bool = True, figures_sized: bool = True) -> list[str]:
    """Every problem a reader would see on the rendered book ``html`` (built from ``book``).

    ``reader_first``: every chapter must open with its findings box (``memlab.report.pagekit``) in the
    first two screens at 1280 px, listing each headline claim with the verdict of its results
    JSON; and no page's prose may show a Python repr, a quoted number, ``None``, a snake_case
    claim key, or a table header that is a variable name; and every chapter's story (what comes
    before its first appendix section or its claims) must fit in ``STORY_SCREENS`` at 1280 px.
    ``figures_sized``: every figure must carry the size of its smallest text (saved by
    ``memlab.report.plotting.BookFigure``); when False, a figure saved before that is passed over, and
    the figures that do carry it are still checked.
    """
    leak = _leak_pattern(book, chapters)
    from playwright.sync_api import sync_playwright

    chromium = chromium_or_skip()
    local_mathjax = (html / "_static" / "mathjax" / "tex-chtml.js").exists()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(html)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    pages = ["book/intro.html", "book/scorecard.html", "book/robustness.html", "book/rerunning.html", "book/cost.html",
             "book/bibliography.html"]
    pages += [f"book/chapters/{c}.html" for c in chapters]
    problems: list[str] = []
    try:
        with sync_playwright() as p:
            browser = launch_chromium(p, chromium)
            for path in pages:
                chapter = Path(path).stem if path.startswith("book/chapters/") else None
                source = (html / path).read_text(encoding="utf-8")
                if "&lt;Figure size" in source or "<Figure size" in source:
                    problems.append(f"{path}: shows a matplotlib repr ('<Figure size ...') "
                                    "instead of a figure")
                for width in WIDTHS:
                    page = browser.new_page(viewport={"width": width, "height": 900})
                    # Only loopback exists here: CDN requests fail fast instead of hanging.
                    page.route(re.compile(r"^https?://(?!127\.0\.0\.1).*"), lambda route: route.abort())
                    page.goto(f"{base}/{path}", wait_until="load")
                    has_math = page.evaluate("document.querySelectorAll('.math').length") > 0
                    if has_math and local_mathjax:
                        try:
                            page.wait_for_selector("mjx-container", state="attached", timeout=30000)
                        except Exception:  # noqa: BLE001 - reported as the problem it is
                            problems.append(f"{path} @{width}: math is not typeset (no mjx-container)")
                    page.wait_for_timeout(300)
                    shot = shots / f"{path.replace('/', '_')[:-5]}-{width}.png"
                    page.screenshot(path=str(shot), full_page=True)
                    text = page.evaluate("document.body.innerText")
                    # What the page says, without the code of its cells (np.nan there is fine).
                    prose = page.evaluate(
                        """() => {
                             const a = (document.querySelector('article') || document.body).cloneNode(true);
                             a.querySelectorAll('.cell_input, div.highlight, pre, code').forEach(e => e.remove());
                                   return a.textContent; }""")
                    for m in BAD_TEXT.finditer(prose):
                        ctx = _norm(prose[max(0, m.start() - 60): m.end() + 60])
                        problems.append(f"{path} @{width}: shows {m.group(0)!r} ... {ctx} ...")
                        break
                    cut = page.evaluate(
                        "Array.from(document.querySelectorAll('td, th')).map(c => c.innerText.trim())"
                        ".filter(t => t.endsWith('...'))"
                    )
                    problems += [f"{path} @{width}: table cell cut: {c[-70:]!r}" for c in cut[:3]]
                    sw = page.evaluate("document.scrollingElement.scrollWidth")
                    if sw > width + 1:
                        wide = page.evaluate(
                            """w => Array.from(document.querySelectorAll('article *'))
                                 .filter(e => e.getBoundingClientRect().right > w + 1)
                                 .filter(e => !e.closest('.memlab-table-wrap, .cell_output, pre, '
                                                         + 'mjx-container, .memlab-fig-scroll'))
                                 .slice(0, 3).map(e => e.tagName + '.' + e.className + ': '
                                                  + (e.innerText || '').slice(0, 40))""", width)
                        problems.append(f"{path} @{width}: page scrolls sideways "
                                        f"(scrollWidth {sw}); e.g. {wide}")
                    problems += table_problems(page, path, width)
                    problems += figure_problems(page, path, width, unsized_ok=not figures_sized)
                    if width == 390:
                        off = page.evaluate(
                            """w => Array.from(document.querySelectorAll('td.claim-verdict')).filter(td => {
                                 const r = td.getBoundingClientRect(); return r.left < 0 || r.right > w + 1;
                               }).length""", width)
                        if off:
                            problems.append(f"{path} @390: {off} verdict cells outside the viewport")
                    if path == "book/robustness.html":  # each published sweep's verdict figure, loaded
                        n_fig = page.evaluate(
                            """Array.from(document.querySelectorAll('figure img, div.figure img'))
                                 .filter(i => i.complete && i.naturalWidth > 100).length""")
                        want = len(list((book / "robustness").glob("*.png")))
                        if n_fig != want:
                            problems.append(f"{path} @{width}: {n_fig} figures, {want} sweeps published one")
                    if reader_first:
                        problems += _reader_text_problems(page, path, width, prose, leak)
                    if chapter is not None and reader_first:
                        problems += _findings_problems(page, path, width, book, chapter)
                        problems += _story_problems(page, path, width)
                    if chapter is not None:
                        n_fig = page.evaluate(
                            """Array.from(document.querySelectorAll('figure img, div.figure img'))
                                 .filter(i => i.complete && i.naturalWidth > 100).length""")
                        want = expected_figures(book, chapter)
                        if n_fig != want:
                            problems.append(f"{path} @{width}: {n_fig} figures on the page, the chapter "
                                            f"published {want}")
                        verdicts = page.evaluate(
                            "Array.from(document.querySelectorAll('td.claim-verdict')).length")
                        res = json.loads((book / "results" / f"{chapter}.json").read_text())
                        if verdicts != len(res["claims"]):
                            problems.append(f"{path} @{width}: {verdicts} verdict cells for "
                                            f"{len(res['claims'])} claims")
                        flat = _norm(text)
                        for c in res["claims"]:
                            if _norm(c["claim"]) not in flat:
                                problems.append(f"{path}: claim not shown in full: {c['claim'][:60]!r}")
                            if c["verdict"] == "not reproduced" and not c.get("reason"):
                                problems.append(f"{path}: 'not reproduced' without a reason: {c['key']}")
                    page.close()
            browser.close()
    finally:
        server.shutdown()
    return problems


# Every <table> of the article: whether it lies within the article's column (its content box: 688 px
# at a 1280 px window, 358 px at 390 px), and the nearest box
# around it that scrolls sideways (overflow-x auto/scroll): within the column, and whether it
# paints the scroll cue (memlab.css: shadow gradients on its background).
_TABLES_JS = """() => {
    const art = document.querySelector('article') || document.body, box = art.getBoundingClientRect();
    const cs = getComputedStyle(art);  // the column: the article's content box
    const a = {left: box.left + parseFloat(cs.paddingLeft), right: box.right - parseFloat(cs.paddingRight)};
    a.width = a.right - a.left;
    const within = r => r.left >= a.left - 1 && r.right <= a.right + 1;
    return Array.from(art.querySelectorAll('table')).map(t => {
        let box = t.parentElement;
        while (box && box !== art && !['auto', 'scroll'].includes(getComputedStyle(box).overflowX)) {
            box = box.parentElement;
        }
        const scroller = box && box !== art ? box : null;
        return {width: t.getBoundingClientRect().width, column: a.width, fits: within(t.getBoundingClientRect()),
                scroller: scroller ? {within: within(scroller.getBoundingClientRect()), cls: scroller.className,
                                      cue: getComputedStyle(scroller).backgroundImage.includes('gradient')} : null,
                text: (t.innerText || '').trim().slice(0, 40)};
    });
}"""


def table_problems(page, path: str, width: int) -> list[str]:
    """A table wider than its column must scroll inside its own box, and that box must show the cue."""
    out = []
    for t in page.evaluate(_TABLES_JS):
        if t["fits"]:
            continue
        where = f"{path} @{width}: table {t['text']!r} ({t['width']:.0f} px, column {t['column']:.0f} px)"
        sc = t["scroller"]
        if sc is None or not sc["within"]:
            out.append(f"{where} is wider than its column and no box within the column scrolls it")
        elif not sc["cue"]:
            out.append(f"{where} scrolls in {sc['cls']!r}, which shows no scroll cue")
    return out


MIN_TEXT_PX = 9.0


_FIGURES_JS = """() => Array.from(document.querySelectorAll('article figure img, article div.figure img'))
    .filter(i => i.complete && i.naturalWidth > 100).map(i => {
        const box = i.closest('.memlab-fig-scroll');
        const cue = i.closest('.memlab-fig') && i.closest('.memlab-fig').querySelector('.memlab-fig-cue');
        return {src: i.getAttribute('src').split('/').pop().slice(0, 16), natural: i.naturalWidth,
                shown: i.getBoundingClientRect().width, pt: parseFloat(i.dataset.memlabFontPt),
                dpi: parseFloat(i.dataset.memlabDpi),
                scrolls: box ? box.scrollWidth > box.clientWidth + 1 : false,
                box: box ? {width: box.clientWidth, overflow: getComputedStyle(box).overflowX} : null,
                cue: cue ? cue.getBoundingClientRect().height : null};
    })"""


def figure_measures(page) -> list[dict]:
    """Each figure image of the page: natural and shown width, its smallest font (pt, from the PNG via
    ``memlab.report.book.size_figures``), dpi, the px that font shows at, and its scroll box and cue."""
    from memlab.report import plotting

    rows = page.evaluate(_FIGURES_JS)
    for r in rows:
        ok = r["pt"] == r["pt"] and r["dpi"] == r["dpi"]  # not NaN: the page says what the PNG holds
        r["text_px"] = plotting.displayed_text_px(r["pt"], r["dpi"], r["natural"], r["shown"]) if ok else None
    return rows


def figure_problems(page, path: str, width: int, unsized_ok: bool = False) -> list[str]:
    """Every figure's smallest text at least 9 px as shown; a figure wider than its box scrolls there
    with the cue showing (and no cue where nothing scrolls); at 1280 px no figure needs to scroll.
    ``unsized_ok``: a figure that does not carry its font size (saved before BookFigure) is passed over."""
    out = []
    for r in figure_measures(page):
        where = f"{path} @{width}: figure {r['src']}"
        if r["text_px"] is None and unsized_ok:
            continue
        if r["text_px"] is None:
            out.append(f"{where} does not carry its font size (a PNG saved before memlab.report.plotting.BookFigure; "
                       "republish the chapter)")
            continue
        if r["text_px"] < MIN_TEXT_PX - 0.05:
            out.append(f"{where}: its {r['pt']:g} pt text shows at {r['text_px']:.1f} px "
                       f"({r['shown']:.0f} of {r['natural']} px)")
        if r["scrolls"]:
            if r["box"]["overflow"] not in ("auto", "scroll"):
                out.append(f"{where} is wider than its box, which does not scroll")
            if not r["cue"]:
                out.append(f"{where} scrolls sideways without the cue")
            if width >= 1280:
                out.append(f"{where} needs to scroll at {width} px ({r['shown']:.0f} px in {r['box']['width']} px)")
        elif r["cue"]:
            out.append(f"{where} shows the scroll cue but does not scroll")
    return out


def _leak_pattern(book: Path, chapters: list[str]) -> re.Pattern:
    """What must never reach a reader's eye: reprs, quoted numbers, None, the chapters' snake_case claim keys."""
    keys = set()
    for chapter in chapters:
        res = book / "results" / f"{chapter}.json"
        if res.exists():
            keys |= {c["key"] for c in json.loads(res.read_text())["claims"] if "_" in c["key"]}
    alternatives = [r"\{'", r"\['", r"'\d+(?:\.\d+)?'", r"\bNone\b"]
    alternatives += [rf"\b{re.escape(k)}\b" for k in sorted(keys)]
    return re.compile("|".join(alternatives))


def _reader_text_problems(page, path: str, width: int, prose: str, leak: re.Pattern) -> list[str]:
    out = []
    for m in leak.finditer(prose):
        ctx = _norm(prose[max(0, m.start() - 50): m.end() + 50])
        out.append(f"{path} @{width}: shows {m.group(0)!r} to a reader ... {ctx} ...")
        break
    heads = page.evaluate("""Array.from(document.querySelectorAll('article th'))
                               .map(t => t.innerText.trim()).filter(t => /[a-z0-9]_[a-z]/i.test(t))""")
    if heads:
        out.append(f"{path} @{width}: table headers that are variable names: {sorted(set(heads))[:6]}")
    return out


STORY_SCREENS = 15  # issue 28: a chapter's story before its appendix-style sections, in 1280x900 screens


def _story_problems(page, path: str, width: int) -> list[str]:
    """The story's length: the first appendix section, or the claims (chapter 6: its hypotheses judged),
    within STORY_SCREENS at 1280 px."""
    if width != 1280:
        return []
    end = page.evaluate("""() => { const h = Array.from(document.querySelectorAll('article h2')).find(
                                     e => /^(Appendix|Claims|The hypotheses judged)/.test(e.innerText.trim()));
                                   return h ? {top: h.getBoundingClientRect().top + window.scrollY,
                                               text: h.innerText.trim()} : null; }""")
    if end is None:
        return [f"{path}: no 'Claims' section (chapter 6: 'The hypotheses judged')"]
    if end["top"] > STORY_SCREENS * 900:
        return [f"{path} @1280: the story runs {end['top'] / 900:.1f} screens before '{end['text'][:40]}' "
                f"(at most {STORY_SCREENS})"]
    return []


def _findings_problems(page, path: str, width: int, book: Path, chapter: str) -> list[str]:
    """The findings box: near the top, every headline claim with its published verdict."""
    from memlab.report import pagekit

    box = page.evaluate("""() => { const e = document.querySelector('.memlab-findings');
                                   return e ? {top: e.getBoundingClientRect().top + window.scrollY,
                                               text: e.innerText} : null; }""")
    if box is None:
        return [f"{path} @{width}: no findings box"]
    out = []
    if width == 1280 and box["top"] > 2 * 900:
        out.append(f"{path} @1280: the findings box starts at {box['top']:.0f} px, below the first two screens")
    res = json.loads((book / "results" / f"{chapter}.json").read_text())
    text = _norm(box["text"].replace("\u2019", "'").replace("\u2018", "'"))  # Sphinx's smart quotes
    if "pooled over" in text:  # the box states the pooled verdicts of the seed sweep of the page's own code
        from memlab.report import robustness

        pooled = robustness.current_pooled(book, chapter, res)
        assert pooled is not None, f"{path}: the box says pooled, but no seed sweep of the page's code is published"
        by_key = {r["key"]: r for r in pooled[0]}
        res = {**res, "claims": [by_key.get(c["key"], c) for c in res["claims"]]}
    by_key = {c["key"]: c for c in res["claims"]}
    for key in pagekit.headline_keys(chapter):
        c = by_key[key]
        line = _norm(f"{c['verdict'].capitalize()}. {c['claim']}")
        if line not in text:
            out.append(f"{path} @{width}: findings box lacks '{line[:70]}'")
    n = pagekit.counts(res["claims"])
    if _norm(pagekit.counts_sentence(n, pagekit.judged_what(chapter))) not in text:
        out.append(f"{path} @{width}: findings box counts differ from {chapter}.json's verdicts")
    return out


def _published_chapters() -> list[str]:
    from memlab.core.chapters import CHAPTERS

    return [c for c in CHAPTERS if (REPO / "book" / "chapters" / f"{c}.ipynb").exists()
            and (REPO / "book" / "results" / f"{c}.json").exists()]


@pytest.mark.slow
def test_committed_cpu_book_as_readers_see_it(tmp_path):
    """The published book in book/ (render only). Fails until the chapters are republished after a
    change to how figures or claims are shown; skipped only when book/chapters holds no chapter."""
    chapters = _published_chapters()
    if not chapters:
        pytest.skip("book/chapters holds no executed chapter")
    chromium_or_skip()
    from memlab.report import book

    root = tmp_path / "cpu-book"
    root.mkdir()
    for name in ("_config.yml", "_toc.yml"):
        shutil.copy(REPO / name, root / name)
    shutil.copytree(REPO / "book", root / "book", ignore=shutil.ignore_patterns(".staging-*"))
    book.render(root=root, out=root / "_build")
    problems = check_book_surfaces(root / "_build" / "html", root / "book", chapters,
                                   artifacts_dir("cpu-book"))
    assert not problems, "\n".join(problems)


def test_render_refuses_a_missing_root_in_one_line(capsys, tmp_path):
    from memlab import cli

    assert cli.main(["render", "--root", str(tmp_path / "nonexistent")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nonexistent" in err[0] and "_config.yml" in err[0], err


def test_repository_buttons_follow_the_setting(monkeypatch):
    from memlab.report import book
    from memlab.core.config import ConfigError

    monkeypatch.delenv(book.REPO_URL_ENV, raising=False)
    conf = {"repository": {"url": ""}, "html": {"use_repository_button": True}}
    assert book.repository_url(conf) == ""
    book._apply_repository(conf, "")
    assert conf["html"]["use_repository_button"] is False and conf["html"]["use_issues_button"] is False
    assert conf["launch_buttons"]["binderhub_url"] == "" and conf["launch_buttons"]["colab_url"] == ""
    monkeypatch.setenv(book.REPO_URL_ENV, "https://github.com/someone/memlab/")
    url = book.repository_url(conf)
    assert url == "https://github.com/someone/memlab"
    book._apply_repository(conf, url)
    assert conf["repository"]["url"] == url and conf["html"]["use_issues_button"] is True
    monkeypatch.setenv(book.REPO_URL_ENV, "github.com/x")
    with pytest.raises(ConfigError, match="MEMLAB_REPO_URL.*http"):
        book.repository_url(conf)


def test_published_figure_is_an_image_bundle(tmp_path, monkeypatch):
    """publish() glues the saved PNG (image/png), never the matplotlib object (text/plain only)."""
    monkeypatch.setenv("MEMLAB_OUTPUT_DIR", str(tmp_path))
    from memlab.report import plotting

    glued = {}
    monkeypatch.setattr("myst_nb.glue", lambda key, obj, display=True: glued.update({key: obj}))
    fig, ax = plotting.figure("single")
    ax.plot([0, 1], [0, 1])
    assert plotting.publish(fig, "line", "fake") is None
    img = glued["fake-line"]
    bundle = img._repr_mimebundle_()
    data = bundle[0] if isinstance(bundle, tuple) else bundle
    assert "image/png" in data and img.data[:8] == b"\x89PNG\r\n\x1a\n"
    folder = tmp_path / "figures" / "fake"
    assert (folder / "line.png").exists() and (folder / "line.svg").exists()
    assert plotting.published_figures("fake") == ["line"]


def test_claims_table_shows_full_text_verdict_first_and_reasons():
    from memlab.report import paper

    long = "a claim whose text is much longer than fifty characters, so pandas would cut it " * 2
    rows = [
        {"key": "k1", "claim": long, "source": "Table 1", "verdict": paper.REPRODUCED, "evidence": "x = 2"},
        {"key": "k2", "claim": "b < c", "source": "Fig. 2", "verdict": paper.NOT_REPRODUCED,
         "evidence": "b = 3", "reason": "the effect is absent at this scale."},
    ]
    table = paper.claims_table(rows)
    html = table._repr_html_()
    assert long.strip() in html and "k1" not in html and "b &lt; c" in html
    assert html.index("claim-verdict") < html.index("claim-text")
    assert "\u2713 reproduced" in html and "\u2717 not reproduced" in html
    assert "the effect is absent at this scale." in html
    assert list(table.frame.columns) == ["Verdict", "Claim", "Paper source", "Our numbers"]
    with pytest.raises(ValueError, match="verdict"):
        paper.claims_table([{**rows[0], "verdict": "maybe"}])


def test_every_reason_names_a_real_claim():
    from memlab.report import paper
    from memlab.core.chapters import CHAPTERS
    from memlab.core.config import chapter_module

    for chapter in CHAPTERS:
        reasons = paper.reasons(chapter)
        claims = chapter_module(chapter).claims()
        paper.evaluate(claims, {}, "smoke", reasons=reasons)  # raises on a key no claim has
        assert all(r.strip().endswith(".") for r in reasons.values()), chapter
    with pytest.raises(ValueError, match="unknown claim keys"):
        paper.evaluate([], {}, "cpu", reasons={"nope": "x."})


def test_dataframes_render_without_nan_or_default_index():
    import numpy as np
    import pandas as pd

    from memlab.report import tables

    html = tables.to_html(pd.DataFrame({"paper": [0.9, np.nan], "ours": [0.8, 0.7]}))
    assert "NaN" not in html and "\u2013" in html and tables.NOTE in html
    assert "<th>0</th>" not in html and "memlab-table-wrap" in html
    assert tables.NOTE not in tables.to_html(pd.DataFrame({"a": [1.0]}, index=["x"]))


def test_table_headers_read_as_words_not_variable_names():
    import pandas as pd

    from memlab.report import tables

    df = pd.DataFrame({"out_acc": [1.0], "Acc_f (%)": [2.0], "tau(x, y)": [0.1]},
                      index=pd.Index(["GA+FT"], name="method_name"))
    for html in (tables.to_html(df), tables.styler_to_html(df.style)):
        heads = re.findall(r"<th[^>]*>(.*?)</th>", html, re.DOTALL)
        assert not [h for h in heads if re.search(r"[a-z]_[a-z]", h)], heads
        assert "out acc" in html and "Acc<sub>f</sub> (%)" in html and "method name" in html
        assert "GA+FT" in html and "tau(x, y)" in html


def test_render_collapses_parameter_cells_of_executed_notebooks(tmp_path):
    import nbformat

    from memlab.report import book

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("profile = 'cpu'", metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("profile = 'smoke'", metadata={"tags": ["injected-parameters"]}),
                nbformat.v4.new_code_cell("x = 1")]
    path = tmp_path / "c.ipynb"
    nbformat.write(nb, path)
    assert book.hide_parameter_cells(path) is True
    tags = [c.metadata.get("tags", []) for c in nbformat.read(path, as_version=4).cells]
    assert tags == [["parameters", "hide-input"], ["injected-parameters", "remove-cell"], []]
    assert book.hide_parameter_cells(path) is False


def test_bibliography_labels_are_author_year_and_seed_papers_distinct():
    from pybtex.database import parse_file

    from memlab.report import bibstyle

    files = [REPO / "book" / "references.bib", *sorted((REPO / "book" / "bib").glob("*.bib"))]
    entries = {}
    for f in files:
        entries.update(parse_file(str(f)).entries)
    style = bibstyle.AuthorYearStyle()
    labels = dict(zip([e.key for e in style.sort(entries.values())],
                      style.format_labels(style.sort(entries.values()))))
    assert labels["he2016resnet"] == "He et al., 2016"
    assert labels["ioffe2015batchnorm"] == "Ioffe and Szegedy, 2015"
    seeds = ["bnillusion", "sde2026", "canaryaudit", "qskew", "morris2025memorize"]
    assert len({labels[k] for k in seeds}) == 5 and not any("Anonymous" in labels[k] for k in seeds)
    assert len(set(labels.values())) == len(labels), "labels must be unique"
    for key, e in entries.items():
        for v in e.fields.values():
            assert "shared/" not in v and not v.startswith("/"), f"{key} points at a local path: {v}"
    for key in ("sde2026", "canaryaudit", "morris2025memorize"):
        assert entries[key].fields.get("eprint"), f"{key}: arXiv id missing"
