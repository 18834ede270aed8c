"""Benchmark: SAMA's random subsets drawn at once vs one ``rng.choice`` per subset (chapter 4).

SAMA (``memlab.science.mia.sama_score``) votes on 128 random token subsets per masking step, per
sequence, per scored model. Drawn one ``Generator.choice`` call at a time, numpy's per-call
overhead made this loop 17 % of chapter 4's CPU time at the ``cpu`` profile (cProfile of a
cold run: 266 of 1564 s). ``memlab.science.mia.choice_rows`` replays the same draws from one
bounded-integer call, so the subsets, and every score, are bit for bit the loop's.

This script scores synthetic sequences shaped like the chapter's (``--n`` sequences of
``--length`` tokens under ``--steps`` nested masks) both ways, interleaved (best of
``--repeats``), checks that every score is identical and that the generators end in the same
state, and records both timings and their ratio in ``benchmarks/results/sama.json``. Exits
non-zero if the scores differ.

    python benchmarks/bench_sama.py [--n 500] [--length 48] [--steps 6] [--repeats 3]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import best_of_interleaved, record_same_results  # noqa: E402

from memlab.science import mia  # noqa: E402

SUBSET, SUBSETS = 8, 128  # memlab.science.mia.compute_scores's defaults (sama_subset, sama_subsets)


def loop_vote(nll_target, nll_ref, subset_size: int, num_subsets: int, rng: np.random.Generator) -> float:
    """Reference: the vote with one ``rng.choice`` call per subset (the library's code before)."""
    t, r = np.asarray(nll_target, float), np.asarray(nll_ref, float)
    s = min(subset_size, t.size)
    idx = np.stack([rng.choice(t.size, size=s, replace=False) for _ in range(num_subsets)])
    return float((r[idx].sum(1) > t[idx].sum(1)).mean())


def nested_nll(n: int, length: int, steps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(n, steps, length) target and reference NLLs under nested growing masks, NaN where unmasked."""
    g = np.random.default_rng(seed)
    eligible = np.ones(length, dtype=bool)
    out = []
    for _ in range(2):
        a = np.full((n, steps, length), np.nan)
        for i in range(n):
            masks = mia.sama_masks(torch.from_numpy(eligible), steps, 0.05, 0.5,
                                   torch.Generator().manual_seed(seed + i)).numpy()
            a[i][masks] = g.gamma(2.0, 1.0, size=int(masks.sum()))
        out.append(a)
    return out[0], out[1]


def score_all(t: np.ndarray, r: np.ndarray, seed: int, vote) -> tuple[np.ndarray, dict]:
    """SAMA of every sequence with ``vote`` as ``memlab.science.mia.sama_vote``; the scores and the generator's end state."""
    library_vote, mia.sama_vote = mia.sama_vote, vote
    try:
        rng = np.random.default_rng(seed)
        scores = np.array([mia.sama_score(t[i], r[i], SUBSET, SUBSETS, rng) for i in range(t.shape[0])])
    finally:
        mia.sama_vote = library_vote
    return scores, rng.bit_generator.state


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=500, help="sequences (chapter 4 at cpu: 250 members + 250 non-members)")
    ap.add_argument("--length", type=int, default=48, help="tokens per sequence (chapter 4 at cpu: 48)")
    ap.add_argument("--steps", type=int, default=6, help="nested masking steps (chapter 4 at cpu: 6)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    for name, least in (("n", 1), ("length", 2), ("steps", 1), ("repeats", 1)):
        if getattr(args, name) < least:
            ap.error(f"--{name}: must be an integer >= {least} (got {getattr(args, name)})")
    t0 = time.time()
    t, r = nested_nll(args.n, args.length, args.steps, seed=0)
    best, got = best_of_interleaved({"loop": lambda: score_all(t, r, 1, loop_vote),
                                     "fast": lambda: score_all(t, r, 1, mia.sama_vote)}, args.repeats)
    same = bool(np.array_equal(got["loop"][0], got["fast"][0]) and got["loop"][1] == got["fast"][1])
    config = {"n": args.n, "length": args.length, "steps": args.steps, "subset": SUBSET, "subsets": SUBSETS,
              "repeats": args.repeats}
    return record_same_results("sama", config, best, same, f"SAMA of {args.n} sequences", time.time() - t0,
                               loop_ms_per_sequence=round(1e3 * best["loop"] / args.n, 3),
                               fast_ms_per_sequence=round(1e3 * best["fast"] / args.n, 3))


if __name__ == "__main__":
    sys.exit(main())
