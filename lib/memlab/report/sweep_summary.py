"""The summary of a sweep folder (:mod:`memlab.run.sweep` runs it; pages, comparisons and stability read it).

``summary.json`` (and ``summary.png``) per group of non-seed parameters: per numeric metric the mean
and a Student-t 95% interval across runs, per claim how many runs reproduce it, and ``pooled``: one
verdict row per claim pooled over the group's seeds (:mod:`memlab.report.pooling`). It also keeps each run's
provenance (commit, chapter code, CPU and vector ISA, threads) and its own verdicts (``run_verdicts``;
``run_ungated``: a gated claim's own verdict where its regime gate failed), so a published summary can be compared seed by seed with another sweep (:mod:`memlab.report.stability`).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

from memlab.core.config import ConfigError
from memlab.report.paper import NOT_REPRODUCED, REPRODUCED

RUN_FILE = "run.json"  # written into each run folder: chapter, profile and the run's parameters
TIMING_FILE = "timing.json"  # in the sweep folder: one entry per invocation that executed runs


def params_key(obj: Any) -> str:
    """``obj`` as canonical JSON (sorted keys, no spaces): equal parameters give equal keys."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def flatten(metrics: Any, prefix: str = "") -> dict[str, float]:
    """Numeric scalars of a nested dict as ``{"a.b": x}`` (bools, lists and non-finite values left out)."""
    out = {}
    if isinstance(metrics, dict):
        for k, v in metrics.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(metrics, (int, float)) and not isinstance(metrics, bool) and math.isfinite(metrics):
        out[prefix[:-1]] = float(metrics)
    return out


def interval(values: Sequence[float]) -> dict:
    """Mean, sample std and the Student-t 95% interval of the mean (None for fewer than 2 runs)."""
    import numpy as np
    from scipy import stats

    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    if len(x) < 2:
        return {"n": len(x), "mean": mean, "std": None, "ci95": None}
    std = float(x.std(ddof=1))
    if std == 0:
        return {"n": len(x), "mean": mean, "std": 0.0, "ci95": [mean, mean]}
    lo, hi = stats.t.interval(0.95, len(x) - 1, loc=mean, scale=std / math.sqrt(len(x)))
    return {"n": len(x), "mean": mean, "std": std, "ci95": [float(lo), float(hi)]}


def summarize(sweep_dir: Path) -> dict:
    """The summary of a sweep folder: runs grouped by their non-seed parameters (see module doc)."""
    from memlab.report.pooling import k_of_n, pool_claims

    sweep_dir = Path(sweep_dir)
    try:
        spec = json.loads((sweep_dir / "sweep.json").read_text())
    except (OSError, ValueError):
        raise ConfigError(f"parameter 'summary': {str(sweep_dir)!r} is not a sweep folder "
                          "(no sweep.json)") from None
    chapter, groups = spec["chapter"], {}
    failed = sorted(p.stem for p in (sweep_dir / "failed").glob("*.json"))
    runs, provenance, run_verdicts, run_ungated = [], {}, {}, {}
    for rid in spec["runs"]:
        folder = sweep_dir / rid
        try:  # a run folder exists only when complete; anything else is not a run of this sweep
            params = json.loads((folder / RUN_FILE).read_text())["params"]
            res = json.loads((folder / "results" / f"{chapter}.json").read_text())
        except (OSError, ValueError, KeyError):
            continue
        runs.append(rid)
        prov = res.get("provenance", {})
        provenance[rid] = {"params": params, "git_commit": prov.get("git_commit"),
                           "chapter_code": prov.get("chapter_code"), "device": prov.get("device"),
                           "cpu_threads": prov.get("cpu_threads"),
                           "date": prov.get("date"), "wall_time_s": prov.get("wall_time_s")}
        # each run's own verdicts, so a published summary alone can be compared seed by seed
        # (memlab.report.stability) after the run folders are gone
        run_verdicts[rid] = {c["key"]: c["verdict"] for c in res.get("claims", []) if "key" in c}
        run_ungated[rid] = {c["key"]: c["ungated"]["verdict"] for c in res.get("claims", [])
                            if "key" in c and isinstance(c.get("ungated"), dict)}  # behind a failed gate
        gkey = params_key({k: v for k, v in params.items() if not is_seed(k)})
        g = groups.setdefault(gkey, {"params": json.loads(gkey), "runs": [], "metrics": {}, "claims": {},
                                     "pooled": []})
        g["runs"].append(rid)
        g["pooled"].append(res.get("claims", []))  # this run's verdict rows; pooled below
        for k, v in flatten(res.get("metrics", {})).items():
            g["metrics"].setdefault(k, []).append(v)
        for c in res.get("claims", []):
            entry = g["claims"].setdefault(c["key"], {"claim": c.get("claim", ""),
                                                      "kind": c.get("kind", "claim"), "verdicts": {}})
            entry["verdicts"][c["verdict"]] = entry["verdicts"].get(c["verdict"], 0) + 1
    for g in groups.values():
        n = len(g["runs"])
        # one verdict per claim over the group's seeds (memlab.report.pooling), beside the per-run counts
        g["pooled"] = pool_claims(g["pooled"])
        # a metric missing from some runs is summarised over the runs that have it (its n says how many)
        g["metrics"] = {k: interval(v) for k, v in sorted(g["metrics"].items())}
        for entry in g["claims"].values():
            # n counts the runs that judged the claim; other verdicts (not run at this profile,
            # not judged) are listed beside it, and runs without the claim at all too
            v = entry["verdicts"]
            k, judged = v.get(REPRODUCED, 0), v.get(REPRODUCED, 0) + v.get(NOT_REPRODUCED, 0)
            missing = [f"{n - sum(v.values())} without this claim"] if sum(v.values()) < n else []
            entry.update(reproduced=k, n=judged,
                         text=k_of_n([name for name, c in v.items() for _ in range(c)], missing))
    return {"chapter": chapter, "profile": spec["profile"], "axes": spec["axes"],
            "interval": "mean +- Student-t 95% interval of the mean across runs "
                        "(scipy.stats.t.interval, n-1 dof)",
            "runs_done": runs, "runs_failed": failed,
            "runs_missing": len(spec["runs"]) - len(runs) - len(failed),
            "groups": list(groups.values()), "provenance": provenance, "run_verdicts": run_verdicts,
            "run_ungated": run_ungated,
            "timing": timing(sweep_dir)}


def is_seed(name: str) -> bool:
    """Whether a parameter name is a seed (``seed``, ``x.seed``, ``data_seed``): runs differing only in
    seeds are repeats of one setting."""
    return name == "seed" or name.endswith(".seed") or name.endswith("_seed")


def timing(sweep_dir: Path) -> list[dict]:
    """The sweep's invocations that executed runs (:func:`memlab.run.sweep._record_timing`), oldest first."""
    try:
        return json.loads((sweep_dir / TIMING_FILE).read_text())
    except (OSError, ValueError):
        return []


def write_summary(sweep_dir: Path) -> dict:
    """:func:`summarize`, saved as ``summary.json`` and ``summary.png`` in the sweep folder."""
    from memlab.core.results import write_json_atomic

    summary = summarize(sweep_dir)
    write_json_atomic(Path(sweep_dir) / "summary.json", summary)
    summary_figure(summary, Path(sweep_dir) / "summary.png")
    return summary


def summary_figure(summary: dict, path: Path) -> Path:
    """Per claim, the share of runs giving each verdict, pooled over the groups (book style).

    One stacked bar per claim: reproduced, not reproduced, outside the paper's regime, not judged,
    seed-dependent, not run at this profile; the legend names only the verdicts some run gave.
    A sweep over other parameters (forget classes) is pooled here; its table shows each setting.
    """
    import matplotlib.pyplot as plt
    import numpy as np
    import seaborn as sns

    from memlab.report import plotting
    from memlab.report.paper import NOT_JUDGED, NOT_RUN, OUTSIDE_REGIME, SEED_DEPENDENT, VERDICTS

    groups = summary["groups"]
    claims = sorted({k for g in groups for k in g["claims"]}, reverse=True)  # a-z from the top
    runs = sum(len(g["runs"]) for g in groups)
    fig, ax = plotting.figure("wide")
    if not claims:
        ax.text(0.5, 0.5, "no claims in these runs", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    else:
        pal = sns.color_palette(plotting.PALETTE)
        # one colour per verdict, every verdict named (a zip over fewer colours would drop the last
        # verdicts): judged ones in the colour-blind palette's blue and vermilion, outside the regime
        # in its reddish purple, seed-dependent in its yellow, undecided ones in greys
        colours = {REPRODUCED: pal[0], NOT_REPRODUCED: pal[3], OUTSIDE_REGIME: pal[4],
                   NOT_JUDGED: "0.6", SEED_DEPENDENT: pal[8], NOT_RUN: "0.88"}
        left = np.zeros(len(claims))
        given = [v for v in VERDICTS if any(g["claims"][c].get("verdicts", {}).get(v)
                                            for g in groups for c in g["claims"])]
        for verdict in given:
            share = np.array([sum(g["claims"].get(c, {}).get("verdicts", {}).get(verdict, 0) for g in groups)
                              for c in claims]) / max(1, runs)
            ax.barh(np.arange(len(claims)), share, left=left, height=0.7, color=colours[verdict],
                    label=verdict, edgecolor="white", linewidth=0.5)
            left += share
        ax.set_yticks(np.arange(len(claims)), claims)
        ax.set_xlim(0, 1)
        ax.set_xlabel(f"share of the {runs} runs")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=min(4, max(1, len(given))), frameon=False)
    varied = ", ".join(summary.get("axes", {})) or "nothing"
    ax.set_title(f"{summary['chapter']} at {summary['profile']}: verdicts over {runs} runs "
                 f"(varied: {varied})")
    fig.savefig(path, metadata={"Software": None}, bbox_inches="tight")
    plt.close(fig)
    return path
