"""How often each published verdict holds across seeds: sweep summaries kept in the book.

``memlab sweep --summary DIR --publish`` copies a sweep's ``summary.json`` to
``book/robustness/<chapter>.json`` (a seed sweep) or ``<chapter>--<axes>.json`` (a sweep
over other parameters too, e.g. chapter 1's forget classes). From those files
:func:`write_page` builds the book's *Robustness* page, and :func:`claim_counts`
gives the scorecard its "across seeds" column; :func:`pooled_verdicts` and :func:`current_pooled`
give the verdicts pooled over the seeds (:mod:`memlab.report.pooling`), which the scorecard and the
chapters' findings read where the sweep ran the current code. A chapter without a published
summary says so and names the command that would make one. ``--page RUN`` also
publishes one run of the sweep (the default settings) as the chapter's page, so
page and sweep come from the same execution (:func:`publish_page`).
"""
from __future__ import annotations

import json
import shutil
from html import escape
from pathlib import Path

from memlab.core.chapters import CHAPTERS
from memlab.core.config import ConfigError
from memlab.report.sweep_summary import is_seed, timing

SEED_SWEEP = "memlab sweep {chapter} --profile cpu -p seed 0..2"
# the verdict-stability record (memlab.report.stability), relative to the repository root
STABILITY_RECORD = Path("benchmarks") / "results" / "verdict_stability.json"


def other_axes(summary: dict) -> list[str]:
    """The swept parameters of a summary that are not seeds, sorted (``[]`` for a seed sweep)."""
    return sorted(a for a in summary.get("axes", {}) if not is_seed(a))


def summary_path(book: Path, chapter: str, axes: list[str] = ()) -> Path:
    """``robustness/<chapter>.json`` for a seed sweep, ``<chapter>--<axis+axis>.json`` otherwise."""
    name = chapter + (f"--{'+'.join(axes)}" if axes else "")
    return Path(book) / "robustness" / f"{name}.json"


def _read_summary(sweep_dir: Path) -> dict:
    src = Path(sweep_dir) / "summary.json"
    try:
        summary = json.loads(src.read_text())
        chapter = summary["chapter"]
    except (OSError, ValueError, KeyError):
        raise ConfigError(f"parameter 'summary': {str(src)!r} is not a sweep summary") from None
    if chapter not in CHAPTERS:
        raise ConfigError(f"parameter 'summary': chapter {chapter!r} of {str(src)!r} is not a chapter of the book")
    return summary


def publish(sweep_dir: Path, book: Path) -> Path:
    """Copy ``<sweep_dir>/summary.json`` (and its figure) into ``<book>/robustness/``; returns the copy."""
    summary = _read_summary(sweep_dir)
    dest = summary_path(book, summary["chapter"], other_axes(summary))
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(sweep_dir) / "summary.json", dest)
    figure = Path(sweep_dir) / "summary.png"
    if figure.exists():  # the verdict shares, shown on the page beside the table
        shutil.copyfile(figure, dest.with_suffix(".png"))
    else:
        dest.with_suffix(".png").unlink(missing_ok=True)
    return dest


def publish_page(sweep_dir: Path, run: str, book: Path) -> Path:
    """Publish run ``run`` of a sweep as its chapter's page in ``book``; returns the notebook's path.

    The run folder holds what ``memlab run`` would have written (the same papermill execution):
    its notebook, results JSON and figures are copied in. Refused, before anything is written,
    unless the run is complete, its parameters resolve to the chapter's defaults at its profile
    (the page shows the defaults), and it ran the chapter's current code. The run's own cost
    (its provenance) is appended to the book's cost log, as ``memlab run`` does, so the cost page
    shows the run that made the page.
    """
    from memlab.core import config, costs
    from memlab.core import publish as publishing
    from memlab.core.fsutil import make_tmp_dir
    from memlab.core.results import chapter_code, same_code

    summary = _read_summary(sweep_dir)
    chapter, profile = summary["chapter"], summary["profile"]
    folder = Path(sweep_dir) / run
    try:
        params = json.loads((folder / "run.json").read_text())["params"]
        res = json.loads((folder / "results" / f"{chapter}.json").read_text())
    except (OSError, ValueError, KeyError):
        raise ConfigError(f"parameter 'page': {run!r} is not a complete run of {str(sweep_dir)!r} "
                          f"(runs: {', '.join(summary.get('runs_done', [])) or 'none'})") from None
    defaults = dict(config.resolve(chapter, profile=profile))
    if dict(config.resolve(chapter, profile=profile, **params)) != defaults:
        raise ConfigError(f"parameter 'page': run {run!r} has parameters {params} that are not the "
                          f"{profile} defaults of {chapter}; the page shows the defaults (choose the run "
                          "with the default values, e.g. seed-0)")
    code, now = res.get("provenance", {}).get("chapter_code"), chapter_code(chapter)
    if not same_code(chapter, code, now):
        raise ConfigError(f"parameter 'page': run {run!r} ran chapter code {code}, not the current {now}; "
                          "re-run the sweep first")
    book = Path(book)
    book.mkdir(parents=True, exist_ok=True)
    staging = make_tmp_dir(book, f"staging-{chapter}")  # clean_stale_staging knows the name
    try:
        for sub in ("chapters", "results", "figures"):
            if (folder / sub).exists():
                shutil.copytree(folder / sub, staging / sub)
        publishing.publish(staging, book, chapter)  # the same move into book/ that memlab run ends with
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    # the kernel's wall time: a sweep run has no runner-side clock of its own
    costs.record(book, res, res.get("provenance", {}).get("wall_time_s") or 0.0, code=costs.code_version(chapter),
                 alongside=runs_alongside(sweep_dir, res.get("provenance", {}).get("date")))
    return book / "chapters" / f"{chapter}.ipynb"


def runs_alongside(sweep_dir: Path, date: str | None) -> int:
    """How many other runs of the sweep shared the cores with the run that ended at ``date`` (ISO): its
    invocation's workers (``timing.json``) less one, at most its runs less one; 0 where none is found."""
    from datetime import datetime, timedelta

    if not date:
        return 0
    end = datetime.fromisoformat(date.replace("Z", "+00:00"))
    for entry in timing(Path(sweep_dir)):
        stop = datetime.fromisoformat(entry["date"].replace("Z", "+00:00"))
        if stop - timedelta(seconds=float(entry.get("wall_s", 0))) <= end <= stop:
            return max(0, min(int(entry.get("workers", 1)), int(entry.get("executed", 1))) - 1)
    return 0


def load(book: Path, chapter: str) -> dict | None:
    """The published seed-sweep summary of ``chapter``, or None."""
    path = summary_path(book, chapter)
    return json.loads(path.read_text()) if path.exists() else None


def load_other_axes(book: Path, chapter: str) -> list[dict]:
    """The published summaries of ``chapter`` over other parameters (``<chapter>--*.json``), by name."""
    return [json.loads(p.read_text()) for p in sorted((Path(book) / "robustness").glob(f"{chapter}--*.json"))]


def seed_group(summary: dict) -> dict | None:
    """The group whose only varied parameters are seeds (the published settings), else the first."""
    groups = summary.get("groups", [])
    plain = [g for g in groups if not g.get("params")]
    return (plain or groups or [None])[0]


def code_versions(summary: dict) -> set:
    """The chapter-code fingerprints (:func:`memlab.core.results.chapter_code`) of a summary's runs."""
    return {p.get("chapter_code") for p in summary.get("provenance", {}).values()}


def is_current(summary: dict | None, published: dict | None) -> bool:
    """Whether a sweep ran the same chapter code as the published page.

    Compares the runs' ``chapter_code`` with the published results' (both absent counts as the
    same: results written before fingerprints existed came from one code state; fingerprints
    declared equal by :func:`memlab.core.results.same_code` count as the same).
    """
    from memlab.core.results import same_code

    if summary is None:
        return False
    mine = (published or {}).get("provenance", {}).get("chapter_code")
    codes = code_versions(summary)
    return len(codes) == 1 and same_code(summary.get("chapter", ""), next(iter(codes)), mine)


def claim_counts(summary: dict | None) -> dict[str, str]:
    """``{claim key: "reproduced in k of n runs"}`` for the seed group of a summary ({} for None)."""
    group = seed_group(summary) if summary else None
    return {key: counts_words(c, len(group.get("runs", []))) for key, c in (group or {}).get("claims", {}).items()}


def counts_words(entry: dict, n_runs: int) -> str:
    """A summary claim entry's per-run verdict counts in words (:func:`memlab.report.pooling.k_of_n`), made
    from its counts at render time, so a summary written with older wording reads as today's."""
    from memlab.report.pooling import k_of_n

    counts = entry.get("verdicts")
    if not isinstance(counts, dict):
        return entry.get("text", "")
    verdicts = [name for name, c in counts.items() for _ in range(int(c))]
    missing = n_runs - len(verdicts)
    return k_of_n(verdicts, [f"{missing} without this claim"] if missing > 0 else [])


def pooled_verdicts(summary: dict | None) -> dict[str, dict]:
    """``{claim key: pooled verdict row}`` (:mod:`memlab.report.pooling`) of a summary's seed group.

    ``{}`` for None or a summary written before pooled rows existed (it still loads).
    """
    group = seed_group(summary) if summary else None
    return {r["key"]: r for r in (group or {}).get("pooled", []) if isinstance(r, dict) and "key" in r}


def current_pooled(book: Path, chapter: str, published: dict | None) -> tuple[list[dict], int] | None:
    """The pooled verdict rows of ``chapter``'s published seed sweep and its seed count, when that
    sweep ran the published page's code (:func:`is_current`) and pooled more than one seed; else None
    (the page's verdicts are then single-seed)."""
    summary = load(book, chapter)
    if not is_current(summary, published):
        return None
    rows = list(pooled_verdicts(summary).values())
    n = max((r.get("n_seeds", 0) for r in rows), default=0)
    return (rows, n) if rows and n > 1 else None


def seeds_of(summary: dict) -> list:
    """The seeds the summary's runs used, in order."""
    return sorted({p["params"].get("seed") for p in summary.get("provenance", {}).values()
                   if p["params"].get("seed") is not None})


def _chapter_section(book: Path, cid: str, published: dict | None, summary: dict | None) -> list[str]:
    title, note = CHAPTERS[cid].title, CHAPTERS[cid].sweep_note
    note = [note, ""] if note else []
    if CHAPTERS[cid].hypotheses:
        note = ["These are the book's own pre-registered hypotheses: *reproduced* means the hypothesis held.",
                "", *note]
    if summary is None:
        return [f"## {title}", "", *note, "No seed sweep is published for this chapter yet. Run it with "
                f"`{SEED_SWEEP.format(chapter=cid)}`, then `memlab sweep --summary DIR --publish`.", ""]
    prov = summary.get("provenance", {}).values()
    commits = sorted({(p.get("git_commit") or "unknown")[:8] for p in prov})
    stale = [] if is_current(summary, published) else [
        "**Earlier code.** These runs used an earlier version of this chapter's code than the published "
        f"page (commit {(published or {}).get('provenance', {}).get('git_commit', 'unknown')[:8]}): "
        "its claims or recipes have changed since, so the counts below are a record of that version, "
        "not of the published verdicts, and the scorecard leaves them out. Re-run with "
        f"`{SEED_SWEEP.format(chapter=cid)}`, then `memlab sweep --summary DIR --publish`.", ""]
    verdicts = {c["key"]: c["verdict"] for c in (published or {}).get("claims", [])}
    pooled = pooled_verdicts(summary)
    counts = claim_counts(summary)
    rows = []
    for key, c in (seed_group(summary) or {}).get("claims", {}).items():
        share = _share(c.get("reproduced", 0), c.get("n", 0))
        p = pooled.get(key)
        rows.append(
            f'<tr class="robust-{share}"><td data-label="Claim">{_claim_cell(c, key)}</td>'
            f'<td data-label="Published verdict">{escape(verdicts.get(key, "–"))}</td>'
            f'<td data-label="Pooled over seeds">{_pooled_cell(p)}</td>'
            f'<td data-label="Across seeds">{escape(counts[key])}</td></tr>')
    table = _table(["Pooled over seeds", "Across seeds"], rows)
    return [f"## {title}", "", *note, *_seed_meaning(cid),
            f"Profile `{summary.get('profile')}`, seeds {', '.join(map(str, seeds_of(summary)))} "
            f"({_cost(summary)}; commit {', '.join(f'`{c}`' for c in commits)}). "
            f"Failed runs: {len(summary.get('runs_failed', []))}.", "", *stale, table, "",
            *_figure(book, summary, f"Verdicts of the {len(summary.get('runs_done', []))} runs, claim by "
                     "claim (share of runs giving each verdict).")]


def _seed_meaning(cid: str) -> list[str]:
    """What a chapter's ``seed`` parameter changes, from its declaration (what differs between runs)."""
    from memlab.core.config import chapter_module

    param = getattr(chapter_module(cid), "SPEC", {}).get("seed")
    if param is None or not param.doc:
        return []
    doc = param.doc if param.doc.endswith(".") else param.doc + "."  # "seed+1, ..." keeps its ellipsis
    return [f"What differs between the runs, as the chapter declares its `seed`: {doc}", ""]


def _cost(summary: dict) -> str:
    """"3 runs, 41 min of runs in all, 24 min wall on 2 workers" (the wall part when timed)."""
    prov = summary.get("provenance", {}).values()
    text = (f"{len(summary.get('runs_done', []))} runs, "
            f"{sum(p.get('wall_time_s') or 0 for p in prov) / 60:.0f} min of runs in all")
    timing = summary.get("timing") or []
    if timing:
        workers = sorted({t.get("workers") for t in timing if t.get("workers")})
        text += f", {sum(t['wall_s'] for t in timing) / 60:.0f} min wall"
        text += (f" on {'/'.join(map(str, workers))} worker{'s' if workers != [1] else ''}"
                 if workers else "")
    return text


def _figure(book: Path, summary: dict, caption: str) -> list[str]:
    """The published summary's figure as a MyST figure (nothing where none was published)."""
    path = summary_path(book, summary["chapter"], other_axes(summary)).with_suffix(".png")
    if not path.exists():
        return []
    return [f"```{{figure}} robustness/{path.name}", f":alt: {caption}", ":width: 100%", "", caption, "```",
            ""]


def _table(columns: list[str], rows: list[str]) -> str:
    """A robustness table: Claim, Published verdict, then ``columns`` (escaped), over ``rows`` (HTML)."""
    head = "".join(f"<th>{escape(c)}</th>" for c in ["Claim", "Published verdict", *columns])
    return (f'<table class="memlab-claims memlab-robustness"><thead><tr>{head}</tr></thead><tbody>'
            + "".join(rows) + "</tbody></table>")


def _pooled_cell(row: dict | None) -> str:
    """A pooled verdict (HTML): the verdict, then how it was reached ("–" where none was pooled)."""
    if not row:
        return "–"
    return f"<strong>{escape(row['verdict'])}</strong><br>{escape(row.get('evidence', ''))}"


def _share(k: int, n: int) -> str:
    """The row's CSS class: the claim held in all, none or some of the n runs that judged it."""
    return "all" if n and k == n else "none" if k == 0 else "some"


def _claim_cell(entry: dict, key: str) -> str:
    """A claim's text (HTML-escaped), labelled as the claims tables label a sanity check."""
    from memlab.report.paper import SANITY

    label = f'<span class="claim-kind">{SANITY}</span>' if entry.get("kind") == SANITY else ""
    return label + escape(entry.get("claim", key))  # the label first, as in the chapters' tables


def _verdict_cell(entry: dict | None) -> str:
    """One group's verdicts of a claim: the verdict itself for one run, else counts."""
    if not entry:
        return "–"
    v = entry.get("verdicts", {})
    if sum(v.values()) == 1:
        return next(iter(v))
    return ", ".join(f"{c} {name}" for name, c in sorted(v.items()))


def _axis_section(book: Path, published: dict | None, summary: dict) -> list[str]:
    """A sweep over other parameters (chapter 1's forget classes): one column per setting."""
    axes = other_axes(summary)
    groups = summary.get("groups", [])
    fixed = sorted({f"{k} {v}" for p in summary.get("provenance", {}).values()
                    for k, v in p["params"].items() if k not in axes})
    stale = [] if is_current(summary, published) else [
        "**Earlier code.** These runs used an earlier version of this chapter's code than the published "
        "page.", ""]
    # parameter names as words in the column headers ("forget class 3"), as the chapters' tables show them
    labels = [", ".join(f"{a.replace('_', ' ')} {g['params'].get(a)}" for a in axes) for g in groups]
    verdicts = {c["key"]: c["verdict"] for c in (published or {}).get("claims", [])}
    keys = list(dict.fromkeys(k for g in groups for k in g.get("claims", {})))
    rows = []
    for key in keys:
        entries = [g.get("claims", {}).get(key) for g in groups]
        pooled = [next((r for r in g.get("pooled", []) if r.get("key") == key), None) for g in groups]
        k = sum(e.get("reproduced", 0) for e in entries if e)
        n = sum(e.get("n", 0) for e in entries if e)
        merged: dict[str, int] = {}  # every setting's per-run verdict counts, said as the seed tables say them
        for e in entries:
            for name, c in ((e or {}).get("verdicts") or {}).items():
                merged[name] = merged.get(name, 0) + int(c)
        across = counts_words({"verdicts": merged}, sum(len(g.get("runs", [])) for g in groups))
        claim = _claim_cell(next(e for e in entries if e), key)
        # each setting's verdict pooled over its seeds first, where the summary has one
        cells = "".join(f'<td data-label="{escape(lab)}">'
                        + (f"<strong>{escape(p['verdict'])}</strong> ({escape(_verdict_cell(e))})"
                           if p and p.get("n_seeds", 1) > 1 else escape(_verdict_cell(e))) + "</td>"
                        for lab, e, p in zip(labels, entries, pooled))
        rows.append(f'<tr class="robust-{_share(k, n)}"><td data-label="Claim">{claim}</td>'
                    f'<td data-label="Published verdict">{escape(verdicts.get(key, "–"))}</td>{cells}'
                    f'<td data-label="Across settings">{escape(across)}</td></tr>')
    table = _table([*labels, "Across settings"], rows)
    return [f"### Across {', '.join(axes)}", "",
            f"Profile `{summary.get('profile')}`, {'; '.join(labels)}"
            + (f" (all at {', '.join(fixed)}; the rest at the profile's defaults)" if fixed
               else " (every other parameter at the profile's default)") + f"; {_cost(summary)}. "
            f"Failed runs: {len(summary.get('runs_failed', []))}. *n* counts the runs that judged the claim.",
            "", *stale, table, "",
            *_figure(book, summary, f"Verdicts of the {len(summary.get('runs_done', []))} runs over "
                     f"{', '.join(axes)}, pooled, claim by claim (share of runs giving each verdict).")]


def write_page(book: Path, dest: Path | None = None, stability_record: Path | None = None) -> Path:
    """``robustness.md``: every chapter's claims with how many seeds reproduce them, then how many
    verdicts moved under other kernels (``stability_record``, default the repository's
    ``benchmarks/results/verdict_stability.json`` beside ``book``; :mod:`memlab.report.stability`)."""
    from memlab.core.results import load_results

    book = Path(book)
    dest = Path(dest) if dest is not None else book
    lines = [
        "# Robustness across seeds", "",
        "A verdict from one seed can be luck. Each chapter below was re-run with other seeds at the `cpu` "
        "profile through `memlab sweep` (one Dask task per run); the table says, for every claim, in how "
        "many of the runs it was reproduced. *n* counts the runs that judged the claim; runs where it was "
        "not run at this profile are listed beside it. *Pooled over seeds* is the claim's verdict judged on "
        "the mean of the seeds' margins, with a band that includes the spread between seeds; seeds that "
        "disagree outside their own bands make it *seed-dependent* (`memlab.report.pooling`). The published "
        "pages show the seed-0 runs' figures. "
        "The numbers behind each line are in `book/robustness/<chapter>.json` (means and 95% intervals of "
        "every metric, and each run's provenance).", "",
    ]
    for cid in CHAPTERS:
        published = load_results(cid, book)
        lines += _chapter_section(book, cid, published, load(book, cid))
        for other in load_other_axes(book, cid):
            lines += _axis_section(book, published, other)
    record_path = Path(stability_record) if stability_record else book.resolve().parent / STABILITY_RECORD
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        record = None  # not measured yet: the section says what to run
    lines += stability_section(record)
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "robustness.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _side_words(k: dict) -> str:
    return f"{k['isa']} kernels, {k['threads']} thread(s)"


def stability_section(record: dict | None) -> list[str]:
    """The page's "Verdicts under other kernels" section (markdown lines) from the record
    :data:`STABILITY_RECORD` (:mod:`memlab.report.stability`), or what to run where there is none."""
    lines = ["## Verdicts under other kernels", ""]
    chapters = ((record or {}).get("measurements") or {}).get("chapters") or []
    if not chapters:
        return lines + ["Not measured yet: `python benchmarks/bench_verdict_stability.py CHAPTER` re-runs a "
                        "chapter's published seed sweep with other kernels and writes the record.", ""]
    t = record["measurements"]["totals"]
    lines += [
        "The same code and seeds, re-run with other CPU kernels (another vector instruction set or thread "
        "count: float sums in another order, so slightly different weights), then compared verdict by "
        "verdict with the published sweep (`memlab.report.stability`, made with "
        "`python benchmarks/bench_verdict_stability.py`). A *flip* is any change of verdict; a "
        "*reversal* is reproduced against not reproduced.", "",
        f"**Single-seed verdicts: {t['per_seed_flips']} of {t['per_seed_compared']} changed "
        f"({t['per_seed_reversals']} reversals). Verdicts pooled over the seeds: {t['pooled_flips']} of "
        f"{t['pooled_compared']} changed ({t['pooled_reversals']} reversals).**", ""]
    labels = ("Chapter", "Published sweep", "Re-run with", "Seeds", "Single-seed flips", "Pooled flips")
    head = "".join(f"<th>{h}</th>" for h in labels)
    rows = []
    for c in chapters:
        title = CHAPTERS[c["chapter"]].title if c["chapter"] in CHAPTERS else c["chapter"]
        cells = [title, _side_words(c["a"]), _side_words(c["b"]), ", ".join(map(str, c["seeds_compared"])),
                 f"{c['per_seed_flips']} of {c['per_seed_compared']}",
                 f"{len(c['pooled_flips'])} of {c['pooled_compared']}"]
        rows.append("<tr>" + "".join(f'<td data-label="{lab}">{escape(str(x))}</td>'
                                     for lab, x in zip(labels, cells)) + "</tr>")
    lines += ['<table class="memlab-claims memlab-robustness"><thead><tr>' + head + "</tr></thead><tbody>"
              + "".join(rows) + "</tbody></table>", ""]
    for c in chapters:
        title = CHAPTERS[c["chapter"]].title if c["chapter"] in CHAPTERS else c["chapter"]
        moved = [f"- seed {s['seed']}: {r['claim']}: {r['a']} \u2192 {r['b']}"
                 for s in c["per_seed"] for r in s["changed"]]
        pooled = [f"- **pooled**: {f['claim']}: {f['a']} (margin {f['margin_a']}) \u2192 {f['b']} "
                  f"(margin {f['margin_b']}); {f['why']}." for f in c["pooled_flips"]]
        if moved or pooled:
            lines += [f"{title}: what moved", "", *pooled, *moved, ""]
        hidden = c.get("behind_gates") or {}
        if hidden.get("per_seed_compared"):
            lines += [f"{title}, behind its regime gates (the claims' own verdicts where "
                      "they are outside the paper's regime on both sides, never published): single-seed flips "
                      f"{len(hidden['per_seed_flips'])} of {hidden['per_seed_compared']}, pooled flips "
                      f"{len(hidden['pooled_flips'])} of {hidden['pooled_compared']}.", ""]
    return lines
