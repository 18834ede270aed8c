"""Unroll (Thudi et al., 2022): undo the forget set's SGD contribution with its accumulated gradients.

SGD on the full training set adds, for every forget sample x and every epoch,
the step -lr/B * grad l(w_t; x) to the weights. Unrolling SGD to first order
around the initial weights w_0 (Thudi et al.'s single-gradient approximation)
gives the unlearning update

    w_unlearned = w_T + (lr * epochs / B) * sum_{x in forget} grad l(w_0; x)

``reference_state`` holds w_0 (the state dict the model was initialised with);
without it the gradient is taken at the trained weights w_T instead. The
trained model's BatchNorm statistics are left as they are; gradients at w_0
are taken in train mode, as SGD saw them.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from memlab.progress import progress
from memlab.unlearning._common import device_of, fresh_copy, hparams, take
from memlab.unlearning.registry import register

DEFAULTS = {
    "lr": 0.05,            # mean learning rate of the original training run (cosine: half the peak)
    "epochs": 182,         # epochs of the original training run
    "batch_size": 128,     # batch size of the original training run
    "reference_state": None,
}


def forget_gradient(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> list[torch.Tensor]:
    """Summed gradient sum_i grad l(w; x_i) over images x (N, C, H, W), labels y (N,), one tensor per parameter.

    Batches of ``batch_size`` in train mode (batch statistics, as during SGD).
    """
    dev = device_of(model)
    model.train()
    model.zero_grad(set_to_none=True)
    for i in progress(range(0, len(x), batch_size), desc="Unroll"):
        loss = F.cross_entropy(model(take(x, torch.arange(i, min(i + batch_size, len(x))), dev)),
                               y[i:i + batch_size].to(dev), reduction="sum")
        loss.backward()
    grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return grads


@register("Unroll", bn_mode="eval")
def unroll(model: nn.Module, splits, cfg=None) -> nn.Module:
    """cfg keys: lr, epochs, batch_size (of the original training), reference_state (w_0 or None)."""
    hp = hparams(cfg, DEFAULTS, "Unroll")
    if hp["batch_size"] < 1:
        raise ValueError(f"Unroll: hyperparameter 'batch_size' must be >= 1 (got {hp['batch_size']!r})")
    net = fresh_copy(model)
    at = fresh_copy(model)
    if hp["reference_state"] is not None:
        at.load_state_dict(hp["reference_state"])
    grads = forget_gradient(at, splits.forget_x, splits.forget_y, hp["batch_size"])
    scale = hp["lr"] * hp["epochs"] / hp["batch_size"]
    with torch.no_grad():
        for p, g in zip(net.parameters(), grads):
            p.add_(g, alpha=scale)
    return net.eval()
