"""GA: gradient ascent on the forget-set cross-entropy (Thudi et al.; SalUn code base), BN in train mode."""
from __future__ import annotations

import torch
from torch import nn

from memlab.science.unlearning._common import ce_steps, fresh_copy, hparams, index_stream, sgd
from memlab.science.unlearning.registry import register

DEFAULTS = {
    "steps": 500,       # the paper's GA row is at 500 steps (Appendix H sweeps 100..500)
    "lr": 1e-4,
    "batch_size": 128,
    "momentum": 0.9,
    "weight_decay": 5e-4,
    "seed": 0,
}


def gradient_ascent(net: nn.Module, x: torch.Tensor, y: torch.Tensor, *, steps: int, lr: float, batch_size: int,
                    momentum: float, weight_decay: float, seed: int, desc: str = "GA", on_step=None) -> nn.Module:
    """``steps`` SGD steps maximising CE on (x (N,C,H,W), y (N,)), BN in train mode, in place.

    ``on_step(step, net)``, if given, is called after every step (1-based), e.g. to snapshot the model.
    """
    batches = index_stream(len(x), batch_size, torch.Generator().manual_seed(seed))
    return ce_steps(net, x, y, batches, sgd(net, lr, momentum, weight_decay), steps, desc=desc, ascent=True,
                    on_step=on_step)


@register("GA", bn_mode="train")
def ga(model: nn.Module, splits, cfg=None) -> nn.Module:
    """Gradient ascent on the forget set. cfg keys: steps, lr, batch_size, momentum, weight_decay, seed."""
    hp = hparams(cfg, DEFAULTS, "GA")
    return gradient_ascent(fresh_copy(model), splits.forget_x, splits.forget_y, **hp)
