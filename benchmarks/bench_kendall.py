"""Benchmark: Kendall's tau-b bootstrap intervals, all resamples at once vs one scipy call each (chapter 6).

Chapter 6 puts a bootstrap interval (2000 resamples) on Kendall's tau between every pair of
its lenses. One ``scipy.stats.kendalltau`` call per resample (which also computes an exact
p-value the interval never reads) made these intervals 12 % of a warm chapter 6 (py-spy, cpu
profile). ``memlab.science.lenses.tau_b_rows`` computes scipy's tau-b for every resample at once from
the same integer counts and the same float expression, so the intervals are bit for bit the
loop's.

This script draws ``--pairs`` lens pairs of ``--items`` items (with ties, as ranks of models
are), times both ways interleaved (best of ``--repeats``), checks that every interval is
identical, and records the timings and their ratio in ``benchmarks/results/kendall.json``.
Exits non-zero if an interval differs.

    python benchmarks/bench_kendall.py [--items 21] [--pairs 10] [--n-boot 2000] [--repeats 3]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import best_of_interleaved, record_same_results  # noqa: E402

from memlab.science import lenses, metrics  # noqa: E402


def loop_ci(x: np.ndarray, y: np.ndarray, n_boot: int) -> tuple[float, float]:
    """Reference: one scipy tau-b per resample (the library's code before)."""
    return metrics.bootstrap_ci(np.stack([x, y], axis=1), stat=lambda s: lenses._tau_or_zero(s[:, 0], s[:, 1]),
                                n_boot=n_boot)


def fast_ci(x: np.ndarray, y: np.ndarray, n_boot: int) -> tuple[float, float]:
    r = lenses.kendall_ci(x, y, n_boot=n_boot)
    return r["low"], r["high"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--items", type=int, default=21, help="items ranked (chapter 6 at cpu: 21 vision models)")
    ap.add_argument("--pairs", type=int, default=10, help="lens pairs")
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    for name, least in (("items", 3), ("pairs", 1), ("n_boot", 1), ("repeats", 1)):
        if getattr(args, name) < least:
            ap.error(f"--{name.replace('_', '-')}: must be an integer >= {least} (got {getattr(args, name)})")
    t0 = time.time()
    g = np.random.default_rng(0)
    pairs = []
    for _ in range(args.pairs):
        x = g.normal(size=args.items)
        y = np.round(x + g.normal(size=args.items), 1)  # correlated, with ties
        pairs.append((x, y))
    best, got = best_of_interleaved({name: (lambda ci=ci: [ci(x, y, args.n_boot) for x, y in pairs])
                                     for name, ci in (("loop", loop_ci), ("fast", fast_ci))}, args.repeats)
    config = {"items": args.items, "pairs": args.pairs, "n_boot": args.n_boot, "repeats": args.repeats}
    return record_same_results("kendall", config, best, got["loop"] == got["fast"],
                               f"{args.pairs} tau intervals of {args.items} items, {args.n_boot} resamples",
                               time.time() - t0)


if __name__ == "__main__":
    sys.exit(main())
