"""What a seed sweep costs: one chapter run against the same chapter's sweep on a LocalCluster.

For each chapter named, in one invocation on one machine:

1. ``memlab run CHAPTER --profile P`` once, into a scratch book, with a fresh model cache (cold)
   unless ``--warm``;
2. ``memlab sweep CHAPTER --profile P -p seed 0..S-1 --workers W`` with its own fresh cache, so
   every seed trains its models as a reader's first sweep would.

It records both wall times, the sweep's time per run, and its parallel efficiency
``S * single / (W * sweep)`` (1.0 when W workers finish S independent runs in S/W single-run
times; below 1 when the workers share memory bandwidth or cores with other work). Nothing
is written into ``book/``; the published book never changes.

    MEMLAB_DATA_ROOT=../shared/data python benchmarks/bench_sweep.py 05_capacity --profile cpu

At ``--profile smoke`` (what ``tests/test_benchmarks.py`` runs) the numbers only exercise the
code. A ``cpu`` sweep of every chapter costs hours here, so the committed record
``benchmarks/results/sweep.json`` is read from the book's real sweeps instead:

    python benchmarks/bench_sweep.py --from-sweep data/sweeps/02_sde-<hash> ...

For each sweep folder it takes every run's own wall time (``run.json``) and the sweep's wall
time (``timing.json``, written by ``memlab sweep``), both measured in that one sweep, and
reports the busy fraction ``sum(run walls) / (W * sweep wall)`` (1.0 when no worker idles) and
the mean number of runs in flight, ``sum(run walls) / sweep wall``. The latter is the speed-up
over serial only if concurrent runs do not slow each other down; on a machine where they do
(shared caches and memory bandwidth), compare a run's wall time here with the same run alone
(its chapter's ``memlab run``, or this script's first mode).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import record  # noqa: E402

from memlab.core.chapters import CHAPTERS  # noqa: E402

MEMLAB = [sys.executable, "-m", "memlab.cli"]


def _timed(cmd: list[str], env: dict) -> float:
    """Wall seconds of ``cmd``; its output goes to this process's stdout (the run's progress)."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"bench_sweep: {' '.join(cmd)} exited with {proc.returncode}")
    return time.perf_counter() - t0


def measure(chapter: str, profile: str, seeds: int, workers: int, warm: bool, scratch: Path) -> dict:
    """One chapter's single-run and sweep wall times (seconds) and the sweep's efficiency."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MEMLAB_PROGRESS": "0"}
    single_cache = scratch / f"{chapter}-cache-single"
    env_single = {**env, "MEMLAB_CACHE": str(single_cache)}
    if warm:  # fill the cache first, then time a second run
        _timed([*MEMLAB, "run", chapter, "--profile", profile, "--book-dir", str(scratch / "warmup")], env_single)
    single = _timed([*MEMLAB, "run", chapter, "--profile", profile, "--book-dir", str(scratch / "single")],
                    env_single)
    env_sweep = {**env, "MEMLAB_CACHE": str(scratch / f"{chapter}-cache-sweep")}
    sweep = _timed([*MEMLAB, "sweep", chapter, "--profile", profile, "-p", "seed", f"0..{seeds - 1}",
                    "--workers", str(workers), "--threads", "1", "--out", str(scratch / "sweeps")], env_sweep)
    return {"chapter": chapter, "profile": profile, "cache": "warm" if warm else "cold", "seeds": seeds,
            "workers": workers, "single_run_s": round(single, 1), "sweep_s": round(sweep, 1),
            "sweep_s_per_run": round(sweep / seeds, 1),
            "parallel_efficiency": round(seeds * single / (workers * sweep), 3)}


def from_sweep(sweep_dir: Path) -> dict:
    """What one finished sweep measured: its runs' and its own wall times (seconds)."""
    import json

    spec = json.loads((sweep_dir / "sweep.json").read_text())
    timing = json.loads((sweep_dir / "timing.json").read_text())
    runs = {}
    for rid in spec["runs"]:
        meta = json.loads((sweep_dir / rid / "run.json").read_text())
        runs[rid] = meta["wall_time_s"]
    wall = sum(t["wall_s"] for t in timing)
    workers = max(t.get("workers") or 1 for t in timing)
    total = sum(runs.values())
    return {"chapter": spec["chapter"], "profile": spec["profile"], "axes": spec["axes"], "workers": workers,
            "threads": timing[-1].get("threads"), "run_wall_s": runs, "sweep_s": round(wall, 1),
            "busy_fraction": round(total / (workers * wall), 3),
            "mean_runs_in_flight": round(total / wall, 3),
            "invocations": len(timing)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("chapters", nargs="*", help=f"chapter ids: {', '.join(CHAPTERS)}")
    ap.add_argument("--from-sweep", nargs="+", default=None, metavar="DIR",
                    help="record finished sweep folders instead of running anything")
    ap.add_argument("--profile", default="cpu", choices=("smoke", "cpu"))
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0..S-1 in the sweep (default 3)")
    ap.add_argument("--workers", type=int, default=2, help="LocalCluster workers (default 2)")
    ap.add_argument("--warm", action="store_true", help="time the single run with its models cached")
    args = ap.parse_args(argv)
    if args.from_sweep:
        if args.chapters:
            ap.error("--from-sweep DIR ... takes no chapter ids")
        bad = [d for d in args.from_sweep if not (Path(d) / "timing.json").is_file()]
        if bad:
            ap.error(f"{bad[0]!r} is not a finished sweep folder (no timing.json; memlab sweep writes it)")
        t0 = time.perf_counter()
        rows = [from_sweep(Path(d)) for d in args.from_sweep]
        for r in rows:
            print(f"{r['chapter']} {r['axes']}: {len(r['run_wall_s'])} runs on {r['workers']} workers in "
                  f"{r['sweep_s']:.0f} s (busy {r['busy_fraction']:.2f}, "
                  f"{r['mean_runs_in_flight']:.2f} runs in flight)")
        record("sweep", {"source": "finished sweeps (--from-sweep)", "rows": rows, "cores": os.cpu_count()},
               time.perf_counter() - t0)
        return 0
    if not args.chapters:
        ap.error("name at least one chapter id (or --from-sweep DIR ...)")
    bad = [c for c in args.chapters if c not in CHAPTERS]
    if bad:
        ap.error(f"unknown chapter {bad[0]!r}; choose from {', '.join(CHAPTERS)}")
    if args.seeds < 1 or args.workers < 1:
        ap.error(f"--seeds and --workers must be >= 1 (got {args.seeds}, {args.workers})")
    scratch = Path(tempfile.mkdtemp(prefix="bench_sweep-"))
    t0 = time.perf_counter()
    try:
        rows = [measure(c, args.profile, args.seeds, args.workers, args.warm, scratch) for c in args.chapters]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for r in rows:
        print(f"{r['chapter']}: one {r['cache']} {r['profile']} run {r['single_run_s']:.0f} s; "
              f"{r['seeds']}-seed sweep on {r['workers']} workers {r['sweep_s']:.0f} s "
              f"(efficiency {r['parallel_efficiency']:.2f})")
    record("sweep", {"rows": rows, "cores": os.cpu_count()}, time.perf_counter() - t0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
