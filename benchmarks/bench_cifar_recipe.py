"""Accuracy against training wall time of the candidate fast CIFAR-10 recipes (issue 53).

Each candidate trains once on all 50,000 training images (``--train-per-class`` fewer) by
:func:`memlab.models.recipe.train_fast`; after every epoch it is evaluated, off the clock, on the
measures the chapters' regime gates read: test accuracy, training accuracy without augmentation (on a
fixed 10,000 of the training images), and the airplane class's test accuracy (chapter 1's forget class).
Rows land in ``benchmarks/results/cifar_recipe.json`` beside earlier candidates (one entry per
candidate and epoch count, ``bn-6ep``, replaced when run again). Run it on an idle machine: the wall times are the measurement.

    .venv/bin/python benchmarks/bench_cifar_recipe.py bn bn-ls gn --threads 2
    .venv/bin/python benchmarks/bench_cifar_recipe.py bn --toy     # seconds, for the tests
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from _record import record, results_dir  # noqa: E402

from memlab.core.config import cpu_bf16  # noqa: E402
from memlab.data.vision import load_cifar  # noqa: E402
from memlab.models.fastcnn import fastcnn  # noqa: E402
from memlab.models.recipe import Recipe, train_fast  # noqa: E402
from memlab.models.train import accuracy  # noqa: E402

NAME = "cifar_recipe"
# name -> (net settings, recipe changes, bf16 or None for the machine's default)
CANDIDATES = {
    "bn": ({"norm": "bn"}, {}, None),
    "bn-ls": ({"norm": "bn"}, {"label_smoothing": 0.2}, None),
    "bn-fp32": ({"norm": "bn"}, {}, False),
    "bn-small": ({"norm": "bn", "shape": "airbench93"}, {}, None),
    "gn": ({"norm": "gn"}, {}, None),
    "gn-slow": ({"norm": "gn"}, {"lr": 0.4, "norm_lr_mult": 4.0}, None),
    "gn-mid": ({"norm": "gn"}, {"lr": 0.8, "norm_lr_mult": 8.0}, None),
    "gn-b256": ({"norm": "gn"}, {"batch_size": 256, "lr": 0.1, "norm_lr_mult": 4.0, "decay": 0.0005}, None),
    "gn-b256-clip": ({"norm": "gn"}, {"batch_size": 256, "lr": 0.1, "norm_lr_mult": 4.0, "decay": 0.0005,
                                      "clip": 2.0}, None),
    "gn-scales": ({"norm": "gn", "train_scales": True}, {"lr": 0.4, "norm_lr_mult": 4.0}, None),
}
TRAIN_EVAL = 10_000  # training images the no-augmentation accuracy is measured on
FORGET_CLASS = 0  # airplane


def run(name: str, epochs: int, per_class: int | None, test_per_class: int | None, seed: int) -> dict:
    net, change, bf16 = CANDIDATES[name]
    bf16 = cpu_bf16() if bf16 is None else bf16
    x, y = load_cifar("train", n_per_class=per_class, seed=seed)
    xt, yt = load_cifar("test", n_per_class=test_per_class, seed=seed)
    sub = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[:TRAIN_EVAL]
    recipe = replace(Recipe(epochs=epochs), **change)
    if per_class is not None and per_class * 10 < recipe.batch_size:
        recipe = replace(recipe, batch_size=max(8, per_class * 10 // 4), whiten_images=per_class * 10)
    torch.manual_seed(seed)
    model = fastcnn(**net)
    rows, clock, eval_s = [], time.perf_counter(), 0.0

    def evaluate(epoch: int, m: torch.nn.Module) -> None:
        nonlocal eval_s
        start = time.perf_counter()
        forget = yt == FORGET_CLASS
        rows.append({"epoch": epoch, "train_wall_s": round(start - clock - eval_s, 1),
                     "test_acc": round(accuracy(m, xt, yt), 4),
                     "train_acc_no_aug": round(accuracy(m, x[sub], y[sub]), 4),
                     "airplane_test_acc": round(accuracy(m, xt[forget], yt[forget]), 4)})
        eval_s += time.perf_counter() - start
        print(f"{name}: epoch {epoch}: {rows[-1]}", flush=True)

    losses = train_fast(model, x, y, recipe, seed=seed, bf16=bf16, on_epoch=evaluate, desc=name)
    return {"net": net, "recipe": asdict(recipe), "bf16": bf16, "train_images": len(x), "test_images": len(xt),
            "params": sum(p.numel() for p in model.parameters()), "losses": [round(v, 4) for v in losses],
            "epochs": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("candidates", nargs="+", help=f"any of {', '.join(CANDIDATES)}")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--toy", action="store_true", help="20 images a class, 2 epochs: the tests' size")
    args = ap.parse_args(argv)
    unknown = [c for c in args.candidates if c not in CANDIDATES]
    if unknown:
        ap.error(f"unknown candidate {', '.join(unknown)}; the candidates are {', '.join(CANDIDATES)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    per_class, test_per_class, epochs = (20, 10, 2) if args.toy else (None, None, args.epochs)
    path = results_dir() / f"{NAME}.json"
    start = time.perf_counter()
    new = {f"{name}-{epochs}ep": run(name, epochs, per_class, test_per_class, args.seed) for name in args.candidates}
    # read just before writing, so candidates measured side by side in two processes both stay
    done = json.loads(path.read_text())["measurements"] if path.exists() and not args.toy else {}
    done.update(new)
    record(NAME if not args.toy else f"{NAME}-toy", done, time.perf_counter() - start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
