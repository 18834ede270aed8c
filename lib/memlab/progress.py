"""The one progress bar every long loop uses.

Bars go to stderr (hidden in the rendered book, visible in a terminal or a live
notebook) and refresh at most every few seconds so executed notebooks stay small.
``MEMLAB_PROGRESS=0`` turns them off.
"""
from __future__ import annotations

import os
import sys
from typing import Iterable

from tqdm.std import tqdm


def progress(iterable: Iterable | None = None, total: int | None = None, desc: str = "", **kwargs) -> tqdm:
    """A tqdm bar on stderr; ``total`` is the number of steps when ``iterable`` is None."""
    disable = os.environ.get("MEMLAB_PROGRESS", "1") == "0"
    kwargs.setdefault("mininterval", 2.0)
    kwargs.setdefault("dynamic_ncols", False)
    kwargs.setdefault("ncols", 90)
    return tqdm(iterable, total=total, desc=desc, file=sys.stderr, disable=disable, leave=False, **kwargs)
