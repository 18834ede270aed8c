"""What this process's training loops compiled: the state a cache entry and a results file record.

The loops of :mod:`memlab.models.train` report here and :mod:`memlab.core.cache` and
:mod:`memlab.core.results` read it, so the core layer records it without importing the models layer.
"""
from __future__ import annotations

from memlab.core.config import compile_enabled

FAILED: list[str] = []  # the error of a failed compile: this process trains eagerly from then on
LONG_LOOPS = {"compiled": 0, "eager": 0}  # long loops (>= COMPILE_MIN_STEPS) trained so far, by mode


def compiled_steps() -> bool:
    """Whether this process's long loops compile: what provenance records."""
    return compile_enabled() and not FAILED


def long_loops() -> tuple[int, int]:
    """(compiled, eager) counts of the long training loops this process has run so far."""
    return LONG_LOOPS["compiled"], LONG_LOOPS["eager"]


def loop_mode(before: tuple[int, int]) -> str | None:
    """How the long loops since ``before`` (a :func:`long_loops` reading) trained: "compiled" if any
    compiled, "eager" if some were long but ran eagerly, None if none was long enough to compile."""
    compiled, eager = (now - then for now, then in zip(long_loops(), before))
    return "compiled" if compiled else ("eager" if eager else None)
