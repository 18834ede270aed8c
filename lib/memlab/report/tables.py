"""How the book's tables look in a notebook: pandas DataFrames as edited tables, not dumps.

:func:`install` registers an HTML formatter for DataFrames in the running IPython kernel
(``memlab.report.paper`` calls it on import, so every chapter gets it):

* a missing value (NaN: a method the paper does not report, or one this run did not
  produce) shows as "–", and the table gets a one-line note saying so;
* a default 0..N-1 index that labels nothing is not shown;
* column and index labels read as words: ``out_acc`` shows as "out acc", ``Acc_f`` as
  Acc with a subscript f (:func:`reader_label`);
* the table sits in a ``memlab-table-wrap`` container that scrolls sideways on a narrow
  screen instead of widening the page (``book/_static/memlab.css``).

Numbers keep the precision the notebook asked for (``df.round(n)`` or pandas' display options).
"""
from __future__ import annotations

import copy
import re

import pandas as pd
from pandas.io.formats.style import Styler

MISSING = "\u2013"  # en dash
NOTE = f"{MISSING} marks a value the paper does not report or this run did not produce."


def _default_index(index: pd.Index) -> bool:
    return (isinstance(index, pd.RangeIndex) and index.name is None and index.start == 0
            and index.step == 1)


_HEADER = re.compile(r"(<th[^>]*>)(.*?)(</th>)", re.DOTALL)
_SUBSCRIPT = re.compile(r"\b([A-Z][A-Za-z]*)_([a-z]+)\b")  # Acc_f: a quantity with a subscript
_SNAKE = re.compile(r"(?<=[A-Za-z0-9])_(?=[A-Za-z0-9])")   # out_acc: a variable name


def reader_label(text: str) -> str:
    """A column or index label as a reader sees it (HTML): ``Acc_f`` -> Acc<sub>f</sub>, ``out_acc`` -> out acc."""
    return _SNAKE.sub(" ", _SUBSCRIPT.sub(r"\1<sub>\2</sub>", text))


def reader_headers(html: str) -> str:
    """Every ``<th>`` of ``html`` with :func:`reader_label` applied: no variable name reaches a reader."""
    return _HEADER.sub(lambda m: m.group(1) + reader_label(m.group(2)) + m.group(3), html)


def to_html(df: pd.DataFrame) -> str:
    """A DataFrame as the book shows it (see the module docstring)."""
    missing = bool(df.isna().to_numpy().any()) if df.size else False
    html = reader_headers(df.to_html(na_rep=MISSING, index=not _default_index(df.index), border=0,
                                     classes="memlab-table"))
    note = f'<p class="memlab-table-note">{NOTE}</p>' if missing else ""
    return f'<div class="memlab-table-wrap">{html}</div>{note}'


_MISSING_CELL = re.compile(r">\s*(?:nan|NaN|<NA>|&lt;NA&gt;|None)\s*</td>")


def styler_to_html(styler: Styler) -> str:
    """A pandas Styler as the book shows it: same styling, NaN as "–" (with the note), no 0..N index."""
    styler = copy.copy(styler)
    if _default_index(styler.data.index):
        styler.hide(axis="index")
    html, n = _MISSING_CELL.subn(f">{MISSING}</td>", reader_headers(styler.to_html()))
    note = f'<p class="memlab-table-note">{NOTE}</p>' if n else ""
    return f'<div class="memlab-table-wrap">{html}</div>{note}'


def install() -> bool:
    """Register :func:`to_html` for DataFrames in the running IPython kernel; False outside one."""
    pd.set_option("styler.format.na_rep", MISSING)
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython ships with the notebook stack
        return False
    ip = get_ipython()
    if ip is None:
        return False
    html = ip.display_formatter.formatters["text/html"]
    html.for_type(pd.DataFrame, to_html)
    html.for_type(Styler, styler_to_html)
    return True
