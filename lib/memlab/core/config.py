"""Profiles, parameter validation, device and dtype choice, seeding.

A chapter declares its parameters once, in ``memlab.experiments.<module>.SPEC``,
as a mapping from name to :class:`Param`. :func:`resolve` fills the named
profile's defaults, checks every value and returns a :class:`Config`; any bad
value raises :class:`ConfigError` naming the parameter and what is allowed,
before any work starts.
"""
from __future__ import annotations

import contextlib
import difflib
import importlib
import math
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

PROFILES: tuple[str, ...] = ("smoke", "cpu", "paper")
DEFAULT_PROFILE = "cpu"
SEED_MAX = 2**32 - 1  # numpy's seed limit; torch's is 2**64 - 1, Python's unbounded
# A chapter's seed parameters stop at 2**31 - 1, so that the seeds derived from them
# (seed + run index, seed + 10_000, ...) stay below SEED_MAX.
SEED_HIGH = 2**31 - 1
CLOSED = ("both", "left", "right", "neither")  # which ends of [low, high] are allowed (scikit-learn Interval)

_KINDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false", list: "a list",
          dict: "a mapping"}
_PLURALS = {int: "integers", float: "numbers", str: "strings", bool: "booleans (true or false)"}


def _num(v: float | None) -> str:
    """A bound as a user would type it: 5, 4294967295, 0.5, 1e-08."""
    return str(v) if isinstance(v, int) or v is None else f"{v:g}"


class ConfigError(ValueError):
    """A parameter value that is not allowed; the message names the parameter."""


@dataclass(frozen=True)
class Param:
    """One chapter parameter: its kind, per-profile default and allowed values.

    kind: ``int``, ``float``, ``str``, ``bool``, ``list`` or ``dict`` (a group of sub-parameters).
    default: one value for every profile, or a dict ``{"smoke": v, "cpu": v, "paper": v}``.
    choices: allowed values of a ``str`` parameter, or of the items of a ``list``.
    low, high: bounds of a number, or of each numeric list item (``None``: unbounded).
    closed: which bounds are allowed values, as scikit-learn's ``Interval``: ``"both"`` [low, high],
        ``"left"`` [low, high), ``"right"`` (low, high], ``"neither"`` (low, high).
    item: the kind of the items of a ``list`` parameter.
    allow_none: whether ``None`` is a legal resolved value (e.g. "no limit").
    finite: refuse ``inf`` (and always ``nan``) for a float; ``False`` lets an unbounded side take ``inf``.
    schema: for ``kind=dict`` only: group -> key -> :class:`Param`, the sub-parameters a user sets as
        ``GROUP.KEY`` (e.g. ``SalUn.lr``); ``default`` (per profile) holds only the keys a profile
        changes from the schema's defaults, so a resolved group is exactly what the code received before.
    unique: for ``kind=list``: refuse a repeated item (the default; a list paired item by item with
        another, such as one subset size per holdout fraction, sets it False).
    """

    kind: type
    default: Any
    choices: Sequence[Any] | None = None
    low: float | None = None
    high: float | None = None
    item: type | None = None
    allow_none: bool = False
    doc: str = ""
    closed: str = "both"
    finite: bool = True
    schema: Mapping[str, Mapping[str, "Param"]] | None = None
    unique: bool = True

    def __post_init__(self) -> None:
        if self.closed not in CLOSED:
            raise ValueError(f"Param: closed must be one of {', '.join(CLOSED)} (got {self.closed!r})")
        if (self.kind is dict) != (self.schema is not None):
            raise ValueError("Param: kind=dict needs a schema, and only kind=dict has one")

    def default_for(self, profile: str) -> Any:
        if isinstance(self.default, dict) and set(self.default) <= set(PROFILES) and self.default:
            return self.default[profile]
        return self.default

    def in_range(self, value: float) -> bool:
        """Whether a number lies in [low, high] with the ends ``closed`` says."""
        if value != value:  # nan
            return False
        if self.low is not None:
            if value < self.low or (value == self.low and self.closed in ("right", "neither")):
                return False
        if self.high is not None:
            if value > self.high or (value == self.high and self.closed in ("left", "neither")):
                return False
        return True

    def range_text(self) -> str:
        """The allowed range in words: ``in (0, 1)``, ``>= 1``, ``> 0`` or ``''``."""
        lo_in, hi_in = self.closed in ("both", "left"), self.closed in ("both", "right")
        lo, hi = _num(self.low), _num(self.high)
        if self.low is not None and self.high is not None:
            return f"in {'[' if lo_in else '('}{lo}, {hi}{']' if hi_in else ')'}"
        if self.low is not None:
            return f"{'>=' if lo_in else '>'} {lo}"
        if self.high is not None:
            return f"{'<=' if hi_in else '<'} {hi}"
        return ""


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
    """What a value of ``p`` must be, in words: 'a list of integers >= 1', 'a number in (0, 1)'."""
    if p.kind is list:
        what = f"a list of {_PLURALS.get(p.item, 'values')}" if p.item else "a list"
    else:
        what = _KINDS[p.kind]
    if p.choices is not None:
        what += " from " + ", ".join(map(repr, p.choices))
    rng = p.range_text()
    return f"{what} {rng}" if rng else what


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
        if math.isnan(value) or (p.finite and math.isinf(value)):
            raise fail
    elif kind is str:
        if not isinstance(value, str):
            raise fail
    if p.choices is not None and value not in p.choices:
        raise fail
    if kind in (int, float) and not p.in_range(value):
        raise fail
    return value


def _check_group(name: str, value: Any, p: Param) -> dict:
    """A ``kind=dict`` value: {group: {key: value}} with every key checked against ``p.schema``."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"parameter {name!r}: must be a mapping of {', '.join(p.schema)} to their settings "
                          f"(got {value!r})")
    out = {}
    for group, sub in value.items():
        if group not in p.schema:
            raise ConfigError(f"parameter {group!r}: not one of {name}'s groups {', '.join(p.schema)}")
        if not isinstance(sub, Mapping):
            raise ConfigError(f"parameter {group!r}: must map keys of {group} to values (got {sub!r})")
        out[group] = {}
        for key, v in sub.items():
            if key not in p.schema[group]:
                raise ConfigError(f"parameter '{group}.{key}': {group} has no setting {key!r}; "
                                  f"allowed: {', '.join(p.schema[group])}")
            out[group][key] = check_value(f"{group}.{key}", v, p.schema[group][key])
    return out


def check_value(name: str, value: Any, p: Param) -> Any:
    """Validate one value against its :class:`Param`; return it normalised."""
    if value is None:
        if p.allow_none:
            return None
        raise ConfigError(f"parameter {name!r}: must be {_describe(p)} (got None)")
    if p.kind is dict:
        return _check_group(name, value, p)
    if p.kind is list:
        if isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, list) or not value:
            raise ConfigError(f"parameter {name!r}: must be a non-empty {_describe(p)[2:]} (got {value!r})")
        item_kind = p.item or type(value[0])
        items = [_check_scalar(name, v, item_kind, p) for v in value]
        seen = [v for i, v in enumerate(items) if v in items[:i]]
        if seen and p.unique:  # a repeated item would run the same thing twice and count it twice
            raise ConfigError(f"parameter {name!r}: {seen[0]!r} is listed more than once (got {value!r})")
        return items
    return _check_scalar(name, value, p.kind, p)


def find_param(spec: Mapping[str, Param], name: str) -> tuple[str | None, Param | None]:
    """The SPEC entry behind a name a user typed: ``('lr', Param)``, or for ``'SalUn.lr'`` the group
    parameter holding SalUn (``('method_hparams', Param of SalUn.lr)``); ``(None, None)`` if unknown."""
    if name in spec:
        return name, spec[name]
    group, dot, key = name.partition(".")
    if dot:
        for pname, p in spec.items():
            if p.kind is dict and group in p.schema and key in p.schema[group]:
                return pname, p.schema[group][key]
    return None, None


def parameter_names(spec: Mapping[str, Param]) -> list[str]:
    """Every name ``-p NAME VALUE`` accepts: SPEC's names, a group's keys as ``GROUP.KEY``."""
    names = []
    for pname, p in spec.items():
        if p.kind is dict:
            names += [f"{g}.{k}" for g, keys in p.schema.items() for k in keys]
        else:
            names.append(pname)
    return names


def unknown_parameter(chapter: str, spec: Mapping[str, Param], name: str) -> ConfigError:
    """The error for a name that is no parameter of ``chapter`` (with the nearest names)."""
    names = parameter_names(spec)
    near = difflib.get_close_matches(name, names, n=3)
    hint = f"did you mean {', '.join(near)}? " if near else ""
    plain = [n for n in names if "." not in n]
    groups = sorted({n.split(".")[0] for n in names if "." in n})
    more = f" and {', '.join(g + '.KEY' for g in groups)}" if groups else ""
    return ConfigError(f"parameter {name!r}: not a parameter of chapter {chapter!r}; {hint}allowed: "
                       f"{', '.join(sorted(plain))}{more} (memlab list shows them all)")


_INT = re.compile(r"[-+]?(0|[1-9][0-9]*)")
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|(0|[1-9][0-9]*)(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_INF = re.compile(r"[-+]?\.(inf|Inf|INF)")
_NAN = re.compile(r"\.(nan|NaN|NAN)")


def _scalar_from_text(name: str, text: str, kind: type | None, p: Param, whole: str) -> Any:
    """One scalar typed on the command line, read by the rules of YAML 1.2's core schema, strictly:
    integers without leading zeros, floats with optional exponent (``1e-3``) or ``.inf``/``-.inf``,
    ``true``/``false``; anything else (``012``, ``3 #x``, ``0x1f``) is refused, never reinterpreted."""
    fail = ConfigError(f"parameter {name!r}: must be {_describe(p)} (got {whole!r})")
    t = text.strip()
    if kind is bool:
        if t in ("true", "True", "TRUE"):
            return True
        if t in ("false", "False", "FALSE"):
            return False
        raise fail
    if kind is int:
        if not _INT.fullmatch(t):
            raise fail
        return int(t)
    if kind is float:
        if _INT.fullmatch(t) or _FLOAT.fullmatch(t):
            return float(t)
        if _INF.fullmatch(t):
            return -math.inf if t.startswith("-") else math.inf
        if _NAN.fullmatch(t):
            return math.nan  # refused by the range check, with the parameter's name
        raise fail
    # a string: quotes are optional; inside a list they protect commas
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        t = t[1:-1]
    if not t:
        raise fail
    return t


def _split_list(name: str, text: str, p: Param) -> list[str]:
    """The items of ``[a, b, c]`` (commas inside quotes kept), or a refusal naming ``name``."""
    t = text.strip()
    if not (t.startswith("[") and t.endswith("]")):
        raise ConfigError(f"parameter {name!r}: must be {_describe(p)}, written like [a, b] (got {text!r})")
    body, items, cur, quote = t[1:-1], [], "", None
    for ch in body:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == ",":
            items.append(cur)
            cur = ""
            continue
        cur += ch
    if quote:
        raise ConfigError(f"parameter {name!r}: unclosed quote in {text!r}")
    items.append(cur)
    if items == [""]:
        return []
    if any(not i.strip() for i in items):
        raise ConfigError(f"parameter {name!r}: empty item in {text!r}")
    return items


def parse_text(name: str, text: str, p: Param) -> Any:
    """A value typed on the command line for parameter ``p`` (checked by :func:`check_value` after).

    ``none`` is accepted only where ``p.allow_none``; an empty value is refused (leave ``-p`` out to
    get the profile's default).
    """
    if not isinstance(text, str):
        return text
    t = text.strip()
    if not t:
        raise ConfigError(f"parameter {name!r}: empty value; leave -p {name} out for the profile's default, "
                          f"or give {_describe(p)}")
    if p.allow_none and t in ("none", "None", "null", "~"):
        return None
    if p.kind is dict:
        raise ConfigError(f"parameter {name!r}: set one key at a time, e.g. -p {next(iter(p.schema))}."
                          f"{next(iter(next(iter(p.schema.values()))))} VALUE")
    if p.kind is list:
        kind = p.item or str
        return [_scalar_from_text(name, i, kind, p, text) for i in _split_list(name, text, p)]
    return _scalar_from_text(name, t, p.kind, p, text)


def chapter_module(chapter: str):
    """The experiments module of a chapter (holds ``SPEC`` and ``CHECKS``)."""
    from memlab.core.chapters import CHAPTERS

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
    if "profile" in overrides:
        raise ConfigError("parameter 'profile': choose it with --profile (or resolve's profile argument), "
                          "not as a parameter")
    flat, grouped = {}, {}
    for name, value in overrides.items():
        pname, _ = find_param(spec, name)
        if pname is None:
            raise unknown_parameter(chapter, spec, name)
        if pname == name:
            flat[name] = value
        else:  # GROUP.KEY of a dict parameter
            group, _, key = name.partition(".")
            grouped.setdefault(pname, {}).setdefault(group, {})[key] = value
    values = {}
    for name, p in spec.items():
        given = flat.get(name)
        values[name] = check_value(name, p.default_for(profile) if given is None else given, p)
        if p.kind is dict and (name in grouped or given is not None):
            values[name] = _merge_group(p, p.default_for(profile), {**(given or {})}, grouped.get(name, {}))
    cfg = Config(chapter, profile, values)
    for check in checks:
        check(cfg)
    return cfg


def _merge_group(p: Param, default: Mapping, *layers: Mapping) -> dict:
    """The profile's group settings with ``layers`` ({group: {key: value}}) applied and checked.

    A key the profile does not set, given the schema's own default, is left out: the code
    receives exactly the same dict as without the override (and cache keys stay the same).
    """
    out = {g: dict(kv) for g, kv in default.items()}
    for layer in layers:
        for group, kv in _check_group("", layer, p).items() if layer else ():
            cur = out.setdefault(group, {})
            for key, v in kv.items():
                if key not in cur and v == p.schema[group][key].default:
                    continue
                cur[key] = v
    return out


def resolve(chapter: str, profile: str = DEFAULT_PROFILE, **overrides: Any) -> Config:
    """Resolve a chapter's parameters for ``profile`` (see :func:`resolve_spec`)."""
    mod = chapter_module(chapter)
    return resolve_spec(chapter, mod.SPEC, profile, getattr(mod, "CHECKS", ()), **overrides)


def machine_memory_bytes() -> int:
    """Physical memory of this machine in bytes (``MEMLAB_MEMORY_GIB`` overrides it, e.g. for a container)."""
    env = os.environ.get("MEMLAB_MEMORY_GIB")
    if env:
        return int(float(env) * 2**30)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not POSIX: assume a large machine
        return 2**40


def available_cores() -> int:
    """CPU cores this process may use: its CPU affinity, capped by a cgroup CPU quota (containers, batch jobs)."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:  # cgroup v2: "max 100000" (no cap) or "<quota> <period>" in microseconds
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            n = min(n, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, n)


MAX_THREADS = 1024


def thread_count(threads: int | None = None) -> int:
    """Threads a chapter's kernel computes with: ``threads`` (``--threads``), else ``OMP_NUM_THREADS``, else every core.

    Bad input raises :class:`ConfigError` naming what the user typed: ``--threads`` or the
    environment variable, and the allowed range 1..``MAX_THREADS``.
    """
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= MAX_THREADS:
            raise ConfigError(f"parameter 'threads': must be an integer from 1 to {MAX_THREADS} "
                              f"(got {threads!r}); this machine has {available_cores()} cores")
        return threads
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env:
        if not env.isdigit() or not 1 <= int(env) <= MAX_THREADS:
            raise ConfigError(f"environment variable OMP_NUM_THREADS: must be an integer from 1 to "
                              f"{MAX_THREADS} (got {env!r}); unset it to use every core, or pass --threads N")
        return int(env)
    return available_cores()


COMPILE_ENV = "MEMLAB_COMPILE"  # "1" turns torch.compile of the long training loops on (memlab run --compile)


def compile_enabled() -> bool:
    """Whether long training loops may use ``torch.compile`` (``MEMLAB_COMPILE=1``; default no).

    Off by default: with the model's NCHW layout kept (``memlab.models.train.COMPILE_OPTIONS``) it measured
    1.06-1.07x for chapter 1, compile included, below issue 27's 1.15x bar
    (``benchmarks/results/compile.json``).

    Bad input raises :class:`ConfigError` naming the variable, what was typed and what is allowed.
    """
    env = os.environ.get(COMPILE_ENV, "").strip().lower()
    if env in ("1", "true", "yes", "on"):
        return True
    if env in ("", "0", "false", "no", "off"):
        return False
    raise ConfigError(f"environment variable {COMPILE_ENV}: must be 1 (compile long training loops) or 0 "
                      f"(train eagerly) (got {env!r})")


def require_memory(param: str, need: float, what: str) -> None:
    """Refuse before any work when ``need`` bytes exceed this machine's memory; the message names
    ``param`` (the parameter the user typed), the estimate and the limit."""
    have = machine_memory_bytes()
    if need > have:
        raise ConfigError(f"parameter {param!r}: {what} needs about {need / 2**30:,.1f} GiB, more than the "
                          f"{have / 2**30:,.1f} GiB of memory this machine has")


# ----------------------------------------------------------------------------- paths

def is_project_folder(folder: Path) -> bool:
    """Whether ``folder`` is a memlab project: it holds ``pyproject.toml`` and ``book/`` (a clone of
    the repository, a private course repository, or a student bundle of ``memlab exercises build``)."""
    return (folder / "pyproject.toml").is_file() and (folder / "book").is_dir()


def installed_repository() -> Path | None:
    """The clone the running package was installed from (an editable install: ``lib/memlab`` inside
    it), or None when memlab was installed from a wheel."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").is_file() and (parent / "lib" / "memlab").is_dir():
            return parent
    return None


_ROOT_NOTICES: set[Path] = set()


def repo_root() -> Path:
    """The project folder memlab acts on: the nearest folder at or above the working directory
    that holds ``pyproject.toml`` and ``book/``.

    Outside every project folder it falls back to the repository the package was installed from
    (else the working directory) and says so in one line on stderr, once per process and folder:
    with one shared install, each clone builds, runs and publishes into itself.
    """
    try:
        cwd = Path.cwd().resolve()
    except OSError:  # the working directory was deleted under us
        cwd = None
    for folder in (cwd, *cwd.parents) if cwd else ():
        if is_project_folder(folder):
            return folder
    fallback = installed_repository() or cwd or Path.home()
    if fallback not in _ROOT_NOTICES:
        _ROOT_NOTICES.add(fallback)
        import sys

        where = "the repository memlab was installed from" if fallback != cwd else "the working directory"
        print(f"memlab: no project folder (pyproject.toml and book/) at or above {cwd}; using {where}, "
              f"{fallback}", file=sys.stderr)
    return fallback


def data_root() -> Path | None:
    """Root of offline data sets (env ``MEMLAB_DATA_ROOT``), or None if unset."""
    env = os.environ.get("MEMLAB_DATA_ROOT")
    return Path(env).expanduser() if env else None


def path_kind(text: str | os.PathLike) -> str | None:
    """``'folder'``, ``'file'``, ``'other'`` or None (nothing there) for a path a user typed.

    A name the file system cannot hold (longer than NAME_MAX, a NUL byte) is "nothing there"
    rather than an OSError, so a model id or folder name of any length gets a one-line answer.
    """
    try:
        path = Path(text).expanduser()
        if path.is_dir():
            return "folder"
        if path.is_file():
            return "file"
        return "other" if path.exists() or path.is_symlink() else None
    except (OSError, ValueError):  # ENAMETOOLONG, embedded NUL
        return None


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


BF16_ENV = "MEMLAB_CPU_BF16"  # auto (default), 1 or 0: bf16 autocast of the fast CIFAR recipe on a CPU
BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of CPUs that compute bf16 natively


def cpu_flags() -> set[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (empty where it cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            line = next((ln for ln in f if ln.startswith("flags")), "")
    except OSError:
        return set()
    return set(line.partition(":")[2].split())


def cpu_bf16() -> bool:
    """Whether the fast CIFAR recipe trains in bf16 autocast on a CPU (``MEMLAB_CPU_BF16``).

    ``auto`` (the default): where the CPU computes bf16 natively (AVX512_BF16 or AMX), which halves
    an epoch there; elsewhere (AVX2-only CPUs emulate bf16, slower than fp32) fp32. ``1``/``0`` force
    it. Results record the choice (``cpu_bf16`` in their provenance). Bad input raises
    :class:`ConfigError` naming the variable, what was typed and what is allowed.
    """
    env = os.environ.get(BF16_ENV, "auto").strip().lower()
    if env in ("", "auto"):
        return bool(cpu_flags() & set(BF16_FLAGS))
    if env in ("1", "true", "yes", "on"):
        return True
    if env in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"environment variable {BF16_ENV}: must be auto (bf16 where the CPU computes it "
                      f"natively), 1 (always) or 0 (fp32) (got {env!r})")


def autocast(dev, cpu_bf16: bool = False) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA, and on the CPU when ``cpu_bf16``; otherwise a no-op context (fp32)."""
    import torch

    kind = getattr(dev, "type", str(dev))
    if kind == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    if kind == "cpu" and cpu_bf16:
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def seed_everything(seed: int, deterministic: bool = True) -> None:
    """Seed Python, NumPy and torch; ask torch for deterministic kernels where it has them."""
    import torch

    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or not 0 <= seed <= SEED_MAX:
        raise ConfigError(f"parameter 'seed': must be an integer in [0, {SEED_MAX}] (got {seed!r})")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
