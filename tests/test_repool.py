"""A sweep's run published as the page (`memlab sweep --summary DIR --publish --page seed-0`) says what
the sweep pooled: the findings box, the claims table's "Across seeds" column and the closing line, as a
page executed after the sweep would; reasons come from the yaml as it stands. A page that is not what
its run made is refused untouched."""
import json

import pytest

from memlab.core import results
from memlab.core.config import ConfigError
from memlab.report import pagekit, paper, repool

CH = "04_qskew"  # a real chapter: its headline claims, yaml reasons and code fingerprint
REGIME = "**The regime.** The base reads context.\n\nA second paragraph of the regime."


def _verdicts() -> list[dict]:
    keys = pagekit.headline_keys(CH) + ["per_step"]
    rows = [{"key": k, "claim": f"Claim {k}", "source": "Table 1", "verdict": paper.REPRODUCED,
             "evidence": f"margin of {k} +3 (band ±1)", "kind": paper.CLAIM} for k in keys]
    rows[0].update(verdict=paper.NOT_REPRODUCED, reason="a reason written before the sweep was read")
    rows[1].update(verdict=paper.NOT_REPRODUCED, reason="")
    return rows


def _pooled(verdicts: list[dict]) -> list[dict]:
    """Pooled rows as a sweep summary keeps them: the first claim seed-dependent over 3 seeds."""
    out = []
    for i, v in enumerate(verdicts):
        per_seed = [v["verdict"]] * 3 if i else [paper.NOT_REPRODUCED, paper.REPRODUCED, paper.REPRODUCED]
        out.append({**v, "verdict": paper.SEED_DEPENDENT if i == 0 else v["verdict"], "n_seeds": 3,
                    "per_seed": per_seed, "evidence": f"mean over the 3 seeds: {v['evidence']}"})
    return out


def _book(tmp_path, box: str | None = None, after_summary: bool = False):
    """A book holding a seed-0 page as its run made it, its results and a current 3-seed summary;
    ``after_summary``: the run executed with that summary already published (its outputs pooled)."""
    book = tmp_path / "book"
    for sub in ("chapters", "results", "robustness"):
        (book / sub).mkdir(parents=True)
    verdicts, code = _verdicts(), results.chapter_code(CH)
    summary = {"chapter": CH, "profile": "cpu",
               "provenance": {f"seed-{s}": {"params": {"seed": s}, "chapter_code": code} for s in range(3)},
               "groups": [{"params": {}, "runs": ["seed-0", "seed-1", "seed-2"], "claims": {},
                           "pooled": _pooled(verdicts)}]}
    (book / "robustness" / f"{CH}.json").write_text(json.dumps(summary))
    what = pagekit.judged_what(CH)
    shown, basis = (pagekit.published_verdicts(CH, verdicts, book) if after_summary else
                    (verdicts, "These verdicts are single-seed (one run); a seed sweep pools them over seeds."))
    box = box or pagekit.findings_markdown(shown, pagekit.headline_keys(CH), REGIME, what, basis)
    table = paper.claims_table(verdicts, across=pagekit.pooled_across(CH, book) if after_summary else None)
    line = results.POOLED_ON_PAGE.format(n=3) if after_summary else results.SINGLE_SEED
    closing = f"*This page ran at the `cpu` profile in 9 s. {line}*"
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "source": "", "metadata": {}, "execution_count": 1, "outputs": [
            {"output_type": "display_data", "metadata": {},
             "data": {"text/html": table._repr_html_(), "text/plain": repr(table)}},
            {"output_type": "display_data", "metadata": {}, "data": {"text/markdown": closing}}]},
        {"cell_type": "code", "source": "", "metadata": {}, "execution_count": 2, "outputs": [
            {"output_type": "display_data", "metadata": {"scrapbook": {"name": f"{CH}-findings",
                                                                      "mime_prefix": "application/papermill.record/"}},
             "data": {repool.RECORD: box, "application/papermill.record/text/plain": "<Markdown>"}}]}]}
    page = book / "chapters" / f"{CH}.ipynb"
    page.write_text(json.dumps(nb, indent=1))
    (book / "results" / f"{CH}.json").write_text(json.dumps({"claims": verdicts,
                                                             "provenance": {"chapter_code": code}}))
    return book, page, verdicts


def _outputs(page):
    return [o for c in json.loads(page.read_text())["cells"] for o in c["outputs"]]


def test_the_page_says_what_the_sweep_pooled_and_the_yamls_reasons(tmp_path):
    book, page, verdicts = _book(tmp_path)
    assert repool.pool_page(page, book) == 3
    table, closing, box = _outputs(page)
    reason = paper.reasons(CH)[verdicts[0]["key"]]
    assert "Across seeds" in table["data"]["text/html"] and "pooled over 3 seeds; per seed: reproduced in 2 of 3" \
        in table["data"]["text/html"]
    assert reason[:40] in table["data"]["text/html"] and "written before the sweep" not in table["data"]["text/html"]
    assert results.POOLED_ON_PAGE.format(n=3) in closing["data"]["text/markdown"]
    assert results.SINGLE_SEED not in closing["data"]["text/markdown"]
    text = box["data"][repool.RECORD]
    assert "Verdicts pooled over 3 seeds" in text and "single-seed" not in text
    # the pooled verdict, not the run's own
    assert f"**Seed-dependent.** Claim {pagekit.md_escape(verdicts[0]['key'])}." in text
    # a negative verdict keeps what lost to what beside the pooled margin: the page's own seed's evidence
    assert f"; on this page's seed, {pagekit.md_escape(verdicts[1]['evidence'])}" in text
    assert f"; on this page's seed, {pagekit.md_escape(verdicts[0]['evidence'])}" not in text  # not negative
    assert REGIME in text  # the chapter's own regime words, kept
    saved = json.loads((book / "results" / f"{CH}.json").read_text())["claims"]
    assert saved[0]["reason"] == reason and [v["verdict"] for v in saved] == [v["verdict"] for v in verdicts]


def test_a_run_executed_after_the_summary_is_pooled_to_the_same_page(tmp_path):
    """Seed 0 re-run alone once the sweep's summary was out: its outputs are pooled already (old reasons)."""
    book, page, _ = _book(tmp_path / "before")
    repool.pool_page(page, book)
    again, page_again, _ = _book(tmp_path / "after", after_summary=True)
    assert _outputs(page_again)[0] != _outputs(page)[0]  # the run's own table kept its old reason
    assert repool.pool_page(page_again, again) == 3
    assert _outputs(page_again) == _outputs(page)


def test_a_page_that_is_not_what_its_run_made_is_refused_untouched(tmp_path):
    book, page, verdicts = _book(tmp_path, box=":::{admonition} What holds here\nedited by hand\n:::")
    before = page.read_bytes()
    with pytest.raises(ValueError, match="findings box"):
        repool.pool_page(page, book)
    assert page.read_bytes() == before


def test_without_a_published_sweep_of_the_code_nothing_is_pooled(tmp_path):
    book, page, _ = _book(tmp_path)
    (book / "robustness" / f"{CH}.json").unlink()
    with pytest.raises(ConfigError, match="no published seed sweep of its current code"):
        repool.pool_page(page, book)
