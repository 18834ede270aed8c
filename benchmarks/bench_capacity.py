"""Benchmark: stacked training of same-shape capacity models against one model at a time.

In one process, for each model of ``--models`` (chapter 5's V and S of ``--profile``, its
batch size), it measures training throughput in tokens/s of

  * ``one``: one Hugging Face GPT2LMHeadModel at a time (:func:`memlab.models.gpt2_stacked.train_one`),
  * ``stack1``: the stacked trainer holding one model,
  * ``stackG``: the stacked trainer holding G models (``--stack``), each on its own data,

interleaved over ``--rounds`` rounds (the median is reported, so a load spike on a shared
machine hits every variant alike), the ratio stackG / one, achieved FLOP/s (6 x params x
tokens/s) against the machine's dense fp32 matmul rate on the same threads, and, from
``torch.profiler``, the share of CPU time spent in matmul kernels against everything else
(elementwise, reductions, indexing, optimizer, autograd bookkeeping): where the CPU bound lies.

    python benchmarks/bench_capacity.py [--profile cpu] [--models 1x16 2x16] [--stack 8] [--steps 60]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import record  # noqa: E402

from memlab.core import config  # noqa: E402
from memlab.data.synthetic import uniform_tokens  # noqa: E402
from memlab.models import gpt2_small as g2  # noqa: E402
from memlab.models import gpt2_stacked as st  # noqa: E402

# matmul and attention kernels (the dense-algebra part); everything else is elementwise, reductions,
# indexing, the optimizer and autograd bookkeeping
MATMUL_OPS = (
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_attention_math",
    "aten::_flash_attention_forward",
    "aten::linear",
    "aten::matmul",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
)


def matmul_flops_per_s(n: int, repeats: int) -> float:
    """Dense fp32 (n, n) @ (n, n) rate in FLOP/s (2 n^3 per product), best of ``repeats``."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n**3 / best


def _variant(kind: str, size: str, G: int, V: int, S: int, batch: int, lr: float, steps: int):
    """A closure that trains ``steps`` steps of one variant; returns tokens trained (all models together)."""
    models = [g2.build(size, V, S, seed=g) for g in range(G)]
    data = [uniform_tokens(4 * batch, S, V, seed=g) for g in range(G)]
    n_head = g2.parse_size(size).n_head

    def go() -> int:
        if kind == "one":
            return st.train_one(
                models[0], data[0], V, steps=steps, batch_size=batch, lr=lr, warmup=1, seed=0
            )["tokens"]
        hist = st.train_stacked(
            models,
            data,
            V,
            n_head=n_head,
            steps=steps,
            batch_size=batch,
            lr=lr,
            warmup=1,
            seeds=list(range(G)),
        )
        return hist["tokens"] * G

    return go


def _timed(go) -> float:
    t0 = time.perf_counter()
    tokens = go()
    return tokens / (time.perf_counter() - t0)


def profile_shares(go) -> dict[str, float]:
    """Share of self CPU time in matmul kernels vs the rest, from torch.profiler over one call of ``go``."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        go()
    total, mm = 0.0, 0.0
    top = []
    for e in prof.key_averages():
        t = e.self_cpu_time_total
        total += t
        if e.key in MATMUL_OPS:
            mm += t
        top.append((t, e.key))
    top.sort(reverse=True)
    return {
        "matmul_share": mm / total if total else float("nan"),
        "other_share": 1 - mm / total if total else float("nan"),
        "top_ops": [f"{k}: {t / total:.1%}" for t, k in top[:8]],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu", choices=config.PROFILES)
    ap.add_argument("--models", nargs="*", default=["1x16", "2x16"])
    ap.add_argument("--stack", type=int, default=8, help="models in the stacked variant (G)")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--matmul", type=int, default=512)
    args = ap.parse_args()
    start = time.perf_counter()
    torch.manual_seed(0)
    cfg = config.resolve("05_capacity", args.profile)
    V, S, B = cfg.vocab_size, cfg.seq_len, cfg.batch_size
    peak = matmul_flops_per_s(args.matmul, 5)
    print(
        f"torch threads {torch.get_num_threads()}; dense fp32 matmul ({args.matmul}^2): "
        f"{peak / 1e9:.2f} GFLOP/s"
    )
    out = {"config": vars(args) | {"V": V, "S": S, "batch": B}, "matmul_flops_per_s": peak, "models": {}}
    for size in args.models:
        sz = g2.parse_size(size)
        params = g2.count_params(sz.n_layer, sz.n_embd, V + 1, S)
        variants = {
            "one": _variant("one", size, 1, V, S, B, cfg.lr, args.steps),
            "stack1": _variant("stack", size, 1, V, S, B, cfg.lr, args.steps),
            f"stack{args.stack}": _variant("stack", size, args.stack, V, S, B, cfg.lr, args.steps),
        }
        for go in variants.values():  # warm-up outside the clock
            go()
        rates = {k: [] for k in variants}
        for _ in range(args.rounds):  # interleaved, so load drift hits every variant alike
            for k, go in variants.items():
                rates[k].append(_timed(go))
        med = {k: statistics.median(v) for k, v in rates.items()}
        shares = {k: profile_shares(variants[k]) for k in ("one", f"stack{args.stack}")}
        row = {
            "params": params,
            "tokens_per_s": med,
            "tokens_per_s_rounds": rates,
            "ratio_stack_vs_one": med[f"stack{args.stack}"] / med["one"],
            "achieved_flops_per_s": {k: 6.0 * params * r for k, r in med.items()},
            "achieved_over_peak": {k: 6.0 * params * r / peak for k, r in med.items()},
            "profile": shares,
        }
        out["models"][size] = row
        print(f"{size} ({params:,} params), V={V} S={S} batch {B}:")
        for k, r in med.items():
            print(
                f"  {k:8s} {r:12,.0f} tokens/s  {6 * params * r / 1e9:7.3f} GFLOP/s  "
                f"{6 * params * r / peak:.4f} of matmul peak"
            )
        print(f"  stack{args.stack} / one = {row['ratio_stack_vs_one']:.2f}x")
        for k, sh in shares.items():
            print(
                f"  profile {k}: matmul {sh['matmul_share']:.1%}, everything else {sh['other_share']:.1%}; "
                f"top: {', '.join(sh['top_ops'][:4])}"
            )
    record("capacity", out, time.perf_counter() - start)


if __name__ == "__main__":
    main()
