"""Every chapter's jupytext source and its paired .ipynb hold the same cells."""
from pathlib import Path

import jupytext
import pytest

from memlab.core.chapters import CHAPTERS

REPO = Path(__file__).resolve().parents[1]
SOURCES = sorted((REPO / "notebooks").glob("*.py"))


def test_every_source_is_a_chapter():
    for src in SOURCES:
        assert src.stem in CHAPTERS, f"{src.name} is not registered in memlab.core.chapters"


@pytest.mark.parametrize("src", SOURCES, ids=[s.stem for s in SOURCES])
def test_py_and_ipynb_in_sync(src):
    ipynb = src.with_suffix(".ipynb")
    assert ipynb.exists(), f"{ipynb.name} missing: run jupytext --sync {src}"
    py_nb, ipy_nb = jupytext.read(src), jupytext.read(ipynb)
    strip = lambda nb: [(c.cell_type, c.source.strip(), sorted(c.metadata.get("tags", []))) for c in nb.cells]
    assert strip(py_nb) == strip(ipy_nb), f"{src.name} and {ipynb.name} differ: run jupytext --sync {src}"
    tagged = [c for c in py_nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and 'profile: str = "cpu"' in tagged[0].source


@pytest.mark.parametrize("src", SOURCES, ids=[s.stem for s in SOURCES])
def test_code_lines_fit_the_page_column(src):
    """A reader sees code cells in a column of about 88 characters; longer lines scroll sideways."""
    long = [(i, line) for i, c in enumerate(jupytext.read(src).cells) if c.cell_type == "code"
            for line in c.source.splitlines() if len(line) > 88]
    assert not long, f"{src.name}: code lines over 88 characters (cell, line): {long[:3]}"
