"""SalUn (Fan et al., 2024): saliency-masked random-label unlearning.

1. Saliency: accumulate |grad| of the forget-set loss over all forget data
   (model in eval mode, as in the reference ``generate_mask``); keep the
   top ``mask_ratio`` fraction of weights, ranked globally.
2. Random labelling: fine-tune with forget images relabelled uniformly at
   random, gradients multiplied by the mask, BN in train mode.

``retain_mix`` is the fraction of every batch drawn from the retain set with
its true labels. The reference code base shuffles relabelled forget data into
the retain data; the pipeline the paper audits runs forget batches, and its
Appendix Q sweeps this fraction (a retain share of at least 25% removes the
observed gap). With BN in train mode, a forget-only batch rewrites the running
statistics toward the forget class: the BN corruption of the paper.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from memlab.progress import progress
from memlab.unlearning._common import device_of, fresh_copy, hparams, index_stream, set_bn_mode, sgd, take
from memlab.unlearning.registry import register

DEFAULTS = {
    "steps": 400,          # ~10 epochs of the 5000-image forget class at batch 128
    "lr": 0.013,           # reference SalUn CIFAR-10 learning rate
    "batch_size": 128,
    "mask_ratio": 0.5,     # reference mask 'with_0.5'
    "retain_mix": 0.0,     # fraction of each batch from the retain set (Appendix Q)
    "momentum": 0.9,
    "weight_decay": 5e-4,
    "seed": 0,
}


def saliency_mask(model: nn.Module, x: torch.Tensor, y: torch.Tensor, ratio: float,
                  batch_size: int = 256) -> dict[str, torch.Tensor]:
    """Parameter name -> {0,1} mask of the top-``ratio`` |grad| of the forget loss.

    x: (N, C, H, W) forget images; y: (N,) labels. The gradients are summed
    over all batches in eval mode, so computing the mask leaves BN untouched.
    """
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"SalUn: hyperparameter 'mask_ratio' must be in [0, 1] (got {ratio!r})")
    dev = device_of(model)
    model.eval()
    model.zero_grad(set_to_none=True)
    for i in range(0, len(x), batch_size):
        loss = -F.cross_entropy(model(x[i : i + batch_size].to(dev)), y[i : i + batch_size].to(dev), reduction="sum")
        loss.backward()
    grads = {n: p.grad.detach().abs() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    flat = torch.cat([g.flatten() for g in grads.values()])
    k = int(round(ratio * flat.numel()))
    if k == 0:
        return {n: torch.zeros_like(g) for n, g in grads.items()}
    threshold = torch.topk(flat, k, sorted=True).values[-1]
    return {n: (g >= threshold).to(g.dtype) for n, g in grads.items()}


@register("SalUn", bn_mode="train")
def salun(model: nn.Module, splits, cfg=None) -> nn.Module:
    """cfg keys: steps, lr, batch_size, mask_ratio, retain_mix, momentum, weight_decay, seed."""
    hp = hparams(cfg, DEFAULTS, "SalUn")
    if not 0.0 <= hp["retain_mix"] < 1.0:
        raise ValueError(f"SalUn: hyperparameter 'retain_mix' must be in [0, 1) (got {hp['retain_mix']!r})")
    net = fresh_copy(model)
    dev = device_of(net)
    mask = saliency_mask(net, splits.forget_x, splits.forget_y, hp["mask_ratio"])
    g = torch.Generator().manual_seed(hp["seed"])
    n_retain = int(round(hp["retain_mix"] * hp["batch_size"]))
    n_forget = hp["batch_size"] - n_retain
    forget_batches = index_stream(len(splits.forget_x), n_forget, g)
    retain_batches = index_stream(len(splits.retain_x), max(n_retain, 1), g)
    opt = sgd(net, hp["lr"], hp["momentum"], hp["weight_decay"])
    params = dict(net.named_parameters())
    set_bn_mode(net, "train")
    for _ in progress(range(hp["steps"]), desc="SalUn"):
        idx = next(forget_batches)
        xb = take(splits.forget_x, idx, dev)
        yb = torch.randint(0, splits.num_classes, (len(idx),), generator=g).to(dev)
        if n_retain:
            ridx = next(retain_batches)
            xb = torch.cat([xb, take(splits.retain_x, ridx, dev)])
            yb = torch.cat([yb, take(splits.retain_y, ridx, dev)])
        loss = F.cross_entropy(net(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        for n, m in mask.items():
            if params[n].grad is not None:
                params[n].grad.mul_(m)
        opt.step()
    return net.eval()
