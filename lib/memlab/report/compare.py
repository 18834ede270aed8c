"""``memlab compare A B``: do two runs of a chapter agree? Verdicts, metrics within their bands, provenance.

    memlab compare A B [--json PATH|-] [--strict]
    memlab compare CHAPTER [--json PATH|-] [--strict]

A and B are each a results file (``<book>/results/<chapter>.json``), a run folder (a ``--book-dir``
folder, a sweep's run folder: anything holding ``results/``), a sweep folder (``sweep.json`` and
its run folders) or a sweep summary (``summary.json``, ``book/robustness/<chapter>.json``). With one
argument, a chapter id (as ``memlab run`` takes it), the user's newest run of that chapter outside the
published book is compared with the published page (:func:`latest_run`).

The functions below take loaded dicts (:func:`side_from_results`, :func:`side_from_summary`,
:func:`compare_sides`, :func:`lines`), so they are tested without files; :func:`load` and
:func:`compare_paths` read the folders.

What is compared, and by which rule each band is chosen (each difference names its rule):

* **verdicts** of every claim (the claim's text; a sweep's verdict is its pooled verdict where the
  summary carries one, :mod:`memlab.report.pooling`, else the verdict all its runs share, else their mix;
  the runs' "reproduced in k of n" is shown beside it);
* **claim margins**, where both verdict rows carry ``margin`` and ``band`` (half-width, the
  margin's units; ``margins`` for a check of several conditions, paired by position; a sweep's
  pooled row, :mod:`memlab.report.pooling`): they differ outside noise when ``|margin_A - margin_B| >
  sqrt(band_A^2 + band_B^2)`` (two independent measurements, each with its own band);
* **plain metrics** (:func:`memlab.report.sweep_summary.flatten`): with a between-seed standard deviation ``s``
  (from a side that is a sweep, else from the book's published seed sweep of the chapter at the same
  profile) the band is ``t_{0.975, dof} * s * sqrt(1/n_A + 1/n_B)``, ``n`` the runs behind each
  side's number (1 for a run, the sweep's n for a sweep's mean): the 95% interval of the
  difference of two means of seeds. Without a spread, a difference is listed under "no band
  known" with its relative size and counted apart; no band is invented;
* **provenance**: CPU, vector ISA (torch's ATen capability), threads, code (commit, chapter
  fingerprint, versions), profile and every parameter that differs;
* **cost** (wall and CPU time, memory, models trained or cached) is shown, never compared.

The exit code (:func:`exit_code`) is 0 when no verdict changed and no metric or margin differs
outside its band, else 1 (with ``strict``, differences with no band known count too); bad input
is a ``ValueError`` (exit 2 on the command line).
"""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
from pathlib import Path
from typing import Any, Sequence

from memlab.core.chapters import CHAPTERS
from memlab.core.config import repo_root
from memlab.report.pooling import row_margins
from memlab.report.sweep_summary import is_seed
from memlab.report.sweep_summary import flatten

SHOWN = 15  # terminal lines per list at most; the JSON has every row
CONFIDENCE = 0.975  # two-sided 95% band
# provenance fields that are not "where the numbers came from" (compared elsewhere or not at all)
_NOT_PROVENANCE = ("date", "wall_time_s", "cost")
_PROVENANCE_NAMES = {"cpu": "CPU", "isa": "vector ISA (ATen capability)", "cpu_threads": "threads",
                     "torch_compile": "torch.compile of long training loops",
                     "git_commit": "code commit", "chapter_code": "chapter code fingerprint",
                     "memlab_version": "memlab version", "profile": "profile", "python": "Python",
                     "torch": "torch", "transformers": "transformers", "numpy": "numpy",
                     "device": "device"}
# the run's own cost (memlab.core.costs.run_cost) in words
_RUN_COST = {"cpu_s": "CPU time (s)", "peak_memory_mb": "peak memory (MB)", "trained": "models trained",
             "loaded": "models loaded from the cache", "train_cpu_s": "training CPU time (s)"}
# a metric's path is a cost (time, memory, cache use), never a result, when a segment is "cost" or
# its last segment holds one of these words: times differ with the machine's load, not the code
_COST_WORDS = {"wall", "s", "seconds", "time", "cached", "memory", "mb", "loaded", "trained"}


# ----------------------------------------------------------------------------- one side

def is_cost(path: str) -> bool:
    """Whether a flattened metric path (``a.b.c``) is a timing or cost field (``cost.this_run_s``)."""
    parts = path.split(".")
    return "cost" in parts or bool(_COST_WORDS & set(re.split(r"[_ ]+", parts[-1].lower())))


def _split_device(device: str | None) -> dict[str, str]:
    """``cpu (AMD EPYC, AVX512)`` -> CPU and vector ISA (:func:`memlab.core.results.cpu_name`); else the device."""
    m = re.match(r"^cpu \((.*), ([A-Za-z0-9_.-]+)\)$", device or "")
    if m:
        return {"cpu": m.group(1), "isa": m.group(2)}
    return {"device": device} if device else {}


def _provenance(prov: dict) -> dict[str, Any]:
    """The comparable fields of a results file's provenance (device split into CPU and ISA)."""
    out = _split_device(prov.get("device"))
    for k, v in prov.items():
        if k in _NOT_PROVENANCE or k == "device":
            continue
        if isinstance(v, dict):  # e.g. kernel settings recorded as a group (ATEN_CPU_CAPABILITY, ...)
            out.update({f"{k} {sub}": x for sub, x in v.items() if not isinstance(x, (dict, list))})
        elif not isinstance(v, list):
            out[k] = v
    return out


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _claim_row(c: dict, across: str = "") -> dict:
    """A verdict row's comparable part: text, verdict, its margins (``[{margin, band, what}]``, one per
    condition of the check, :func:`memlab.report.pooling.row_margins`; ``[]`` for a row without them) and,
    for a sweep, how its runs voted (``across``)."""
    margins = [{"margin": float(m["margin"]), "band": float(m["band"]), "what": m.get("what", "")}
               for m in row_margins(c) if _finite(m.get("margin")) and _finite(m.get("band"))]
    return {"claim": c.get("claim", ""), "verdict": c.get("verdict"), "kind": c.get("kind", "claim"),
            "margins": margins, "across": across}


def side_from_results(res: dict, label: str) -> dict:
    """One run's results (the dict ``results/<chapter>.json`` holds) as a side of a comparison.

    Returns ``{label, kind: "run", chapter, profile, n: 1, params, claims: {key: row},
    metrics: {path: {mean, std: None, n: 1}}, cost: {name: value}, provenance: {field: value}}``.
    """
    if not isinstance(res, dict) or "chapter" not in res or not isinstance(res.get("metrics"), dict):
        raise ValueError(f"{label}: not a chapter's results (a results file has chapter, metrics, claims "
                         "and provenance)")
    prov = res.get("provenance") or {}
    flat = flatten(res["metrics"])
    cost = {"wall time (s)": prov["wall_time_s"]} if isinstance(prov.get("wall_time_s"), (int, float)) else {}
    for k, v in flatten({k: v for k, v in (prov.get("cost") or {}).items() if k != "keys"}).items():
        if k in _RUN_COST:  # threads are provenance; the wall time is the line above
            cost[_RUN_COST[k]] = v
    cost.update({f"metric {_metric_name(k)}": v for k, v in flat.items() if is_cost(k)})
    params = {k: v for k, v in (res.get("params") or {}).items() if k not in ("chapter", "profile")}
    return {"label": label, "kind": "run", "chapter": res["chapter"], "profile": res.get("profile"), "n": 1,
            "params": params,
            "claims": {c["key"]: _claim_row(c) for c in res.get("claims", []) if "key" in c},
            "metrics": {k: {"mean": v, "std": None, "n": 1} for k, v in flat.items() if not is_cost(k)},
            "cost": cost, "provenance": _provenance(prov)}


def _group_verdict(entry: dict) -> str:
    """A sweep's verdict of one claim, from a summary without pooled rows: the verdict all its runs
    share, else their mix ("mixed over 3 runs: 2 reproduced, 1 not judged")."""
    counts = {v: c for v, c in (entry.get("verdicts") or {}).items() if c}
    if len(counts) == 1:
        return next(iter(counts))
    shares = ", ".join(f"{c} {v}" for v, c in sorted(counts.items(), key=lambda vc: (-vc[1], vc[0])))
    return f"mixed over {sum(counts.values())} runs: {shares}"


def pick_group(summary: dict, params: dict | None, label: str) -> dict:
    """The group of a sweep summary to compare: the one whose (non-seed) parameters all equal ``params``.

    A summary of one group gives it whatever ``params`` are. Raises ValueError when no group, or more
    than one, matches (naming the groups' parameters).
    """
    groups = summary.get("groups") or []
    if not groups:
        raise ValueError(f"{label}: the sweep has no completed runs (no group in its summary)")
    if len(groups) == 1:
        return groups[0]
    params = params or {}
    hits = [g for g in groups if all(k in params and params[k] == v for k, v in g["params"].items())]
    most = max((len(g["params"]) for g in hits), default=0)
    hits = [g for g in hits if len(g["params"]) == most]  # the most specific setting that matches
    if len(hits) == 1:
        return hits[0]
    settings = "; ".join(_params_words(g["params"]) or "defaults" for g in groups)
    raise ValueError(f"{label}: the sweep has {len(groups)} settings ({settings}) and "
                     f"{'none' if not hits else 'several'} match the other side's parameters; compare with "
                     "one of its run folders instead")


def side_from_summary(summary: dict, label: str, params: dict | None = None,
                      runs: dict[str, dict] | None = None, group: dict | None = None) -> dict:
    """One group of a sweep summary (:func:`memlab.report.sweep_summary.summarize`) as a side of a comparison.

    ``group`` is one of ``summary["groups"]``; without it ``params`` chooses it (:func:`pick_group`).
    ``runs`` (run id -> results) are the results of the sweep's runs where its folder holds them
    (their provenance: CPU, threads, versions; their full parameters), else the summary's own
    provenance (commit, fingerprint) is used. Metrics are the group's means with their between-seed
    std and n; the shape is :func:`side_from_results`'s.
    """
    if not isinstance(summary, dict) or "groups" not in summary or "chapter" not in summary:
        raise ValueError(f"{label}: not a sweep summary (a summary has chapter, groups and provenance)")
    group = group or pick_group(summary, params, label)
    rids = list(group.get("runs", []))
    runs = [(runs or {})[r] for r in rids if r in (runs or {})]
    provs = [r.get("provenance") or {} for r in runs] or [(summary.get("provenance") or {}).get(r, {})
                                                          for r in rids]
    fields: dict[str, list] = {}
    for p in provs:
        for k, v in _provenance(p).items():
            if k != "params" and v not in fields.setdefault(k, []):
                fields[k].append(v)
    prov = {"profile": summary.get("profile"),
            **{k: v[0] if len(v) == 1 else "; ".join(map(_fmt, v)) for k, v in fields.items()}}
    base = {k: v for k, v in ((runs[0].get("params") or {}) if runs else {}).items()
            if k not in ("chapter", "profile") and not is_seed(k)}
    params_out = {**base, **group.get("params", {})}
    seeds: dict[str, list] = {}
    for rid in rids:
        for k, v in ((summary.get("provenance") or {}).get(rid, {}).get("params") or {}).items():
            if is_seed(k):
                seeds.setdefault(k, []).append(v)
    params_out.update({k: v[0] if len(v) == 1 else v for k, v in seeds.items()})
    # a sweep's cost is the mean per run, under the names a run's cost has (so the two line up)
    per_run = [side_from_results(r, label)["cost"] for r in runs] or [
        {"wall time (s)": p["wall_time_s"]} for p in provs if isinstance(p.get("wall_time_s"), (int, float))]
    cost = {k: sum(c[k] for c in per_run if k in c) / sum(k in c for c in per_run)
            for k in dict.fromkeys(k for c in per_run for k in c)}
    timing = [t.get("wall_s") for t in summary.get("timing") or [] if isinstance(t.get("wall_s"), (int, float))]
    if timing:
        cost["whole sweep, wall time (s)"] = sum(timing)
    metrics, n = {}, len(rids) or 1
    for k, iv in (group.get("metrics") or {}).items():
        if not isinstance(iv, dict) or not isinstance(iv.get("mean"), (int, float)):
            continue
        if is_cost(k):
            cost.setdefault(f"metric {_metric_name(k)}", iv["mean"])
        else:
            metrics[k] = {"mean": float(iv["mean"]), "std": iv.get("std"), "n": int(iv.get("n") or 1)}
    # the pooled verdict row of each claim (memlab.report.pooling: mean margin over the seeds, its band)
    # where the summary has one; an older summary gives the runs' shared verdict or their mix
    pooled = {r["key"]: r for r in group.get("pooled") or [] if isinstance(r, dict) and "key" in r}
    claims = {}
    for key, entry in (group.get("claims") or {}).items():
        across = entry.get("text", "")
        claims[key] = (_claim_row(pooled[key], across) if key in pooled
                       else {**_claim_row(entry, across), "verdict": _group_verdict(entry)})
    claims.update({k: _claim_row(r, r.get("across", "")) for k, r in pooled.items() if k not in claims})
    return {"label": label, "kind": "sweep", "chapter": summary["chapter"], "profile": summary.get("profile"),
            "n": n, "params": params_out, "claims": claims, "metrics": metrics, "cost": cost,
            "provenance": prov}


def spread_from_summary(summary: dict, params: dict | None, label: str) -> dict:
    """Between-seed std per metric of a seed sweep, ``{path: {std, n}}`` (only metrics with n >= 2)."""
    group = pick_group(summary, params, label)
    return {k: {"std": float(iv["std"]), "n": int(iv["n"])} for k, iv in (group.get("metrics") or {}).items()
            if isinstance(iv, dict) and isinstance(iv.get("std"), (int, float)) and (iv.get("n") or 0) >= 2}


# ----------------------------------------------------------------------------- comparing two sides

def _t(dof: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(CONFIDENCE, dof))


def metric_band(a: dict, b: dict, spread: dict | None = None, spread_label: str = "") -> tuple[float, str] | None:
    """The 95% band on ``b.mean - a.mean`` and the rule that gave it, or None when no spread is known.

    ``a`` and ``b`` are ``{mean, std, n}`` (std None for one run). A side with n >= 2 and a std gives
    the between-seed spread (both: pooled, n_A + n_B - 2 dof); else ``spread`` (``{std, n}`` of the
    book's seed sweep, n - 1 dof). Band: ``t * s * sqrt(1/n_A + 1/n_B)``.
    """
    sides = [x for x in (a, b) if x.get("std") is not None and x.get("n", 1) >= 2]
    if sides:
        dof = sum(x["n"] - 1 for x in sides)
        s = math.sqrt(sum((x["n"] - 1) * x["std"] ** 2 for x in sides) / dof)
        rule = ("between-seed spread of both sweeps (pooled)" if len(sides) == 2 else
                f"between-seed spread of {'A' if sides[0] is a else 'B'} (a sweep of {sides[0]['n']} runs)")
    elif spread is not None:
        s, dof = spread["std"], spread["n"] - 1
        rule = f"between-seed spread of {spread_label or 'the seed sweep'} ({spread['n']} runs)"
    else:
        return None
    return _t(dof) * s * math.sqrt(1 / a.get("n", 1) + 1 / b.get("n", 1)), rule


def _relative(a: float, b: float) -> float | None:
    big = max(abs(a), abs(b))
    return None if big == 0 else abs(b - a) / big


def compare_sides(a: dict, b: dict, spread: dict[str, dict] | None = None, spread_label: str = "") -> dict:
    """Every difference between two sides (:func:`side_from_results` / :func:`side_from_summary`).

    ``spread`` (:func:`spread_from_summary`) is the book's seed sweep of the chapter, used for a
    metric that neither side carries a spread for. Returns a JSON-able report: ``verdicts_changed``
    (claim text, both verdicts), ``margins`` (outside / inside their bands), ``metrics``
    (``outside_band``, ``inside_band``, ``no_band``, ``identical``, ``only_a``, ``only_b``),
    ``provenance`` and ``parameters`` (fields that differ), ``cost`` (both sides), ``differs``.
    """
    if a["chapter"] != b["chapter"]:
        raise ValueError(f"A is chapter {a['chapter']} and B is chapter {b['chapter']}: compare two runs of "
                         "one chapter")
    spread = spread or {}
    changed = []
    for key in sorted(set(a["claims"]) | set(b["claims"])):
        ca, cb = a["claims"].get(key), b["claims"].get(key)
        va, vb = (ca or {}).get("verdict") or "absent", (cb or {}).get("verdict") or "absent"
        if va != vb:
            changed.append({"key": key, "claim": (ca or cb)["claim"], "a": va, "b": vb,
                            "across_a": (ca or {}).get("across", ""), "across_b": (cb or {}).get("across", "")})
    margins = {"outside_band": [], "inside_band": []}
    for key in sorted(set(a["claims"]) & set(b["claims"])):
        ma, mb = a["claims"][key]["margins"], b["claims"][key]["margins"]
        if not ma or len(ma) != len(mb):  # no margins, or checks of other shapes: nothing to pair
            continue
        for x, y in zip(ma, mb):  # one row per condition of the check, paired by position
            band = math.hypot(x["band"], y["band"])
            row = {"key": key, "claim": a["claims"][key]["claim"], "what": x["what"] or y["what"],
                   "a": x["margin"], "b": y["margin"], "difference": y["margin"] - x["margin"], "band": band,
                   "rule": "the verdict rows' bands: sqrt(band_A^2 + band_B^2)"}
            margins["outside_band" if abs(row["difference"]) > band else "inside_band"].append(row)
    metrics = {"outside_band": [], "inside_band": [], "no_band": [], "identical": 0,
               "only_a": sorted(set(a["metrics"]) - set(b["metrics"])),
               "only_b": sorted(set(b["metrics"]) - set(a["metrics"]))}
    for key in sorted(set(a["metrics"]) & set(b["metrics"])):
        ma, mb = a["metrics"][key], b["metrics"][key]
        diff = mb["mean"] - ma["mean"]
        # a sweep's mean of equal values may differ from them in the last bits: that is equality
        if math.isclose(ma["mean"], mb["mean"], rel_tol=1e-12, abs_tol=1e-15):
            metrics["identical"] += 1
            continue
        row = {"metric": key, "a": ma["mean"], "b": mb["mean"], "difference": diff,
               "relative": _relative(ma["mean"], mb["mean"])}
        band = metric_band(ma, mb, spread.get(key), spread_label)
        if band is None:
            metrics["no_band"].append(row)
            continue
        row.update(band=band[0], rule=band[1])
        metrics["outside_band" if abs(diff) > band[0] else "inside_band"].append(row)
    metrics["no_band"].sort(key=lambda r: -(r["relative"] or 0))
    report = {"chapter": a["chapter"],
              "a": {k: a[k] for k in ("label", "kind", "profile", "n")},
              "b": {k: b[k] for k in ("label", "kind", "profile", "n")},
              "verdicts_compared": len(set(a["claims"]) | set(b["claims"])), "verdicts_changed": changed,
              "margins": margins, "metrics": metrics,
              "provenance": _differences(a["provenance"], b["provenance"]),
              "parameters": _differences(a["params"], b["params"]),
              "not_recorded": {"provenance": _unrecorded(a["provenance"], b["provenance"]),
                               "parameters": _unrecorded(a["params"], b["params"])},
              "cost": {"a": a["cost"], "b": b["cost"]}}
    report["differs"] = bool(changed or margins["outside_band"] or metrics["outside_band"])
    return report


def _differences(a: dict, b: dict) -> list[dict]:
    """Fields both sides record whose values differ."""
    return [{"field": k, "a": a[k], "b": b[k]} for k in sorted(set(a) & set(b), key=str) if a[k] != b[k]]


def _unrecorded(a: dict, b: dict) -> dict[str, list[str]]:
    """Fields only one side records (a sweep summary keeps no CPU, threads or unswept parameters)."""
    return {"a": sorted(set(b) - set(a), key=str), "b": sorted(set(a) - set(b), key=str)}


def exit_code(reports: Sequence[dict], strict: bool = False) -> int:
    """0 when no report differs (no verdict changed, nothing outside its band), else 1; with ``strict``
    a difference with no band known counts as one too."""
    return int(any(r["differs"] or (strict and r["metrics"]["no_band"]) for r in reports))


# ----------------------------------------------------------------------------- words

def _fmt(v: Any) -> str:
    """A value for reading: numbers to 4 significant digits, lists joined, None as 'not recorded'."""
    if v is None:
        return "not recorded"
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, dict):
        return "; ".join(f"{k} {_fmt(x)}" for k, x in v.items())
    return str(v)


def _params_words(params: dict) -> str:
    return ", ".join(f"{k} {_fmt(v)}" for k, v in params.items())


def _field_name(key: str) -> str:
    """A provenance field in words: its name, or the key (a grouped one, "kernels ATEN_CPU_CAPABILITY",
    keeps its variable's spelling)."""
    return _PROVENANCE_NAMES.get(key) or (key if " " in key else key.replace("_", " "))


def _metric_name(path: str) -> str:
    return path.replace(".", " / ")


def _capped(rows: list[str], what: str) -> list[str]:
    if len(rows) <= SHOWN:
        return rows
    return rows[:SHOWN] + [f"    ... and {len(rows) - SHOWN} more {what} (all of them in --json)"]


def _side_words(s: dict) -> str:
    what = "a run" if s["kind"] == "run" else f"a sweep of {s['n']} runs"
    return f"{s['label']} ({what}, profile {s['profile'] or 'not recorded'})"


def lines(report: dict) -> list[str]:
    """The terminal view of one report (:func:`compare_sides`): plain sentences, every band's rule named."""
    m, g = report["metrics"], report["margins"]
    out = [f"Chapter {report['chapter']}: {CHAPTERS[report['chapter']].title}" if report["chapter"] in CHAPTERS
           else f"Chapter {report['chapter']}",
           f"  A: {_side_words(report['a'])}", f"  B: {_side_words(report['b'])}", ""]
    ch = report["verdicts_changed"]
    out.append(f"Verdicts changed: {len(ch)} of {report['verdicts_compared']} claims")
    out += [f"  - {r['claim']}: A {r['a']}" + (f" ({r['across_a']})" if r["across_a"] else "")
            + f", B {r['b']}" + (f" ({r['across_b']})" if r["across_b"] else "") for r in ch]
    if g["outside_band"] or g["inside_band"]:
        out.append(f"Claim margins outside their band: {len(g['outside_band'])} "
                   f"(inside: {len(g['inside_band'])}; band: the verdict rows' bands combined)")
        out += [f"  - {r['claim']}" + (f" ({r['what']})" if r["what"] else "")
                + f": margin A {_fmt(r['a'])}, B {_fmt(r['b'])} (difference {r['difference']:+.3g}, "
                f"band \u00b1{r['band']:.3g})" for r in g["outside_band"]]
    compared = len(m["outside_band"]) + len(m["inside_band"]) + len(m["no_band"]) + m["identical"]
    out.append(f"Metrics outside their band: {len(m['outside_band'])} of {compared} compared")
    out += _capped([f"  - {_metric_name(r['metric'])}: A {_fmt(r['a'])}, B {_fmt(r['b'])} (difference "
                    f"{r['difference']:+.3g}, band \u00b1{r['band']:.3g} from the {r['rule']})"
                    for r in m["outside_band"]], "metrics outside their band")
    rules = sorted({r["rule"] for r in m["inside_band"]})
    out.append(f"Metrics inside their band: {len(m['inside_band'])}"
               + (f" (band from the {'; '.join(rules)})" if rules else ""))
    out.append(f"Metrics identical: {m['identical']}")
    if m["no_band"]:
        out.append(f"Metrics that differ with no band known: {len(m['no_band'])} (counted apart: no seed sweep of "
                   "this chapter at this profile gives their spread; largest relative differences first)")
        out += _capped([f"  - {_metric_name(r['metric'])}: A {_fmt(r['a'])}, B {_fmt(r['b'])} (difference "
                        f"{r['difference']:+.3g}"
                        + (f", {100 * r['relative']:.3g}% of the larger" if r["relative"] is not None else "")
                        + ")" for r in m["no_band"]], "metrics with no band")
    for side in ("a", "b"):
        if m[f"only_{side}"]:
            out.append(f"Metrics only in {side.upper()}: {len(m[f'only_{side}'])} ("
                       + ", ".join(_metric_name(k) for k in m[f"only_{side}"][:5])
                       + (", ..." if len(m[f"only_{side}"]) > 5 else "") + ")")
    out.append("")
    prov, params = report["provenance"], report["parameters"]
    out.append("Provenance differences:" + ("" if prov or params else " none"))
    out += [f"  - {_field_name(r['field'])}: A {_fmt(r['a'])}, "
            f"B {_fmt(r['b'])}" for r in prov]
    out += [f"  - parameter {r['field']}: A {_fmt(r['a'])}, B {_fmt(r['b'])}" for r in params]
    for side in ("a", "b"):
        fields = [_field_name(k) for k in report["not_recorded"]["provenance"][side]]
        n_params = len(report["not_recorded"]["parameters"][side])
        if fields or n_params:
            what = ", ".join(fields + ([f"{n_params} parameter{'s' * (n_params != 1)}"] if n_params else []))
            out.append(f"  - not recorded in {side.upper()}, so not compared: {what}")
    cost = report["cost"]
    names = list(dict.fromkeys([*cost["a"], *cost["b"]]))
    if names:
        per_run = " (a sweep's: the mean per run)" if "sweep" in (report["a"]["kind"], report["b"]["kind"]) else ""
        out.append(f"Cost (shown, not compared){per_run}:")
        out += [f"  - {k}: A {_fmt(cost['a'].get(k))}, B {_fmt(cost['b'].get(k))}" for k in names]
    return out


def verdict_line(reports: Sequence[dict], strict: bool = False) -> str:
    """The closing line: what differs, and the exit code it gives."""
    changed = sum(len(r["verdicts_changed"]) for r in reports)
    outside = sum(len(r["metrics"]["outside_band"]) + len(r["margins"]["outside_band"]) for r in reports)
    no_band = sum(len(r["metrics"]["no_band"]) for r in reports)
    code = exit_code(reports, strict)
    parts = [f"{changed} verdict{'s' * (changed != 1)} changed", f"{outside} outside their band",
             f"{no_band} with no band known" + ("" if strict else " (not counted)")]
    return f"Result: {'differs' if code else 'matches'}: {', '.join(parts)} (exit {code})"


# ----------------------------------------------------------------------------- files and folders

def _read_json(path: Path, label: str) -> dict:
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise ValueError(f"{label}: cannot read {path} ({e.strerror})") from None
    except ValueError:
        raise ValueError(f"{label}: {path} is not JSON (give a results file, a run folder or a sweep "
                         "folder)") from None


def load(path: str | os.PathLike, label: str) -> list[dict]:
    """What ``path`` holds, as sources ``{"results": dict}`` or ``{"summary": dict, "runs": {id: results}}``.

    A results file, a sweep summary file, a folder holding ``results/`` (every chapter in it), a
    ``results/`` folder itself, or a sweep folder (``sweep.json``: summarised afresh from its runs).
    Raises ValueError naming ``path`` and what is allowed.
    """
    from memlab.report import sweep_summary

    allowed = ("give a results file (<book>/results/<chapter>.json), a run folder (one holding results/), "
               "a sweep folder or a sweep summary")
    p = Path(path).expanduser()
    if not p.exists():
        raise ValueError(f"{label}: {str(path)!r} does not exist; {allowed}")
    if p.is_file():
        data = _read_json(p, label)
        if isinstance(data, dict) and "groups" in data:
            return [{"summary": data, "runs": {}}]
        if isinstance(data, dict) and "metrics" in data and "chapter" in data:
            return [{"results": data}]
        raise ValueError(f"{label}: {str(path)!r} is neither a chapter's results nor a sweep summary; {allowed}")
    if (p / "sweep.json").is_file():
        summary = sweep_summary.summarize(p)
        return [{"summary": summary, "runs": {rid: _read_json(p / rid / "results" / f"{summary['chapter']}.json",
                                                              label) for rid in summary["runs_done"]}}]
    folder = p / "results" if (p / "results").is_dir() else p
    files = sorted(folder.glob("*.json"))
    found = [{"results": d} for d in (_read_json(f, label) for f in files)
             if isinstance(d, dict) and "metrics" in d and "chapter" in d]
    if not found:
        raise ValueError(f"{label}: {str(path)!r} holds no chapter results (no results/<chapter>.json); {allowed}")
    return found


def _chapter_of(src: dict) -> str:
    return (src.get("results") or src.get("summary"))["chapter"]


def _pairs(sa: dict, sb: dict, label_a: str, label_b: str) -> list[tuple[dict, dict]]:
    """The sides to compare: a run against the sweep's matching setting, or two sweeps setting by
    setting (equal parameters; two sweeps of one setting each are compared whatever they are)."""
    if "results" in sa and "results" in sb:
        return [(side_from_results(sa["results"], label_a), side_from_results(sb["results"], label_b))]
    if "results" in sa or "results" in sb:
        run, swp, run_label, swp_label = ((sa, sb, label_a, label_b) if "results" in sa else
                                          (sb, sa, label_b, label_a))
        side_run = side_from_results(run["results"], run_label)
        side_swp = side_from_summary(swp["summary"], swp_label, run["results"].get("params"), swp["runs"])
        return [(side_run, side_swp) if "results" in sa else (side_swp, side_run)]
    ga, gb = sa["summary"]["groups"], sb["summary"]["groups"]
    pairs = [(g, h) for g in ga for h in gb if g["params"] == h["params"]]
    if not pairs and len(ga) == len(gb) == 1:
        pairs = [(ga[0], gb[0])]
    if not pairs:
        raise ValueError(f"A ({label_a}) and B ({label_b}) are sweeps with no setting in common: A has "
                         + "; ".join(_params_words(g["params"]) or "defaults" for g in ga) + ", B has "
                         + "; ".join(_params_words(g["params"]) or "defaults" for g in gb))
    return [(side_from_summary(sa["summary"], label_a, runs=sa["runs"], group=g),
             side_from_summary(sb["summary"], label_b, runs=sb["runs"], group=h)) for g, h in pairs]


def book_spread(chapter: str, profile: str | None, params: dict, book: Path | None = None) -> tuple[dict, str]:
    """The published seed sweep's spread of ``chapter`` (``<book>/robustness/<chapter>.json``) at
    ``profile``, ``({}, "")`` when there is none (or it ran at another profile)."""
    path = (book or repo_root() / "book") / "robustness" / f"{chapter}.json"
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}, ""
    if summary.get("profile") != profile or summary.get("chapter") != chapter:
        return {}, ""
    try:
        return spread_from_summary(summary, params, str(path)), f"published seed sweep ({path.name})"
    except ValueError:  # the book's sweep has several settings and none is this one
        return {}, ""


def compare_sources(a: list[dict], b: list[dict], label_a: str, label_b: str) -> list[dict]:
    """One report per chapter both A and B hold (ValueError when they hold no chapter in common)."""
    by_a, by_b = ({_chapter_of(s): s for s in srcs} for srcs in (a, b))  # a folder holds a chapter once
    common = [c for c in by_a if c in by_b]
    if not common:
        raise ValueError(f"A ({label_a}) holds chapter {', '.join(sorted(by_a))} and B ({label_b}) holds "
                         f"chapter {', '.join(sorted(by_b))}: compare two runs of one chapter")
    reports = []
    for chapter in common:
        for side_a, side_b in _pairs(by_a[chapter], by_b[chapter], label_a, label_b):
            spread, spread_label = {}, ""
            if side_a["profile"] == side_b["profile"]:
                spread, spread_label = book_spread(chapter, side_a["profile"], side_a["params"])
            reports.append(compare_sides(side_a, side_b, spread, spread_label))
    return reports


def compare_paths(a: str, b: str) -> list[dict]:
    """``memlab compare A B``: the reports of :func:`compare_sources` on two paths."""
    return compare_sources(load(a, "A"), load(b, "B"), str(a), str(b))


# ----------------------------------------------------------------------------- one argument: a chapter

def chapter_id(text: str) -> str:
    """``text`` when it is a chapter id (``02_sde``), as ``memlab run`` takes it; else ValueError."""
    if text in CHAPTERS:
        return text
    raise ValueError(f"{text!r} is not a chapter, nor a results file or folder; a chapter is one of "
                     f"{', '.join(CHAPTERS)}")


def _published_in_git(root: Path, rel: str) -> dict | None:
    """The committed version of ``rel`` (the page as published), or None outside git."""
    try:
        out = subprocess.run(["git", "show", f"HEAD:{rel}"], cwd=root, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    try:
        return json.loads(out.stdout)
    except ValueError:
        return None


def latest_run(chapter: str, root: Path | None = None) -> tuple[Path, dict]:
    """The newest results of ``chapter`` written outside the published book, and the published page.

    Candidates (newest file wins): ``$MEMLAB_OUTPUT_DIR/results/`` when set, the scratch folder of
    notebook runs (``_build/scratch/results/``), every sweep run under ``data/sweeps/``, and
    ``book/results/<chapter>.json`` itself where ``memlab run`` without ``--book-dir`` replaced the
    committed page (then the page compared with is the committed one). Returns (path of the run,
    published results). Raises ValueError when the chapter has no page or no run.
    """
    from memlab.core.results import scratch_dir

    root = root or repo_root()
    rel = f"book/results/{chapter}.json"
    page_path = root / rel
    try:
        published = json.loads(page_path.read_text())
    except (OSError, ValueError):
        raise ValueError(f"chapter {chapter} has no published page ({rel} is missing)") from None
    candidates = []
    env = os.environ.get("MEMLAB_OUTPUT_DIR")
    if env:
        candidates.append(Path(env).expanduser() / "results" / f"{chapter}.json")
    candidates.append(scratch_dir() / "results" / f"{chapter}.json")
    candidates += (root / "data" / "sweeps").glob(f"*/*/results/{chapter}.json")
    found = [p for p in candidates if p.is_file() and p.resolve() != page_path.resolve()]
    committed = _published_in_git(root, rel)
    if committed is not None and committed != published:  # `memlab run` republished it: that is the run
        found.append(page_path)
    if not found:
        raise ValueError(f"no run of chapter {chapter} outside the published book (looked in _build/scratch/results, "
                         f"data/sweeps and {rel} against its commit); a run made with memlab run {chapter} "
                         f"--book-dir DIR is compared by: memlab compare DIR book")
    newest = max(found, key=lambda p: p.stat().st_mtime)
    return newest, (committed if newest == page_path else published)


def compare_latest(text: str) -> tuple[list[dict], str]:
    """``memlab compare CHAPTER``: the user's newest run (A) against the published page (B)."""
    chapter = chapter_id(text)
    run_path, page = latest_run(chapter)
    src_a = load(run_path, "A")
    label_b = f"the published page (book/results/{chapter}.json)"
    return compare_sources(src_a, [{"results": page}], str(run_path), label_b), str(run_path)
