"""Benchmark: does ``torch.compile`` pay for chapter 1's training loop, compile time included?

Issue 27 keeps ``torch.compile`` on a chapter's training loop only where the speed-up for the
chapter, compile time included, is at least 1.15x. This script measures, for the chapters'
CIFAR ResNet-18 at the ``cpu`` width and batch, one SGD training step (forward, backward, step)
eager and compiled (inductor, the default backend), interleaved over ``--repeats`` rounds (best
of each, so a load change hits both alike), plus the compile time of a fresh model (its first
compiled step, less an eager step). From them it projects the chapter's ratio for ``--steps-per-model``
training steps and ``--models`` freshly built models of that shape. The first model pays a cold
compile (inductor's caches start empty: this script points them at a fresh folder); each later model
recompiles with the caches warm, which the later rounds measure:

    chapter ratio = models * steps * t_eager / (cold + (models - 1) * warm + models * steps * t_compiled)

and records the decision (keep at >= 1.15x). Records go to ``benchmarks/results/compile.json``.

    python benchmarks/bench_compile.py [--width 8] [--batch 128] [--steps 20] [--repeats 3]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import record  # noqa: E402

from memlab import train  # noqa: E402
from memlab.models.resnet import resnet18  # noqa: E402

KEEP_AT = 1.15  # the bar for the chapter, compile time included


def _step_fn(model, opt):
    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def _setup(width: int, batch: int, compiled: bool):
    torch.manual_seed(0)
    model = resnet18(width=width)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    net = train.compile_model(model) if compiled else model
    x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
    return _step_fn(net, opt), x, y


def seconds_per_step(width: int, batch: int, steps: int, compiled: bool) -> tuple[float, float]:
    """(seconds per training step after warm-up, seconds of the first step) of a fresh model."""
    step, x, y = _setup(width, batch, compiled)
    t0 = time.perf_counter()
    first = step(x, y)
    first_s = time.perf_counter() - t0
    step(x, y)  # a second warm-up step (a compiled model may specialise once more)
    t0 = time.perf_counter()
    for _ in range(steps):
        last = step(x, y)
    per = (time.perf_counter() - t0) / steps
    assert torch.isfinite(first) and torch.isfinite(last)
    return per, first_s


def losses_agree(width: int, batch: int, steps: int = 3) -> float:
    """Largest |loss difference| between eager and compiled training from one seed (a sanity check)."""
    out = []
    for compiled in (False, True):
        step, x, y = _setup(width, batch, compiled)
        out.append(torch.stack([step(x, y) for _ in range(steps)]))
    return float((out[0] - out[1]).abs().max())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=20, help="timed steps per measurement")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    # chapter 1 at cpu: 10 classes x 1000 images / 128 per batch x 15 epochs ~ 1170 steps per model,
    # Original, Retrain and the GroupNorm pair (4 models trained from scratch)
    ap.add_argument("--steps-per-model", type=int, default=1170)
    ap.add_argument("--models", type=int, default=4)
    args = ap.parse_args(argv)
    if min(args.width, args.batch, args.steps, args.repeats, args.threads, args.steps_per_model, args.models) < 1:
        ap.error("--width, --batch, --steps, --repeats, --threads, --steps-per-model and --models must be >= 1")
    import os
    import tempfile

    # a cold compile, as on a fresh machine: inductor's on-disk caches start empty
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="memlab-inductor-")
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    best = {False: float("inf"), True: float("inf")}
    compile_s = []
    for i in range(args.repeats):  # interleaved: eager, compiled, eager, compiled, ...
        for compiled in (False, True):
            per, first = seconds_per_step(args.width, args.batch, args.steps, compiled)
            best[compiled] = min(best[compiled], per)
            if compiled:
                compile_s.append(first)
            print(f"round {i + 1}: {'compiled' if compiled else 'eager   '} {per * 1e3:7.1f} ms/step"
                  + (f" (first step {first:.1f} s)" if compiled else ""), flush=True)
    # a compile's cost: the first compiled step, less what an eager step costs
    # (at least 0: with warm caches a first step can come out faster than the best eager step)
    cold = max(0.0, compile_s[0] - best[False])
    warm = max(0.0, (min(compile_s[1:]) if len(compile_s) > 1 else compile_s[0]) - best[False])
    step_ratio = best[False] / best[True]
    n, m = args.steps_per_model, args.models
    chapter_ratio = (m * n * best[False]) / (cold + (m - 1) * warm + m * n * best[True])
    keep = chapter_ratio >= KEEP_AT
    diff = losses_agree(args.width, args.batch)
    print(f"step x{step_ratio:.2f}; compile {cold:.1f} s cold, {warm:.1f} s warm; chapter 1 ({m} models x {n} steps) "
          f"x{chapter_ratio:.2f} -> {'keep' if keep else 'not kept'} (bar x{KEEP_AT}); "
          f"loss difference after 3 steps {diff:.2g}")
    record("compile", {"loop": "chapter 1 ResNet-18 training step (also chapter 2's)",
                       "inductor_options": dict(train.COMPILE_OPTIONS),
                       "width": args.width, "batch": args.batch, "threads": args.threads,
                       "steps": args.steps, "repeats": args.repeats,
                       "eager_ms_per_step": round(best[False] * 1e3, 2),
                       "compiled_ms_per_step": round(best[True] * 1e3, 2),
                       "compile_cold_s": round(cold, 2), "compile_warm_s": round(warm, 2), "step_ratio": round(step_ratio, 3),
                       "steps_per_model": n, "models": m, "chapter_ratio": round(chapter_ratio, 3),
                       "keep_at": KEEP_AT, "kept": keep, "max_loss_difference": diff},
           time.perf_counter() - start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
