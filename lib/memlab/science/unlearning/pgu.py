"""PGU: projected-gradient unlearning (Hoang et al., 2024), the paper's cleaner-covariance reading (PGU-dagger).

For every convolution and linear layer, the uncentred covariance of its
inputs on retain images, ``C = R^T R / n`` (R: input patches, one row per
spatial position, as the layer sees them), is eigendecomposed; the top
eigenvectors holding a ``threshold`` share of the energy span the retain
core space U. Gradient-ascent steps on the forget loss are then projected
onto its orthogonal complement, ``G <- G (I - U U^T)``, so the layer's
response to retain inputs is (to first order) unchanged. Only conv/linear
weights move; the model stays in eval mode, so BN statistics are frozen while
the weights drift: misalignment.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from memlab.science.unlearning._common import device_of, fresh_copy, hparams, index_stream, optimise_steps, take
from memlab.science.unlearning.registry import register

DEFAULTS = {
    "retain_samples": 1000,     # retain images for the covariances
    "positions": 64,            # spatial positions sampled per image and conv layer
    "threshold": 0.97,          # share of covariance energy kept in the core space
    "steps": 100,
    "lr": 0.01,
    "batch_size": 128,
    "momentum": 0.9,
    "seed": 0,
}


def _layer_inputs(module: nn.Module, a: torch.Tensor, positions: int, g: torch.Generator) -> torch.Tensor:
    """(M, D) rows of what the layer's weight multiplies: unfolded patches for a conv, vectors for a linear."""
    if isinstance(module, nn.Linear):
        return a.flatten(1)
    patches = F.unfold(a, module.kernel_size, dilation=module.dilation, padding=module.padding,
                       stride=module.stride)  # (N, D, L)
    pick = torch.randint(0, patches.shape[-1], (min(positions, patches.shape[-1]),), generator=g).to(a.device)
    return patches[:, :, pick].transpose(1, 2).reshape(-1, patches.shape[1])


@torch.no_grad()
def core_projections(model: nn.Module, x: torch.Tensor, *, threshold: float, positions: int, seed: int,
                     batch_size: int = 128) -> dict[str, torch.Tensor]:
    """Layer name -> (D, D) projector I - U U^T onto the complement of the retain core space.

    x: (N, C, H, W) retain images; the model runs in eval mode.
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"PGU: hyperparameter 'threshold' must be in (0, 1] (got {threshold!r})")
    layers = {n: m for n, m in model.named_modules() if isinstance(m, (nn.Conv2d, nn.Linear))}
    cov = {n: None for n in layers}
    count = {n: 0 for n in layers}
    g = torch.Generator().manual_seed(seed)

    def hook(name):
        def fn(module, inputs, _out):
            r = _layer_inputs(module, inputs[0], positions, g).double()
            c = r.T @ r
            cov[name] = c if cov[name] is None else cov[name] + c
            count[name] += len(r)
        return fn

    handles = [m.register_forward_hook(hook(n)) for n, m in layers.items()]
    model.eval()
    dev = device_of(model)
    try:
        for i in range(0, len(x), batch_size):
            model(x[i : i + batch_size].to(dev))
    finally:
        for h in handles:
            h.remove()
    proj = {}
    for n, c in cov.items():
        evals, evecs = torch.linalg.eigh(c / count[n])
        evals, evecs = evals.flip(0).clamp_min(0), evecs.flip(1)
        share = torch.cumsum(evals, 0) / evals.sum().clamp_min(1e-300)
        k = int((share < threshold).sum()) + 1
        u = evecs[:, :k]
        proj[n] = (torch.eye(len(c), dtype=c.dtype, device=c.device) - u @ u.T).float()
    return proj


@register("PGU", bn_mode="eval")
def pgu(model: nn.Module, splits, cfg=None) -> nn.Module:
    """cfg keys: retain_samples, positions, threshold, steps, lr, batch_size, momentum, seed."""
    hp = hparams(cfg, DEFAULTS, "PGU")
    net = fresh_copy(model)
    dev = device_of(net)
    g = torch.Generator().manual_seed(hp["seed"])
    sub = torch.randperm(len(splits.retain_x), generator=g)[: hp["retain_samples"]]
    proj = core_projections(net, splits.retain_x[sub], threshold=hp["threshold"], positions=hp["positions"],
                            seed=hp["seed"])
    layers = {n: m for n, m in net.named_modules() if n in proj}
    for p in net.parameters():
        p.requires_grad_(False)
    weights = [m.weight.requires_grad_(True) for m in layers.values()]
    opt = torch.optim.SGD(weights, lr=hp["lr"], momentum=hp["momentum"])
    batches = index_stream(len(splits.forget_x), hp["batch_size"], g)

    def loss_fn(_step: int, idx: torch.Tensor) -> torch.Tensor:
        return -F.cross_entropy(net(take(splits.forget_x, idx, dev)), take(splits.forget_y, idx, dev))

    def project() -> None:
        # in fp32 even under a caller's autocast: the projection edits the fp32 gradients themselves
        with torch.autocast(dev.type, enabled=False):
            for n, m in layers.items():
                grad = m.weight.grad
                m.weight.grad = (grad.flatten(1) @ proj[n]).view_as(grad)

    optimise_steps(net, batches, opt, hp["steps"], loss_fn, desc="PGU", bn_mode="eval", edit_grads=project)
    for p in net.parameters():
        p.requires_grad_(True)
    return net.eval()
