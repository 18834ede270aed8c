"""Pieces the chapter-1 unlearning methods share: hyperparameters, batches, BN mode, losses, the step loop.

Every method has the signature ``fn(model, splits, cfg) -> nn.Module``. It
returns a new model and leaves ``model`` untouched. ``splits`` holds the
forget and retain training tensors (images (N, C, H, W) normalised, labels
(N,) int64); ``cfg`` is a dict (or any mapping) of the method's
hyperparameters, whose allowed keys and defaults each module documents in its
``DEFAULTS``. Missing keys take the default; unknown keys are an error.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Iterator, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from memlab.core.progress import progress


def hparams(cfg: Mapping[str, Any] | None, defaults: Mapping[str, Any], method: str) -> dict[str, Any]:
    """Merge ``cfg`` into ``defaults``; raise ValueError on an unknown key or a negative number."""
    given = dict(cfg or {})
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ValueError(f"{method}: unknown hyperparameter {unknown[0]!r}; allowed: {', '.join(sorted(defaults))}")
    hp = {**defaults, **given}
    for k, v in hp.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0:
            raise ValueError(f"{method}: hyperparameter {k!r} must be >= 0 (got {v!r})")
    return hp


def fresh_copy(model: nn.Module) -> nn.Module:
    """A deep copy with gradients cleared, so the caller's model is never modified."""
    net = copy.deepcopy(model)
    for p in net.parameters():
        p.grad = None
        p.requires_grad_(True)
    return net


def device_of(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def set_bn_mode(model: nn.Module, mode: str) -> None:
    """'train': BN normalises with batch statistics and updates its running stats (EMA);
    'eval': BN uses and keeps its stored running statistics."""
    if mode not in ("train", "eval"):
        raise ValueError(f"bn mode must be 'train' or 'eval' (got {mode!r})")
    model.train(mode == "train")


def index_stream(n: int, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Endless (B,) index batches over range(n): reshuffled each pass, last partial batch kept."""
    if n == 0:
        raise ValueError("cannot draw batches from an empty split")
    while True:
        perm = torch.randperm(n, generator=generator)
        for i in range(0, n, batch_size):
            yield perm[i : i + batch_size]


def sgd(model: nn.Module, lr: float, momentum: float = 0.9, weight_decay: float = 5e-4, params=None):
    return torch.optim.SGD(model.parameters() if params is None else params, lr=lr, momentum=momentum,
                           weight_decay=weight_decay)


def distill_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL(teacher || student) on temperature-softened (B, K) logits, scaled by T^2 (Hinton et al.)."""
    t = temperature
    return F.kl_div(F.log_softmax(student_logits / t, 1), F.softmax(teacher_logits / t, 1),
                    reduction="batchmean") * t * t


def take(x: torch.Tensor, idx: torch.Tensor, dev: torch.device) -> torch.Tensor:
    return x[idx].to(dev, non_blocking=True)


def optimise_steps(net: nn.Module, batches: Iterator[torch.Tensor], opt: torch.optim.Optimizer, steps: int,
                   loss_fn: Callable[[int, torch.Tensor], torch.Tensor], *, desc: str, bn_mode: str = "train",
                   edit_grads: Callable[[], None] | None = None,
                   on_step: Callable[[int, nn.Module], None] | None = None) -> nn.Module:
    """The unlearning loop the methods share: ``steps`` steps of ``opt`` on ``loss_fn(step, idx)``.

    ``batches`` yields (B,) index tensors (see :func:`index_stream`); ``loss_fn(step, idx)`` returns
    the scalar loss tensor of step ``step`` (0-based) on the examples ``idx``. Each step clears the
    gradients, back-propagates, calls ``edit_grads()`` if given (e.g. to project the gradients), then
    steps the optimiser and calls ``on_step(step + 1, net)`` if given (1-based). BN runs in
    ``bn_mode`` (see :func:`set_bn_mode`); ``net`` is updated in place and returned in eval mode.
    """
    set_bn_mode(net, bn_mode)
    for step in progress(range(steps), desc=desc):
        loss = loss_fn(step, next(batches))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if edit_grads is not None:
            edit_grads()
        opt.step()
        if on_step is not None:
            on_step(step + 1, net)
    return net.eval()


def ce_steps(net: nn.Module, x: torch.Tensor, y: torch.Tensor, batches: Iterator[torch.Tensor],
             opt: torch.optim.Optimizer, steps: int, *, desc: str, ascent: bool = False,
             on_step=None, bn_mode: str = "train") -> nn.Module:
    """``steps`` optimiser steps on the cross-entropy of (x[idx], y[idx]), idx drawn from ``batches``.

    x: (N, C, H, W) images, y: (N,) labels; ``batches`` yields (B,) index
    tensors. Minimises the loss, or maximises it with ``ascent`` (gradient
    ascent). BN runs in ``bn_mode`` (see :func:`set_bn_mode`; 'eval' keeps the
    running statistics); ``net`` is updated in place and returned in eval mode.
    ``on_step(step, net)``, if given, is called after every step (1-based).
    """
    dev = device_of(net)

    def loss_fn(_step: int, idx: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(net(take(x, idx, dev)), take(y, idx, dev))
        return -loss if ascent else loss

    return optimise_steps(net, batches, opt, steps, loss_fn, desc=desc, bn_mode=bn_mode, on_step=on_step)


class UnlearningDiverged(RuntimeError):
    """An unlearning method produced non-finite weights, buffers or outputs (NaN/inf).

    Such a model must never be scored: the argmax of NaN logits is class 0, so a diverged
    model reads as a perfect (or a zero) forget accuracy depending on the forget class.
    """


@torch.no_grad()
def check_finite(model: nn.Module, method: str, probe: torch.Tensor | None = None) -> None:
    """Raise :class:`UnlearningDiverged` naming ``method`` if ``model`` holds a NaN/inf.

    Checks every parameter and buffer, then (when ``probe``, a (B, C, H, W) image batch,
    is given) the logits of an eval-mode forward pass on it.
    """
    bad = [n for n, t in (*model.named_parameters(), *model.named_buffers())
           if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        raise UnlearningDiverged(
            f"{method}: the unlearned model has non-finite values (NaN/inf) in {len(bad)} tensor(s), "
            f"first {bad[0]!r}; it diverged and is not scored (lower its lr or steps)")
    if probe is not None and len(probe):
        was = model.training
        model.eval()
        out = model(probe.to(device_of(model)))
        model.train(was)
        if not bool(torch.isfinite(out).all()):
            raise UnlearningDiverged(
                f"{method}: the unlearned model's logits are non-finite (NaN/inf) on {len(probe)} retain "
                f"images; it diverged and is not scored (lower its lr or steps)")
