"""The kernel's progress bars, relayed to the terminal of ``memlab run``.

A chapter runs in a Jupyter kernel whose stderr goes into the notebook, so its tqdm bars
(:func:`memlab.core.progress.progress`) never reach the terminal that started the run. When
``MEMLAB_RELAY`` names a file, every bar also appends its line (description, count, rate, ETA)
to that file each time it refreshes (at most every 2 s), one :func:`started_line` when it first
draws and one :func:`done_line` when it closes. :class:`Follower`, run by ``memlab run`` beside
the kernel, prints them prefixed with the chapter. On a terminal each line overwrites the last,
and when no bar has moved for :data:`HEARTBEAT_S` seconds it prints how long the run has been
going. In a log (stderr not a terminal: ``memlab book > book.log 2>&1``, ``nohup``, CI) it prints
plain lines instead: each stage line (a bar starting or ending) at once, and every
:func:`log_every_s` seconds one heartbeat with the time so far, the estimated time left and the
latest bar line (what runs, how far).
"""
from __future__ import annotations

import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Callable, TextIO

from memlab.core.fsutil import append_line

ENV = "MEMLAB_RELAY"
HEARTBEAT_S = 10.0  # seconds without a bar moving before a terminal is told the run goes on
# Seconds between a log's heartbeat lines (stderr not a terminal), overridable by the variable (a
# test sets a fraction of a second): 30 keeps at least one line a minute even when a line is late.
LOG_EVERY_ENV, LOG_EVERY_S = "MEMLAB_PROGRESS_EVERY_S", 30.0
# a stage line: "<what>: started (...)" or "<what>: done, ..." (see started_line, done_line)
_STAGE = re.compile(r": (started( \(.*\))?|done(,| in) .*)$")


def enabled(stream: TextIO | None = None) -> bool:
    """Relay when ``MEMLAB_RUN_PROGRESS`` says so (1 / 0), else when ``stream`` (stderr) is a
    terminal, else (a log) unless ``MEMLAB_PROGRESS=0`` hides progress (as the test suite does)."""
    stream = sys.stderr if stream is None else stream
    forced = os.environ.get("MEMLAB_RUN_PROGRESS")
    if forced in ("0", "1"):
        return forced == "1"
    return is_terminal(stream) or os.environ.get("MEMLAB_PROGRESS", "1") != "0"


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal (else lines go to a log, a pipe or a capture)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def log_every_s() -> float:
    """Seconds between a log's heartbeat lines: ``$MEMLAB_PROGRESS_EVERY_S``, else :data:`LOG_EVERY_S`.

    A value that is not a positive number raises :class:`memlab.core.config.ConfigError` naming it."""
    raw = os.environ.get(LOG_EVERY_ENV, "").strip()
    if not raw:
        return LOG_EVERY_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        from memlab.core.config import ConfigError

        raise ConfigError(f"{LOG_EVERY_ENV}: must be a positive number of seconds (got {raw!r})")
    return value


def duration(seconds: float) -> str:
    """``seconds`` for a log line: ``45 s``, ``3 min 12 s``, ``2 h 05 min``."""
    s = max(0, round(float(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def started_line(desc: str, total: float | None = None, unit: str = "it") -> str:
    """The stage line a bar relays when it first draws: ``<desc>: started (<total> steps)``."""
    if not total:
        return f"{desc}: started"
    count = f"{total:g}" if isinstance(total, float) else str(total)
    return f"{desc}: started ({count} {('step' if total == 1 else 'steps') if unit == 'it' else unit})"


def done_line(desc: str, n: float, elapsed: str) -> str:
    """The stage line a bar relays when it closes: ``<desc>: done, <n> in <elapsed>`` (a bar that
    counted nothing, such as one only timing a step: ``<desc>: done in <elapsed>``)."""
    if not n:
        return f"{desc}: done in {elapsed}"
    return f"{desc}: done, {n:g} in {elapsed}" if isinstance(n, float) else f"{desc}: done, {n} in {elapsed}"


def is_stage(line: str) -> bool:
    """Whether a relayed line is a stage line (:func:`started_line`, :func:`done_line`)."""
    return bool(_STAGE.search(line))


def time_left(elapsed_s: float, expected_s: float | None) -> str:
    """The time-left field of a heartbeat, from the estimated wall seconds ``expected_s`` of the run."""
    if not expected_s:
        return "time left not estimated (no recorded run at these parameters)"
    if elapsed_s <= expected_s:
        return f"~{duration(expected_s - elapsed_s)} left of ~{duration(expected_s)} estimated"
    return f"over the estimated ~{duration(expected_s)} by {duration(elapsed_s - expected_s)}, time left unknown"


def emit(line: str) -> None:
    """Append one progress line to ``$MEMLAB_RELAY`` (nothing when unset or unwritable)."""
    append_line(os.environ.get(ENV), line)


def last_line(path: Path, tail_bytes: int = 4096) -> str | None:
    """The last complete, non-empty line relayed to ``path`` (None when there is none yet)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - tail_bytes))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    lines = [line for line in text[: text.rfind("\n") + 1].splitlines() if line.strip()]
    return lines[-1] if lines else None


def latest_lines(paths: dict[str, Path], width: int = 70) -> str:
    """``<label>: <line>`` for each file's :func:`last_line` (files with none left out), each cut to
    ``width`` characters, joined by ``; ``: several runs' progress on one status line."""
    out = []
    for label, path in paths.items():
        line = last_line(path)
        if line:
            text = f"{label}: {line}"
            out.append(text if len(text) <= width else text[: width - 3] + "...")
    return "; ".join(out)


class Tail:
    """The complete, non-empty lines appended to a file since the last call; a line still being
    written waits for the next call."""

    def __init__(self, path: Path):
        self.path, self.offset = Path(path), 0

    def lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        return [line for line in complete.decode("utf-8", "replace").replace("\r", "\n").splitlines()
                if line.strip()]


class Follower:
    """Print the lines a kernel relays to ``path`` as ``<label>: <line>`` on ``stream`` until stopped.

    ``expected_s``: the run's estimated wall seconds (:func:`memlab.core.costs.estimate`), None when
    unknown; a log's heartbeat says the time left from it. ``note(seconds so far)``: more for the
    heartbeat, or None (``memlab book``: the book's time left). ``poll_s``: seconds between looks at the file.
    """

    def __init__(self, path: Path, label: str, stream: TextIO | None = None, poll_s: float = 0.5,
                 expected_s: float | None = None, note: Callable[[float], str | None] | None = None):
        stream = sys.stderr if stream is None else stream  # looked up now: tests and callers redirect it
        self.path, self.label, self.stream, self.expected_s, self.note = Path(path), label, stream, expected_s, note
        self.tty = is_terminal(stream)
        self.every_s = None if self.tty else log_every_s()  # read now: a bad value stops the run before it starts
        # a log looks often enough to keep its heartbeat's interval
        self.poll_s = poll_s if self.tty else min(poll_s, self.every_s / 2)
        self._stop, self._tail, self._start = threading.Event(), Tail(self.path), time.monotonic()
        self._latest: str | None = None  # a log's latest bar line, shown by its next heartbeat
        self._thread = threading.Thread(target=self._run, name="memlab-relay", daemon=True)

    def __enter__(self) -> "Follower":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._drain()
        if self.tty:
            self.stream.write("\r\033[K")  # leave the terminal's line clean for what follows
            self.stream.flush()

    def _show(self, text: str) -> None:
        line = f"{self.label}: {text}"
        self.stream.write(f"\r\033[K{line}" if self.tty else line + "\n")
        self.stream.flush()

    def _drain(self) -> bool:
        """Show the lines written since the last look (a log: only the stage lines, keeping the
        latest bar line for the heartbeat); whether there were any."""
        lines = self._tail.lines()
        for line in lines:
            if self.tty or is_stage(line):
                self._show(line)
            if not self.tty:
                self._latest = line
        return bool(lines)

    def heartbeat(self) -> str:
        """A log's heartbeat line (without the label): time so far, time left, the latest bar line."""
        elapsed = time.monotonic() - self._start
        note = self.note(elapsed) if self.note else None
        note = f" ({note})" if note else ""
        if self._latest is None:
            now = ""
        else:  # after a stage's done line nothing of it runs any more
            ended = is_stage(self._latest) and ": done" in self._latest
            now = f"; {'after' if ended else 'now'} {self._latest}"
        return f"running {duration(elapsed)}, {time_left(elapsed, self.expected_s)}{note}{now}"

    def _run(self) -> None:
        quiet_since = last_beat = time.monotonic()
        while not self._stop.wait(self.poll_s):
            now = time.monotonic()
            moved = self._drain()
            if not self.tty:  # a log: a heartbeat every every_s, whatever the bars do
                if now - last_beat >= self.every_s:
                    self._show(self.heartbeat())
                    last_beat = now
            elif moved:
                quiet_since = now
            elif now - quiet_since >= HEARTBEAT_S:
                self._show(f"running, {now - self._start:.0f} s so far")
                quiet_since = now
