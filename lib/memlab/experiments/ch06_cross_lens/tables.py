"""Chapter 6's tables: what the page records (``run.record(**...)``) and shows, as dicts and DataFrames.

One function per recorded metric group (:func:`vision_metrics`, :func:`lm_metrics`,
:func:`agreement_metrics`, :func:`published_gaps`, :func:`preregistration`) and per table the
page shows (:func:`hypotheses_table`, :func:`vision_tables`, :func:`lm_frame`,
:func:`tau_tests_table`, :func:`gaps_text`, :func:`question_summary`). Figures stay in the notebook.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from memlab.experiments import ch01_bn_illusion as ch1
from memlab.experiments import ch03_canary_audit as ch3
from memlab.report import paper

from .spec import CHAPTER, hypotheses

# ----------------------------------------------------------------------------- the hypotheses


def short_titles() -> dict[str, str]:
    """Hypothesis key -> its short title (``short:`` in the chapter's yaml), what readers see instead of keys."""
    out = paper.short_titles(CHAPTER)
    missing = sorted(set(hypotheses()) - set(out))
    if missing:
        raise ValueError(f"data/papers/{CHAPTER}.yaml: short: lacks titles for {missing}")
    return out


class HypothesesTable:
    """The pre-registered hypotheses as readers see them: one row each, the full text wrapped.

    In a notebook it renders as an HTML table (``table.memlab-cards``, styled by
    ``book/_static/memlab.css``) whose rows become cards on a narrow screen, each line labelled.
    ``.frame`` is the same content as a DataFrame (index "#" from 1; columns :attr:`COLUMNS`);
    ``index``, ``columns`` and ``[column]`` are the frame's.
    """

    COLUMNS = ["short title", "question", "hypothesis", "predicted", "direction"]

    def __init__(self, frame: pd.DataFrame):
        self.frame = frame

    @property
    def index(self) -> pd.Index:
        return self.frame.index

    @property
    def columns(self) -> pd.Index:
        return self.frame.columns

    def __getitem__(self, key):
        return self.frame[key]

    def __len__(self) -> int:
        return len(self.frame)

    def __repr__(self) -> str:
        return "\n".join(f"{n}. {r['short title']} (question {r['question']}, predicted {r['predicted']}): "
                         f"{r['hypothesis']}; direction: {r['direction']}" for n, r in self.frame.iterrows())

    def _repr_html_(self) -> str:
        from html import escape

        def cell(cls: str, label: str, body: str) -> str:
            return f'<td class="{cls}" data-label="{label}">{body}</td>'

        rows = []
        for n, r in self.frame.iterrows():
            rows.append(
                "<tr>" + cell("card-title", "Hypothesis", f'<strong>{n}. {escape(str(r["short title"]))}</strong>'
                       f'<span class="card-text">{escape(str(r["hypothesis"]))}</span>')
                + cell("card-short", "Question", escape(str(r["question"])))
                + cell("card-short", "Predicted", escape(str(r["predicted"])))
                + cell("card-direction", "Direction", escape(str(r["direction"]))) + "</tr>")
        head = "".join(f"<th>{h}</th>" for h in ("Hypothesis", "Question", "Predicted", "Direction"))
        return (f'<div class="memlab-cards-wrap"><table class="memlab-cards memlab-hypotheses">'
                f'<thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>')


def hypotheses_table() -> HypothesesTable:
    """The pre-registered hypotheses, one row each (numbered): short title, question, hypothesis, predicted, direction."""
    hyp = pd.DataFrame.from_dict(hypotheses(), orient="index").rename(columns={"text": "hypothesis"})
    hyp.insert(0, "short title", [short_titles()[k] for k in hyp.index])
    hyp.index = pd.RangeIndex(1, len(hyp) + 1, name="#")
    return HypothesesTable(hyp[HypothesesTable.COLUMNS])


def preregistration() -> dict:
    """When the hypotheses were committed, and whether they changed since: from git.

    {"commit", "date" (ISO, UTC) of the commit that added ``data/papers/06_cross_lens.yaml``,
    "unchanged": the file's ``hypotheses`` now equal those of that commit}; values are None
    where git or the history is not available (e.g. an exported copy of the book).
    """
    import subprocess

    import yaml

    from memlab.core.results import repo_root

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

# ----------------------------------------------------------------------------- vision lenses


def vision_record(table: pd.DataFrame) -> dict:
    """{norm: {method: {column: value}}} for the results JSON."""
    out: dict = {}
    for (norm, m), r in table.iterrows():
        out.setdefault(norm, {})[m] = {k: (bool(v) if isinstance(v, (bool, np.bool_)) else
                                           v if isinstance(v, str) else float(v)) for k, v in r.items()}
    return out


def vision_metrics(cfg, vis: dict) -> dict:
    """The vision lenses' metrics (``run.record(**...)``) from :func:`.stages.vision_lenses`'s result."""
    return {"sde_feature": cfg.sde_feature, "sde_sizes": vis["sizes"], "n_forget": vis["n_forget"],
            "illusion_set": vis["illusion"], "vision": vision_record(vis["table"]), "vision_wall_s": vis["wall_s"]}


VISION_SHOWN = ["BN mode", "Pre-F", "Post-F", "ΔF", "ReAUC", "OTR before", "OTR after", "SDE before", "SDE after",
                "ASR before", "ASR after"]


def vision_tables(table: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """{"BatchNorm": .., "GroupNorm control": ..} (those run): the shown columns, with SDE's verdict before/after.

    SDE's verdict is "in training" where OTR <= 50 %, else "out".
    """
    shown = table.assign(**{f"SDE {w}": np.where(table[f"OTR {w}"] <= 50, "in training", "out")
                            for w in ("before", "after")})
    norms = table.index.get_level_values(0)
    return {name: shown.loc[norm][VISION_SHOWN] for norm, name in (("bn", "BatchNorm"), ("gn", "GroupNorm control"))
            if norm in norms}

# ----------------------------------------------------------------------------- language lenses


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


def lm_metrics(lm: dict) -> dict:
    """The LM lenses' metrics (``run.record(**...)``) from :func:`.stages.lm_lenses`'s result (K keys as str)."""
    return {"lm_runs": {m: {str(k): r for k, r in by_k.items()} for m, by_k in lm["runs"].items()},
            "lm_audit_method": lm["audit_method"], "audit_k": lm["audit_k"], "k_values": lm["k_values"],
            "lm_ref_bits": lm["ref_bits_total"], "lm_wall_s": lm["wall_s"]}

# ----------------------------------------------------------------------------- same models as the chapters


def published_gaps(profile: str, table: pd.DataFrame | None, runs: dict | None, seed3: int) -> dict:
    """How far this page's numbers are from chapters 1 and 3's published pages (same models, same code).

    Compares Pre-F/Post-F of the BatchNorm models with chapter 1's ``table1`` and out acc / thk leak
    of the NPO sweep with chapter 3's ``ksweep`` of seed ``seed3``, where those chapters were published
    at ``profile`` beside this page. Returns {"01_bn_illusion": max |difference| or a note, "03_...": ...}.
    """
    from memlab.core.results import load_results, output_dir

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


GAP_UNITS = {"01_bn_illusion": "pp of forget accuracy", "03_canary_audit": "of out acc/thk leak"}


def gaps_text(gaps: dict) -> str:
    """One sentence per chapter compared by :func:`published_gaps` (its largest difference, or why none)."""
    return "; ".join(f"chapter {c[:2].lstrip('0')}: " + (f"{v:.3g} {GAP_UNITS[c]}" if isinstance(v, float) else v)
                     for c, v in gaps.items()) or "no chapter was looked at"

# ----------------------------------------------------------------------------- agreement


def tau_record(mat: dict | None) -> dict | None:
    """A tau_matrix as {"tau": {a: {b: v}}, "low": ..., "high": ...} (NaN kept as None)."""
    if mat is None:
        return None
    return {name: {a: {b: (None if pd.isna(v) else float(v)) for b, v in row.items()} for a, row in df.iterrows()}
            for name, df in mat.items()}


def agreement_metrics(cfg, agree: dict) -> dict:
    """The rank-agreement metrics (``run.record(**...)``) from :func:`.stages.agreement`'s result."""
    return {"tau_vision": tau_record(agree["vision"]), "tau_lm": tau_record(agree["lm"]),
            "tau_tests": agree["tests"], "n_boot": cfg.n_boot}


def tau_tests_table(agree: dict) -> pd.DataFrame:
    """The pre-registered tau tests, one row per hypothesis (its short title): tau or diff, interval, n."""
    names = short_titles()
    frame = pd.DataFrame(agree["tests"]).T.rename(columns={"tau_xy": "tau(x, y)", "tau_xz": "tau(x, z)",
                                                           "low": "95% low", "high": "95% high"})
    frame.index = [names.get(k, k) for k in frame.index]
    return frame.rename_axis("hypothesis")

# ----------------------------------------------------------------------------- the verdicts, question by question


VERDICT_WORDS = {paper.REPRODUCED: "held", paper.NOT_REPRODUCED: "did **not** hold",
                 paper.NOT_JUDGED: "could not be judged", paper.NOT_RUN: "was not run here",
                 paper.OUTSIDE_REGIME: "was outside the regime it was framed for",
                 paper.SEED_DEPENDENT: "depended on the seed"}


def question_summary(verdicts: list[dict]) -> str:
    """Markdown: one bullet per question with each hypothesis's verdict and its evidence."""
    hyp_q = {k: h["question"] for k, h in hypotheses().items()}
    lines = []
    for q in (1, 2, 3, 4):
        parts = [f"*{short_titles()[v['key']]}* {VERDICT_WORDS[v['verdict']]} ({v['evidence']})"
                 for v in verdicts if hyp_q[v["key"]] == q]
        lines.append(f"- **Question {q}.** " + "; ".join(parts) + ".")
    return "\n".join(lines)
