"""Do the verdicts survive other kernels? Two seed sweeps of one chapter's code, compared verdict by verdict.

The same code and seeds give slightly different weights on another CPU's kernels (AVX2 against
AVX-512) or at another thread count: float sums run in other orders. A verdict that moves with them
was a coin flip of the kernels. :func:`compare_summaries` takes two sweep summaries
(:func:`memlab.report.sweep_summary.summarize`; a published ``book/robustness/<chapter>.json`` is one) of the same
chapter code and seeds and counts

* **per-seed flips**: for each seed both sweeps ran, the claims whose single-run verdict differs
  (from the summaries' ``run_verdicts``);
* **pooled flips**: the claims whose verdict pooled over the seeds (:mod:`memlab.report.pooling`) differs,
  each with both pooled margins and bands, so the record says why its band missed it.

A *flip* is any change of verdict (reproduced to not judged counts); a *reversal* is reproduced
against not reproduced. ``benchmarks/bench_verdict_stability.py`` runs the changed-kernel sweeps and
writes the record (``benchmarks/results/verdict_stability.json``, with :func:`totals`); the book's
Robustness page shows it (:func:`memlab.report.robustness.stability_section`).
"""
from __future__ import annotations

import math
from typing import Any

from memlab.report.paper import NOT_REPRODUCED, REPRODUCED
from memlab.report.pooling import row_margins
from memlab.report.robustness import seed_group
from memlab.report.sweep_summary import is_seed


def _seed_of(summary: dict, rid: str) -> Any:
    params = (summary.get("provenance") or {}).get(rid, {}).get("params") or {}
    seeds = {k: v for k, v in params.items() if is_seed(k)}
    return seeds.get("seed", next(iter(seeds.values()), rid))


def kernels(summary: dict) -> dict[str, Any]:
    """The CPU, vector ISA and thread counts a summary's runs used (``"not recorded"`` where absent)."""
    from memlab.report.compare import _split_device

    devices, threads = set(), set()
    for p in (summary.get("provenance") or {}).values():
        devices.add(p.get("device"))
        threads.add(p.get("cpu_threads"))
    split = [_split_device(d) for d in sorted(filter(None, devices))]
    words = lambda vals: "; ".join(map(str, sorted(vals))) or "not recorded"  # noqa: E731
    return {"cpu": words({s.get("cpu") or s.get("device") for s in split}),
            "isa": words({s.get("isa") for s in split if s.get("isa")}),
            "threads": words({t for t in threads if t is not None}),
            "chapter_code": words({p.get("chapter_code") for p in (summary.get("provenance") or {}).values()
                                   if p.get("chapter_code")})}


def _is_reversal(a: str, b: str) -> bool:
    return {a, b} == {REPRODUCED, NOT_REPRODUCED}


def _margin_words(row: dict | None) -> str:
    """A pooled row's margins as text: ``+0.031 ± 0.020`` (several joined by ``; ``), or how it pooled."""
    if not row:
        return "absent"
    ms = row_margins(row)
    if not ms:
        return "pooled as a vote (no margin)"
    return "; ".join(f"{m['margin']:+.3g} \u00b1 {m['band']:.3g}" for m in ms)


def _why(a: dict | None, b: dict | None) -> str:
    """Why a pooled verdict moved, from its two rows: margins at the band's edge, or a vote that split."""
    ma, mb = row_margins(a or {}), row_margins(b or {})
    if not ma or not mb or len(ma) != len(mb):
        return "pooled as a vote of the seeds' verdicts, which changed"
    for x, y in zip(ma, mb):
        diff, band = y["margin"] - x["margin"], math.hypot(x["band"], y["band"])
        if abs(diff) > band:
            return (f"the pooled margins differ by {diff:+.3g}, outside their combined band "
                    f"\u00b1{band:.3g}: the kernels moved this claim's measurement more than its band allows")
    return ("the pooled margins agree within their combined band; the verdict moved because a margin "
            "sits at the edge of its own band")


def compare_summaries(a: dict, b: dict) -> dict:
    """Per-seed and pooled verdict changes between two seed-sweep summaries of one chapter.

    ``a`` and ``b`` are :func:`memlab.report.sweep_summary.summarize` dicts (each with ``run_verdicts``; the seed
    group, the one without non-seed parameters, is compared). Returns a JSON-able dict: ``chapter``,
    ``a``/``b`` (kernels, seeds), ``per_seed`` (one entry per common seed: ``compared``, ``changed``
    rows ``{key, claim, a, b}``), ``per_seed_compared``, ``per_seed_flips``, ``per_seed_reversals``,
    ``pooled_compared``, ``pooled_flips`` (rows with both margins and :func:`_why`),
    ``pooled_reversals``, and ``behind_gates``: the same counts for the own verdicts of claims whose
    regime gate failed on both sides (``run_ungated``; never published, but what the gate hides). Raises ValueError for summaries of two chapters, without per-run
    verdicts, or without a seed in common.
    """
    if a.get("chapter") != b.get("chapter"):
        raise ValueError(f"A is chapter {a.get('chapter')} and B is chapter {b.get('chapter')}: "
                         "compare two sweeps of one chapter")
    for side, s in (("A", a), ("B", b)):
        if not s.get("run_verdicts"):
            raise ValueError(f"{side}: the summary keeps no per-run verdicts (written before they were "
                             "recorded); re-write it with memlab sweep --summary DIR")
    ga, gb = seed_group(a) or {}, seed_group(b) or {}
    seeds_a = {_seed_of(a, r): r for r in ga.get("runs", [])}
    seeds_b = {_seed_of(b, r): r for r in gb.get("runs", [])}
    common = sorted(set(seeds_a) & set(seeds_b), key=str)
    if not common:
        raise ValueError(f"the sweeps have no seed in common (A: {sorted(seeds_a, key=str)}, "
                         f"B: {sorted(seeds_b, key=str)})")
    texts = {k: c.get("claim", k) for g in (ga, gb) for k, c in (g.get("claims") or {}).items()}
    per_seed = []
    for seed in common:
        va, vb = a["run_verdicts"][seeds_a[seed]], b["run_verdicts"][seeds_b[seed]]
        keys = sorted(set(va) & set(vb))
        changed = [{"key": k, "claim": texts.get(k, k), "a": va[k], "b": vb[k]} for k in keys if va[k] != vb[k]]
        per_seed.append({"seed": seed, "compared": len(keys), "changed": changed})
    pa = {r["key"]: r for r in ga.get("pooled") or []}
    pb = {r["key"]: r for r in gb.get("pooled") or []}
    pooled_keys = sorted(set(pa) & set(pb))
    flips = [{"key": k, "claim": texts.get(k, pa[k].get("claim", k)), "a": pa[k]["verdict"],
              "b": pb[k]["verdict"], "margin_a": _margin_words(pa[k]), "margin_b": _margin_words(pb[k]),
              "why": _why(pa[k], pb[k])}
             for k in pooled_keys if pa[k]["verdict"] != pb[k]["verdict"]]
    changed_rows = [c for s in per_seed for c in s["changed"]]
    # behind the regime gates: a claim outside its regime keeps its own verdict (never published);
    # whether that moves with the kernels says what the gate hides
    behind, behind_compared = [], 0
    for seed in common:
        ua = (a.get("run_ungated") or {}).get(seeds_a[seed], {})
        ub = (b.get("run_ungated") or {}).get(seeds_b[seed], {})
        for k in sorted(set(ua) & set(ub)):
            behind_compared += 1
            if ua[k] != ub[k]:
                behind.append({"seed": seed, "key": k, "claim": texts.get(k, k), "a": ua[k], "b": ub[k]})
    pooled_behind = [(k, (pa[k].get("ungated") or {}).get("verdict"), (pb[k].get("ungated") or {}).get("verdict"))
                     for k in pooled_keys]
    pooled_behind = [(k, x, y) for k, x, y in pooled_behind if x and y]
    return {"chapter": a["chapter"], "profile": a.get("profile"),
            "a": {**kernels(a), "seeds": sorted(seeds_a, key=str)},
            "b": {**kernels(b), "seeds": sorted(seeds_b, key=str)},
            "seeds_compared": common, "per_seed": per_seed,
            "per_seed_compared": sum(s["compared"] for s in per_seed),
            "per_seed_flips": len(changed_rows),
            "per_seed_reversals": sum(_is_reversal(c["a"], c["b"]) for c in changed_rows),
            "pooled_compared": len(pooled_keys), "pooled_flips": flips,
            "pooled_reversals": sum(_is_reversal(f["a"], f["b"]) for f in flips),
            "behind_gates": {"per_seed_compared": behind_compared, "per_seed_flips": behind,
                             "pooled_compared": len(pooled_behind),
                             "pooled_flips": [{"key": k, "claim": texts.get(k, k), "a": x, "b": y}
                                              for k, x, y in pooled_behind if x != y]}}


def totals(chapters: list[dict]) -> dict[str, int]:
    """The record's sums over its chapters (:func:`compare_summaries` entries)."""
    return {"per_seed_compared": sum(c["per_seed_compared"] for c in chapters),
            "per_seed_flips": sum(c["per_seed_flips"] for c in chapters),
            "per_seed_reversals": sum(c["per_seed_reversals"] for c in chapters),
            "pooled_compared": sum(c["pooled_compared"] for c in chapters),
            "pooled_flips": sum(len(c["pooled_flips"]) for c in chapters),
            "pooled_reversals": sum(c["pooled_reversals"] for c in chapters)}
