"""Minimal reproduction of the heap corruption that killed chapters 1-2 on AVX2-only CPUs.

Finding (torch 2.14.1+cu130, its bundled oneDNN v3.12.0, CPU, fp32; 2-core AMD EPYC with
AVX2 and no AVX-512, and any x86 CPU with ``ONEDNN_MAX_CPU_ISA=AVX2``):

* The op is the **weight gradient of a strided 1x1 convolution** (``F.conv2d(x, w, stride=2)``,
  the ResNet shortcut of a stage that halves the resolution) whose input is in
  **channels-last** memory layout and has **fewer than 8 input channels** (one AVX2 register
  block). oneDNN picks ``jit_1x1:avx2`` for ``backward_weights`` with an ``acdb`` (NHWC) source
  and weights padded to ``ABcd8b8a``; the process then dies with ``double free or corruption``,
  ``free(): invalid next size`` or a segmentation fault, at the first backward pass or soon
  after.
* Measured here, 20 backward passes each, batch 32, 32x32 input: input channels 2, 3, 4 and 6
  crash in every run; 8, 12 and 20 never do; stride 1 never does; the forward pass and the
  input gradient never do; the same tensors in contiguous NCHW layout never do; with
  ``torch.backends.mkldnn.enabled = False`` nothing crashes; ``ONEDNN_MAX_CPU_ISA=AVX`` or
  ``SSE41`` (other kernels) do not crash. On AVX-512 machines oneDNN uses its AVX-512 kernel
  and the defect stays hidden unless the ISA is capped at AVX2.
* How the book met it: ``memlab.data.vision.normalise`` permuted decoded NHWC images to
  (N, C, H, W) without copying, so every image tensor had channels-last strides; a convolution
  keeps its input's layout, so every activation of the width-4 smoke ResNet was channels-last,
  and stage 2's shortcut (4 -> 8 channels, stride 2) hit the case above.
* The fix (in the library): image tensors are made NCHW-contiguous in ``normalise``, and
  ``ResNet18`` makes its input contiguous, so no channels-last activation reaches oneDNN.

Usage: ``python benchmarks/repro_onednn_channels_last.py`` runs every case below in a fresh
subprocess (a crash kills only that subprocess) and prints one line per case with the
exit status; ``--case NAME`` runs one case in this process. Force the AVX2 path on an
AVX-512 machine with ``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2``.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

# name: (input channels, output channels, stride, layout, parts that need a gradient)
CASES = {
    "crash: strided 1x1, 4 channels, channels-last, weight grad": (4, 8, 2, "channels_last", "weight"),
    "crash: strided 1x1, 3 channels, channels-last, weight grad": (3, 8, 2, "channels_last", "weight"),
    "safe: same, contiguous NCHW": (4, 8, 2, "contiguous", "weight"),
    "safe: same, 8 input channels": (8, 16, 2, "channels_last", "weight"),
    "safe: same, stride 1": (4, 8, 1, "channels_last", "weight"),
    "safe: same, input grad only": (4, 8, 2, "channels_last", "input"),
}
STEPS, BATCH, SIZE = 20, 32, 32


def run_case(name: str) -> None:
    """Forward and backward ``STEPS`` times through one 1x1 convolution of ``CASES[name]``."""
    import torch
    import torch.nn.functional as F

    c_in, c_out, stride, layout, grad = CASES[name]
    torch.manual_seed(0)
    w = torch.randn(c_out, c_in, 1, 1, requires_grad=grad == "weight")
    for _ in range(STEPS):
        x = torch.randn(BATCH, c_in, SIZE, SIZE)
        if layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        x.requires_grad_(grad == "input")
        F.conv2d(x, w, stride=stride).square().mean().backward()


def describe(returncode: int) -> str:
    if returncode == 0:
        return "completed"
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exit {returncode}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", choices=sorted(CASES), help="run one case in this process")
    args = ap.parse_args(argv)
    if args.case:
        run_case(args.case)
        return 0
    import torch

    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "(native)")
    print(f"torch {torch.__version__}, ATen CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"ONEDNN_MAX_CPU_ISA={isa}, threads {torch.get_num_threads()}")
    for name in CASES:
        proc = subprocess.run([sys.executable, __file__, "--case", name], capture_output=True, text=True)
        print(f"  {name:<62} {describe(proc.returncode)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
