"""SalUn (Fan et al., 2024): saliency-masked random-label unlearning.

1. Saliency: accumulate |grad| of the forget-set loss over all forget data
   (model in eval mode, as in the reference ``generate_mask.py``); keep the
   top ``mask_ratio`` fraction of weights, ranked globally.
2. Random labelling: fine-tune with forget images relabelled uniformly at
   random, gradients multiplied by the mask, BN in train mode.

What the reference does (github.com/OPTML-Group/Unlearn-Saliency,
``Classification/unlearn/RL.py``): for CIFAR-10 (and SVHN) every epoch is a forget-only
pass over the randomly relabelled forget loader followed by a retain-only pass over the
retain loader with true labels, both with ``model.train()``; only for CIFAR-100 and
Tiny-ImageNet is the relabelled forget set concatenated with the retain set and shuffled.
Its CIFAR-10 retain pass therefore re-estimates the BN statistics after the forget pass.
The BN-illusion paper audits a pipeline whose last batches are forget batches (its SalUn
gap is +62.1 pp) and sweeps the retain share of each batch in Appendix Q (a share of at
least 25% removes the gap). We implement that audited pipeline: ``retain_mix`` is the
fraction of every batch drawn from the retain set with true labels (0 by default), and
with BN in train mode a forget-heavy batch rewrites the running statistics toward the
forget class: the BN corruption of the paper.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from memlab.science.unlearning._common import device_of, fresh_copy, hparams
from memlab.science.unlearning.randlabel import check_retain_mix, relabel_finetune
from memlab.science.unlearning.registry import register

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
    check_retain_mix(hp, "SalUn")
    net = fresh_copy(model)
    mask = saliency_mask(net, splits.forget_x, splits.forget_y, hp["mask_ratio"])
    return relabel_finetune(net, splits, hp, "SalUn", grad_mask=mask)
