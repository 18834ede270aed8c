"""A seed sweep's run, published as its chapter's page, brought to what the page shows after the sweep.

The runs of a seed sweep execute before its summary exists, so the run that ``memlab sweep --summary
DIR --publish --page RUN`` publishes says its verdicts are single-seed. A page executed once the
summary is published (:func:`memlab.report.pagekit.judge`) shows three things otherwise: the findings
box states the verdicts pooled over the seeds, the claims table has an "Across seeds" column, and the
closing line says the page is pooled. :func:`pool_page` writes those three outputs into the published
notebook from the run's own verdicts and the published summary, and takes each "not reproduced"
reason from the chapter's yaml as it stands (reasons are written from what the runs measured, so
after they ran). Every output is found by making it again from the run's verdicts and comparing:
a page that does not match is refused, never patched by guess.
"""
from __future__ import annotations

import json
from pathlib import Path

from memlab.core import results
from memlab.core.config import ConfigError
from memlab.report import pagekit, paper

RECORD = "application/papermill.record/text/markdown"  # where myst-nb's glue keeps a Markdown value


def _text(value) -> str:
    return value if isinstance(value, str) else "".join(value)


def with_reasons(verdicts: list[dict], reasons: dict[str, str]) -> list[dict]:
    """``verdicts`` with each "not reproduced" row's reason taken from ``reasons`` (claim key -> sentence)."""
    return [{**v, "reason": reasons.get(v["key"]) or v.get("reason", "")} if v["verdict"] == paper.NOT_REPRODUCED
            else dict(v) for v in verdicts]


def regime_of_box(box: str, verdicts: list[dict], headline: list[str], what: str) -> str:
    """The regime paragraphs of a findings box (:func:`memlab.report.pagekit.findings_markdown`) made
    from ``verdicts``; ValueError when the box is not exactly what those verdicts make with them."""
    lines = box.split("\n")
    counts_line = pagekit.counts_sentence(pagekit.counts(verdicts), what)
    start = 3 + len(headline) + 1  # admonition head, class, blank; one line per headline claim; blank
    ends = [i for i, line in enumerate(lines) if line.startswith(counts_line)]
    if not ends or ends[0] < start:
        raise ValueError("the findings box has no counts line of the run's verdicts")
    regime = "\n".join(lines[start:ends[0]]).strip("\n")
    basis = _basis_in(lines[ends[0]], counts_line)
    if pagekit.findings_markdown(verdicts, headline, regime, what, basis) != box:
        raise ValueError("the findings box is not the one the run's verdicts make")
    return regime


def _regime(box: str, makers: list[list[dict]], headline: list[str], what: str) -> str:
    """:func:`regime_of_box` for the first verdict list of ``makers`` that made ``box``."""
    for verdicts in makers:
        try:
            return regime_of_box(box, verdicts, headline, what)
        except ValueError:
            continue
    raise ValueError("the findings box is not the one the run's verdicts (own or pooled) make")


def _basis_in(line: str, counts_line: str) -> str:
    """The basis sentence between the counts sentence and the table pointer of a box's counts line."""
    tail = " The claims table below gives every claim"
    middle = line[len(counts_line):line.index(tail)] if tail in line else ""
    return middle.strip().replace("\\", "")


def pool_page(notebook: Path, book: Path) -> int:
    """Write the pooled findings box, the claims table with its "Across seeds" column and the pooled
    closing line into ``notebook`` (a published chapter page of ``book``), and the yaml's reasons into
    the page's results; returns the number of outputs rewritten (3).

    Raises ConfigError when the book holds no published seed sweep of the page's code, and ValueError
    when one of the three outputs is not found exactly once as the run made it.
    """
    notebook, book = Path(notebook), Path(book)
    chapter = notebook.stem
    found = pagekit.current_sweep(chapter, book)
    if found is None:
        raise ConfigError(f"parameter 'page': {chapter} has no published seed sweep of its current code in "
                          f"{book}; publish the sweep's summary first")
    res_path = book / "results" / f"{chapter}.json"
    res = json.loads(res_path.read_text())
    ran = res["claims"]
    fresh = with_reasons(ran, paper.reasons(chapter))
    headline, what = pagekit.headline_keys(chapter), pagekit.judged_what(chapter)
    across = pagekit.pooled_across(chapter, book)
    # A run executes before its sweep's summary exists, or (re-run alone) after a summary of the same
    # code was published: its outputs are then already pooled. Either is accepted as the run made it.
    as_run = {paper.claims_table(ran)._repr_html_(), paper.claims_table(ran, across=across)._repr_html_()}
    pooled_then = pagekit.published_verdicts(chapter, ran, book)[0]
    makers = [ran, pooled_then, [{k: x for k, x in v.items() if k != pagekit.SEED_EVIDENCE} for v in pooled_then]]
    new_table = paper.claims_table(fresh, across=across)
    pooled, basis = pagekit.published_verdicts(chapter, fresh, book)
    pooled_line = results.POOLED_ON_PAGE.format(n=found[1])
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    done = {"claims table": 0, "closing line": 0, "findings box": 0}
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            name = out.get("metadata", {}).get("scrapbook", {}).get("name")
            markdown = _text(data.get("text/markdown", ""))
            if _text(data.get("text/html", "")) in as_run:
                data["text/html"], data["text/plain"] = new_table._repr_html_(), repr(new_table)
                done["claims table"] += 1
            elif results.SINGLE_SEED in markdown or pooled_line in markdown:
                data["text/markdown"] = markdown.replace(results.SINGLE_SEED, pooled_line)
                done["closing line"] += 1
            elif name == f"{chapter}-findings" and RECORD in data:
                regime = _regime(_text(data[RECORD]), makers, headline, what)
                data[RECORD] = pagekit.findings_markdown(pooled, headline, regime, what, basis)
                done["findings box"] += 1
    wrong = [f"{what_} ({n} found)" for what_, n in done.items() if n != 1]
    if wrong:
        raise ValueError(f"{notebook}: not pooled, each output must appear once as the run made it: "
                         f"{', '.join(wrong)}")
    # written as the run wrote them: the notebook as the book's pages, the results atomically
    notebook.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    results.write_json_atomic(res_path, {**res, "claims": fresh})
    return sum(done.values())
