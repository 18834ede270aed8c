"""Publishing is all or nothing: a run killed at any rename of the publish step leaves the book with
the old page or, once the next memlab command has finished the committed journal, the new one."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memlab.core import publish

REPO = Path(__file__).resolve().parents[1]

# Publishes a prepared run into BOOK and SIGKILLs itself just before its Nth rename/replace.
KILLER = '''
import os, shutil, signal, sys
from pathlib import Path
from memlab.core import fsutil, publish
book, prepared, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
staging = fsutil.make_tmp_dir(book, "staging-ch")  # named after this process, as memlab run names it
for child in prepared.iterdir():
    shutil.copytree(child, staging / child.name)
calls = [0]
def killing(real):
    def call(*args, **kwargs):
        calls[0] += 1
        if calls[0] == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return call
os.rename, os.replace = killing(os.rename), killing(os.replace)
publish.publish(staging, book, "ch")
'''


def _write_page(folder: Path, tag: str, figures: list[str]) -> None:
    for sub, name in publish.page_files("ch"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
        (folder / sub / name).write_text(f"{tag} {sub}")
    for fig in figures:
        (folder / "figures" / "ch").mkdir(parents=True, exist_ok=True)
        (folder / "figures" / "ch" / fig).write_text(tag)


def _page(book: Path) -> tuple:
    """What a reader of the book gets for chapter ``ch``: its two files and its figures."""
    files = tuple((book / sub / name).read_text() if (book / sub / name).exists() else None
                  for sub, name in publish.page_files("ch"))
    figs = book / "figures" / "ch"
    return files + (sorted(p.name for p in figs.iterdir()) if figs.exists() else None,)


CASES = {  # old page's figures (None: no old page), new page's figures
    "figures-replaced": (["old.png", "shared.png"], ["new.png", "shared.png"]),
    "figures-removed": (["old.png"], []),
    "first-publish": (None, ["new.png"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_kill_at_any_rename_leaves_the_old_page_or_the_new_one(tmp_path, case):
    old_figs, new_figs = CASES[case]
    prepared = tmp_path / "prepared"
    _write_page(prepared, "new", new_figs)
    new = _page(prepared)
    env = {**os.environ, "PYTHONPATH": str(REPO / "lib")}
    outcomes = []
    for n in range(1, 20):
        book = tmp_path / f"book-{n}"
        book.mkdir()
        if old_figs is not None:
            _write_page(book, "old", old_figs)
        old = _page(book)
        proc = subprocess.run([sys.executable, "-c", KILLER, str(book), str(prepared), str(n)], env=env)
        committed = (book / ".publish-ch").exists()
        if proc.returncode == 0:
            assert _page(book) == new and not list(book.glob(".*"))  # nothing left behind
            break
        assert proc.returncode == -9
        if not committed:  # killed at or before the commit: the book is untouched
            assert _page(book) == old
        # what the next memlab command (run, render, book) sees after finishing the journal
        assert publish.clean_stale_staging(book) is not None
        assert _page(book) == (new if committed else old), (n, committed)
        assert not list(book.glob(".*")), list(book.glob(".*"))  # no journal, no orphaned staging
        outcomes.append("new" if committed else "old")
    else:
        pytest.fail("the publish never completed")
    assert outcomes[0] == "old" and "new" in outcomes  # killed both before and after the commit


def test_a_page_without_its_results_is_refused_before_the_book_changes(tmp_path):
    book, staging = tmp_path / "book", tmp_path / "book" / ".staging-ch.tmp-1-00000000"
    _write_page(book, "old", ["old.png"])
    old = _page(book)
    (staging / "chapters").mkdir(parents=True)
    (staging / "chapters" / "ch.ipynb").write_text("new")
    with pytest.raises(publish.PublishError, match="results/ch.json"):
        publish.publish(staging, book, "ch")
    assert _page(book) == old and json.dumps(old)
