"""The kernel's progress bars, relayed to the terminal of ``memlab run``.

A chapter runs in a Jupyter kernel whose stderr goes into the notebook, so its tqdm bars
(:func:`memlab.core.progress.progress`) never reach the terminal that started the run. When
``MEMLAB_RELAY`` names a file, every bar also appends its line (description, count, rate, ETA)
to that file each time it refreshes (at most every 2 s) and when it closes. :class:`Follower`,
run by ``memlab run`` beside the kernel, prints each new line prefixed with the chapter; when
no bar has moved for :data:`HEARTBEAT_S` seconds it prints how long the run has been going, so
the terminal is never silent for long. On a terminal the lines overwrite one another; in a log
(``MEMLAB_RUN_PROGRESS=1`` without a terminal) each is its own line.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from memlab.core.fsutil import append_line

ENV = "MEMLAB_RELAY"
HEARTBEAT_S = 10.0


def enabled(stream: TextIO | None = None) -> bool:
    """Relay when ``MEMLAB_RUN_PROGRESS`` says so (1 / 0), else when ``stream`` (stderr) is a terminal."""
    stream = sys.stderr if stream is None else stream
    forced = os.environ.get("MEMLAB_RUN_PROGRESS")
    if forced in ("0", "1"):
        return forced == "1"
    return bool(getattr(stream, "isatty", lambda: False)())


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
    """Print the lines a kernel relays to ``path`` as ``<label>: <line>`` on ``stream`` until stopped."""

    def __init__(self, path: Path, label: str, stream: TextIO | None = None, poll_s: float = 0.5):
        stream = sys.stderr if stream is None else stream  # looked up now: tests and callers redirect it
        self.path, self.label, self.stream, self.poll_s = Path(path), label, stream, poll_s
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._stop, self._tail, self._start = threading.Event(), Tail(self.path), time.monotonic()
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
        """Show the lines written since the last look; whether there were any."""
        lines = self._tail.lines()
        for line in lines:
            self._show(line)
        return bool(lines)

    def _run(self) -> None:
        quiet_since = time.monotonic()
        while not self._stop.wait(self.poll_s):
            now = time.monotonic()
            if self._drain():
                quiet_since = now
            elif now - quiet_since >= HEARTBEAT_S:
                self._show(f"running, {now - self._start:.0f} s so far")
                quiet_since = now
