"""Benchmark: does ``torch.compile`` pay for a chapter's training loop, compile time included?

Issue 27 keeps ``torch.compile`` on a chapter's training loop only where the speed-up for the
chapter, compile time included, is at least 1.15x. ``--loop`` picks the loop, at its chapter's
``cpu`` sizes:

- ``resnet``: chapters 1 and 2's CIFAR ResNet-18, one SGD step (record ``compile.json``);
- ``dlm``: chapter 4's masked diffusion LM pre-training, one AdamW step of the LLaDA loss
  (record ``compile-dlm.json``);
- ``gpt2_stacked``: chapter 5's stacked GPT-2 capacity runs, one AdamW step of a stack of
  same-shape models (record ``compile-gpt2_stacked.json``);
- ``qwen_small``: chapter 3's small Qwen2 pre-training (also chapter 6's), one AdamW step of the
  masked next-token loss (record ``compile-qwen_small.json``). The chapter pads each batch to its
  longest example, so its shapes vary from step to step; the benchmark holds them at the longest
  (128 tokens), the case most favourable to a compile.

Chapter 6 trains no loop of its own (it reuses chapters 1-3's models and trainers).

Each training step (forward, backward, step) runs eager and compiled (inductor, the default
backend), interleaved over ``--repeats`` rounds (best of each, so a load change hits both alike),
plus the compile time of a fresh model (its first compiled step, less an eager step). From them
it projects the chapter's ratio for ``--steps-per-model`` training steps and ``--models`` freshly
built models. The first model pays a cold compile (inductor's caches start empty: this script
points them at a fresh folder); each later model of the same shape recompiles with the caches
warm, which the later rounds measure:

    chapter ratio = models * steps * t_eager / (cold + (models - 1) * warm + models * steps * t_compiled)

A loop whose models come in several shapes (chapter 5's stacks) pays a cold compile for each
(``warm`` is then taken as ``cold``, which is conservative). The decision (keep at >= 1.15x) is
recorded in ``benchmarks/results/<record>.json``.

    python benchmarks/bench_compile.py [--loop resnet] [--steps 20] [--repeats 3] [--threads 1]
"""
from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import record  # noqa: E402

from memlab.models import train  # noqa: E402
from memlab.models.resnet import resnet18  # noqa: E402

KEEP_AT = 1.15  # the bar for the chapter, compile time included


@dataclass(frozen=True)
class Loop:
    """One chapter training loop: what it is, its record, and its chapter's schedule at ``cpu``."""

    what: str
    record: str
    steps_per_model: int
    models: int
    shapes_differ: bool  # every model a new shape: each pays a cold compile
    batch: int  # the chapter's batch at cpu
    build: Callable[[bool], Callable[[], torch.Tensor]]  # compiled -> one training step, returning its loss


def _resnet(compiled: bool, width: int = 8, batch: int = 128):
    torch.manual_seed(0)
    model = resnet18(width=width)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    net = train.compile_model(model) if compiled else model
    x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))

    def step():
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def _dlm(compiled: bool, batch: int = 32, length: int = 48):
    """Chapter 4's base pre-training step: 2 layers of width 128, vocabulary 1024, 32 x 48 tokens."""
    from memlab.models import diffusion_lm as dlm

    torch.manual_seed(0)
    model = dlm.MaskedDiffusionLM(dlm.DLMConfig(vocab_size=1024, mask_id=1023, block_size=length))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01, betas=(0.9, 0.98))
    net = train.compile_model(model) if compiled else model
    ids = torch.randint(0, 1023, (batch, length))
    gen = torch.Generator().manual_seed(0)
    model.train()

    def step():
        loss = dlm.llada_loss(net, ids, generator=gen)
        train.optimizer_step(loss, opt, None, model.parameters(), 1.0)
        return loss.detach()
    return step


def _gpt2_stacked(compiled: bool, size: str = "2x16", models: int = 4, batch: int = 128, seq_len: int = 16,
                  vocab: int = 32):
    """Chapter 5's capacity step: a stack of four 2x16 GPT-2s, 128 sequences of 16 tokens over V 32."""
    from memlab.models import gpt2_small as g2
    from memlab.models import gpt2_stacked as gs

    size_ = g2.parse_size(size)
    params = {k: v.detach().requires_grad_(True)
              for k, v in gs.stack([g2.build(size_, vocab, seq_len, seed=i) for i in range(models)]).items()}
    tensors = list(params.values())
    opt = gs._optimizer(tensors, 1e-2, tensors[0].dtype)
    fn = torch.compile(gs.token_log_probs, dynamic=False) if compiled else gs.token_log_probs
    torch.manual_seed(0)
    batch_ = torch.randint(0, vocab, (models, batch, seq_len))

    def step():
        logp = fn(params, batch_, vocab, size_.n_head)
        loss = -logp.gather(-1, batch_[..., None]).squeeze(-1).mean(dim=(1, 2)).sum()
        train.optimizer_step(loss, opt, None, tensors, 1.0, clip=gs._clip_per_model)
        return loss.detach()
    return step


def _qwen_small(compiled: bool, batch: int = 16, length: int = 128):
    """Chapter 3's base pre-training step: a 2 x 128 Qwen2 over a 2,048-token vocabulary, 16 x 128 tokens."""
    from memlab.models import lm
    from memlab.models import qwen_small as Q

    torch.manual_seed(0)
    model = Q.build_small(Q.small_config(2048, hidden=128, layers=2, heads=4, kv_heads=2, max_len=512,
                                         pad_id=0, eos_id=1))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.0)
    net = train.compile_model(model) if compiled else model
    ids = torch.randint(2, 2048, (batch, length))
    att, mask = torch.ones_like(ids), torch.ones_like(ids, dtype=torch.bool)
    model.train()

    def step():
        loss = lm.mean_token_nll(net, ids, att, mask)
        train.optimizer_step(loss, opt, None, params, 1.0)
        return loss.detach()
    return step


# The chapters' schedules at cpu, from their profiles:
# chapter 1: 10 classes x 1000 images / 128 per batch x 15 epochs ~ 1170 steps per model; Original,
#   Retrain and the GroupNorm pair (4 models trained from scratch);
# chapter 4: the base pre-training, 4000 steps of one model (the instruct stage's 150 and the
#   fine-tunes' few dozen steps per model are too short to repay a compile);
# chapter 5: 3000 steps for each of the 4 model sizes' stacks plus 2 precision re-runs, each stack
#   another shape;
# chapter 3: the base pre-training, 400 steps of one model (the LoRA memorisation's 150 and the
#   unlearning's few dozen steps are shorter still).
LOOPS = {
    "resnet": Loop("chapter 1 ResNet-18 training step (also chapter 2's)", "compile", 1170, 4, False, 128, _resnet),
    "dlm": Loop("chapter 4 masked diffusion LM pre-training step", "compile-dlm", 4000, 1, False, 32, _dlm),
    "gpt2_stacked": Loop("chapter 5 stacked GPT-2 capacity step (4 models of 2x16)", "compile-gpt2_stacked",
                         3000, 6, True, 128, _gpt2_stacked),
    "qwen_small": Loop("chapter 3 small Qwen2 pre-training step (2 x 128; also chapter 6's)", "compile-qwen_small",
                       400, 1, False, 16, _qwen_small),
}


def seconds_per_step(build, steps: int, compiled: bool) -> tuple[float, float]:
    """(seconds per training step after warm-up, seconds of the first step) of a fresh model."""
    step = build(compiled)
    t0 = time.perf_counter()
    first = step()
    first_s = time.perf_counter() - t0
    step()  # a second warm-up step (a compiled model may specialise once more)
    t0 = time.perf_counter()
    for _ in range(steps):
        last = step()
    per = (time.perf_counter() - t0) / steps
    assert torch.isfinite(first) and torch.isfinite(last)
    return per, first_s


def losses_agree(build, steps: int = 3) -> float:
    """Largest |loss difference| between eager and compiled training from one seed (a sanity check)."""
    out = []
    for compiled in (False, True):
        step = build(compiled)
        out.append(torch.stack([step() for _ in range(steps)]))
    return float((out[0] - out[1]).abs().max())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loop", choices=sorted(LOOPS), default="resnet", help="which chapter's training loop")
    ap.add_argument("--width", type=int, default=8, help="ResNet width (--loop resnet)")
    ap.add_argument("--batch", type=int, default=None, help="batch size (default: the loop's chapter's)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per measurement")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps-per-model", type=int, default=None, help="the chapter's steps per model (default: the loop's)")
    ap.add_argument("--models", type=int, default=None, help="models the chapter trains (default: the loop's)")
    args = ap.parse_args(argv)
    loop = LOOPS[args.loop]
    n = args.steps_per_model if args.steps_per_model is not None else loop.steps_per_model
    m = args.models if args.models is not None else loop.models
    if min(args.width, args.batch or 1, args.steps, args.repeats, args.threads, n, m) < 1:
        ap.error("--width, --batch, --steps, --repeats, --threads, --steps-per-model and --models must be >= 1")
    batch = args.batch if args.batch is not None else loop.batch
    build = functools.partial(loop.build, batch=batch)
    if args.loop == "resnet":
        build = functools.partial(build, width=args.width)
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
            per, first = seconds_per_step(build, args.steps, compiled)
            best[compiled] = min(best[compiled], per)
            if compiled:
                compile_s.append(first)
            print(f"round {i + 1}: {'compiled' if compiled else 'eager   '} {per * 1e3:7.1f} ms/step"
                  + (f" (first step {first:.1f} s)" if compiled else ""), flush=True)
    # a compile's cost: the first compiled step, less what an eager step costs
    # (at least 0: with warm caches a first step can come out faster than the best eager step)
    cold = max(0.0, compile_s[0] - best[False])
    warm = max(0.0, (min(compile_s[1:]) if len(compile_s) > 1 else compile_s[0]) - best[False])
    if loop.shapes_differ:  # each model another shape: no warm cache to reuse
        warm = cold
    step_ratio = best[False] / best[True]
    chapter_ratio = (m * n * best[False]) / (cold + (m - 1) * warm + m * n * best[True])
    keep = chapter_ratio >= KEEP_AT
    diff = losses_agree(build)
    print(f"{loop.what}: step x{step_ratio:.2f}; compile {cold:.1f} s cold, {warm:.1f} s warm; chapter ({m} models x "
          f"{n} steps) x{chapter_ratio:.2f} -> {'keep' if keep else 'not kept'} (bar x{KEEP_AT}); "
          f"loss difference after 3 steps {diff:.2g}")
    record(loop.record, {"loop": loop.what, "loop_name": args.loop,
                         "inductor_options": dict(train.COMPILE_OPTIONS),
                         **({"width": args.width} if args.loop == "resnet" else {}),
                         "batch": batch, "threads": args.threads,
                         "steps": args.steps, "repeats": args.repeats,
                         "eager_ms_per_step": round(best[False] * 1e3, 2),
                         "compiled_ms_per_step": round(best[True] * 1e3, 2),
                         "compile_cold_s": round(cold, 2), "compile_warm_s": round(warm, 2),
                         "step_ratio": round(step_ratio, 3), "steps_per_model": n, "models": m,
                         "shapes_differ": loop.shapes_differ, "chapter_ratio": round(chapter_ratio, 3),
                         "keep_at": KEEP_AT, "kept": keep, "max_loss_difference": diff},
           time.perf_counter() - start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
