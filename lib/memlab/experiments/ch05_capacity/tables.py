"""Chapter 5's tables and recorded metric groups: what the notebook shows and ``run.record``\\ s.

Each ``*_metrics`` function returns the dict of one ``run.record(**...)`` call, with the
metric keys of :data:`.claims.METRIC_KEYS`; the other functions return the DataFrames the
notebook displays (the paper's tables beside ours) or the numbers they rest on. Nothing here
trains: the runs come from :mod:`.stages`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from memlab.models import gpt2_small as g2
from memlab.report import paper
from memlab.science import capacity as cap

from .spec import CHAPTER, GPT2_VOCAB
from .stages import a1_runs, law_constants

# ----------------------------------------------------------------------------- uniform tokens


def sweep_metrics(sweep: pd.DataFrame) -> dict:
    """Figure 1's runs as records (the checkpoint histories left out)."""
    return {"sweep": sweep.drop(columns=["history"]).to_dict(orient="records")}


def capacities(sweep: pd.DataFrame) -> pd.DataFrame:
    """Per model: parameters, capacity (max memorisation over N), bits per parameter, convergence.

    ``capacity_converged`` says whether the run that sets the capacity (its N
    is ``capacity_n``) passed the doubling-window test.
    """
    rows = {}
    for (model, prec), grp in sweep.groupby(["model", "precision"], sort=False):
        best = grp.loc[grp["mem_bits"].idxmax()]
        rows[model] = {
            "precision": prec,
            "params": int(best["params"]),
            "capacity_bits": float(best["mem_bits"]),
            "capacity_n": int(best["n_samples"]),
            "capacity_converged": bool(best["converged"]),
            "capacity_noise_rel": float(best["mem_noise_rel"]),
            "converged_runs": int(grp["converged"].sum()),
            "runs": len(grp),
        }
    out = pd.DataFrame.from_dict(rows, orient="index")
    out["bits_per_param"] = out["capacity_bits"] / out["params"]
    out.index.name = "model"
    return out


def convergence_table(sweep: pd.DataFrame) -> pd.DataFrame:
    """Per run: memorisation at the last two checkpoints and at half the schedule, and the verdict."""
    cols = ["model", "precision", "n_samples", "data_bits", "mem_half", "mem_prev_ckpt", "mem_last_ckpt",
            "gain_last", "gain_half", "converged"]
    return sweep[cols].copy().rename(
        columns={
            "n_samples": "N",
            "data_bits": "H(X) bits",
            "mem_half": "mem @ T/2",
            "mem_prev_ckpt": "mem @ 2nd-last ckpt",
            "mem_last_ckpt": "mem @ T",
            "gain_last": "gain last ckpt",
            "gain_half": "gain 2nd half",
        }
    )


def convergence_model(cfg) -> str:
    """The model of Figure 5: ``convergence_model``, or the largest of ``model_sizes``."""
    return cfg.convergence_model or max(
        cfg.model_sizes,
        key=lambda s: g2.count_params(
            g2.parse_size(s).n_layer, g2.parse_size(s).n_embd, cfg.vocab_size + 1, cfg.seq_len
        ),
    )


def convergence_metrics(cfg, sweep: pd.DataFrame) -> dict:
    """Figure 5's model and how many runs of the sweep converged."""
    return {
        "convergence_model": convergence_model(cfg),
        "converged_runs": int(sweep["converged"].sum()),
        "runs": len(sweep),
    }


def alpha_fit(caps: pd.DataFrame) -> dict[str, float]:
    """alpha (bits/parameter) and R^2 of capacity ~ alpha * params."""
    return cap.fit_alpha(caps["params"].to_numpy(), caps["capacity_bits"].to_numpy())


def fit_noise(caps: pd.DataFrame, n_draws: int = 2000, seed: int = 0) -> dict[str, float]:
    """Half-widths of 95% bands on alpha and R^2 from each capacity's own bootstrap noise."""
    return cap.fit_alpha_noise(
        caps["params"].to_numpy(float),
        caps["capacity_bits"].to_numpy(float),
        caps["capacity_noise_rel"].to_numpy(float),
        n_draws=n_draws,
        seed=seed,
    )


def capacity_metrics(caps: pd.DataFrame, fit: dict, band: dict, precision: str) -> dict:
    """Figure 6: each model's capacity, and alpha and R^2 of the fit with their bands."""
    return {
        "capacity": {
            m: {
                "params": int(r.params),
                "capacity_bits": r.capacity_bits,
                "bpp": r.bits_per_param,
                "n": int(r.capacity_n),
                "converged": bool(r.capacity_converged),
                "noise_rel": r.capacity_noise_rel,
            }
            for m, r in caps.iterrows()
        },
        "alpha": fit["alpha"],
        "alpha_r2": fit["r2"],
        "alpha_band": band["alpha_band"],
        "alpha_r2_band": band["r2_band"],
        "alpha_precision": precision,
    }


PAPERLIKE_COLUMNS = ["model", "V", "S", "n_samples", "params", "data_bits", "mem_bits", "bits_per_param",
                     "mem_half", "mem_last_ckpt", "gain_half", "converged", "steps", "stack_wall_s"]


def paperlike_metrics(pl: dict | None) -> dict:
    """The paper-like run without its history; nothing when the profile has none."""
    return {} if pl is None else {"paperlike": {k: v for k, v in pl.items() if k != "history"}}


def precision_capacities(prec_sweep: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Per precision, the :func:`capacities` of the comparison's runs."""
    return {p: capacities(g) for p, g in prec_sweep.groupby("precision")}


def precision_alphas(prec_caps: dict[str, pd.DataFrame]) -> dict[str, float]:
    """Per precision, alpha (bits/parameter) fitted on the comparison's runs only."""
    return {p: alpha_fit(c)["alpha"] for p, c in prec_caps.items()}


def precision_table(prec_caps: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The comparison's capacities side by side, one column group per precision."""
    cols = ["params", "capacity_n", "capacity_bits", "bits_per_param", "capacity_converged"]
    return pd.concat({p: c[cols] for p, c in prec_caps.items()}, axis=1)


def precision_metrics(prec_caps: dict[str, pd.DataFrame]) -> dict:
    """alpha in fp32 and bf16, whether every capacity behind them converged, and their joint noise."""
    alphas = precision_alphas(prec_caps)
    return {
        "alpha_fp32": alphas["fp32"],
        "alpha_bf16": alphas["bf16"],
        "precision_converged": bool(all(c["capacity_converged"].all() for c in prec_caps.values())),
        "precision_noise_rel": float(np.hypot(*[np.nanmax(c["capacity_noise_rel"]) for c in prec_caps.values()])),
    }


def a1_sweep(cfg, alpha: float) -> pd.DataFrame:
    """Appendix A.1 (Tables 3 and 4): vary S (at V = vocab_size) and V (at S = a1_fixed_seq_len) at fixed N.

    Predicted memorisation is min(alpha * params, H(X)) with the model's own
    parameter count (embeddings change with V and S); runs from :func:`.stages.a1_runs`.
    """
    rows = []
    for varied, r in a1_runs(cfg):
        predicted = cap.expected_memorization(alpha * r["params"], r["data_bits"])
        rows.append(
            {
                "varied": varied,
                "S": r["S"],
                "V": r["V"],
                "params": r["params"],
                "data_bits": r["data_bits"],
                "predicted_bits": predicted,
                "measured_bits": r["mem_bits"],
                "error_pct": 100.0 * abs(r["mem_bits"] - predicted) / predicted,
                "noise_pct": 100.0 * r["mem_noise_rel"],
                "converged": r["converged"],
                "gain_half": r["gain_half"],
                "wall_s": r["stack_wall_s"],
            }
        )
    return pd.DataFrame(rows)


def a1_error_table(a1: pd.DataFrame) -> pd.DataFrame:
    """Mean prediction error (%) per varied quantity, ours beside the paper's."""
    return pd.DataFrame(
        {
            "mean error % (ours)": a1.groupby("varied")["error_pct"].mean(),
            "mean error % (paper)": {
                "S": paper.number(CHAPTER, "a1_error_seq_len_pct"),
                "V": paper.number(CHAPTER, "a1_error_vocab_pct"),
            },
        }
    )


def a1_metrics(a1: pd.DataFrame) -> dict:
    """Appendix A.1's runs, mean error per varied quantity, convergence and the largest noise (%)."""
    return {
        "a1": a1.to_dict(orient="records"),
        "a1_error_pct": a1.groupby("varied")["error_pct"].mean().to_dict(),
        "a1_converged": bool(a1["converged"].all()),
        "a1_noise_pct": float(a1["noise_pct"].max()),
    }


# ----------------------------------------------------------------------------- text


TEXT_COLUMNS = ["model", "params", "n_samples", "data_to_capacity", "steps", "epochs", "train_loss",
                "test_loss", "test_loss_se", "unintended_bits", "oracle_share", "unintended_per_sample",
                "membership_f1", "extract_train", "extract_test"]


def reference_summary(cfg, ref: dict) -> dict:
    """The oracle in one row: size, training set, steps and its losses (bits/token) on each split."""
    S = cfg.text_seq_len
    return {
        "model": cfg.reference_model,
        "params": ref["params"],
        "train sequences": ref["n_train"],
        "steps": ref["steps"],
        "own-data loss (bits/token)": float(ref["own"].mean() / S),
        "pool loss (bits/token)": float(ref["pool"].mean() / S),
        "test loss (bits/token)": float(ref["test"].mean() / S),
        "wall s": ref["wall_s"],
    }


def double_descent_onsets(text: pd.DataFrame) -> dict[str, float | None]:
    """Per text model: the data-to-capacity ratio where test loss first rises beyond noise (None if never).

    A rise counts only when it exceeds 1.96 standard errors of the difference of
    the two mean test losses (``test_loss_se``), so jitter is not an onset.
    """
    out = {}
    for model, grp in text.groupby("model", sort=False):
        grp = grp.sort_values("data_to_capacity")
        out[model] = cap.first_increase(grp["data_to_capacity"], grp["test_loss"], se=grp["test_loss_se"])
    return out


def text_metrics(text: pd.DataFrame, ref_summary: dict) -> dict:
    """Figures 2 and 3: the text runs (per-sample arrays left out), double descent's onsets, the oracle."""
    return {
        "text": text.drop(columns=["per_sample_unintended"]).to_dict(orient="records"),
        "double_descent_onset": double_descent_onsets(text),
        "reference": ref_summary,
    }


def tfidf_run(text: pd.DataFrame, model: str, min_positive: int = 20) -> pd.Series:
    """The run of ``model`` for Figure 16: its largest N with >= ``min_positive`` memorised samples.

    Falls back to its smallest N, so a model that memorised little still gets a plot.
    """
    runs = text[text["model"] == model].sort_values("n_samples")
    if runs.empty:
        raise ValueError(f"parameter 'model': no text run of {model!r}")
    enough = runs[[int((r > 0).sum()) >= min_positive for r in runs["per_sample_unintended"]]]
    return (enough if len(enough) else runs).iloc[-1 if len(enough) else 0]


def tfidf_metrics(tf: pd.DataFrame, row: pd.Series) -> dict:
    """Figure 16: Spearman rho and p of TF-IDF against memorisation over the samples that memorised."""
    from scipy.stats import spearmanr

    pos = tf[tf["unintended_bits"] > 0]
    rho, pval = spearmanr(pos["tfidf"], pos["unintended_bits"]) if len(pos) > 2 else (float("nan"), float("nan"))
    return {
        "tfidf_spearman": rho,
        "tfidf_pvalue": pval,
        "tfidf_positive_samples": len(pos),
        "tfidf_n_samples": int(row["n_samples"]),
    }


# ----------------------------------------------------------------------------- membership law


def paper_law_f1(n_params, n_samples, constants: dict | None = None):
    """The membership law's F1 (float or array) at |D| = ``n_samples``, |θ| = ``n_params``.

    ``constants``: c1, c2, c3 (default the paper's, :func:`.stages.law_constants`), evaluated in
    the paper's setting (64-token GPT-2 text).
    """
    c = law_constants() if constants is None else {k: constants[k] for k in ("c1", "c2", "c3")}
    return cap.membership_f1_law(n_params, n_samples, paper.number(CHAPTER, "text_seq_len"), GPT2_VOCAB, **c)


def paper_law_table() -> pd.DataFrame:
    """The law's constants as printed, one column."""
    return pd.DataFrame({"paper (Section 5.2.1)": law_constants()})


def table2_law() -> pd.DataFrame:
    """The paper's Table 2 beside the law's F1 at its |D| and the |D| the law gives for its F1."""
    t2 = paper.table(CHAPTER, "table2")
    law = [paper_law_f1(r.params, r.n_samples) for r in t2.itertuples()]
    d_law = [cap.law_dataset_size(r.params, r.predicted_f1, **law_constants()) for r in t2.itertuples()]
    return pd.DataFrame(
        {
            "params": t2["params"],
            "|D| (paper)": t2["n_samples"],
            "|D| (law, ours)": np.round(d_law).astype(int),
            "predicted F1 (paper)": t2["predicted_f1"],
            "law F1 at paper |D| (ours)": np.round(law, 4),
            "observed F1 (paper)": t2["observed_f1"] / 100.0,
        }
    )


def table2_metrics(t2: pd.DataFrame) -> dict:
    """Table 2's sanity check: the law's F1 at the paper's |D| and its largest distance to the printed F1."""
    return {
        "table2_max_abs_error": float((t2["law F1 at paper |D| (ours)"] - t2["predicted F1 (paper)"]).abs().max()),
        "table2_law_f1": t2["law F1 at paper |D| (ours)"].tolist(),
    }


def law_fit(points: pd.DataFrame) -> dict:
    """The law's constants fitted to our (N / params, F1) points; ``{"error": ...}`` if it cannot."""
    x = (points["n_samples"] / points["params"]).to_numpy()
    y = points["membership_f1"].to_numpy()
    try:
        return cap.fit_membership_law(x, y, c1_start=law_constants()["c1"])
    except (RuntimeError, ValueError) as e:  # too few or degenerate points at toy sizes
        return {"error": str(e).splitlines()[0]}


def law_metrics(text: pd.DataFrame) -> dict:
    """Figure 7: the law fitted on the text runs, and the RMSE of the paper's own law on them."""
    law_on_text = paper_law_f1(text["params"].to_numpy(), text["n_samples"].to_numpy())
    return {
        "law_fit": {"text": law_fit(text)},
        "paper_law_rmse": {"text": float(np.sqrt(np.mean((law_on_text - text["membership_f1"].to_numpy()) ** 2)))},
    }


# ----------------------------------------------------------------------------- regime gates


def _capacity_gain_pct(runs: pd.DataFrame) -> float:
    """Largest second-half gain (% of the final memorisation) among the runs that set a capacity:
    per (model, precision) the run of largest memorisation, as :func:`capacities` picks it."""
    best = runs.loc[runs.groupby(["model", "precision"], sort=False)["mem_bits"].idxmax()]
    return float(100.0 * best["gain_half"].max())


def below_capacity_memorised_pct(text: pd.DataFrame) -> float:
    """Smallest share (%) of the oracle's bits memorised by a text run below capacity ratio 1.

    text: the text runs, ``data_to_capacity`` (oracle bits of the set / (measured alpha * params))
    and ``oracle_share`` (unintended bits / oracle bits). NaN when no run lies below ratio 1.
    """
    below = text[text["data_to_capacity"] < 1.0]
    return float(100.0 * below["oracle_share"].min()) if len(below) else float("nan")


def regime_metrics(sweep: pd.DataFrame, precision: str, prec_sweep: pd.DataFrame, a1: pd.DataFrame,
                   text: pd.DataFrame, ref_summary: dict) -> dict:
    """The ``regime`` group: the quantities the regime gates of ``data/papers/05_capacity.yaml`` read.

    sweep: Figure 1's runs (``gain_half`` per run); precision: alpha's precision; prec_sweep: the
    fp32-vs-bf16 comparison's runs; a1: :func:`a1_sweep`; text: the text runs (``test_loss`` in
    bits/token); ref_summary: :func:`reference_summary`. Returns {"regime": {...}} with
    ``capacity_gain_half_pct``, ``sweep_gain_half_pct``, ``precision_gain_half_pct``,
    ``a1_gain_half_pct`` (largest share of its final memorisation, in %, that a run gained over
    the second half of its schedule: of the runs setting the capacities behind alpha, of every
    run at alpha's precision, of the runs setting the precision comparison's capacities, of the
    A.1 runs), ``oracle_margin_bits`` (the smallest test loss of a text model minus the
    oracle's, bits/token: positive when the oracle codes held-out text better than every model)
    and ``below_capacity_memorised_pct`` (:func:`below_capacity_memorised_pct`, %).
    """
    at = sweep[sweep["precision"] == precision]
    return {"regime": {
        "capacity_gain_half_pct": _capacity_gain_pct(at),
        "sweep_gain_half_pct": float(100.0 * at["gain_half"].max()),
        "precision_gain_half_pct": _capacity_gain_pct(prec_sweep),
        "a1_gain_half_pct": float(100.0 * a1["gain_half"].max()),
        "oracle_margin_bits": float(text["test_loss"].min() - ref_summary["test loss (bits/token)"]),
        "below_capacity_memorised_pct": below_capacity_memorised_pct(text),
    }}


# ----------------------------------------------------------------------------- cost


def training_cost(sweeps: list[pd.DataFrame], singles: list[float]) -> float:
    """Seconds the cached training took when it was computed: each stack once, plus single runs."""
    total = sum(
        float(df.drop_duplicates(["model", "precision", "stack_wall_s"])["stack_wall_s"].sum())
        for df in sweeps
        if len(df) and "stack_wall_s" in df
    )
    return total + float(sum(singles))


def cost_metrics(cold_s: float, this_run_s: float) -> dict:
    """The cached training's seconds when computed, and this run's wall seconds so far."""
    return {"cost": {"training_s_when_computed": cold_s, "this_run_s": this_run_s}}


def benchmark_throughput(sweep: pd.DataFrame) -> dict[str, float]:
    """Achieved training FLOP/s of the sweep: 6 * params * tokens / wall time, summed."""
    flops = sum(g2.train_flops(r.params, r.tokens_seen) for r in sweep.itertuples())
    wall = float(sweep["wall_s"].sum())
    return {
        "train_flops": flops,
        "train_wall_s": wall,
        "achieved_flops_per_s": flops / wall if wall > 0 else float("nan"),
    }
