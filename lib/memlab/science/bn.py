"""BatchNorm recalibration and running-statistics diagnostics (chapter 1).

The recalibration operator R* of the BN-illusion paper keeps every weight of a
model (convolutions, BN affine gamma/beta, classifier) and replaces the BN
running statistics by the per-layer activation moments of the current weights
on a reference set (the retain data in the audit). It is a single forward pass
in train mode with gradients off and a cumulative (not exponential) average,
which is exactly what :func:`torch.optim.swa_utils.update_bn` does.

Any change of a forward-pass metric between ``model`` and
``recalibrate(model, retain_images)`` is therefore due to the normalisation
state alone, never to a weight change.
"""
from __future__ import annotations

import copy
from typing import Iterable

import torch
from torch import nn
from torch.optim.swa_utils import update_bn
from torch.utils.data import DataLoader

_BN = nn.modules.batchnorm._BatchNorm


def bn_layers(model: nn.Module) -> list[tuple[str, _BN]]:
    """The (name, module) pairs of every BatchNorm layer that keeps running statistics."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, _BN) and m.track_running_stats]


def has_running_stats(model: nn.Module) -> bool:
    """Whether ``model`` holds any BatchNorm running statistics (False for GroupNorm/LayerNorm nets)."""
    return bool(bn_layers(model))


def _batches(images: torch.Tensor, batch_size: int) -> Iterable[torch.Tensor]:
    return [images[i : i + batch_size] for i in range(0, len(images), batch_size)]


def recalibrate(model: nn.Module, images: torch.Tensor | DataLoader, batch_size: int = 128) -> nn.Module:
    """A copy of ``model`` whose BN running statistics are re-estimated on ``images``.

    images: float tensor (N, C, H, W), normalised as the model expects, or a
        DataLoader yielding such batches (or (images, labels) tuples).
    batch_size: images per forward pass when ``images`` is a tensor; the
        operator's error term shrinks as O(1/batch_size) (Theorem 1).

    Weights are frozen and no gradient is computed; the running statistics are
    the cumulative average over the batches (momentum None inside
    ``update_bn``). ``model`` itself is not touched. The copy is returned in
    eval mode. On a model without running statistics the copy is identical.
    """
    if isinstance(images, torch.Tensor):
        if images.ndim != 4:
            raise ValueError(f"parameter 'images': must be a (N, C, H, W) tensor (got shape {tuple(images.shape)})")
        if len(images) == 0:
            raise ValueError("parameter 'images': must hold at least one image (got 0)")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"parameter 'batch_size': must be a positive integer (got {batch_size!r})")
        loader: Iterable = _batches(images, batch_size)
    elif isinstance(images, DataLoader):
        loader = images
    else:
        raise ValueError(f"parameter 'images': must be a tensor (N, C, H, W) or a DataLoader (got {type(images).__name__})")
    out = copy.deepcopy(model)
    if has_running_stats(out):
        dev = next(out.parameters()).device
        # update_bn does not switch off autograd itself: the audit must not build graphs.
        with torch.no_grad():
            update_bn(loader, out, device=dev)
    out.eval()
    return out


def running_stats(model: nn.Module) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Layer name -> (running_mean (C,), running_var (C,)) copies, on the CPU."""
    return {n: (m.running_mean.detach().cpu().clone(), m.running_var.detach().cpu().clone()) for n, m in bn_layers(model)}


@torch.no_grad()
def activation_moments(model: nn.Module, images: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Direct per-layer moments of every BN layer's input in train mode on one batch.

    images: float tensor (N, C, H, W). Returns layer name -> (mean (C,),
    unbiased variance (C,)) over the N*H*W positions, which is what one
    full-batch recalibration must store (the oracle phi* of the paper).
    """
    model = copy.deepcopy(model).train()
    moments: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def hook(name):
        def fn(_module, inputs, _output):
            a = inputs[0].transpose(0, 1).flatten(1).double()  # (C, N*H*W)
            moments[name] = (a.mean(1).float().cpu(), a.var(1, unbiased=True).float().cpu())
        return fn

    handles = [m.register_forward_hook(hook(n)) for n, m in bn_layers(model)]
    try:
        model(images.to(next(model.parameters()).device))
    finally:
        for h in handles:
            h.remove()
    return moments


def mean_misalignment(model: nn.Module, reference: nn.Module) -> dict[str, float]:
    """Per-layer normalised running-mean gap between ``model`` and ``reference``.

    For each BN layer l: mean over channels c of |mu_c - mu*_c| / sqrt(var*_c + eps),
    where (mu*, var*) are the reference model's running statistics (usually the
    recalibrated copy). Dimensionless; 0 means the statistics agree.
    """
    ref = dict(bn_layers(reference))
    out = {}
    for name, m in bn_layers(model):
        r = ref[name]
        gap = (m.running_mean - r.running_mean).abs() / torch.sqrt(r.running_var + r.eps)
        out[name] = float(gap.mean())
    return out


def weights_equal(a: nn.Module, b: nn.Module) -> bool:
    """Whether every parameter (not buffer) of ``a`` and ``b`` is bitwise equal."""
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    return pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)
