"""The training and evaluation loops the vision chapters share.

Images are float tensors (N, C, H, W) already normalised; labels int64 (N,).
Training uses SGD with momentum, cosine learning-rate decay, optional CIFAR
augmentation (random crop with 4-pixel padding, horizontal flip) done on the
tensor batch, and bf16 autocast on CUDA.

Each epoch visits every image exactly once in ``steps_per_epoch(N, B) = max(1, N // B)``
batches: a trailing partial batch is merged into the one before it (so batches hold between
B and 2B - 1 images), because a small last batch gives BatchNorm noisy statistics and a full
learning-rate step on a handful of images, which under-fits small retain sets (issue 15).
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from memlab.core import compiling
from memlab.core.config import autocast, compile_enabled
from memlab.core.progress import progress

# benchmarks/bench_compile.py (CIFAR ResNet-18 at the cpu width and batch, NCHW kept): a compiled
# training step runs about 1.16x the eager one, after a first compile of 40-55 s per model class in
# each process (later models of the class reuse it). Below about a thousand steps that first compile
# costs more than the loop saves, so shorter loops train eagerly. Chapters 3's, 4's and 5's loops measured
# 1.0-1.07x per step, so they are never compiled (benchmarks/README.md).
COMPILE_MIN_STEPS = 1000


def wants_compile(steps: int, model: nn.Module | None = None) -> bool:
    """Whether a training loop of ``steps`` optimiser steps is compiled (``MEMLAB_COMPILE`` allows it,
    it is long enough, ``model`` has no GroupNorm, and no compile has failed in this process)."""
    if model is not None and any(isinstance(m, nn.GroupNorm) for m in model.modules()):
        return False
    return compile_enabled() and steps >= COMPILE_MIN_STEPS and not compiling.FAILED


# Inductor's layout optimisation would store the convolutions' weights and activations
# channels-last; oneDNN's AVX2 convolution backward corrupts the heap on channels-last tensors
# with few channels (benchmarks/repro_onednn_channels_last.py), which crashed chapter 1's small
# GroupNorm ResNets. The compiled step keeps the model's NCHW layout, as the eager one does.
COMPILE_OPTIONS = {"layout_optimization": False}


def compile_model(model: nn.Module) -> nn.Module:
    """``model`` through ``torch.compile`` (inductor, static shapes, NCHW layout kept); shares its parameters."""
    return torch.compile(model, dynamic=False, options=COMPILE_OPTIONS)


def augment_batch(x: torch.Tensor, generator: torch.Generator | None = None, pad: int = 4) -> torch.Tensor:
    """Random ``pad``-pixel-padded (reflect) crop and horizontal flip of a (B, C, H, W) batch."""
    b, _, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad), mode="reflect")
    dx = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    dy = torch.randint(0, 2 * pad + 1, (b,), generator=generator)
    flip = torch.rand(b, generator=generator) < 0.5
    rows = (dy[:, None] + torch.arange(h)[None, :]).to(x.device)  # (B, H)
    cols = (dx[:, None] + torch.arange(w)[None, :]).to(x.device)  # (B, W)
    cols = torch.where(flip.to(x.device)[:, None], cols.flip(1), cols)
    idx_b = torch.arange(b, device=x.device)[:, None, None]
    out = padded.permute(0, 2, 3, 1)[idx_b, rows[:, :, None], cols[:, None, :]]  # (B, H, W, C)
    return out.permute(0, 3, 1, 2).contiguous()


def steps_per_epoch(n: int, batch_size: int) -> int:
    """Optimiser steps one epoch of ``n`` images takes at ``batch_size`` (trailing batch merged)."""
    if n < 1 or batch_size < 1:
        raise ValueError(f"steps_per_epoch: n={n} and batch_size={batch_size} must both be >= 1")
    return max(1, n // batch_size)


def batch_bounds(n: int, batch_size: int) -> list[tuple[int, int]]:
    """(start, stop) index pairs covering range(n) once: full batches, the remainder merged into the last.

    With n < batch_size there is one batch of all n images.
    """
    steps = steps_per_epoch(n, batch_size)
    return [(i * batch_size, n if i == steps - 1 else (i + 1) * batch_size) for i in range(steps)]


def model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def train_classifier(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    batch_size: int = 128,
    lr: float = 0.1,
    momentum: float = 0.9,
    weight_decay: float = 5e-4,
    augment: bool = True,
    seed: int = 0,
    desc: str = "train",
    on_epoch_end: Callable[[int, nn.Module], None] | None = None,
) -> list[float]:
    """Train ``model`` in place with cross-entropy; returns the mean loss of each epoch.

    x: (N, C, H, W) float images; y: (N,) int64 labels.
    """
    if epochs < 1 or batch_size < 1 or len(x) == 0:
        raise ValueError("train_classifier: epochs, batch_size and the data set must be positive")
    dev = model_device(model)
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    bounds = batch_bounds(len(x), batch_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * len(bounds))
    losses = []
    bar = progress(total=epochs * len(bounds), desc=desc)
    # The compiled module shares the model's parameters; batches of another size (the merged
    # trailing one) run eagerly, so the loop compiles one graph, not one per batch size.
    net = compile_model(model) if wants_compile(epochs * len(bounds), model) else model
    first = net is not model
    if epochs * len(bounds) >= COMPILE_MIN_STEPS:
        compiling.LONG_LOOPS["compiled" if first else "eager"] += 1
    if first:
        bar.set_postfix_str("compiling the training step (once per model class, about a minute)")
    if dev.type != "cpu":  # on a GPU the images live there: batches are gathered and augmented there
        x, y = x.to(dev), y.to(dev)  # (the same draws from the CPU generator g, so the same crops)
    for epoch in range(epochs):
        model.train()
        perm = torch.randperm(len(x), generator=g)
        # summed on the device in float64 (what loss.item() gives): no host sync at every step
        total, count = torch.zeros((), dtype=torch.float64, device=dev), 0
        for start, stop in bounds:
            idx = perm[start:stop]
            xb, yb = x[idx], y[idx]
            if augment:
                xb = augment_batch(xb, g)
            xb, yb = xb.to(dev, non_blocking=True), yb.to(dev, non_blocking=True)
            step_net = net if len(idx) == batch_size else model
            try:
                with autocast(dev):
                    loss = F.cross_entropy(step_net(xb), yb)
            except Exception as err:  # noqa: BLE001 - no C++ compiler, an unsupported op: train eagerly
                if step_net is model:
                    raise
                compiling.FAILED.append(f"{type(err).__name__}: {err}".splitlines()[0][:200])
                from memlab.core import notices

                notices.warn(f"torch.compile failed ({compiling.FAILED[0]}); training eagerly "
                             f"(leave MEMLAB_COMPILE unset to skip compiling)")
                net = step_net = model
                compiling.LONG_LOOPS["compiled"] -= 1
                compiling.LONG_LOOPS["eager"] += 1
                with autocast(dev):
                    loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            if first and step_net is net:
                first = False
                bar.set_postfix_str("")
            total += loss.detach().double() * len(idx)
            count += len(idx)
            bar.update(1)
        losses.append(float(total) / count)
        if on_epoch_end is not None:
            on_epoch_end(epoch, model)
    bar.close()
    model.eval()
    return losses


@torch.no_grad()
def predict_logits(model: nn.Module, x: torch.Tensor, batch_size: int = 512) -> torch.Tensor:
    """(N, num_classes) float32 logits of ``model`` in eval mode, on the CPU."""
    was_training = model.training
    model.eval()
    dev = model_device(model)
    out = []
    for i in range(0, len(x), batch_size):
        with autocast(dev):
            out.append(model(x[i : i + batch_size].to(dev)).float().cpu())
    model.train(was_training)
    return torch.cat(out) if out else torch.empty(0)


@torch.no_grad()
def features(model: nn.Module, x: torch.Tensor, batch_size: int = 512) -> torch.Tensor:
    """(N, D) penultimate features from ``model.features`` in eval mode, on the CPU."""
    was_training = model.training
    model.eval()
    dev = model_device(model)
    out = [model.features(x[i : i + batch_size].to(dev)).float().cpu() for i in range(0, len(x), batch_size)]
    model.train(was_training)
    return torch.cat(out) if out else torch.empty(0)


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 512) -> float:
    """Top-1 accuracy in [0, 1] of ``model`` (eval mode) on (N, C, H, W) images and (N,) labels."""
    if len(x) == 0:
        return float("nan")
    pred = predict_logits(model, x, batch_size).argmax(1)
    return float((pred == y.cpu()).float().mean())


def optimizer_step(loss: torch.Tensor, opt: torch.optim.Optimizer, sched=None, params=None,
                   max_grad_norm: float | None = 1.0, clip: Callable | None = None) -> None:
    """One optimiser step on a scalar ``loss``: zero the gradients, backpropagate, clip, step, schedule.

    loss: a 0-dim tensor (e.g. a mean cross-entropy in nats). ``params``: the tensors whose
    gradient norm is clipped to ``max_grad_norm`` by ``clip(params, max_grad_norm)``
    (default :func:`torch.nn.utils.clip_grad_norm_`; ``max_grad_norm=None`` skips clipping).
    ``sched`` (an LR scheduler) is stepped after the optimiser when given. The language-model
    trainers of chapters 3, 4 and 5 (:func:`memlab.models.lm.train_lm`, :mod:`memlab.models.diffusion_lm`,
    :mod:`memlab.models.gpt2_small`, :mod:`memlab.models.gpt2_stacked`) share this step.
    """
    if loss.ndim != 0:
        raise ValueError(f"parameter 'loss': must be a scalar tensor (got shape {tuple(loss.shape)})")
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if max_grad_norm is not None:
        if params is None:
            raise ValueError("parameter 'params': needed to clip gradients (or pass max_grad_norm=None)")
        (clip or torch.nn.utils.clip_grad_norm_)(params, max_grad_norm)
    opt.step()
    if sched is not None:
        sched.step()
