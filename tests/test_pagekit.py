"""The page helpers every chapter notebook uses: counts, the closing summary, the cost glue."""

import pytest

from memlab.report import pagekit, paper


def _v(verdict, kind=paper.CLAIM, claim="A claim."):
    return {"key": "k", "claim": claim, "verdict": verdict, "kind": kind, "evidence": ""}


VERDICTS = [_v(paper.REPRODUCED, claim="First holds."), _v(paper.REPRODUCED, claim="Second holds"),
            _v(paper.NOT_REPRODUCED, claim="Third fails"), _v(paper.NOT_JUDGED, claim="Fourth is noise"),
            _v(paper.REPRODUCED, kind=paper.SANITY, claim="By construction")]


def test_counts_name_every_verdict_and_keep_sanity_checks_apart():
    n = pagekit.counts(VERDICTS)
    assert n == {paper.REPRODUCED: 2, paper.NOT_REPRODUCED: 1, paper.OUTSIDE_REGIME: 0, paper.NOT_JUDGED: 1,
                 paper.SEED_DEPENDENT: 0, paper.NOT_RUN: 0, "sanity": 1}
    assert sum(v for k, v in n.items() if k != "sanity") == 4  # claims only


def test_the_closing_summary_groups_claims_by_verdict_in_words():
    text = pagekit.summary_markdown(VERDICTS, "One seed of a small model.")
    assert text.splitlines()[0] == "**What held.** First holds; Second holds."
    assert "**What did not.** Third fails." in text
    assert "**What this run cannot decide.** Fourth is noise." in text
    assert "By construction" not in text  # sanity checks are not findings
    assert text.endswith("One seed of a small model.")
    assert pagekit.summary_markdown([], "") == ""


def test_glued_counts_are_numbers_with_one_name_per_verdict(monkeypatch):
    glued = {}
    monkeypatch.setattr(pagekit, "_glue", lambda name, value: glued.__setitem__(name, value))
    pagekit.glue_counts("99_x", VERDICTS)
    assert glued == {"99_x-n-reproduced": 2, "99_x-n-not-reproduced": 1, "99_x-n-outside-regime": 0,
                     "99_x-n-not-judged": 1, "99_x-n-seed-dependent": 0, "99_x-n-not-run": 0, "99_x-n-sanity": 1}
    assert all(isinstance(v, int) for v in glued.values())


@pytest.mark.parametrize("seconds, shown", [(0, 0.0), (90, 1.5), (599, 10.0), (600, 10.0), (1234, 21.0)])
def test_minutes_round_to_what_a_page_should_show(seconds, shown):
    assert pagekit.minutes(seconds) == shown


def _claim(key, verdict, text, evidence, kind=paper.CLAIM):
    return {"key": key, "claim": text, "verdict": verdict, "kind": kind, "evidence": evidence}


FINDINGS = [_claim("a", paper.REPRODUCED, "Gap of |dF| <= 2 pp", "dF = +1.5 ± 0.3 pp (p_value 0.01)"),
            _claim("b", paper.NOT_JUDGED, "Six of nine methods flip.", "margin -0.1 inside ±0.2"),
            _claim("c", paper.NOT_REPRODUCED, "Not a headline", "x"),
            _claim("s", paper.REPRODUCED, "By construction", "", kind=paper.SANITY)]


def test_the_findings_box_lists_the_headline_claims_with_our_numbers_and_every_count():
    text = pagekit.findings_markdown(FINDINGS, ["b", "a"], regime="Our model knows 66 % (paper ~98 %).")
    lines = text.splitlines()
    assert lines[0] == ":::{admonition} What holds here" and lines[-1] == ":::"
    bullets = [line for line in lines if line.startswith("- ")]
    # headline order; the claim's words and evidence shown as typed (Markdown escaped)
    assert bullets == ["- \u2248 **Not judged.** Six of nine methods flip. *Ours:* margin -0.1 inside ±0.2",
                       "- \u2713 **Reproduced.** Gap of \\|dF\\| \\<= 2 pp. *Ours:* dF = +1.5 ± 0.3 pp (p\\_value 0.01)"]
    assert "**Regime.** Our model knows 66 % (paper ~98 %)." in text  # the chapter's Markdown, headed once
    own = pagekit.findings_markdown(FINDINGS, ["a"], regime="**The regime.** The base reads *no* context.")
    assert "**The regime.** The base reads *no* context." in own and "**Regime.**" not in own
    assert ("Of the paper's 3 claims on this page: 1 reproduced, 1 not reproduced, 0 outside the paper's regime "
            "(our run failed its regime gate), 1 not judged (inside the "
            "noise, or a precondition failed), 0 not run at this profile; 1 sanity check (true by "
            "construction) apart.") in text
    with pytest.raises(ValueError, match=r"headline claims \['zz'\]"):
        pagekit.findings_markdown(FINDINGS, ["zz"])


def test_every_chapter_names_headline_claims_that_it_judges():
    from memlab.core import config
    from memlab.core.chapters import CHAPTERS

    for chapter in CHAPTERS:
        keys = pagekit.headline_keys(chapter)
        claims = {c.key for c in config.chapter_module(chapter).claims()}
        assert 3 <= len(keys) <= 6 and set(keys) <= claims, chapter
        assert len(set(keys)) == len(keys)


def test_md_escape_leaves_plain_text_alone():
    assert pagekit.md_escape("Pearson r = 0.998, p < 0.05") == "Pearson r = 0.998, p \\< 0.05"
    assert pagekit.md_escape("plain words 1-2") == "plain words 1-2"


def _k(key, verdict, evidence="", kind=paper.CLAIM):
    return {"key": key, "claim": f"The full text of {key}.", "verdict": verdict, "kind": kind, "evidence": evidence}


def test_what_holds_says_each_verdict_once_in_words_with_the_gaps_that_keep_claims_out():
    verdicts = [_k("a_held", paper.REPRODUCED), _k("b_failed", paper.NOT_REPRODUCED),
                _k("c_out", paper.OUTSIDE_REGIME, "accuracy 60%, needs 90%; epochs 5, needs 50"),
                _k("d_out", paper.OUTSIDE_REGIME, "accuracy 60%, needs 90%"),
                _k("e_noise", paper.NOT_JUDGED), _k("f_sanity", paper.REPRODUCED, kind=paper.SANITY)]
    short = {"a_held": "A holds", "b_failed": "B fails", "c_out": "C", "d_out": "D"}
    text = pagekit.what_holds_markdown("1. Paper", "chapters/x.ipynb", verdicts, short, "single-seed verdicts")
    assert text.startswith("**[1. Paper](chapters/x.ipynb)** (single-seed verdicts). Held: A holds. ")
    assert "Did not hold, in the paper's regime: B fails." in text
    # the gap keeping both claims out comes first, each gap once
    assert ("2 claims (C; D) lie outside the paper's regime, so our run cannot test them: "
            "accuracy 60%, needs 90%; epochs 5, needs 50.") in text
    assert "(inside the noise, or a precondition failed): The full text of e\\_noise" in text  # no short title
    assert "f_sanity" not in text and "f\\_sanity" not in text  # sanity checks test our code, not the paper
    assert "a_held" not in text and "b_failed" not in text
    hyp = pagekit.what_holds_markdown("6. Lenses", "l.ipynb", verdicts[:2], short, hypotheses=True)
    assert hyp == "**[6. Lenses](l.ipynb)**. Held: A holds. Did not hold: B fails."


def test_every_claim_of_a_paper_chapter_has_a_short_title():
    from memlab.core.chapters import CHAPTERS

    for cid in CHAPTERS:
        keys = {c.key for c in __import__(CHAPTERS[cid].module, fromlist=["claims"]).claims()}
        short = paper.short_titles(cid)
        assert set(short) == keys, (cid, sorted(set(short) ^ keys))
        assert all("_" not in t for t in short.values()), cid  # words, not keys


def test_what_holds_names_at_most_three_claims_outside_the_regime():
    out = [_k(f"o{i}", paper.OUTSIDE_REGIME, "accuracy 60%, needs 90%") for i in range(5)]
    text = pagekit.what_holds_markdown("1. P", "x.ipynb", out, {f"o{i}": f"claim {i}" for i in range(5)})
    assert "5 claims (among them claim 0; claim 1; claim 2) lie outside the paper's regime" in text
    assert "claim 3" not in text
