"""Chapter 4 (Q-Skew) tables: one function per paper table (Tables 1-6, Figure 2's and the regime's
numbers) and one per recorded metric group, returning what the notebook records
(``run.record(**...)``) and shows. Every value is in % unless a column says otherwise.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from memlab.report import paper
from memlab.science import metrics, mia

from .claims import GAIN_CELLS, best_of
from .spec import CHAPTER, FPRS, METRICS
from .stages import DomainRuns, InstructionRuns, Setup, model_paths


# ----------------------------------------------------------------------------- cells and means

def supported(metric: str, n_nonmembers: int, min_fp: int) -> bool:
    """Whether ``n_nonmembers`` support a TPR column (``FPRS``): >= ``min_fp`` false positives allowed.

    AUC is always supported (:func:`memlab.science.metrics.tpr_supported`).
    """
    return metric not in FPRS or metrics.tpr_supported(FPRS[metric], n_nonmembers, min_fp)


def na_cells(table: pd.DataFrame, n_nonmembers: int, min_fp: int) -> pd.DataFrame:
    """``table`` (ours, or side-by-side) with unsupported TPR cells of ours written "n/a (n non-members)"."""
    out = table.copy().astype(object)
    for col in out.columns:
        metric, src = (col if isinstance(col, tuple) else (col, "ours"))
        if src == "ours" and not supported(metric, n_nonmembers, min_fp):
            out[col] = f"n/a ({n_nonmembers} non-members)"
    return out


def mean_table(per_run: list[dict], rows=None) -> pd.DataFrame:
    """Mean over runs of {method: {metric: value}} as a DataFrame (rows = method labels, %)."""
    rows = rows or list(per_run[0])
    data = {mia.LABELS.get(r, r): {m: float(np.mean([run[r][m] for run in per_run])) for m in METRICS} for r in rows}
    return pd.DataFrame.from_dict(data, orient="index")[list(METRICS)]


def regime_table(setup: Setup) -> pd.DataFrame:
    """The regime table: the base's masked NLL beside a unigram model's, per corpus, with the paper's models.

    The paper's models (LLaDA-8B, Dream-7B) report no masked NLL; their rows carry
    only what the paper says of them.
    """
    cfg = setup.cfg
    names = {"same": "same domain: WikiText-2 valid", "gap": "domain gap: stdlib docstrings"}
    if cfg.backbone == "tiny":
        who = f"ours ({cfg.backbone}, {setup.info.get('params', 0) / 1e6:.2f}M params)"
    else:
        who = f"ours ({model_paths(cfg)[0]})"
    rows = {}
    for name, r in setup.regime.items():
        rows[f"{who}, {names[name]}"] = {
            "pre-training": f"WikiText-2 test, {cfg.pretrain_steps} x 32 blocks" if cfg.backbone == "tiny"
            else "the checkpoint's", "block length": cfg.block_len,
            f"masked NLL at rho={cfg.rho:g}": round(r["base masked NLL"], 3),
            "unigram NLL": round(r["unigram NLL"], 3), "gain over unigram": round(r["context gain"], 3)}
    for name, what in (("LLaDA-8B-Base (paper)", "web-scale pre-training"),
                       ("Dream-v0-Base-7B (paper)", "adapted from an autoregressive LM")):
        rows[name] = {"pre-training": what, "block length": "–",
                      f"masked NLL at rho={cfg.rho:g}": "not reported", "unigram NLL": "–",
                      "gain over unigram": "–"}
    return pd.DataFrame.from_dict(rows, orient="index")


# ----------------------------------------------------------------------------- how hard the task is
# The regime's second marker: the best baseline's AUC says how hard a membership task is. The paper's
# best baselines reach about 70 under domain and at most 69 under instruction fine-tuning (Tables 1-3);
# the best/margin claims are gated on ours being no stronger than that by more than the paper's own
# margin (data/papers/04_qskew.yaml, regimes ``*_task_as_hard``).

#: The paper's settings of :data:`claims.GAIN_CELLS`, in its order: (source, model and data, fine-tuning).
PAPER_SETTINGS = (("Table 1", "LLaDA-8B-Base, ArXiv", "domain"), ("Table 1", "LLaDA-8B-Base, WikiText", "domain"),
                  ("Table 1", "LLaDA-8B-Base, XSUM", "domain"), ("Table 2", "LLaDA-8B-Instruct, MedQA", "instruction"),
                  ("Table 2", "LLaDA-8B-Instruct, Alpaca", "instruction"),
                  ("Table 2", "LLaDA-8B-Instruct, Tulu-3", "instruction"),
                  ("Table 3", "Dream-Base-7B, XSUM", "domain"), ("Table 3", "Dream-Instruct-7B, Tulu-3", "instruction"))

# our setting -> (its name in the table, the kind of fine-tuning it stands for)
OUR_SETTINGS = {"gap": ("domain gap: stdlib docstrings", "domain"),
                "same": ("same domain: WikiText-2 valid (control)", "domain"),
                "instruction": ("instruction pairs: WikiText-2 valid", "instruction")}


def paper_baseline_levels() -> pd.DataFrame:
    """The paper's best baseline per setting (:data:`claims.GAIN_CELLS`): rows ``"<model, data> (paper
    <Table n>)"``, columns fine-tuning ("domain" | "instruction"), best baseline, its AUC and Q-Skew's (%)."""
    rows = {}
    for (key, q, b), (source, what, kind) in zip(GAIN_CELLS, PAPER_SETTINGS):
        t = paper.table(CHAPTER, key)
        rows[f"{what} (paper {source})"] = {"fine-tuning": kind, "best baseline": b.split(" (")[0],
                                            "best baseline AUC": float(t.loc[b, "AUC"]),
                                            "Q-Skew AUC": float(t.loc[q, "AUC"])}
    return pd.DataFrame.from_dict(rows, orient="index")


def baseline_level_metrics(ours_dft: dict[str, pd.DataFrame], ours_ift: pd.DataFrame) -> dict:
    """``baseline_level``: the best baseline (:func:`claims.best_of`) per setting of ours, {"gap" | "same" |
    "instruction": {"best baseline": label, "AUC": %}}; a setting with no baseline run is left out."""
    tables = {**ours_dft, "instruction": ours_ift}
    out = {}
    for setting, t in tables.items():
        best = best_of(t.to_dict(orient="index"))
        if best is not None:
            out[setting] = {"best baseline": best[0], "AUC": best[1]}
    return {"baseline_level": out}


def level_bound(setting: str) -> float | None:
    """The gate's upper bound (AUC %) on our best baseline in ``setting``, read from the yaml's regimes
    (``baseline_level/<setting>/AUC``); None where no gate reads it (the same-domain control)."""
    bounds = {float(q["at_most"]) for r in paper.regimes(CHAPTER).values() for q in r["requires"]
              if q["metric"] == f"baseline_level/{setting}/AUC"}
    if len(bounds) > 1:
        raise ValueError(f"regimes of {CHAPTER}: baseline_level/{setting}/AUC has bounds {sorted(bounds)}; one rule")
    return bounds.pop() if bounds else None


def baseline_level_table(m: dict) -> pd.DataFrame:
    """The regime table's second part: how hard the membership task is, ours beside the paper's.

    m: run.metrics with ``baseline_level`` and the score tables (``domain``, ``instruction``). Rows: our
    settings, then the paper's (:func:`paper_baseline_levels`); columns fine-tuning, best baseline, its AUC,
    Q-Skew's AUC (%) and the gate's bound on the best baseline's AUC (``at most``, %; "–" where none).
    """
    rows = {}
    for setting, level in m.get("baseline_level", {}).items():
        name, kind = OUR_SETTINGS[setting]
        t = m["domain"][setting] if setting in m.get("domain", {}) else m["instruction"]
        bound = level_bound(setting)
        rows[f"ours, {name}"] = {"fine-tuning": kind, "best baseline": level["best baseline"],
                                 "best baseline AUC": level["AUC"],
                                 "Q-Skew AUC": t["Q-Skew"]["AUC"] if "Q-Skew" in t else float("nan"),
                                 "gate: best baseline AUC at most": "–" if bound is None else bound}
    ours = pd.DataFrame.from_dict(rows, orient="index")
    theirs = paper_baseline_levels().assign(**{"gate: best baseline AUC at most": "–"})
    return pd.concat([ours, theirs]) if rows else theirs


# ----------------------------------------------------------------------------- paper tables

def table1(dom: DomainRuns) -> pd.DataFrame:
    """Table 1 (domain fine-tuning): every score's AUC and TPRs (%), mean over runs."""
    return mean_table(dom.main)


def table2(ift: InstructionRuns) -> pd.DataFrame:
    """Table 2 (instruction fine-tuning): every score's AUC and TPRs (%), mean over runs."""
    return mean_table(ift.main)


def figure2_table(dom: DomainRuns) -> pd.DataFrame:
    """Figure 2: AUC (%) by fine-tuning epochs (columns) and score label (rows), mean over runs."""
    epochs = sorted(dom.sweep)
    names = list(dom.sweep[epochs[0]][0])
    return pd.DataFrame({e: {mia.LABELS[n]: float(np.mean([run[n]["AUC"] for run in dom.sweep[e]]))
                             for n in names} for e in epochs})


# side -> (heading, key of the paper's table in data/papers/04_qskew.yaml)
TABLE4_SIDES = {"base": ("base (domain)", "table4_base"),
                "instruct": ("instruct (instruction)", "table4_instruct")}


def table4(dom: DomainRuns, ift: InstructionRuns, scores) -> dict[str, pd.DataFrame]:
    """Table 4 (mismatched references), one frame per side ("base", "instruct"); empty without Q-Skew.

    Rows: Q-Skew with the golden, the other-variant and the para-modification
    reference, and SAMA with its reference when ``"sama"`` is among ``scores``.
    """
    if not dom.ref_instruct:
        return {}
    out = {}
    for side, golden, other, para in (("base", dom.main, dom.ref_instruct, dom.ref_para),
                                      ("instruct", ift.main, ift.ref_base, ift.ref_para)):
        t = pd.concat([mean_table(golden, ["qskew"]).rename(index={"Q-Skew": "Golden reference"}),
                       mean_table(other, ["qskew"]).rename(index={"Q-Skew": "Other-variant reference"}),
                       mean_table(para, ["qskew"]).rename(index={"Q-Skew": "Para-modification reference"})])
        if "sama" in scores:
            t = pd.concat([t, mean_table(golden, ["sama"]).rename(index={"SAMA": "SAMA (w/ Ref)"})])
        out[side] = t
    return out


def table5(dom: DomainRuns) -> pd.DataFrame | None:
    """Table 5 (ablation of Q-Skew's parts), mean over runs; None when Q-Skew was not scored."""
    return mean_table(dom.ablation) if dom.ablation else None


def table6(pii: dict) -> pd.DataFrame:
    """Table 6 (PII reconstruction): per ranking, the phone and e-mail attack success rates (%) and
    hits (``k/n``), with the share of targets whose truth is among the candidates (the upper bound)."""
    hits, oracle, n = pii["hits"], pii["oracle"], pii["n"]
    table = pd.DataFrame({m: {"Phone ASR": 100 * hits[m]["phone"] / n, "Email ASR": 100 * hits[m]["email"] / n,
                              "Phone hits": f"{hits[m]['phone']}/{n}", "Email hits": f"{hits[m]['email']}/{n}"}
                          for m in hits}).T
    table.loc["truth among candidates (upper bound)"] = [100 * oracle["phone"] / n, 100 * oracle["email"] / n,
                                                         f"{oracle['phone']}/{n}", f"{oracle['email']}/{n}"]
    return table


def pooled_deltas(examples: dict) -> dict[int, np.ndarray]:
    """Run 0's per-token differences Delta (nats) pooled by label: {1: members', 0: non-members'}."""
    pairs = list(zip(examples["deltas"], examples["labels"]))
    return {lab: np.concatenate([x for x, y in pairs if y == lab]) for lab in (1, 0)}


def delta_table(examples: dict) -> pd.DataFrame:
    """Mean, median, skewness and pooled Q-Skew of the pooled Delta, rows members and non-members."""
    from scipy.stats import skew

    pooled = pooled_deltas(examples)
    return pd.DataFrame({name: {"mean": v.mean(), "median": np.median(v), "skewness": skew(v),
                                "Q-Skew (pooled)": mia.qskew(v)}
                         for name, v in (("members", pooled[1]), ("non-members", pooled[0]))}).T


def _skew_boot(examples: dict, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, 2) bootstrap replicates of (members', non-members') pooled Q-Skew of Delta.

    Sequences are resampled with replacement within each label: the tokens of one
    sequence share its fine-tuning, so a sequence is the unit of resampling.
    """
    if n_boot < 10:
        raise ValueError(f"skew_gap_band: n_boot must be >= 10 (got {n_boot})")
    labels = np.asarray(examples["labels"])
    groups = [[x for x, y in zip(examples["deltas"], labels) if y == lab] for lab in (1, 0)]
    if not all(groups):
        raise ValueError("skew_gap_band: examples need members and non-members (labels 1 and 0)")
    rng = np.random.default_rng(seed)
    return np.array([[mia.qskew(np.concatenate([g[i] for i in rng.integers(0, len(g), len(g))])) for g in groups]
                     for _ in range(n_boot)])


def _half_width(x: np.ndarray, z_level: float) -> float:
    lo, hi = np.quantile(x, [(1 - z_level) / 2, (1 + z_level) / 2])
    return float((hi - lo) / 2)


def skew_gap_band(examples: dict, n_boot: int = 200, seed: int = 0, z_level: float = 0.95) -> float:
    """Half-width of the bootstrap interval of members' minus non-members' pooled Q-Skew of Delta.

    examples: run 0's ``{"deltas": [(n_i,) arrays, nats], "labels": (N,) 0/1}``. Sequences are
    resampled with replacement within each label (:func:`_skew_boot`) and the pooled Q-Skew
    recomputed; the band is half the width of the central ``z_level`` interval of the difference.
    """
    b = _skew_boot(examples, n_boot, seed)
    return _half_width(b[:, 0] - b[:, 1], z_level)


def skew_zero_band(examples: dict, n_boot: int = 200, seed: int = 0, z_level: float = 0.95) -> float:
    """Half-width of the bootstrap interval of (members' pooled Q-Skew) / 2 - |non-members'|.

    The margin by which the non-members' skew is nearer zero than the members' skew
    (``claims.NEAR_ZERO``); same resampling of sequences and the same replicates as
    :func:`skew_gap_band` for the same ``seed``.
    """
    b = _skew_boot(examples, n_boot, seed)
    return _half_width(b[:, 0] / 2 - np.abs(b[:, 1]), z_level)


# ----------------------------------------------------------------------------- recorded metric groups
# Each returns {metric key: value} for ``run.record(**...)``; the keys are claims.METRIC_KEYS.

def domain_metrics(ours: dict[str, pd.DataFrame]) -> dict:
    """``domain``: Table 1 per domain setting, {setting: {score label: {metric: %}}}."""
    return {"domain": {d: t.to_dict(orient="index") for d, t in ours.items()}}


def delta_metrics(delta_rows: dict[str, pd.DataFrame], bands: dict[str, float],
                  zero_bands: dict[str, float] | None = None) -> dict:
    """``delta_stats``: :func:`delta_table` per domain setting; ``delta_band``: its
    :func:`skew_gap_band` per setting (the noise band of members' minus non-members' pooled Q-Skew);
    ``delta_zero_band``: its :func:`skew_zero_band` per setting, when given."""
    out = {"delta_stats": {d: t.to_dict(orient="index") for d, t in delta_rows.items()},
           "delta_band": {d: float(bands[d]) for d in delta_rows}}
    if zero_bands is not None:
        out["delta_zero_band"] = {d: float(zero_bands[d]) for d in delta_rows}
    return out


def instruction_metrics(ours: pd.DataFrame) -> dict:
    """``instruction``: Table 2, {score label: {metric: %}}."""
    return {"instruction": ours.to_dict(orient="index")}


def sweep_metrics(sweeps: dict[str, pd.DataFrame]) -> dict:
    """``epochs_sweep_auc``: Figure 2 per domain setting, {setting: {str(epochs): {score label: AUC %}}}."""
    return {"epochs_sweep_auc": {d: {str(e): s[e].to_dict() for e in s.columns} for d, s in sweeps.items()}}


def table4_metrics(t4: dict[str, dict[str, pd.DataFrame]]) -> dict:
    """``table4_base`` per domain setting and ``table4_instruct`` (the same in every setting); {} without Q-Skew."""
    if not any(t4.values()):
        return {}
    first = next(t for t in t4.values() if t)
    return {"table4_base": {d: t["base"].to_dict(orient="index") for d, t in t4.items() if t},
            "table4_instruct": first["instruct"].to_dict(orient="index")}


def ablation_metrics(ours: dict[str, pd.DataFrame]) -> dict:
    """``ablation``: Table 5 per domain setting; {} when no setting has one."""
    return {"ablation": {d: t.to_dict(orient="index") for d, t in ours.items()}} if ours else {}


def sequence_bootstrap_se(seq_means: np.ndarray, runs: int = 1, n_boot: int = 1000, seed: int = 0) -> float:
    """Standard error (nats) of the mean gain by a bootstrap over sequences.

    seq_means: (runs * n,) each member sequence's mean gain, run by run in blocks of n
    (equal token counts per sequence, so their mean is the mean over tokens). Each
    replicate resamples the sequences of every run with replacement (the runs are fixed
    strata: each has its own fine-tuning) and takes the mean; the SE is the replicates'
    standard deviation. Tokens of one sequence share its fine-tuning and are not resampled
    one by one.
    """
    x = np.asarray(seq_means, dtype=float)
    if runs < 1 or x.size % runs or x.size // runs < 2:
        raise ValueError(f"sequence_bootstrap_se: needs runs >= 1 blocks of >= 2 sequences each "
                         f"(got {x.size} sequences, runs={runs})")
    blocks = x.reshape(runs, -1)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, blocks.shape[1], (n_boot, runs, blocks.shape[1]))
    reps = np.take_along_axis(np.broadcast_to(blocks, (n_boot, *blocks.shape)), idx, axis=2).mean(axis=(1, 2))
    return float(reps.std(ddof=1))


def asymmetry_metrics(asym: dict) -> dict:
    """``asymmetry``: Figure 1's summary rows, {mask ratio: {column: value}} (gains in nats), each with
    ``mean gain SE`` (nats): the standard error of the mean gain by a bootstrap over member sequences
    (:func:`sequence_bootstrap_se`), and ``runs``, the fine-tuning seeds pooled."""
    rows = asym["table"].to_dict(orient="index")
    runs = int(asym.get("runs", 1))
    for ratio, g in asym["sequence_gains"].items():
        rows[ratio]["mean gain SE"] = sequence_bootstrap_se(g, runs)
        rows[ratio]["runs"] = runs
    return {"asymmetry": rows}


def pii_metrics(pii: dict, cfg) -> dict:
    """``pii``: Table 6's hits and oracle counts, each ranking's per-target top-1 successes, the targets
    per kind, CE's top-1 rate over both kinds (``ce_rate``, %: the regime gate reads it), the CE mask
    share, the PII fine-tuning epochs and the memorisation NLLs (nats/token)."""
    ce = pii["hits"]["CE"]
    return {"pii": {"hits": pii["hits"], "top1": pii["top1"], "oracle": pii["oracle"], "targets_per_kind": pii["n"],
                    "ce_rate": 100.0 * (ce["phone"] + ce["email"]) / (2 * pii["n"]),
                    "ce_mask_share": cfg.pii_ce_share, "epochs": cfg.pii_epochs,
                    "memorisation": pii["memorisation"].to_dict(orient="index")}}


def closing_regime(m: dict, ours_dft: dict[str, pd.DataFrame], context_margin: float) -> str:
    """The closing section's regime paragraphs (markdown str): the base's context gain (nats) on its own
    domain and on the docstrings, and Calibration against Q-Skew (AUC %) in the two domain settings."""
    reg = m["regime"]["same"]
    lines = [f"**The regime.** The base's masked NLL on its own domain is"
             f" {reg['base masked NLL']:.2f} nats against {reg['unigram NLL']:.2f} for a unigram"
             f" model ({reg['context gain']:.2f} nats of context used)."]
    if "gap" in m["regime"]:
        g = m["regime"]["gap"]
        lines.append(
            f"On the docstrings it is {g['base masked NLL']:.2f} nats against"
            f" {g['unigram NLL']:.2f} for the unigram ({g['context gain']:+.2f}): "
            + ("the base reads no context there, a wider gap than LLaDA's (web-scale"
               " pre-training) facing WikiText, so in this setting fine-tuning first"
               " teaches the domain to members and non-members alike."
               if g["context gain"] < context_margin else "the base reads context on the new domain too."))
    if len(ours_dft) > 1:
        cal = {d: t.loc["Calibration", "AUC"] for d, t in ours_dft.items() if "Calibration" in t.index}
        qs_ = {d: t.loc["Q-Skew", "AUC"] for d, t in ours_dft.items() if "Q-Skew" in t.index}
        if cal and qs_:
            lines.append(
                "**Same domain against domain gap.** Calibration: "
                + ", ".join(f"{d} {a:.1f}" for d, a in cal.items())
                + "; Q-Skew: " + ", ".join(f"{d} {a:.1f}" for d, a in qs_.items())
                + " (AUC, %). The paper explains Calibration's weakness on LLaDA by the"
                " noise that adapting to a new domain adds to every sequence's loss"
                " difference; the domain-gap setting is where that explanation can be"
                " tested here.")
    return "\n\n".join(lines)
