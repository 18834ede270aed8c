"""Chapter 6's stages: chapters 1 and 3's cached models seen through every lens, as plain data.

No paper of its own: the chapter takes the models chapters 1 and 3 train and cache
(through their own functions, at the same profile and with their default parameters,
so their caches are reused) and looks at them with the other papers' measuring
instruments (:mod:`memlab.science.lenses`, :mod:`memlab.science.probes`, :mod:`memlab.science.sde`).

Data flow:

* vision (:func:`vision_lenses`): chapter 1's Table 1 models (BatchNorm) and its GroupNorm
  control -> per model and its recalibration: chapter 1's Pre-F/Post-F/ΔF/LP-50/ReAUC,
  chapter 2's SDE verdict on the forget class (:func:`forget_otr`) and its
  confidence/entropy MIA ASR;
* language (:func:`lm_lenses`): chapter 3's BIO adapter unlearned by chapter 3's own
  NPO/GA loop -> at K = 0 and every K: out acc, thk leak, teacher-forced top-1 (chapter 3),
  canary bits (chapter 5's code lengths, :mod:`memlab.science.lenses`), membership AUCs (chapter 4's
  scores);
* agreement (:func:`agreement`): Kendall tau between the lenses' rankings, with bootstrap
  intervals.
"""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

from memlab.core.config import resolve
from memlab.core.progress import progress
from memlab.data import authors as A
from memlab.data import vision as V
from memlab.experiments import ch01_bn_illusion as ch1
from memlab.experiments import ch02_sde as ch2
from memlab.experiments import ch03_canary_audit as ch3
from memlab.science import bn, lenses, probes

from .spec import ILLUSION_PP


def sub_configs(cfg) -> tuple:
    """Chapters 1 and 3 at this profile with their default parameters (their caches are reused)."""
    return resolve(ch1.CHAPTER, profile=cfg.profile), resolve(ch3.CHAPTER, profile=cfg.profile)


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
    sqrt(d). Same seeds for every model, so two models' verdicts differ only by their outputs
    (:func:`memlab.science.lenses.sde_out_of_training`).
    """
    out = lenses.sde_out_of_training(retain_out[subsets["in_ref"]], forget_test_out[subsets["out_ref"]],
                                     [forget_out[t] for t in subsets["targets"]], n_shuffles=cfg.n_shuffles,
                                     n_bins=cfg.n_bins, seed=cfg.seed)
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
    from memlab.science import canaries

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
        auc = lenses.membership_aucs(scores_m, scores_f)
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
