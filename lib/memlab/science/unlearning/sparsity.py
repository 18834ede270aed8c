"""Sparsity (Jia et al., 2023, "l1-sparse"): fine-tune on the retain set with a decaying l1 penalty.

Loss = cross-entropy on retain batches + alpha_t * sum |w| over all weights,
with alpha_t decaying linearly from ``alpha`` to 0 over the run, as in the
reference code (the penalty prunes towards a sparse model early, then lets
the fine-tuning recover accuracy). BN runs in train mode.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from memlab.science.unlearning._common import device_of, fresh_copy, hparams, index_stream, optimise_steps, sgd, take
from memlab.science.unlearning.registry import register

DEFAULTS = {
    "steps": 1000,         # ~3 epochs of a 45k retain set at batch 128
    "lr": 0.01,
    "batch_size": 128,
    "alpha": 5e-4,         # initial l1 coefficient (reference CIFAR-10 value)
    "momentum": 0.9,
    "weight_decay": 5e-4,
    "seed": 0,
}


def l1_norm(model: nn.Module) -> torch.Tensor:
    """Sum of |w| over all parameters of ``model`` (a scalar tensor with gradient)."""
    return sum(p.abs().sum() for p in model.parameters())


def l1_coefficient(alpha: float, step: int, steps: int) -> float:
    """Linear decay alpha * (1 - step / steps): alpha at step 0, 0 after the last step."""
    return alpha * (1.0 - step / steps)


@register("Sparsity", bn_mode="train")
def sparsity(model: nn.Module, splits, cfg=None) -> nn.Module:
    """cfg keys: steps, lr, batch_size, alpha, momentum, weight_decay, seed (see DEFAULTS)."""
    hp = hparams(cfg, DEFAULTS, "Sparsity")
    net = fresh_copy(model)
    dev = device_of(net)
    g = torch.Generator().manual_seed(hp["seed"])
    batches = index_stream(len(splits.retain_x), hp["batch_size"], g)
    opt = sgd(net, hp["lr"], hp["momentum"], hp["weight_decay"])

    def loss_fn(step: int, idx: torch.Tensor) -> torch.Tensor:
        loss = F.cross_entropy(net(take(splits.retain_x, idx, dev)), take(splits.retain_y, idx, dev))
        return loss + l1_coefficient(hp["alpha"], step, hp["steps"]) * l1_norm(net)

    return optimise_steps(net, batches, opt, hp["steps"], loss_fn, desc="Sparsity", bn_mode="train")
