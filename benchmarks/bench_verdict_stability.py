"""Verdict stability: re-run a chapter's published seed sweep with other CPU kernels and count the flips.

For each chapter named, in one invocation on one machine:

1. read the published seed sweep ``book/robustness/<chapter>.json``; it must have run the chapter's
   current code (else its verdicts are not the page's, and the script refuses before any work);
2. ``memlab sweep CHAPTER --profile P -p seed <the published seeds>`` with other kernels:
   ``--isa avx2`` sets ``ATEN_CPU_CAPABILITY=avx2`` and ``ONEDNN_MAX_CPU_ISA=AVX2`` (an AVX-512
   machine then runs AVX2 kernels), ``--threads N`` another thread count, and a fresh model cache
   (``<out>/cache``), so every model is trained again under the changed kernels;
3. compare the two sweeps verdict by verdict (:func:`memlab.report.stability.compare_summaries`): how many
   single-seed verdicts flipped, how many pooled verdicts flipped, and why each pooled flip's band
   missed it.

The record ``benchmarks/results/verdict_stability.json`` keeps one entry per chapter (a later run of
a chapter replaces its entry); the book's Robustness page shows it. Nothing is written into
``book/``.

    MEMLAB_DATA_ROOT=../shared/data python benchmarks/bench_verdict_stability.py 02_sde 01_bn_illusion \\
        --isa avx2 --threads 1 --workers 2
    python benchmarks/bench_verdict_stability.py --compare-only data/sweeps-kernels/avx2-t1/02_sde-<hash>

A ``cpu`` sweep re-trains every model of every seed: chapters 1, 2 and 5 take about 1, 0.5 and 1
hour at two cores. ``--profile smoke`` (what ``tests/test_benchmarks.py`` runs) only exercises the code.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import record, results_dir  # noqa: E402

from memlab.core.chapters import CHAPTERS  # noqa: E402
from memlab.core.config import repo_root  # noqa: E402
from memlab.core.results import chapter_code  # noqa: E402
from memlab.report import (  # noqa: E402
    robustness,
    stability,
    sweep_summary,  # noqa: E402
)
from memlab.run import sweep  # noqa: E402

MEMLAB = [sys.executable, "-m", "memlab.cli"]
ISAS = {"avx2": "AVX2", "avx512": "AVX512_CORE"}  # ATEN_CPU_CAPABILITY -> ONEDNN_MAX_CPU_ISA


def published(chapter: str, book: Path, profile: str) -> dict:
    """The chapter's published seed sweep, checked: current code, this profile, per-run verdicts kept."""
    summary = robustness.load(book, chapter)
    if summary is None:
        raise SystemExit(f"bench_verdict_stability: {chapter} has no published seed sweep "
                         f"({robustness.summary_path(book, chapter)}); publish one first")
    if summary.get("profile") != profile:
        raise SystemExit(f"bench_verdict_stability: {chapter}'s published sweep ran at profile "
                         f"{summary.get('profile')!r}, not {profile!r}")
    codes = robustness.code_versions(summary)
    if codes != {chapter_code(chapter)}:
        raise SystemExit(f"bench_verdict_stability: {chapter}'s published sweep ran chapter code "
                         f"{', '.join(map(str, sorted(codes, key=str)))}, not the current "
                         f"{chapter_code(chapter)}: re-sweep and publish it first")
    if not summary.get("run_verdicts"):
        raise SystemExit(f"bench_verdict_stability: {chapter}'s published summary keeps no per-run verdicts; "
                         "re-write it with memlab sweep --summary DIR --publish")
    return summary


def rerun(chapter: str, profile: str, seeds: list, isa: str | None, threads: int, workers: int,
          out: Path) -> Path:
    """Run the seed sweep with the changed kernels and a fresh cache; returns its folder."""
    env = {**os.environ, "MEMLAB_CACHE": str(out / "cache")}
    if isa:
        env.update(ATEN_CPU_CAPABILITY=isa, ONEDNN_MAX_CPU_ISA=ISAS[isa])
    values = ",".join(map(str, seeds))
    cmd = [*MEMLAB, "sweep", chapter, "--profile", profile, "-p", "seed", values, "--workers", str(workers),
           "--threads", str(threads), "--out", str(out)]
    print("bench_verdict_stability:", " ".join(cmd[2:]), f"(ISA {isa or 'unchanged'})", flush=True)
    if subprocess.run(cmd, env=env).returncode != 0:
        raise SystemExit(f"bench_verdict_stability: the sweep of {chapter} failed")
    return out / sweep.sweep_id(chapter, profile, sweep.parse_axes(chapter, [("seed", values)]))


def save(entries: list[dict], wall_s: float) -> Path:
    """Merge ``entries`` into the record, replacing each chapter's earlier entry."""
    path = results_dir() / "verdict_stability.json"
    try:
        kept = json.loads(path.read_text())["measurements"]["chapters"]
    except (OSError, ValueError, KeyError):
        kept = []
    done = {e["chapter"] for e in entries}
    chapters = sorted([e for e in kept if e["chapter"] not in done] + entries,
                      key=lambda e: list(CHAPTERS).index(e["chapter"]) if e["chapter"] in CHAPTERS else 99)
    return record("verdict_stability", {"chapters": chapters, "totals": stability.totals(chapters)}, wall_s)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("chapters", nargs="*", help=f"chapters to re-run: {', '.join(CHAPTERS)}")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--isa", choices=sorted(ISAS), help="force these kernels (ATEN_CPU_CAPABILITY)")
    ap.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of each run (default 2)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", type=Path, help="parent of the sweeps (default data/sweeps-kernels/<isa>-t<threads>)")
    ap.add_argument("--book", type=Path, default=None, help="the book holding the published sweeps")
    ap.add_argument("--compare-only", nargs="+", type=Path, metavar="SWEEP_DIR",
                    help="finished changed-kernel sweep folders: compare them, run nothing")
    args = ap.parse_args(argv)
    book = args.book or repo_root() / "book"
    unknown = [c for c in args.chapters if c not in CHAPTERS]
    if unknown or (not args.chapters and not args.compare_only):
        ap.error(f"chapter {unknown[0]!r} is not one of {', '.join(CHAPTERS)}" if unknown
                 else "name a chapter, or give --compare-only SWEEP_DIR")
    if args.threads < 1 or args.workers < 1:
        ap.error(f"--threads {args.threads} and --workers {args.workers} must each be at least 1")
    start = time.perf_counter()
    out = args.out or repo_root() / "data" / "sweeps-kernels" / f"{args.isa or 'native'}-t{args.threads}"
    pubs = {c: published(c, book, args.profile) for c in args.chapters}  # every check before any run
    for c, s in pubs.items():
        k = stability.kernels(s)
        if (args.isa or k["isa"]).upper() == k["isa"].upper() and str(args.threads) == k["threads"]:
            ap.error(f"{c}'s published sweep ran {k['isa']} kernels at {k['threads']} thread(s), and "
                     f"--isa {args.isa or '(unchanged)'} --threads {args.threads} change neither")
    dirs = [rerun(c, args.profile, robustness.seeds_of(s), args.isa, args.threads, args.workers, out)
            for c, s in pubs.items()]
    entries = []
    for d in [*dirs, *(args.compare_only or [])]:
        new = sweep_summary.write_summary(d)
        old = pubs.get(new["chapter"]) or published(new["chapter"], book, new.get("profile"))
        entry = stability.compare_summaries(old, new)
        if (entry["a"]["isa"], entry["a"]["threads"]) == (entry["b"]["isa"], entry["b"]["threads"]):
            ap.error(f"{d} ran the same kernels as the published sweep ({entry['a']['isa']}, "
                     f"{entry['a']['threads']} thread(s)): nothing was changed")
        entries.append(entry)
        print(f"{entry['chapter']}: single-seed flips {entry['per_seed_flips']} of {entry['per_seed_compared']}, "
              f"pooled flips {len(entry['pooled_flips'])} of {entry['pooled_compared']}")
    save(entries, time.perf_counter() - start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
