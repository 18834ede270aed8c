"""Chapter 1's stages: data, cached models and the experiments, from the config to plain data.

Data flow: :func:`load_data` -> :func:`original_model` (cached) -> :func:`unlearned_model` for
every method (cached) -> :func:`audit` (Pre-F/Post-F/Pre-R/Post-R), :func:`linear_probe`,
:func:`relearn_curve` -> :func:`run_method_table` (Table 1), the recoveries of Figure 1
(:func:`budget_sweep`), the appendices' sweeps and the GroupNorm and ViT controls. Every function
returns tensors, models, dicts or DataFrames; the tables and the claims are in ``tables.py`` and
``claims.py``.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn

from memlab.core import cache
from memlab.science import bn, probes
from memlab.core.config import device, seed_everything
from memlab.data import vision
from memlab.models.recipe import NORM_RECIPE, cifar_classifier, train_supervised
from memlab.models.vit import vit_small
from memlab.core.progress import progress
from memlab.models.train import accuracy, predict_logits, train_classifier
from memlab.science.unlearning import registry
from memlab.science.unlearning._common import hparams
from memlab.science.unlearning.ga import DEFAULTS as GA_DEFAULTS
from memlab.science.unlearning.ga import gradient_ascent
from memlab.science.unlearning.salun import DEFAULTS as SALUN_DEFAULTS
from memlab.science.unlearning.registry import Splits

from .spec import CHAPTER, CODE_VERSION, METHOD_HPARAMS, NUM_CLASSES

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
        ood_x = vision.patch_shuffle(pool_x, 8, cfg.seed)
        note = ("held-out CIFAR-10 test images (no forget class) cut into 8x8 tiles that are randomly permuted "
                "per image: natural pixel statistics, no object layout (offline stand-in for CIFAR-100)")
    # The forget classes' share of this balanced test set is exactly test_forget.
    balanced = torch.cat([(ty == c).nonzero().flatten()[: cfg.test_per_class] for c in range(k)])
    n_cal = cfg.recal_images or len(splits.retain_x)
    cal = torch.randperm(len(splits.retain_x), generator=torch.Generator().manual_seed(cfg.seed + 2))[:n_cal]
    return Data(splits, tx[test_forget], ty[test_forget], splits.retain_x[ev], splits.retain_y[ev], pool_x, ood_x,
                classes, k, note, tx[balanced], ty[balanced], splits.retain_x[cal])

# ----------------------------------------------------------------------------- models


def schedule_for(cfg, norm: str) -> dict:
    """Epochs, batch size and peak learning rate of the Original and Retrain of one normalisation
    (GroupNorm: ``gn_epochs``, ``gn_batch_size``, ``gn_lr``, its own recipe)."""
    if norm == "gn":
        return dict(epochs=cfg.gn_epochs, batch_size=cfg.gn_batch_size, lr=cfg.gn_lr)
    return dict(epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.lr)


def epochs_for(cfg, norm: str) -> int:
    """Training epochs of the Original and Retrain of one normalisation (GroupNorm: ``gn_epochs``)."""
    return schedule_for(cfg, norm)["epochs"]


def _data_key(cfg, seed: int, norm: str) -> dict:
    key = dict(dataset=cfg.dataset, train_per_class=cfg.train_per_class, data_seed=cfg.seed, arch=cfg.arch,
               width=cfg.width, norm=norm, **schedule_for(cfg, norm), seed=seed)
    if cfg.arch == "fastcnn" and NORM_RECIPE.get(norm):  # a change to the norm's recipe is another model
        key["recipe"] = NORM_RECIPE[norm]
    return key


def build(cfg, norm: str = "bn") -> nn.Module:
    """A freshly initialised classifier of ``cfg.arch`` (:func:`memlab.models.recipe.cifar_classifier`)."""
    return cifar_classifier(cfg.arch, NUM_CLASSES[cfg.dataset], norm=norm, width=cfg.width)


def original_model(cfg, data: Data, seed: int, norm: str = "bn") -> nn.Module:
    """The model trained on all classes (cached), by its kind's recipe
    (:func:`memlab.models.recipe.train_supervised`)."""
    s = data.splits
    x, y = torch.cat([s.retain_x, s.forget_x]), torch.cat([s.retain_y, s.forget_y])

    def train(model):
        seed_everything(seed)
        train_supervised(model, x, y, **schedule_for(cfg, norm), seed=seed, desc=f"Original ({norm}, seed {seed})")

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
        # in fp32, as the methods' references run: under bf16 autocast BadTeacher and NoiseInject at their
        # reference values wrecked the fast CNN (retain accuracy 0 % and 15 %, against 92 % and 93 % in fp32)
        out = fn(original, data.splits, hp)
        model.load_state_dict(out.state_dict())

    return cache.load_or_train(CHAPTER, "unlearned", key, lambda: copy.deepcopy(original), train, CODE_VERSION)


def method_hparams(cfg, name: str, seed: int, norm: str = "bn", **overrides) -> dict:
    """The hyperparameters of ``name`` in ``cfg`` for ``seed`` (Retrain follows the chapter schedule
    of ``norm``'s Original, see :func:`epochs_for`).

    Holds only the keys the profile (or a ``-p METHOD.KEY`` override) sets; the method fills
    the rest from its module's DEFAULTS. The dict is part of the unlearned model's cache key.
    """
    if name == "Retrain":
        return dict(schedule_for(cfg, norm), seed=seed)
    groups = cfg.get("method_hparams") or METHOD_HPARAMS[cfg.profile]
    return {**groups.get(name, {}), **overrides, "seed": seed}

# ----------------------------------------------------------------------------- metrics


def _forget_correct(model: nn.Module, data: Data) -> torch.Tensor:
    """(N,) bool: which forget-class test images ``model`` (eval mode) classifies correctly."""
    return predict_logits(model, data.test_forget_x).argmax(1) == data.test_forget_y.cpu()


def forget_accuracy(model: nn.Module, data: Data) -> float:
    """Forget-class test accuracy in percent."""
    return 100.0 * float(_forget_correct(model, data).float().mean())


def retain_accuracy(model: nn.Module, data: Data) -> float:
    """Accuracy in percent on the retain training images of ``data.eval_retain_x``."""
    return 100.0 * accuracy(model, data.eval_retain_x, data.eval_retain_y)


def audit(model: nn.Module, data: Data, batch_size: int = 128) -> tuple[dict, nn.Module]:
    """Pre-F, Post-F, ΔF (pp), Flips-F, Pre-R, Post-R of ``model`` and its full-retain recalibration.

    Returns (metrics, recalibrated copy). Recalibration uses the ``recal_images`` retain training
    images of ``data.recal_x`` (every retain image when ``recal_images`` is 0). Flips-F is the share
    (%) of forget-class test images whose correctness the recalibration changes: Pre-F and Post-F
    are read on the same images, so ΔF's noise is that of a paired difference (the claims' bands).
    """
    cal = bn.recalibrate(model, data.recal_x, batch_size)
    pre_c, post_c = _forget_correct(model, data), _forget_correct(cal, data)
    pre_f, post_f = (100.0 * float(c.float().mean()) for c in (pre_c, post_c))
    row = {"Pre-F": pre_f, "Post-F": post_f, "ΔF": post_f - pre_f,
           "Flips-F": 100.0 * float((pre_c != post_c).float().mean()),
           "Pre-R": retain_accuracy(model, data), "Post-R": retain_accuracy(cal, data)}
    return row, cal


def linear_probe(model: nn.Module, data: Data, per_class: int = 50, seed: int = 0) -> float:
    """LP-50 (%): :func:`memlab.science.probes.linear_probe` fit on every class, scored on the forget test set."""
    s = data.splits
    x, y = torch.cat([s.retain_x, s.forget_x]), torch.cat([s.retain_y, s.forget_y])
    return probes.linear_probe(model, x, y, data.test_forget_x, data.test_forget_y, per_class, seed)


def relearn_curve(model: nn.Module, data: Data, *, samples: int, epochs: int, lr: float,
                  seed: int) -> np.ndarray:
    """Forget-class test accuracy (%) along :func:`memlab.science.probes.relearn_curve` on this chapter's splits."""
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

# ----------------------------------------------------------------------------- Figure 1, appendices, controls


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
VIT_BATCH = 128


def vit_control(cfg, data: Data) -> pd.DataFrame:
    """Appendix M: Pre-F, Post-F, ΔF of five methods on a LayerNorm ViT (patch 16); ΔF must be exactly 0."""
    seed = cfg.seed
    heads = 6 if cfg.vit_dim % 6 == 0 else 1
    key = dict(dataset=cfg.dataset, train_per_class=cfg.train_per_class, data_seed=cfg.seed, arch="vit",
               dim=cfg.vit_dim, depth=cfg.vit_depth, heads=heads, epochs=cfg.vit_epochs, batch_size=VIT_BATCH,
               lr=cfg.vit_lr, seed=seed)
    s = data.splits
    x, y = torch.cat([s.retain_x, s.forget_x]), torch.cat([s.retain_y, s.forget_y])

    def make():
        torch.manual_seed(seed)
        return vit_small(NUM_CLASSES[cfg.dataset], dim=cfg.vit_dim, depth=cfg.vit_depth, heads=heads).to(device())

    def train(model):
        seed_everything(seed)
        train_classifier(model, x, y, epochs=cfg.vit_epochs, batch_size=VIT_BATCH, lr=cfg.vit_lr, seed=seed,
                         desc="Original (ViT)")

    orig = cache.load_or_train(CHAPTER, "original-vit", key, make, train, CODE_VERSION)
    rows = {}
    for m in progress(["Original", *VIT_METHODS], desc="ViT control"):
        model = orig if m == "Original" else unlearned_model(cfg, data, orig, m, seed, norm="vit")
        row, cal = audit(model, data, cfg.recal_batch)
        row["weights unchanged"] = bn.weights_equal(model, cal)
        rows[m] = row
    return pd.DataFrame.from_dict(rows, orient="index")
