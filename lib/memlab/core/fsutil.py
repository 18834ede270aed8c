"""Files written atomically with the process umask, and cleanup of what killed writers left behind.

Every writer in memlab (cache entries, decoded arrays, tokenizers, results
JSON) writes into a temporary name in the destination folder and renames it
into place, so a reader sees a whole file or none. Temporary names carry the
writer's process id (``.<stem>.tmp-<pid>-<random>``): a later process removes
those whose writer is dead (``kill -9``, the OOM killer) and leaves those of a
live concurrent writer alone. Files and folders are created with ``open`` /
``os.mkdir`` defaults, so the process umask decides their permissions
(``tempfile.mkstemp``/``mkdtemp`` would force 0600/0700).
"""
from __future__ import annotations

import os
import re
import secrets
import shutil
import time
from pathlib import Path
from typing import IO, Callable

_TMP = re.compile(r"\.tmp-(\d+)-[0-9a-f]{8}$")
# Names written by memlab before temporary names carried a pid: the cache's mkdtemp folders
# (".<12 hex>-<8 random>") and mkstemp files ("*.npy.tmp", "*.json.tmp", ".<name>.<random>.tmp").
_LEGACY = re.compile(r"^\.[0-9a-f]{12}-[A-Za-z0-9_]{8}$|\.tmp$")
LEGACY_MAX_AGE_S = 3600.0  # a write takes seconds; an hour-old temporary file has no writer left
PID_REUSE_AGE_S = 24 * 3600.0


def tmp_path(parent: Path, stem: str) -> Path:
    """A fresh temporary name in ``parent`` that names this process (see :func:`clean_orphans`)."""
    return Path(parent) / f".{stem}.tmp-{os.getpid()}-{secrets.token_hex(4)}"


def make_tmp_dir(parent: Path, stem: str) -> Path:
    """A new empty folder in ``parent`` (mode 0777 minus the umask) with a temporary name."""
    Path(parent).mkdir(parents=True, exist_ok=True)
    path = tmp_path(parent, stem)
    os.mkdir(path)
    return path


def write_atomic(path: Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Call ``write(f)`` on a new binary file, then rename it onto ``path`` (umask permissions)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path(path.parent, path.name)
    try:
        with open(tmp, "xb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def append_line(path: str | os.PathLike | None, text: str) -> None:
    """Append ``text`` as one line (whitespace collapsed) to ``path``; nothing when ``path`` is empty.

    For side channels from a chapter's kernel to ``memlab run`` (notices, progress): a failed write
    is ignored, since the run itself must not fail over a message.
    """
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(" ".join(str(text).split()) + "\n")
    except OSError:
        pass


def current_umask() -> int:
    """The process umask (read from /proc on Linux, so no other thread sees it changed)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def apply_umask(folder: Path) -> None:
    """Give the files directly in ``folder`` the umask's permissions (0666 minus it).

    For writers that force 0600, such as safetensors' ``save_file``.
    """
    mode = 0o666 & ~current_umask()
    for child in Path(folder).iterdir():
        if child.is_file() and not child.is_symlink():
            os.chmod(child, mode)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def is_orphan(path: Path, now: float | None = None) -> bool:
    """Whether ``path`` is a temporary file/folder whose writer can no longer finish it."""
    now = time.time() if now is None else now
    try:
        age = now - path.lstat().st_mtime
    except FileNotFoundError:
        return False
    m = _TMP.search(path.name)
    if m:
        return not _pid_alive(int(m.group(1))) or age > PID_REUSE_AGE_S
    return bool(_LEGACY.search(path.name)) and age > LEGACY_MAX_AGE_S


def clean_orphans(folder: Path) -> list[Path]:
    """Remove the orphaned temporary files and folders directly inside ``folder``; return them."""
    removed = []
    try:
        children = list(Path(folder).iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return removed
    now = time.time()
    for child in children:
        if not is_orphan(child, now):
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
        removed.append(child)
    return removed
