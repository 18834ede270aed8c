"""The one progress bar every long loop uses.

Bars go to stderr (hidden in the rendered book, visible in a terminal or a live
notebook) and refresh at most every few seconds so executed notebooks stay small. Where stderr
is a log (not a terminal and not a notebook: ``memlab book > book.log 2>&1``) a bar writes plain
lines instead of redrawing: one when it starts, one when it ends, and its state (count, time so
far, time left) at most every :func:`memlab.core.relay.log_every_s` seconds while it is drawn.
``MEMLAB_PROGRESS=0`` turns them off.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Iterable, Iterator

from tqdm.std import tqdm

from memlab.core import relay


class _Relayed(tqdm):
    """A tqdm bar that also hands each refresh to :mod:`memlab.core.relay` (the terminal of memlab run);
    with ``show_here=False`` it draws nothing in the notebook itself."""

    def __init__(self, *args, show_here: bool = True, **kwargs):
        self._show_here = show_here  # before tqdm's __init__, whose first refresh calls display()
        super().__init__(*args, **kwargs)

    _started = False  # whether its started line went out (a class default: tqdm may display during __init__)

    def display(self, msg=None, pos=None):
        if not self._started:  # the stage's first line, which a log shows at once
            self._started = True
            relay.emit(relay.started_line(self.desc, self.total, self.unit))
        relay.emit(self.format_meter(**{**self.format_dict, "ncols": 0}))
        if self._show_here:
            return super().display(msg, pos)
        return True

    def close(self):
        finished = not self.disable and self._started
        done = relay.done_line(self.desc, self.n, self.format_interval(self.format_dict["elapsed"]))
        super().close()
        if finished:
            relay.emit(done)


class _Null:
    """A stream that drops what tqdm writes (its carriage returns and redraws) for a :class:`_Logged` bar."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


class _Logged(tqdm):
    """A tqdm bar for a log: plain lines on ``log`` (a started line, a done line and, between them,
    its state at most every :func:`memlab.core.relay.log_every_s` seconds) and no redraws; tqdm
    itself draws on a :class:`_Null` stream."""

    _started = False  # class defaults: tqdm calls display() from its __init__
    _last = 0.0

    def __init__(self, *args, every_s: float, log=None, **kwargs):
        """``every_s``: seconds between state lines; ``log``: where the lines go (default stderr)."""
        self._log = sys.stderr if log is None else log
        self._every = every_s
        super().__init__(*args, file=_Null(), **kwargs)

    def _line(self, text: str) -> None:
        self._log.write(text + "\n")
        self._log.flush()

    def state(self) -> str:
        """The bar as one line: its own ``bar_format`` where it has one, else count, time so far and time left."""
        d = self.format_dict
        if d.get("bar_format"):  # the caller chose its words (memlab book's status: chapters done, time left)
            # ncols None: tqdm keeps a bar_format only then (0 gives its default meter), and cuts nothing
            return self.format_meter(**{**d, "ncols": None})
        elapsed, n, total, rate = d["elapsed"], d["n"], d["total"], d["rate"]
        rate = rate or (n / elapsed if elapsed and n else None)
        how_far = f"{n:g}/{total:g} ({100 * n / total:.0f}%)" if total else f"{n:g}"
        if total and rate:
            left = f"~{relay.duration((total - n) / rate)} left"
        else:
            left = "time left unknown" if total else "no total to estimate the time left from"
        postfix = f", {d['postfix']}" if d.get("postfix") else ""
        return f"{self.desc}: {how_far}, {relay.duration(elapsed)} so far, {left}{postfix}"

    def display(self, msg=None, pos=None):
        now = time.monotonic()
        if not self._started:
            self._started, self._last = True, now
            self._line(relay.started_line(self.desc, self.total, self.unit))
        elif now - self._last >= self._every:
            self._last = now
            self._line(self.state())
        return True

    def clear(self, nolock=False):
        pass  # nothing was drawn to clear

    def close(self):
        started = not self.disable and self._started
        done = relay.done_line(self.desc, self.n, self.format_interval(self.format_dict["elapsed"]))
        super().close()
        if started:
            self._line(done)


def to_log(stream=None) -> bool:
    """Whether ``stream`` (default stderr) is a log: not a terminal, and not a Jupyter kernel's,
    whose bars a live notebook draws (and an executed one keeps)."""
    stream = sys.stderr if stream is None else stream
    if type(stream).__module__.split(".")[0] == "ipykernel":
        return False
    return not relay.is_terminal(stream)


def progress(iterable: Iterable | None = None, total: int | None = None, desc: str = "", **kwargs) -> tqdm:
    """A tqdm bar on stderr; ``total`` is the number of steps when ``iterable`` is None.

    ``MEMLAB_PROGRESS=0`` hides the bar here; with ``MEMLAB_RELAY`` set (by ``memlab run``) it still
    reaches the run's terminal. Where stderr is a log (:func:`to_log`) the bar writes plain lines
    (:class:`_Logged`).
    """
    hidden = os.environ.get("MEMLAB_PROGRESS", "1") == "0"
    kwargs.setdefault("mininterval", 2.0)
    kwargs.setdefault("dynamic_ncols", False)
    kwargs.setdefault("ncols", 90)
    relayed = bool(os.environ.get(relay.ENV))
    if not relayed and to_log() and not hidden:
        # the interval read before the bar exists: a bad value fails here, naming the variable
        return _Logged(iterable, total=total, desc=desc, leave=False, every_s=relay.log_every_s(), **kwargs)
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
