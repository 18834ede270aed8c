"""Chapter 1: the BatchNorm illusion in unlearning evaluation.

The experiment functions the chapter notebook calls, its parameters (SPEC,
CHECKS) and its claims. One code path serves the three profiles; only the
sizes in SPEC and in METHOD_HPARAMS change.

Data flow: :func:`load_data` -> :func:`original_model` (cached) ->
:func:`unlearned_model` for every method (cached) -> :func:`audit`
(Pre-F/Post-F/Pre-R/Post-R), :func:`linear_probe`, :func:`relearn_curve` ->
the tables and figures of the paper.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from scipy import stats
from torch import nn

from memlab import bn, cache, probes
from memlab.config import SEED_HIGH, ConfigError, Param, device, require_memory, seed_everything
from memlab.data import vision
from memlab.models.resnet import resnet18
from memlab.models.vit import vit_small
from memlab.progress import progress
from memlab.train import accuracy, train_classifier
from memlab.unlearning import registry
from memlab.unlearning._common import hparams
from memlab.unlearning.ga import DEFAULTS as GA_DEFAULTS
from memlab.unlearning.ga import gradient_ascent
from memlab.unlearning.salun import DEFAULTS as SALUN_DEFAULTS
from memlab.unlearning.registry import Splits

CHAPTER = "01_bn_illusion"
# 2: NoiseInject drops partial batches; 3: issue 15 (cpu regime, merged last batch, methods)
CODE_VERSION = "3"
METHODS = ["Retrain", "SCRUB", "GA", "GA+FT", "SalUn", "BadTeacher", "IncompTeacher", "NoiseInject", "SSD", "PGU"]
NUM_CLASSES = {"cifar10": 10, "cifar100": 100}
# Measured CPU cost (1 thread) of training every cached model of one cold `cpu` run, issue 15, on a
# 2-core AMD EPYC (AVX2) shared with other jobs: Original 274 s, Retrain 228 s, GroupNorm Original 77 s
# and Retrain 71 s, the 17 unlearned models and 2 Appendix Q models about 385 s. The chapter adds the
# CPU time of its own run (the audits, probes and recoveries) to give the cold figure.
COLD_TRAIN_CPU_S = 274 + 228 + 77 + 71 + 385
OOD_SOURCES = ("patch_shuffle", "cifar100")

SPEC: dict[str, Param] = {
    "seed": Param(int, 0, low=0, high=SEED_HIGH, doc="first seed; seeds are seed, seed+1, ..."),
    "n_seeds": Param(int, {"smoke": 1, "cpu": 1, "paper": 3}, low=1, high=10, doc="seeds per Table 1 row"),
    "dataset": Param(str, "cifar10", choices=("cifar10", "cifar100"), doc="CIFAR-100 needs its images (paper)"),
    "forget_class": Param(int, 0, low=0, doc="first class to forget"),
    "n_forget_classes": Param(int, 1, low=1, high=10, doc="forget classes forget_class, forget_class+1, ..."),
    "width": Param(int, {"smoke": 4, "cpu": 8, "paper": 64}, low=1, doc="ResNet-18 stem channels"),
    "train_per_class": Param(int, {"smoke": 20, "cpu": 1000, "paper": 5000}, low=1, high=5000,
                             doc="training images per class (CIFAR-10 has 5000, CIFAR-100 500)"),
    "test_per_class": Param(int, {"smoke": 20, "cpu": 250, "paper": 1000}, low=1, high=1000,
                            doc="test images of each forget class used for forget accuracy (CIFAR: <= 1000)"),
    "eval_retain": Param(int, {"smoke": 60, "cpu": 300, "paper": 45000}, low=1,
                         doc="retain training images for Pre-R / Post-R (capped by the retain set)"),
    "epochs": Param(int, {"smoke": 2, "cpu": 15, "paper": 182}, low=1, doc="epochs of Original and Retrain"),
    "batch_size": Param(int, {"smoke": 32, "cpu": 128, "paper": 256}, low=1),
    "lr": Param(float, {"smoke": 0.05, "cpu": 0.05, "paper": 0.1}, low=1e-8, high=10.0),
    "methods": Param(list, METHODS, item=str, choices=METHODS, doc="Table 1 rows"),
    "recal_batch": Param(int, 128, low=1, doc="batch size of the recalibration pass"),
    "recal_images": Param(int, {"smoke": 0, "cpu": 3000, "paper": 0}, low=0,
                          doc="retain images of the audit's recalibration (0: every retain image; "
                              "the paper uses at least 5000)"),
    "recovery_methods": Param(list, ["BadTeacher", "NoiseInject", "SalUn"], item=str, choices=METHODS),
    "recovery_b": Param(int, 100, low=1, doc="images of the Figure 1a recovery"),
    "budgets": Param(list, {"smoke": [10, 50], "cpu": [10, 30, 100, 300],
                            "paper": [10, 25, 50, 100, 500, 1000, 2500, 5000, 9000]}, item=int, low=1,
                     doc="recovery budgets B of Figure 1b"),
    "ood_source": Param(str, {"smoke": "patch_shuffle", "cpu": "patch_shuffle", "paper": "cifar100"},
                        choices=OOD_SOURCES, doc="out-of-distribution recovery images"),
    "lp_per_class": Param(int, {"smoke": 10, "cpu": 50, "paper": 50}, low=1, doc="linear-probe training samples per class (LP-50)"),
    "relearn_samples": Param(int, {"smoke": 10, "cpu": 50, "paper": 50}, low=1,
                             doc="forget-class samples of the relearning attack"),
    "relearn_epochs": Param(int, {"smoke": 2, "cpu": 5, "paper": 50}, low=1),
    "relearn_lr": Param(float, 0.01, low=1e-8, high=10.0),
    "gn_control": Param(bool, True, doc="train the GroupNorm control"),
    "gn_epochs": Param(int, {"smoke": 2, "cpu": 5, "paper": 182}, low=1,
                       doc="epochs of the GroupNorm control's Original and Retrain (cpu: shorter, for time)"),
    "vit_control": Param(bool, {"smoke": True, "cpu": False, "paper": True},
                         doc="train the LayerNorm ViT control (Appendix M)"),
    "vit_dim": Param(int, {"smoke": 32, "cpu": 96, "paper": 384}, low=1, doc="ViT width (ViT-S: 384)"),
    "vit_depth": Param(int, {"smoke": 1, "cpu": 4, "paper": 12}, low=1, doc="ViT blocks (ViT-S: 12)"),
    "ga_steps_sweep": Param(list, {"smoke": [1, 2], "cpu": [20, 60, 100], "paper": [100, 200, 300, 400, 500]},
                            item=int, low=1, doc="Appendix H: GA step counts"),
    "salun_mix_sweep": Param(list, {"smoke": [0.0, 0.5], "cpu": [0.0, 0.25, 0.5],
                                    "paper": [0.0, 0.1, 0.25, 0.5, 0.75]}, item=float, low=0.0, high=0.95,
                             doc="Appendix Q: retain share of SalUn batches"),
}


def _check_classes(cfg) -> None:
    k = NUM_CLASSES[cfg.dataset]
    if cfg.forget_class >= k:
        raise ConfigError(f"parameter 'forget_class': must be in [0, {k - 1}] for {cfg.dataset} (got {cfg.forget_class})")
    if cfg.n_forget_classes >= k:  # unlearning needs a retain set
        raise ConfigError(f"parameter 'n_forget_classes': must leave at least one of the {k} classes of "
                          f"{cfg.dataset} to retain, so at most {k - 1} (got {cfg.n_forget_classes})")
    if cfg.forget_class + cfg.n_forget_classes > k:
        raise ConfigError(f"parameter 'n_forget_classes': forget_class + n_forget_classes must be <= {k} "
                          f"(got {cfg.forget_class} + {cfg.n_forget_classes})")


def _check_budgets(cfg) -> None:
    k = NUM_CLASSES[cfg.dataset]
    retain = (k - cfg.n_forget_classes) * cfg.train_per_class
    pool = (k - cfg.n_forget_classes) * (1000 if cfg.dataset == "cifar10" else 100)  # test images, other classes
    avail = min(retain, pool)
    if cfg.recal_images > retain:
        raise ConfigError(f"parameter 'recal_images': at most the {retain} retain images (got {cfg.recal_images})")
    for b in [*cfg.budgets, cfg.recovery_b]:
        if b > avail:
            raise ConfigError(f"parameter 'budgets': a recovery budget of {b} images exceeds the {avail} available "
                              f"(retain set {retain}, held-out test pool {pool})")


def _check_sizes(cfg) -> None:
    per_class = {"cifar10": (5000, 1000), "cifar100": (500, 100)}[cfg.dataset]
    for name, cap in zip(("train_per_class", "test_per_class"), per_class):
        if cfg[name] > cap:
            raise ConfigError(f"parameter {name!r}: {cfg.dataset} holds {cap} images per class "
                              f"(got {cfg[name]})")
    from memlab.models.resnet import train_memory_bytes

    batch = max(cfg.batch_size, cfg.recal_batch,
                *(h.get("batch_size", 256) for h in cfg.method_hparams.values()))
    require_memory("width", train_memory_bytes(cfg.width, batch, NUM_CLASSES[cfg.dataset]),
                   f"a ResNet-18 of width {cfg.width} at batch {batch}")
    if cfg.lp_per_class > cfg.train_per_class or cfg.relearn_samples > cfg.train_per_class:
        raise ConfigError(f"parameter 'lp_per_class': lp_per_class and relearn_samples must be <= train_per_class "
                          f"({cfg.train_per_class}) (got {cfg.lp_per_class}, {cfg.relearn_samples})")


def _check_methods(cfg) -> None:
    missing = [m for m in cfg.recovery_methods if m not in cfg.methods]
    if missing:
        raise ConfigError(f"parameter 'recovery_methods': every recovery method must also be in 'methods' "
                          f"(missing: {', '.join(missing)})")


CHECKS = [_check_classes, _check_sizes, _check_methods, _check_budgets]

# ----------------------------------------------------------------------------- hyperparameters

# One place for every method's hyperparameters. "paper" holds the reference
# defaults (each module's DEFAULTS); "cpu" and "smoke" scale the step counts to
# the smaller forget/retain sets (1000/9000 and 20/180 images).
METHOD_HPARAMS: dict[str, dict[str, dict]] = {
    "smoke": {
        "GA": dict(steps=2, lr=1e-3, batch_size=16),
        "GA+FT": dict(ga_steps=2, ga_lr=1e-3, ft_steps=3, ft_lr=0.01, batch_size=16),
        "SalUn": dict(steps=3, lr=0.013, batch_size=16),
        "SCRUB": dict(epochs=2, msteps=1, max_steps=2, min_steps=2, batch_size=16),
        "BadTeacher": dict(epochs=1, batch_size=32),
        "IncompTeacher": dict(epochs=1, batch_size=16),
        "NoiseInject": dict(noise_batch=8, noise_steps=3, retain_per_class=5, batch_size=16),
        "SSD": dict(batch_size=32),
        "PGU": dict(retain_samples=40, positions=8, steps=3, lr=0.01, batch_size=16),
    },
    "cpu": {
        # Forget/retain sets are 1/5 of the paper's (1000/9000 images). GA keeps the paper's step
        # count in forget epochs (500 steps x 128 / 5000 = 12.8 epochs); every other method was
        # tuned on one rule only (TUNING below): retain accuracy (Pre-R) within 10 pp of the original's.
        "GA": dict(steps=100, lr=1e-4, batch_size=128),
        "GA+FT": dict(ga_steps=20, ga_lr=1e-4, ft_steps=100, ft_lr=0.01, batch_size=128),
        "SalUn": dict(steps=80, lr=0.0005, batch_size=128),
        "SCRUB": dict(epochs=3, msteps=2, max_steps=8, min_steps=35, lr=5e-4, batch_size=128),
        "BadTeacher": dict(epochs=1, lr=1e-3, batch_size=64),
        "IncompTeacher": dict(epochs=5, lr=3e-5, batch_size=64),
        "NoiseInject": dict(noise_batch=64, retain_per_class=200, batch_size=64, impair_lr=0.01),
        "SSD": dict(alpha=200.0, batch_size=128),
        "PGU": dict(retain_samples=500, positions=32, steps=40, lr=0.01, batch_size=128),
    },
    "paper": {name: {} for name in METHODS if name != "Retrain"},
}

# How the cpu values above were chosen (issue 15), on the cpu Original (Pre-R 72.3% on 300 retain images):
# candidates from the reference value toward milder ones, the first whose Pre-R drop is <= 10 pp kept,
# else the one with the smallest drop. Forget accuracy and verdicts were not looked at. Pre-R drops (pp):
TUNING = {
    "SalUn": {"lr": {0.013: 50.3, 0.005: 38.7, 0.002: 24.0, 0.001: 16.3, 0.0005: 11.0}},
    "SSD": {"alpha": {10.0: 59.3, 25.0: 63.3, 100.0: 11.0, 200.0: -0.7, 500.0: 0.0}},
    "IncompTeacher": {"lr": {3e-4: 31.3, 1e-4: 21.0, 3e-5: 9.7}},
    "NoiseInject": {"impair_lr": {0.02: 17.7, 0.01: 14.0, 0.005: 15.3, 0.002: 53.0}},
    "BadTeacher": {"lr": {1e-3: 6.0}}, "SCRUB": {"lr": {5e-4: -1.0}}, "GA+FT": {"ft_lr": {0.01: 1.0}},
    "PGU": {"lr": {0.01: 2.3}}, "GA": {"steps (paper's forget epochs, not tuned)": {100: 13.7}},
}

# Ranges of the methods' hyperparameters by key name (others: integers >= 0, numbers >= 0).
_HP_RANGES = {
    "batch_size": dict(low=1), "noise_batch": dict(low=1), "positions": dict(low=1),
    "retain_samples": dict(low=1), "retain_per_class": dict(low=1), "epochs": dict(low=1),
    "mask_ratio": dict(low=0.0, high=1.0, closed="right"),
    "retain_mix": dict(low=0.0, high=1.0, closed="left"),
    "retain_fraction": dict(low=0.0, high=1.0), "threshold": dict(low=0.0, high=1.0, closed="neither"),
    "kd_T": dict(low=0.0, closed="neither"), "lam": dict(low=0.0, closed="neither"),
}


def _hparam_schema() -> dict[str, dict[str, Param]]:
    """Method -> key -> Param, from each unlearning module's DEFAULTS (``seed`` is the chapter's)."""
    import sys

    schema = {}
    for name in METHODS:
        if name == "Retrain":  # follows the chapter's epochs / batch_size / lr
            continue
        defaults = sys.modules[registry.get(name).fn.__module__].DEFAULTS
        schema[name] = {}
        for key, v in defaults.items():
            if key == "seed":
                continue
            rng = _HP_RANGES.get(key) or (dict(low=0.0, closed="neither") if "lr" in key else dict(low=0))
            schema[name][key] = Param(type(v), v, doc=f"{name} hyperparameter (memlab.unlearning)", **rng)
    return schema


# Per-method hyperparameters are one SPEC entry: set one as -p SalUn.lr 0.01 (METHOD.KEY).
SPEC["method_hparams"] = Param(dict, METHOD_HPARAMS, schema=_hparam_schema(),
                               doc="per-method hyperparameters (profile values over each module's DEFAULTS)")


def method_hparams(cfg, name: str, seed: int, norm: str = "bn", **overrides) -> dict:
    """The hyperparameters of ``name`` in ``cfg`` for ``seed`` (Retrain follows the chapter schedule
    of ``norm``'s Original, see :func:`epochs_for`).

    Holds only the keys the profile (or a ``-p METHOD.KEY`` override) sets; the method fills
    the rest from its module's DEFAULTS. The dict is part of the unlearned model's cache key.
    """
    if name == "Retrain":
        return dict(epochs=epochs_for(cfg, norm), batch_size=cfg.batch_size, lr=cfg.lr, seed=seed)
    groups = cfg.get("method_hparams") or METHOD_HPARAMS[cfg.profile]
    return {**groups.get(name, {}), **overrides, "seed": seed}

# ----------------------------------------------------------------------------- data


@dataclass
class Data:
    """Everything the chapter measures on. Images (N, 3, 32, 32) normalised; labels (N,) int64."""

    splits: Splits            # forget / retain training sets
    test_forget_x: torch.Tensor  # test images of the forget classes (forget accuracy)
    test_forget_y: torch.Tensor
    eval_retain_x: torch.Tensor  # retain training images for Pre-R / Post-R
    eval_retain_y: torch.Tensor
    pool_x: torch.Tensor      # held-out test images (no forget class): unlabelled recovery source
    ood_x: torch.Tensor       # out-of-distribution recovery source, same size as pool_x
    forget_classes: list[int]
    num_classes: int
    ood_note: str
    test_x: torch.Tensor      # test_per_class test images of every class (test accuracy, regime table)
    test_y: torch.Tensor
    recal_x: torch.Tensor     # retain training images of the audit's recalibration (``recal_images``)


def forget_classes(cfg) -> list[int]:
    return list(range(cfg.forget_class, cfg.forget_class + cfg.n_forget_classes))


def patch_shuffle(x: torch.Tensor, patch: int = 8, seed: int = 0) -> torch.Tensor:
    """Images (N, C, H, W) with their patch x patch tiles randomly permuted, per image.

    Keeps every pixel value and local texture of natural CIFAR-10 test images
    but destroys the object layout: the offline stand-in for the paper's
    CIFAR-100 pixels as an out-of-distribution recovery source.
    """
    n, c, h, w = x.shape
    if h % patch or w % patch:
        raise ValueError(f"parameter 'patch': must divide the image size {h}x{w} (got {patch})")
    gh, gw = h // patch, w // patch
    tiles = x.reshape(n, c, gh, patch, gw, patch).permute(0, 2, 4, 1, 3, 5).reshape(n, gh * gw, c, patch, patch)
    g = torch.Generator().manual_seed(seed)
    order = torch.stack([torch.randperm(gh * gw, generator=g) for _ in range(n)])
    tiles = tiles[torch.arange(n)[:, None], order]
    return tiles.reshape(n, gh, gw, c, patch, patch).permute(0, 3, 1, 4, 2, 5).reshape(n, c, h, w).contiguous()


def load_data(cfg) -> Data:
    """Class-balanced training subset, forget/retain split, forget-class test set and recovery pools."""
    classes = forget_classes(cfg)
    k = NUM_CLASSES[cfg.dataset]
    x, y = vision.load_cifar("train", cfg.dataset, n_per_class=cfg.train_per_class, seed=cfg.seed)
    is_forget = torch.isin(y, torch.tensor(classes))
    splits = Splits(x[is_forget], y[is_forget], x[~is_forget], y[~is_forget], k)
    tx, ty = vision.load_cifar("test", cfg.dataset, seed=cfg.seed)
    perm = torch.randperm(len(ty), generator=torch.Generator().manual_seed(cfg.seed))
    tx, ty = tx[perm], ty[perm]
    test_forget = torch.cat([(ty == c).nonzero().flatten()[: cfg.test_per_class] for c in classes])
    # The pool excludes every forget-class test image, so recovery never sees an evaluated image.
    pool = (~torch.isin(ty, torch.tensor(classes))).nonzero().flatten()
    g = torch.Generator().manual_seed(cfg.seed + 1)
    ev = torch.randperm(len(splits.retain_x), generator=g)[: cfg.eval_retain]
    pool_x = tx[pool]
    if cfg.ood_source == "cifar100":
        raw, _ = vision.load_raw("test", "cifar100")
        ood_x = vision.normalise(raw, "cifar10")[: len(pool_x)]
        note = "CIFAR-100 test images normalised with CIFAR-10 statistics (as in the paper)"
    else:
        ood_x = patch_shuffle(pool_x, 8, cfg.seed)
        note = ("held-out CIFAR-10 test images (no forget class) cut into 8x8 tiles that are randomly permuted "
                "per image: natural pixel statistics, no object layout (offline stand-in for CIFAR-100)")
    # The forget classes' share of this balanced test set is exactly test_forget.
    balanced = torch.cat([(ty == c).nonzero().flatten()[: cfg.test_per_class] for c in range(k)])
    n_cal = cfg.recal_images or len(splits.retain_x)
    cal = torch.randperm(len(splits.retain_x), generator=torch.Generator().manual_seed(cfg.seed + 2))[:n_cal]
    return Data(splits, tx[test_forget], ty[test_forget], splits.retain_x[ev], splits.retain_y[ev], pool_x, ood_x,
                classes, k, note, tx[balanced], ty[balanced], splits.retain_x[cal])

# ----------------------------------------------------------------------------- models


def epochs_for(cfg, norm: str) -> int:
    """Training epochs of the Original and Retrain of one normalisation (GroupNorm: ``gn_epochs``)."""
    return cfg.gn_epochs if norm == "gn" else cfg.epochs


def _data_key(cfg, seed: int, norm: str) -> dict:
    return dict(dataset=cfg.dataset, train_per_class=cfg.train_per_class, data_seed=cfg.seed, width=cfg.width,
                norm=norm, epochs=epochs_for(cfg, norm), batch_size=cfg.batch_size, lr=cfg.lr, seed=seed)


def build(cfg, norm: str = "bn") -> nn.Module:
    return resnet18(NUM_CLASSES[cfg.dataset], norm=norm, width=cfg.width).to(device())


def original_model(cfg, data: Data, seed: int, norm: str = "bn") -> nn.Module:
    """The model trained on all classes (cached)."""
    s = data.splits
    x, y = torch.cat([s.retain_x, s.forget_x]), torch.cat([s.retain_y, s.forget_y])

    def train(model):
        seed_everything(seed)
        train_classifier(model, x, y, epochs=epochs_for(cfg, norm), batch_size=cfg.batch_size, lr=cfg.lr,
                         seed=seed, desc=f"Original ({norm}, seed {seed})")

    def make():
        torch.manual_seed(seed)
        return build(cfg, norm)

    return cache.load_or_train(CHAPTER, "original", _data_key(cfg, seed, norm), make, train, CODE_VERSION)


def fingerprint(model: nn.Module) -> str:
    """SHA-256 of every parameter and buffer: ties a cached unlearned model to the exact original."""
    import hashlib

    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def unlearned_model(cfg, data: Data, original: nn.Module, method: str, seed: int, norm: str = "bn",
                    **overrides) -> nn.Module:
    """``method`` applied to ``original`` with the profile's hyperparameters (cached)."""
    fn = registry.get(method).fn
    hp = method_hparams(cfg, method, seed, norm, **overrides)
    key = dict(_data_key(cfg, seed, norm), forget=data.forget_classes, method=method, hp=hp,
               original=fingerprint(original))

    def train(model):
        seed_everything(seed)
        out = fn(original, data.splits, hp)
        model.load_state_dict(out.state_dict())

    return cache.load_or_train(CHAPTER, "unlearned", key, lambda: copy.deepcopy(original), train, CODE_VERSION)

# ----------------------------------------------------------------------------- metrics


def forget_accuracy(model: nn.Module, data: Data) -> float:
    """Forget-class test accuracy in percent."""
    return 100.0 * accuracy(model, data.test_forget_x, data.test_forget_y)


def retain_accuracy(model: nn.Module, data: Data) -> float:
    """Accuracy in percent on the retain training images of ``data.eval_retain_x``."""
    return 100.0 * accuracy(model, data.eval_retain_x, data.eval_retain_y)


def audit(model: nn.Module, data: Data, batch_size: int = 128) -> tuple[dict, nn.Module]:
    """Pre-F, Post-F, dF (pp), Pre-R, Post-R of ``model`` and its full-retain recalibration.

    Returns (metrics, recalibrated copy). Recalibration uses the ``recal_images`` retain training
    images of ``data.recal_x`` (every retain image when ``recal_images`` is 0).
    """
    cal = bn.recalibrate(model, data.recal_x, batch_size)
    pre_f, post_f = forget_accuracy(model, data), forget_accuracy(cal, data)
    row = {"Pre-F": pre_f, "Post-F": post_f, "ΔF": post_f - pre_f,
           "Pre-R": retain_accuracy(model, data), "Post-R": retain_accuracy(cal, data)}
    return row, cal


def regime(models: dict[str, nn.Module], data: Data) -> pd.DataFrame:
    """The regime table: per model, accuracy (%) on retain training images (Pre-R), on the
    balanced test set (``test_per_class`` images of every class) and on the forget-class test
    images, with the image counts and 95% Wilson intervals of the first two."""
    from memlab.metrics import wilson_interval

    rows = {}
    n_r, n_t, n_f = len(data.eval_retain_y), len(data.test_y), len(data.test_forget_y)
    for name, model in models.items():
        r, t, f = retain_accuracy(model, data), 100.0 * accuracy(model, data.test_x, data.test_y), \
            forget_accuracy(model, data)
        lo_r, hi_r = wilson_interval(int(round(r * n_r / 100)), n_r)
        lo_t, hi_t = wilson_interval(int(round(t * n_t / 100)), n_t)
        rows[name] = {"train acc (retain)": r, "test acc": t, "forget-class test acc": f,
                      "train 95% CI": f"{100 * lo_r:.1f}-{100 * hi_r:.1f}",
                      "test 95% CI": f"{100 * lo_t:.1f}-{100 * hi_t:.1f}"}
    out = pd.DataFrame.from_dict(rows, orient="index")
    out.attrs.update(n_retain=n_r, n_test=n_t, n_forget=n_f)
    return out


def linear_probe(model: nn.Module, data: Data, per_class: int = 50, seed: int = 0) -> float:
    """LP-50 (%): :func:`memlab.probes.linear_probe` fit on every class, scored on the forget test set."""
    s = data.splits
    x, y = torch.cat([s.retain_x, s.forget_x]), torch.cat([s.retain_y, s.forget_y])
    return probes.linear_probe(model, x, y, data.test_forget_x, data.test_forget_y, per_class, seed)


def relearn_curve(model: nn.Module, data: Data, *, samples: int, epochs: int, lr: float,
                  seed: int) -> np.ndarray:
    """Forget-class test accuracy (%) along :func:`memlab.probes.relearn_curve` on this chapter's splits."""
    s = data.splits
    return probes.relearn_curve(model, s.forget_x, s.forget_y, s.retain_x, s.retain_y, data.test_forget_x,
                                data.test_forget_y, samples=samples, epochs=epochs, lr=lr, seed=seed)

# ----------------------------------------------------------------------------- Table 1


def run_method_table(cfg, data: Data, norm: str = "bn", methods: list[str] | None = None) -> tuple[pd.DataFrame, dict]:
    """One row per (method, seed): Pre-F, Post-F, ΔF, Pre-R, Post-R, LP-50, ReAUC, bn_mode.

    Returns (long table, models) where models[(method, seed)] = (unlearned, recalibrated);
    'Original' is included as a reference row.
    """
    methods = list(cfg.methods if methods is None else methods)
    if "Retrain" not in methods:
        methods = ["Retrain", *methods]
    rows, models = [], {}
    seeds = [cfg.seed + i for i in range(cfg.n_seeds)]
    bar = progress(total=len(seeds) * (len(methods) + 1), desc=f"Table 1 ({norm})")
    for seed in seeds:
        orig = original_model(cfg, data, seed, norm)
        curves = {}
        for method in ["Original", *methods]:
            model = orig if method == "Original" else unlearned_model(cfg, data, orig, method, seed, norm)
            row, cal = audit(model, data, cfg.recal_batch)
            row.update(method=method, seed=seed, norm=norm,
                       bn_mode="n/a" if method == "Original" else registry.bn_mode(method))
            row["LP-50"] = linear_probe(model, data, cfg.lp_per_class, seed)
            row["LP-50 (recal)"] = linear_probe(cal, data, cfg.lp_per_class, seed)
            curves[method] = relearn_curve(model, data, samples=cfg.relearn_samples, epochs=cfg.relearn_epochs,
                                           lr=cfg.relearn_lr, seed=seed)
            rows.append(row)
            models[(method, seed)] = (model, cal)
            bar.update(1)
        for row in rows:
            if row["seed"] == seed and row["norm"] == norm:
                row["ReAUC"] = probes.relearn_auc(curves[row["method"]], curves["Original"], curves["Retrain"])
                row["relearn_curve"] = curves[row["method"]].round(2).tolist()
    bar.close()
    return pd.DataFrame(rows), models


METRICS = ["Pre-F", "Post-F", "ΔF", "Pre-R", "Post-R", "LP-50", "ReAUC"]


def summarise(long: pd.DataFrame, metrics: list[str] = METRICS, with_std: bool | None = None) -> pd.DataFrame:
    """Mean over seeds per method (rows in table order); adds '<metric> std' columns when seeds > 1."""
    order = list(dict.fromkeys(long["method"]))
    g = long.groupby("method", sort=False)
    out = g[metrics].mean().reindex(order)
    out.insert(0, "BN mode", g["bn_mode"].first().reindex(order))
    show_std = long["seed"].nunique() > 1 if with_std is None else with_std
    if show_std:
        std = g[metrics].std(ddof=1).reindex(order).add_suffix(" std")
        out = out.join(std)
    out.index.name = None
    return out


def lp_decomposition(summary_long: pd.DataFrame) -> pd.DataFrame:
    """Table 2: LP(M) - LP(M_cal) (BN-residual) and LP(M_cal) - LP(Retrain) (NC-residual), in pp, first seed."""
    first = summary_long[summary_long["seed"] == summary_long["seed"].min()].set_index("method")
    lp_retr = first.loc["Retrain", "LP-50"]
    rows = {}
    for m, r in first.iterrows():
        if m in ("Original", "Retrain"):
            continue
        rows[m] = {"LP": r["LP-50"], "LP (recal)": r["LP-50 (recal)"],
                   "BN-residual": r["LP-50"] - r["LP-50 (recal)"], "NC-residual": r["LP-50 (recal)"] - lp_retr,
                   "LP - LP_retrain": r["LP-50"] - lp_retr}
    out = pd.DataFrame.from_dict(rows, orient="index")
    out.attrs["LP_retrain"] = float(lp_retr)
    return out

# ----------------------------------------------------------------------------- Figure 1


def _recovery_images(data: Data, source: str, budget: int, seed: int) -> torch.Tensor:
    pools = {"retain": data.splits.retain_x, "test": data.pool_x, "ood": data.ood_x}
    pool = pools[source]
    if budget > len(pool):
        raise ValueError(f"parameter 'budgets': {budget} images requested from the {source!r} source, "
                         f"which holds {len(pool)}")
    g = torch.Generator().manual_seed(seed)
    return pool[torch.randperm(len(pool), generator=g)[:budget]]


def recovered_accuracy(model: nn.Module, data: Data, source: str, budget: int, seed: int,
                       batch_size: int = 128) -> float:
    """Forget accuracy (%) after recalibrating on ``budget`` unlabelled images of ``source``."""
    imgs = _recovery_images(data, source, budget, seed)
    return forget_accuracy(bn.recalibrate(model, imgs, batch_size), data)


def figure1a_table(cfg, data: Data, models: dict, long: pd.DataFrame) -> pd.DataFrame:
    """Per method: forget accuracy before, after a ``recovery_b``-image test-pool recovery, after full recalibration."""
    rows = {}
    first = long[(long["seed"] == cfg.seed) & (long["norm"] == "bn")].set_index("method")
    for m in first.index:
        if m == "Original":
            continue
        model, _ = models[(m, cfg.seed)]
        rows[m] = {"before": first.loc[m, "Pre-F"],
                   f"B={cfg.recovery_b} (test pool)": recovered_accuracy(model, data, "test", cfg.recovery_b, cfg.seed,
                                                                         cfg.recal_batch),
                   "audit recalibration": first.loc[m, "Post-F"]}
    return pd.DataFrame.from_dict(rows, orient="index")


def budget_sweep(cfg, data: Data, models: dict) -> pd.DataFrame:
    """Figure 1b: forget accuracy per (method, source, budget, seed), long format."""
    rows = []
    seeds = [cfg.seed + i for i in range(cfg.n_seeds)]
    jobs = [(m, s, b, seed) for seed in seeds for m in cfg.recovery_methods for s in ("retain", "test", "ood")
            for b in cfg.budgets]
    for m, s, b, seed in progress(jobs, desc="Figure 1b"):
        model, _ = models[(m, seed)]
        rows.append(dict(method=m, source=s, budget=b, seed=seed,
                         forget_acc=recovered_accuracy(model, data, s, b, seed, cfg.recal_batch)))
    return pd.DataFrame(rows)

# ----------------------------------------------------------------------------- correlations, appendices


def correlations(summary: pd.DataFrame, x: str = "Post-F", ys: tuple[str, ...] = ("ReAUC", "LP-50")) -> pd.DataFrame:
    """Pearson, Spearman and Kendall of ``x`` with each of ``ys`` over the methods (rows) of ``summary``."""
    rows = []
    for y in ys:
        d = summary[[x, y]].dropna()
        for name, fn in (("Pearson", stats.pearsonr), ("Spearman", stats.spearmanr), ("Kendall", stats.kendalltau)):
            if len(d) < 3 or d[x].nunique() < 2 or d[y].nunique() < 2:
                r, p = float("nan"), float("nan")
            else:
                res = fn(d[x], d[y])
                r, p = float(res[0]), float(res[1])
            rows.append({"x": x, "y": y, "test": name, "statistic": r, "p-value": p, "n": len(d)})
    return pd.DataFrame(rows)


def ga_step_sweep(cfg, data: Data, seed: int) -> pd.DataFrame:
    """Appendix H: Pre-F, Post-F, ΔF, Pre-R of GA after each step count of ``cfg.ga_steps_sweep``.

    One GA run, snapshotted at each requested step count (same as separate runs
    because the optimiser state carries on).
    """
    orig = original_model(cfg, data, seed)
    hp = hparams(method_hparams(cfg, "GA", seed), GA_DEFAULTS, "GA")
    hp.pop("steps")
    wanted = sorted(set(cfg.ga_steps_sweep))
    snaps = {}

    def keep(step, net):
        if step in wanted:
            snaps[step] = copy.deepcopy(net).eval()

    net = copy.deepcopy(orig)
    gradient_ascent(net, data.splits.forget_x, data.splits.forget_y, steps=max(wanted), on_step=keep,
                    desc="Appendix H (GA)", **hp)
    rows = []
    for step in wanted:
        row, _ = audit(snaps[step], data, cfg.recal_batch)
        rows.append({"steps": step, **row})
    return pd.DataFrame(rows).set_index("steps")


def salun_mix_sweep(cfg, data: Data, seed: int) -> pd.DataFrame:
    """Appendix Q: SalUn's Pre-F, Post-F, ΔF, Pre-R against the retain share of its batches."""
    orig = original_model(cfg, data, seed)
    rows = []
    for mix in progress(cfg.salun_mix_sweep, desc="Appendix Q (SalUn)"):
        # The default share reuses the Table 1 SalUn model (same cache entry).
        extra = {} if mix == SALUN_DEFAULTS["retain_mix"] else {"retain_mix": float(mix)}
        model = unlearned_model(cfg, data, orig, "SalUn", seed, **extra)
        row, _ = audit(model, data, cfg.recal_batch)
        rows.append({"retain share": mix, **row})
    return pd.DataFrame(rows).set_index("retain share")


def misalignment_profile(cfg, data: Data, models: dict) -> pd.DataFrame:
    """Figure 2: per BN layer, normalised running-mean gap of each model to the audit's recalibration
    ('before'), and of a recalibration on half its images to it ('after': the operator's sampling error)."""
    rows = []
    half = data.recal_x[: max(1, len(data.recal_x) // 2)]
    for (m, seed), (model, cal) in models.items():
        if seed != cfg.seed or m == "Original":
            continue
        before = bn.mean_misalignment(model, cal)
        after = bn.mean_misalignment(bn.recalibrate(model, half, cfg.recal_batch), cal)
        for i, name in enumerate(before):
            rows.append(dict(method=m, layer=i, name=name, before=before[name], after=after[name]))
    return pd.DataFrame(rows)


def groupnorm_control(cfg, data: Data) -> pd.DataFrame:
    """Table 1 rerun on GroupNorm ResNet-18 (every method but PGU, as in the paper's Table 6)."""
    methods = [m for m in cfg.methods if m != "PGU"]
    long, _ = run_method_table(cfg, data, norm="gn", methods=methods)
    return long


VIT_METHODS = ["SCRUB", "GA", "SalUn", "BadTeacher", "SSD"]


def vit_control(cfg, data: Data) -> pd.DataFrame:
    """Appendix M: Pre-F, Post-F, ΔF of five methods on a LayerNorm ViT (patch 16); ΔF must be exactly 0."""
    seed = cfg.seed
    heads = 6 if cfg.vit_dim % 6 == 0 else 1
    key = dict(_data_key(cfg, seed, "ln"), arch="vit", dim=cfg.vit_dim, depth=cfg.vit_depth, heads=heads)
    s = data.splits
    x, y = torch.cat([s.retain_x, s.forget_x]), torch.cat([s.retain_y, s.forget_y])

    def make():
        torch.manual_seed(seed)
        return vit_small(NUM_CLASSES[cfg.dataset], dim=cfg.vit_dim, depth=cfg.vit_depth, heads=heads).to(device())

    def train(model):
        seed_everything(seed)
        train_classifier(model, x, y, epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr, seed=seed,
                         desc="Original (ViT)")

    orig = cache.load_or_train(CHAPTER, "original-vit", key, make, train, CODE_VERSION)
    rows = {}
    for m in progress(["Original", *VIT_METHODS], desc="ViT control"):
        model = orig if m == "Original" else unlearned_model(cfg, data, orig, m, seed, norm="vit")
        row, cal = audit(model, data, cfg.recal_batch)
        row["weights unchanged"] = bn.weights_equal(model, cal)
        rows[m] = row
    return pd.DataFrame.from_dict(rows, orient="index")

# ----------------------------------------------------------------------------- claims

GAP_PP = 18.9       # the paper's smallest "large" gap (NoiseInject's ΔF)
ZERO_TOL_PP = 2.0   # |ΔF| we call zero: 5 of the cpu profile's 250 forget-class test images
NINE = [m for m in METHODS if m != "Retrain"]
ZERO_ROWS = ["Retrain", "SCRUB", "GA", "GA+FT"]  # the paper's zero-gap rows (Table 1)


def _t1(metrics: dict) -> dict:
    return metrics["table1"]


def _band(m, *pairs, n_key: str = "forget_test") -> float:
    """95% half-width (pp) of a sum/difference of accuracy differences, each pair (a, b) in %.

    Every accuracy is a binomial share of ``m['sizes'][n_key]`` images; the pairs are treated as
    independent (conservative: they share images), via :func:`memlab.metrics.diff_band`.
    """
    from memlab.metrics import diff_band

    n = int(m["sizes"][n_key])
    clip = lambda v: min(max(float(v) / 100.0, 0.0), 1.0)  # noqa: E731
    return 100.0 * float(np.sqrt(sum(diff_band(clip(a), n, clip(b), n) ** 2 for a, b in pairs)))


def _df_band(m, row: dict) -> float:
    """Noise band (pp) of one row's ΔF = Post-F - Pre-F."""
    return _band(m, (row["Post-F"], row["Pre-F"]))


def _six_of_nine(m):
    from memlab.paper import outside_noise

    t = _t1(m)
    ranked = sorted(NINE, key=lambda k: -t[k]["ΔF"])
    big = [k for k in ranked if t[k]["ΔF"] >= GAP_PP]
    sixth = ranked[5]
    band = _df_band(m, t[sixth])
    ev = (f"{len(big)} of {len(NINE)} with ΔF >= {GAP_PP} pp: {', '.join(big) or 'none'}; "
          f"6th largest ΔF {sixth} {t[sixth]['ΔF']:+.1f} pp")
    outside_noise(t[sixth]["ΔF"] - GAP_PP, band, f"{ev}; its distance to {GAP_PP} pp")
    return len(big) >= 6, f"{ev} (noise band ±{band:.1f} pp)"


def _badteacher_largest(m):
    from memlab.paper import outside_noise

    t = _t1(m)
    others = [k for k in NINE if k != "BadTeacher"]
    rival = max(others, key=lambda k: t[k]["ΔF"])
    bt = t["BadTeacher"]
    margin = bt["ΔF"] - t[rival]["ΔF"]
    band = _band(m, (bt["Post-F"], bt["Pre-F"]), (t[rival]["Post-F"], t[rival]["Pre-F"]))
    ev = f"BadTeacher ΔF {bt['ΔF']:+.1f} pp, largest other {rival} {t[rival]['ΔF']:+.1f} pp"
    outside_noise(margin, band, f"{ev}; BadTeacher's lead")
    return margin > 0, f"{ev}: margin {margin:+.1f} pp (noise band ±{band:.1f} pp)"


def _zero_rows(m):
    """|ΔF| <= ZERO_TOL_PP on the paper's zero-gap rows that can show a gap here.

    A row whose Pre-F is at the floor (<= ZERO_TOL_PP) while the paper's same row is not
    (GA+FT: 67.9%) cannot test the paper's statement (a model that still knows the class and
    hides no gap): ΔF >= 0 there by construction, so that row is not judged. Rows at the floor
    in the paper too (Retrain, SCRUB, GA) are judged: a hidden gap would show as Post-F > 0.
    """
    from memlab import paper
    from memlab.paper import NotJudged

    t = _t1(m)
    theirs = paper.table(CHAPTER, "table1")
    judged, skipped = [], []
    for k in ZERO_ROWS:
        floor_here = t[k]["Pre-F"] <= ZERO_TOL_PP
        floor_paper = float(theirs.loc[k, "Pre-F"]) <= ZERO_TOL_PP
        (skipped if floor_here and not floor_paper else judged).append(k)
    parts = [f"{k} {t[k]['ΔF']:+.1f} (Pre-F {t[k]['Pre-F']:.1f}%)" for k in judged]
    parts += [f"{k} not judged (Pre-F {t[k]['Pre-F']:.1f}% at the floor; paper "
              f"{float(theirs.loc[k, 'Pre-F']):.1f}%)" for k in skipped]
    ev = "; ".join(parts)
    if not judged:
        raise NotJudged(ev)
    return all(abs(t[k]["ΔF"]) <= ZERO_TOL_PP for k in judged), ev


def _pre_r_separates(m):
    from memlab.paper import outside_noise

    t = _t1(m)
    others = [k for k in ZERO_ROWS if k != "GA"]
    low = min(others, key=lambda k: t[k]["Pre-R"])
    margin = t[low]["Pre-R"] - t["GA"]["Pre-R"]
    band = _band(m, (t[low]["Pre-R"], t["GA"]["Pre-R"]), n_key="eval_retain")
    ev = (f"zero-gap rows, Pre-R on {m['sizes']['eval_retain']} retain images: GA {t['GA']['Pre-R']:.1f}% vs "
          + ", ".join(f"{k} {t[k]['Pre-R']:.1f}%" for k in others))
    outside_noise(margin, band, f"{ev}; GA below the lowest other")
    return margin > 0, f"{ev}; margin {margin:+.1f} pp (noise band ±{band:.1f} pp)"


def _recal_weights(m):
    return bool(m["recal_weights_unchanged"]), f"{m['recal_models_checked']} recalibrated models checked"


def _gn_rows(m) -> list[str]:
    return [k for k in m["gn_table"] if k != "Original"]


def _gn_zero(m):
    g = m["gn_table"]
    dmax = max(abs(g[k]["ΔF"]) for k in _gn_rows(m))
    return dmax == 0.0, f"max |ΔF| = {dmax:.2f} pp over {len(_gn_rows(m))} GroupNorm models"


def _gn_reauc(m):
    g = m["gn_table"]
    unl = [g[k]["ReAUC"] for k in _gn_rows(m) if k != "Retrain" and g[k]["ReAUC"] == g[k]["ReAUC"]]
    mean_reauc = float(np.mean(unl)) if unl else float("nan")
    return mean_reauc >= 0.5, f"mean ReAUC of {len(unl)} unlearned GroupNorm models {mean_reauc:.3f}"


def _vit_zero(m):
    v = m["vit_table"]
    dmax = max(abs(r["ΔF"]) for r in v.values())
    return dmax == 0.0, f"max |ΔF| over {len(v)} ViT models = {dmax:.2f} pp"


def _corr(m, y):
    c = [r for r in m["correlations"] if r["y"] == y]
    return {r["test"]: (r["statistic"], r["p-value"]) for r in c}


def _corr_reauc(m):
    c = _corr(m, "ReAUC")
    ok = c["Pearson"][0] >= 0.9 and all(p < 0.05 for _, p in c.values())
    return ok, ", ".join(f"{k} {s:.3f} (p={p:.1g})" for k, (s, p) in c.items())


def _corr_lp(m):
    c = _corr(m, "LP-50")
    ok = all(s > 0 and p < 0.005 for s, p in c.values())
    return ok, ", ".join(f"{k} {s:.3f} (p={p:.1g})" for k, (s, p) in c.items())


def _ten_images(m):
    """Precondition: a method is judged only if its full gap ΔF reaches GAP_PP (else it has
    no gap to recover); then recovery = (B=10 accuracy - Pre-F) >= half of ΔF, outside noise."""
    from memlab.paper import NotJudged, outside_noise

    t, rec = _t1(m), m["recovery_b10_test"]
    parts, verdicts, unclear = [], [], []
    for k in ("BadTeacher", "NoiseInject"):
        gap, pre = t[k]["ΔF"], t[k]["Pre-F"]
        head = f"{k}: {pre:.1f} -> {rec[k]:.1f}% with 10 images (full recal {t[k]['Post-F']:.1f}%)"
        if gap < GAP_PP:
            parts.append(f"{head}, not judged: full gap {gap:+.1f} pp below {GAP_PP} pp")
            continue
        half = pre + 0.5 * gap
        band = _band(m, (rec[k], half))
        parts.append(f"{head}, needs >= {half:.1f}% (noise band ±{band:.1f} pp)")
        try:
            outside_noise(rec[k] - half, band, f"{k}'s recovery past half its gap")
            verdicts.append(rec[k] > half)
        except NotJudged:
            unclear.append(k)
    ev = "; ".join(parts)
    if verdicts and not all(verdicts):
        return False, ev
    if unclear or not verdicts:
        raise NotJudged(ev + (f"; inside the noise band: {', '.join(unclear)}" if unclear else ""))
    return True, ev


def _ga_steps(m):
    from memlab.paper import outside_noise

    h = m["appendix_h"]
    steps = sorted(h, key=int)
    first, last = h[steps[0]], h[steps[-1]]
    shrink = first["ΔF"] - last["ΔF"]
    band = _band(m, (first["Post-F"], first["Pre-F"]), (last["Post-F"], last["Pre-F"]))
    ev = f"ΔF {first['ΔF']:+.1f} pp at {steps[0]} steps, {last['ΔF']:+.1f} pp at {steps[-1]}"
    outside_noise(shrink, band, f"{ev}; the shrinkage")
    ok = shrink > 0 and abs(last["ΔF"]) <= ZERO_TOL_PP
    return ok, f"{ev}: shrinks by {shrink:+.1f} pp (noise band ±{band:.1f} pp)"


def _salun_mix(m):
    """Precondition: at share 0 SalUn has a large gap (>= GAP_PP); then every share >= 25%
    has ΔF <= 5 pp, each outside its noise band."""
    from memlab.paper import NotJudged, outside_noise

    q = m["appendix_q"]
    base = q["0.0"]["ΔF"] if "0.0" in q else float("nan")
    high = {k: v for k, v in q.items() if float(k) >= 0.25}
    ev = f"ΔF {base:+.1f} pp at share 0; " + ", ".join(f"{k}: {v['ΔF']:+.1f}" for k, v in high.items())
    if not base >= GAP_PP or not high:
        raise NotJudged(f"{ev}; precondition: a gap of at least {GAP_PP} pp at share 0 to remove")
    worst = max(high, key=lambda k: high[k]["ΔF"])
    band = _df_band(m, high[worst])
    outside_noise(5.0 - high[worst]["ΔF"], band, f"{ev}; share {worst}'s ΔF against 5 pp")
    return high[worst]["ΔF"] <= 5.0, f"{ev} (noise band of share {worst}: ±{band:.1f} pp)"


def _no_sign_flip(m):
    """A method is a sign flip when BN-residual > 0 and NC-residual < 0, each outside its band
    (LP accuracies on the forget-class test images); ambiguous methods make it not judged."""
    from memlab.paper import NotJudged

    t2 = m["table2"]
    lp_retr = next(r["LP (recal)"] - r["NC-residual"] for r in t2.values())
    flips, unclear, parts = [], [], []
    for k, r in t2.items():
        b_bn = _band(m, (r["LP"], r["LP (recal)"]))
        b_nc = _band(m, (r["LP (recal)"], lp_retr))
        bn_pos, nc_neg = r["BN-residual"] - b_bn, -r["NC-residual"] - b_nc  # > 0: clearly in the region
        bn_out, nc_out = -r["BN-residual"] - b_bn, r["NC-residual"] - b_nc  # > 0: clearly outside
        if bn_pos > 0 and nc_neg > 0:
            flips.append(k)
        elif not (bn_out > 0 or nc_out > 0):
            unclear.append(k)
        parts.append(f"{k} BN {r['BN-residual']:+.1f}±{b_bn:.1f}, NC {r['NC-residual']:+.1f}±{b_nc:.1f}")
    ev = ("sign flips (BN-residual > 0, NC-residual < 0, outside noise): " + (", ".join(flips) or "none")
          + "; " + "; ".join(parts))
    if not flips and unclear:
        raise NotJudged(f"{ev}; inside the noise band: {', '.join(unclear)}")
    return not flips, ev


def _c100_masking(m):
    t2 = m["table2_cifar100"]
    rows = ["GA", "SalUn", "SSD"]
    ok = all(t2[k]["BN-residual"] < 0 < t2[k]["NC-residual"] for k in rows)
    return ok, "; ".join(f"{k}: BN {t2[k]['BN-residual']:+.1f}, NC {t2[k]['NC-residual']:+.1f}" for k in rows)


def _sampling_error(m):
    f2 = m["misalignment"]
    before = max(f2["before_mean"].values())
    after = float(np.mean(list(f2["after_mean"].values())))
    return after < 0.1 * before, f"half-vs-full recalibration gap {after:.4f}; largest mean pre-recalibration gap {before:.4f}"



# Every metric key the chapter records (run.record); a claim reading another key is a typo
# and fails loudly (memlab.paper.evaluate), one reading a key this run lacks is 'not run'.
METRIC_KEYS: tuple[str, ...] = (
    'original', 'forget_classes', 'ood_source', 'table1', 'bn_modes', 'recal_weights_unchanged',
    'recal_models_checked', 'table2', 'table2_cifar100', 'figure1a', 'figure1b', 'recovery_b10_test',
    'smallest_budget', 'relearn_curves', 'gn_table', 'vit_table', 'correlations', 'appendix_h',
    'appendix_q', 'misalignment', 'sizes', 'regime',
)

def claims():
    """The paper's headline claims as predicates over this chapter's metrics."""
    from memlab.paper import Claim, declare

    return declare(METRIC_KEYS, [
        Claim("six_of_nine", f"Six of nine methods have ΔF of at least {GAP_PP} pp", "Section 4, Table 1", _six_of_nine),
        Claim("badteacher_flip", "BadTeacher shows the largest flip (+78 pp)", "Table 1", _badteacher_largest),
        Claim("zero_rows", f"Retrain, SCRUB, GA and GA+FT show no gap (|ΔF| <= {ZERO_TOL_PP} pp here; "
              "a row at the floor here but not in the paper is not judged)", "Table 1", _zero_rows),
        Claim("pre_r_separates", "Pre-R separates the zero-gap rows (Retrain, SCRUB, GA, GA+FT): GA's retain "
              "accuracy is the lowest", "Section 4", _pre_r_separates),
        Claim("weights_fixed", "Recalibration leaves every weight unchanged (Theorem 1)", "Theorem 1",
              _recal_weights, sanity=True),
        Claim("groupnorm_zero", "On GroupNorm every method has ΔF = 0 exactly (no running statistics)",
              "Appendix F, Table 6", _gn_zero, sanity=True),
        Claim("groupnorm_reauc", "On GroupNorm relearning stays easy "
              "(mean ReAUC >= 0.5 here; paper 0.95-0.98)", "Section 4.5, Appendix F", _gn_reauc),
        Claim("vit_zero", "On a LayerNorm ViT every method has ΔF = 0 (no running statistics)", "Appendix M",
              _vit_zero, sanity=True),
        Claim("corr_reauc", "Post-F tracks relearning: Pearson >= 0.9, all three tests p < 0.05 (paper r = 0.998)",
              "Section 4", _corr_reauc),
        Claim("corr_lp", "Post-F tracks LP-50: all three tests positive with p < 0.005", "Section 4", _corr_lp),
        Claim("ten_images", "Ten unlabelled images recover at least half of BadTeacher's and NoiseInject's gap "
              f"(paper: 88.7% and 91.0%; a method whose full gap is below {GAP_PP} pp is not judged)",
              "Section 4.4, Figure 1b", _ten_images),
        Claim("ga_steps", "GA's gap shrinks to zero as its step count grows (+76 pp at 100 steps, 0 at 500)",
              "Appendix H", _ga_steps),
        Claim("salun_mix", "A retain share of at least 25% in SalUn's batches removes its gap (ΔF <= 5 pp here)",
              "Appendix Q", _salun_mix),
        Claim("no_sign_flip", "No method has a positive BN-residual with a negative NC-residual", "Table 2",
              _no_sign_flip),
        Claim("c100_masking", "On CIFAR-100, GA, SalUn and SSD have a negative BN-residual and a positive "
              "NC-residual (BN bias masks encoder leakage)", "Table 2", _c100_masking),
        Claim("sampling_error", "The operator's sampling error is small next to the misalignment it removes "
              "(paper: 0.0016-0.0018 vs up to 0.3402)", "Appendix B.3, Figure 2", _sampling_error),
    ])
