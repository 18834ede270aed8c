"""Benchmark: wall time of chapter 1 (the BN illusion) per profile, cold and warm model cache.

For each requested profile the chapter runs twice through ``memlab run`` into a
scratch book folder: first with an empty model cache (everything trained), then
again with the cache it just filled (only the measurements run). The script
prints both wall times, their ratio, and the wall time the chapter recorded in
its results JSON.

    python benchmarks/bench_bn_illusion.py [--profiles smoke cpu] [--warm/--no-warm]

Targets (from the issue): smoke about 1 minute, cpu at most about 12 minutes on
2 CPU cores that are not shared with other work.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import record  # noqa: E402

CHAPTER = "01_bn_illusion"
TARGET_S = {"smoke": 60, "cpu": 720}


def run_chapter(profile: str, cache: Path, book: Path) -> tuple[float, float | None]:
    """Wall seconds of one ``memlab run`` and the wall time the chapter wrote into its results."""
    cmd = [sys.executable, "-m", "memlab.cli", "run", CHAPTER, "--profile", profile, "--cache-dir", str(cache),
           "--book-dir", str(book)]
    env = {**os.environ, "MEMLAB_PROGRESS": "0"}
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    res = json.loads((book / "results" / f"{CHAPTER}.json").read_text())
    return wall, res.get("provenance", {}).get("wall_time_s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", nargs="+", default=["smoke"], choices=["smoke", "cpu", "paper"])
    ap.add_argument("--no-warm", action="store_true", help="skip the second (cached) run")
    args = ap.parse_args()
    start = time.perf_counter()
    if not os.environ.get("MEMLAB_DATA_ROOT"):
        raise SystemExit("set MEMLAB_DATA_ROOT to the folder holding cifar10-jpeg/")
    print(f"cores: {os.cpu_count()}  load average: {os.getloadavg()[0]:.1f} (a shared machine inflates every time)")
    rows = []
    for profile in args.profiles:
        with tempfile.TemporaryDirectory() as tmp:
            cache, book = Path(tmp) / "cache", Path(tmp) / "book"
            cold, cold_nb = run_chapter(profile, cache, book)
            line = f"{profile:6s} cold cache: {cold:7.1f} s (notebook {cold_nb or float('nan'):.1f} s)"
            row = {"profile": profile, "cold_s": cold, "cold_notebook_s": cold_nb}
            if not args.no_warm:
                warm, _ = run_chapter(profile, cache, book)
                row.update(warm_s=warm, cold_over_warm=cold / warm)
                line += f"   warm cache: {warm:7.1f} s   cold/warm = {cold / warm:.2f}x"
            target = TARGET_S.get(profile)
            if target:
                line += f"   target <= {target} s: {'ok' if cold <= target else 'over'}"
            print(line, flush=True)
            rows.append(row | {"target_s": target})
    record("bn_illusion", {"config": vars(args), "rows": rows}, time.perf_counter() - start)


if __name__ == "__main__":
    main()
