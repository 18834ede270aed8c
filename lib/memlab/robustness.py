"""How often each published verdict holds across seeds: sweep summaries kept in the book.

``memlab sweep --summary DIR --publish`` copies a sweep's ``summary.json`` to
``book/robustness/<chapter>.json``. From those files :func:`write_page` builds the
book's *Robustness* page, and :func:`claim_counts` gives the scorecard its
"across seeds" column. A chapter without a published summary says so and names
the command that would make one.
"""
from __future__ import annotations

import json
import shutil
from html import escape
from pathlib import Path

from memlab.chapters import CHAPTERS
from memlab.config import ConfigError

SEED_SWEEP = "memlab sweep {chapter} --profile cpu -p seed 0..2"


def summary_path(book: Path, chapter: str) -> Path:
    return Path(book) / "robustness" / f"{chapter}.json"


def publish(sweep_dir: Path, book: Path) -> Path:
    """Copy ``<sweep_dir>/summary.json`` into ``<book>/robustness/<chapter>.json``; returns the copy."""
    src = Path(sweep_dir) / "summary.json"
    try:
        chapter = json.loads(src.read_text())["chapter"]
    except (OSError, ValueError, KeyError):
        raise ConfigError(f"parameter 'summary': {str(src)!r} is not a sweep summary") from None
    if chapter not in CHAPTERS:
        raise ConfigError(f"parameter 'summary': chapter {chapter!r} of {str(src)!r} is not a chapter of the book")
    dest = summary_path(book, chapter)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    return dest


def load(book: Path, chapter: str) -> dict | None:
    """The published summary of ``chapter``, or None."""
    path = summary_path(book, chapter)
    return json.loads(path.read_text()) if path.exists() else None


def _seed_group(summary: dict) -> dict | None:
    """The group whose only varied parameters are seeds (the published settings), else the first."""
    groups = summary.get("groups", [])
    plain = [g for g in groups if not g.get("params")]
    return (plain or groups or [None])[0]


def code_versions(summary: dict) -> set:
    """The chapter-code fingerprints (:func:`memlab.results.chapter_code`) of a summary's runs."""
    return {p.get("chapter_code") for p in summary.get("provenance", {}).values()}


def is_current(summary: dict | None, published: dict | None) -> bool:
    """Whether a sweep ran the same chapter code as the published page.

    Compares the runs' ``chapter_code`` with the published results' (both absent counts as the
    same: results written before fingerprints existed came from one code state).
    """
    if summary is None:
        return False
    mine = (published or {}).get("provenance", {}).get("chapter_code")
    return code_versions(summary) == {mine}


def claim_counts(summary: dict | None) -> dict[str, str]:
    """``{claim key: "reproduced in k of n runs"}`` for the seed group of a summary ({} for None)."""
    group = _seed_group(summary) if summary else None
    return {key: c["text"] for key, c in (group or {}).get("claims", {}).items()}


def seeds_of(summary: dict) -> list:
    """The seeds the summary's runs used, in order."""
    return sorted({p["params"].get("seed") for p in summary.get("provenance", {}).values()
                   if p["params"].get("seed") is not None})


def _chapter_section(cid: str, published: dict | None, summary: dict | None) -> list[str]:
    title = CHAPTERS[cid].title
    if summary is None:
        return [f"## {title}", "", "No seed sweep is published for this chapter yet. Run it with "
                f"`{SEED_SWEEP.format(chapter=cid)}`, then `memlab sweep --summary DIR --publish`.", ""]
    prov = summary.get("provenance", {}).values()
    commits = sorted({(p.get("git_commit") or "unknown")[:8] for p in prov})
    stale = [] if is_current(summary, published) else [
        "**Earlier code.** These runs used an earlier version of this chapter's code than the published "
        f"page (commit {(published or {}).get('provenance', {}).get('git_commit', 'unknown')[:8]}): "
        "its claims or recipes have changed since, so the counts below are a record of that version, "
        "not of the published verdicts, and the scorecard leaves them out. Re-run with "
        f"`{SEED_SWEEP.format(chapter=cid)}`, then `memlab sweep --summary DIR --publish`.", ""]
    minutes = sum(p.get("wall_time_s") or 0 for p in prov) / 60
    verdicts = {c["key"]: c["verdict"] for c in (published or {}).get("claims", [])}
    rows = []
    for key, c in (_seed_group(summary) or {}).get("claims", {}).items():
        k, n = c.get("reproduced", 0), c.get("n", 0)
        share = "all" if n and k == n else "none" if k == 0 else "some"
        rows.append(
            f'<tr class="robust-{share}"><td data-label="Claim">{escape(c.get("claim", key))}</td>'
            f'<td data-label="Published verdict">{escape(verdicts.get(key, "–"))}</td>'
            f'<td data-label="Across seeds">{escape(c["text"])}</td></tr>')
    table = ('<table class="memlab-claims memlab-robustness"><thead><tr><th>Claim</th><th>Published verdict</th>'
             "<th>Across seeds</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>")
    return [f"## {title}", "",
            f"Profile `{summary.get('profile')}`, seeds {', '.join(map(str, seeds_of(summary)))} "
            f"({len(summary.get('runs_done', []))} runs, {minutes:.0f} min of runs in all; commit "
            f"{', '.join(f'`{c}`' for c in commits)}). Failed runs: {len(summary.get('runs_failed', []))}.",
            "", *stale, table, ""]


def write_page(book: Path, dest: Path | None = None) -> Path:
    """``robustness.md``: every chapter's claims with how many seeds reproduce them."""
    from memlab.results import load_results

    book = Path(book)
    dest = Path(dest) if dest is not None else book
    lines = [
        "# Robustness across seeds", "",
        "A verdict from one seed can be luck. Each chapter below was re-run with other seeds at the `cpu` "
        "profile through `memlab sweep` (one Dask task per run); the table says, for every claim, in how "
        "many of the runs it was reproduced. *n* counts the runs that judged the claim; runs where it was "
        "not run at this profile are listed beside it. The published pages are the seed-0 runs. "
        "The numbers behind each line are in `book/robustness/<chapter>.json` (means and 95% intervals of "
        "every metric, and each run's provenance).", "",
    ]
    for cid in CHAPTERS:
        lines += _chapter_section(cid, load_results(cid, book), load(book, cid))
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "robustness.md"
    path.write_text("\n".join(lines) + "\n")
    return path
