"""Benchmark: the step rates that size ``scripts/gpu-evidence.sh`` on one GPU, each loop alone.

The first GPU lease ran the three parts of the paper-scale evidence at once on one H200 and
all three reached their limit: three processes time-share the GPU, and every training loop ran
at about 28 steps/s whatever its size. This script measures, one loop at a time on the run's
device, what each part's loops cost, so the parts can be sized from measurements:

* chapter 1 and 2's ResNet-18 (width 64) training step through :func:`memlab.models.train.train_classifier`,
  BatchNorm at batch 256 and 128 and GroupNorm at 256, with the deterministic kernels
  :func:`memlab.core.config.seed_everything` asks for and without them (cuDNN autotuning);
* inference over CIFAR-10's 50,000 training images (what every evaluation and recalibration pass costs);
* chapter 5's stacked GPT-2 step (:func:`memlab.models.gpt2_stacked.train_stacked`) for each model
  of the part, five data sets at once, V = 2048, S = 64, batch 512, bf16 (and fp32 for one);
* chapter 2's split-half shuffles (:func:`memlab.science.sde.shuffle_products`) and MMD on the device.

Records ``benchmarks/results/gpu.json``. ``--toy`` runs every measurement at tiny sizes on any
device (what the tests run).

    python benchmarks/bench_gpu.py [--toy]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import record  # noqa: E402

from memlab.core import config  # noqa: E402
from memlab.data.synthetic import uniform_tokens  # noqa: E402
from memlab.models import gpt2_small as g2  # noqa: E402
from memlab.models import gpt2_stacked as st  # noqa: E402
from memlab.models.resnet import resnet18  # noqa: E402
from memlab.models.train import predict_logits, train_classifier  # noqa: E402
from memlab.science import sde  # noqa: E402


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def resnet_rate(norm: str, width: int, batch: int, steps: int, deterministic: bool) -> float:
    """Training steps per second of one ResNet-18 (after one warm-up epoch of a few steps)."""
    config.seed_everything(0, deterministic=deterministic)
    if not deterministic:
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.benchmark = True
    model = resnet18(10, norm=norm, width=width)
    x, y = torch.randn(batch * steps, 3, 32, 32), torch.randint(0, 10, (batch * steps,))
    train_classifier(model, x[: batch * 3], y[: batch * 3], epochs=1, batch_size=batch, desc="warm-up")
    _sync()
    t0 = time.perf_counter()
    train_classifier(model, x, y, epochs=1, batch_size=batch, desc=f"{norm} b{batch}")
    _sync()
    return steps / (time.perf_counter() - t0)


def inference_rate(width: int, n: int) -> float:
    """Images per second of eval-mode logits (batch 512)."""
    model = resnet18(10, width=width)
    x = torch.randn(n, 3, 32, 32)
    predict_logits(model, x[:1024])
    _sync()
    t0 = time.perf_counter()
    predict_logits(model, x)
    _sync()
    return n / (time.perf_counter() - t0)


def stacked_rate(size: str, ns: list[int], V: int, S: int, batch: int, precision: str, steps: int) -> float:
    """Steps per second of ``len(ns)`` same-shape GPT-2s trained as one stack (after a warm-up)."""
    dev = config.device()
    n_head = g2.parse_size(size).n_head
    data = [uniform_tokens(n, S, V, seed=0) for n in ns]
    rates = []
    for k in (max(2, steps // 10), steps):  # the first call warms the kernels up
        models = [g2.build(size, V, S, precision, seed=0, device=dev) for _ in ns]
        _sync()
        t0 = time.perf_counter()
        st.train_stacked(models, data, V, n_head=n_head, steps=k, batch_size=batch, lr=1e-3,
                         warmup=1, seeds=[0] * len(ns), desc=f"{size} x{len(ns)} {precision}")
        _sync()
        rates.append(k / (time.perf_counter() - t0))
    return rates[-1]


def sde_seconds(m: int, shuffles: int) -> dict:
    """Seconds of the shuffle products of one subset (halves of m) and of one MMD of 2m points."""
    r = np.random.default_rng(0)
    f = r.normal(size=(2 * m, 10))
    k = sde.center(sde.rbf_kernel(f[:m], np.sqrt(10)))
    l = sde.center(sde.rbf_kernel(f[m:], np.sqrt(10)))
    perms = np.stack([r.permutation(m) for _ in range(shuffles)])
    sde.shuffle_products(k, l, perms)  # warm-up
    t0 = time.perf_counter()
    sde.shuffle_products(k, l, perms)
    shuffle_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    sde.mmd2(f[:m], f[m:])
    return {"shuffles_s": shuffle_s, "mmd_s": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--toy", action="store_true", help="tiny sizes on any device (the tests)")
    args = ap.parse_args(argv)
    toy = args.toy
    width, steps, n_inf = (4, 3, 512) if toy else (64, 150, 50_000)
    V, S, lm_steps = (32, 8, 4) if toy else (2048, 64, 200)
    sizes = ["1x8", "1x16"] if toy else ["1x32", "2x64", "4x128"]
    ns = [16, 32] if toy else [300, 600, 1200, 2400, 3600]
    t_all = time.perf_counter()
    out: dict = {"device": str(config.device()), "toy": toy, "resnet_width": width}
    runs = {}
    for norm, batch, det in (("bn", 256, True), ("bn", 256, False), ("bn", 128, True), ("gn", 256, True)):
        name = f"resnet18 {norm} batch {batch} {'deterministic' if det else 'cudnn autotuned'}"
        runs[name] = round(resnet_rate(norm, width, batch, steps, det), 2)
        print(f"{name}: {runs[name]} steps/s", flush=True)
    out["train_steps_per_s"] = runs
    out["inference_images_per_s"] = round(inference_rate(width, n_inf), 1)
    print(f"inference: {out['inference_images_per_s']} images/s", flush=True)
    config.seed_everything(0)
    lm = {}
    for size in sizes:
        lm[f"{size} x{len(ns)} bf16"] = round(stacked_rate(size, ns, V, S, 512, "bf16", lm_steps), 2)
    lm[f"{sizes[1]} x{len(ns)} fp32"] = round(stacked_rate(sizes[1], ns, V, S, 512, "fp32", lm_steps), 2)
    lm[f"{sizes[-1]} x1 bf16"] = round(stacked_rate(sizes[-1], ns[-1:], V, S, 512, "bf16", lm_steps), 2)
    for k, v in lm.items():
        print(f"stacked GPT-2 {k}: {v} steps/s", flush=True)
    out["stacked_gpt2_steps_per_s"] = lm
    out["sde"] = {m: {k: round(v, 4) for k, v in sde_seconds(m, 200).items()}
                  for m in ((8, 16) if toy else (125, 250, 500, 1000))}
    print(f"sde: {out['sde']}", flush=True)
    record("gpu_toy" if toy else "gpu", out, time.perf_counter() - t_all)
    return 0


if __name__ == "__main__":
    sys.exit(main())
