"""Warnings raised inside a chapter's kernel that must also reach the terminal of ``memlab run``.

The kernel's own stderr ends up in the notebook (and the book hides it), so a warning such as
"this cache entry is corrupt; rebuilding it" would go unseen. :func:`warn` issues the warning as
usual and, when ``MEMLAB_NOTICES`` names a file (``memlab run`` sets it to one in its staging
folder), appends it there as one line; the runner prints those lines when the kernel is done.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

from memlab.fsutil import append_line

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
