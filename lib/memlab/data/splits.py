"""Forget / retain / held-out splits, reproducible from a seed."""
from __future__ import annotations

import numpy as np
import torch

from memlab.core.config import ConfigError


def class_split(y, forget_classes, num_classes: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Indices (forget, retain) of samples whose label is / is not in ``forget_classes``.

    y: (N,) integer labels. Raises ConfigError for a class outside [0, num_classes).
    """
    y = np.asarray(y.cpu() if isinstance(y, torch.Tensor) else y)
    num_classes = int(y.max()) + 1 if num_classes is None else num_classes
    classes = [forget_classes] if np.isscalar(forget_classes) else list(forget_classes)
    if not classes:
        raise ConfigError("parameter 'forget_classes': must name at least one class")
    bad = [c for c in classes if not (0 <= int(c) < num_classes)]
    if bad:
        raise ConfigError(f"parameter 'forget_class': must be in [0, {num_classes - 1}] (got {bad[0]})")
    forget = np.isin(y, classes)
    return np.flatnonzero(forget), np.flatnonzero(~forget)


def random_split(n: int, fraction: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Indices (chosen, rest) with ``round(fraction * n)`` chosen uniformly at random from ``seed``."""
    if not 0 < fraction < 1:
        raise ConfigError(f"parameter 'fraction': must be in (0, 1) (got {fraction!r})")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    k = int(round(fraction * n))
    return np.sort(perm[:k]), np.sort(perm[k:])
