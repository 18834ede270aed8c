"""SSD, Selective Synaptic Dampening (Foster et al., 2024).

Importances are the mean squared gradients of the cross-entropy, over the
forget set D_f and over the full training data D. Every parameter with
``imp_f > alpha * imp_D`` is multiplied by ``min(lambda * imp_D / imp_f, 1)``.
No gradient step is taken.

As in the reference ``ssd_tuning`` (github.com/if-loops/selective-synaptic-dampening,
``src/forget_full_class_strategies.py``: ``model = model.eval()``, then the forget-set
importances, then those of D, then ``modify_weight``), both importance passes run in eval
mode, so the BN running statistics are never touched while the weights are dampened:
BN *misalignment*. The reference CIFAR values are alpha = 10, lambda = 1; a smaller
network concentrates the forget class in fewer weights, so the chapter's smaller profiles
raise alpha (fewer weights selected) to keep retain accuracy.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from memlab.core.progress import progress
from memlab.science.unlearning._common import device_of, fresh_copy, hparams, set_bn_mode
from memlab.science.unlearning.registry import register

DEFAULTS = {
    "alpha": 10.0,        # selection weighting (reference CIFAR value)
    "lam": 1.0,           # dampening constant lambda
    "batch_size": 128,
    "max_batches": 0,     # 0: whole set; else cap the importance passes
    "seed": 0,
}


def importances(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, batch_size: int, max_batches: int,
                bn_mode: str, desc: str) -> dict[str, torch.Tensor]:
    """Parameter name -> mean over batches of grad**2 of CE on (x (N,C,H,W), y (N,))."""
    dev = device_of(model)
    set_bn_mode(model, bn_mode)
    starts = list(range(0, len(x), batch_size))
    if max_batches:
        starts = starts[:max_batches]
    imp = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    for i in progress(starts, desc=desc):
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x[i : i + batch_size].to(dev)), y[i : i + batch_size].to(dev)).backward()
        for n, p in model.named_parameters():
            if p.grad is not None:
                imp[n] += p.grad.detach() ** 2
    model.zero_grad(set_to_none=True)
    return {n: v / len(starts) for n, v in imp.items()}


@torch.no_grad()
def dampen(model: nn.Module, imp_full: dict[str, torch.Tensor], imp_forget: dict[str, torch.Tensor], alpha: float,
           lam: float) -> int:
    """Apply the SSD update in place; returns how many weights were dampened."""
    changed = 0
    for n, p in model.named_parameters():
        sel = imp_forget[n] > alpha * imp_full[n]
        beta = (lam * imp_full[n] / imp_forget[n].clamp_min(torch.finfo(p.dtype).tiny)).clamp(max=1.0)
        p[sel] = p[sel] * beta[sel]
        changed += int(sel.sum())
    return changed


@register("SSD", bn_mode="eval")
def ssd(model: nn.Module, splits, cfg=None) -> nn.Module:
    """cfg keys: alpha, lam, batch_size, max_batches, seed."""
    hp = hparams(cfg, DEFAULTS, "SSD")
    net = fresh_copy(model)
    g = torch.Generator().manual_seed(hp["seed"])
    full_x = torch.cat([splits.retain_x, splits.forget_x])
    full_y = torch.cat([splits.retain_y, splits.forget_y])
    perm = torch.randperm(len(full_x), generator=g)
    kw = dict(batch_size=hp["batch_size"], max_batches=hp["max_batches"], bn_mode="eval")
    imp_forget = importances(net, splits.forget_x, splits.forget_y, desc="SSD (D_f)", **kw)
    imp_full = importances(net, full_x[perm], full_y[perm], desc="SSD (D)", **kw)
    dampen(net, imp_full, imp_forget, hp["alpha"], hp["lam"])
    return net.eval()
