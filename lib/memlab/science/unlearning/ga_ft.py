"""GA+FT: gradient ascent on the forget set, then fine-tuning on the retain set (both BN in train mode).

The fine-tuning phase runs retain batches through BN in train mode, so it
re-estimates the running statistics as a side effect: the paper's reason
why this row shows no BN gap.
"""
from __future__ import annotations

import torch
from torch import nn

from memlab.science.unlearning._common import ce_steps, fresh_copy, hparams, index_stream, sgd
from memlab.science.unlearning.ga import gradient_ascent
from memlab.science.unlearning.registry import register

DEFAULTS = {
    "ga_steps": 100,
    "ga_lr": 1e-4,
    "ft_steps": 1000,
    "ft_lr": 0.01,
    "batch_size": 128,
    "momentum": 0.9,
    "weight_decay": 5e-4,
    "seed": 0,
}


def finetune(net: nn.Module, x: torch.Tensor, y: torch.Tensor, *, steps: int, lr: float, batch_size: int,
             momentum: float, weight_decay: float, seed: int, desc: str = "FT") -> nn.Module:
    """``steps`` SGD steps minimising CE on (x (N,C,H,W), y (N,)), BN in train mode, in place."""
    batches = index_stream(len(x), batch_size, torch.Generator().manual_seed(seed))
    return ce_steps(net, x, y, batches, sgd(net, lr, momentum, weight_decay), steps, desc=desc)


@register("GA+FT", bn_mode="train")
def ga_ft(model: nn.Module, splits, cfg=None) -> nn.Module:
    """cfg keys: ga_steps, ga_lr, ft_steps, ft_lr, batch_size, momentum, weight_decay, seed."""
    hp = hparams(cfg, DEFAULTS, "GA+FT")
    common = dict(batch_size=hp["batch_size"], momentum=hp["momentum"], weight_decay=hp["weight_decay"], seed=hp["seed"])
    net = gradient_ascent(fresh_copy(model), splits.forget_x, splits.forget_y, steps=hp["ga_steps"], lr=hp["ga_lr"],
                          desc="GA+FT (GA)", **common)
    return finetune(net, splits.retain_x, splits.retain_y, steps=hp["ft_steps"], lr=hp["ft_lr"], desc="GA+FT (FT)",
                    **common)
