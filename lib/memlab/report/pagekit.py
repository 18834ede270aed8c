"""What every chapter page does the same way: its setup cell, its verdicts, its closing summary.

The six notebooks call these instead of repeating the cells: :func:`start` (resolve the parameters,
open the run, show the provenance), :func:`judge` (evaluate the claims, show the claims table, save
the results, glue the verdict counts), :func:`closing_summary` (the "What held / What did not /
What this run cannot decide" block). A page's cost is not computed here: :mod:`memlab.report.book` appends it
at render time from the cost log the runs write (:func:`memlab.core.costs.chapter_markdown`). Glued values
are numbers, never strings, so a page shows ``21``, not ``'21'``.
"""

from __future__ import annotations

import re
from typing import Sequence

from memlab.core import config, results
from memlab.core.costs import minutes
from memlab.report import paper

# The glue name of each verdict's count: ``<chapter>-n-<slug>`` (the slugs are also the CSS classes).
VERDICT_SLUGS = paper.VERDICT_SLUGS

SUMMARY_HEADS = {
    paper.REPRODUCED: "What held",
    paper.NOT_REPRODUCED: "What did not",
    paper.OUTSIDE_REGIME: "Outside the paper's regime",
    paper.NOT_JUDGED: "What this run cannot decide",
    paper.SEED_DEPENDENT: "What depends on the seed",
}


def _glue(name: str, value) -> None:
    from myst_nb import glue

    glue(name, value, display=False)


def _display_markdown(text: str) -> None:
    from IPython.display import Markdown, display

    display(Markdown(text))


def start(chapter: str, profile: str, params: dict) -> tuple[config.Config, results.Run]:
    """The setup cell: resolve ``params`` at ``profile``, open the run (its clocks start), show the provenance.

    Raises :class:`memlab.core.config.ConfigError` naming the parameter for bad input, before any work.
    """
    cfg = config.resolve(chapter, profile=profile, **params)
    run = results.Run(cfg)
    run.provenance_box()
    return cfg, run


def counts(verdicts: Sequence[dict]) -> dict[str, int]:
    """Claims per verdict (every verdict present, zeros included) and ``"sanity"``: sanity checks apart."""
    tally = paper.tally(verdicts, kind=paper.CLAIM)
    out = {v: int(tally.get(v, 0)) for v in paper.VERDICTS}
    out["sanity"] = int(sum(paper.tally(verdicts, kind=paper.SANITY).values()))
    return out


def glue_counts(chapter: str, verdicts: Sequence[dict]) -> dict[str, int]:
    """Glue ``<chapter>-n-<slug>`` for every verdict (:data:`VERDICT_SLUGS`: ``reproduced``,
    ``not-reproduced``, ``outside-regime``, ``not-judged``, ``seed-dependent``, ``not-run``) and ``-n-sanity``."""
    n = counts(verdicts)
    for verdict, slug in VERDICT_SLUGS.items():
        _glue(f"{chapter}-n-{slug}", n[verdict])
    _glue(f"{chapter}-n-sanity", n["sanity"])
    return n


def headline_keys(chapter: str) -> list[str]:
    """The paper's headline claims of ``chapter``: ``findings: headline:`` in ``data/papers/<chapter>.yaml``."""
    keys = (paper.load(chapter).get("findings") or {}).get("headline") or []
    if not all(isinstance(k, str) for k in keys):
        raise ValueError(f"data/papers/{chapter}.yaml: findings: headline must be a list of claim keys")
    return list(keys)


def counts_sentence(n: dict[str, int], what: str = "the paper's claims") -> str:
    """``n`` (see :func:`counts`) in words: every verdict named, sanity checks apart.

    ``what`` names what was judged, possessive first ("the paper's claims", "the book's hypotheses").
    """
    total = sum(n.get(v, 0) for v in paper.VERDICTS)
    parts = [f"{n[paper.REPRODUCED]} reproduced", f"{n[paper.NOT_REPRODUCED]} not reproduced",
             f"{n.get(paper.OUTSIDE_REGIME, 0)} outside the paper's regime (our run failed its regime gate)",
             f"{n[paper.NOT_JUDGED]} not judged (inside the noise, or a precondition failed)"]
    if n.get(paper.SEED_DEPENDENT):  # a pooled verdict only: named where some claim has it
        parts.append(f"{n[paper.SEED_DEPENDENT]} seed-dependent (the seeds disagree outside their bands)")
    parts.append(f"{n[paper.NOT_RUN]} not run at this profile")
    sanity = f"; {n['sanity']} sanity check{'s' if n['sanity'] != 1 else ''} (true by construction) apart" \
        if n["sanity"] else ""
    owner, _, noun = what.rpartition(" ")
    return f"Of {owner} {total} {noun} on this page: {', '.join(parts)}{sanity}."


_MD_SPECIAL = set("\\`*_[]<>{}$#|~")


def md_escape(text: str) -> str:
    """``text`` with Markdown's special characters backslash-escaped, so it shows as typed."""
    return "".join(f"\\{c}" if c in _MD_SPECIAL else c for c in str(text))


def verdict_line(v: dict) -> str:
    """One verdict row as a Markdown list item: its mark, its verdict in bold, the claim as typed."""
    claim = str(v["claim"])
    return (f"- {paper.VERDICT_MARKS[v['verdict']]} **{v['verdict'].capitalize()}.** {md_escape(claim)}"
            f"{'' if claim.endswith('.') else '.'}")


def findings_markdown(verdicts: Sequence[dict], headline: Sequence[str], regime: str = "",
                      what: str = "the paper's claims", basis: str = "") -> str:
    """The box a chapter opens with: each headline claim's verdict and our numbers, the regime, the counts.

    ``headline``: claim keys in the order to show (unknown keys raise ValueError: a typo in the
    yaml). Every number comes from ``verdicts`` (the claims' evidence), none is typed by hand.
    ``basis`` (a sentence, :func:`published_verdicts`) says whether the verdicts are pooled over seeds.
    """
    by_key = {v["key"]: v for v in verdicts}
    unknown = [k for k in headline if k not in by_key]
    if unknown:
        raise ValueError(f"findings: headline claims {unknown} are not among this chapter's claims "
                         f"({', '.join(by_key)})")
    lines = [":::{admonition} What holds here\n:class: memlab-findings\n"]
    for k in headline:
        v = by_key[k]
        # a failed gate's gap is said once per regime, under the list, not on every claim it gates
        ours = ("*Ours:* outside the regime named below." if v["verdict"] == paper.OUTSIDE_REGIME
                else f"*Ours:* {md_escape(paper.ClaimsTable._evidence(v))}")
        if v.get(SEED_EVIDENCE) and v["verdict"] == paper.NOT_REPRODUCED:  # a negative verdict says what lost
            # a vote of the seeds has no pooled number to show: its count, then the seed's evidence
            pooled = v["across"] if v.get("basis") == "verdicts" and v.get("across") else paper.ClaimsTable._evidence(v)
            ours = f"*Ours:* {md_escape(pooled)}; on this page's seed, {md_escape(v[SEED_EVIDENCE])}"
        lines.append(f"{verdict_line(v)} {ours}")
    lines.append("")
    if regime:  # the chapter's own Markdown (as the closing block shows it), headed unless it heads itself
        lines += [regime if regime.lstrip().startswith("**") else f"**Regime.** {regime}", ""]
    lines.append(counts_sentence(counts(verdicts), what) + (f" {md_escape(basis)}" if basis else "")
                 + " The claims table below gives every claim with its noise band and the reason where one "
                 "did not reproduce.")
    failed = failed_requirements(verdicts)
    if failed:
        lines += ["", "**Outside the paper's regime**, because of what our run measured:", ""] + [
            f"- {md_escape(gap[:1].upper() + gap[1:])}: keeps {n} claim{'s' if n != 1 else ''} outside."
            for gap, n in failed]
        lines += ["", "The regimes table below gives each gate, the paper's text it comes from and what "
                  "would bring its claims inside."]
    lines.append(":::")
    return "\n".join(lines)


def outside_regimes(verdicts: Sequence[dict]) -> list[tuple[str, str, list[str]]]:
    """The failed regime gates of ``verdicts``: ``(regime sentence, measured gap, claim texts)`` each.

    Sanity checks are never gated; rows are grouped by regime in the order they first appear.
    """
    groups: dict[str, tuple[str, str, list[str]]] = {}
    for v in verdicts:
        if v["verdict"] == paper.OUTSIDE_REGIME and v.get("kind", paper.CLAIM) == paper.CLAIM:
            reg = v.get("regime") or {}
            name = reg.get("name", v["evidence"])
            groups.setdefault(name, (str(reg.get("text", "")), paper.ClaimsTable._evidence(v), []))[2].append(
                str(v["claim"]).rstrip("."))
    return list(groups.values())


_POOLED_HEAD = re.compile(r"(mean over the \d+ seeds: )?(.*)", re.S)


def failed_requirements(verdicts: Sequence[dict]) -> list[tuple[str, int]]:
    """Each failed requirement of the failed gates, once: ``(its gap in words, claims it keeps outside)``.

    Several gates often fail on one measurement (the Original's accuracy); the findings box says it
    once. A gate's words (:func:`memlab.report.paper.check_regime`) join its failing requirements with "; ".
    """
    counts_by: dict[str, int] = {}
    for v in verdicts:
        if v["verdict"] == paper.OUTSIDE_REGIME and v.get("kind", paper.CLAIM) == paper.CLAIM:
            # a pooled gate's words open once with "mean over the N seeds: "; each gap keeps it
            head, body = _POOLED_HEAD.match(str(paper.ClaimsTable._evidence(v))).groups()
            head = head or ""
            for gap in dict.fromkeys(body.split("; ")):
                counts_by[head + gap] = counts_by.get(head + gap, 0) + 1
    return list(counts_by.items())


#: How the two-minute summary (:func:`what_holds_markdown`) opens each verdict's sentence.
HOLDS_HEADS = {
    paper.REPRODUCED: "Held",
    paper.NOT_REPRODUCED: "Did not hold, in the paper's regime",
    paper.SEED_DEPENDENT: "Held on some seeds and not on others",
    paper.NOT_JUDGED: "Could not be decided (inside the noise, or a precondition failed)",
    paper.NOT_RUN: "Not run at this profile",
}


def what_holds_markdown(title: str, link: str, verdicts: Sequence[dict], short: dict[str, str],
                        basis: str = "", hypotheses: bool = False) -> str:
    """One paper in a few sentences of words: what held, what did not, what lay outside its regime and why.

    ``title`` and ``link`` head the paragraph, ``basis`` (e.g. "single-seed verdicts") follows
    them in parentheses; ``short`` (claim key -> short title,
    :func:`memlab.report.paper.short_titles`) names each claim, its full text where it has none. Sanity
    checks are left out (they test our code, not the paper); empty verdict classes say nothing.
    The regime sentence gives the gap of each failed gate once, the gap that keeps most claims first.
    ``hypotheses``: the verdicts judge the book's own hypotheses (no paper, so no paper's regime).
    """
    names: dict[str, list[str]] = {}
    for v in verdicts:
        if v.get("kind", paper.CLAIM) == paper.CLAIM:
            names.setdefault(v["verdict"], []).append(short.get(v.get("key", "")) or str(v["claim"]).rstrip("."))
    parts = [f"**[{md_escape(title)}]({link})**" + (f" ({md_escape(basis)})." if basis else ".")]
    for verdict in (paper.REPRODUCED, paper.NOT_REPRODUCED, paper.SEED_DEPENDENT):
        if names.get(verdict):
            head = "Did not hold" if hypotheses and verdict == paper.NOT_REPRODUCED else HOLDS_HEADS[verdict]
            parts.append(f"{head}: {md_escape('; '.join(names[verdict]))}.")
    outside = names.get(paper.OUTSIDE_REGIME, [])
    if outside:
        gaps = sorted(failed_requirements(verdicts), key=lambda g: -g[1])
        more = len(gaps) - 2
        why = "; ".join(gap for gap, _ in gaps[:2]) + (f"; and {more} more gap{'s' if more != 1 else ''}"
                                                       if more > 0 else "")
        n = len(outside)
        named = "; ".join(outside) if n <= 3 else "among them " + "; ".join(outside[:3])  # a summary, not a list
        parts.append(f"{n} claim{'s' if n != 1 else ''} ({md_escape(named)}) "
                     f"{'lie' if n != 1 else 'lies'} outside the paper's regime, so our run cannot test "
                     f"{'them' if n != 1 else 'it'}: {md_escape(why)}.")
    undecided = [f"{HOLDS_HEADS[v]}: {md_escape('; '.join(names[v]))}"
                 for v in (paper.NOT_JUDGED, paper.NOT_RUN) if names.get(v)]
    if undecided:
        parts.append(". ".join(undecided) + ".")
    return " ".join(parts)


def judged_what(chapter: str) -> str:
    """What a chapter judges, in words: "the book's hypotheses" (chapter 6) or "the paper's claims"."""
    from memlab.core.chapters import CHAPTERS

    hypotheses = chapter in CHAPTERS and CHAPTERS[chapter].hypotheses
    return "the book's hypotheses" if hypotheses else "the paper's claims"


def published_verdicts(chapter: str, verdicts: Sequence[dict], book=None) -> tuple[list[dict], str]:
    """The verdicts a page's findings state, and a sentence saying what they are pooled over.

    Where ``book`` (default the repository's ``book/``) holds a seed sweep of the chapter's current
    code (:func:`memlab.report.robustness.current_pooled`), its pooled rows (:mod:`memlab.report.pooling`) replace
    this run's, claim by claim; otherwise this run's ``verdicts`` are returned as single-seed.
    """
    from memlab.report import pooling

    found = current_sweep(chapter, book)
    if found is None:
        return list(verdicts), pooling.basis_words(1)
    by_key = {r["key"]: r for r in found[0]}
    # a pooled margin says how far from holding, the page's own row what lost to what: the box shows both
    return ([{**by_key[v["key"]], SEED_EVIDENCE: v["evidence"]} if v["key"] in by_key else v for v in verdicts],
            pooling.basis_words(found[1]))


#: Key of a pooled row's copy of the page's own (one seed's) evidence (:func:`published_verdicts`).
SEED_EVIDENCE = "seed_evidence"


def current_sweep(chapter: str, book=None) -> tuple[list[dict], int] | None:
    """The pooled rows and seed count of ``book``'s (default the repository's ``book/``) published
    seed sweep of the chapter's current code (:func:`memlab.report.robustness.current_pooled`), or None."""
    from pathlib import Path

    from memlab.report import robustness

    book = Path(book) if book is not None else config.repo_root() / "book"
    now = {"provenance": {"chapter_code": results.chapter_code(chapter)}}
    return robustness.current_pooled(book, chapter, now)


def pooled_across(chapter: str, book=None) -> dict[str, str] | None:
    """The claims table's "Across seeds" column from a published seed sweep of the chapter's current
    code: claim key -> "reproduced, pooled over 3 seeds; per seed: reproduced in 2 of 3 runs"; None without one
    (the table then has no such column and the page's verdicts are single-seed)."""
    found = current_sweep(chapter, book)
    return None if found is None else _across_words(found)


def _across_words(found: tuple[list[dict], int]) -> dict[str, str]:
    from memlab.report.pooling import k_of_n

    rows, n = found
    # the per-seed counts made from the seeds' verdicts, in today's words (an older summary kept other ones)
    return {r["key"]: f"{r['verdict']}, pooled over {r.get('n_seeds', n)} seeds; per seed: "
                      f"{k_of_n(r['per_seed']) if r.get('per_seed') else r.get('across', '')}"
            for r in rows}


def glue_findings(chapter: str, verdicts: Sequence[dict], regime: str = "") -> str:
    """Glue :func:`findings_markdown` as ``<chapter>-findings`` (the page shows it at the top), with
    the pooled verdicts of a current seed sweep where one is published (:func:`published_verdicts`)."""
    from IPython.display import Markdown

    verdicts, basis = published_verdicts(chapter, verdicts)
    text = findings_markdown(verdicts, headline_keys(chapter), regime, judged_what(chapter), basis)
    _glue(f"{chapter}-findings", Markdown(text))
    return text


def judge(claims: Sequence[paper.Claim], run: results.Run, *, across: dict[str, str] | None = None,
          metrics: dict | None = None) -> list[dict]:
    """Evaluate ``claims`` on the run's metrics, show the claims table, save the run, glue the counts.

    The claims are gated on the regimes of the chapter's yaml (:func:`memlab.report.paper.regimes`), so a
    chapter gets its gates with no notebook edit.

    ``metrics`` overrides what the claims read (default ``run.metrics``); ``across`` (claim key ->
    text) adds the claims table's "Across seeds" column, by default the pooled verdicts of a published
    seed sweep of the chapter's current code (:func:`pooled_across`). Returns the verdicts (JSON-able
    dicts): this run's own, single-seed.
    The findings box is glued once, by :func:`closing_summary` (with ``chapter``) or
    :func:`glue_findings`: a key glued twice is a build warning.
    """
    from IPython.display import display

    chapter = run.chapter
    verdicts = paper.evaluate(claims, run.metrics if metrics is None else metrics, run.cfg.profile,
                              reasons=paper.reasons(chapter), regimes=paper.regimes(chapter))
    found = current_sweep(chapter) if across is None else None
    if found is not None:  # a published seed sweep of this code: its pooled verdicts beside this run's
        across = _across_words(found)
    display(paper.claims_table(verdicts, across=across))
    run.save(claims=verdicts, pooled_seeds=found[1] if found else None)
    glue_counts(chapter, verdicts)
    return verdicts


def summary_markdown(verdicts: Sequence[dict], regime: str = "") -> str:
    """The closing block: one paragraph per verdict with the claims' texts, then ``regime``."""
    by_verdict: dict[str, list[str]] = {}
    for v in verdicts:
        if v.get("kind", paper.CLAIM) == paper.CLAIM:
            by_verdict.setdefault(v["verdict"], []).append(v["claim"].rstrip("."))
    parts = [f"**{head}.** {'; '.join(by_verdict[v])}."
             for v, head in SUMMARY_HEADS.items() if by_verdict.get(v)]
    gaps = [f"*{text.rstrip('.')}*: ours {gap}" for text, gap, _ in outside_regimes(verdicts)]
    if gaps:  # the gap right after the claims it keeps outside (the heads are in VERDICTS order)
        at = next(i for i, p in enumerate(parts) if p.startswith(f"**{SUMMARY_HEADS[paper.OUTSIDE_REGIME]}."))
        parts[at] += " The paper's regime, against ours: " + ". ".join(gaps) + "."
    if regime:
        parts.append(regime)
    return "\n\n".join(parts)


def closing_summary(verdicts: Sequence[dict], regime: str = "", chapter: str | None = None) -> None:
    """Show :func:`summary_markdown` in the notebook; with ``chapter``, also glue the findings box with ``regime``."""
    _display_markdown(summary_markdown(verdicts, regime))
    if chapter is not None:
        glue_findings(chapter, verdicts, regime)


REGIMES_COLUMNS = ["What the paper tested", "How the gate was chosen", "Ours", "Holds",
                   "Claims it gates", "What would decide it"]


def _cost_words(cost: dict | None) -> str:
    """``decide_cost`` (minutes) in words: "about 600 min on 2 CPU cores, 8 min on one GPU"."""
    parts = [f"{minutes(cost[k] * 60):g} min on {where}" for k, where in
             (("cpu_2core_min", "2 CPU cores"), ("gpu_min", "one GPU")) if (cost or {}).get(k) is not None]
    return f"estimated {', '.join(parts)}" if parts else ""


def scale_changes_text(chapter: str) -> str:
    """The chapter's scale changes (:func:`memlab.report.paper.scale_changes`) as one Markdown paragraph per
    change: what changed and why, what it cost, what it bought; "" when it lists none."""
    paras = []
    for e in paper.scale_changes(chapter):
        text = f"**Changed toward the paper's regime:** {e['change'].rstrip('.')}. {e['why'].rstrip('.')}. " \
               f"**Cost:** {e['cost'].rstrip('.')}."
        if e.get("bought"):
            text += f" **What it bought:** {e['bought'].rstrip('.')}."
        paras.append(text)
    return "\n\n".join(paras)


def show_scale_changes(chapter: str) -> None:
    """Display :func:`scale_changes_text` (nothing when the chapter lists no change)."""
    text = scale_changes_text(chapter)
    if text:
        _display_markdown(text)


def regimes_table(chapter: str, verdicts: Sequence[dict]):
    """The chapter's regime gates as readers see them: one row per regime (index: its name in words).

    Columns :data:`REGIMES_COLUMNS`: the regime's sentence, how the gate was chosen (from the
    paper), our measured values with their labels, whether the gate holds here ("yes", "no", or
    "not measured" where no gated claim was evaluated on this run), the texts of the claims it
    gates, and the run that would decide them with its estimated cost. ``verdicts`` are this
    run's rows (:func:`judge`); a gated key missing from them raises ValueError (a typo).
    """
    import pandas as pd

    by_key = {v["key"]: v for v in verdicts}
    rows, names = [], []
    for name, reg in paper.regimes(chapter).items():
        unknown = [k for k in reg["claims"] if k not in by_key]
        if unknown:
            raise ValueError(f"regimes_table: regime {name!r} of {chapter} gates claims {unknown} that "
                             f"these verdicts lack ({', '.join(by_key)})")
        measured = next((by_key[k]["regime"] for k in reg["claims"] if by_key[k].get("regime")), None)
        if measured is None:
            ours, holds = "not measured on this run", "not measured"
        else:
            ours = "; ".join(paper.measured_words(m) for m in measured["measured"])
            holds = {True: "yes", False: "no"}.get(measured["holds"], "not measured")
        decide = "; ".join(t for t in (reg.get("decide", "").rstrip("."), _cost_words(reg.get("decide_cost"))) if t)
        rows.append([reg["text"], reg["why"], ours, holds,
                     "; ".join(str(by_key[k]["claim"]).rstrip(".") for k in reg["claims"]), decide or "\u2013"])
        names.append(name.replace("_", " "))
    return pd.DataFrame(rows, columns=REGIMES_COLUMNS, index=pd.Index(names, name="Regime"))
