"""CIFAR-adapted ResNet-18 (3x3 stem, no max-pool) with a BatchNorm/GroupNorm switch.

Follows the layout of He et al. (2016) as adapted for 32x32 inputs in the
unlearning literature: four stages of two BasicBlocks, strides 1, 2, 2, 2.
``width`` is the number of channels of the first stage (64 in the paper);
the cpu profile uses a narrower network.
"""
from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F

NORMS = ("bn", "gn")


def norm_layer(norm: str, channels: int) -> nn.Module:
    """BatchNorm2d (running statistics) or GroupNorm (none); GroupNorm uses up to 32 groups."""
    if norm == "bn":
        return nn.BatchNorm2d(channels)
    if norm == "gn":
        groups = min(32, channels)
        while channels % groups:
            groups -= 1
        return nn.GroupNorm(groups, channels)
    raise ValueError(f"parameter 'norm': must be one of {NORMS} (got {norm!r})")


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, c_in: int, c_out: int, stride: int, norm: str):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = norm_layer(norm, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = norm_layer(norm, c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), norm_layer(norm, c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18 for (N, 3, 32, 32) images; ``features`` returns the (N, 8*width) penultimate layer."""

    def __init__(self, num_classes: int = 10, norm: str = "bn", width: int = 64, in_channels: int = 3):
        super().__init__()
        if not isinstance(width, int) or width < 1:
            raise ValueError(f"parameter 'width': must be a positive integer (got {width!r})")
        if not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"parameter 'num_classes': must be an integer >= 2 (got {num_classes!r})")
        self.norm, self.width = norm, width
        self.conv1 = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        self.bn1 = norm_layer(norm, width)
        layers, c_in = [], width
        for i, stride in enumerate((1, 2, 2, 2)):
            c_out = width * 2**i
            layers.append(nn.Sequential(BasicBlock(c_in, c_out, stride, norm), BasicBlock(c_out, c_out, 1, norm)))
            c_in = c_out
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(c_in, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        # The weights are NCHW-contiguous, so the input is too: a channels-last input
        # makes every activation channels-last, and oneDNN's AVX2 convolution backward
        # corrupts the heap on those at small widths (benchmarks/repro_onednn_channels_last.py).
        out = F.relu(self.bn1(self.conv1(x.contiguous())))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        return torch.flatten(F.adaptive_avg_pool2d(out, 1), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


def resnet18(num_classes: int = 10, norm: str = "bn", width: int = 64, device=None) -> ResNet18:
    """CIFAR ResNet-18; ``norm`` is 'bn' (BatchNorm) or 'gn' (GroupNorm), ``width`` the stem channels.

    Built on ``device``, by default the run's (:func:`memlab.core.config.device`: CUDA when present), so
    every chapter that trains one trains it where the run computes.
    """
    if norm not in NORMS:
        raise ValueError(f"parameter 'norm': must be one of {NORMS} (got {norm!r})")
    if device is None:
        from memlab.core.config import device as run_device

        device = run_device()
    return ResNet18(num_classes=num_classes, norm=norm, width=width).to(device)


def train_memory_bytes(width: int, batch_size: int, num_classes: int = 10) -> int:
    """Rough upper estimate (bytes) of training a 32x32 CIFAR ResNet-18 of stem ``width`` in fp32.

    Parameters: 2728 * width**2 + 8 * width * num_classes (+ num_classes), exact to < 0.1 %
    (11.17 M at width 64). Counted four times (weights, gradients, momentum, and the copy an
    unlearning run keeps of the original), plus the activations kept for backward: about 40
    feature maps of width x 32 x 32 floats per image. Used to refuse a width before any work.
    """
    params = 2728 * width**2 + 8 * width * num_classes + num_classes
    return 16 * params + 4 * batch_size * width * 32 * 32 * 40
