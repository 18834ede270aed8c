"""Content-addressed cache of trained models and computed tensors.

An entry's key is the SHA-256 of everything that produced it: chapter, stage,
the resolved configuration of that stage and a code version the stage bumps
when its training code changes. An entry is a folder ``<key>/`` holding
``weights.safetensors`` and ``meta.json``; it is written into a temporary
folder and renamed into place, so an interrupted write leaves no entry.

Settings: ``MEMLAB_CACHE`` (folder; default ``<repo>/data/cache/models``) and
``MEMLAB_NO_CACHE=1`` (never read; still write).
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from memlab.config import device, repo_root
from memlab.results import git_commit, to_jsonable


def cache_dir() -> Path:
    """The cache folder (created on first use)."""
    env = os.environ.get("MEMLAB_CACHE")
    path = Path(env).expanduser() if env else repo_root() / "data" / "cache" / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def sibling_dir(name: str) -> Path:
    """A folder beside the model cache (``arrays``, ``tokenizers``), created on first use."""
    path = cache_dir().parent / name
    path.mkdir(parents=True, exist_ok=True)
    return path


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


def _meta(chapter: str, stage: str, config: dict, code_version: str, kind: str) -> dict:
    """What an entry records about how it was produced (its meta.json)."""
    # Not part of the key, but results depend on them: the thread count changes the order of
    # floating-point sums in training, so an entry says how it was made.
    return {
        "chapter": chapter, "stage": stage, "config": to_jsonable(config), "code_version": code_version,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "kind": kind,
        "git_commit": git_commit(), "torch": torch.__version__, "device": device().type,
        "torch_threads": torch.get_num_threads(),
    }


def _warn_if_made_elsewhere(path: Path, chapter: str, stage: str) -> None:
    """Warn when a CPU entry was trained with another torch thread count than this run uses.

    Such an entry is valid, but a fresh training here would give slightly
    different weights, so a cold and a warm run of the chapter would disagree.
    """
    try:
        meta = json.loads((path / "meta.json").read_text())
    except (OSError, ValueError):
        return
    made, now = meta.get("torch_threads"), torch.get_num_threads()
    if meta.get("device") == "cpu" and device().type == "cpu" and made is not None and made != now:
        warnings.warn(f"cache: {chapter}/{stage} entry {path.name[:12]} was trained with {made} torch threads, this "
                      f"run uses {now}; its weights differ slightly from a fresh training here (--no-cache retrains)",
                      stacklevel=3)


def _write_entry(k: str, write: Callable[[Path], None], meta: dict) -> Path:
    """Write an entry through a temporary folder, then rename it into place atomically."""
    final = entry_path(k)
    tmp = Path(tempfile.mkdtemp(prefix=f".{k[:12]}-", dir=cache_dir()))
    try:
        write(tmp)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2, default=repr))
        if final.exists():  # another run finished first; keep its entry
            shutil.rmtree(tmp)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _complete(path: Path) -> bool:
    return (path / "meta.json").exists() and (path / "weights.safetensors").exists()


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
    if enabled() and _complete(path):
        _warn_if_made_elsewhere(path, chapter, stage)
        dev = next(iter(model.parameters()), torch.empty(0)).device
        load_model(model, path / "weights.safetensors", strict=True, device=str(dev))
        model.eval()
        return model
    train(model)
    model.eval()
    meta = _meta(chapter, stage, config, code_version, "model")
    _write_entry(k, lambda tmp: save_model(model, str(tmp / "weights.safetensors")), meta)
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
    if enabled() and _complete(path):
        _warn_if_made_elsewhere(path, chapter, stage)
        return load_file(path / "weights.safetensors")
    tensors = compute()
    if not isinstance(tensors, dict) or not all(isinstance(v, torch.Tensor) for v in tensors.values()):
        raise TypeError("compute() must return a dict of str -> torch.Tensor")
    meta = _meta(chapter, stage, config, code_version, "tensors")
    contiguous = {name: t.detach().contiguous().cpu() for name, t in tensors.items()}
    _write_entry(k, lambda tmp: save_file(contiguous, str(tmp / "weights.safetensors")), meta)
    return tensors
