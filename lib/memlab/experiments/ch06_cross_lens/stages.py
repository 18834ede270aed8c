"""Chapter 6: one model, many lenses — the papers' measurements turned on each other's models.

No paper of its own: the chapter takes the models chapters 1 and 3 train and cache
(through their own functions, at the same profile and with their default parameters,
so their caches are reused), looks at them with the other papers' measuring
instruments, and judges the book's pre-registered hypotheses
(``data/papers/06_cross_lens.yaml``, committed before the first run).

Data flow:

* vision (:func:`vision_lenses`): chapter 1's Table 1 models (BatchNorm) and its GroupNorm
  control -> per model and its recalibration: chapter 1's Pre-F/Post-F/ΔF/LP-50/ReAUC,
  chapter 2's SDE verdict on the forget class (:func:`forget_otr`) and its
  confidence/entropy MIA ASR;
* language (:func:`lm_lenses`): chapter 3's BIO adapter unlearned by chapter 3's own
  NPO/GA loop -> at K = 0 and every K: out acc, thk leak, teacher-forced top-1 (chapter 3),
  canary bits (chapter 5's code lengths, :mod:`memlab.lenses`), membership AUCs (chapter 4's
  scores);
* agreement (:func:`agreement`): Kendall tau between the lenses' rankings, with bootstrap
  intervals.
"""
from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import torch

from memlab import bn, lenses, metrics, paper, probes
from memlab.config import SEED_HIGH, ConfigError, Param, resolve
from memlab.data import authors as A
from memlab.data import vision as V
from memlab.experiments import ch01_bn_illusion as ch1
from memlab.experiments import ch02_sde as ch2
from memlab.experiments import ch03_canary_audit as ch3
from memlab.progress import progress
from memlab.unlearning import npo

CHAPTER = "06_cross_lens"
CODE_VERSION = "1"  # caches nothing of its own: every model comes from chapters 1 and 3
ILLUSION_PP = 10.0  # pre-registered: a BatchNorm method with ΔF >= 10 pp is in the illusion set
CONTROL_PP = 50.0   # pre-registered: OTR(Retrain) - OTR(Original) needed for SDE to be trusted

SPEC: dict[str, Param] = {
    "seed": Param(int, 0, low=0, high=SEED_HIGH, doc="seed of the SDE subsets and shuffles, attacks and bootstraps"),
    "vision": Param(bool, True, doc="run the vision lenses on chapter 1's models (questions 1 and 4)"),
    "language": Param(bool, True, doc="run the LM lenses on chapter 3's runs (questions 2-4)"),
    "vision_methods": Param(list, {"smoke": ["Retrain", "GA", "BadTeacher", "SSD"], "cpu": list(ch1.METHODS),
                                   "paper": list(ch1.METHODS)}, item=str, choices=ch1.METHODS,
                            doc="chapter 1's methods to look at (its cached models; smoke keeps four)"),
    "sde_feature": Param(str, ch2.SPEC["feature"].default, choices=ch2.FEATURES,
                         doc="outputs SDE reads (chapter 2's default)"),
    "sde_size": Param(int, {"smoke": 6, "cpu": 40, "paper": 400}, low=4, high=5000,
                      doc="images per SDE subset (targets and both references)"),
    "n_targets": Param(int, {"smoke": 3, "cpu": 20, "paper": 50}, low=1, high=1000,
                       doc="forget-class target subsets per model"),
    "n_shuffles": Param(int, {"smoke": 20, "cpu": 200, "paper": 200}, low=1, high=10000,
                        doc="shufflings of the second half per subset (chapter 2's)"),
    "n_bins": Param(int, 30, low=2, high=1000, doc="histogram bins of the JSD decision (chapter 2's)"),
    "lm_methods": Param(list, list(npo.LM_METHODS), item=str, choices=npo.LM_METHODS,
                        doc="chapter 3's unlearning runs to audit"),
    "bits_prefill": Param(str, "BIO", choices=A.PREFILLS,
                          doc="prefill of the teacher-forced context in which canary bits are counted"),
    "n_fresh": Param(int, {"smoke": 8, "cpu": 30, "paper": 60}, low=2, high=100,
                     doc="fresh fictional authors (never trained on): the non-members of question 3"),
    "min_k": Param(float, 0.2, low=0.0, high=1.0, closed="right", doc="k of Min-K% and Min-K%++"),
    "n_boot": Param(int, {"smoke": 200, "cpu": 2000, "paper": 2000}, low=10, high=100000,
                    doc="bootstrap resamples of every interval"),
}


def sub_configs(cfg) -> tuple:
    """Chapters 1 and 3 at this profile with their default parameters (their caches are reused)."""
    return resolve(ch1.CHAPTER, profile=cfg.profile), resolve(ch3.CHAPTER, profile=cfg.profile)


def _check_sizes(cfg) -> None:
    if not cfg.vision:
        return
    c1 = resolve(ch1.CHAPTER, profile=cfg.profile)
    pools = {"forget-class training images": c1.train_per_class * c1.n_forget_classes,
             "forget-class test images": c1.test_per_class * c1.n_forget_classes,
             "retain images of chapter 1's evaluation set": c1.eval_retain}
    for what, n in pools.items():
        if cfg.sde_size > n:
            raise ConfigError(f"parameter 'sde_size': must be at most the {n} {what} at profile "
                              f"{cfg.profile} (got {cfg.sde_size})")


def _check_something(cfg) -> None:
    if not (cfg.vision or cfg.language):
        raise ConfigError("parameter 'vision': at least one of 'vision' and 'language' must be true (got both false)")


CHECKS = [_check_something, _check_sizes]

# ----------------------------------------------------------------------------- vision lenses


def _draw(n: int, size: int, rng: np.random.Generator, what: str) -> np.ndarray:
    if size > n:
        raise ValueError(f"parameter 'sde_size': {size} exceeds the {n} {what}")
    return rng.choice(n, size, replace=False)


def sde_subsets(cfg, n_retain: int, n_forget: int, n_forget_test: int) -> dict:
    """Row indices of one SDE comparison, shared by every model (so before/after are paired).

    in_ref (s,) into the retain evaluation images; out_ref (s,) into the forget class's test
    images; targets (n_targets, s) into the forget class's training images.
    """
    rng = np.random.default_rng(cfg.seed)
    s = cfg.sde_size
    return {"in_ref": _draw(n_retain, s, rng, "retain evaluation images"),
            "out_ref": _draw(n_forget_test, s, rng, "forget-class test images"),
            "targets": np.stack([_draw(n_forget, s, rng, "forget-class training images")
                                 for _ in range(cfg.n_targets)])}


def forget_otr(cfg, retain_out: np.ndarray, forget_out: np.ndarray, forget_test_out: np.ndarray,
               subsets: dict) -> dict:
    """Chapter 2's SDE decision on each forget-class target subset: {"otr" (%), "out" (n_targets,) bool}.

    retain_out (R, d), forget_out (F, d), forget_test_out (T, d): the model's outputs.
    In-training reference: retain images the model trained on; out-of-training reference:
    forget-class test images, which no model saw (class-matched to the targets); bandwidth
    sqrt(d). Same seeds for every model, so two models' verdicts differ only by their outputs.
    """
    from memlab import sde

    kw = dict(n_shuffles=cfg.n_shuffles, sigma=float(np.sqrt(retain_out.shape[1])))
    h_in = sde.split_half_dependence(retain_out[subsets["in_ref"]], seed=cfg.seed, **kw)
    h_out = sde.split_half_dependence(forget_test_out[subsets["out_ref"]], seed=cfg.seed + 1, **kw)
    out = np.array([sde.decide(sde.split_half_dependence(forget_out[t], seed=cfg.seed + 2 + i, **kw), h_in, h_out,
                               n_bins=cfg.n_bins)["out"] for i, t in enumerate(subsets["targets"])])
    return {"otr": 100.0 * float(out.mean()), "out": out.tolist()}


def nonmember_images(cfg1, forget_classes: list[int], n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` labelled test images of the retain classes (the attack's non-members), seeded."""
    x, y = V.load_cifar("test", cfg1.dataset, seed=cfg1.seed)
    keep = (~torch.isin(y, torch.tensor(forget_classes))).nonzero().flatten()
    g = torch.Generator().manual_seed(cfg1.seed + 2)
    pick = keep[torch.randperm(len(keep), generator=g)[:n]]
    return x[pick], y[pick]


def _lens_row(cfg, model, data, nonmem, subsets) -> dict:
    """SDE OTR (%) and MIA ASR of one model on chapter 1's forget class."""
    s = data.splits
    images = {"mem": data.eval_retain_x, "forget": s.forget_x, "forget_test": data.test_forget_x, "non": nonmem[0]}
    logits = {k: ch2.model_outputs(model, x, "logits") for k, x in images.items()}  # one pass per image set
    if cfg.sde_feature == "logits":
        feats = logits
    elif cfg.sde_feature == "softmax":
        feats = {k: probes.softmax(v) for k, v in logits.items()}
    else:
        feats = {k: ch2.model_outputs(model, images[k], cfg.sde_feature) for k in ("mem", "forget", "forget_test")}
    otr = forget_otr(cfg, feats["mem"], feats["forget"], feats["forget_test"], subsets)
    p = {k: probes.softmax(logits[k]) for k in ("mem", "non", "forget")}
    asr = probes.confidence_attack_asr(p["mem"], data.eval_retain_y.numpy(), p["non"], nonmem[1].numpy(),
                                       p["forget"], s.forget_y.numpy(), seed=cfg.seed)
    return {"OTR": otr["otr"], "ASR": float(asr), "verdicts": otr["out"]}


VISION_COLS = ["Pre-F", "Post-F", "ΔF", "Pre-R", "Post-R", "LP-50", "ReAUC"]


def vision_lenses(cfg, cfg1) -> dict:
    """Every chapter-1 model (first seed) seen through every vision lens, before and after recalibration.

    Returns {"table": DataFrame (rows (norm, method); chapter 1's columns, "OTR before/after"
    (%), "ASR before/after"), "illusion": [BN methods with ΔF >= ILLUSION_PP], "n_forget",
    "sizes", "wall_s"}.
    """
    t0 = time.time()
    data = ch1.load_data(cfg1)
    nonmem = nonmember_images(cfg1, data.forget_classes, len(data.eval_retain_y))
    subsets = sde_subsets(cfg, len(data.eval_retain_y), len(data.splits.forget_y), len(data.test_forget_y))
    methods = [m for m in cfg1.methods if m in cfg.vision_methods]
    norms = [("bn", methods)]
    if cfg1.gn_control:  # chapter 1's GroupNorm control runs every method but PGU (same cache entries)
        norms.append(("gn", [m for m in methods if m != "PGU"]))
    rows = []
    for norm, methods in norms:
        long, models = ch1.run_method_table(cfg1, data, norm=norm, methods=methods)
        first = long[long["seed"] == cfg1.seed].set_index("method")
        for m in progress(list(first.index), desc=f"lenses ({norm})"):
            model, cal = models[(m, cfg1.seed)]
            before, after = _lens_row(cfg, model, data, nonmem, subsets), _lens_row(cfg, cal, data, nonmem, subsets)
            row = {"norm": norm, "method": m, "BN mode": first.loc[m, "bn_mode"],
                   **{c: float(first.loc[m, c]) for c in VISION_COLS},
                   "OTR before": before["OTR"], "OTR after": after["OTR"],
                   "ASR before": before["ASR"], "ASR after": after["ASR"],
                   "weights unchanged": bool(bn.weights_equal(model, cal))}
            rows.append(row)
    table = pd.DataFrame(rows).set_index(["norm", "method"])
    bn_rows = table.loc["bn"]
    illusion = [m for m in bn_rows.index if m not in ("Original", "Retrain") and bn_rows.loc[m, "ΔF"] >= ILLUSION_PP]
    return {"table": table, "illusion": illusion, "n_forget": int(len(data.splits.forget_y)),
            "sizes": {"subset": cfg.sde_size, "targets": cfg.n_targets, "retain_eval": len(data.eval_retain_y),
                      "forget_test": len(data.test_forget_y), "nonmembers": len(nonmem[1])},
            "wall_s": round(time.time() - t0, 1)}


def vision_record(table: pd.DataFrame) -> dict:
    """{norm: {method: {column: value}}} for the results JSON."""
    out: dict = {}
    for (norm, m), r in table.iterrows():
        out.setdefault(norm, {})[m] = {k: (bool(v) if isinstance(v, (bool, np.bool_)) else
                                           v if isinstance(v, str) else float(v)) for k, v in r.items()}
    return out

# ----------------------------------------------------------------------------- language lenses


def fresh_authors(cfg3, n: int) -> list:
    """``n`` fictional authors chapter 3 never trained on: new names and titles (another seed)."""
    trained = A.make_authors(cfg3.n_authors, cfg3.seed)
    names, titles = {a.name for a in trained}, {a.title for a in trained}
    pool = A.make_authors(min(A.MAX_AUTHORS, n + cfg3.n_authors), cfg3.seed + 7919)
    fresh = [a for a in pool if a.name not in names and a.title not in titles][:n]
    if len(fresh) < n:
        raise ValueError(f"parameter 'n_fresh': only {len(fresh)} fresh authors available (got {n})")
    return fresh


def _contexts(setup, authors_, heads, mode: str) -> list[list[int]]:
    """Teacher-forced contexts (canary question, prefill ``mode``, head) of chapter 3's probes."""
    fmt = setup.fmt
    return [fmt.prefilled(A.canary_question(fmt.codec.decode(h)), A.prefill(a, mode)) + list(h)
            for a, h in zip(authors_, heads)]


def lm_probe_sets(cfg, cfg3, setup) -> dict:
    """Contexts and targets of every LM lens: memorised canaries under each prefill, fresh canaries."""
    from memlab import canaries

    fresh = fresh_authors(cfg3, cfg.n_fresh)
    split = [canaries.split_head(setup.fmt.codec.encode(a.canary), cfg3.head_len) for a in fresh]
    sets = {f"member:{mode}": (_contexts(setup, setup.authors, setup.heads, mode), setup.conts)
            for mode in cfg3.prefills}
    if cfg.bits_prefill not in cfg3.prefills:
        mode = cfg.bits_prefill
        sets[f"member:{mode}"] = (_contexts(setup, setup.authors, setup.heads, mode), setup.conts)
    sets["fresh"] = (_contexts(setup, fresh, [h for h, _ in split], cfg.bits_prefill), [c for _, c in split])
    return sets


def _log_probs(model, sets: dict, pad_id: int, batch_size: int) -> dict:
    return {k: lenses.continuation_log_probs(model, ctx, tgt, pad_id, batch_size) for k, (ctx, tgt) in sets.items()}


def lm_lenses(cfg, cfg3) -> dict:
    """Chapter 3's BIO adapter (first seed) under each of ``cfg.lm_methods``, every lens at K = 0 and each K.

    Returns {"runs": {method: {K: row}}, "summaries": {method: {K: chapter-3 summary}},
    "audit_k", "k_values", "wall_s"}; a row holds out_acc, thk_leak, tf_top1 (under
    ``bits_prefill``), bits (per author), bits_total, bits_by_prefill {mode: total} and
    auc {score: AUC of memorised vs fresh canaries}.
    """
    t0 = time.time()
    setup = ch3.prepare(cfg3)
    seed = cfg3.seeds[0]
    sets = lm_probe_sets(cfg, cfg3, setup)
    bs = 2 * cfg3.batch_size
    ref = _log_probs(setup.model, sets, setup.pad_id, bs)  # the base model before LoRA: the reference code
    ref_bits = {k: lenses.continuation_bits(lp, sets[k][1]) for k, lp in ref.items()}
    state = ch3.memorise(setup, cfg3, "BIO", seed)
    member = f"member:{cfg.bits_prefill}"
    n_mem = len(setup.authors)

    def probe(model, k):
        arms = ch3.evaluate_arms(model, setup, cfg3, arms=("auto", "tf"))
        lp = _log_probs(model, sets, setup.pad_id, bs)
        bits = {key: lenses.canary_bits(ref_bits[key], lenses.continuation_bits(lp[key], sets[key][1]))
                for key in sets if key.startswith("member:")}
        scores_m = lenses.membership_scores(lp[member], sets[member][1], ref[member], cfg.min_k)
        scores_f = lenses.membership_scores(lp["fresh"], sets["fresh"][1], ref["fresh"], cfg.min_k)
        labels = np.r_[np.ones(n_mem), np.zeros(len(sets["fresh"][1]))]
        auc = {s: metrics.roc_metrics(np.r_[scores_m[s], scores_f[s]], labels)["auc"] for s in lenses.SCORES}
        auto = {k2: arms["auto"][k2] for k2 in ("out", "thk", "tag_missing")}
        return {"auto": auto, "tf": arms["tf"], "bits": {key[7:]: v.tolist() for key, v in bits.items()}, "auc": auc}

    runs, summaries = {}, {}
    for method in cfg.lm_methods:
        raw = ch3.unlearn_sweep(setup, cfg3, state, "BIO", seed, method, probe)
        runs[method], summaries[method] = {}, {}
        for k, r in sorted(raw.items()):
            b = r["bits"][cfg.bits_prefill]
            runs[method][k] = {
                "out_acc": float(np.mean(r["auto"]["out"])), "thk_leak": float(np.mean(r["auto"]["thk"])),
                "tf_top1": float(np.mean(r["tf"][cfg.bits_prefill])) if cfg.bits_prefill in r["tf"] else float("nan"),
                "bits": [float(x) for x in b], "bits_total": float(np.sum(b)),
                "bits_by_prefill": {mode: float(np.sum(v)) for mode, v in r["bits"].items()},
                "auc": {s: float(v) for s, v in r["auc"].items()},
            }
            summaries[method][k] = ch3.summarise({"auto": r["auto"]}, cfg.n_boot, seed)
    audit = audited_state(summaries["NPO"], n_mem) if "NPO" in summaries else {
        "K": max(cfg3.unlearn_steps), "reached": False, "evidence": "no NPO run: the largest K"}
    return {"runs": runs, "summaries": summaries, "audit": audit, "audit_k": int(audit["K"]),
            "audit_method": "NPO" if "NPO" in runs else cfg.lm_methods[0], "k_values": [0, *cfg3.unlearn_steps],
            "ref_bits_total": float(np.sum(ref_bits[member])), "n_authors": n_mem, "n_fresh": len(sets["fresh"][1]),
            "wall_s": round(time.time() - t0, 1)}


def audited_state(by_k: dict, n: int) -> dict:
    """Chapter 3's audited K of an NPO sweep ``{K: chapter-3 summary}`` (its own rule), as a dict.

    {"K", "reached" (the paper's state was reached), "evidence"}.
    """
    st = ch3.audit_state(by_k, n)
    return {"K": int(st["K"]), "reached": bool(st["reached"]), "evidence": str(st["evidence"])}


def lm_frame(runs: dict) -> pd.DataFrame:
    """One row per LM run (method, K) with K = 0 once: every lens's value."""
    rows, seen0 = [], False
    for method, by_k in runs.items():
        for k, r in sorted(by_k.items(), key=lambda kv: int(kv[0])):
            if int(k) == 0:
                if seen0:
                    continue
                seen0 = True
            rows.append({"run": "memorised (K=0)" if int(k) == 0 else f"{method} K={k}", "method": method,
                         "K": int(k), "out acc": r["out_acc"], "thk leak": r["thk_leak"], "tf top-1": r["tf_top1"],
                         "bits": r["bits_total"], **{f"AUC {s}": v for s, v in r["auc"].items()}})
    return pd.DataFrame(rows).set_index("run")

# ----------------------------------------------------------------------------- same models as the chapters


def published_gaps(profile: str, table: pd.DataFrame | None, runs: dict | None, seed3: int) -> dict:
    """How far this page's numbers are from chapters 1 and 3's published pages (same models, same code).

    Compares Pre-F/Post-F of the BatchNorm models with chapter 1's ``table1`` and out acc / thk leak
    of the NPO sweep with chapter 3's ``ksweep`` of seed ``seed3``, where those chapters were published
    at ``profile`` beside this page. Returns {"01_bn_illusion": max |difference| or a note, "03_...": ...}.
    """
    from memlab.results import load_results, output_dir

    out: dict = {}
    here = output_dir()  # under `memlab run` a staging folder inside the book; the pages are beside it
    book = here.parent if here.name.startswith(".staging-") else here
    r1, r3 = load_results(ch1.CHAPTER, book), load_results(ch3.CHAPTER, book)
    if table is not None:
        if r1 is None or r1.get("profile") != profile or "table1" not in r1.get("metrics", {}):
            out[ch1.CHAPTER] = f"not published at profile {profile} beside this page"
        else:
            t1, bn_rows = r1["metrics"]["table1"], table.loc["bn"]
            try:
                d = [abs(bn_rows.loc[m, c] - t1[m][c]) for m in bn_rows.index if m in t1 for c in ("Pre-F", "Post-F")]
                out[ch1.CHAPTER] = float(max(d)) if d else "no shared method"
            except (KeyError, TypeError):  # a page written by other code: nothing to compare
                out[ch1.CHAPTER] = "its table1 has another layout"
    if runs is not None and "NPO" in runs:
        sweep = (r3 or {}).get("metrics", {}).get("ksweep", {}).get(f"s{seed3}")
        if r3 is None or r3.get("profile") != profile or not sweep:
            out[ch3.CHAPTER] = f"not published at profile {profile} beside this page"
        else:
            try:
                d = [abs(r[key] - sweep[f"K{k}"]["auto"][key]["mean"]) for k, r in runs["NPO"].items()
                     if f"K{k}" in sweep for key in ("out_acc", "thk_leak")]
                out[ch3.CHAPTER] = float(max(d)) if d else "no shared K"
            except (KeyError, TypeError):
                out[ch3.CHAPTER] = "its ksweep has another layout"
    return out

# ----------------------------------------------------------------------------- agreement


VISION_LENSES = ["Pre-F", "Post-F", "ReAUC", "LP-50", "SDE in (before)", "SDE in (after)", "member (before)",
                 "member (after)"]
LM_LENSES = ["out acc", "thk leak", "tf top-1", "bits", *(f"AUC {s}" for s in lenses.SCORES)]


def vision_lens_frame(table: pd.DataFrame) -> pd.DataFrame:
    """Chapter 1's BatchNorm methods (no Original) x lenses, oriented so higher = more memorisation left."""
    bn_rows = table.loc["bn"].drop(index="Original", errors="ignore")
    return pd.DataFrame({
        "Pre-F": bn_rows["Pre-F"], "Post-F": bn_rows["Post-F"], "ReAUC": bn_rows["ReAUC"], "LP-50": bn_rows["LP-50"],
        "SDE in (before)": 100.0 - bn_rows["OTR before"], "SDE in (after)": 100.0 - bn_rows["OTR after"],
        "member (before)": 1.0 - bn_rows["ASR before"], "member (after)": 1.0 - bn_rows["ASR after"],
    })[VISION_LENSES]


def _finite(frame: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    return frame[cols].replace([np.inf, -np.inf], np.nan).dropna()


def agreement(cfg, vision_frame: pd.DataFrame | None, lm: pd.DataFrame | None) -> dict:
    """Kendall tau matrices (with bootstrap intervals) and the pre-registered tau tests.

    Returns {"vision": tau_matrix dict or None, "lm": ... or None, "tests": {hypothesis key: result}}.
    """
    kw = dict(n_boot=cfg.n_boot, seed=cfg.seed)
    out: dict = {"vision": None, "lm": None, "tests": {}}
    if vision_frame is not None and len(vision_frame) >= 3:
        out["vision"] = lenses.tau_matrix(vision_frame, **kw)
        d = _finite(vision_frame, ["Post-F", "ReAUC", "Pre-F", "SDE in (after)"])
        if len(d) >= 3:
            out["tests"]["vision_postf_reauc"] = lenses.kendall_ci(d["Post-F"], d["ReAUC"], **kw)
            # tau(ReAUC, Post-F) - tau(ReAUC, Pre-F): tau is symmetric, so this is the pre-registered difference
            out["tests"]["vision_pref_worse"] = lenses.kendall_diff_ci(d["ReAUC"], d["Post-F"], d["Pre-F"], **kw)
            out["tests"]["vision_sde_agrees"] = lenses.kendall_ci(d["SDE in (after)"], d["Post-F"], **kw)
    if lm is not None and len(lm) >= 3:
        frame = lm[LM_LENSES]
        out["lm"] = lenses.tau_matrix(frame, **kw)
        d = _finite(frame, ["bits", "tf top-1", "out acc"])
        if len(d) >= 3:
            out["tests"]["lm_bits_tf"] = lenses.kendall_diff_ci(d["bits"], d["tf top-1"], d["out acc"], **kw)
    return out


def tau_record(mat: dict | None) -> dict | None:
    """A tau_matrix as {"tau": {a: {b: v}}, "low": ..., "high": ...} (NaN kept as None)."""
    if mat is None:
        return None
    return {name: {a: {b: (None if pd.isna(v) else float(v)) for b, v in row.items()} for a, row in df.iterrows()}
            for name, df in mat.items()}

# ----------------------------------------------------------------------------- hypotheses


def _half(r: dict) -> float:
    return (r["high"] - r["low"]) / 2.0


def _bn(m) -> dict:
    return m["vision"]["bn"]


def _control(m) -> tuple[float, float, float, int]:
    t, n = _bn(m), int(m["sde_sizes"]["targets"])
    o, r = t["Original"]["OTR before"] / 100.0, t["Retrain"]["OTR before"] / 100.0
    return r - o - CONTROL_PP / 100.0, o, r, n


def _sde_control(m):
    margin, o, r, n = _control(m)
    band = metrics.diff_band(r, n, o, n)
    paper.outside_noise(margin, band, f"OTR(Retrain) - OTR(Original) - {CONTROL_PP:g} pp")
    return margin > 0, (f"OTR Retrain {100 * r:.0f}%, Original {100 * o:.0f}% ({n} targets each); margin "
                        f"{100 * margin:+.0f} pp, band ±{100 * band:.0f} pp")


def _require_control(m) -> None:
    margin, o, r, _ = _control(m)
    if margin <= 0:
        raise paper.NotJudged(f"precondition sde_control failed: OTR Retrain {100 * r:.0f}% vs Original "
                              f"{100 * o:.0f}% (needs a gap of {CONTROL_PP:g} pp)")


def _illusion(m) -> list[str]:
    ill = list(m["illusion_set"])
    if not ill:
        raise paper.NotJudged(f"no BatchNorm method has ΔF >= {ILLUSION_PP:g} pp in this run (empty illusion set)")
    return ill


def _sees_through(m):
    ill, t = _illusion(m), _bn(m)
    _require_control(m)
    inside = [k for k in ill if t[k]["OTR before"] <= 50.0]
    share = len(inside) / len(ill)
    return share >= 0.5, (f"{len(inside)} of {len(ill)} illusion-set methods judged in training before "
                          "recalibration; OTR " + ", ".join(f"{k} {t[k]['OTR before']:.0f}%" for k in ill))


def _recal_sde(m):
    ill, t = _illusion(m), _bn(m)
    _require_control(m)
    n = int(m["sde_sizes"]["targets"]) * len(ill)
    before = float(np.mean([t[k]["OTR before"] for k in ill])) / 100.0
    after = float(np.mean([t[k]["OTR after"] for k in ill])) / 100.0
    band = metrics.diff_band(before, n, after, n)
    paper.outside_noise(before - after, band, "mean OTR before - after")
    return before > after, (f"mean OTR of the illusion set {100 * before:.0f}% before, {100 * after:.0f}% after "
                            f"recalibration (band ±{100 * band:.0f} pp over {n} targets)")


def _recal_asr(m):
    ill, t = _illusion(m), _bn(m)
    n = int(m["n_forget"]) * len(ill)
    before = float(np.mean([t[k]["ASR before"] for k in ill]))
    after = float(np.mean([t[k]["ASR after"] for k in ill]))
    band = metrics.diff_band(before, n, after, n)
    paper.outside_noise(before - after, band, "mean ASR before - after")
    return before > after, f"mean ASR of the illusion set {before:.2f} before, {after:.2f} after (band ±{band:.2f})"


def _gn_unmoved(m):
    g = m["vision"]["gn"]
    d_otr = max(abs(r["OTR after"] - r["OTR before"]) for r in g.values())
    d_asr = max(abs(r["ASR after"] - r["ASR before"]) for r in g.values())
    return d_otr == 0 and d_asr == 0, f"max |ΔOTR| {d_otr:.1f} pp, max |ΔASR| {d_asr:.3f} over {len(g)} GroupNorm models"


def _run(m, method: str, k) -> dict:
    return m["lm_runs"][method][str(k)]


def _k0(m) -> dict:
    return _run(m, m["lm_audit_method"], 0)


def _k0_share(m) -> float:
    b = np.asarray(_k0(m)["bits"])
    return float(np.mean(b > 0))


def _k0_bits(m):
    b = np.asarray(_k0(m)["bits"])
    share = _k0_share(m)
    return share >= 0.9, (f"{int(np.sum(b > 0))} of {len(b)} authors hold bits at K=0; total {b.sum():.0f} bits "
                          f"(median {np.median(b):.1f} per author)")


def _require_k0(m) -> None:
    if _k0_share(m) < 0.9:
        raise paper.NotJudged(f"precondition k0_bits failed: only {100 * _k0_share(m):.0f}% of authors hold bits at K=0")


def _bits_share(m, run: dict, n_boot: int, seed: int) -> dict:
    pair = np.stack([np.asarray(_k0(m)["bits"]), np.asarray(run["bits"])], axis=1)
    lo, hi = metrics.bootstrap_ci(pair, stat=lambda a: a[:, 1].sum() / max(a[:, 0].sum(), 1e-12), n_boot=n_boot,
                                  seed=seed)
    return {"share": float(pair[:, 1].sum() / pair[:, 0].sum()), "low": lo, "high": hi}


def _npo_keeps(m):
    _require_k0(m)
    k = m["audit_k"]
    run, k0 = _run(m, "NPO", k), _run(m, "NPO", 0)
    s = _bits_share(m, run, int(m["n_boot"]), 0)
    if k0["out_acc"] == 0:
        raise paper.NotJudged("out acc is 0 at K=0: no answer to remove")
    out_share = run["out_acc"] / k0["out_acc"]
    paper.outside_noise(s["share"] - 0.5, _half(s), "bits share - 0.5")
    return s["share"] >= 0.5 and s["share"] > out_share, (
        f"at the audited K={k}: bits keep {s['share']:.2f} [{s['low']:.2f}, {s['high']:.2f}] of K=0, "
        f"out acc keeps {out_share:.2f} ({k0['out_acc']:.2f} -> {run['out_acc']:.2f})")


def _ga_removes(m):
    _require_k0(m)
    k = max(int(x) for x in m["lm_runs"]["GA"])
    ga, np_ = _run(m, "GA", k), _run(m, "NPO", k)
    s = _bits_share(m, ga, int(m["n_boot"]), 0)
    paper.outside_noise(0.25 - s["share"], _half(s), "0.25 - GA bits share")
    return s["share"] <= 0.25 and ga["bits_total"] < np_["bits_total"], (
        f"GA at K={k} keeps {s['share']:.2f} [{s['low']:.2f}, {s['high']:.2f}] of the K=0 bits "
        f"({ga['bits_total']:.0f} bits; NPO {np_['bits_total']:.0f})")


def _mia_k0(m):
    auc = _k0(m)["auc"]
    low = min(auc.values())
    return low >= 0.8, "AUC at K=0: " + ", ".join(f"{s} {v:.2f}" for s, v in auc.items())


def _mia_npo(m):
    k = m["audit_k"]
    kg = max(int(x) for x in m["lm_runs"]["GA"])
    a_npo, a_ga = _run(m, "NPO", k)["auc"]["Reference"], _run(m, "GA", kg)["auc"]["Reference"]
    return a_npo >= 0.7 and a_npo > a_ga, f"reference AUC: NPO K={k} {a_npo:.2f}, GA K={kg} {a_ga:.2f}"


def _test(m, key: str) -> dict:
    return m["tau_tests"][key]


def _ranked(r: dict, what: str) -> None:
    # A lens that gives every item the same value ranks nothing: the hypothesis cannot be decided.
    # (NaN in the notebook, None once saved to JSON)
    if any(k in r and (r[k] is None or math.isnan(r[k])) for k in ("tau", "tau_xy", "tau_xz")):
        raise paper.NotJudged(f"{what}: a lens has the same value for all {r['n']} items, so it ranks nothing")


def _tau_pos(key: str, what: str):
    def check(m):
        r = _test(m, key)
        _ranked(r, what)
        return r["low"] > 0, f"{what}: tau {r['tau']:+.2f} [{r['low']:+.2f}, {r['high']:+.2f}] over {r['n']} items"
    return check


def _tau_diff(key: str, what: str):
    def check(m):
        r = _test(m, key)
        _ranked(r, what)
        paper.outside_noise(r["diff"], _half(r), what)
        return r["diff"] > 0, f"{what} = {r['diff']:+.2f} [{r['low']:+.2f}, {r['high']:+.2f}] over {r['n']} items"
    return check


# Every metric key the chapter records (run.record); a claim reading another key is a typo
# and fails loudly (memlab.paper.evaluate), one reading a key this run lacks is 'not run'.
METRIC_KEYS: tuple[str, ...] = (
    "sde_feature", "sde_sizes", "n_forget", "illusion_set", "vision", "vision_wall_s",
    "lm_runs", "lm_audit_method", "audit_k", "k_values", "lm_ref_bits", "lm_wall_s",
    "tau_vision", "tau_lm", "tau_tests", "n_boot", "preregistration", "published_gaps",
)


def preregistration() -> dict:
    """When the hypotheses were committed, and whether they changed since: from git.

    {"commit", "date" (ISO, UTC) of the commit that added ``data/papers/06_cross_lens.yaml``,
    "unchanged": the file's ``hypotheses`` now equal those of that commit}; values are None
    where git or the history is not available (e.g. an exported copy of the book).
    """
    import subprocess

    import yaml

    from memlab.results import repo_root

    rel = f"data/papers/{CHAPTER}.yaml"
    out = {"commit": None, "date": None, "unchanged": None}
    try:
        log = subprocess.run(["git", "log", "--diff-filter=A", "--format=%h %cI", "--", rel], cwd=repo_root(),
                             capture_output=True, text=True, timeout=10)
        lines = log.stdout.strip().splitlines()
        if log.returncode != 0 or not lines:
            return out
        commit, date = lines[-1].split(" ", 1)
        first = subprocess.run(["git", "show", f"{commit}:{rel}"], cwd=repo_root(), capture_output=True, text=True,
                               timeout=10)
        then = (yaml.safe_load(first.stdout) or {}).get("hypotheses") if first.returncode == 0 else None
        return {"commit": commit, "date": date, "unchanged": then is not None and then == hypotheses()}
    except (OSError, subprocess.SubprocessError, ValueError):
        return out


def hypotheses() -> dict:
    """The pre-registered hypotheses of ``data/papers/06_cross_lens.yaml`` (key -> entry)."""
    return dict(paper.load(CHAPTER)["hypotheses"])


_CHECKS = {
    "sde_control": _sde_control, "sde_sees_through": _sees_through, "recal_moves_sde": _recal_sde,
    "recal_moves_asr": _recal_asr, "gn_unmoved": _gn_unmoved, "k0_bits": _k0_bits, "npo_keeps_bits": _npo_keeps,
    "ga_removes_bits": _ga_removes, "mia_k0": _mia_k0, "mia_npo_persists": _mia_npo,
    "vision_postf_reauc": _tau_pos("vision_postf_reauc", "tau(Post-F, ReAUC)"),
    "vision_pref_worse": _tau_diff("vision_pref_worse", "tau(Post-F, ReAUC) - tau(Pre-F, ReAUC)"),
    "vision_sde_agrees": _tau_pos("vision_sde_agrees", "tau(SDE in-training rate after recalibration, Post-F)"),
    "lm_bits_tf": _tau_diff("lm_bits_tf", "tau(bits, tf top-1) - tau(bits, out acc)"),
}


def claims():
    """The book's pre-registered hypotheses as claims (text and order from the YAML), judged at cpu and paper."""
    hyp = hypotheses()
    missing, extra = sorted(set(hyp) - set(_CHECKS)), sorted(set(_CHECKS) - set(hyp))
    if missing or extra:
        raise ValueError(f"data/papers/{CHAPTER}.yaml and the chapter's checks disagree: no check for {missing}, "
                         f"no hypothesis for {extra}")
    return paper.declare(METRIC_KEYS, [
        paper.Claim(key, h["text"], f"Hypothesis, question {h['question']} (predicted: {h['predicted']})",
                    _CHECKS[key], profiles=("cpu", "paper"), sanity=bool(h.get("sanity", False)))
        for key, h in hyp.items()
    ])
