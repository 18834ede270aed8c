"""The one progress bar every long loop uses.

Bars go to stderr (hidden in the rendered book, visible in a terminal or a live
notebook) and refresh at most every few seconds so executed notebooks stay small.
``MEMLAB_PROGRESS=0`` turns them off.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Iterable, Iterator

from tqdm.std import tqdm

from memlab.core import relay


class _Relayed(tqdm):
    """A tqdm bar that also hands each refresh to :mod:`memlab.core.relay` (the terminal of memlab run);
    with ``show_here=False`` it draws nothing in the notebook itself."""

    def __init__(self, *args, show_here: bool = True, **kwargs):
        self._show_here = show_here  # before tqdm's __init__, whose first refresh calls display()
        super().__init__(*args, **kwargs)

    def display(self, msg=None, pos=None):
        relay.emit(self.format_meter(**{**self.format_dict, "ncols": 0}))
        if self._show_here:
            return super().display(msg, pos)
        return True

    def close(self):
        finished = not self.disable and self.n
        done = f"{self.desc}: done, {self.n} in {self.format_interval(self.format_dict['elapsed'])}"
        super().close()
        if finished:
            relay.emit(done)


def progress(iterable: Iterable | None = None, total: int | None = None, desc: str = "", **kwargs) -> tqdm:
    """A tqdm bar on stderr; ``total`` is the number of steps when ``iterable`` is None.

    ``MEMLAB_PROGRESS=0`` hides the bar here; with ``MEMLAB_RELAY`` set (by ``memlab run``) it still
    reaches the run's terminal.
    """
    hidden = os.environ.get("MEMLAB_PROGRESS", "1") == "0"
    kwargs.setdefault("mininterval", 2.0)
    kwargs.setdefault("dynamic_ncols", False)
    kwargs.setdefault("ncols", 90)
    relayed = bool(os.environ.get(relay.ENV))
    if not relayed:
        return tqdm(iterable, total=total, desc=desc, file=sys.stderr, disable=hidden, leave=False, **kwargs)
    return _Relayed(iterable, total=total, desc=desc, file=sys.stderr, leave=False, show_here=not hidden,
                    **kwargs)


@contextlib.contextmanager
def ticking(bar: tqdm, every_s: float = 2.0) -> Iterator[tqdm]:
    """Redraw ``bar`` every ``every_s`` seconds while the block runs, so its elapsed time moves
    through a step that takes long (the first imports from a cold disk, a render) instead of
    leaving the terminal silent."""
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(every_s):
            bar.refresh()

    thread = threading.Thread(target=tick, name="memlab-tick", daemon=True)
    thread.start()
    try:
        yield bar
    finally:
        stop.set()
        thread.join()
