"""A Vision Transformer with LayerNorm (ViT-S/16 by default) for the chapter-1 architecture control.

LayerNorm normalises every token with its own statistics and keeps no running
state, so BatchNorm recalibration must be the identity on this model
(the paper's Appendix M). Same interface as the ResNet: ``features(x)``
gives the (N, dim) class-token embedding, ``fc`` is the head.
"""
from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    """Pre-norm transformer block: x + MHSA(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float = 4.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class ViT(nn.Module):
    """ViT for (N, 3, image_size, image_size) images; ``features`` returns the (N, dim) class token."""

    def __init__(self, num_classes: int = 10, image_size: int = 32, patch: int = 16, dim: int = 384,
                 depth: int = 12, heads: int = 6):
        super().__init__()
        for name, v in (("num_classes", num_classes), ("patch", patch), ("dim", dim), ("depth", depth),
                        ("heads", heads)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"parameter {name!r}: must be a positive integer (got {v!r})")
        if image_size % patch:
            raise ValueError(f"parameter 'patch': must divide image_size {image_size} (got {patch})")
        if dim % heads:
            raise ValueError(f"parameter 'heads': must divide dim {dim} (got {heads})")
        self.embed = nn.Conv2d(3, dim, patch, patch)
        n_tokens = (image_size // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, n_tokens + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.ln = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        t = self.embed(x).flatten(2).transpose(1, 2)  # (N, tokens, dim)
        t = torch.cat([self.cls.expand(len(t), -1, -1), t], 1) + self.pos
        return self.ln(self.blocks(t))[:, 0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


def vit_small(num_classes: int = 10, image_size: int = 32, patch: int = 16, dim: int = 384, depth: int = 12,
              heads: int = 6) -> ViT:
    """ViT-S/16 (dim 384, depth 12, 6 heads) unless smaller sizes are given (the smoke/cpu profiles)."""
    return ViT(num_classes, image_size, patch, dim, depth, heads)
