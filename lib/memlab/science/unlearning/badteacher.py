"""Bad Teacher (Chundawat et al., 2023): distil from a competent and an incompetent teacher.

Batches are drawn from the forget set plus a ``retain_fraction`` subset of
the retain set, shuffled together (the reference mixing ratio). Forget images
are pulled toward the softened outputs of a randomly initialised
(incompetent) teacher, retain images toward the original (competent) model.
As in the reference ``blindspot_unlearner`` run on an eval-mode model, BN
stays frozen: the weights drift while the running statistics do not, which
is the paper's BN *misalignment*.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from memlab.core.progress import progress
from memlab.science.unlearning._common import device_of, fresh_copy, hparams, index_stream, set_bn_mode, take
from memlab.science.unlearning.registry import register
from memlab.science.unlearning.retrain import reinitialise

DEFAULTS = {
    "epochs": 1,              # reference: one epoch over forget + retain subset
    "retain_fraction": 0.3,   # share of the retain set mixed in (reference 30%)
    "lr": 1e-4,               # Adam, as in the reference
    "kd_T": 1.0,              # KL temperature of the reference
    "batch_size": 256,
    "max_steps": 0,           # 0: no cap; otherwise stop after this many steps
    "seed": 0,
}


def unlearner_targets(x_logits_comp: torch.Tensor, x_logits_incomp: torch.Tensor, is_forget: torch.Tensor,
                      temperature: float) -> torch.Tensor:
    """(B, K) soft targets: the incompetent teacher's on forget rows, the competent one's on the rest."""
    comp = F.softmax(x_logits_comp / temperature, 1)
    incomp = F.softmax(x_logits_incomp / temperature, 1)
    return torch.where(is_forget[:, None], incomp, comp)


def teacher_distillation(model: nn.Module, splits, hp: dict, *, use_competent: bool, bn_mode: str,
                         desc: str) -> nn.Module:
    """Shared loop of BadTeacher and IncompTeacher (see their modules); returns the student."""
    competent = copy.deepcopy(model).eval()
    incompetent = reinitialise(copy.deepcopy(model), hp["seed"] + 1).eval()
    student = fresh_copy(model)
    dev = device_of(student)
    g = torch.Generator().manual_seed(hp["seed"])
    n_ret = int(round(hp["retain_fraction"] * len(splits.retain_x))) if use_competent else 0
    ret_idx = torch.randperm(len(splits.retain_x), generator=g)[:n_ret]
    x = torch.cat([splits.forget_x, splits.retain_x[ret_idx]])
    is_forget = torch.cat([torch.ones(len(splits.forget_x), dtype=torch.bool), torch.zeros(n_ret, dtype=torch.bool)])
    steps_per_epoch = -(-len(x) // hp["batch_size"])
    steps = hp["epochs"] * steps_per_epoch
    if hp["max_steps"]:
        steps = min(steps, hp["max_steps"])
    batches = index_stream(len(x), hp["batch_size"], g)
    opt = torch.optim.Adam(student.parameters(), lr=hp["lr"])
    set_bn_mode(student, bn_mode)
    for _ in progress(range(steps), desc=desc):
        idx = next(batches)
        xb, fb = take(x, idx, dev), is_forget[idx].to(dev)
        with torch.no_grad():
            target = unlearner_targets(competent(xb), incompetent(xb), fb, hp["kd_T"])
        loss = F.kl_div(F.log_softmax(student(xb) / hp["kd_T"], 1), target, reduction="batchmean")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return student.eval()


@register("BadTeacher", bn_mode="eval")
def badteacher(model: nn.Module, splits, cfg=None) -> nn.Module:
    """cfg keys: epochs, retain_fraction, lr, kd_T, batch_size, max_steps, seed."""
    hp = hparams(cfg, DEFAULTS, "BadTeacher")
    if not 0.0 < hp["retain_fraction"] <= 1.0:
        raise ValueError(f"BadTeacher: hyperparameter 'retain_fraction' must be in (0, 1] (got {hp['retain_fraction']!r})")
    return teacher_distillation(model, splits, hp, use_competent=True, bn_mode="eval", desc="BadTeacher")
