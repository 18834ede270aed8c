"""Benchmark: vectorised split_half_dependence against a loop that recomputes kernels per shuffle.

Both run on the same inputs (|S| = 1000 samples, 512-dimensional features,
200 shuffles by default) in one process; the script checks that the values
agree to 1e-8 and reports the speed ratio (target: at least 20x) in process CPU
time (robust on a shared machine) and in wall time. Run with OMP_NUM_THREADS=1
for a single-core comparison.

    python benchmarks/bench_sde.py [--n 1000] [--dim 512] [--shuffles 200] [--loop-shuffles 20]

The loop is timed on ``--loop-shuffles`` shuffles and its time scaled to the full
count (it is linear in the number of shuffles); its values are compared with
the first ``--loop-shuffles`` values of the vectorised run.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import record  # noqa: E402

from memlab.science.sde import split_half_dependence, split_half_dependence_loop  # noqa: E402


def timed(fn, *args, **kwargs):
    """(result, wall seconds, process CPU seconds) of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--shuffles", type=int, default=200)
    ap.add_argument("--loop-shuffles", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    start = time.perf_counter()
    if not 1 <= args.loop_shuffles <= args.shuffles:
        raise SystemExit("--loop-shuffles must be in [1, --shuffles]")

    feats = np.random.default_rng(args.seed).normal(size=(args.n, args.dim))
    scale = args.shuffles / args.loop_shuffles
    # Warm-up on a small input (BLAS start-up, first-touch page faults), then best of three.
    split_half_dependence(feats[:64], n_shuffles=5)
    split_half_dependence_loop(feats[:64], n_shuffles=5)
    runs = [timed(split_half_dependence, feats, n_shuffles=args.shuffles, seed=args.seed) for _ in range(3)]
    fast, wall_fast, cpu_fast = runs[0][0], min(r[1] for r in runs), min(r[2] for r in runs)
    # Same seed: the loop draws the same split, and its first k permutations are the vectorised run's first k.
    slow, wall_slow, cpu_slow = timed(split_half_dependence_loop, feats, n_shuffles=args.loop_shuffles, seed=args.seed)
    wall_slow, cpu_slow = wall_slow * scale, cpu_slow * scale
    err = float(np.max(np.abs(fast[: args.loop_shuffles] - slow)))
    print(f"|S|={args.n} dim={args.dim} shuffles={args.shuffles}"
          + ("" if scale == 1 else f" (loop timed on {args.loop_shuffles} shuffles, scaled)"))
    print(f"vectorised (best of 3): {wall_fast:.3f} s wall, {cpu_fast:.3f} s CPU   loop: {wall_slow:.3f} s wall, {cpu_slow:.3f} s CPU")
    print(f"max |difference| = {err:.2e}  (required <= 1e-8: {'ok' if err <= 1e-8 else 'FAIL'})")
    # CPU time is the fair measure on a shared machine; wall time is shown as well.
    for what, ratio in (("CPU-time", cpu_slow / cpu_fast), ("wall-time", wall_slow / wall_fast)):
        print(f"{what} speed ratio = {ratio:.1f}x  (target >= 20x: {'ok' if ratio >= 20 else 'below'})")
    record("sde", {"config": vars(args), "vectorised_wall_s": wall_fast, "vectorised_cpu_s": cpu_fast,
                   "loop_wall_s": wall_slow, "loop_cpu_s": cpu_slow, "loop_scaled_by": scale,
                   "cpu_time_ratio": cpu_slow / cpu_fast, "wall_time_ratio": wall_slow / wall_fast,
                   "max_abs_diff": err, "target_ratio": 20}, time.perf_counter() - start)


if __name__ == "__main__":
    main()
