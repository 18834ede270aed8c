"""Unroll (Thudi et al., 2022): undo the forget set's SGD contribution with its accumulated gradients.

SGD on the full training set adds, for every forget sample x and every epoch
e, the step -lr_e/B * grad l(w_e; x) to the weights. Unrolling SGD to first
order, the unlearning update adds these contributions back:

    w_unlearned = w_T + sum_e (lr_e / B) * sum_{x in forget} grad l(w_e; x)

Two ways to get the sum:
* ``accumulated`` (preferred): the sum recorded while the original model was
  trained (:func:`accumulate_forget_gradient` called at the end of every
  epoch with that epoch's mean learning rate), one tensor per parameter name;
* otherwise Thudi et al.'s single-gradient approximation, every w_e replaced by
  one reference point: ``reference_state`` (the initial weights w_0) or, without
  it, the trained weights w_T, scaled by lr * epochs / B. This is Thudi et al.'s
  "single-gradient unlearning", the variant the SDE paper's Unroll row uses:
  the model barely moves (its Table 3 keeps Acc_r 99.4 and ASR 0.30), which is
  why SDE, not the accuracies, exposes it.

``scale`` multiplies the whole update (1 = the first-order formula above). At
small scale (narrow networks, few epochs) the first-order step can overshoot and
wreck the model instead of imitating the paper's Unroll; chapter 2 then lowers
``scale`` by its tuning rule (retain accuracy within 10 points of the original's).

The trained model's BatchNorm statistics are left as they are; gradients are
taken in train mode (batch statistics, as SGD saw them) on a copy.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from memlab.core.progress import progress
from memlab.science.unlearning._common import device_of, fresh_copy, hparams, take
from memlab.science.unlearning.registry import register

DEFAULTS = {
    "lr": 0.05,            # mean learning rate of the original training run (cosine: half the peak)
    "epochs": 182,         # epochs of the original training run
    "batch_size": 128,     # batch size of the original training run
    "reference_state": None,
    "accumulated": None,   # {parameter name: summed lr/B-weighted forget gradient} recorded in training
    "scale": 1.0,          # multiplier of the whole update (1: the first-order formula)
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


def accumulate_forget_gradient(model: nn.Module, x: torch.Tensor, y: torch.Tensor, step: float,
                               batch_size: int, into: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Add ``step`` * sum_i grad l(w; x_i) (x: (N, C, H, W), y: (N,)) to ``into``, per parameter name.

    The gradient is taken on a copy of ``model``, so its weights and BN statistics are untouched.
    """
    at = fresh_copy(model)
    grads = forget_gradient(at, x, y, batch_size)
    for (name, _), g in zip(at.named_parameters(), grads):
        into[name] = into.get(name, torch.zeros_like(g)) + step * g.cpu()
    return into


@register("Unroll", bn_mode="eval")
def unroll(model: nn.Module, splits, cfg=None) -> nn.Module:
    """cfg keys: accumulated, or lr, epochs, batch_size (of the original training) and reference_state;
    scale (multiplier of the update in both cases)."""
    hp = hparams(cfg, DEFAULTS, "Unroll")
    if hp["batch_size"] < 1:
        raise ValueError(f"Unroll: hyperparameter 'batch_size' must be >= 1 (got {hp['batch_size']!r})")
    net = fresh_copy(model)
    if hp["accumulated"] is not None:
        params = dict(net.named_parameters())
        missing = sorted(set(params) - set(hp["accumulated"]))
        if missing:
            raise ValueError(f"Unroll: 'accumulated' lacks parameter {missing[0]!r}")
        with torch.no_grad():
            for name, p in params.items():
                p.add_(hp["accumulated"][name].to(p.device, p.dtype), alpha=hp["scale"])
        return net.eval()
    at = fresh_copy(model)
    if hp["reference_state"] is not None:
        at.load_state_dict(hp["reference_state"])
    grads = forget_gradient(at, splits.forget_x, splits.forget_y, hp["batch_size"])
    scale = hp["scale"] * hp["lr"] * hp["epochs"] / hp["batch_size"]
    with torch.no_grad():
        for p, g in zip(net.parameters(), grads):
            p.add_(g, alpha=scale)
    return net.eval()
