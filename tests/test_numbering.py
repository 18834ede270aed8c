"""One numbering: the book numbers its figures and tables per chapter ("Figure 2.1", via Sphinx
numfig); a paper's own numbers appear only as "paper Table 1" / "(paper Figure 1b)".

A bare "Table 1" in a chapter reads as the book's, so every mention of a numbered table or
figure in a chapter source (markdown, captions, comments and the strings code cells display)
must either follow the word "paper" or be the book's own chapter-prefixed table number
("Table 3.2" in chapter 3; the book's figures are referenced with {numref}, never typed).
"""
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = sorted((REPO / "notebooks").glob("0[1-6]_*.py"))

NUMBERED = re.compile(r"\b(?P<kind>tables?|figures?|figs?\.)\s+(?P<num>\d+(?:\.\d+)?[a-z]?)\b", re.I)
# what may sit between "paper" and the number's word: line breaks, comment marks, the quotes
# and "+" / f-prefix of a string continued over two lines
GLUE = ' \t\n#"\'+f'


def bare_numbers(text: str, chapter: int) -> list[str]:
    """Mentions of a numbered table/figure in ``text`` that are neither "paper ..." nor the book's."""
    bad = []
    for m in NUMBERED.finditer(text):
        before = text[: m.start()].rstrip(GLUE)
        if re.search(r"\bpaper$", before, re.I):
            continue
        book_table = m["kind"].lower().startswith("table") and re.fullmatch(rf"{chapter}\.\d+", m["num"])
        if book_table:
            continue
        line = text.count("\n", 0, m.start()) + 1
        bad.append(f"line {line}: {text[max(0, m.start() - 30):m.end() + 10]!r}")
    return bad


def chapter_of(src: Path) -> int:
    return int(src.name[:2])


def test_six_chapter_sources_found():
    assert len(SOURCES) == 6, [s.name for s in SOURCES]


@pytest.mark.parametrize("src", SOURCES, ids=[s.stem for s in SOURCES])
def test_paper_numbers_are_marked_as_the_papers(src):
    bad = bare_numbers(src.read_text(encoding="utf-8"), chapter_of(src))
    assert not bad, (
        f"{src.name}: write a paper's number as 'paper Table N' / '(paper Figure Nb)' and refer to "
        f"the book's figures with {{numref}}: {bad[:5]}"
    )


@pytest.mark.parametrize(
    "text",
    [
        "# ## Table 1: telling in- from out-of-training subsets",
        'display(regime.round(2).rename_axis("Original model (Table 3 proxies)"))',
        "# (Table 3: 92.7-99.4%). They were tuned on Acc_r alone",
        "# steps would not memorise more (Section 3.2, Figure 5). It gates",
        "# The paper's Figure 2 shows Q-Skew above the baselines",
        "# as Figure 2 of the paper shows",
        "# see Fig. 4 and Figures 7, 9, 14",
        "# our own figure, Figure 2.1, typed instead of a numref",
        "# a table of another chapter, Table 1.2",
    ],
)
def test_bare_numbers_are_caught(text):
    assert bare_numbers(text, chapter=2)


@pytest.mark.parametrize(
    "text",
    [
        "# ## Telling in- from out-of-training subsets (paper Table 1)",
        'rename_axis("Original model (paper Table 3 proxies)")',
        "# on its own grid of N (paper Figure 1b); dotted: entropy",
        "# (left, paper\n# Figure 14; no law fitted) and paper Tables 3 and 4",
        '        "... beside paper"\n        f" Table 2 rows"',
        "# **Table 2.3.** the book's own table of this chapter",
        "# the dotted line in {numref}`fig-02-size`; {numref}`Figure %s <fig-02-size>`",
        'paper.table(CH, "table1"); ch.figure1a_table(cfg)',
    ],
)
def test_marked_and_book_numbers_pass(text):
    assert not bare_numbers(text, chapter=2)
