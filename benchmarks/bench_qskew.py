"""Benchmark: batched cyclic-mask scoring vs one mask pattern per forward pass.

Scores the same sequences with Q-Skew twice, once through ``memlab.science.mia.model_view``
(all R * ceil(L / round(rho L)) cyclic patterns of all sequences batched) and once with a
loop that runs the target and the reference on one masked copy at a time, both
through ``memlab.models.diffusion_lm.masked_nll``. For each requested torch
thread count it prints both timings (best of ``--repeats``), their ratio, tokens
per second (masked tokens scored per second, target and reference counted) and
the largest score difference, and records them in
``benchmarks/results/qskew.json``.

Target (issue 6): identical scores and at least 5x faster. Batching turns
hundreds of tiny forwards into a few large matrix products, which removes the
per-call overhead and gives the BLAS enough work to use every core; a single
pattern per forward can use neither. The target is checked at the largest
thread count given (default: all of this machine's cores); the single-thread
ratio is reported beside it. Exits non-zero only if the scores differ.

    python benchmarks/bench_qskew.py [--n 32] [--n-embd 128] [--threads 1 2] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import record  # noqa: E402

from memlab.models import diffusion_lm as dlm  # noqa: E402
from memlab.science import mia  # noqa: E402

TARGET = 5.0
TOLERANCE = 1e-4  # float32 sums over a different number of rows may differ in the last bits


def loop_qskew(target, reference, ids, probe, h):
    """Reference implementation: one forward per (sequence, pattern, model)."""
    out = []
    for i in range(ids.shape[0]):
        deltas = []
        for m in probe.cyclic[i]:
            x = ids[i:i + 1]
            t = dlm.masked_nll(target, x, m[None], batch_size=1)[0]
            r = dlm.masked_nll(reference, x, m[None], batch_size=1)[0]
            deltas.append((r - t)[m].numpy())
        out.append(mia.qskew(np.concatenate(deltas), h))
    return np.array(out)


def batched_qskew(target, reference, ids, probe, h, batch_size):
    tv = mia.model_view(target, ids, probe, batch_size=batch_size, groups={"cyclic"}, stats=False)
    rv = mia.model_view(reference, ids, probe, batch_size=batch_size, groups={"cyclic"}, stats=False)
    return np.array([mia.qskew(d, h) for d in mia.deltas_of(tv, rv)])


def best_time(fn, repeats: int):
    """(result, least wall seconds over ``repeats`` calls): the least disturbed timing on a shared machine."""
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=32, help="sequences")
    ap.add_argument("--length", type=int, default=32, help="tokens per sequence")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--rho", type=float, default=0.35)
    ap.add_argument("--batch-size", type=int, default=64, help="masked copies per forward in the batched path")
    ap.add_argument("--n-embd", type=int, default=128, help="model width (cpu profile: 128, smoke: 32)")
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, nargs="+", default=sorted({1, torch.get_num_threads()}),
                    help="torch intra-op thread counts to measure (default: 1 and all cores)")
    ap.add_argument("--repeats", type=int, default=3, help="timings are the best of this many runs")
    args = ap.parse_args(argv)
    if any(t < 1 for t in args.threads):
        ap.error(f"--threads: every count must be >= 1 (got {args.threads})")
    start = time.perf_counter()
    torch.manual_seed(0)
    arch = dlm.DLMConfig(vocab_size=args.vocab, mask_id=0, block_size=args.length, n_layer=args.n_layer,
                         n_head=4 if args.n_embd % 4 == 0 else 1, n_embd=args.n_embd)
    target = dlm.MaskedDiffusionLM(arch).to(args.device).eval()
    reference = dlm.MaskedDiffusionLM(arch).to(args.device).eval()
    ids = torch.randint(1, args.vocab, (args.n, args.length))
    probe = mia.make_probe(torch.ones_like(ids, dtype=torch.bool), rho=args.rho, rounds=args.rounds, sama_steps=1)
    tokens = int(probe.cyclic.sum()) * 2  # masked tokens scored, target + reference
    print(f"model n_embd={args.n_embd} n_layer={args.n_layer} vocab={args.vocab} on {args.device}; "
          f"sequences {args.n} x {args.length} tokens, {probe.cyclic.shape[1]} cyclic patterns each "
          f"({tokens} masked tokens scored per pass)")

    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        batched_qskew(target, reference, ids[:2], mia.make_probe(torch.ones(2, args.length, dtype=torch.bool)), 0.1, 8)
        fast, t_fast = best_time(lambda: batched_qskew(target, reference, ids, probe, 0.1, args.batch_size),
                                 args.repeats)
        slow, t_slow = best_time(lambda: loop_qskew(target, reference, ids, probe, 0.1), args.repeats)
        rows.append({"threads": threads, "batched_s": t_fast, "loop_s": t_slow, "speedup": t_slow / t_fast,
                     "batched_tokens_per_s": tokens / t_fast, "loop_tokens_per_s": tokens / t_slow,
                     "max_abs_score_diff": float(np.max(np.abs(fast - slow)))})
        r = rows[-1]
        print(f"threads {threads}: batched {t_fast:7.3f} s ({r['batched_tokens_per_s']:8.0f} tokens/s)   "
              f"loop {t_slow:7.3f} s ({r['loop_tokens_per_s']:7.0f} tokens/s)   speed-up {r['speedup']:4.1f}x   "
              f"max |score difference| {r['max_abs_score_diff']:.1e}")

    same = all(r["max_abs_score_diff"] <= TOLERANCE for r in rows)
    at_target = rows[-1]["speedup"] >= TARGET
    print(f"scores agree within {TOLERANCE:g}: {'ok' if same else 'FAIL'};  "
          f"speed-up at {rows[-1]['threads']} thread(s) {rows[-1]['speedup']:.1f}x, "
          f"target >= {TARGET:g}x: {'ok' if at_target else 'below'}")
    record("qskew", {"config": vars(args) | {"masked_tokens_per_pass": tokens, "cpu_count": os.cpu_count()},
                     "rows": rows, "scores_agree": same, "target_speedup": TARGET, "target_met": at_target},
           time.perf_counter() - start)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
