"""Chapter 2's stages: CIFAR-10 data, the cached ResNet-18 models (trained, early, unlearned), their
outputs, and the SDE / MMD / Wasserstein judgements of Tables 1-2 and the ablations.

Every function takes the resolved :class:`memlab.core.config.Config` of the chapter, so the three
profiles run the same code at different sizes, and returns plain data (arrays, dicts,
DataFrames). The statistic itself lives in :mod:`memlab.science.sde`, F1 and its band in
:mod:`memlab.science.metrics`, the outputs at each depth in :mod:`memlab.science.probes`; the subset protocol is
described in :mod:`.spec`.
"""
from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn

from memlab.core import cache
from memlab.core.config import seed_everything
from memlab.core.progress import progress
from memlab.data.splits import random_split
from memlab.data.vision import load_cifar
from memlab.models.resnet import resnet18
from memlab.models.train import steps_per_epoch, train_classifier
from memlab.science import probes, sde
from memlab.science.metrics import f1_band
from memlab.science.metrics import f1_score as f1
from memlab.science.unlearning import registry

from .spec import CHAPTER, CODE_VERSION, DETECTORS, FEATURES, VARIANT, column

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
    # float(): R = 0 and R = 0.0 are one model (an int 0 once made a second cache key and a second training)
    return {**{k: cfg[k] for k in keys}, "holdout": float(fraction)}


def early_epoch(cfg) -> int:
    """Number of epochs after which the early checkpoint is taken (at least 1)."""
    return max(1, int(round(cfg.early_fraction * cfg.epochs)))


def epoch_mean_lrs(cfg, n_train: int) -> np.ndarray:
    """(epochs,) mean learning rate of each epoch under train_classifier's per-step cosine decay."""
    steps = steps_per_epoch(n_train, cfg.batch_size)
    t = np.arange(cfg.epochs * steps)
    lrs = cfg.lr * (1 + np.cos(np.pi * t / (cfg.epochs * steps))) / 2
    return lrs.reshape(cfg.epochs, steps).mean(axis=1)


def _trained_tensors(cfg, data: Data, fraction: float) -> dict[str, torch.Tensor]:
    """Cached tensors of one training run: "final.*" and "early.*" state dicts, and "cost.cpu_s" /
    "cost.wall_s" (float64 scalars): what training took when it ran, so a warm run can state the cold cost."""
    _, kept = holdout_split(cfg, len(data.y_train), fraction)

    def compute() -> dict[str, torch.Tensor]:
        c0, w0 = time.process_time(), time.perf_counter()
        model = build_model(cfg)
        early: dict[str, torch.Tensor] = {}

        def on_epoch_end(epoch: int, m: nn.Module) -> None:
            if epoch + 1 == early_epoch(cfg):
                early.update({k: v.detach().clone() for k, v in m.state_dict().items()})

        train_classifier(model, data.x_train[kept], data.y_train[kept], epochs=cfg.epochs,
                         batch_size=cfg.batch_size, lr=cfg.lr, augment=cfg.augment, seed=cfg.seed,
                         desc=f"train R={fraction:g}", on_epoch_end=on_epoch_end)
        out = {f"final.{k}": v for k, v in model.state_dict().items()}
        out.update({f"early.{k}": v for k, v in early.items()})
        out["cost.cpu_s"] = torch.tensor(time.process_time() - c0, dtype=torch.float64)
        out["cost.wall_s"] = torch.tensor(time.perf_counter() - w0, dtype=torch.float64)
        return out

    return cache.load_or_compute(CHAPTER, "model", _train_key(cfg, fraction), compute, CODE_VERSION)


def _with_prefix(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


_MODELS: dict[str, tuple[nn.Module, nn.Module, dict]] = {}  # in-process: one object per trained model


def train_model(cfg, data: Data, fraction: float) -> tuple[nn.Module, nn.Module]:
    """(final, early) models trained on the training set minus a held-out fraction R (cached).

    The early model is the same run's checkpoint after ``early_epoch(cfg)`` epochs. Within one
    process the same objects are returned on every call, so their outputs are computed once.
    """
    k = json.dumps([CODE_VERSION, _train_key(cfg, fraction), cache.enabled()], sort_keys=True)
    if k not in _MODELS:
        t0 = time.perf_counter()
        tensors = _trained_tensors(cfg, data, fraction)
        models = []
        for prefix in ("final.", "early."):
            m = build_model(cfg)
            m.load_state_dict(_with_prefix(tensors, prefix))
            models.append(m.eval())
        cost = {"cpu_s": float(tensors["cost.cpu_s"]), "wall_s": float(tensors["cost.wall_s"]),
                "this_run_s": time.perf_counter() - t0}
        _MODELS[k] = (models[0], models[1], cost)
    return _MODELS[k][0], _MODELS[k][1]


# ----------------------------------------------------------------------------- outputs

def model_outputs(model: nn.Module, x: torch.Tensor, feature: str, batch_size: int = 512) -> np.ndarray:
    """(N, d) float64 outputs of ``model`` (eval mode) at depth ``feature`` for images x (N, 3, 32, 32).

    layer2 / layer3: globally average-pooled activations of that stage;
    penultimate: ``model.features``; logits; softmax probabilities.
    """
    if feature not in FEATURES:
        raise ValueError(f"parameter 'feature': must be one of {', '.join(FEATURES)} (got {feature!r})")
    return probes.layer_outputs(model, x, batch_size)[feature]


def all_outputs(model: nn.Module, data: Data, feature: str) -> tuple[np.ndarray, np.ndarray]:
    """Outputs of every training (N, d) and test (T, d) image at depth ``feature``.

    All depths come from one forward pass, kept on the model object (models are not changed
    after they are built here, so the outputs stay valid).
    """
    if feature not in FEATURES:
        raise ValueError(f"parameter 'feature': must be one of {', '.join(FEATURES)} (got {feature!r})")
    store = model.__dict__.setdefault("_memlab_outputs", {})
    if store.get("data") is not data:
        store.clear()
        store.update(data=data, train=probes.layer_outputs(model, data.x_train),
                     test=probes.layer_outputs(model, data.x_test))
    return store["train"][feature], store["test"][feature]


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


def subset_list(train_out: np.ndarray, test_out: np.ndarray, subsets: dict, seed: int = 0) -> list[tuple]:
    """(kind, features (s, d), shuffle seed) of every subset of one setting, references first.

    kind: "in-ref", "out-ref", "in-target" or "out-target"; the seeds are those judge_targets uses.
    """
    out = [("in-ref", train_out[subsets["in_ref"]], seed),
           ("out-ref", test_out[subsets["out_ref"]], seed + 1)]
    targets = ([("in-target", t) for t in subsets["in_targets"]]
               + [("out-target", t) for t in subsets["out_targets"]])
    return out + [(kind, train_out[t], seed + 2 + i) for i, (kind, t) in enumerate(targets)]


def judge_targets(train_out: np.ndarray, test_out: np.ndarray, subsets: dict, cfg, detectors=DETECTORS,
                  sigma_mult: float = 1.0, seed: int = 0) -> dict:
    """Verdicts ("out" = True) of every detector on every target; targets in-training first.

    train_out (N, d), test_out (T, d): model outputs. detectors: any of DETECTORS and VARIANT.
    Returns {detector: (2 * n_targets,) bool, "labels": (2 * n_targets,) bool (True for
    out-of-training targets), "h_in", "h_out": reference dependence distributions,
    "h_targets": (2 * n_targets, n_shuffles), "saturated": number of subsets whose kernel
    matrix was near-constant (sde.SaturationWarning)}.
    """
    sigma = sigma_mult * np.sqrt(train_out.shape[1])
    subs = subset_list(train_out, test_out, subsets, seed)
    (_, in_ref, _), (_, out_ref, _), targets = subs[0], subs[1], subs[2:]
    res: dict = {"labels": np.array([kind == "out-target" for kind, _, _ in targets]), "saturated": 0}
    kw = dict(n_shuffles=cfg.n_shuffles, sigma=sigma)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", sde.SaturationWarning)
        for name, fn in (("SDE", sde.split_half_dependence), (VARIANT, sde.standardised_split_half)):
            if name not in detectors:
                continue
            h = [fn(f, seed=s, **kw) for _, f, s in subs]
            res[name] = np.array([sde.decide(t, h[0], h[1], n_bins=cfg.n_bins)["out"] for t in h[2:]])
            if name == "SDE":
                res.update(h_in=h[0], h_out=h[1], h_targets=np.stack(h[2:]))
    sat = [w for w in caught if issubclass(w.category, sde.SaturationWarning)]
    res["saturated"] = len(sat) // max(1, sum(d in detectors for d in ("SDE", VARIANT)))
    if sat:  # one stable message per bandwidth (shown once), not one per subset; counts in "saturated"
        warnings.warn(f"near-constant kernel matrices at sigma = {sigma:.3g} (saturation): every shuffle of "
                      f"those subsets gives almost the same HSIC; counted under 'saturated'",
                      sde.SaturationWarning, stacklevel=2)
    for name, metric in (("MMD", "mmd"), ("Wasserstein", "wasserstein")):
        if name in detectors:
            res[name] = np.array([sde.distance_test(f, in_ref, out_ref, metric)["out"]
                                  for _, f, _ in targets])
    return res


def classify(train_out, test_out, pools: Pools, size: int, cfg, detectors=DETECTORS, sigma_mult=1.0,
             seed: int = 0) -> dict:
    """F1 of each detector on one setting: {detector: F1}, its bootstrap half-width under "band",
    and the raw judgement under "raw"."""
    subsets = draw_subsets(pools, len(test_out), size, cfg.n_targets, np.random.default_rng(seed))
    raw = judge_targets(train_out, test_out, subsets, cfg, detectors, sigma_mult, seed)
    out = {d: f1(raw[d], raw["labels"]) for d in detectors}
    return {**out, "band": {d: f1_band(raw["labels"], raw[d]) for d in detectors}, "raw": raw,
            "subsets": subsets}


# ----------------------------------------------------------------------------- Tables 1 and 2, ablations

def controlled_experiment(cfg, data: Data, feature: str | None = None, detectors=DETECTORS) -> dict:
    """Table 1 and 2: F1 of each detector for every (R, |S|) setting, reading ``feature``.

    Returns {"f1": DataFrame (rows: detectors; columns "R=5%"...), "band": same shape (bootstrap
    half-widths), "beats_band": {column: half-width of F1(SDE) - F1(best baseline), paired},
    "models": {R: (final, early)}, "settings": {R: classify's result}}.
    """
    feature = feature or cfg.feature
    rows: dict[str, dict[str, float]] = {d: {} for d in detectors}
    bands: dict[str, dict[str, float]] = {d: {} for d in detectors}
    beats, models, settings = {}, {}, {}
    for r, size in zip(cfg.holdout_fractions, cfg.subset_sizes):
        final, early = train_model(cfg, data, r)
        models[r] = (final, early)
        held, kept = holdout_split(cfg, len(data.y_train), r)
        tr, te = all_outputs(final, data, feature)
        res = classify(tr, te, Pools(kept, held), size, cfg, detectors, seed=cfg.seed)
        settings[r] = res
        for d in detectors:
            rows[d][column(r)] = res[d]
            bands[d][column(r)] = res["band"][d]
        if {"SDE", "MMD", "Wasserstein"} <= set(detectors):
            best = max(("MMD", "Wasserstein"), key=lambda d: res[d])
            beats[column(r)] = f1_band(res["raw"]["labels"], res["raw"]["SDE"], res["raw"][best])
    return {"f1": pd.DataFrame(rows).T, "band": pd.DataFrame(bands).T, "beats_band": beats,
            "models": models, "settings": settings}


def size_sweep(cfg, data: Data, model: nn.Module, fraction: float, feature: str | None = None
               ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(F1, bootstrap half-width) of each detector against subset size (rows: ``cfg.size_sweep``)."""
    held, kept = holdout_split(cfg, len(data.y_train), fraction)
    tr, te = all_outputs(model, data, feature or cfg.feature)
    out, band = {}, {}
    for s in progress(cfg.size_sweep, desc="size sweep"):
        res = classify(tr, te, Pools(kept, held), s, cfg, seed=cfg.seed + 10)
        out[s] = {d: res[d] for d in DETECTORS}
        band[s] = res["band"]
    df, bf = pd.DataFrame(out).T, pd.DataFrame(band).T
    df.index.name = bf.index.name = "|S|"
    return df, bf


def bandwidth_ablation(cfg, data: Data, model: nn.Module, fraction: float, size: int,
                       feature: str | None = None) -> pd.DataFrame:
    """SDE F1 at the main setting for each multiplier of sigma = sqrt(dim).

    Rows: multipliers; columns "SDE F1", "band" (bootstrap half-width), "saturated subsets"
    (subsets whose kernel matrix was near-constant, out of 2 * n_targets + 2).
    """
    held, kept = holdout_split(cfg, len(data.y_train), fraction)
    tr, te = all_outputs(model, data, feature or cfg.feature)
    rows = {}
    for mult in cfg.bandwidth_mults:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sde.SaturationWarning)  # counted in the table instead
            res = classify(tr, te, Pools(kept, held), size, cfg, ("SDE",), sigma_mult=mult, seed=cfg.seed)
        rows[mult] = {"SDE F1": res["SDE"], "band": res["band"]["SDE"],
                      "saturated subsets": res["raw"]["saturated"]}
    return pd.DataFrame(rows).T.rename_axis("sigma / sqrt(dim)")


def depth_ablation(cfg, data: Data, model: nn.Module, fraction: float, size: int) -> pd.DataFrame:
    """SDE F1 (and bootstrap half-width "band") at the main setting for outputs at each depth."""
    held, kept = holdout_split(cfg, len(data.y_train), fraction)
    rows = {}
    for depth in cfg.depths:
        tr, te = all_outputs(model, data, depth)
        res = classify(tr, te, Pools(kept, held), size, cfg, ("SDE",), seed=cfg.seed)
        rows[depth] = {"SDE F1": res["SDE"], "band": res["band"]["SDE"]}
    return pd.DataFrame(rows).T.rename_axis("features")


def early_check(cfg, data: Data, early_model: nn.Module, fraction: float, size: int,
                feature: str | None = None) -> tuple[float, float]:
    """(SDE F1, bootstrap half-width) at one setting for the checkpoint after ``early_fraction``."""
    held, kept = holdout_split(cfg, len(data.y_train), fraction)
    tr, te = all_outputs(early_model, data, feature or cfg.feature)
    res = classify(tr, te, Pools(kept, held), size, cfg, ("SDE",), seed=cfg.seed)
    return res["SDE"], res["band"]["SDE"]


# ----------------------------------------------------------------------------- what the statistic measures

def spread_analysis(cfg, data: Data, model: nn.Module, fraction: float, size: int,
                    feature: str | None = None) -> pd.DataFrame:
    """One row per subset of the main setting (references and targets) of ``model``.

    Columns: "kind"; "saturated" (a half's kernel matrix was near-constant); "spread"
    (sde.subset_spread: 1 - mean off-diagonal kernel, in [0, 1]);
    "measured" (mean of the n_shuffles split-half values); "predicted" (exact shuffle mean,
    tr(HKH) tr(HLH) / (m-1)^3); "sem" (standard error of "measured"); "sd" (sd of the values).
    """
    held, kept = holdout_split(cfg, len(data.y_train), fraction)
    tr, te = all_outputs(model, data, feature or cfg.feature)
    subsets = draw_subsets(Pools(kept, held), len(te), size, cfg.n_targets, np.random.default_rng(cfg.seed))
    rows = []
    for kind, f, s in subset_list(tr, te, subsets, cfg.seed):
        with warnings.catch_warnings(record=True) as caught:  # counted in the "saturated" column
            warnings.simplefilter("always", sde.SaturationWarning)
            h = sde.split_half_dependence(f, n_shuffles=cfg.n_shuffles, seed=s)
        rows.append({"kind": kind, "saturated": bool(caught), "spread": sde.subset_spread(f),
                     "measured": h.mean(),
                     "predicted": sde.split_half_shuffle_mean(f, seed=s),
                     "sem": h.std(ddof=1) / np.sqrt(len(h)) if len(h) > 1 else np.nan, "sd": h.std()})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- Table 3: unlearning

def method_config(cfg, name: str) -> dict:
    """Hyperparameters handed to ``registry.get(name).fn`` for this chapter's scale."""
    steps = {"steps": cfg.unlearn_steps, "lr": cfg.unlearn_lr, "batch_size": cfg.batch_size, "seed": cfg.seed}
    if name in ("RandLabel", "SalUn"):
        return {**steps, "retain_mix": cfg.retain_mix}
    if name == "Sparsity":
        return steps
    if name == "Unroll":
        # Thudi et al.'s single-gradient unlearning at the initial weights w_0 (seeded, so rebuilt
        # exactly): every forget sample was used once per epoch at step lr_mean / B.
        n_train = len(holdout_split(cfg, 10 * cfg.n_per_class, 0)[1])
        return {"reference_state": build_model(cfg).state_dict(),
                "lr": float(epoch_mean_lrs(cfg, n_train).mean()),
                "epochs": cfg.epochs, "batch_size": cfg.batch_size, "scale": cfg.unroll_scale}
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
    models = {"Original": original}
    for name in progress(cfg.methods, desc="unlearning"):
        if name == "Retrain":
            models[name] = train_model(cfg, data, cfg.forget_fraction)[0]
            continue
        seed_everything(cfg.seed)
        models[name] = registry.get(name).fn(original, splits, method_config(cfg, name)).eval()
    return models
