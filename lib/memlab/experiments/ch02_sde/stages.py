"""Chapter 2's stages: CIFAR-10 data, the cached classifiers (trained, early, unlearned), their
outputs, and the SDE / MMD / Wasserstein judgements of Tables 1-2 and the ablations.

Every function takes the resolved :class:`memlab.core.config.Config` of the chapter, so the three
profiles run the same code at different sizes, and returns plain data (arrays, dicts,
DataFrames). The classifier is ``arch``'s (:func:`memlab.models.recipe.cifar_classifier`: the fast
BatchNorm CNN at ``cpu``, the paper's ResNet-18 at ``paper``), trained by its kind's recipe
(:func:`memlab.models.recipe.train_supervised`). The statistic itself lives in :mod:`memlab.science.sde`,
F1 and its band in :mod:`memlab.science.metrics`, the outputs at each depth in
:mod:`memlab.science.probes`; the subset protocol is described in :mod:`.spec`.

The Original (R = 0) is chapter 1's where the two are the same training (:func:`chapter1_config`):
trained once, by chapter 1's stage, and shared through the model cache, as chapter 6 reads chapter 1's.
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

from memlab.core import cache, costs
from memlab.core.config import resolve, seed_everything
from memlab.core.fsutil import write_atomic
from memlab.core.progress import progress
from memlab.data.splits import random_split
from memlab.data.vision import load_cifar
from memlab.experiments import ch01_bn_illusion as ch1
from memlab.experiments.ch01_bn_illusion.stages import schedule_for as ch1_schedule
from memlab.models import recipe
from memlab.models.recipe import cifar_classifier, train_supervised, whiten_from
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
    """A freshly initialised classifier of ``cfg.arch`` (:func:`memlab.models.recipe.cifar_classifier`;
    seeded, so its initial weights are reproducible)."""
    seed_everything(cfg.seed)
    return cifar_classifier(cfg.arch, 10, width=cfg.width)


def chapter1_config(cfg):
    """Chapter 1's config (this profile and seed, its other parameters at their defaults) when its
    Original is the same training as this chapter's R = 0 model, else None.

    The same training: the same net (``arch``, ``width``, BatchNorm), images (CIFAR-10, ``n_per_class`` =
    chapter 1's ``train_per_class``, same seed; chapter 1 orders them retain first), schedule and
    augmentation: at ``cpu``, the fast CNN on all of CIFAR-10; at ``smoke`` and ``paper`` they differ.
    """
    c1 = resolve(ch1.CHAPTER, profile=cfg.profile, seed=cfg.seed)
    schedule = {"epochs": cfg.epochs, "batch_size": cfg.batch_size, "lr": cfg.lr}
    same = (c1.dataset == "cifar10" and c1.train_per_class == cfg.n_per_class and c1.arch == cfg.arch
            and c1.width == cfg.width and cfg.augment and ch1_schedule(c1, "bn") == schedule)
    return c1 if same else None


def _train_key(cfg, fraction: float) -> dict:
    keys = ("seed", "arch", "n_per_class", "width", "epochs", "batch_size", "lr", "augment", "early_fraction")
    # float(): R = 0 and R = 0.0 are one model (an int 0 once made a second cache key and a second training)
    return {**{k: cfg[k] for k in keys}, "holdout": float(fraction)}


def early_epoch(cfg) -> int:
    """Number of epochs after which the early checkpoint is taken (at least 1)."""
    return max(1, int(round(cfg.early_fraction * cfg.epochs)))


def epoch_mean_lrs(cfg, n_train: int) -> np.ndarray:
    """(epochs,) mean learning rate of each epoch of a training on ``n_train`` images, by the schedule the
    model trains by (:func:`memlab.models.recipe.epoch_mean_lrs`: the fast CNN's, or cosine decay)."""
    return recipe.epoch_mean_lrs(cfg.arch, n_train, cfg.epochs, cfg.batch_size, cfg.lr)


def _trained_tensors(cfg, data: Data, fraction: float) -> dict[str, torch.Tensor]:
    """Cached tensors of one training run: "final.*" and "early.*" state dicts, and "cost.cpu_s" /
    "cost.wall_s" (float64 scalars): what training took when it ran, so a warm run can state the cold cost."""
    _, kept = holdout_split(cfg, len(data.y_train), fraction)

    def compute() -> dict[str, torch.Tensor]:
        c0, w0 = time.process_time(), time.perf_counter()
        model = build_model(cfg)
        early: dict[str, torch.Tensor] = {}

        ckpt = cache.checkpoint_path()  # the early weights are kept beside it: a resumed run may be past them
        early_file = ckpt.with_name("early.pt") if ckpt is not None else None

        def on_epoch(epoch: int, m: nn.Module) -> None:  # epoch: epochs done (1-based)
            if epoch == early_epoch(cfg):
                early.update({k: v.detach().clone() for k, v in m.state_dict().items()})
                if early_file is not None:
                    write_atomic(early_file, lambda f: torch.save(early, f))

        train_supervised(model, data.x_train[kept], data.y_train[kept], epochs=cfg.epochs,
                         batch_size=cfg.batch_size, lr=cfg.lr, augment=cfg.augment, seed=cfg.seed,
                         desc=f"train R={fraction:g}", on_epoch=on_epoch)
        if not early and early_file is not None and early_file.exists():  # resumed past the early epoch
            early.update(torch.load(early_file, weights_only=True))
        out = {f"final.{k}": v for k, v in model.state_dict().items()}
        out.update({f"early.{k}": v for k, v in early.items()})
        out["cost.cpu_s"] = torch.tensor(time.process_time() - c0, dtype=torch.float64)
        out["cost.wall_s"] = torch.tensor(time.perf_counter() - w0, dtype=torch.float64)
        return out

    return cache.load_or_compute(CHAPTER, "model", _train_key(cfg, fraction), compute, CODE_VERSION)


def _with_prefix(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


# In-process: one object per trained model, with its cost {"cpu_s", "wall_s" (of its training; NaN for
# chapter 1's Original read from the cache), "this_run_s", "cached", "shared" (chapter 1's Original)}.
_MODELS: dict[str, tuple[nn.Module, nn.Module | None, dict]] = {}


def _own_model(cfg, data: Data, fraction: float) -> tuple[nn.Module, nn.Module, dict]:
    t0 = time.perf_counter()
    tensors = _trained_tensors(cfg, data, fraction)
    models = [build_model(cfg), build_model(cfg)]
    for m, prefix in zip(models, ("final.", "early.")):
        m.load_state_dict(_with_prefix(tensors, prefix))
    cost = {"cpu_s": float(tensors["cost.cpu_s"]), "wall_s": float(tensors["cost.wall_s"]),
            "this_run_s": time.perf_counter() - t0, "shared": False}
    cost["cached"] = cost["this_run_s"] < 0.5 * cost["wall_s"]
    return models[0].eval(), models[1].eval(), cost


def _chapter1_original(c1) -> tuple[nn.Module, None, dict]:
    """Chapter 1's Original (config ``c1``) by chapter 1's stage, cached or trained now, and its cost."""
    t0 = time.perf_counter()
    d1 = ch1.load_data(c1)
    before = costs.trained_keys()
    c0, w0 = time.process_time(), time.perf_counter()
    model = ch1.original_model(c1, d1, c1.seed)
    trained = bool(costs.trained_keys() - before)
    cost = {"cpu_s": time.process_time() - c0 if trained else float("nan"),
            "wall_s": time.perf_counter() - w0 if trained else float("nan"),
            "this_run_s": time.perf_counter() - t0, "cached": not trained, "shared": True}
    return model.eval(), None, cost


def train_model(cfg, data: Data, fraction: float) -> tuple[nn.Module, nn.Module | None]:
    """(final, early) models trained on the training set minus a held-out fraction R (cached).

    The early model is the same run's checkpoint after ``early_epoch(cfg)`` epochs. The Original
    (R = 0) is chapter 1's where :func:`chapter1_config` finds it the same training: trained once, by
    whichever chapter runs first, and shared through the cache; its early model is then None (no
    stage reads the Original's). Within one process the same objects are returned on every call.
    """
    k = json.dumps([CODE_VERSION, _train_key(cfg, fraction), cache.enabled()], sort_keys=True)
    if k not in _MODELS:
        c1 = chapter1_config(cfg) if fraction == 0 else None
        _MODELS[k] = _own_model(cfg, data, fraction) if c1 is None else _chapter1_original(c1)
    return _MODELS[k][0], _MODELS[k][1]


def reference_state(cfg, data: Data) -> dict[str, torch.Tensor]:
    """The initial weights w_0 of the Original's training (R = 0), Unroll's reference point: the net as
    built at its seed, with the fast CNN's whitening set from the first images it trains on
    (:func:`memlab.models.recipe.whiten_from`; chapter 1's Original trains on its retain images first)."""
    c1 = chapter1_config(cfg)
    n = recipe.Recipe.whiten_images
    if c1 is None:
        kept = holdout_split(cfg, len(data.y_train), 0)[1]
        return whiten_from(build_model(cfg), data.x_train[kept[:n]], n).state_dict()
    torch.manual_seed(c1.seed)  # as chapter 1 builds its Original
    model, s = ch1.build(c1), ch1.load_data(c1).splits
    return whiten_from(model, torch.cat([s.retain_x[:n], s.forget_x[:n]]), n).state_dict()


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


# ----------------------------------------------------------------------------- Tables 1 and 2

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

def method_config(cfg, data: Data, name: str) -> dict:
    """Hyperparameters handed to ``registry.get(name).fn`` for this chapter's scale."""
    steps = {"steps": cfg.unlearn_steps, "lr": cfg.unlearn_lr, "batch_size": cfg.unlearn_batch, "seed": cfg.seed}
    if name in ("RandLabel", "SalUn"):
        return {**steps, "retain_mix": cfg.retain_mix}
    if name == "Sparsity":
        return steps
    if name == "Unroll":
        # Thudi et al.'s single-gradient unlearning at the initial weights w_0 (rebuilt exactly,
        # reference_state): every forget sample was used once per epoch at step lr_mean / B.
        n_train = len(holdout_split(cfg, 10 * cfg.n_per_class, 0)[1])
        return {"reference_state": reference_state(cfg, data),
                "lr": float(epoch_mean_lrs(cfg, n_train).mean()),
                "epochs": cfg.epochs, "batch_size": cfg.batch_size, "scale": cfg.unroll_scale}
    raise ValueError(f"parameter 'methods': no chapter-2 settings for {name!r}")


def unlearn_all(cfg, data: Data) -> dict[str, nn.Module]:
    """Original model (trained on everything) and one unlearned model per method in ``cfg.methods``.

    Retrain is the controlled model trained without the forget set (exact
    unlearning, same recipe), so it is shared with Table 1. The methods run in fp32, as their
    references do (chapter 1 found bf16 autocast wrecking two of its methods on the fast CNN).
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
        hp = method_config(cfg, data, name)
        seed_everything(cfg.seed)
        models[name] = registry.get(name).fn(original, splits, hp).eval()
    return models
