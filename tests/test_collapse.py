"""Render collapses every chapter code cell behind its toggle (issue 28: code out of the reader's way)."""
from __future__ import annotations

import nbformat

from memlab.report import book


def test_every_code_cell_is_collapsed_unless_tagged_otherwise(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"),
                nbformat.v4.new_code_cell("x = 1"),
                nbformat.v4.new_code_cell("y = 2", metadata={"tags": ["show-input"]}),
                nbformat.v4.new_code_cell("z = 3", metadata={"tags": ["remove-input"]}),
                nbformat.v4.new_code_cell("w = 4", metadata={"tags": ["parameters", "hide-input"]})]
    path = tmp_path / "c.ipynb"
    nbformat.write(nb, path)
    assert book.collapse_code_cells(path) is True
    cells = nbformat.read(path, as_version=4).cells
    assert [c.metadata.get("tags", []) for c in cells] == [
        [], ["hide-input"], ["show-input"], ["remove-input"], ["parameters", "hide-input"]]
    assert [c.source for c in cells] == ["# Title", "x = 1", "y = 2", "z = 3", "w = 4"]  # only tags change
    assert book.collapse_code_cells(path) is False  # idempotent
