"""Benchmark: does training same-shape ResNet-18s together, as one grouped model, pay on the CPU?

Chapters 1 and 2 train several CIFAR ResNet-18s of one width (Original and Retrain, the
seeds of a row, the held-out fractions). K such models can be trained as one network whose
every convolution has ``groups=K`` (model k owns channel block k), whose BatchNorm layers
normalise each channel over the batch as before, and whose K classifier heads are one
batched matrix product: each model still sees only its own images, labels and weights. With
one SGD optimiser over the stacked weights and the loss summed over the models, a step of the
stacked network is the K separate steps (momentum and weight decay act elementwise); this
script checks that first, then times the two, interleaved in one run, at each thread count.
Chapter 5's stacked GPT-2 gains because its matrix products are small and batching fills
the cores; whether grouped convolutions do the same for a narrow ResNet is what it measures.

Records go to ``benchmarks/results/stack_resnet.json``; ``kept`` says whether the stacked
step is at least ``KEEP_AT`` times faster at every thread count and stack size measured.

    python benchmarks/bench_stack_resnet.py [--width 8] [--stacks 2 4] [--threads 1 2]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import record  # noqa: E402

from memlab.models.resnet import ResNet18, resnet18  # noqa: E402

KEEP_AT = 1.1  # a speed-up the chapters would adopt; below it, the extra code is not worth it


def _grouped(conv: list[nn.Conv2d]) -> nn.Conv2d:
    """One grouped convolution holding the K convolutions ``conv`` (same shape) as its groups."""
    c = conv[0]
    out = nn.Conv2d(len(conv) * c.in_channels, len(conv) * c.out_channels, c.kernel_size, c.stride, c.padding,
                    bias=False, groups=len(conv))
    out.weight.data.copy_(torch.cat([m.weight.data for m in conv]))
    return out


def _batchnorm(norms: list[nn.BatchNorm2d]) -> nn.BatchNorm2d:
    """One BatchNorm over the K models' channels: per-channel statistics, so nothing is shared."""
    out = nn.BatchNorm2d(len(norms) * norms[0].num_features)
    for name in ("weight", "bias", "running_mean", "running_var"):
        getattr(out, name).data.copy_(torch.cat([getattr(m, name).data for m in norms]))
    return out


def _stack(modules: list[nn.Module]) -> nn.Module:
    """The stacked copy of K same-shape modules (Conv2d, BatchNorm2d, or containers of them)."""
    m = modules[0]
    if isinstance(m, nn.Conv2d):
        return _grouped(modules)
    if isinstance(m, nn.BatchNorm2d):
        return _batchnorm(modules)
    out = type(m).__new__(type(m))
    nn.Module.__init__(out)
    for name, child in m.named_children():
        out.add_module(name, _stack([getattr(x, name) for x in modules]))
    return out


class StackedResNet18(nn.Module):
    """K ResNet-18s (BatchNorm, same width) as one network. Input (B, K*3, 32, 32): model k's images
    in channels 3k..3k+2; output (B, K, num_classes): model k's logits in column k."""

    def __init__(self, models: list[ResNet18]):
        super().__init__()
        if any(m.norm != "bn" for m in models):
            raise ValueError("StackedResNet18: BatchNorm models only")
        self.k = len(models)
        for name in ("conv1", "bn1", "layer1", "layer2", "layer3", "layer4"):
            self.add_module(name, _stack([getattr(m, name) for m in models]))
        self.fc_weight = nn.Parameter(torch.stack([m.fc.weight.data.t() for m in models]))  # (K, C, classes)
        self.fc_bias = nn.Parameter(torch.stack([m.fc.bias.data for m in models]))  # (K, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        feats = F.adaptive_avg_pool2d(out, 1).flatten(1).view(x.shape[0], self.k, -1)
        return torch.einsum("bkc,kco->bko", feats, self.fc_weight) + self.fc_bias

    def unstacked_fc(self, k: int) -> torch.Tensor:
        """Model k's classifier weight as ``nn.Linear`` holds it: (classes, C)."""
        return self.fc_weight[k].t()


def _optimiser(params) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=5e-4)


def _batches(k: int, batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(K, B, 3, 32, 32) images, (K, B) labels, and the images as the stacked input (B, K*3, 32, 32)."""
    g = torch.Generator().manual_seed(seed)
    xs, ys = torch.randn(k, batch, 3, 32, 32, generator=g), torch.randint(0, 10, (k, batch), generator=g)
    return xs, ys, xs.permute(1, 0, 2, 3, 4).reshape(batch, k * 3, 32, 32).contiguous()


def _separate_step(models, opts, xs, ys) -> list[float]:
    losses = []
    for m, o, x, y in zip(models, opts, xs, ys):
        o.zero_grad(set_to_none=True)
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        o.step()
        losses.append(loss.item())
    return losses


def _stacked_step(stack, opt, xg, ys) -> list[float]:
    opt.zero_grad(set_to_none=True)
    out = stack(xg)  # (B, K, classes)
    per_model = F.cross_entropy(out.permute(0, 2, 1), ys.t(), reduction="none").mean(0)  # (K,)
    per_model.sum().backward()  # each model's gradient is its own loss's
    opt.step()
    return per_model.detach().tolist()


def agreement(k: int, width: int, batch: int, steps: int = 2) -> dict:
    """Train K models separately and stacked from the same weights on the same batches; the largest
    loss and weight differences after ``steps`` steps: rounding only (1e-16 in float64; in float32 the
    grouped and dense convolution kernels round apart, about 1e-4 on the stem after two steps)."""
    torch.manual_seed(0)
    models = [resnet18(width=width) for _ in range(k)]
    stack = StackedResNet18(models)
    opts, sopt = [_optimiser(m.parameters()) for m in models], _optimiser(stack.parameters())
    loss_diff = 0.0
    for s in range(steps):
        xs, ys, xg = _batches(k, batch, seed=s)
        a, b = _separate_step(models, opts, xs, ys), _stacked_step(stack, sopt, xg, ys)
        loss_diff = max(loss_diff, max(abs(u - v) for u, v in zip(a, b)))
    c = stack.conv1.weight.shape[0] // k
    with torch.no_grad():
        w_diff = max(float((stack.conv1.weight[i * c:(i + 1) * c] - m.conv1.weight).abs().max())
                     for i, m in enumerate(models))
        fc_diff = max(float((stack.unstacked_fc(i) - m.fc.weight).abs().max()) for i, m in enumerate(models))
    return {"max_loss_difference": loss_diff, "max_stem_weight_difference": w_diff, "max_head_weight_difference": fc_diff}


def step_times(k: int, width: int, batch: int, steps: int, repeats: int) -> tuple[float, float]:
    """Median seconds per training step of the K models one at a time and stacked, interleaved."""
    torch.manual_seed(0)
    models = [resnet18(width=width) for _ in range(k)]
    stack = StackedResNet18(models)
    opts, sopt = [_optimiser(m.parameters()) for m in models], _optimiser(stack.parameters())
    xs, ys, xg = _batches(k, batch, seed=0)
    run = {"separate": lambda: _separate_step(models, opts, xs, ys), "stacked": lambda: _stacked_step(stack, sopt, xg, ys)}
    for f in run.values():  # warm-up
        f()
    times: dict[str, list[float]] = {name: [] for name in run}
    for r in range(repeats):  # alternate the order, so load changes hit both alike
        for name in (list(run) if r % 2 == 0 else list(run)[::-1]):
            t0 = time.perf_counter()
            for _ in range(steps):
                run[name]()
            times[name].append((time.perf_counter() - t0) / steps)
    return statistics.median(times["separate"]), statistics.median(times["stacked"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--width", type=int, default=8, help="ResNet-18 stem width (chapters 1 and 2 at cpu: 8)")
    ap.add_argument("--stacks", type=int, nargs="+", default=[2, 4], help="models trained together (K)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, torch.get_num_threads()])
    ap.add_argument("--batch", type=int, default=128, help="images per model per step (the chapters': 128)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=6)
    args = ap.parse_args(argv)
    for name in ("width", "batch", "steps", "repeats"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be a positive integer (got {getattr(args, name)})")
    if min(args.stacks) < 2 or min(args.threads) < 1:
        ap.error(f"--stacks must be >= 2 and --threads >= 1 (got {args.stacks}, {args.threads})")
    t_start = time.perf_counter()
    check = agreement(max(args.stacks), args.width, min(args.batch, 16))
    print(f"stacked = separate: losses within {check['max_loss_difference']:.1e}, "
          f"weights within {max(check['max_stem_weight_difference'], check['max_head_weight_difference']):.1e}")
    rows = []
    for threads in dict.fromkeys(args.threads):
        torch.set_num_threads(threads)
        for k in args.stacks:
            sep, stk = step_times(k, args.width, args.batch, args.steps, args.repeats)
            rows.append({"threads": threads, "models": k, "separate_ms": round(1e3 * sep, 1),
                         "stacked_ms": round(1e3 * stk, 1), "speedup": round(sep / stk, 3)})
            print(f"threads {threads}  K={k}  width {args.width}: {k} separate steps {1e3 * sep:.0f} ms, "
                  f"one stacked step {1e3 * stk:.0f} ms: x{sep / stk:.2f}")
    kept = all(r["speedup"] >= KEEP_AT for r in rows)
    print(f"kept: {kept} (the stacked step must be at least {KEEP_AT}x faster everywhere measured)")
    record("stack_resnet", {"config": {"width": args.width, "batch": args.batch, "steps": args.steps,
                                       "repeats": args.repeats}, **check, "rows": rows, "keep_at": KEEP_AT,
                            "kept": kept}, time.perf_counter() - t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
