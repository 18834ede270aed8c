"""The CPU code paths users' machines take, including oneDNN's AVX2 kernels.

Our development machines have AVX-512, where oneDNN never runs the AVX2 kernel
that corrupted the heap in chapters 1-2 (benchmarks/repro_onednn_channels_last.py).
These tests run the vision training path in subprocesses with the ISA capped at
AVX2, so every x86 machine exercises what an AVX2-only CPU would.
"""
from __future__ import annotations

import os
import platform
import runpy
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from memlab.data.vision import normalise
from memlab.models.resnet import resnet18

REPO = Path(__file__).resolve().parents[1]
REPRO = REPO / "benchmarks" / "repro_onednn_channels_last.py"
AVX2 = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
x86_only = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64") or not torch.backends.mkldnn.is_available(),
    reason="oneDNN's AVX2 kernels exist on x86 only",
)


def _python(code: str, threads: int = 1, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **AVX2, "OMP_NUM_THREADS": str(threads), **env}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, capture_output=True,
                          text=True, timeout=300)


def test_normalise_returns_nchw_contiguous_images():
    images = np.random.default_rng(0).integers(0, 256, size=(5, 32, 32, 3), dtype=np.uint8)
    x = normalise(images)
    assert x.shape == (5, 3, 32, 32) and x.is_contiguous()
    assert not x.is_contiguous(memory_format=torch.channels_last)
    # same values as the channel-wise formula on the NHWC array
    ref = (images[1, 4, 7] / 255.0 - np.array([0.4914, 0.4822, 0.4465])) / np.array([0.2470, 0.2435, 0.2616])
    assert np.allclose(x[1, :, 4, 7].numpy(), ref, atol=1e-5)


def test_resnet_gives_the_same_output_for_either_input_layout():
    torch.manual_seed(0)
    model = resnet18(width=4).eval()
    x = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        a = model(x)
        b = model(x.contiguous(memory_format=torch.channels_last))
    assert torch.equal(a, b)


@x86_only
def test_avx2_cap_selects_onednn_avx2_kernel_for_the_shortcut_gradient():
    """The leg is real: with the cap, oneDNN runs its AVX2 1x1 kernel (a safe shape, 8 channels)."""
    proc = _python("""
        import torch, torch.nn.functional as F
        w = torch.randn(16, 8, 1, 1, requires_grad=True)
        x = torch.randn(4, 8, 16, 16).contiguous(memory_format=torch.channels_last)
        F.conv2d(x, w, stride=2).sum().backward()
        print("capability", torch.backends.cpu.get_cpu_capability())
    """, ONEDNN_VERBOSE="1")
    assert proc.returncode == 0, proc.stderr
    assert "capability AVX2" in proc.stdout
    bwd = [line for line in proc.stdout.splitlines() if "backward_weights" in line and ",exec," in line]
    assert bwd and all(":avx2" in line for line in bwd), bwd


@x86_only
@pytest.mark.parametrize("case", [c for c in runpy.run_path(str(REPRO))["CASES"] if c.startswith("safe")])
def test_repro_safe_variants_complete_on_the_avx2_path(case):
    proc = subprocess.run([sys.executable, str(REPRO), "--case", case], capture_output=True, text=True,
                          env={**os.environ, **AVX2, "OMP_NUM_THREADS": "1"}, timeout=120)
    assert proc.returncode == 0, f"{case}: exit {proc.returncode}\n{proc.stderr[-2000:]}"


@x86_only
@pytest.mark.parametrize("threads", [1, 2])
def test_width4_resnet_trains_on_decoded_images_on_the_avx2_path(threads):
    """The chapters' path (decoded NHWC uint8 -> normalise -> train_classifier) at the smoke width.

    No augmentation, as chapter 2 trains: augment_batch copies, which hid the layout.
    Before the layout fix this aborted in every run on an AVX2-only CPU.
    """
    proc = _python("""
        import numpy as np, torch
        from memlab.data.vision import normalise
        from memlab.models.resnet import resnet18
        from memlab.models.train import accuracy, train_classifier
        rng = np.random.default_rng(0)
        x = normalise(rng.integers(0, 256, size=(128, 32, 32, 3), dtype=np.uint8))
        y = torch.from_numpy(rng.integers(0, 10, size=128))
        for norm in ("bn", "gn"):
            torch.manual_seed(0)
            model = resnet18(width=4, norm=norm)
            losses = train_classifier(model, x, y, epochs=2, batch_size=32, lr=0.05, augment=False)
            assert all(np.isfinite(losses)), losses
            assert 0.0 <= accuracy(model, x, y) <= 1.0
        print("trained")
    """, threads=threads, MEMLAB_PROGRESS="0")
    assert proc.returncode == 0 and "trained" in proc.stdout, f"exit {proc.returncode}\n{proc.stderr[-2000:]}"
