"""IncompTeacher: the forget-side half of Bad Teacher, run with BN in train mode.

The paper lists it apart from BadTeacher. Our reading: the student is
distilled only toward the randomly initialised (incompetent) teacher on
forget batches, without the competent-teacher retain term, and BN is left in
train mode, so forget batches also overwrite the running statistics (BN
*corruption*, where BadTeacher shows *misalignment*).

How much corruption depends on the number of train-mode batches: BN's momentum of 0.1
leaves 0.9**k of the old running statistics after k forget batches (4 batches: 66%,
16 batches: 19%), so a run of a few steps barely moves them. The chapter's profiles give
it several epochs over the forget set (``epochs``).
"""
from __future__ import annotations

from torch import nn

from memlab.science.unlearning._common import hparams
from memlab.science.unlearning.badteacher import teacher_distillation
from memlab.science.unlearning.registry import register

DEFAULTS = {
    "epochs": 1,
    "lr": 1e-4,
    "kd_T": 1.0,
    "batch_size": 256,
    "max_steps": 0,
    "seed": 0,
}


@register("IncompTeacher", bn_mode="train")
def incompteacher(model: nn.Module, splits, cfg=None) -> nn.Module:
    """cfg keys: epochs, lr, kd_T, batch_size, max_steps, seed."""
    hp = hparams(cfg, DEFAULTS, "IncompTeacher")
    return teacher_distillation(model, splits, {**hp, "retain_fraction": 0.0}, use_competent=False, bn_mode="train",
                                desc="IncompTeacher")
