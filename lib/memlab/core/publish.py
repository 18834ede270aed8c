"""Publishing a chapter run into the book so that its notebook, results and figures switch together.

A run writes into a staging folder inside the book (``.staging-<chapter>.tmp-<pid>-<hex>``).
Publishing it is a small journal with one commit point:

1. ``publish.json`` is written into the staging folder: what the new page consists of
   (notebook, results JSON, and whether it has figures).
2. **Commit**: the staging folder is renamed to ``.publish-<chapter>`` (one ``rename``).
   Before it, the book holds the old page whole; a kill leaves an orphaned staging folder
   that the next run removes.
3. The new files are moved into place one rename at a time: results, figures (the old
   figure folder first renamed into the journal folder), notebook last; then the journal
   folder is removed.

A kill during step 3 leaves a committed journal. Every command that reads or writes the
book calls :func:`finish_pending` first (``memlab run``, ``render``, ``book``, the
Robustness and scorecard pages), which completes the moves that are left, so what any
memlab command sees is the old page or the new one, never a mix. The moves are
idempotent: a move whose source is gone has been done. A ``flock`` on the book folder
keeps two publishers (or a publisher and a finisher) from interleaving.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
from pathlib import Path

from memlab.core.fsutil import LEGACY_MAX_AGE_S, is_orphan

JOURNAL, PENDING = "publish.json", ".publish-{chapter}"


class PublishError(RuntimeError):
    """The run's outputs cannot be published (a file the page needs is missing)."""


def page_files(chapter: str) -> list[tuple[str, str]]:
    """The page's files as (sub-folder, name), in the order they are moved in (notebook last)."""
    return [("results", f"{chapter}.json"), ("chapters", f"{chapter}.ipynb")]


@contextlib.contextmanager
def locked(book: Path):
    """An exclusive ``flock`` on the book folder itself (no lock file is left behind)."""
    book.mkdir(parents=True, exist_ok=True)
    fd = os.open(book, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def publish(staging: Path, book: Path, chapter: str) -> None:
    """Publish the run in ``staging`` (``chapters/``, ``results/``, ``figures/<chapter>/``) into ``book``.

    Raises :class:`PublishError`, before anything in ``book`` changes, when the
    notebook or the results JSON is missing. ``staging`` must be inside ``book``
    (the commit is a rename, which does not cross file systems).
    """
    staging, book = Path(staging), Path(book)
    for sub, name in page_files(chapter):
        if not (staging / sub / name).is_file():
            raise PublishError(f"chapter {chapter!r}: the run wrote no {sub}/{name} (did it call run.save()?)")
    has_figures = (staging / "figures" / chapter).is_dir()
    (staging / JOURNAL).write_text(json.dumps({"chapter": chapter, "figures": has_figures}))
    with locked(book):
        pending = book / PENDING.format(chapter=chapter)
        if pending.exists():  # an earlier publish of this chapter was killed after its commit
            _finish(pending, book)
        os.rename(staging, pending)  # the commit point
        _finish(pending, book)


def _move(src: Path, dst: Path) -> None:
    if src.exists():
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)


def _finish(pending: Path, book: Path) -> None:
    """Complete a committed publish: move what is left of ``pending`` into ``book``, then remove it."""
    try:
        journal = json.loads((pending / JOURNAL).read_text())
    except FileNotFoundError:  # only the final removal deletes the journal: every move was done
        shutil.rmtree(pending, ignore_errors=True)
        return
    chapter = journal["chapter"]
    old_figures, new_figures = book / "figures" / chapter, pending / "figures" / chapter
    aside = pending / "old-figures"
    sub, name = page_files(chapter)[0]
    _move(pending / sub / name, book / sub / name)
    if journal["figures"]:
        if new_figures.exists():
            if old_figures.exists():
                _move(old_figures, aside)
            _move(new_figures, old_figures)
    elif old_figures.exists():
        _move(old_figures, aside)  # the new page has no figures
    for sub, name in page_files(chapter)[1:]:
        _move(pending / sub / name, book / sub / name)
    shutil.rmtree(pending, ignore_errors=True)


def finish_pending(book: Path) -> list[str]:
    """Complete every committed publish that a killed run left in ``book``; return their chapters."""
    done = []
    for pending in sorted(Path(book).glob(PENDING.format(chapter="*"))):
        if not pending.is_dir():
            continue
        chapter = pending.name[len(".publish-"):]
        with locked(Path(book)):
            if pending.exists():
                _finish(pending, Path(book))
                done.append(chapter)
    return done


def clean_stale_staging(book: Path) -> list[Path]:
    """Finish committed publishes, then remove ``book/.staging-*`` folders of dead runs.

    Staging folders carry the runner's pid (``.staging-<chapter>.tmp-<pid>-<hex>``)
    so a concurrent live run keeps its own; older unnamed ones go after an hour.
    """
    finish_pending(book)
    removed = []
    now = time.time()
    for child in Path(book).glob(".staging-*"):
        legacy = ".tmp-" not in child.name
        stale = (now - child.stat().st_mtime > LEGACY_MAX_AGE_S) if legacy else is_orphan(child, now)
        if stale and child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child)
    return removed
