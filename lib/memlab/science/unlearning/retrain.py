"""Retrain: the exact-unlearning reference, trained from scratch on the retain set only."""
from __future__ import annotations

import torch
from torch import nn

from memlab.models.fastcnn import FastCNN
from memlab.models.recipe import train_supervised
from memlab.science.unlearning._common import fresh_copy, hparams
from memlab.science.unlearning.registry import register

DEFAULTS = {
    "epochs": 182,        # CIFAR-10 schedule of the SalUn/Sparse-Unlearn code bases
    "batch_size": 256,
    "lr": 0.1,
    "momentum": 0.9,
    "weight_decay": 5e-4,
    "augment": True,
    "seed": 0,
}


def reinitialise(model: nn.Module, seed: int) -> nn.Module:
    """Reset every parameter and running statistic of ``model`` in place, seeded."""
    torch.manual_seed(seed)
    for m in model.modules():
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()
    return model


@register("Retrain", bn_mode="n/a")
def retrain(model: nn.Module, splits, cfg=None) -> nn.Module:
    """Same architecture as ``model``, re-initialised and trained on (retain_x, retain_y) by the
    recipe its kind trains by (:func:`memlab.models.recipe.train_supervised`: the fast CNN's own recipe,
    which sets its momentum, weight decay and augmentation; SGD with cosine decay for the others).

    cfg keys: epochs, batch_size, lr, momentum, weight_decay, augment, seed (see DEFAULTS).
    """
    hp = hparams(cfg, DEFAULTS, "Retrain")
    if isinstance(model, FastCNN):  # its whitening and Dirac inits are not any layer's reset_parameters
        torch.manual_seed(hp["seed"])
        net = model.fresh()
    else:
        net = reinitialise(fresh_copy(model), hp["seed"])
    train_supervised(net, splits.retain_x, splits.retain_y, epochs=hp["epochs"], batch_size=hp["batch_size"],
                     lr=hp["lr"], momentum=hp["momentum"], weight_decay=hp["weight_decay"],
                     augment=hp["augment"], seed=hp["seed"], desc="Retrain")
    return net.eval()
