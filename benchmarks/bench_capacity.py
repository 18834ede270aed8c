"""Benchmark: training throughput of the capacity runs against the machine's dense-matmul FLOP/s.

In one process it (1) measures the dense fp32 matmul rate of this machine
(square ``--matmul`` x ``--matmul`` products), (2) trains one capacity-sweep
model (a GPT-2 of ``--model`` on N uniform sequences of the chosen profile's V
and S) for ``--steps`` steps and counts achieved FLOP/s as 6 x parameters x
tokens per second, and (3) reports their ratio (model FLOP utilisation) and the
chapter's recorded wall time per profile (from ``book/results`` and
``--results`` files, when present).

    python benchmarks/bench_capacity.py [--profile cpu] [--model 2x16] [--n 256] [--steps 200]

Tiny models are dominated by per-step overhead (kernel launches, Python), so a
low ratio at the cpu profile is expected; the paper profile's models are large
enough for the ratio to approach the matmul rate on a GPU.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import record  # noqa: E402

from memlab import config  # noqa: E402
from memlab.data.synthetic import uniform_tokens  # noqa: E402
from memlab.models import gpt2_small as g2  # noqa: E402


def matmul_flops_per_s(n: int, repeats: int, dev: torch.device) -> float:
    """Dense fp32 (n, n) @ (n, n) rate in FLOP/s (2 n^3 per product), best of ``repeats``."""
    a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        a @ b
        if dev.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n**3 / best


def training_flops_per_s(model_size: str, n: int, vocab: int, seq: int, steps: int, batch: int, lr: float,
                         precision: str, dev: torch.device) -> tuple[float, int, int, float]:
    """Achieved training FLOP/s (6 P T / s) of one run; returns (rate, params, tokens, seconds)."""
    model = g2.build(model_size, vocab, seq, precision, device=dev)
    data = uniform_tokens(n, seq, vocab)
    g2.train_until_plateau(model, data, vocab, evaluate=lambda: 0.0, max_steps=5, batch_size=batch, lr=lr,
                           eval_every=10**9, patience=1, tol=0.0)  # warm-up outside the clock
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    hist = g2.train_until_plateau(model, data, vocab, evaluate=lambda: 0.0, max_steps=steps, batch_size=batch,
                                  lr=lr, eval_every=10**9, patience=1, tol=0.0)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    params = g2.n_params(model)
    return g2.train_flops(params, hist["tokens"]) / wall, params, hist["tokens"], wall


def recorded_wall_times(paths: list[Path]) -> dict[str, float]:
    """Chapter wall time per profile from results JSON files (provenance.wall_time_s)."""
    out = {}
    for p in paths:
        if p.exists():
            d = json.loads(p.read_text())
            out[d["provenance"]["profile"]] = d["provenance"]["wall_time_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu", choices=config.PROFILES)
    ap.add_argument("--model", default=None, help="'LxD' (default: the profile's largest sweep model)")
    ap.add_argument("--n", type=int, default=None, help="sequences (default: the profile's largest N, capped at 4096)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--matmul", type=int, default=1024)
    ap.add_argument("--results", nargs="*", default=[], help="more results JSON files (e.g. of other profiles)")
    args = ap.parse_args()
    start = time.perf_counter()

    from memlab.experiments.ch05_capacity import convergence_model

    cfg = config.resolve("05_capacity", args.profile)
    size = args.model or convergence_model(cfg)
    n = args.n or min(max(cfg.dataset_sizes), 4096)
    dev = config.device()
    peak = matmul_flops_per_s(args.matmul, 5, dev)
    rate, params, tokens, wall = training_flops_per_s(size, n, cfg.vocab_size, cfg.seq_len, args.steps,
                                                      cfg.batch_size, cfg.lr, cfg.precision, dev)
    print(f"device {dev}, torch threads {torch.get_num_threads()}")
    print(f"dense matmul ({args.matmul}^2, fp32): {peak / 1e9:.2f} GFLOP/s")
    print(f"training {size} ({params:,} params), V={cfg.vocab_size} S={cfg.seq_len} N={n} "
          f"batch {cfg.batch_size} {cfg.precision}: {tokens:,} tokens in {wall:.2f} s = {rate / 1e9:.3f} GFLOP/s")
    print(f"ratio achieved / matmul = {rate / peak:.4f}")
    root = config.repo_root()
    times = recorded_wall_times([root / "book" / "results" / "05_capacity.json"] + [Path(p) for p in args.results])
    for prof, t in times.items():
        print(f"chapter wall time at profile {prof}: {t:.0f} s")
    record("capacity", {"config": vars(args) | {"model_resolved": size, "n_resolved": n},
                        "matmul_flops_per_s": peak, "training_flops_per_s": rate, "params": params,
                        "tokens": tokens, "training_s": wall, "ratio": rate / peak,
                        "chapter_wall_s_by_profile": times}, time.perf_counter() - start)


if __name__ == "__main__":
    main()
