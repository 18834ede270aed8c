"""Chapter 3's tables and recorded metric groups, built from the stages' plain results.

Each function returns what the notebook records (``run.record(**...)``) or shows
(a DataFrame), so that the page holds no shaping code of its own: the K sweep and its
memorised state (Tables 3.0-3.1), the audited K (:func:`audit_state`, the rule fixed
before the run), prefill and teacher-forced probes (3.2-3.3), bypass anatomy (3.4),
parser conventions (3.5), training templates (3.6), the NPO variant (3.8) and retain utility.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from memlab.data import authors as A
from memlab.report import paper
from memlab.science import canaries

from .spec import CHAPTER

# ----------------------------------------------------------------------------- the K sweep

def jsonable_summary(by_k: dict) -> dict:
    """``{"K<k>": summary}`` with string keys for the results JSON."""
    return {f"K{k}": v for k, v in by_k.items()}


def ksweep_metrics(cfg, bio: dict) -> dict:
    """``k_values`` (0 and the sweep's K) and ``ksweep`` (``{"s<seed>": {"K<k>": summary}}``) of the BIO runs."""
    return {"k_values": [0] + list(cfg.unlearn_steps),
            "ksweep": {f"s{s}": jsonable_summary(r["summary"]) for s, r in bio.items()}}


def templates_metrics(runs: dict) -> dict:
    """``templates``: ``{template: {"K<k>": summary}}`` of the template comparison's runs."""
    return {"templates": {t: jsonable_summary(r["summary"]) for t, r in runs.items()}}


def ksweep_frame(summaries: dict) -> pd.DataFrame:
    """One row per (seed, K): out acc, thk leak, gap with its interval, and Delta_AB (AUTO - BIO prefill)."""
    rows = []
    for seed, by_k in summaries.items():
        for k, sm in sorted(by_k.items()):
            a = sm["auto"]
            row = {"seed": seed, "K": k, "out_acc": a["out_acc"]["mean"], "thk_leak": a["thk_leak"]["mean"],
                   "gap": a["gap"]["mean"], "gap_low": a["gap"]["low"], "gap_high": a["gap"]["high"]}
            if "prefill" in sm and "BIO" in sm["prefill"] and "auto_minus" in sm["prefill"]["BIO"]:
                row["delta_ab"] = sm["prefill"]["BIO"]["auto_minus"]["mean"]
            if "qa" in sm:
                row["qa_acc"] = sm["qa"]["mean"]
            if "retain" in sm:
                row["retain_acc"] = sm["retain"]["acc"]
            rows.append(row)
    return pd.DataFrame(rows)


def regime_frame(runs: dict, n_authors: int) -> pd.DataFrame:
    """The memorised adapters' state at K = 0, one row per run label.

    runs: ``{label: {K: summary}}`` (e.g. "BIO, seed 0"). Columns: out acc, thk
    leak, QA acc, retain acc and the number of authors whose canary comes back
    in the answer (out acc x n_authors). The paper starts from out acc 1.00.
    """
    rows = {}
    for label, by_k in runs.items():
        s0 = by_k[0]
        rows[label] = {"out_acc": s0["auto"]["out_acc"]["mean"], "thk_leak": s0["auto"]["thk_leak"]["mean"],
                       "qa_acc": s0["qa"]["mean"] if "qa" in s0 else np.nan,
                       "retain_acc": s0["retain"]["acc"] if "retain" in s0 else np.nan,
                       "authors memorised": round(s0["auto"]["out_acc"]["mean"] * n_authors)}
    return pd.DataFrame.from_dict(rows, orient="index")


# ----------------------------------------------------------------------------- the audited state

#: The paper's audited state (Sec. 4.1, its largest K = 1600): "out acc falls from 1.00 to 0.60
#: while thk leak stays at 0.83". Both are shares of the K = 0 values, so the rule carries over to a
#: sweep whose K scale differs; it was fixed before the cpu run and never looks at the gap or Delta_AB.
AUDIT_OUT_FRAC = 0.6  # out acc at the audited K / out acc at K = 0 (paper 0.60 / 1.00)
AUDIT_THK_FRAC = 0.8  # thk leak at the audited K must stay >= this share of K = 0 (paper 0.83 / 1.00)
Z95 = 1.96


def audit_band(n: int, frac: float | None = None, z: float = Z95) -> float:
    """Binomial sampling band ``z sqrt(f (1 - f) / n)`` of an out-acc share near ``frac``, ``n`` authors.

    frac: defaults to :data:`AUDIT_OUT_FRAC` (read at call time, so the rule has one definition).
    """
    frac = AUDIT_OUT_FRAC if frac is None else frac
    if n < 1:
        raise ValueError(f"parameter 'n': must be >= 1 (got {n})")
    return z * float(np.sqrt(frac * (1 - frac) / n))


def audit_state(by_k: dict, n: int, out_frac: float | None = None, thk_frac: float | None = None) -> dict:
    """The audited K: the sweep's state nearest the paper's audited one.

    by_k: ``{K: summary}`` of the first seed's BIO sweep (K = 0 included);
    n: authors (the band's sample size). Candidates are the K > 0 whose thk
    leak is at least ``thk_frac`` times its K = 0 value; the audited K is the
    candidate whose out-acc ratio out(K) / out(0) is nearest ``out_frac``
    (ties: the smaller K). The paper's state is *reached* when that ratio lies
    within :func:`audit_band` of ``out_frac`` (0.18 at n = 30). Without a
    candidate, the K whose out-acc ratio is nearest ``out_frac`` is returned,
    not reached. Returns ``{"K", "reached", "out_ratio", "thk_ratio", "band",
    "evidence", "by_out"}`` (JSON-able). ``out_frac``/``thk_frac`` default to
    :data:`AUDIT_OUT_FRAC`/:data:`AUDIT_THK_FRAC`, read at call time.

    ``by_out`` is the state chosen by out acc alone (the K > 0 whose out-acc ratio is nearest
    ``out_frac``, ties the smaller K; ``reached`` when within the band), with its ``thk_ratio``
    and the ``thk_frac`` it is judged against: the claims about the trace at that state
    (bypass, suppressed) would hold by construction at a K picked with the trace's help.
    """
    out_frac = AUDIT_OUT_FRAC if out_frac is None else out_frac
    thk_frac = AUDIT_THK_FRAC if thk_frac is None else thk_frac
    ks = sorted(int(k) for k in by_k)
    if len(ks) < 2 or ks[0] != 0:
        raise ValueError(f"audit_state: needs K = 0 and at least one K > 0 (got K = {ks})")
    out0, thk0 = (by_k[0]["auto"][f]["mean"] for f in ("out_acc", "thk_leak"))
    band = audit_band(n, out_frac)
    if out0 <= 0 or thk0 <= 0:
        ev = f"K = 0 out acc {out0:.2f}, thk leak {thk0:.2f}: nothing memorised"
        nan = float("nan")
        return {"K": ks[-1], "reached": False, "out_ratio": nan, "thk_ratio": nan, "band": band, "evidence": ev,
                "by_out": {"K": ks[-1], "reached": False, "out_ratio": nan, "thk_ratio": nan,
                           "thk_frac": thk_frac, "evidence": ev}}
    ratio = {k: (by_k[k]["auto"]["out_acc"]["mean"] / out0, by_k[k]["auto"]["thk_leak"]["mean"] / thk0)
             for k in ks[1:]}

    def nearest(cands):
        return min(cands, key=lambda c: (abs(ratio[c][0] - out_frac), c))

    def target(o):
        return f"out acc {o:.2f} x K0 (target {out_frac:.2f} +- {band:.2f})"

    k = nearest([k for k in ks[1:] if ratio[k][1] >= thk_frac] or ks[1:])
    o, t = ratio[k]
    reached = t >= thk_frac and abs(o - out_frac) <= band
    ev = f"K = {k}: {target(o)}, thk leak {t:.2f} x K0 (needs >= {thk_frac:.2f})"
    k_out = nearest(ks[1:])
    o2, t2 = ratio[k_out]
    by_out = {"K": k_out, "reached": bool(abs(o2 - out_frac) <= band), "out_ratio": float(o2),
              "thk_ratio": float(t2), "thk_frac": thk_frac, "evidence": f"K = {k_out}: {target(o2)}"}
    return {"K": k, "reached": bool(reached), "out_ratio": float(o), "thk_ratio": float(t), "band": band,
            "evidence": ev, "by_out": by_out}


# ----------------------------------------------------------------------------- fixed-weight probes

def prefill_tables(bio: dict, k_audit: int, k_max: int, prefills: Sequence[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tables 3.2 and 3.3: out acc per arm with Delta_AB, and teacher-forced top-1 per prefill.

    One row per seed at K = 0 (", K=0"), the audited K (no suffix) and the largest K (", K=<k>",
    left out when it is the audited K).
    """
    rows, tf_rows = {}, {}
    for s, r in bio.items():
        # K = 0 first: at K = 0 the prefill arms show what the probe does before any
        # unlearning, so Delta_AB there is the probe's own offset
        for k, tag in ((0, ", K=0"), (k_audit, ""), (k_max, f", K={k_max}")):
            if tag and k == k_audit:
                continue
            sm = r["summary"][k]
            rows[f"seed {s}{tag}"] = {
                "AUTO": sm["auto"]["out_acc"]["mean"],
                **{m: sm["prefill"][m]["mean"] for m in prefills},
                "Delta_AB": sm["prefill"]["BIO"]["auto_minus"]["mean"],
                "Delta_AB low": sm["prefill"]["BIO"]["auto_minus"]["low"],
                "Delta_AB high": sm["prefill"]["BIO"]["auto_minus"]["high"],
            }
            tf_rows[f"seed {s}{tag}"] = {m: sm["tf"][m]["mean"] for m in prefills}
    return pd.DataFrame.from_dict(rows, orient="index"), pd.DataFrame.from_dict(tf_rows, orient="index")


# ----------------------------------------------------------------------------- bypass anatomy and parser conventions

ANATOMY_COLUMNS = {"n_bypass": "bypass cases", "n_both": "both channels",
                   "share_prefix_only": "share: answer = question prefix",
                   "len_bypass": "answer length, bypass", "len_both": "answer length, both"}


def anatomy_table(raw: dict, head_texts: Sequence[str]) -> tuple[dict, pd.DataFrame]:
    """Table 3.4: ``({"anatomy": {"K<k>": counts}}, frame)`` of one seed's bypass cases at every K.

    raw: ``{K: per-probe results}`` of a run (its "auto" arm); the frame adds the paper's row
    (K = 1600) and reader-facing column names.
    """
    anat = {k: canaries.anatomy(r["auto"]["answers"], head_texts, r["auto"]["out"], r["auto"]["thk"])
            for k, r in raw.items()}
    frame = pd.DataFrame.from_dict(anat, orient="index")
    frame.loc["paper (K=1600)"] = {
        "n_bypass": paper.number(CHAPTER, "bypass_count"),
        "n_both": np.nan,
        "share_prefix_only": paper.number(CHAPTER, "bypass_prefix_only_share"),
        "len_bypass": paper.number(CHAPTER, "len_bypass_chars"),
        "len_both": paper.number(CHAPTER, "len_both_chars"),
    }
    frame.index.name = "K"
    return {"anatomy": {f"K{k}": v for k, v in anat.items()}}, frame.rename(columns=ANATOMY_COLUMNS)


def bypass_examples(raw: dict, authors: Sequence[A.Author], limit: int = 4) -> pd.DataFrame:
    """Up to ``limit`` bypass cases (canary in the trace, not in the answer): K, author, answer."""
    examples = [(k, authors[i].name, r["auto"]["answers"][i].strip())
                for k, r in raw.items() for i in range(len(r["auto"]["out"]))
                if r["auto"]["thk"][i] and not r["auto"]["out"][i]][:limit]
    return pd.DataFrame(examples, columns=["K", "author", "answer after </think>"])


def parser_flip_table(texts: Sequence[str], canaries_: Sequence[str], close_tag: str, n_boot: int):
    """The same outputs scored with the missing tag sent to the trace or to the answer."""
    flip = canaries.parser_flip(texts, canaries_, np.arange(len(texts)), close_tag=close_tag, n_boot=n_boot)
    rows = {}
    for missing in canaries.MISSING:
        f = flip[missing]
        rows[f"missing -> {missing}"] = {
            "tag missing": f["tag_missing_rate"], "out_acc": f["out_acc"]["mean"], "thk_leak": f["thk_leak"]["mean"],
            "gap": f["gap"]["mean"], "gap_low": f["gap"]["low"], "gap_high": f["gap"]["high"]}
    return pd.DataFrame.from_dict(rows, orient="index"), flip



def parser_flip_section(drift: dict, raw: dict, canaries_: Sequence[str], close_tag: str,
                        n_boot: int) -> tuple[dict, dict, int]:
    """Table 3.5: ``(metrics, {K: flip table}, K judged)`` of the parser-convention section.

    drift: :func:`~memlab.experiments.ch03_canary_audit.stages.drift_outputs`; raw: the first
    seed's ``{K: per-probe results}``. The K judged is the first K > 0 with outputs (else the
    smallest). metrics: ``parser_flip`` (at that K, with its source), ``parser_flip_by_k`` and
    ``natural_tag_missing`` (share of the unsuppressed outputs without the closing tag, per K).
    """
    tables, flips = {}, {}
    for k, texts in sorted(drift["texts"].items()):
        tables[k], flips[k] = parser_flip_table(texts, canaries_, close_tag, n_boot)
    k_flip = min((k for k in flips if k > 0), default=min(flips))
    natural = {k: float(np.mean(r["auto"]["tag_missing"])) for k, r in raw.items()}
    metrics = {"parser_flip": {**flips[k_flip], "source": drift["source"], "K": k_flip},
               "parser_flip_by_k": {f"K{k}": f for k, f in flips.items()},
               "natural_tag_missing": {f"K{k}": v for k, v in natural.items()}}
    return metrics, tables, k_flip


# ----------------------------------------------------------------------------- templates, NPO variant, retain

def template_frame(runs: dict, close_tag: str) -> pd.DataFrame:
    """Table 3.6: per (template, K) out acc, thk leak, gap with its interval, share of non-empty traces."""
    rows = {}
    for t, r in runs.items():
        for k in r["summary"]:
            a = r["summary"][k]["auto"]
            rows[(t, k)] = {"out_acc": a["out_acc"]["mean"], "thk_leak": a["thk_leak"]["mean"],
                            "gap": a["gap"]["mean"], "gap_low": a["gap"]["low"], "gap_high": a["gap"]["high"],
                            "non-empty trace": np.mean(canaries.trace_nonempty(r["raw"][k]["auto"]["texts"],
                                                                               close_tag))}
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame.index.names = ["template", "K"]
    return frame


VARIANT_COLUMNS = ["out_acc", "thk_leak", "gap", "delta_ab", "qa_acc", "retain_acc"]


def variant_table(frame: pd.DataFrame, variant_summary: dict, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Table 3.8: ``(variant frame by K, side-by-side table)`` of NPO + retain term vs the paper's NPO.

    frame: :func:`ksweep_frame` of the main sweep; variant_summary: ``{K: summary}`` of the variant.
    """
    vframe = ksweep_frame({seed: variant_summary}).set_index("K")
    pframe = frame[frame.seed == seed].set_index("K").loc[vframe.index]
    table = (pd.concat({"paper's NPO": pframe[VARIANT_COLUMNS], "NPO + retain": vframe[VARIANT_COLUMNS]}, axis=1)
             .swaplevel(axis=1).sort_index(axis=1, level=0, sort_remaining=False)[VARIANT_COLUMNS])
    return vframe, table


def retain_examples_with_names(res: dict, generic: Sequence[A.GenericProbe], limit: int = 5) -> list[dict]:
    """Generic questions answered with a fictional author's name (up to ``limit``)."""
    r = res["retain"]
    rows = [{"question": g.question, "answer": a.strip(), "fictional name": f}
            for g, a, f in zip(generic, r["answers"], r["fictional"]) if f]
    return rows[:limit]


def retain_metrics(frame: pd.DataFrame, seed: int, k_max: int, raw_kmax: dict,
                   generic: Sequence[A.GenericProbe]) -> dict:
    """``retain``: the first seed's retain accuracy at K = 0 and the largest K, the drop in
    percentage points and up to five generic answers that name a fictional author."""
    r0 = frame[(frame.seed == seed) & (frame.K == 0)].retain_acc.item()
    rk = frame[(frame.seed == seed) & (frame.K == k_max)].retain_acc.item()
    names = retain_examples_with_names(raw_kmax, generic)
    return {"retain": {"acc_k0": r0, "acc_kmax": rk, "drop_pp": 100 * (r0 - rk), "fictional_examples": names}}


def regime_sentence(audit: dict, k0_summary: dict) -> str:
    """The closing summary's reading note: the audited K, whether the paper's state was reached, K = 0's Delta_AB."""
    state = "reached" if audit["reached"] else "not reached"
    dab0 = k0_summary["prefill"]["BIO"]["auto_minus"]["mean"]
    return (f"All of it is read at the audited K = {audit['K']}, where the paper's state is"
            f" {state} ({audit['evidence']}), beside the memorised adapter at K = 0, where"
            f" Delta_AB is already {dab0:+.2f} before any unlearning: a fixed-weight contrast"
            " after unlearning has to be read against that offset.")


def render_sections(book) -> list[str]:
    """Sections ``memlab render`` appends to this chapter: the audit on a real pretrained model.

    ``book``: the book folder; a run of the ``real`` setting (:data:`spec.REAL_SETTING`) published
    with ``--book-dir <book>/real`` is summarised from ``<book>/real/results/03_canary_audit.json``;
    without one the section says what the run costs and why it is not shown yet.
    """
    import json
    from pathlib import Path

    from memlab.report.pagekit import verdict_line

    from .spec import REAL_ESTIMATE_MIN, real_command

    path = Path(book) / "real" / "results" / f"{CHAPTER}.json"
    lines = ["## On a real pretrained model (SmolLM2-135M-Instruct)", ""]
    if not path.exists():
        lines += ["The audit above runs on a small model pre-trained here. The same code path, the paper "
                  "profile's, also runs on a real pretrained instruct model: SmolLM2-135M-Instruct "
                  "(134.5M parameters; its Q4_1 weights dequantised to float32), with its own chat template, "
                  "the think tags added as special tokens, LoRA memorisation of 10 fictional authors and NPO. "
                  f"Its cold run is estimated at about {REAL_ESTIMATE_MIN} minutes on 2 CPU cores; it has not "
                  "been published yet because its LoRA schedule must first be chosen from the K = 0 "
                  "memorisation alone, on an idle machine, as the small model's was. The tests run this path "
                  "at toy size on every change. To run it:", "",
                  "```bash", "memlab models add smollm2-135m-instruct",
                  real_command(), "```"]
        return ["\n".join(lines) + "\n"]
    res = json.loads(path.read_text())
    prov = res.get("provenance", {})
    lines += [f"The same audit on SmolLM2-135M-Instruct (Q4_1 weights dequantised to float32), run on "
              f"{prov.get('device', 'a CPU')} in {float(prov.get('wall_time_s', 0)) / 60:.0f} minutes. "
              "Verdicts by the same predicates and regime gates:", ""]
    lines += [verdict_line(v) for v in res.get("claims", [])]
    return ["\n".join(lines) + "\n"]
