"""The registry of unlearning methods: name -> function(model, splits, cfg) -> model.

Each method also records how it treats BatchNorm during unlearning, which
decides whether it corrupts running statistics (train mode: forget data flows
through the EMA) or misaligns them (eval mode: weights move, statistics stay).

Every registered function is guarded: a result with a NaN/inf weight, buffer or logit
raises :class:`memlab.science.unlearning._common.UnlearningDiverged` naming the method, so a
diverged model is never scored (its argmax would read as class 0).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch
from torch import nn

BN_MODES = ("train", "eval", "mixed", "n/a")


@dataclass
class Splits:
    """Data an unlearning method may use; images (N, C, H, W) normalised, labels (N,) int64."""

    forget_x: torch.Tensor
    forget_y: torch.Tensor
    retain_x: torch.Tensor
    retain_y: torch.Tensor
    num_classes: int


@dataclass(frozen=True)
class Method:
    name: str
    fn: Callable[[nn.Module, Splits, Mapping[str, Any]], nn.Module]
    bn_mode: str
    doc: str


_REGISTRY: dict[str, Method] = {}


def register(name: str, bn_mode: str):
    """Decorator adding an unlearning function to the registry under ``name``."""
    if bn_mode not in BN_MODES:
        raise ValueError(f"parameter 'bn_mode': must be one of {BN_MODES} (got {bn_mode!r})")

    def deco(fn):
        if name in _REGISTRY and _REGISTRY[name].fn.__wrapped__ is not fn:
            raise ValueError(f"unlearning method {name!r} is registered twice")
        guarded = _guarded(name, fn)
        _REGISTRY[name] = Method(name, guarded, bn_mode, (fn.__doc__ or "").strip().split("\n")[0])
        return guarded

    return deco


def _guarded(name: str, fn):
    """``fn`` that fails loudly (UnlearningDiverged, naming the method) instead of returning a
    model with NaN/inf weights, buffers or logits on a few retain images."""
    import functools

    from memlab.science.unlearning._common import check_finite

    @functools.wraps(fn)
    def run(model: nn.Module, splits: Splits, cfg: Mapping[str, Any] | None = None) -> nn.Module:
        out = fn(model, splits, cfg)
        check_finite(out, name, splits.retain_x[:64])
        return out

    return run


def _load_all() -> None:
    import importlib
    import pkgutil
    from pathlib import Path

    # The package's folder, read from this file: importing the package here would make the
    # package and its registry import each other.
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if info.name != "registry" and not info.name.startswith("_"):
            importlib.import_module(f"memlab.science.unlearning.{info.name}")


def get(name: str) -> Method:
    """The registered method ``name``; an unknown name raises ValueError listing the allowed ones."""
    _load_all()
    if name not in _REGISTRY:
        raise ValueError(f"parameter 'method': unknown unlearning method {name!r}; allowed: {', '.join(names())}")
    return _REGISTRY[name]


def names() -> list[str]:
    """Names of all registered methods."""
    _load_all()
    return sorted(_REGISTRY)


def bn_mode(name: str) -> str:
    """How method ``name`` treats BatchNorm while it unlearns (its registered ``bn_mode``)."""
    return get(name).bn_mode
