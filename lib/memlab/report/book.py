"""Rendering the book: the scorecard, then Jupyter Book over the executed chapters.

``render`` never executes a notebook: it stages a copy of ``book/`` (the scorecard
written into the copy, the parameters cells collapsed, the repository and MathJax
settings applied, the sweep figures redrawn from their summaries), builds it with warnings
as errors, sizes its figures for the column (:func:`size_figures`), turns its tables of prose
into cards (:func:`wrap_prose_tables`), and replaces ``_build/html`` only after a clean build.
``memlab render`` calls it.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from memlab.core import publish
from memlab.core.chapters import CHAPTERS
from memlab.core.config import ConfigError, repo_root
from memlab.report import gpu_section, pagekit, paper, robustness


class BuildError(RuntimeError):
    """Jupyter Book did not build the book cleanly; its messages went to stderr."""


# The scorecard's column of each verdict (memlab.report.paper.VERDICTS, in that order).
SCORECARD_HEADS = {paper.REPRODUCED: "Reproduced", paper.NOT_REPRODUCED: "Not reproduced in regime",
                   paper.OUTSIDE_REGIME: "Outside the paper's regime",
                   paper.NOT_JUDGED: "Not judged within noise", paper.SEED_DEPENDENT: "Seed-dependent",
                   paper.NOT_RUN: "Not run at this profile"}


def _short_titles(chapter: str) -> dict[str, str]:
    """The chapter's claims' short titles; none for a chapter without a paper file (its full texts show)."""
    return paper.short_titles(chapter) if (paper.papers_dir() / f"{chapter}.yaml").exists() else {}


def _sane(verdicts) -> str:
    """Sanity checks passed, "k of n" ("–" without any)."""
    sanity = paper.tally(verdicts, paper.SANITY)
    n = sum(sanity.values())
    return f"{sanity[paper.REPRODUCED]} of {n}" if n else "–"


def _judged_keys(chapter: str, verdicts) -> set[tuple[str, str]]:
    """The paper claims of ``chapter`` judged inside their regime: reproduced, or not reproduced
    with the gate holding (or none declared). Book hypotheses test no paper and are left out."""
    if CHAPTERS[chapter].hypotheses:
        return set()
    return {(chapter, str(v.get("key") or v.get("claim"))) for v in verdicts
            if v.get("kind", paper.CLAIM) == paper.CLAIM and v.get("verdict") in (paper.REPRODUCED, paper.NOT_REPRODUCED)}


def _judged_sentence(cpu: int, gpu_only: int, total: int) -> str:
    """How many of the papers' claims the published pages judge inside the paper's regime, in words."""
    more = (f"; {gpu_only} more only at paper scale, in a GPU run" if gpu_only
            else "; no run at paper scale on a GPU has judged one more yet")
    return (f"**Judged inside the paper's regime:** {cpu} of the papers' {total} claims in the published pages "
            f"(reproduced, or not reproduced with the regime gate holding){more}.")


def write_scorecard(book: Path, dest: Path | None = None) -> Path:
    """``scorecard.md`` (what holds in words, then every claim), ``_scorecard_summary.md`` (counts) and
    ``_what_holds.md`` (the words: :func:`memlab.report.pagekit.what_holds_markdown`), both on the front page.

    Reads ``book/results``; writes into ``dest`` (default ``book``), so that :func:`render`
    can write into its staging copy and leave ``book/`` as it was when a build fails.
    """
    from memlab.core.results import load_results
    from memlab.report.paper import CLAIM, REPRODUCED, SANITY, SEED_DEPENDENT, claims_table, tally

    dest = Path(dest) if dest is not None else book
    published = {cid: load_results(cid, book) for cid in CHAPTERS}
    # The pooled verdicts of a current seed sweep where one is published, else seed 0's own.
    pooled_of = {cid: robustness.current_pooled(book, cid, res) if res is not None else None
                 for cid, res in published.items()}
    # Paper claims are counted by verdict; sanity checks (true by construction or arithmetic)
    # get their own column so that they never inflate the "reproduced" count. A pooled
    # "seed-dependent" verdict gets its column only when some chapter has one.
    seeded = any(c.get("verdict") == SEED_DEPENDENT for cid, res in published.items() if res
                 for c in (pooled_of[cid][0] if pooled_of[cid] else res.get("claims", [])))
    shown = [v for v in paper.VERDICTS if v != SEED_DEPENDENT or seeded]
    header = [
        "| Chapter | Profile | " + " | ".join(SCORECARD_HEADS[v] for v in shown) + " | Sanity checks passed |",
        "|---|---|" + "---|" * (len(shown) + 1),
    ]
    # A chapter of the book's own pre-registered hypotheses (chapters.Chapter.hypotheses) tests
    # no paper, so its verdicts are tallied in a table of their own.
    summary, hypotheses = list(header), []
    details, holds = [], []
    judged_cpu: set[tuple[str, str]] = set()  # (chapter, claim key) judged inside its regime
    judged_gpu: set[tuple[str, str]] = set()
    n_claims = 0
    for number, (cid, ch) in enumerate(CHAPTERS.items(), 1):
        rows = hypotheses if ch.hypotheses else summary
        res = published[cid]
        if res is None:
            rows.append(f"| {ch.title} | not run yet | " + " | ".join("–" for _ in shown) + " | – |")
            holds.append(f"**{number}. {ch.title}**: not run yet.")
            continue
        pooled = pooled_of[cid]
        verdicts = pooled[0] if pooled else res.get("claims", [])
        basis = f"verdicts pooled over {pooled[1]} seeds" if pooled else "single-seed verdicts"
        holds.append(pagekit.what_holds_markdown(
            f"{number}. {ch.title}" + (" (book hypotheses)" if ch.hypotheses else ""), f"chapters/{cid}.ipynb",
            verdicts, _short_titles(cid), f"profile {res['profile']}, {basis}", hypotheses=ch.hypotheses))
        counts = tally(verdicts, CLAIM)
        sane = _sane(verdicts)
        rows.append(f"| {ch.title} | `{res['profile']}` | " + " | ".join(str(counts[v]) for v in shown)
                    + f" | {sane} |")
        gpu = gpu_section.finished_result(cid, book / "gpu")
        gpu_verdicts = gpu.get("claims", []) if gpu else []
        if gpu is not None:
            # One paper-scale run (scripts/gpu-evidence.sh), counted in a row of its own: it is
            # single-seed and at other sizes, so it never replaces the cpu verdicts above.
            device = str((gpu.get("provenance") or {}).get("device") or "a GPU")
            gpu_basis = f"one run of the `{gpu.get('profile', 'paper')}` profile on {device}, single-seed verdicts"
            rows.append(f"| {ch.title}, at paper scale on a GPU | `{gpu.get('profile', 'paper')}` | "
                        + " | ".join(str(tally(gpu_verdicts, CLAIM)[v]) for v in shown) + f" | {_sane(gpu_verdicts)} |")
            holds.append(pagekit.what_holds_markdown(
                f"{number}. {ch.title}, at paper scale", f"chapters/{cid}.ipynb", gpu_verdicts, _short_titles(cid),
                gpu_basis.replace("`", ""), hypotheses=ch.hypotheses))
        judged_cpu |= _judged_keys(cid, verdicts)
        judged_gpu |= _judged_keys(cid, gpu_verdicts)
        if not ch.hypotheses:
            n_claims += sum(1 for v in verdicts if v.get("kind", CLAIM) == CLAIM)
        kind = ("its pre-registered book hypotheses (no paper; `data/papers/" + cid + ".yaml`, judged like "
                "claims: *reproduced* means the hypothesis held)") if ch.hypotheses else ""
        details += ["", f"## {ch.title}" + (" (book hypotheses)" if ch.hypotheses else ""), "",
                    f"Profile `{res['profile']}`, {basis}; details in [the chapter](chapters/{cid}.ipynb)"
                    + (f"; {kind}" if kind else "") + ".", ""]
        if verdicts:
            # The same HTML table as in the chapter (verdict first, full text, stacked on a phone),
            # plus how often each claim held across seeds where a sweep is published.
            # A sweep of earlier chapter code is not evidence about today's verdicts.
            sweep = robustness.load(book, cid)
            across = robustness.claim_counts(sweep) if robustness.is_current(sweep, res) else {}
            details += [claims_table(verdicts, across or None)._repr_html_(), ""]
        if gpu_verdicts:
            details += [f"### {ch.title}, at paper scale (GPU)", "",
                        f"{gpu_basis[0].upper() + gpu_basis[1:]} (`bash scripts/gpu-evidence.sh`); the sizes that ran are "
                        f"in [the chapter](chapters/{cid}.ipynb)'s last section.", "",
                        claims_table(gpu_verdicts)._repr_html_(), ""]
    summary += ["", _judged_sentence(len(judged_cpu), len(judged_gpu - judged_cpu), n_claims)]
    if hypotheses:
        summary += ["", "**Book hypotheses** (pre-registered by this book, not claims of a paper):", "",
                    *header, *hypotheses]
    what_holds = "\n\n".join(holds)
    intro = [
        "# Scorecard",
        "",
        "## What holds, paper by paper",
        "",
        what_holds,
        "",
        "## Every claim",
        "",
        "Every claim the chapters test, with its verdict at the profile that produced the published page. "
        "Verdicts come from each chapter's `book/results/<chapter>.json`; a claim marked "
        "*not run at this profile* needs a larger profile (usually `paper`, on a GPU); a claim marked "
        "*not judged* could not be decided by this run (its margin lies inside the measurement's noise "
        "band, shown in its evidence, or a precondition failed). A claim *outside the paper's regime* "
        "was made by its paper about models unlike ours: its regime gate (the paper's setting as a "
        "measurable precondition, shown in its row) fails on our run, with the gap given; *not "
        "reproduced in regime* counts only claims whose gate holds or that have none. A "
        "*seed-dependent* claim (a pooled verdict) held on some seeds and failed on others outside "
        "their noise bands. A *sanity check* holds by construction "
        "or arithmetic: it tests our code, not the paper, and is counted apart. "
        "A *not reproduced* claim says why, from what its chapter measured. Where a seed sweep is "
        "published, *Across seeds* says how often the claim held ([Robustness](robustness.md)). "
        "Where a seed sweep of the chapter's current code is published, the verdicts and counts are pooled "
        "over its seeds (the mean margin judged against a band that includes the spread between seeds; "
        "*seed-dependent* where seeds disagree outside their bands); elsewhere they are single-seed.",
        "",
    ]
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "_scorecard_summary.md").write_text("\n".join(summary) + "\n")
    (dest / "_what_holds.md").write_text(what_holds + "\n")
    path = dest / "scorecard.md"
    path.write_text("\n".join(intro + summary + details) + "\n")
    return path


def write_cost_page(book: Path, dest: Path | None = None) -> Path:
    """``cost.md`` (per chapter, the last cold and warm run) and ``_cost_summary.md`` (front page), from ``costs.json``."""
    from memlab.core import costs

    dest = dest or book
    runs = costs.read_log(book)
    titles = {cid: c.title for cid, c in CHAPTERS.items()}
    (dest / "_cost_summary.md").write_text(costs.summary_markdown(runs, titles) + "\n")
    path = dest / "cost.md"
    path.write_text(costs.page_markdown(runs, titles))
    return path


def _filtered_toc(toc: dict, root: Path) -> tuple[dict, list[str]]:
    """The table of contents without chapters that have not been executed."""
    skipped = []
    for part in toc.get("parts", []):
        kept = []
        for entry in part.get("chapters", []):
            f = entry.get("file", "")
            if any((root / f"{f}{ext}").exists() for ext in (".md", ".ipynb", ".rst", "")):
                kept.append(entry)
            else:
                skipped.append(f)
        part["chapters"] = kept
    toc["parts"] = [p for p in toc.get("parts", []) if p["chapters"]]
    return toc, skipped


def dedupe_inline_scripts(page: Path) -> bool:
    """Drop repeated identical one-line inline ``<script>`` tags from an HTML page.

    sphinx-thebe and sphinx-togglebutton register their inline configuration
    once per read pass, and a build with bibliography re-reads emits them twice;
    the second ``const THEBE_JS_URL`` is a SyntaxError in the browser.
    Returns whether the page changed.
    """
    lines = page.read_text(encoding="utf-8").split("\n")
    seen, kept = set(), []
    for line in lines:
        s = line.strip()
        if s.startswith("<script>") and s.endswith("</script>"):
            if s in seen:
                continue
            seen.add(s)
        kept.append(line)
    if len(kept) == len(lines):
        return False
    page.write_text("\n".join(kept), encoding="utf-8")
    return True


def redraw_sweep_figures(book: Path) -> list[Path]:
    """Redraw each published sweep figure (``robustness/<name>.png``) from its summary beside it.

    The figure is a pure function of the published ``<name>.json`` (:func:`memlab.report.sweep_summary.summary_figure`),
    so a staged copy of the book shows it in the current figure style (sized for the column, its text
    size recorded for :func:`size_figures`) without re-running the sweep. Returns the redrawn files.
    """
    import json

    from memlab.report import sweep_summary

    redrawn = []
    for png in sorted((Path(book) / "robustness").glob("*.png")):
        try:
            summary = json.loads(png.with_suffix(".json").read_text())
        except (OSError, ValueError):
            continue  # no readable summary: the published figure is shown as it is
        sweep_summary.summary_figure(summary, png)
        redrawn.append(png)
    return redrawn


_IMG = re.compile(r"<img\b[^>]*>")
_ATTR = re.compile(r'\s([a-zA-Z-]+)="([^"]*)"')
FIGURE_CUE = "\u27f7 Scroll sideways to see the whole figure"


def size_figures(page: Path) -> bool:
    """Give every figure of an HTML page the width its text needs (``memlab.report.plotting``).

    Each ``<img>`` of a PNG that :class:`memlab.report.plotting.BookFigure` saved (it carries the size of
    its smallest text) is shown at its physical size, no wider than the column, and never narrower
    than the width at which that text is :data:`memlab.report.plotting.MIN_DISPLAY_PX` px: on a phone a
    wide figure keeps that width inside a box that scrolls sideways, with a cue under it that
    shows only while the figure is wider than the box (``book/_static/memlab.css``). The image
    gets ``data-memlab-font-pt`` and ``data-memlab-dpi`` (checked by tests/test_book_surfaces.py).
    Other images are left alone. Returns whether the page changed.
    """
    from html import escape

    from memlab.report import plotting

    text = page.read_text(encoding="utf-8")

    def sized(m: re.Match) -> str:
        tag = m.group(0)
        attrs = dict(_ATTR.findall(tag))
        src = attrs.get("src", "")
        if "data-memlab-font-pt" in attrs or not src.lower().endswith(".png") or "://" in src:
            return tag
        png = (page.parent / src).resolve()
        try:
            info = plotting.png_text_info(png)
        except (OSError, ValueError):
            return tag
        if "font_pt" not in info or not info.get("width"):
            return tag  # not saved by BookFigure (e.g. a page published before it existed)
        dpi = info.get("dpi", plotting.DPI)
        width = plotting.true_width_css(info["width"], dpi)
        least = plotting.legible_width_css(info["width"], dpi, info["font_pt"])
        attrs.pop("style", None)  # e.g. Sphinx's "width: 100%": the figure's own width is set below
        attrs["class"] = " ".join(filter(None, [attrs.get("class", ""), "memlab-fig-img"]))
        attrs["data-memlab-font-pt"] = f"{info['font_pt']:g}"
        attrs["data-memlab-dpi"] = f"{dpi:g}"
        img = "<img " + " ".join(f'{k}="{v}"' for k, v in attrs.items()) + " />"
        return (f'<span class="memlab-fig" style="--memlab-fig-w: {width:.0f}px; --memlab-fig-min: {least}px">'
                f'<span class="memlab-fig-scroll">{img}</span>'
                f'<span class="memlab-fig-cue" aria-hidden="true"><span>{escape(FIGURE_CUE)}</span></span></span>')

    new = _IMG.sub(sized, text)
    if new == text:
        return False
    page.write_text(new, encoding="utf-8")
    return True


_DATAFRAME_TABLE = re.compile(r'<table class="dataframe memlab-table">.*?</table>', re.DOTALL)
PROSE_CELL_CHARS = 60  # a DataFrame with a cell this long is prose: wrapped, and cards on a phone


def wrap_prose_tables(page: Path) -> bool:
    """Show the DataFrame tables of prose on an HTML page as cards, one per row, text wrapped.

    ``memlab.report.tables.to_html`` keeps every cell on one line (``white-space: nowrap``), right for
    numbers; a table with a cell of :data:`PROSE_CELL_CHARS` characters or more (a chapter's regime
    gates, say) would be thousands of px wide. Such a table gets the class ``memlab-prose``
    (``book/_static/memlab.css``: one card per row at every width, its row label on top, each
    cell under its column's name) and each body cell a ``data-label``, its column's header.
    Returns whether the page changed.
    """
    from bs4 import BeautifulSoup

    text = page.read_text(encoding="utf-8")

    def prose(m: re.Match) -> str:
        table = BeautifulSoup(m.group(0), "html.parser").table
        longest = max((len(c.get_text(" ", strip=True)) for c in table.find_all(["td", "th"])), default=0)
        if longest < PROSE_CELL_CHARS:
            return m.group(0)
        table["class"] = table.get("class", []) + ["memlab-prose"]
        head = table.thead.find("tr") if table.thead else None
        labels = [c.get_text(" ", strip=True) for c in head.find_all("th")] if head else []
        for row in (table.tbody or table).find_all("tr", recursive=False):
            cells = row.find_all(["th", "td"], recursive=False)
            if len(cells) == len(labels):
                for label, cell in zip(labels, cells):
                    if cell.name == "td" and label:
                        cell["data-label"] = label
        return str(table)

    new = _DATAFRAME_TABLE.sub(prose, text)
    if new == text:
        return False
    page.write_text(new, encoding="utf-8")
    return True


REPO_URL_ENV = "MEMLAB_REPO_URL"
MATHJAX_DIR = Path(".cache") / "mathjax" / "node_modules" / "mathjax" / "es5"
# What the book needs of the mathjax npm package (about 3 MB of its 24): the combined TeX ->
# CommonHTML component, its fonts, the TeX extensions it autoloads and the menu/a11y parts.
MATHJAX_PARTS = ("tex-chtml.js", "output/chtml/fonts/woff-v2", "input/tex/extensions", "ui", "a11y")


def repository_url(conf: dict) -> str:
    """The book's repository address: ``$MEMLAB_REPO_URL``, else ``repository.url`` in _config.yml, else ''.

    Empty means no repository: :func:`render` then shows no repository, issues or launch buttons.
    """
    url = os.environ.get(REPO_URL_ENV)
    source = REPO_URL_ENV
    if url is None:
        url, source = str((conf.get("repository") or {}).get("url") or ""), "repository.url in _config.yml"
    url = url.strip().rstrip("/")
    if url and not url.startswith(("https://", "http://")):
        raise ConfigError(f"{source}: must be an http(s) address such as "
                          f"https://github.com/you/memlab (got {url!r})")
    return url


def _apply_repository(conf: dict, url: str) -> None:
    """Repository and issues buttons from ``url``; none when it is empty.

    Launch buttons (Binder, Colab) are never offered: a launched chapter would start from the
    executed ``cpu`` notebook in a runtime without memlab or its data, and fail in its first cells.
    """
    html = conf.setdefault("html", {})
    conf["launch_buttons"] = {"notebook_interface": "classic", "binderhub_url": "", "colab_url": "",
                              "jupyterhub_url": "", "thebe": False}
    repo = conf.setdefault("repository", {})
    if url:
        repo["url"] = url
        html["use_repository_button"] = html["use_issues_button"] = True
    else:
        repo["url"] = ""
        html["use_repository_button"] = html["use_issues_button"] = html["use_edit_page_button"] = False


def find_mathjax(root: Path) -> Path | None:
    """The local MathJax (``scripts/setup.sh`` installs it under ``.cache/mathjax``), or None."""
    for base in dict.fromkeys((root, repo_root())):
        es5 = base / MATHJAX_DIR
        if (es5 / "tex-chtml.js").is_file():
            return es5
    return None


def _apply_mathjax(conf: dict, stage: Path, es5: Path | None) -> None:
    """Serve MathJax from the build when a local copy exists (readers offline see typeset math)."""
    if es5 is None:
        return  # Sphinx's default: MathJax from its CDN
    dest = stage / "book" / "_static" / "mathjax"
    for part in MATHJAX_PARTS:
        src = es5 / part
        if src.is_dir():
            shutil.copytree(src, dest / part, dirs_exist_ok=True)
        elif src.is_file():
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dest / part)
    conf.setdefault("sphinx", {}).setdefault("config", {})["mathjax_path"] = "mathjax/tex-chtml.js"


def hide_parameter_cells(notebook: Path) -> bool:
    """Collapse the parameters cell and drop papermill's injected one in an executed notebook.

    Both are plumbing (the provenance box shows the values a page ran with). Applied by
    :func:`render` to its staging copy, so it covers chapters executed before this existed.
    Returns whether the notebook changed.
    """
    import json

    nb = json.loads(notebook.read_text(encoding="utf-8"))
    changed = False
    for cell in nb.get("cells", []):
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        extra = (("remove-cell",) if "injected-parameters" in tags
                 else ("hide-input",) if "parameters" in tags else ())
        for t in extra:
            if t not in tags:
                tags.append(t)
                changed = True
    if changed:
        _write_notebook(notebook, nb)
    return changed


KEEP_INPUT_TAGS = ("hide-input", "remove-input", "remove-cell", "show-input")


def collapse_code_cells(notebook: Path) -> bool:
    """Collapse every code cell's source behind a "Show code" toggle (``hide-input``) in an executed notebook.

    The reader meets the story, tables and figures first; the code is one click away. A cell
    tagged ``show-input`` stays open, and removed cells stay removed. Applied by :func:`render`
    to its staging copy. Returns whether the notebook changed.
    """
    import json

    nb = json.loads(notebook.read_text(encoding="utf-8"))
    changed = False
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        if not any(t in tags for t in KEEP_INPUT_TAGS):
            tags.append("hide-input")
            changed = True
    if changed:
        _write_notebook(notebook, nb)
    return changed


def _write_notebook(notebook: Path, nb: dict) -> None:
    """Write a notebook's JSON as the book's staged pages are written (indented, UTF-8)."""
    import json

    notebook.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def append_markdown(notebook: Path, texts: list[str]) -> bool:
    """Append one markdown cell per text to a (staged) executed notebook; whether any was added."""
    import json

    if not texts:
        return False
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    nb["cells"] += [{"cell_type": "markdown", "metadata": {}, "source": t.splitlines(keepends=True)} for t in texts]
    _write_notebook(notebook, nb)
    return True


def add_gpu_section(notebook: Path, gpu_dir: Path) -> bool:
    """Append the chapter's "At paper scale (GPU)" section (:mod:`memlab.report.gpu_section`) to a staged page."""
    text = gpu_section.section_markdown(notebook.stem, gpu_dir)
    return append_markdown(notebook, [text] if text else [])


def add_cost_section(notebook: Path, book: Path) -> bool:
    """Append "What a run of this chapter costs" (:func:`memlab.core.costs.chapter_markdown`) to a staged page.

    The profile is the published page's (``<book>/results/<chapter>.json``); a page without
    results gets no section.
    """
    import json

    from memlab.core import costs

    try:
        profile = json.loads((book / "results" / f"{notebook.stem}.json").read_text())["profile"]
    except (OSError, ValueError, KeyError):
        return False
    return append_markdown(notebook, [costs.chapter_markdown(costs.read_log(book), notebook.stem, profile)])


def add_chapter_sections(notebook: Path, book: Path) -> bool:
    """Append the sections a chapter renders from published side runs (its ``render_sections(book)``)."""
    from memlab.core import config

    if notebook.stem not in CHAPTERS:
        return False
    fn = getattr(config.chapter_module(notebook.stem), "render_sections", None)
    return append_markdown(notebook, fn(book) if fn else [])


def render(root: Path | None = None, out: Path | None = None) -> Path:
    """Build the HTML book from the executed chapters (never re-executes); returns index.html.

    Everything is written into a staging copy first: ``book/`` itself is not touched, and
    ``out/html`` is replaced only after a clean build. The repository address comes from
    :func:`repository_url`; MathJax is served locally when :func:`find_mathjax` finds it.
    """
    root = Path(root).expanduser() if root else repo_root()
    for need in ("_config.yml", "_toc.yml", "book"):
        if not (root / need).exists():
            raise ConfigError(f"parameter 'root': {str(root)!r} has no {need} (expected a project folder "
                              "holding _config.yml, _toc.yml and book/)")
    out = Path(out) if out else root / "_build"
    publish.finish_pending(root / "book")  # a publish killed after its commit: its page, whole
    conf = yaml.safe_load((root / "_config.yml").read_text()) or {}
    url = repository_url(conf)
    with tempfile.TemporaryDirectory(prefix="memlab-book-") as tmp:
        stage = Path(tmp)
        extra_bib = sorted(f"book/bib/{p.name}" for p in (root / "book" / "bib").glob("*.bib"))
        conf["bibtex_bibfiles"] = list(dict.fromkeys(conf.get("bibtex_bibfiles", []) + extra_bib))
        shutil.copytree(root / "book", stage / "book", ignore=shutil.ignore_patterns(".staging-*", ".publish-*"))
        write_scorecard(root / "book", dest=stage / "book")
        write_cost_page(root / "book", dest=stage / "book")
        robustness.write_page(root / "book", dest=stage / "book")
        redraw_sweep_figures(stage / "book")
        for nb in (stage / "book" / "chapters").glob("*.ipynb"):
            hide_parameter_cells(nb)
            collapse_code_cells(nb)
            add_gpu_section(nb, root / "book" / "gpu")
            add_chapter_sections(nb, root / "book")
            add_cost_section(nb, root / "book")
        conf["exclude_patterns"] = list(conf.get("exclude_patterns", [])) + ["book/gpu/**", "book/real/**"]
        _apply_repository(conf, url)
        _apply_mathjax(conf, stage, find_mathjax(root))
        (stage / "_config.yml").write_text(yaml.safe_dump(conf, sort_keys=False))
        toc, skipped = _filtered_toc(yaml.safe_load((root / "_toc.yml").read_text()), stage)
        for f in skipped:
            print(f"render: {f} has not been run; left out of this build")
        (stage / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False))
        cmd = ["jupyter-book", "build", str(stage), "--path-output", str(stage), "-W", "-n", "--keep-going"]
        exe = Path(sys.executable).parent / "jupyter-book"
        if exe.exists():
            cmd[0] = str(exe)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-6000:] + proc.stderr[-6000:])
            raise BuildError("the book did not build cleanly (warnings are errors); see the messages above")
        for page in (stage / "_build" / "html").rglob("*.html"):
            dedupe_inline_scripts(page)
            size_figures(page)
            wrap_prose_tables(page)
        html = out / "html"
        if html.exists():
            shutil.rmtree(html)
        out.mkdir(parents=True, exist_ok=True)
        shutil.copytree(stage / "_build" / "html", html)
        for name in ("scorecard.md", "_scorecard_summary.md", "_what_holds.md", "robustness.md", "cost.md", "_cost_summary.md"):  # the built scorecard, also for repo readers
            shutil.copy(stage / "book" / name, root / "book" / name)
    index = html / "index.html"
    print(f"book: {index}" + ("" if url else f" (no repository buttons: set {REPO_URL_ENV} to show them)"))
    return index
