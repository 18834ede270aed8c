"""RandLabel (Graves et al., 2021; the "RL" baseline of SalUn): relabel the forget set at random, fine-tune.

Every step draws a batch from the forget set with labels redrawn uniformly
over all classes, mixed with retain samples carrying their true labels, as in
the reference code base, which shuffles the relabelled forget set into the
retain set. BN runs in train mode.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from memlab.core.progress import progress
from memlab.science.unlearning._common import device_of, fresh_copy, hparams, index_stream, set_bn_mode, sgd, take
from memlab.science.unlearning.registry import register

DEFAULTS = {
    "steps": 400,          # ~10 epochs of a 5000-image forget set at batch 128
    "lr": 0.01,
    "batch_size": 128,
    "retain_mix": 0.5,     # fraction of every batch from the retain set (true labels)
    "momentum": 0.9,
    "weight_decay": 5e-4,
    "seed": 0,
}


def random_labels(n: int, num_classes: int, generator: torch.Generator) -> torch.Tensor:
    """(n,) int64 labels drawn uniformly from range(num_classes)."""
    return torch.randint(0, num_classes, (n,), generator=generator)


def check_retain_mix(hp: dict, method: str) -> None:
    if not 0.0 <= hp["retain_mix"] < 1.0:
        raise ValueError(f"{method}: hyperparameter 'retain_mix' must be in [0, 1) (got {hp['retain_mix']!r})")


def relabel_finetune(net: nn.Module, splits, hp: dict, desc: str,
                     grad_mask: dict[str, torch.Tensor] | None = None) -> nn.Module:
    """Fine-tune ``net`` in place on randomly relabelled forget batches, mixed with retain batches.

    hp: steps, lr, batch_size, retain_mix (fraction of each batch from the retain
    set, true labels), momentum, weight_decay, seed. grad_mask: parameter name ->
    {0, 1} tensor of the parameter's shape multiplied into its gradient before
    every step (SalUn's saliency mask), or None. BN runs in train mode.
    """
    dev = device_of(net)
    g = torch.Generator().manual_seed(hp["seed"])
    n_retain = int(round(hp["retain_mix"] * hp["batch_size"]))
    forget_batches = index_stream(len(splits.forget_x), hp["batch_size"] - n_retain, g)
    retain_batches = index_stream(len(splits.retain_x), max(n_retain, 1), g)
    opt = sgd(net, hp["lr"], hp["momentum"], hp["weight_decay"])
    params = dict(net.named_parameters())
    set_bn_mode(net, "train")
    for _ in progress(range(hp["steps"]), desc=desc):
        idx = next(forget_batches)
        xb = take(splits.forget_x, idx, dev)
        yb = random_labels(len(idx), splits.num_classes, g).to(dev)
        if n_retain:
            ridx = next(retain_batches)
            xb = torch.cat([xb, take(splits.retain_x, ridx, dev)])
            yb = torch.cat([yb, take(splits.retain_y, ridx, dev)])
        loss = F.cross_entropy(net(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        for n, m in (grad_mask or {}).items():
            if params[n].grad is not None:
                params[n].grad.mul_(m)
        opt.step()
    return net.eval()


@register("RandLabel", bn_mode="train")
def randlabel(model: nn.Module, splits, cfg=None) -> nn.Module:
    """cfg keys: steps, lr, batch_size, retain_mix, momentum, weight_decay, seed (see DEFAULTS)."""
    hp = hparams(cfg, DEFAULTS, "RandLabel")
    check_retain_mix(hp, "RandLabel")
    return relabel_finetune(fresh_copy(model), splits, hp, "RandLabel")
