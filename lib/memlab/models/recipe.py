"""The fast CIFAR training recipe: a BatchNorm CNN to the papers' accuracy in a few epochs on a CPU.

Plain supervised SGD on the training split, with the schedule tricks of the fast-CIFAR literature
(airbench; Page's ResNet-9) and none of the ones that change what unlearning and membership measure
unless a chapter asks for them:

- Nesterov SGD, two parameter groups: conv and linear weights at ``lr``, the norm layers' shifts and
  the whitening bias at ``lr * norm_lr_mult``; weight decay set so that ``lr * weight_decay`` is
  ``decay`` in both groups (airbench's coupling);
- the learning rate rises linearly from ``start`` of its peak over the first ``warmup`` of the steps,
  then falls linearly to ``end`` of it at the last step;
- augmentation on whole batches: a random ``translate``-pixel shift (reflect padding) and a
  horizontal flip (:func:`memlab.models.train.augment_batch`);
- mean cross-entropy, with ``label_smoothing`` (0 unless the chapter says why);
- the gradient's norm clipped to ``clip`` where a net needs it (0: never);
- the whitening conv (:func:`memlab.models.fastcnn.whiten_init`) set from the first
  ``whiten_images`` training images, its bias trained for ``whiten_bias_epochs`` epochs only;
- bf16 autocast on a CPU that computes it natively (:func:`memlab.core.config.cpu_bf16`); evaluation in
  fp32 (:func:`memlab.models.train.accuracy`), without test-time augmentation, EMA or lookahead.

A training inside :func:`memlab.core.cache.load_or_train` checkpoints after every epoch
(:func:`memlab.core.cache.checkpoint_path`) and, run again after a kill, resumes from the last one:
the weights, optimiser and schedule state, and the data order's generator all come back, so the
resumed run computes what an uninterrupted one does.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from memlab.core.config import autocast, cpu_bf16, device
from memlab.core.progress import progress
from memlab.models.fastcnn import FastCNN, whiten_init
from memlab.models.train import augment_batch, batch_bounds, model_device, train_classifier


@dataclass(frozen=True)
class Recipe:
    """The settings of one fast training (defaults: airbench94's, for a mean loss at batch 1024)."""

    epochs: int = 8
    batch_size: int = 1024
    lr: float = 1.5  # peak learning rate of the weights (airbench's 11.5 per 7,851 summed-loss steps, x1024)
    norm_lr_mult: float = 64.0  # the norm layers' shifts and the whitening bias learn this much faster
    momentum: float = 0.85
    decay: float = 0.002  # lr x weight decay at the peak, in both groups
    warmup: float = 0.23  # fraction of the steps the learning rate rises over
    start: float = 0.2  # the learning rate's first value, as a fraction of its peak
    end: float = 0.07  # its last value, as a fraction of its peak
    label_smoothing: float = 0.0
    translate: int = 2  # pixels of the random shift
    whiten_images: int = 5000
    whiten_bias_epochs: int = 3
    clip: float = 0.0  # largest gradient norm a step may take (0: no clipping)


def lr_factor(step: int, total: int, recipe: Recipe) -> float:
    """The learning rate at optimiser step ``step`` of ``total``, as a fraction of its peak."""
    rise = max(1, int(total * recipe.warmup))
    if step < rise:
        return recipe.start + (1 - recipe.start) * step / rise
    return 1 - (1 - recipe.end) * (step - rise) / max(1, total - 1 - rise)


def whiten_from(model: nn.Module, x: torch.Tensor, images: int = Recipe.whiten_images) -> nn.Module:
    """Set a fast CNN's whitening conv from the first ``images`` images of x ((N, C, H, W) normalised), as
    :func:`train_fast` does before its first step; a net without one is left as it is. Returns ``model``:
    with the seeded build, the initial weights w_0 of a training."""
    if hasattr(model, "whiten"):
        whiten_init(model, x[:images].to(model_device(model)))
    return model


def epoch_mean_lrs(arch: str, n: int, epochs: int, batch_size: int, lr: float, norm: str = "bn") -> np.ndarray:
    """(epochs,) mean learning rate of each epoch of :func:`train_supervised` training a net of ``arch`` on
    ``n`` images at peak ``lr``: the fast CNN's :func:`lr_factor` schedule (the rate of its conv and linear
    weights; its norm shifts' is ``norm_lr_mult`` times it), any other net's per-step cosine decay
    (:func:`memlab.models.train.train_classifier`). Steps per epoch: :func:`batch_bounds`."""
    steps = len(batch_bounds(n, batch_size))
    total = epochs * steps
    t = np.arange(total)
    if arch == "fastcnn":
        recipe = recipe_for(norm, epochs, batch_size, lr)
        factors = np.array([lr_factor(int(s), total, recipe) for s in t])
    else:
        factors = (1 + np.cos(np.pi * t / total)) / 2
    return (lr * factors).reshape(epochs, steps).mean(axis=1)


def param_groups(model: nn.Module, recipe: Recipe) -> list[dict]:
    """SGD groups: weights at ``lr``; the norm layers' parameters and every bias (in the fast CNN, the
    whitening conv's: airbench keeps it at ``lr``) at ``lr * norm_lr_mult``."""
    fast, slow = [], []
    for module in model.modules():
        norm = isinstance(module, (nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm))
        for name, p in module.named_parameters(recurse=False):
            (fast if norm or name == "bias" else slow).append(p)
    lr_fast = recipe.lr * recipe.norm_lr_mult
    return [{"params": slow, "lr": recipe.lr, "weight_decay": recipe.decay / recipe.lr},
            {"params": fast, "lr": lr_fast, "weight_decay": recipe.decay / lr_fast}]


def _state(model, opt, sched, epoch: int, gen: torch.Generator, losses: list[float], recipe: Recipe) -> dict:
    return {"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(), "epoch": epoch,
            "generator": gen.get_state(), "losses": losses, "recipe": asdict(recipe)}


def _save(path: Path, state: dict) -> None:
    from memlab.core.fsutil import write_atomic

    write_atomic(path, lambda f: torch.save(state, f))


def train_fast(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    recipe: Recipe = Recipe(),
    *,
    seed: int = 0,
    bf16: bool | None = None,
    checkpoint: Path | None = None,
    on_epoch: Callable[[int, nn.Module], None] | None = None,
    desc: str = "train",
) -> list[float]:
    """Train ``model`` in place by :class:`Recipe`; returns the mean training loss (nats) of each epoch.

    x: (N, C, H, W) normalised float images; y: (N,) int64 labels. ``bf16``: autocast on the CPU (default
    :func:`memlab.core.config.cpu_bf16`). ``checkpoint``: a file to save after each epoch and resume from
    (default :func:`memlab.core.cache.checkpoint_path`, set while the cache trains an entry, which removes
    it once the entry is written; a checkpoint of another recipe is ignored).
    ``on_epoch(epoch, model)`` runs after each epoch (1-based), e.g. to evaluate; it must leave the
    model as it found it.
    """
    from memlab.core.cache import checkpoint_path

    if recipe.epochs < 1 or recipe.batch_size < 1 or len(x) == 0:
        raise ValueError("train_fast: epochs, batch_size and the data set must be positive")
    dev = model_device(model)
    bf16 = cpu_bf16() if bf16 is None else bf16
    checkpoint = checkpoint if checkpoint is not None else checkpoint_path()
    gen = torch.Generator().manual_seed(seed)
    whiten_from(model, x, recipe.whiten_images)
    opt = torch.optim.SGD(param_groups(model, recipe), momentum=recipe.momentum, nesterov=True)
    bounds = batch_bounds(len(x), recipe.batch_size)
    total = recipe.epochs * len(bounds)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: lr_factor(step, total, recipe))
    first, losses = 0, []
    if checkpoint is not None and Path(checkpoint).exists():
        state = torch.load(checkpoint, weights_only=False)
        if state["recipe"] == asdict(recipe):
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            sched.load_state_dict(state["sched"])
            gen.set_state(state["generator"])
            first, losses = state["epoch"], list(state["losses"])
    bar = progress(total=total, desc=desc, initial=first * len(bounds))
    for epoch in range(first, recipe.epochs):
        model.train()
        if hasattr(model, "whiten"):
            model.whiten.bias.requires_grad_(epoch < recipe.whiten_bias_epochs)
        perm = torch.randperm(len(x), generator=gen)
        total_loss = torch.zeros((), dtype=torch.float64, device=dev)
        for start, stop in bounds:
            idx = perm[start:stop]
            xb = augment_batch(x[idx], gen, pad=recipe.translate).to(dev, non_blocking=True)
            yb = y[idx].to(dev, non_blocking=True)
            with autocast(dev, cpu_bf16=bf16):
                logits = model(xb)
            loss = F.cross_entropy(logits.float(), yb, label_smoothing=recipe.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if recipe.clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.clip)
            opt.step()
            sched.step()
            total_loss += loss.detach() * len(idx)
            bar.update(1)
        losses.append(float(total_loss) / len(x))
        if checkpoint is not None:
            _save(Path(checkpoint), _state(model, opt, sched, epoch + 1, gen, losses, recipe))
        if on_epoch is not None:
            on_epoch(epoch + 1, model)
    bar.close()
    model.eval()
    return losses


# What the GroupNorm net's training changes in the recipe (benchmarks/bench_cifar_recipe.py, "gn-b256" and
# "gn-b256-clip"): at BatchNorm's rates it does not learn, so its norm shifts learn only 4x faster than its
# weights, and at its batch of 256 (4x the steps of 1024) each step decays the weights a quarter as much.
# Unclipped, one of chapter 1's 12-epoch Retrains (seed 0) drifted into an image-blind net (every
# prediction one class; after each GroupNorm the spread across images was under a tenth of the
# Original's). A replay of it did not collapse but dipped in test accuracy at the learning rate's
# peak (epoch 3) and at epoch 7, ending at 94.3 % of its training images; clipped at norm 2 (the
# gradient's norm was 1.5-2.5 on most steps, with spikes to 5) the same run rose without those dips
# and ended at 94.8 %: the clip bounds the steps such a drift starts from, at no cost in accuracy.
NORM_RECIPE: dict[str, dict] = {"bn": {}, "gn": {"norm_lr_mult": 4.0, "decay": 0.0005, "clip": 2.0}}


def recipe_for(model: nn.Module | str, epochs: int, batch_size: int, lr: float) -> Recipe:
    """The :class:`Recipe` a :class:`memlab.models.fastcnn.FastCNN` of ``model.norm`` trains by, at the
    given length, batch size and peak learning rate (:data:`NORM_RECIPE`). ``model``: the net, or its
    norm ("bn" or "gn"), for a caller that needs the schedule without building the net."""
    norm = model if isinstance(model, str) else model.norm
    return Recipe(epochs=epochs, batch_size=batch_size, lr=lr, **NORM_RECIPE[norm])


def train_supervised(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, epochs: int, batch_size: int,
                     lr: float, seed: int, desc: str = "train", momentum: float = 0.9,
                     weight_decay: float = 5e-4, augment: bool = True,
                     on_epoch: Callable[[int, nn.Module], None] | None = None) -> list[float]:
    """Train ``model`` from its current weights on (x, y) by the recipe of its kind; returns the mean
    training loss (nats) of each epoch.

    A :class:`memlab.models.fastcnn.FastCNN` trains by :func:`train_fast` with :func:`recipe_for` (its own
    momentum, weight decay and augmentation; ``momentum``, ``weight_decay`` and ``augment`` are not
    used); any other net by :func:`memlab.models.train.train_classifier` (SGD, cosine decay).
    x: (N, C, H, W) normalised float images; y: (N,) int64 labels. ``on_epoch(epoch, model)`` runs after
    each epoch with the number of epochs done (1-based, as :func:`train_fast` counts; the classifier
    loop's 0-based ``on_epoch_end`` is shifted by one), and must leave the model as it found it.
    """
    if isinstance(model, FastCNN):
        return train_fast(model, x, y, recipe_for(model, epochs, batch_size, lr), seed=seed, desc=desc,
                          on_epoch=on_epoch)
    after = None if on_epoch is None else (lambda epoch, m: on_epoch(epoch + 1, m))
    return train_classifier(model, x, y, epochs=epochs, batch_size=batch_size, lr=lr, momentum=momentum,
                            weight_decay=weight_decay, augment=augment, seed=seed, desc=desc, on_epoch_end=after)


ARCHS = ("fastcnn", "resnet18")  # the CIFAR classifiers a vision chapter can train
ARCH_NAMES = {"fastcnn": "fast CNN", "resnet18": "ResNet-18"}  # how messages name them


def cifar_classifier(arch: str, num_classes: int, norm: str = "bn", width: int = 64) -> nn.Module:
    """A freshly initialised CIFAR classifier (seed the global generator first), on the run's device.

    ``fastcnn``: :class:`memlab.models.fastcnn.FastCNN` of ``widths_of(width)``, trained by
    :func:`train_fast`; its BatchNorm layers' momentum is PyTorch's default 0.1, the paper ResNet-18's,
    since how fast an unlearning method moves the running statistics is what the BN papers measure
    (airbench trains with 0.4). ``resnet18``:
    :func:`memlab.models.resnet.resnet18` of stem ``width``.
    """
    from memlab.models.fastcnn import fastcnn
    from memlab.models.resnet import resnet18

    if arch == "fastcnn":
        return fastcnn(num_classes, norm=norm, width=width, bn_momentum=0.1, device=device())
    if arch == "resnet18":
        return resnet18(num_classes, norm=norm, width=width)
    raise ValueError(f"parameter 'arch': must be one of {', '.join(ARCHS)} (got {arch!r})")


def cifar_train_memory(arch: str, width: int, batch_size: int, num_classes: int = 10) -> int:
    """Rough upper estimate (bytes) of training :func:`cifar_classifier`'s net at ``batch_size``."""
    from memlab.models import fastcnn, resnet

    return (fastcnn if arch == "fastcnn" else resnet).train_memory_bytes(width, batch_size, num_classes)
