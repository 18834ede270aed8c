"""Chapter 2's tables and recorded metric groups: one function per paper table (1, 2, 3), per
ablation table (subset size, bandwidth, depth, early model) and per group of metrics the notebook
records, each returning what the page shows (DataFrames, Markdown text) or records
(``run.record(**...)``: plain dicts, floats, ints).

The computations they read are :mod:`.stages`; paper numbers come from ``data/papers/02_sde.yaml``.
"""
from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
from torch import nn

from memlab.models.recipe import Recipe
from memlab.report import paper
from memlab.science import bn, probes, sde
from memlab.science.probes import accuracy_pct
from memlab.core.progress import progress

from .spec import (ACC_KEPT_PP, CHAPTER, DETECTORS, NOT_RUN_DATASETS, SPEC, VARIANT, column, main_fraction,
                   main_size)
from .stages import (_MODELS, Data, Pools, all_outputs, chapter1_config, classify, controlled_experiment,
                     draw_subsets, early_epoch, holdout_split, judge_targets, train_model)

# ----------------------------------------------------------------------------- setup, data, regime, cost

ARCH_WORDS = {"fastcnn": "the fast BatchNorm CNN of airbench's shape (conv groups of {w}, {w4} and {w4} "
                         "channels) by its few-epoch recipe (`memlab.models.recipe`, random {t}-pixel shifts "
                         "and flips)",
              "resnet18": "a CIFAR ResNet-18 of stem width {w} by SGD with cosine decay ({aug})"}


def setup_text(cfg) -> str:
    """One paragraph: which net this profile trains, on how many images, for how long, and whether its
    Original is chapter 1's (trained once and shared, :func:`.stages.chapter1_config`)."""
    aug = "random crops and flips" if cfg.augment else "no augmentation"
    arch = ARCH_WORDS[cfg.arch].format(w=cfg.width, w4=4 * cfg.width, t=Recipe.translate, aug=aug)
    text = (f"The `{cfg.profile}` profile trains {arch}, on {cfg.n_per_class} training images per class of "
            f"CIFAR-10 ({10 * cfg.n_per_class} in all; {10 * cfg.n_test_per_class} test images) for "
            f"{cfg.epochs} epochs (batch {cfg.batch_size}, peak learning rate {cfg.lr:g}): the Original on "
            f"every training image, and one model without each held-out fraction "
            f"({', '.join(column(r) for r in cfg.holdout_fractions)}).")
    if chapter1_config(cfg) is not None:
        return text + (" The Original is the same training of the same net on the same images as chapter 1's "
                       "Original: **trained once, shared with chapter 1** through the model cache.")
    return text + " The Original is trained here: its settings differ from chapter 1's Original's."


def sizes_table(cfg, data: Data) -> pd.DataFrame:
    """Held-out samples and subset size |S| (ours, and the paper's: the paper profile's) per R."""
    paper_sizes = dict(zip(SPEC["holdout_fractions"].default_for("paper"),
                           SPEC["subset_sizes"].default_for("paper")))
    return pd.DataFrame({
        "held-out samples": {column(r): int(round(r * len(data.y_train))) for r in cfg.holdout_fractions},
        "|S| ours": {column(r): s for r, s in zip(cfg.holdout_fractions, cfg.subset_sizes)},
        "|S| paper": {column(r): s for r, s in paper_sizes.items()},
    }).rename_axis(f"{len(data.y_train)} training, {len(data.y_test)} test images")


def regime(cfg, data: Data) -> pd.DataFrame:
    """The training regime of the original and Retrain models beside the paper's (Table 3 proxies).

    Rows: train accuracy (%), test accuracy (%), train-test gap (points), forget-set accuracy (%),
    ASR (share of the forget set the confidence attack calls non-member), parameters (M). Columns:
    "paper", "ours: Original", "ours: Retrain". The paper prints no Original row: its proxies are
    Retrain's Acc_r (train), Retrain's Acc_f (data Retrain never saw, for test) and the ASR every row
    shares; its parameter count is its ResNet-18's.
    """
    forget, retain = holdout_split(cfg, len(data.y_train), cfg.forget_fraction)
    ytr, yte = data.y_train.numpy(), data.y_test.numpy()
    cols = {}
    for name, fraction in (("ours: Original", 0.0), ("ours: Retrain", cfg.forget_fraction)):
        model = train_model(cfg, data, fraction)[0]
        ltr, lte = all_outputs(model, data, "logits")
        seen = np.arange(len(ytr)) if fraction == 0 else retain
        ptr, pte = probes.softmax(ltr), probes.softmax(lte)
        train_acc, test_acc = accuracy_pct(ltr[seen], ytr[seen]), accuracy_pct(lte, yte)
        cols[name] = {"train accuracy (%)": train_acc, "test accuracy (%)": test_acc,
                      "gap (points)": train_acc - test_acc,
                      "forget-set accuracy (%)": accuracy_pct(ltr[forget], ytr[forget]),
                      "ASR": probes.confidence_attack_asr(ptr[retain], ytr[retain], pte, yte, ptr[forget],
                                                          ytr[forget], seed=cfg.seed),
                      "parameters (M)": sum(p.numel() for p in model.parameters()) / 1e6}
    p = {k: paper.number(CHAPTER, k) for k in ("regime_train", "regime_test", "regime_asr", "paper_params_m")}
    cols["paper"] = {"train accuracy (%)": p["regime_train"], "test accuracy (%)": p["regime_test"],
                     "gap (points)": p["regime_train"] - p["regime_test"],
                     "forget-set accuracy (%)": np.nan, "ASR": p["regime_asr"], "parameters (M)": p["paper_params_m"]}
    return pd.DataFrame(cols)[["paper", "ours: Original", "ours: Retrain"]]


def regime_text(reg: pd.DataFrame) -> str:
    """The paper's regime markers beside the Original's, from :func:`regime`'s table: size and gap."""
    ours, theirs = reg["ours: Original"], reg["paper"]
    return (f"Our Original has {ours['parameters (M)']:.2f} M parameters, the paper's ResNet-18 "
            f"{theirs['parameters (M)']:.2f} M; its train-test gap is {ours['gap (points)']:.1f} points, the "
            f"paper's {theirs['gap (points)']:.1f} (its Retrain's accuracy on the data it trained on minus "
            f"on the forget set it never saw).")


def training_costs(cfg) -> pd.DataFrame:
    """Recorded training cost of every model this process loaded or trained.

    Rows "R=..."; columns: "CPU s" and "wall s" as recorded when the model was trained (chapter 1's
    Original read from the cache: NaN, its training is chapter 1's cost), "this run s" (what obtaining
    it took now: the training itself when cold, a cache read when warm), "cached", "shared with
    chapter 1" (the Original trained once for both chapters).
    """
    rows = {}
    for k, (_, _, cost) in _MODELS.items():
        key = json.loads(k)[1]
        if all(key[n] == cfg[n] for n in key if n != "holdout"):
            rows[f"R={key['holdout'] * 100:g}%"] = {"CPU s": cost["cpu_s"], "wall s": cost["wall_s"],
                                                   "this run s": cost["this_run_s"], "cached": cost["cached"],
                                                   "shared with chapter 1": cost["shared"]}
    return pd.DataFrame(rows).T.rename_axis("model (held-out R)")

def cached_training_cpu_s(costs: pd.DataFrame) -> float:
    """CPU seconds of the training of every model this run read from the cache (what a cold run adds;
    chapter 1's Original, NaN, not counted)."""
    cached = costs["cached"].astype(bool)
    return float(costs.loc[cached, "CPU s"].astype(float).sum())


def cost_metrics(costs: pd.DataFrame, wall_s: float, cpu_s: float) -> dict:
    """The recorded ``cost`` group: this run's wall and CPU seconds, models cached, cold and training CPU s
    (without chapter 1's Original read from the cache), and whether the Original was shared with chapter 1."""
    cached = costs["cached"].astype(bool)
    return {
        "this_run_wall_s": wall_s,
        "this_run_cpu_s": cpu_s,
        "models_cached": int(cached.sum()),
        "cold_cpu_s": cpu_s + cached_training_cpu_s(costs),
        "training_cpu_s": float(costs["CPU s"].astype(float).sum()),
        "original_shared": bool(costs["shared with chapter 1"].astype(bool).any()),
    }


# ----------------------------------------------------------------------------- Tables 1 and 2

def table1(f1: pd.DataFrame) -> pd.DataFrame:
    """Table 1: our CIFAR-10 SDE F1 per R beside the paper's rows (data sets we did not run: NaN)."""
    ours = pd.concat([f1.loc[["SDE"]].rename(index={"SDE": "CIFAR-10"}),
                      pd.DataFrame(np.nan, index=list(NOT_RUN_DATASETS), columns=f1.columns)])
    return paper.side_by_side(ours, paper.table(CHAPTER, "table1"))


def table2(f1: pd.DataFrame, band: pd.DataFrame, main_col: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Table 2: (each detector's F1 at ``main_col`` beside the paper's, F1 and band at every setting)."""
    ours = f1[[main_col]].rename(columns={main_col: "F1"})
    every = pd.concat({"F1": f1, "\u00b1": band}, axis=1).rename_axis("every setting")
    return paper.side_by_side(ours, paper.table(CHAPTER, "table2")), every


# ----------------------------------------------------------------------------- ablations

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


# ----------------------------------------------------------------------------- Table 3: unlearning

def accuracy_table(cfg, data: Data, models: dict[str, nn.Module]) -> pd.DataFrame:
    """Acc_r, Acc_f, Acc_test (%), ASR and "Acc_r recal. (%)" (retain accuracy after BN recalibration
    on the retain set, memlab.science.bn: a collapse that recalibration undoes is a BatchNorm artifact)."""
    forget, retain = holdout_split(cfg, len(data.y_train), cfg.forget_fraction)
    ytr, yte = data.y_train.numpy(), data.y_test.numpy()
    rows = {}
    for name, model in progress(models.items(), desc="accuracies"):
        ltr, lte = all_outputs(model, data, "logits")
        ptr, pte = probes.softmax(ltr), probes.softmax(lte)
        recal = bn.recalibrate(model, data.x_train[retain], batch_size=cfg.batch_size)
        lr_recal = probes.layer_outputs(recal, data.x_train[retain])["logits"]
        rows[name] = {
            "Acc_r (%)": accuracy_pct(ltr[retain], ytr[retain]),
            "Acc_f (%)": accuracy_pct(ltr[forget], ytr[forget]),
            "Acc_test (%)": accuracy_pct(lte, yte),
            "ASR": probes.confidence_attack_asr(ptr[retain], ytr[retain], pte, yte, ptr[forget], ytr[forget],
                                                seed=cfg.seed),
            "Acc_r recal. (%)": accuracy_pct(lr_recal, ytr[retain]),
        }
    return pd.DataFrame(rows).T


def evaluate_unlearning(cfg, data: Data, models: dict[str, nn.Module], feature: str | None = None,
                        accuracies: pd.DataFrame | None = None) -> dict:
    """Table 3: the accuracy table plus OTR (%) of every model, and its dependence distributions.

    OTR: share of ``n_targets`` forget-set subsets (size of the main setting)
    that SDE judges out-of-training, against an in-training reference from the
    retain set and an out-of-training reference from the test set, reading ``feature``.
    """
    feature = feature or cfg.feature
    accuracies = accuracy_table(cfg, data, models) if accuracies is None else accuracies
    forget, retain = holdout_split(cfg, len(data.y_train), cfg.forget_fraction)
    rng = np.random.default_rng(cfg.seed + 7)
    subsets = draw_subsets(Pools(retain, forget), len(data.y_test), main_size(cfg), cfg.n_targets, rng)
    subsets["in_targets"] = subsets["in_targets"][:0]  # only forget-set targets count for OTR
    otr, dists = {}, {}
    for name, model in models.items():
        tr, te = all_outputs(model, data, feature)
        raw = judge_targets(tr, te, subsets, cfg, ("SDE",), seed=cfg.seed)
        otr[name] = 100 * float(np.mean(raw["SDE"]))
        dists[name] = {"in": raw["h_in"], "out": raw["h_out"], "target": raw["h_targets"][0]}
    table = accuracies.copy()
    table["OTR (%)"] = pd.Series(otr)
    return {"table": table, "dists": dists}


def acc_kept(table: pd.DataFrame, name: str) -> bool:
    """Whether method ``name`` keeps Acc_r within ACC_KEPT_PP points of the Original's."""
    return bool(table.loc[name, "Acc_r (%)"] >= table.loc["Original", "Acc_r (%)"] - ACC_KEPT_PP)

def accuracy_rule_table(accuracies: pd.DataFrame) -> pd.DataFrame:
    """The accuracy table with a "keeps Acc_r (rule)" column ("yes" / "no", see :func:`acc_kept`)."""
    kept = {n: acc_kept(accuracies, n) for n in accuracies.index}
    return accuracies.assign(**{"keeps Acc_r (rule)": pd.Series(kept).map({True: "yes", False: "no"})})


def table3(table: pd.DataFrame) -> pd.DataFrame:
    """Table 3: Acc_r, Acc_f, ASR and OTR of every model beside the paper's."""
    return paper.side_by_side(table, paper.table(CHAPTER, "table3"), ["Acc_r (%)", "Acc_f (%)", "ASR", "OTR (%)"])


# ----------------------------------------------------------------------------- every feature-dependent metric

def feature_metrics(cfg, data: Data, models: dict[str, nn.Module], accuracies: pd.DataFrame,
                    feature: str) -> dict:
    """The claim metrics that depend on which outputs SDE reads, computed for ``feature``.

    models: unlearn_all's result. Returns the keys f1, f1_band, beats_band, size_sweep, size_band,
    bandwidth, bandwidth_band, saturated, early_f1, early_band, table3, variant_f1, variant_band
    (plain floats and dicts, as run.record stores them) and, under "_frames", the DataFrames
    and distributions the notebook displays.
    """
    controlled = controlled_experiment(cfg, data, feature, (*DETECTORS, VARIANT))
    f1s, bands = controlled["f1"], controlled["band"]
    r_max = max(cfg.holdout_fractions)
    r_main = main_fraction(cfg)
    size_main = dict(zip(cfg.holdout_fractions, cfg.subset_sizes))[r_main]
    sweep, sweep_band = size_sweep(cfg, data, controlled["models"][r_max][0], r_max, feature)
    bandwidth = bandwidth_ablation(cfg, data, controlled["models"][r_main][0], r_main, size_main, feature)
    early, early_band = early_check(cfg, data, controlled["models"][r_main][1], r_main, size_main, feature)
    unl = evaluate_unlearning(cfg, data, models, feature, accuracies)
    main = f1s.loc[list(DETECTORS)]
    return {
        "f1": main.to_dict(orient="index"), "f1_band": bands.loc[list(DETECTORS)].to_dict(orient="index"),
        "beats_band": controlled["beats_band"],
        "variant_f1": f1s.loc[VARIANT].to_dict(), "variant_band": bands.loc[VARIANT].to_dict(),
        "size_sweep": {d: {int(k): v for k, v in sweep[d].items()} for d in sweep.columns},
        "size_band": {d: {int(k): v for k, v in sweep_band[d].items()} for d in sweep_band.columns},
        "bandwidth": {str(k): v for k, v in bandwidth["SDE F1"].items()},
        "bandwidth_band": {str(k): v for k, v in bandwidth["band"].items()},
        "saturated": {str(k): int(v) for k, v in bandwidth["saturated subsets"].items()},
        "early_f1": early, "early_band": early_band,
        "table3": unl["table"].to_dict(orient="index"),
        "_frames": {"controlled": controlled, "f1": main, "band": bands.loc[list(DETECTORS)], "sweep": sweep,
                    "bandwidth": bandwidth, "table3": unl["table"], "dists": unl["dists"]},
    }


def main_metrics(cfg, data: Data, m: dict) -> dict:
    """What the notebook records for the default outputs: ``m`` (feature_metrics without "_frames"),
    "main_column" (the column of R = forget_fraction) and "counts" (targets per kind, forget-set size)."""
    n_forget = int(round(cfg.forget_fraction * len(data.y_train)))
    return {**m, "main_column": column(cfg.forget_fraction),
            "counts": {"targets": cfg.n_targets, "forget": n_forget}}


def depth_metrics(cfg, depth: pd.DataFrame) -> dict:
    """The recorded depth group: SDE F1 and band per depth (depth_ablation's table), early epochs."""
    return {"depth": depth["SDE F1"].to_dict(), "depth_band": depth["band"].to_dict(),
            "early_epochs": early_epoch(cfg)}


# The sanity check's input for an output choice the spread analysis did not read: it holds.
_IDENTITY_HOLDS = {"n_subsets": 0, "max_rel_err": 0.0, "share_within_3se": 1.0, "pearson_spread": 0.0}


def claim_inputs(recorded: dict, m: dict) -> dict:
    """The metrics the claims read for one output choice: the choice-independent recorded keys
    (main_column, counts, depth, depth_band), ``m`` (feature_metrics of that choice), a holding identity."""
    common = {k: recorded[k] for k in ("main_column", "counts", "depth", "depth_band")}
    return {**common, **m, "identity": dict(_IDENTITY_HOLDS)}


def sensitivity_row(cfg, m: dict, verdicts: list[dict]) -> dict:
    """One row of the output-choice table: SDE F1 per R, the main-setting comparison, the claims."""
    col = column(main_fraction(cfg))
    row = {f"SDE F1 {k}": v for k, v in m["f1"]["SDE"].items()}
    row[f"MMD F1 {col}"] = m["f1"]["MMD"][col]
    row[f"{VARIANT} F1 {col}"] = m["variant_f1"][col]
    judged = [v for v in verdicts if v.get("kind") != paper.SANITY]
    for verdict in (paper.REPRODUCED, paper.NOT_REPRODUCED, paper.OUTSIDE_REGIME, paper.NOT_JUDGED):
        row[verdict] = sum(v["verdict"] == verdict for v in judged)
    row["claims reproduced"] = f"{row[paper.REPRODUCED]} of {len(judged)}"
    return row


def sensitivity_table(rows: dict[str, dict]) -> pd.DataFrame:
    """The output-choice table: one :func:`sensitivity_row` per choice of outputs."""
    return pd.DataFrame(rows).T.rename_axis("outputs SDE reads")


# ----------------------------------------------------------------------------- what the statistic measures

def identity_summary(spread: pd.DataFrame) -> dict:
    """Agreement of measured and predicted shuffle means, and the spread correlation, over subsets.

    Returns {"n_subsets", "max_rel_err", "share_within_3se", "pearson_spread", "saturated"}.
    """
    z = (spread["measured"] - spread["predicted"]).abs() / spread["sem"].replace(0, np.nan)
    rel = ((spread["measured"] - spread["predicted"]).abs() / spread["predicted"].abs()).max()
    return {"n_subsets": int(len(spread)), "max_rel_err": float(rel),
            "share_within_3se": float((z.fillna(0) <= 3).mean()),
            "pearson_spread": float(np.corrcoef(spread["spread"], spread["measured"])[0, 1]),
            "saturated": int(spread["saturated"].sum())}


def variant_table(cfg, m: dict) -> pd.DataFrame:
    """F1 of the paper's statistic and of the standardised variant (with bands) per R, and the paper's SDE.

    ``m``: the recorded main metrics (f1, f1_band, variant_f1, variant_band).
    """
    return pd.DataFrame({
        "SDE (paper's statistic)": m["f1"]["SDE"],
        "\u00b1": m["f1_band"]["SDE"],
        f"{VARIANT} (standardised)": m["variant_f1"],
        "\u00b1 ": m["variant_band"],
        "paper SDE": paper.table(CHAPTER, "table1").loc["CIFAR-10"],
    }).T.rename_axis(f"F1, outputs: {cfg.feature}")


def closing_regime(sensitivity: pd.DataFrame, identity: dict, m: dict) -> str:
    """The closing paragraphs after what held: which outputs reproduce which claims, and what the
    statistic measures (spread correlation, the variant's F1 against the paper statistic's)."""
    rep = {f: r["claims reproduced"] for f, r in sensitivity.iterrows()}
    return (
        "**Which outputs:** the paper's claims reproduced by each choice of outputs: "
        + "; ".join(f"{f}, {r}" for f, r in rep.items())
        + ". A reader who picks the outputs picks much of the result; the default"
        " follows the paper's text, not this table.\n\n"
        f"**What the statistic measures:** the mean of each dependence distribution is"
        f" the product of the halves' kernel spreads (correlation with spread"
        f" r = {identity['pearson_spread']:.3f}); the standardised variant, which"
        f" removes location and scale, gives F1 "
        + ", ".join(f"{k} {v:.2f}" for k, v in m["variant_f1"].items())
        + " against the paper's statistic's "
        + ", ".join(f"{k} {v:.2f}" for k, v in m["f1"]["SDE"].items())
        + ". Whatever SDE separates here, its mean is set by how tightly a subset's"
        " outputs cluster, the signal a confidence-based membership attack also reads."
    )
