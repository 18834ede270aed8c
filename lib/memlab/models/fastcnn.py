"""A fast-training CIFAR CNN with BatchNorm in every conv block (the shape of Keller Jordan's airbench94).

The net (written for this book after reading cifar10-airbench's ``legacy/airbench94.py``, MIT):

- a 2x2 "whitening" conv (3 -> 24 channels, no padding, 32 -> 31 pixels) whose weights are the
  eigenvectors of the training images' 2x2-patch covariance scaled by 1/sqrt(eigenvalue + eps),
  each with its negative (:func:`whiten_init`), frozen; its bias trains;
- three groups ``conv3x3 -> max-pool 2 -> norm -> GELU -> conv3x3 -> norm -> GELU`` of widths
  ``widths`` (64, 256, 256 for airbench94; 64, 128, 128 for airbench93): 31 -> 15 -> 7 -> 3 pixels;
- a 3x3 max-pool, and the head ``fc``: a bias-free linear layer whose logits are scaled by
  ``logit_scale`` (1/9), so ``model.fc(model.features(x))`` is ``model(x)``.

Every conv after the first starts as an identity on its first input channels (Dirac init), the rest
at PyTorch's default. ``norm="bn"`` puts a BatchNorm2d with running statistics in each block (the
BN-illusion papers' subject); ``norm="gn"`` a GroupNorm for the control. As in airbench, the norm
layers' scales stay at 1 and only their shifts train (``train_scales=True`` trains both).
"""
from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F

NORMS = ("bn", "gn")
SHAPES = {"airbench94": (64, 256, 256), "airbench93": (64, 128, 128)}
WHITEN_PATCH = 2  # pixels on a side of the whitening conv's patches
WHITEN_EPS = 5e-4  # added to each eigenvalue before the 1/sqrt scaling
GN_GROUPS = 16


def norm_layer(norm: str, channels: int, bn_momentum: float, train_scales: bool = False) -> nn.Module:
    """BatchNorm2d (running statistics, ``bn_momentum`` the weight of each new batch) or GroupNorm; its
    scales fixed at 1 unless ``train_scales``."""
    if norm == "bn":
        layer = nn.BatchNorm2d(channels, momentum=bn_momentum, eps=1e-12)
    elif norm == "gn":
        layer = nn.GroupNorm(min(GN_GROUPS, channels), channels)
    else:
        raise ValueError(f"parameter 'norm': must be one of {NORMS} (got {norm!r})")
    layer.weight.requires_grad_(train_scales)
    return layer


def dirac_conv(c_in: int, c_out: int) -> nn.Conv2d:
    """A bias-free 3x3 'same' conv whose first ``min(c_in, c_out)`` filters start as the identity."""
    conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
    with torch.no_grad():
        nn.init.dirac_(conv.weight[:c_in])
    return conv


class ConvGroup(nn.Module):
    """conv3x3 -> max-pool 2 -> norm -> GELU -> conv3x3 -> norm -> GELU: (B, c_in, H, W) -> (B, c_out, H/2, W/2)."""

    def __init__(self, c_in: int, c_out: int, norm: str, bn_momentum: float, train_scales: bool):
        super().__init__()
        self.conv1 = dirac_conv(c_in, c_out)
        self.norm1 = norm_layer(norm, c_out, bn_momentum, train_scales)
        self.conv2 = dirac_conv(c_out, c_out)
        self.norm2 = norm_layer(norm, c_out, bn_momentum, train_scales)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.norm1(F.max_pool2d(self.conv1(x), 2)))
        return F.gelu(self.norm2(self.conv2(x)))


class ScaledLinear(nn.Module):
    """A bias-free linear layer whose output is multiplied by a fixed ``scale``: (B, d) -> (B, classes)."""

    def __init__(self, d: int, classes: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(d, classes, bias=False)
        self.scale = scale

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        return self.linear(f) * self.scale


class FastCNN(nn.Module):
    """The airbench-shaped net for (N, 3, 32, 32) normalised images; ``features`` gives (N, widths[-1])."""

    def __init__(self, num_classes: int = 10, norm: str = "bn", widths: tuple[int, ...] = SHAPES["airbench94"],
                 bn_momentum: float = 0.4, logit_scale: float = 1 / 9, train_scales: bool = False):
        super().__init__()
        if norm not in NORMS:
            raise ValueError(f"parameter 'norm': must be one of {NORMS} (got {norm!r})")
        if len(widths) != 3 or any(not isinstance(w, int) or w < 1 for w in widths):
            raise ValueError(f"parameter 'widths': must be three positive integers (got {widths!r})")
        self.norm, self.widths = norm, tuple(widths)
        self.init_args = dict(num_classes=num_classes, norm=norm, widths=tuple(widths), bn_momentum=bn_momentum,
                              logit_scale=logit_scale, train_scales=train_scales)
        c_whiten = 2 * 3 * WHITEN_PATCH**2
        self.whiten = nn.Conv2d(3, c_whiten, WHITEN_PATCH, padding=0, bias=True)
        self.whiten.weight.requires_grad_(False)  # set from the data by whiten_init, never trained
        nn.init.zeros_(self.whiten.bias)
        self.group1 = ConvGroup(c_whiten, widths[0], norm, bn_momentum, train_scales)
        self.group2 = ConvGroup(widths[0], widths[1], norm, bn_momentum, train_scales)
        self.group3 = ConvGroup(widths[1], widths[2], norm, bn_momentum, train_scales)
        self.fc = ScaledLinear(widths[2], num_classes, logit_scale)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.whiten(x))
        x = self.group3(self.group2(self.group1(x)))
        return torch.flatten(F.max_pool2d(x, 3), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))

    # The depth probes (memlab.science.probes.layer_outputs) read a ResNet's stages 2 and 3 by name; here
    # they are the second and last conv groups (properties, so the state dict's names stay the groups').
    @property
    def layer2(self) -> ConvGroup:
        return self.group2

    @property
    def layer3(self) -> ConvGroup:
        return self.group3

    def fresh(self) -> "FastCNN":
        """A newly initialised net of the same shape, on the same device (seed the global generator
        first): what a training from scratch, such as Retrain's, starts from."""
        return FastCNN(**self.init_args).to(self.whiten.weight.device)


@torch.no_grad()
def whiten_init(model: FastCNN, images: torch.Tensor, eps: float = WHITEN_EPS) -> None:
    """Set the frozen whitening conv from ``images`` ((N, 3, 32, 32) normalised, float).

    Every 2x2 patch of every image (stride 1) is a 12-vector; with Sigma their uncentred covariance
    (``P^T P / n``) and ``V diag(lambda) V^T`` its eigen-decomposition, the conv's 24 filters are
    ``V / sqrt(lambda + eps)`` and their negatives, so its outputs have near-unit variance along every
    direction of patch space before the GELU keeps one sign of each.
    """
    k = WHITEN_PATCH
    patches = images.float().unfold(2, k, 1).unfold(3, k, 1)  # (N, 3, 31, 31, k, k)
    flat = patches.permute(0, 2, 3, 1, 4, 5).reshape(-1, 3 * k * k).double()  # (n, 12)
    sigma = flat.T @ flat / len(flat)
    eigval, eigvec = torch.linalg.eigh(sigma)  # ascending; the order of the filters does not matter
    filters = (eigvec.T / torch.sqrt(eigval.clamp_min(0) + eps)[:, None]).reshape(-1, 3, k, k)
    model.whiten.weight.copy_(torch.cat([filters, -filters]).to(model.whiten.weight))


def widths_of(width: int) -> tuple[int, int, int]:
    """The three group widths of a net whose first group has ``width`` channels, airbench94's ratios
    (64 -> (64, 256, 256))."""
    if width < 1:
        raise ValueError(f"parameter 'width': must be >= 1 (got {width})")
    return (width, 4 * width, 4 * width)


def fastcnn(num_classes: int = 10, norm: str = "bn", shape: str = "airbench94", device=None,
            width: int | None = None, **kw) -> FastCNN:
    """A :class:`FastCNN` of a named shape (:data:`SHAPES`), or of ``widths_of(width)`` when ``width`` is
    given, on ``device``."""
    if shape not in SHAPES:
        raise ValueError(f"parameter 'shape': must be one of {', '.join(SHAPES)} (got {shape!r})")
    model = FastCNN(num_classes, norm, SHAPES[shape] if width is None else widths_of(width), **kw)
    return model.to(device) if device is not None else model


def train_memory_bytes(width: int, batch_size: int, num_classes: int = 10) -> int:
    """Rough upper estimate (bytes) of training the net of ``widths_of(width)`` on 32x32 images in fp32.

    Parameters (about 480 * width**2: 1.97 M at width 64) counted four times (weights, gradients,
    momentum, an unlearning run's copy of the original), plus the activations kept for backward: the
    feature maps of each group (pre-pool conv output, then five maps at the pooled size), twice over
    for autograd's saved inputs. Used to refuse a width before any work.
    """
    w1, w2, w3 = widths_of(width)
    params = 24 * w1 * 9 + w1 * w1 * 9 + w1 * w2 * 9 + w2 * w2 * 9 + w2 * w3 * 9 + w3 * w3 * 9 + w3 * num_classes
    maps = 24 * 31 * 31 + w1 * (31 * 31 + 5 * 15 * 15) + w2 * (15 * 15 + 5 * 7 * 7) + w3 * (7 * 7 + 5 * 3 * 3)
    return 16 * params + 2 * 4 * batch_size * maps
