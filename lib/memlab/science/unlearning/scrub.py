"""SCRUB (Kurmanji et al., 2023): teacher-student max/min distillation, BN in train mode.

The student starts as the original model and the (frozen, eval-mode) original
is the teacher. Each epoch the student first makes ``max_steps`` steps that
*increase* KL to the teacher on forget batches (only in the first ``msteps``
epochs), then ``min_steps`` steps that decrease
``gamma * CE + alpha * KL`` on retain batches. The min steps run retain data
through BN in train mode last, which re-estimates the running statistics.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from memlab.core.progress import progress
from memlab.science.unlearning._common import (
    device_of,
    distill_kl,
    fresh_copy,
    hparams,
    index_stream,
    set_bn_mode,
    sgd,
    take,
)
from memlab.science.unlearning.registry import register

DEFAULTS = {
    "epochs": 5,           # sgda_epochs of the reference scripts
    "msteps": 3,           # epochs that include max steps
    "max_steps": 40,       # forget batches per max phase (~one pass over 5000 forget images at 128)
    "min_steps": 350,      # retain batches per min phase (~one pass over 45000 retain images)
    "lr": 5e-4,
    "kd_T": 4.0,
    "alpha": 0.001,        # weight of KL in the min loss
    "gamma": 0.99,         # weight of CE in the min loss
    "batch_size": 128,
    "momentum": 0.9,
    "weight_decay": 5e-4,
    "seed": 0,
}


@register("SCRUB", bn_mode="train")
def scrub(model: nn.Module, splits, cfg=None) -> nn.Module:
    """cfg keys: epochs, msteps, max_steps, min_steps, lr, kd_T, alpha, gamma, batch_size, momentum, weight_decay, seed."""
    hp = hparams(cfg, DEFAULTS, "SCRUB")
    teacher = copy.deepcopy(model).eval()
    student = fresh_copy(model)
    dev = device_of(student)
    g = torch.Generator().manual_seed(hp["seed"])
    forget = index_stream(len(splits.forget_x), hp["batch_size"], g)
    retain = index_stream(len(splits.retain_x), hp["batch_size"], g)
    opt = sgd(student, hp["lr"], hp["momentum"], hp["weight_decay"])
    total = hp["epochs"] * hp["min_steps"] + min(hp["msteps"], hp["epochs"]) * hp["max_steps"]
    bar = progress(total=total, desc="SCRUB")
    set_bn_mode(student, "train")
    for epoch in range(hp["epochs"]):
        phases = (["max"] if epoch < hp["msteps"] else []) + ["min"]
        for phase in phases:
            for _ in range(hp["max_steps"] if phase == "max" else hp["min_steps"]):
                if phase == "max":
                    idx = next(forget)
                    xb = take(splits.forget_x, idx, dev)
                else:
                    idx = next(retain)
                    xb, yb = take(splits.retain_x, idx, dev), take(splits.retain_y, idx, dev)
                with torch.no_grad():
                    t_logits = teacher(xb)
                s_logits = student(xb)
                kl = distill_kl(s_logits, t_logits, hp["kd_T"])
                loss = -kl if phase == "max" else hp["gamma"] * F.cross_entropy(s_logits, yb) + hp["alpha"] * kl
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                bar.update(1)
    bar.close()
    return student.eval()
