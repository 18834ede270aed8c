"""Content-addressed cache of trained models and computed tensors, checked on every load.

An entry's key is the SHA-256 of everything that produced it: chapter, stage,
the resolved configuration of that stage and a code version the stage bumps
when its training code changes. An entry is a folder ``<key>/`` holding
``weights.safetensors`` and ``meta.json``; the meta records the weights'
size and SHA-256.

Writing: the entry is built in a temporary folder named after the writing
process (``.<key12>.tmp-<pid>-<random>``) and renamed into place. A rename
onto an existing non-empty folder fails atomically, so of two concurrent
writers of one key the first wins and the second discards its copy after
checking the winner's; no reader ever sees half an entry. Temporary folders of
dead writers (``kill -9``) are removed when the next process first uses the
cache. Files get the process umask. A process about to train or compute an
entry holds the key's lock (:func:`key_lock`), so a second process that needs
the same entry waits and loads it instead of training it again.

Loading: the weights are hashed and compared with the meta. A corrupt or
incomplete entry (truncated, flipped bytes, no ``meta.json``, unreadable) is
reported once as a :class:`CacheWarning` naming its path, moved aside into
``<cache>/.corrupt/`` and rebuilt. The checksum is required: an entry whose
meta lacks ``size`` or ``sha256``, or gives them in the wrong type, is corrupt
too, so deleting them cannot make an altered file trusted. Checksums are
written only when an entry is written, never by a load.

Settings: ``MEMLAB_CACHE`` (folder; default ``<repo>/data/cache/models``) and
``MEMLAB_NO_CACHE=1`` (never read; still write).
"""
from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import errno
import hashlib
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from memlab.core import costs, notices
from memlab.core.compiling import compiled_steps, long_loops, loop_mode
from memlab.core.config import device, repo_root
from memlab.core.fsutil import apply_umask, clean_orphans, make_tmp_dir, tmp_path
from memlab.core.results import git_commit, to_jsonable

WEIGHTS, META = "weights.safetensors", "meta.json"
_CLEANED: set[Path] = set()


class CacheWarning(UserWarning):
    """A cache entry was found corrupt or incomplete and is being rebuilt."""


class CorruptEntry(Exception):
    """An entry failed its check; the message says why."""


def cache_path() -> Path:
    """Where the cache folder is (``MEMLAB_CACHE`` or ``<repo>/data/cache/models``), without creating it."""
    env = os.environ.get("MEMLAB_CACHE")
    return Path(env).expanduser() if env else repo_root() / "data" / "cache" / "models"


def cache_dir() -> Path:
    """The cache folder (created on first use; dead writers' temporary folders removed once per process)."""
    path = cache_path()
    path.mkdir(parents=True, exist_ok=True)
    _clean_once(path)
    return path


def sibling_dir(name: str) -> Path:
    """A folder beside the model cache (``arrays``, ``tokenizers``), created on first use."""
    path = cache_dir().parent / name
    path.mkdir(parents=True, exist_ok=True)
    _clean_once(path)
    return path


def _clean_once(path: Path) -> None:
    if path not in _CLEANED:
        _CLEANED.add(path)
        clean_orphans(path)


def enabled() -> bool:
    """False when ``MEMLAB_NO_CACHE`` is set to 1 (re-train, ignore entries)."""
    return os.environ.get("MEMLAB_NO_CACHE", "0") not in ("1", "true", "yes")


def key(chapter: str, stage: str, config: dict, code_version: str = "1") -> str:
    """SHA-256 hex digest of what produced an entry (order of dict keys does not matter)."""
    payload = json.dumps(
        {"chapter": chapter, "stage": stage, "config": to_jsonable(config), "code": str(code_version)},
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def entry_path(k: str) -> Path:
    return cache_dir() / k


def _meta(chapter: str, stage: str, config: dict, code_version: str, kind: str, mode: str | None = None) -> dict:
    """What an entry records about how it was produced (its meta.json); ``mode``: how its long
    training loops ran (:func:`memlab.core.compiling.loop_mode`)."""
    # Not part of the key, but results depend on them: the thread count changes the order of
    # floating-point sums in training, so an entry says how it was made.
    return {
        "chapter": chapter, "stage": stage, "config": to_jsonable(config), "code_version": code_version,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "kind": kind,
        "git_commit": git_commit(), "torch": torch.__version__, "device": device().type,
        "torch_threads": torch.get_num_threads(), "cpu_isa": torch.backends.cpu.get_cpu_capability(),
        "torch_compile": mode,
    }


def _warn_if_made_elsewhere(meta: dict, path: Path, chapter: str, stage: str) -> None:
    """Warn when a CPU entry was trained with another thread count, vector ISA or compile mode than this run.

    Such an entry is valid, but a fresh training here would give slightly
    different weights (other summation orders), so a cold and a warm run of the
    chapter would disagree.
    """
    if meta.get("device") != "cpu" or device().type != "cpu":
        return
    for what, made, now in (("torch threads", meta.get("torch_threads"), torch.get_num_threads()),
                            ("CPU kernels (ISA)", meta.get("cpu_isa"), torch.backends.cpu.get_cpu_capability()),
                            ("training loops", meta.get("torch_compile"), "compiled" if compiled_steps() else "eager")):
        if made is not None and made != now:
            notices.warn(notices.made_elsewhere(f"{chapter}/{stage}", path.name[:12], what, made, now),
                         stacklevel=4)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """SHA-256 hex digest of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _write_meta(folder: Path, meta: dict) -> None:
    tmp = tmp_path(folder, META)
    with open(tmp, "x") as f:
        f.write(json.dumps(meta, indent=2, default=repr))
    os.replace(tmp, folder / META)


def _write_entry(k: str, write: Callable[[Path], None], meta: dict) -> Path:
    """Build an entry in a temporary folder, then rename it into place (first writer wins)."""
    final = entry_path(k)
    tmp = make_tmp_dir(cache_dir(), k[:12])
    try:
        write(tmp)
        apply_umask(tmp)  # safetensors writes 0600; entries follow the umask like every other file
        weights = tmp / WEIGHTS
        _write_meta(tmp, {**meta, "size": weights.stat().st_size, "sha256": sha256_file(weights)})
        try:
            os.rename(tmp, final)  # fails if ``final`` is a non-empty folder: never merges two entries
        except OSError as err:
            if err.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # another writer finished first; keep its entry
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _complete(path: Path) -> bool:
    return (path / META).exists() and (path / WEIGHTS).exists()


def has(k: str) -> bool:
    """Whether the entry of key ``k`` is in the cache (complete; its checksum is checked on load)."""
    return _complete(entry_path(k))


def verify(path: Path) -> dict:
    """The meta of entry ``path`` after checking its weights' size and SHA-256; raise CorruptEntry.

    Both checks are required: a meta without ``size`` (an int) or ``sha256``
    (64 hex digits) cannot vouch for its weights, so the entry is corrupt.
    """
    meta_path, weights = path / META, path / WEIGHTS
    if not weights.is_file():
        raise CorruptEntry(f"no {WEIGHTS}")
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        raise CorruptEntry(f"no {META}") from None
    except (OSError, ValueError) as err:
        raise CorruptEntry(f"unreadable {META} ({type(err).__name__})") from None
    if not isinstance(meta, dict):
        raise CorruptEntry(f"{META} is not an object")
    want_size, want_sha = meta.get("size"), meta.get("sha256")
    if not isinstance(want_size, int) or isinstance(want_size, bool):
        raise CorruptEntry(f"{META} has no valid size of {WEIGHTS} (found {want_size!r})")
    if not isinstance(want_sha, str) or not re.fullmatch(r"[0-9a-f]{64}", want_sha):
        raise CorruptEntry(f"{META} has no valid SHA-256 of {WEIGHTS}")
    size = weights.stat().st_size
    if want_size != size:
        raise CorruptEntry(f"{WEIGHTS} has {size} bytes, {META} says {want_size} (truncated?)")
    if sha256_file(weights) != want_sha:
        raise CorruptEntry(f"{WEIGHTS} does not match the SHA-256 in {META} (modified or damaged)")
    return meta


def _set_aside(path: Path, reason: str) -> None:
    """Report a bad entry once and move it into ``<cache>/.corrupt/`` so that it is rebuilt."""
    aside_dir = cache_dir() / ".corrupt"
    aside_dir.mkdir(exist_ok=True)
    aside = aside_dir / f"{path.name}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    try:
        os.rename(path, aside)
    except FileNotFoundError:  # another process moved it first
        return
    notices.warn(f"cache: entry {path} is corrupt or incomplete ({reason}); moved to {aside} and rebuilding "
                 "it", CacheWarning, stacklevel=4)


#: Keys whose lock this process holds (:func:`key_lock`), innermost last.
_HELD: list[str] = []


@contextlib.contextmanager
def key_lock(k: str, chapter: str, stage: str) -> Iterator[None]:
    """Hold key ``k``'s lock (``<cache>/.locks/<key>.lock``, ``flock``) while this process trains it.

    Two runs of a sweep that need one model (chapter 1's Original for every forget class) would
    otherwise both train it; with the lock the second waits, saying so once on stderr, and then
    loads what the first wrote (the caller looks again inside the lock). A process already holding
    a lock never waits for another (nested stages train in any order across processes, so waiting
    there could deadlock): it trains the key itself, as without a lock. The kernel releases a lock
    when its process dies, so a killed run never blocks the next. Without ``fcntl`` (Windows) there
    is no lock.
    """
    if fcntl is None:
        yield
        return
    folder = cache_dir() / ".locks"
    folder.mkdir(exist_ok=True)
    with open(folder / f"{k}.lock", "a+b") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if _HELD:
                yield
                return
            print(f"cache: another process is training {chapter}/{stage} (entry {k[:12]}); waiting for it "
                  "to finish, then loading its result", file=sys.stderr, flush=True)
            fcntl.flock(f, fcntl.LOCK_EX)
        _HELD.append(k)
        try:
            yield
        finally:
            _HELD.remove(k)
            fcntl.flock(f, fcntl.LOCK_UN)


def _load_checked(path: Path, chapter: str, stage: str, load: Callable[[Path], Any]) -> Any | None:
    """``load(path)`` of a verified entry, or None (entry set aside) when it is missing or bad."""
    if not path.exists():
        return None
    try:
        meta = verify(path)
        _warn_if_made_elsewhere(meta, path, chapter, stage)
        result = load(path)
    except FileNotFoundError:  # moved aside by a concurrent process between the checks
        return None
    except CorruptEntry as err:
        _set_aside(path, str(err))
        return None
    except Exception as err:  # noqa: BLE001 - safetensors, shape or dtype errors: the entry cannot serve
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        _set_aside(path, f"cannot be loaded: {type(err).__name__}: {first}")
        return None
    return result


def load_or_train(
    chapter: str,
    stage: str,
    config: dict,
    build: Callable[[], torch.nn.Module],
    train: Callable[[torch.nn.Module], Any],
    code_version: str = "1",
) -> torch.nn.Module:
    """Return ``build()`` with cached weights, or train it with ``train(model)`` and cache it.

    BatchNorm running statistics and other buffers are part of the entry. The
    model is returned in eval mode on the device it was built on.
    """
    k = key(chapter, stage, config, code_version)
    model = build()
    path = entry_path(k)

    def cached(rebuild: bool) -> torch.nn.Module | None:
        """The model with the entry's weights, or None; ``rebuild``: build afresh after a miss, as a
        failed partial load may have changed some weights (only when a load was tried, so that a
        plain miss draws the same initialisation as before the lock existed)."""
        nonlocal model
        dev = next(iter(model.parameters()), torch.empty(0)).device

        def load(p: Path) -> torch.nn.Module:
            load_model(model, p / WEIGHTS, strict=True, device=str(dev))
            return model

        tried = path.exists()
        if _load_checked(path, chapter, stage, load) is not None:
            model.eval()
            costs.loaded(k, stage)
            return model
        if rebuild or tried:
            model = build()
        return None

    return _load_or_make(k, chapter, stage, cached,
                         lambda: _train_and_write(k, chapter, stage, config, code_version, model, train))


#: What this process trained with the cache off (``--no-cache``), by key: such a run ignores every entry
#: it finds, but shares what it trains between the stages that ask for it, as a cold run from an empty
#: cache does (chapter 3's memorised adapter serves its K sweep, GA and retain variant). Kept in memory,
#: not re-read: an older entry of the same key keeps its place on disk (first writer wins).
_MADE_HERE: dict[str, Any] = {}


def _load_or_make(k: str, chapter: str, stage: str, cached: Callable[[bool], Any], make: Callable[[], Any]) -> Any:
    """``cached(rebuild)``'s entry, else ``make()`` under the key's lock (:func:`key_lock`), looking again
    once the lock is held: another process may have written the entry while this one waited. With the
    cache off, ``make()`` unless this process made it already: then a copy of that (:data:`_MADE_HERE`;
    a copy, as a load from disk is, so one stage's changes never reach another)."""
    if not enabled():
        if k not in _MADE_HERE:
            _MADE_HERE[k] = make()
        return copy.deepcopy(_MADE_HERE[k])
    if (found := cached(True)) is not None:
        return found
    with key_lock(k, chapter, stage):
        if (found := cached(False)) is not None:
            return found
        return make()


#: The checkpoint file of the entry being trained now (:func:`checkpoint_path`), innermost last.
_TRAINING: list[Path] = []
PARTIAL = "partial"  # beside the model cache: one folder per entry whose training has not finished


def checkpoint_path() -> Path | None:
    """Where the training that is making a cache entry right now may keep its checkpoint, so that a
    killed run resumes it: ``<cache>/../partial/<key>/checkpoint.pt``, removed once the entry is
    written; a training may keep other files of its own beside it (chapter 2 its early checkpoint). None
    outside :func:`load_or_train` and :func:`load_or_compute`, and with the cache off (``--no-cache``
    trains afresh)."""
    return _TRAINING[-1] if _TRAINING else None


@contextlib.contextmanager
def _offering_checkpoint(k: str) -> Iterator[Path | None]:
    """While making entry ``k``, offer its checkpoint file (:func:`checkpoint_path`); yields the
    entry's partial folder (None with the cache off), which the caller removes once the entry is written."""
    partial = sibling_dir(PARTIAL) / k if enabled() else None
    if partial is not None:
        _TRAINING.append(partial / "checkpoint.pt")
    try:
        yield partial
    finally:
        if partial is not None:
            _TRAINING.pop()


def _train_and_write(k: str, chapter: str, stage: str, config: dict, code_version: str,
                     model: torch.nn.Module, train: Callable[[torch.nn.Module], Any]) -> torch.nn.Module:
    costs.begin(k, stage)
    before = long_loops()
    with _offering_checkpoint(k) as partial:
        train(model)
    costs.end(k)
    model.eval()
    meta = _meta(chapter, stage, config, code_version, "model", loop_mode(before))
    _write_entry(k, lambda tmp: save_model(model, str(tmp / WEIGHTS)), meta)
    if partial is not None:
        shutil.rmtree(partial, ignore_errors=True)
    return model


def load_or_compute(
    chapter: str,
    stage: str,
    config: dict,
    compute: Callable[[], dict[str, torch.Tensor]],
    code_version: str = "1",
) -> dict[str, torch.Tensor]:
    """Return cached tensors for this key, or ``compute()`` them and cache them."""
    k = key(chapter, stage, config, code_version)
    path = entry_path(k)

    def cached(_rebuild: bool) -> dict[str, torch.Tensor] | None:
        tensors = _load_checked(path, chapter, stage, lambda p: load_file(p / WEIGHTS))
        if tensors is not None:
            costs.loaded(k, stage)
        return tensors

    return _load_or_make(k, chapter, stage, cached,
                         lambda: _compute_and_write(k, chapter, stage, config, code_version, compute))


def _compute_and_write(k: str, chapter: str, stage: str, config: dict, code_version: str,
                       compute: Callable[[], dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    costs.begin(k, stage)
    before = long_loops()
    with _offering_checkpoint(k) as partial:  # a training inside compute() may checkpoint and resume
        tensors = compute()
    costs.end(k)
    if not isinstance(tensors, dict) or not all(isinstance(v, torch.Tensor) for v in tensors.values()):
        raise TypeError("compute() must return a dict of str -> torch.Tensor")
    meta = _meta(chapter, stage, config, code_version, "tensors", loop_mode(before))
    contiguous = {name: t.detach().contiguous().cpu() for name, t in tensors.items()}
    _write_entry(k, lambda tmp: save_file(contiguous, str(tmp / WEIGHTS)), meta)
    if partial is not None:
        shutil.rmtree(partial, ignore_errors=True)
    return tensors
