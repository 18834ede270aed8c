"""Profiles, parameter validation, device and dtype choice, seeding.

A chapter declares its parameters once, in ``memlab.experiments.<module>.SPEC``,
as a mapping from name to :class:`Param`. :func:`resolve` fills the named
profile's defaults, checks every value and returns a :class:`Config`; any bad
value raises :class:`ConfigError` naming the parameter and what is allowed,
before any work starts.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

PROFILES: tuple[str, ...] = ("smoke", "cpu", "paper")
DEFAULT_PROFILE = "cpu"

_KINDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false", list: "a list"}


class ConfigError(ValueError):
    """A parameter value that is not allowed; the message names the parameter."""


@dataclass(frozen=True)
class Param:
    """One chapter parameter: its kind, per-profile default and allowed values.

    kind: ``int``, ``float``, ``str``, ``bool`` or ``list``.
    default: one value for every profile, or a dict ``{"smoke": v, "cpu": v, "paper": v}``.
    choices: allowed values of a ``str`` parameter, or of the items of a ``list``.
    low, high: inclusive bounds of a number, or of each numeric list item.
    item: the kind of the items of a ``list`` parameter.
    allow_none: whether ``None`` is a legal resolved value (e.g. "no limit").
    """

    kind: type
    default: Any
    choices: Sequence[Any] | None = None
    low: float | None = None
    high: float | None = None
    item: type | None = None
    allow_none: bool = False
    doc: str = ""

    def default_for(self, profile: str) -> Any:
        if isinstance(self.default, dict) and set(self.default) <= set(PROFILES) and self.default:
            return self.default[profile]
        return self.default


class Config(Mapping[str, Any]):
    """Resolved, validated parameters of one chapter run (read-only).

    Values are reachable as ``cfg.name`` and ``cfg["name"]``; ``cfg.chapter`` and
    ``cfg.profile`` say which chapter and profile produced them.
    """

    def __init__(self, chapter: str, profile: str, values: dict[str, Any]):
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "chapter", chapter)
        object.__setattr__(self, "profile", profile)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"no parameter {name!r} in chapter {self.chapter!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Config is read-only; use cfg.replace(name=value)")

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def replace(self, **changes: Any) -> "Config":
        """A copy with some values changed (not re-validated; for internal sub-runs)."""
        return Config(self.chapter, self.profile, {**self._values, **changes})

    def to_dict(self) -> dict[str, Any]:
        return {"chapter": self.chapter, "profile": self.profile, **self._values}

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"Config({self.chapter!r}, profile={self.profile!r}, {body})"


def _describe(p: Param) -> str:
    if p.kind is list:
        what = f"a list of {_KINDS.get(p.item, 'values')}s" if p.item else "a list"
    else:
        what = _KINDS[p.kind]
    if p.choices is not None:
        what += " from " + ", ".join(map(repr, p.choices))
    if p.low is not None and p.high is not None:
        what += f" in [{p.low}, {p.high}]"
    elif p.low is not None:
        what += f" >= {p.low}"
    elif p.high is not None:
        what += f" <= {p.high}"
    return what


def _check_scalar(name: str, value: Any, kind: type, p: Param) -> Any:
    fail = ConfigError(f"parameter {name!r}: must be {_describe(p)} (got {value!r})")
    if kind is bool:
        if not isinstance(value, (bool, np.bool_)):
            raise fail
        return bool(value)
    if kind is int:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise fail
        value = int(value)
    elif kind is float:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
            raise fail
        value = float(value)
        if not np.isfinite(value):
            raise fail
    elif kind is str:
        if not isinstance(value, str):
            raise fail
    if p.choices is not None and value not in p.choices:
        raise fail
    if kind in (int, float):
        if (p.low is not None and value < p.low) or (p.high is not None and value > p.high):
            raise fail
    return value


def check_value(name: str, value: Any, p: Param) -> Any:
    """Validate one value against its :class:`Param`; return it normalised."""
    if value is None:
        if p.allow_none:
            return None
        raise ConfigError(f"parameter {name!r}: must be {_describe(p)} (got None)")
    if p.kind is list:
        if isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, list) or not value:
            raise ConfigError(f"parameter {name!r}: must be a non-empty {_describe(p)[2:]} (got {value!r})")
        item_kind = p.item or type(value[0])
        return [_check_scalar(name, v, item_kind, p) for v in value]
    return _check_scalar(name, value, p.kind, p)


def chapter_module(chapter: str):
    """The experiments module of a chapter (holds ``SPEC`` and ``CHECKS``)."""
    from memlab.chapters import CHAPTERS

    if chapter not in CHAPTERS:
        raise ConfigError(f"chapter {chapter!r}: must be one of {', '.join(CHAPTERS)}")
    return importlib.import_module(CHAPTERS[chapter].module)


def resolve_spec(
    chapter: str,
    spec: Mapping[str, Param],
    profile: str = DEFAULT_PROFILE,
    checks: Sequence[Callable[[Config], None]] = (),
    **overrides: Any,
) -> Config:
    """Fill profile defaults into ``spec``, apply ``overrides`` and validate.

    An override that is ``None`` means "the profile's default". Unknown names,
    wrong kinds and out-of-range values raise :class:`ConfigError`.
    """
    if profile not in PROFILES:
        raise ConfigError(f"parameter 'profile': must be one of {', '.join(PROFILES)} (got {profile!r})")
    unknown = sorted(set(overrides) - set(spec))
    if unknown:
        raise ConfigError(
            f"parameter {unknown[0]!r}: unknown for chapter {chapter!r}; allowed: {', '.join(sorted(spec))}"
        )
    values = {}
    for name, p in spec.items():
        given = overrides.get(name)
        values[name] = check_value(name, p.default_for(profile) if given is None else given, p)
    cfg = Config(chapter, profile, values)
    for check in checks:
        check(cfg)
    return cfg


def resolve(chapter: str, profile: str = DEFAULT_PROFILE, **overrides: Any) -> Config:
    """Resolve a chapter's parameters for ``profile`` (see :func:`resolve_spec`)."""
    mod = chapter_module(chapter)
    return resolve_spec(chapter, mod.SPEC, profile, getattr(mod, "CHECKS", ()), **overrides)


# ----------------------------------------------------------------------------- paths

def repo_root() -> Path:
    """The repository root (the folder holding ``pyproject.toml``)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").exists() and (parent / "lib" / "memlab").exists():
            return parent
    return Path.cwd()


def data_root() -> Path | None:
    """Root of offline data sets (env ``MEMLAB_DATA_ROOT``), or None if unset."""
    env = os.environ.get("MEMLAB_DATA_ROOT")
    return Path(env).expanduser() if env else None


def require_path(path: str | os.PathLike | None, param: str, what: str = "folder") -> Path:
    """Return ``path`` as a Path, or raise ConfigError naming ``param`` if it does not exist."""
    if path is None or not Path(path).exists():
        raise ConfigError(
            f"parameter {param!r}: {what} {str(path)!r} does not exist; set it (or MEMLAB_DATA_ROOT) "
            "to a folder holding the data, or allow a download"
        )
    return Path(path)


# ----------------------------------------------------------------------------- device, seeding

def device(prefer: str | None = None):
    """CUDA when present (or ``prefer='cpu'`` to force the CPU), else the CPU."""
    import torch

    if prefer == "cpu" or os.environ.get("MEMLAB_DEVICE") == "cpu":
        return torch.device("cpu")
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def autocast(dev) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA; a no-op context on the CPU (fp32 there)."""
    import torch

    if getattr(dev, "type", str(dev)) == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def seed_everything(seed: int, deterministic: bool = True) -> None:
    """Seed Python, NumPy and torch; ask torch for deterministic kernels where it has them."""
    import torch

    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ConfigError(f"parameter 'seed': must be a non-negative integer (got {seed!r})")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
