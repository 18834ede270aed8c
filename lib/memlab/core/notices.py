"""Warnings raised inside a chapter's kernel that must also reach the terminal of ``memlab run``.

The kernel's own stderr ends up in the notebook (and the book hides it), so a warning such as
"this cache entry is corrupt; rebuilding it" would go unseen. :func:`warn` issues the warning as
usual and, when ``MEMLAB_NOTICES`` names a file (``memlab run`` sets it to one in its staging
folder), appends it there as one line; the runner prints those lines when the kernel is done.
"""
from __future__ import annotations

import os
import re
import warnings
from collections import Counter
from pathlib import Path

from memlab.core.fsutil import append_line

ENV = "MEMLAB_NOTICES"


def warn(message: str, category: type[Warning] = UserWarning, stacklevel: int = 2) -> None:
    """``warnings.warn(message, category)``, and the message as one line in ``$MEMLAB_NOTICES``."""
    warnings.warn(message, category, stacklevel=stacklevel + 1)
    append_line(os.environ.get(ENV), message)


def read(path: Path) -> list[str]:
    """The notices written to ``path``, each once, in order (an absent file: none)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    return list(dict.fromkeys(line for line in lines if line.strip()))


def made_elsewhere(where: str, entry: str, what: str, made: object, now: object) -> str:
    """The notice for a cache entry ``where`` (``chapter/stage``) trained with another ``what``
    (thread count, CPU kernels, compile mode) than this run; :func:`fold` joins many into one line."""
    return (f"cache: {where} entry {entry} was trained with {what} {made}, this run uses {now}; "
            "its weights differ slightly from a fresh training here (--no-cache retrains)")


_ELSEWHERE = re.compile(r"cache: (?P<where>\S+) entry (?P<entry>\S+) was trained with (?P<what>.+) "
                        r"(?P<made>\S+), this run uses (?P<now>\S+); its weights differ slightly from a "
                        r"fresh training here \(--no-cache retrains\)")


def fold(lines: list[str]) -> list[str]:
    """``lines`` with the :func:`made_elsewhere` notices of one cause (what, made, now) joined into one
    line that counts the entries per ``chapter/stage``, at the place of the first; other lines as they are.

    A warm run of a chapter trained elsewhere would otherwise print one line per model (36 for chapter 5).
    """
    groups: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
    slots: list[str | tuple[str, str, str]] = []
    for line in lines:
        m = _ELSEWHERE.fullmatch(line)
        if m is None:
            slots.append(line)
            continue
        cause = (m["what"], m["made"], m["now"])
        if cause not in groups:
            slots.append(cause)
        groups.setdefault(cause, []).append((m["where"], line))
    return [slot if isinstance(slot, str) else _folded(slot, groups[slot]) for slot in slots]


def _folded(cause: tuple[str, str, str], entries: list[tuple[str, str]]) -> str:
    if len(entries) == 1:
        return entries[0][1]
    what, made, now = cause
    per = ", ".join(f"{where} {n}" for where, n in Counter(w for w, _ in entries).items())
    return (f"cache: {len(entries)} entries ({per}) were trained with {what} {made}, this run uses {now}; "
            "their weights differ slightly from a fresh training here (--no-cache retrains)")
