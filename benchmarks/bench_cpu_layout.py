"""Benchmark: what the memory-layout fix costs or gains in ResNet-18 training on the CPU.

The fix for the oneDNN AVX2 heap corruption (``repro_onednn_channels_last.py``) keeps
every image tensor NCHW-contiguous. The alternatives were to switch oneDNN off, or to
keep channels-last (input and model converted together) where it is safe: every
strided 1x1 convolution then has at least 8 input channels, i.e. width >= 8. This
script measures SGD training steps per second of the chapters' CIFAR ResNet-18 for

* ``nchw``: the fix (contiguous input, oneDNN on);
* ``nchw, oneDNN off``: ``torch.backends.mkldnn.flags(enabled=False)``;
* ``channels-last``: model and input in channels-last (widths >= 8 only);

at each thread count, in one run with the variants interleaved (best of ``--repeats``),
and prints the ratios to the fix. Records go to ``benchmarks/results/cpu_layout.json``.

    python benchmarks/bench_cpu_layout.py [--widths 4 8] [--threads 1 2] [--steps 15]
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import record  # noqa: E402

from memlab.models.resnet import resnet18  # noqa: E402

VARIANTS = ("nchw", "nchw, oneDNN off", "channels-last")


def steps_per_second(width: int, variant: str, steps: int, batch: int) -> float:
    """Training steps per second (forward, backward, SGD step) of a fresh ResNet-18."""
    torch.manual_seed(0)
    model = resnet18(width=width)
    x = torch.randn(batch, 3, 32, 32)
    y = torch.randint(0, 10, (batch,))
    if variant == "channels-last":
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
        # ResNet18.features makes its input contiguous; bypass that to keep the layout.
        model.features = _channels_last_features(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    flags = torch.backends.mkldnn.flags(enabled=False) if variant == "nchw, oneDNN off" else contextlib.nullcontext()
    with flags:
        for i in range(steps + 2):  # two warm-up steps
            if i == 2:
                t0 = time.perf_counter()
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return steps / (time.perf_counter() - t0)


def _channels_last_features(model):
    def features(x):
        out = F.relu(model.bn1(model.conv1(x)))
        out = model.layer4(model.layer3(model.layer2(model.layer1(out))))
        return torch.flatten(F.adaptive_avg_pool2d(out, 1), 1)
    return features


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--widths", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, torch.get_num_threads()])
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    if min(args.widths) < 1 or min(args.threads) < 1 or args.steps < 1 or args.repeats < 1:
        ap.error("--widths, --threads, --steps and --repeats must be positive")
    t_start = time.perf_counter()
    rows = []
    for threads in dict.fromkeys(args.threads):
        torch.set_num_threads(threads)
        for width in args.widths:
            variants = [v for v in VARIANTS if v != "channels-last" or width >= 8]
            best = dict.fromkeys(variants, 0.0)
            for _ in range(args.repeats):  # interleaved, so load changes hit every variant alike
                for v in variants:
                    best[v] = max(best[v], steps_per_second(width, v, args.steps, args.batch))
            for v in variants:
                rows.append({"threads": threads, "width": width, "variant": v, "steps_per_s": round(best[v], 3),
                             "ratio_to_fix": round(best[v] / best["nchw"], 3)})
                print(f"threads {threads}  width {width:>3}  {v:<18} {best[v]:7.2f} steps/s  "
                      f"x{best[v] / best['nchw']:.2f} of the fix")
    by = {(r["threads"], r["width"], r["variant"]): r["steps_per_s"] for r in rows}
    for (threads, width, v), sps in by.items():
        one = by.get((1, width, v))
        if threads > 1 and one:
            print(f"width {width:>3}  {v:<18} {threads} threads / 1 thread: x{sps / one:.2f}")
    record("cpu_layout", {"batch": args.batch, "steps": args.steps, "repeats": args.repeats, "rows": rows},
           time.perf_counter() - t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
