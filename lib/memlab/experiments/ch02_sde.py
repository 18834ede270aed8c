"""Chapter 2 orchestration: SDE on retrained and unlearned CIFAR ResNet-18 models.

The notebook ``notebooks/02_sde.py`` calls these functions; the statistic
itself lives in :mod:`memlab.sde`. Every function takes the resolved
:class:`memlab.config.Config` of the chapter, so the three profiles run the
same code at different sizes.

Subset protocol (all subsets of one comparison have the same size s):
  * in-training pool: training samples the model saw; out-of-training pool:
    the held-out training samples (controlled experiment) or the forget set
    (unlearning evaluation);
  * in-training reference: one random subset of the in-training pool;
    out-of-training reference: one random subset of the test set;
  * targets: ``n_targets`` random subsets of each pool (in-training targets
    never overlap the in-training reference);
  * a target is labelled "out" (the positive class of F1) when the method
    judges it closer to the out-of-training reference.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from sklearn.metrics import f1_score
from torch import nn

from memlab import cache, probes, sde
from memlab.config import SEED_HIGH, ConfigError, Param, require_memory, seed_everything
from memlab.data.splits import random_split
from memlab.data.vision import load_cifar
from memlab.models.resnet import resnet18
from memlab.progress import progress
from memlab.train import train_classifier
from memlab.unlearning import registry
from memlab.unlearning.unroll import accumulate_forget_gradient

CHAPTER = "02_sde"
CODE_VERSION = "1"
FEATURES = ("layer2", "layer3", "penultimate", "logits", "softmax")
METHODS = ("Retrain", "RandLabel", "Unroll", "Sparsity", "SalUn")
DETECTORS = ("SDE", "MMD", "Wasserstein")
NOT_RUN_DATASETS = ("SVHN", "CIFAR-100", "Tiny-ImageNet")

def _p(smoke, cpu, paper):
    return {"smoke": smoke, "cpu": cpu, "paper": paper}


SPEC: dict[str, Param] = {
    "seed": Param(int, 0, low=0, high=SEED_HIGH,
                  doc="seed of data splits, initialisation, subsets and shuffles"),
    "n_per_class": Param(int, _p(30, 150, 5000), low=10, high=5000, doc="training images per CIFAR-10 class"),
    "n_test_per_class": Param(int, _p(20, 100, 1000), low=5, high=1000, doc="test images per class"),
    "width": Param(int, _p(4, 8, 64), low=1, doc="ResNet-18 stem width (64 in the paper)"),
    "epochs": Param(int, _p(2, 16, 182), low=1, doc="training epochs of every model"),
    "batch_size": Param(int, _p(32, 64, 128), low=1, doc="training batch size"),
    "lr": Param(float, _p(0.05, 0.05, 0.1), low=1e-6, high=10.0, doc="peak SGD learning rate (cosine decay)"),
    "augment": Param(bool, _p(False, False, True), doc="random crop + flip while training"),
    "holdout_fractions": Param(list, [0.05, 0.1, 0.2], item=float, low=0.01, high=0.5,
                               doc="fractions R of the training set held out (Table 1 columns)"),
    "subset_sizes": Param(list, _p([8, 10, 12], [40, 80, 160], [400, 1000, 2000]), item=int, low=4,
                          doc="subset size |S| for each R, in the same order"),
    "n_targets": Param(int, _p(3, 20, 50), low=1, doc="target subsets of each kind (in / out) per setting"),
    "n_shuffles": Param(int, _p(20, 200, 200), low=1, doc="shufflings of the second half per subset"),
    "n_bins": Param(int, 30, low=2, high=1000, doc="histogram bins of the JSD decision"),
    "feature": Param(str, "logits", choices=FEATURES, doc="which outputs SDE reads"),
    "forget_fraction": Param(float, 0.1, low=0.01, high=0.5, doc="forget-set fraction R of the unlearning table"),
    "methods": Param(list, list(METHODS), item=str, choices=METHODS, doc="unlearning methods of Table 3"),
    "unlearn_steps": Param(int, _p(2, 40, 400), low=1, doc="SGD steps of RandLabel, Sparsity and SalUn"),
    "unlearn_lr": Param(float, 0.01, low=1e-6, high=1.0, doc="learning rate of RandLabel, Sparsity and SalUn"),
    "retain_mix": Param(float, 0.5, low=0.0, high=0.95, doc="retain share of each RandLabel / SalUn batch"),
    "bandwidth_mults": Param(list, [0.25, 0.5, 1.0, 2.0, 4.0], item=float, low=1e-3, high=1e3,
                             doc="multipliers of sigma = sqrt(dim) in the bandwidth ablation"),
    "size_sweep": Param(list, _p([4, 8, 12], [20, 40, 80, 160], [100, 400, 1000, 2000]), item=int, low=4,
                        doc="subset sizes of the F1-vs-size ablation (largest-R model)"),
    "depths": Param(list, list(FEATURES), item=str, choices=FEATURES, doc="feature depths of the depth ablation"),
    "early_fraction": Param(float, 0.2, low=0.01, high=1.0, doc="share of training done by the 'early' model"),
}


def _check_pairs(cfg) -> None:
    if len(cfg.subset_sizes) != len(cfg.holdout_fractions):
        raise ConfigError(
            f"parameter 'subset_sizes': must have one size per holdout fraction "
            f"({len(cfg.holdout_fractions)}) (got {len(cfg.subset_sizes)})")


def _check_sizes_fit(cfg) -> None:
    n_train, n_test = 10 * cfg.n_per_class, 10 * cfg.n_test_per_class
    for r, s in zip(cfg.holdout_fractions, cfg.subset_sizes):
        held = int(round(r * n_train))
        if s > held or s > n_test or 2 * s > n_train - held:
            raise ConfigError(
                f"parameter 'subset_sizes': size {s} for R={r} must be at most the {held} held-out samples, "
                f"the {n_test} test samples and half the {n_train - held} kept samples")
    held = int(round(max(cfg.holdout_fractions) * n_train))
    if max(cfg.size_sweep) > min(held, n_test):
        raise ConfigError(
            f"parameter 'size_sweep': sizes must be at most {min(held, n_test)} "
            f"(held-out samples of the largest R and test samples) (got {max(cfg.size_sweep)})")
    forget = int(round(cfg.forget_fraction * n_train))
    if main_size(cfg) > min(forget, n_test):
        raise ConfigError(
            f"parameter 'forget_fraction': the forget set ({forget} samples) must hold a subset of size "
            f"{main_size(cfg)} (the subset size nearest R={cfg.forget_fraction})")


def _check_memory(cfg) -> None:
    from memlab.models.resnet import train_memory_bytes

    require_memory("width", train_memory_bytes(cfg.width, cfg.batch_size),
                   f"a ResNet-18 of width {cfg.width} at batch {cfg.batch_size}")


CHECKS = [_check_pairs, _check_sizes_fit, _check_memory]


def main_size(cfg) -> int:
    """Subset size of the main setting: the one paired with the R nearest ``forget_fraction``."""
    i = int(np.argmin([abs(r - cfg.forget_fraction) for r in cfg.holdout_fractions]))
    return cfg.subset_sizes[i]


# ----------------------------------------------------------------------------- data and models

@dataclass
class Data:
    """CIFAR-10 tensors: images (N, 3, 32, 32) normalised, labels (N,) int64."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int = 10


def load_data(cfg) -> Data:
    """Class-balanced CIFAR-10 train and test subsets (offline ImageFolder or torchvision)."""
    x, y = load_cifar("train", n_per_class=cfg.n_per_class, seed=cfg.seed)
    xt, yt = load_cifar("test", n_per_class=cfg.n_test_per_class, seed=cfg.seed)
    return Data(x, y, xt, yt)


def holdout_split(cfg, n: int, fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(held-out, kept) training indices for fraction R (0 holds out nothing)."""
    if fraction == 0:
        return np.array([], dtype=np.int64), np.arange(n)
    return random_split(n, fraction, seed=cfg.seed + 1)


def build_model(cfg) -> nn.Module:
    """A freshly initialised ResNet-18 (seeded, so its initial weights w_0 are reproducible)."""
    seed_everything(cfg.seed)
    return resnet18(num_classes=10, width=cfg.width)


def _train_key(cfg, fraction: float) -> dict:
    keys = ("seed", "n_per_class", "width", "epochs", "batch_size", "lr", "augment", "early_fraction")
    key = {**{k: cfg[k] for k in keys}, "holdout": fraction}
    if fraction == 0:  # the original model also records Unroll's accumulated forget gradients
        key["unroll_forget"] = cfg.forget_fraction
    return key


def early_epoch(cfg) -> int:
    """Number of epochs after which the early checkpoint is taken (at least 1)."""
    return max(1, int(round(cfg.early_fraction * cfg.epochs)))


def epoch_mean_lrs(cfg, n_train: int) -> np.ndarray:
    """(epochs,) mean learning rate of each epoch under train_classifier's per-step cosine decay."""
    steps = int(np.ceil(n_train / cfg.batch_size))
    t = np.arange(cfg.epochs * steps)
    lrs = cfg.lr * (1 + np.cos(np.pi * t / (cfg.epochs * steps))) / 2
    return lrs.reshape(cfg.epochs, steps).mean(axis=1)


def _trained_tensors(cfg, data: Data, fraction: float) -> dict[str, torch.Tensor]:
    """Cached tensors of one training run: "final.*" and "early.*" state dicts and, for the
    original model (R = 0), "unroll.*": the forget set's lr/B-weighted gradients summed over epochs."""
    _, kept = holdout_split(cfg, len(data.y_train), fraction)
    forget = holdout_split(cfg, len(data.y_train), cfg.forget_fraction)[0] if fraction == 0 else None
    lrs = epoch_mean_lrs(cfg, len(kept))

    def compute() -> dict[str, torch.Tensor]:
        model = build_model(cfg)
        early: dict[str, torch.Tensor] = {}
        accumulated: dict[str, torch.Tensor] = {}

        def on_epoch_end(epoch: int, m: nn.Module) -> None:
            if epoch + 1 == early_epoch(cfg):
                early.update({k: v.detach().clone() for k, v in m.state_dict().items()})
            if forget is not None:
                # Each forget sample was seen once this epoch, with step lr_e / B.
                accumulate_forget_gradient(m, data.x_train[forget], data.y_train[forget],
                                           float(lrs[epoch]) / cfg.batch_size, cfg.batch_size, accumulated)

        train_classifier(model, data.x_train[kept], data.y_train[kept], epochs=cfg.epochs,
                         batch_size=cfg.batch_size, lr=cfg.lr, augment=cfg.augment, seed=cfg.seed,
                         desc=f"train R={fraction:g}", on_epoch_end=on_epoch_end)
        out = {f"final.{k}": v for k, v in model.state_dict().items()}
        out.update({f"early.{k}": v for k, v in early.items()})
        out.update({f"unroll.{k}": v for k, v in accumulated.items()})
        return out

    return cache.load_or_compute(CHAPTER, "model", _train_key(cfg, fraction), compute, CODE_VERSION)


def _with_prefix(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def train_model(cfg, data: Data, fraction: float) -> tuple[nn.Module, nn.Module]:
    """(final, early) models trained on the training set minus a held-out fraction R (cached).

    The early model is the same run's checkpoint after ``early_epoch(cfg)`` epochs.
    """
    tensors = _trained_tensors(cfg, data, fraction)
    models = []
    for prefix in ("final.", "early."):
        m = build_model(cfg)
        m.load_state_dict(_with_prefix(tensors, prefix))
        models.append(m.eval())
    return models[0], models[1]


def unroll_accumulated(cfg, data: Data) -> dict[str, torch.Tensor]:
    """The forget set's accumulated SGD contribution recorded while training the original model."""
    return _with_prefix(_trained_tensors(cfg, data, 0), "unroll.")


# ----------------------------------------------------------------------------- outputs

@torch.no_grad()
def model_outputs(model: nn.Module, x: torch.Tensor, feature: str, batch_size: int = 512) -> np.ndarray:
    """(N, d) float64 outputs of ``model`` (eval mode) at depth ``feature`` for images x (N, 3, 32, 32).

    layer2 / layer3: globally average-pooled activations of that stage;
    penultimate: ``model.features``; logits; softmax probabilities.
    """
    if feature not in FEATURES:
        raise ValueError(f"parameter 'feature': must be one of {', '.join(FEATURES)} (got {feature!r})")
    model.eval()
    dev = next(model.parameters()).device
    grabbed: list[torch.Tensor] = []
    hook = None
    if feature in ("layer2", "layer3"):
        hook = getattr(model, feature).register_forward_hook(
            lambda _m, _i, out: grabbed.append(F.adaptive_avg_pool2d(out, 1).flatten(1).float().cpu()))
    out = []
    try:
        for i in range(0, len(x), batch_size):
            xb = x[i:i + batch_size].to(dev)
            if feature == "penultimate":
                out.append(model.features(xb).float().cpu())
                continue
            logits = model(xb).float().cpu()
            out.append(logits.softmax(1) if feature == "softmax" else logits)
    finally:
        if hook is not None:
            hook.remove()
    res = torch.cat(grabbed if hook is not None else out)
    return res.double().numpy()


def all_outputs(model: nn.Module, data: Data, feature: str) -> tuple[np.ndarray, np.ndarray]:
    """Outputs of every training (N, d) and test (T, d) image."""
    return model_outputs(model, data.x_train, feature), model_outputs(model, data.x_test, feature)


# ----------------------------------------------------------------------------- subset classification

@dataclass
class Pools:
    """Row indices into train / test outputs from which subsets of one setting are drawn."""

    in_pool: np.ndarray    # training rows the model saw
    out_pool: np.ndarray   # training rows it did not see (held-out or forget set)


def draw_subsets(pools: Pools, n_test: int, size: int, n_targets: int, rng: np.random.Generator) -> dict:
    """Indices of the references and targets of one setting, each of ``size`` rows.

    Returns {"in_ref": (s,), "out_ref": (s,) test rows, "in_targets": (n_targets, s),
    "out_targets": (n_targets, s)}.
    """
    if size > len(pools.out_pool) or size > n_test or 2 * size > len(pools.in_pool):
        raise ValueError(
            f"size: subset size {size} does not fit the pools ({len(pools.in_pool)} in, "
            f"{len(pools.out_pool)} out, {n_test} test)")
    perm = rng.permutation(pools.in_pool)
    in_ref, in_rest = perm[:size], perm[size:]
    return {
        "in_ref": in_ref,
        "out_ref": rng.choice(n_test, size, replace=False),
        "in_targets": np.stack([rng.choice(in_rest, size, replace=False) for _ in range(n_targets)]),
        "out_targets": np.stack([rng.choice(pools.out_pool, size, replace=False) for _ in range(n_targets)]),
    }


def judge_targets(train_out: np.ndarray, test_out: np.ndarray, subsets: dict, cfg, detectors=DETECTORS,
                  sigma_mult: float = 1.0, seed: int = 0) -> dict:
    """Verdicts ("out" = True) of every detector on every target; targets in-training first.

    train_out (N, d), test_out (T, d): model outputs. Returns {detector: (2 * n_targets,) bool,
    "labels": (2 * n_targets,) bool (True for out-of-training targets), "h_in", "h_out": reference
    dependence distributions, "h_targets": (2 * n_targets, n_shuffles)}.
    """
    sigma = sigma_mult * np.sqrt(train_out.shape[1])
    in_ref, out_ref = train_out[subsets["in_ref"]], test_out[subsets["out_ref"]]
    targets = [train_out[t] for t in subsets["in_targets"]] + [train_out[t] for t in subsets["out_targets"]]
    res: dict = {"labels": np.array([False] * len(subsets["in_targets"]) + [True] * len(subsets["out_targets"]))}
    if "SDE" in detectors:
        kw = dict(n_shuffles=cfg.n_shuffles, sigma=sigma)
        h_in = sde.split_half_dependence(in_ref, seed=seed, **kw)
        h_out = sde.split_half_dependence(out_ref, seed=seed + 1, **kw)
        h_t = np.stack([sde.split_half_dependence(t, seed=seed + 2 + i, **kw) for i, t in enumerate(targets)])
        res["SDE"] = np.array([sde.decide(h, h_in, h_out, n_bins=cfg.n_bins)["out"] for h in h_t])
        res.update(h_in=h_in, h_out=h_out, h_targets=h_t)
    for name, metric in (("MMD", "mmd"), ("Wasserstein", "wasserstein")):
        if name in detectors:
            res[name] = np.array([sde.distance_test(t, in_ref, out_ref, metric)["out"] for t in targets])
    return res


def f1(verdicts: np.ndarray, labels: np.ndarray) -> float:
    """F1 of out-of-training detection (positive class: the target is out-of-training)."""
    return float(f1_score(labels, verdicts, pos_label=True, zero_division=0.0))


def classify(train_out, test_out, pools: Pools, size: int, cfg, detectors=DETECTORS, sigma_mult=1.0,
             seed: int = 0) -> dict:
    """F1 of each detector on one setting: {detector: F1}, plus the raw judgement under "raw"."""
    subsets = draw_subsets(pools, len(test_out), size, cfg.n_targets, np.random.default_rng(seed))
    raw = judge_targets(train_out, test_out, subsets, cfg, detectors, sigma_mult, seed)
    return {**{d: f1(raw[d], raw["labels"]) for d in detectors}, "raw": raw}


# ----------------------------------------------------------------------------- Tables 1 and 2, ablations

def controlled_experiment(cfg, data: Data) -> dict:
    """Table 1 and 2: F1 of SDE, MMD and Wasserstein for every (R, |S|) setting.

    Returns {"f1": DataFrame (rows: detectors; columns "R=5%"...), "sizes": list, "models": {R: (final, early)}}.
    """
    rows: dict[str, dict[str, float]] = {d: {} for d in DETECTORS}
    models = {}
    for r, size in zip(cfg.holdout_fractions, cfg.subset_sizes):
        final, early = train_model(cfg, data, r)
        models[r] = (final, early)
        held, kept = holdout_split(cfg, len(data.y_train), r)
        tr, te = all_outputs(final, data, cfg.feature)
        res = classify(tr, te, Pools(kept, held), size, cfg, seed=cfg.seed)
        for d in DETECTORS:
            rows[d][f"R={r * 100:g}%"] = res[d]
    return {"f1": pd.DataFrame(rows).T, "models": models}


def size_sweep(cfg, data: Data, model: nn.Module, fraction: float) -> pd.DataFrame:
    """F1 of each detector against subset size (rows: sizes in ``cfg.size_sweep``) for one model."""
    held, kept = holdout_split(cfg, len(data.y_train), fraction)
    tr, te = all_outputs(model, data, cfg.feature)
    out = {}
    for s in progress(cfg.size_sweep, desc="size sweep"):
        res = classify(tr, te, Pools(kept, held), s, cfg, seed=cfg.seed + 10)
        out[s] = {d: res[d] for d in DETECTORS}
    df = pd.DataFrame(out).T
    df.index.name = "|S|"
    return df


def bandwidth_ablation(cfg, data: Data, model: nn.Module, fraction: float, size: int) -> pd.Series:
    """SDE F1 at the main setting for each multiplier of sigma = sqrt(dim)."""
    held, kept = holdout_split(cfg, len(data.y_train), fraction)
    tr, te = all_outputs(model, data, cfg.feature)
    vals = {m: classify(tr, te, Pools(kept, held), size, cfg, ("SDE",), sigma_mult=m, seed=cfg.seed)["SDE"]
            for m in cfg.bandwidth_mults}
    return pd.Series(vals, name="SDE F1").rename_axis("sigma / sqrt(dim)")


def depth_ablation(cfg, data: Data, model: nn.Module, fraction: float, size: int) -> pd.Series:
    """SDE F1 at the main setting for outputs taken at each depth in ``cfg.depths``."""
    held, kept = holdout_split(cfg, len(data.y_train), fraction)
    vals = {}
    for depth in cfg.depths:
        tr, te = all_outputs(model, data, depth)
        vals[depth] = classify(tr, te, Pools(kept, held), size, cfg, ("SDE",), seed=cfg.seed)["SDE"]
    return pd.Series(vals, name="SDE F1").rename_axis("features")


# ----------------------------------------------------------------------------- Table 3: unlearning

def method_config(cfg, name: str, accumulated: dict) -> dict:
    """Hyperparameters handed to ``registry.get(name).fn`` for this chapter's scale."""
    steps = {"steps": cfg.unlearn_steps, "lr": cfg.unlearn_lr, "batch_size": cfg.batch_size, "seed": cfg.seed}
    if name in ("RandLabel", "SalUn"):
        return {**steps, "retain_mix": cfg.retain_mix}
    if name == "Sparsity":
        return steps
    if name == "Unroll":
        return {"accumulated": accumulated, "batch_size": cfg.batch_size}
    raise ValueError(f"parameter 'methods': no chapter-2 settings for {name!r}")


def unlearn_all(cfg, data: Data) -> dict[str, nn.Module]:
    """Original model (trained on everything) and one unlearned model per method in ``cfg.methods``.

    Retrain is the controlled model trained without the forget set (exact
    unlearning, same recipe), so it is shared with Table 1.
    """
    original, _ = train_model(cfg, data, 0)
    forget, retain = holdout_split(cfg, len(data.y_train), cfg.forget_fraction)
    splits = registry.Splits(data.x_train[forget], data.y_train[forget], data.x_train[retain],
                             data.y_train[retain], data.num_classes)
    accumulated = unroll_accumulated(cfg, data) if "Unroll" in cfg.methods else {}
    models = {"Original": original}
    for name in progress(cfg.methods, desc="unlearning"):
        if name == "Retrain":
            models[name] = train_model(cfg, data, cfg.forget_fraction)[0]
            continue
        seed_everything(cfg.seed)
        models[name] = registry.get(name).fn(original, splits, method_config(cfg, name, accumulated)).eval()
    return models


def evaluate_unlearning(cfg, data: Data, models: dict[str, nn.Module]) -> dict:
    """Table 3: Acc_r, Acc_f (%), ASR and OTR (%) of every model, plus dependence distributions.

    OTR: share of ``n_targets`` forget-set subsets (size of the main setting)
    that SDE judges out-of-training, against an in-training reference from the
    retain set and an out-of-training reference from the test set.
    """
    forget, retain = holdout_split(cfg, len(data.y_train), cfg.forget_fraction)
    size = main_size(cfg)
    rng = np.random.default_rng(cfg.seed + 7)
    subsets = draw_subsets(Pools(retain, forget), len(data.y_test), size, cfg.n_targets, rng)
    subsets["in_targets"] = subsets["in_targets"][:0]  # only forget-set targets count for OTR
    ytr, yte = data.y_train.numpy(), data.y_test.numpy()
    rows, dists = {}, {}
    for name, model in progress(models.items(), desc="evaluate"):
        ltr, lte = all_outputs(model, data, "logits")
        ptr, pte = probes.softmax(ltr), probes.softmax(lte)
        tr, te = {"logits": (ltr, lte), "softmax": (ptr, pte)}.get(cfg.feature) or all_outputs(model, data, cfg.feature)
        raw = judge_targets(tr, te, subsets, cfg, ("SDE",), seed=cfg.seed)
        correct = ltr.argmax(1) == ytr
        rows[name] = {
            "Acc_r (%)": 100 * float(correct[retain].mean()),
            "Acc_f (%)": 100 * float(correct[forget].mean()),
            "Acc_test (%)": 100 * float((lte.argmax(1) == yte).mean()),
            "ASR": probes.confidence_attack_asr(ptr[retain], ytr[retain], pte, yte, ptr[forget], ytr[forget], seed=cfg.seed),
            "OTR (%)": 100 * float(np.mean(raw["SDE"])),
        }
        dists[name] = {"in": raw["h_in"], "out": raw["h_out"], "target": raw["h_targets"][0]}
    return {"table": pd.DataFrame(rows).T, "dists": dists}


def early_check(cfg, data: Data, early_model: nn.Module, fraction: float, size: int) -> float:
    """SDE F1 at one setting for the checkpoint taken after ``early_fraction`` of training."""
    held, kept = holdout_split(cfg, len(data.y_train), fraction)
    tr, te = all_outputs(early_model, data, cfg.feature)
    return classify(tr, te, Pools(kept, held), size, cfg, ("SDE",), seed=cfg.seed)["SDE"]


# ----------------------------------------------------------------------------- claims

def _sde_controlled(m):
    f1s = m["f1"]["SDE"]
    return min(f1s.values()) >= 0.8, "SDE F1: " + ", ".join(f"{k} {v:.2f}" for k, v in f1s.items())


def _beats_baselines(m):
    col = m["main_column"]
    s, mm, w = m["f1"]["SDE"][col], m["f1"]["MMD"][col], m["f1"]["Wasserstein"][col]
    return s > mm and s > w, f"{col}: SDE {s:.2f}, MMD {mm:.2f}, Wasserstein {w:.2f}"


def _grows_with_size(m):
    f = [v for _, v in sorted(((int(k), v) for k, v in m["size_sweep"]["SDE"].items()))]
    drops = max([a - b for a, b in zip(f, f[1:])] + [0.0])
    return f[-1] > f[0] and drops <= 0.1, "SDE F1 by size: " + ", ".join(f"{v:.2f}" for v in f)


def _unroll_hidden(m):
    t = m["table3"]
    gap = t["Retrain"]["OTR (%)"] - t["Unroll"]["OTR (%)"]
    asr = abs(t["Retrain"]["ASR"] - t["Unroll"]["ASR"])
    return gap >= 50 and asr <= 0.05, (f"OTR Retrain {t['Retrain']['OTR (%)']:.0f}% vs Unroll "
                                       f"{t['Unroll']['OTR (%)']:.0f}%; ASR {t['Retrain']['ASR']:.2f} vs "
                                       f"{t['Unroll']['ASR']:.2f}")


def _bandwidth_robust(m):
    b = {float(k): v for k, v in m["bandwidth"].items()}
    near = [v for k, v in b.items() if 0.5 <= k <= 2.0]
    return (max(near) - min(near) <= 0.1 and max(b.values()) - b[1.0] <= 0.1,
            "SDE F1 by sigma multiplier: " + ", ".join(f"x{k:g} {v:.2f}" for k, v in sorted(b.items())))


def _deeper_better(m):
    d = m["depth"]
    deep, shallow = np.mean([d["penultimate"], d["logits"]]), np.mean([d["layer2"], d["layer3"]])
    return deep > shallow, "SDE F1 by depth: " + ", ".join(f"{k} {v:.2f}" for k, v in d.items())


def _early(m):
    return m["early_f1"] >= 0.7, f"early-model SDE F1 {m['early_f1']:.2f} (final model {m['f1']['SDE'][m['main_column']]:.2f})"



# Every metric key the chapter records (run.record); a claim reading another key is a typo
# and fails loudly (memlab.paper.evaluate), one reading a key this run lacks is 'not run'.
METRIC_KEYS: tuple[str, ...] = (
    'f1', 'main_column', 'table3', 'size_sweep', 'bandwidth', 'depth', 'early_f1', 'early_epochs',
)

def claims():
    """The paper's claims as predicates over this chapter's metrics (see memlab.paper.Claim).

    Judged at the cpu and paper profiles; smoke-profile numbers (toy sizes) say nothing about them.
    """
    from functools import partial

    from memlab.paper import Claim as _Claim, declare

    Claim = partial(_Claim, profiles=("cpu", "paper"))

    return declare(METRIC_KEYS, [
        Claim("controlled", "SDE separates in- from out-of-training subsets of CIFAR-10 (F1 >= 0.8 at every R)",
              "Table 1", _sde_controlled),
        Claim("beats_baselines", "SDE beats MMD and Wasserstein distance on the same task", "Table 2",
              _beats_baselines),
        Claim("size", "F1 grows with the subset size", "Findings; Table 1", _grows_with_size),
        Claim("unroll", "Unroll's OTR is far below Retrain's (>= 50 points) while its ASR matches (within 0.05)",
              "Table 3", _unroll_hidden),
        Claim("bandwidth", "sigma = sqrt(dim) is robust (F1 within 0.1 for 0.5x-2x and of the best)",
              "Findings", _bandwidth_robust),
        Claim("depth", "Deeper features separate better (penultimate/logits above layer2/layer3)", "Findings",
              _deeper_better),
        Claim("early", "Even a model at 20% of its training shows the dependence (SDE F1 >= 0.7)", "Findings",
              _early),
    ])
