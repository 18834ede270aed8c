"""Probes of what a trained classifier still knows: linear probe, relearning attack, confidence attack.

These are the measuring instruments of chapters 1 and 2, taking plain tensors
and models (no chapter containers):

* :func:`linear_probe` — LP-50 of the BN-illusion paper: a logistic-regression
  probe on penultimate features, scored on held-out images.
* :func:`relearn_curve` and :func:`relearn_auc` — the relearning attack and its
  normalised area (ReAUC).
* :func:`entropy_confidence` and :func:`confidence_attack_asr` — the
  confidence/entropy membership attack (MIA-efficacy) of the SDE paper's Table 3.

Images are (N, C, H, W) float tensors, labels (N,) int64; accuracies are in percent.
"""
from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from torch import nn

from memlab.models.train import accuracy, features

# ----------------------------------------------------------------------------- linear probe


def balanced_subset(y: torch.Tensor, per_class: int, seed: int) -> torch.Tensor:
    """Indices of up to ``per_class`` random samples of every class present in ``y`` (N,), class by class."""
    if per_class < 1:
        raise ValueError(f"parameter 'per_class': must be at least 1 (got {per_class})")
    g = torch.Generator().manual_seed(seed)
    idx = [(y == c).nonzero().flatten() for c in y.unique()]
    return torch.cat([i[torch.randperm(len(i), generator=g)[:per_class]] for i in idx])


def linear_probe(model: nn.Module, train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor,
                 test_y: torch.Tensor, per_class: int = 50, seed: int = 0) -> float:
    """Test accuracy (%) of a logistic-regression probe on ``model.features`` (LP-50 at ``per_class=50``).

    The probe (standardised features, lbfgs, max_iter=1000, as in the paper)
    is fit on ``per_class`` images of every class of ``train_x``/``train_y``,
    read through the model in eval mode, so its answer depends on the BN state;
    it is scored on ``test_x``/``test_y``.
    """
    idx = balanced_subset(train_y, per_class, seed)
    probe = make_pipeline(StandardScaler(), LogisticRegression(solver="lbfgs", max_iter=1000))
    probe.fit(features(model, train_x[idx]).numpy(), train_y[idx].numpy())
    pred = probe.predict(features(model, test_x).numpy())
    return 100.0 * float((pred == test_y.numpy()).mean())

# ----------------------------------------------------------------------------- relearning attack


def relearn_curve(model: nn.Module, forget_x: torch.Tensor, forget_y: torch.Tensor, retain_x: torch.Tensor,
                  retain_y: torch.Tensor, eval_x: torch.Tensor, eval_y: torch.Tensor, *, samples: int,
                  epochs: int, lr: float, seed: int, batch_size: int = 32) -> np.ndarray:
    """Accuracy (%) on ``eval_x``/``eval_y`` before and after each epoch of relearning, shape (epochs + 1,).

    The attack fine-tunes a copy of ``model`` (SGD with momentum 0.9, BN in
    train mode) on ``samples`` forget training images mixed with as many retain
    images, so that the head cannot simply collapse onto the forget class.
    ``model`` itself is not changed.
    """
    if samples < 1 or epochs < 0:
        raise ValueError(f"parameters 'samples'/'epochs': need samples >= 1 and epochs >= 0 "
                         f"(got {samples}, {epochs})")
    g = torch.Generator().manual_seed(seed)
    fi = torch.randperm(len(forget_x), generator=g)[:samples]
    ri = torch.randperm(len(retain_x), generator=g)[:samples]
    x, y = torch.cat([forget_x[fi], retain_x[ri]]), torch.cat([forget_y[fi], retain_y[ri]])
    net = copy.deepcopy(model)
    curve = [100.0 * accuracy(net, eval_x, eval_y)]
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    dev = next(net.parameters()).device
    for _ in range(epochs):
        net.train()
        perm = torch.randperm(len(x), generator=g)
        for i in range(0, len(x), batch_size):
            idx = perm[i : i + batch_size]
            loss = F.cross_entropy(net(x[idx].to(dev)), y[idx].to(dev))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        curve.append(100.0 * accuracy(net, eval_x, eval_y))
    return np.asarray(curve)


def relearn_auc(curve: np.ndarray, original: np.ndarray, retrain: np.ndarray) -> float:
    """ReAUC in [0, 1]: area under ``curve`` normalised so Retrain's curve is 0 and the Original's is 1.

    curve, original, retrain: forget accuracies (%) per epoch, same shape (E+1,).
    Our reading of the paper's "area under the normalised forget-accuracy curve";
    NaN when the Original's and Retrain's areas coincide (nothing to normalise by).
    """
    a, lo, hi = np.trapezoid(curve), np.trapezoid(retrain), np.trapezoid(original)
    if hi - lo <= 1e-9:
        return float("nan")
    return float(np.clip((a - lo) / (hi - lo), 0.0, 1.0))

# ----------------------------------------------------------------------------- confidence attack


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of (N, K) logits, computed stably in NumPy."""
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def entropy_confidence(probs: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(N, 2) attack features: probability of the true class and prediction entropy (nats).

    probs: (N, K) softmax outputs; y: (N,) labels.
    """
    conf = probs[np.arange(len(y)), y]
    ent = -np.sum(probs * np.log(np.clip(probs, 1e-12, 1.0)), axis=1)
    return np.stack([conf, ent], axis=1)


def confidence_attack_asr(member_probs, member_y, nonmember_probs, nonmember_y, forget_probs, forget_y,
                          seed: int = 0) -> float:
    """Share of the forget set a confidence/entropy attack labels "non-member" (MIA-efficacy).

    A logistic regression on (true-class confidence, entropy) is fitted to
    retain samples (members) against test samples (non-members), balanced by
    subsampling the larger side, then applied to the forget set. Higher means
    the forget set looks less like training data. probs: (N, K) softmax; y: (N,).
    """
    rng = np.random.default_rng(seed)
    n = min(len(member_y), len(nonmember_y))
    mi = rng.choice(len(member_y), n, replace=False)
    ni = rng.choice(len(nonmember_y), n, replace=False)
    xa = np.concatenate([entropy_confidence(member_probs[mi], member_y[mi]),
                         entropy_confidence(nonmember_probs[ni], nonmember_y[ni])])
    ya = np.concatenate([np.ones(n), np.zeros(n)])
    attack = LogisticRegression().fit(xa, ya)
    return float(np.mean(attack.predict(entropy_confidence(forget_probs, forget_y)) == 0))

# ----------------------------------------------------------------------------- outputs at several depths

# The depths :func:`layer_outputs` reads, shallow to deep.
OUTPUT_DEPTHS = ("layer2", "layer3", "penultimate", "logits", "softmax")


@torch.no_grad()
def layer_outputs(model: nn.Module, x: torch.Tensor, batch_size: int = 512) -> dict[str, np.ndarray]:
    """Outputs of a ResNet ``model`` (eval mode) at every depth of OUTPUT_DEPTHS for images x, one pass.

    x: (N, C, H, W) float tensor. ``model`` needs ``layer2``, ``layer3`` (stages whose outputs are
    (N, C', H', W')), ``features`` (x -> penultimate (N, d)) and ``fc`` (penultimate -> logits (N, K)),
    as :func:`memlab.models.resnet.resnet18` and :class:`memlab.models.fastcnn.FastCNN` have. Returns {depth: (N, d) float64 array}: layer2 / layer3:
    globally average-pooled activations of that stage; penultimate: ``model.features``; logits:
    ``model.fc`` of it; softmax: probabilities (rows sum to 1).
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(f"parameter 'x': must be an (N, C, H, W) tensor (got shape {tuple(getattr(x, 'shape', ()))})")
    missing = [a for a in ("layer2", "layer3", "features", "fc") if not hasattr(model, a)]
    if missing:
        raise ValueError(f"parameter 'model': needs attributes layer2, layer3, features and fc (lacks {missing})")
    model.eval()
    dev = next(model.parameters()).device
    grabbed: dict[str, list[torch.Tensor]] = {"layer2": [], "layer3": []}
    def grab(name):
        def hook(_m, _i, out):
            grabbed[name].append(F.adaptive_avg_pool2d(out, 1).flatten(1).float().cpu())
        return hook

    hooks = [getattr(model, name).register_forward_hook(grab(name)) for name in grabbed]
    pen, logits = [], []
    try:
        for i in range(0, len(x), batch_size):
            f = model.features(x[i:i + batch_size].to(dev))
            pen.append(f.float().cpu())
            logits.append(model.fc(f).float().cpu())
    finally:
        for h in hooks:
            h.remove()
    lg = torch.cat(logits)
    out = {"layer2": torch.cat(grabbed["layer2"]), "layer3": torch.cat(grabbed["layer3"]),
           "penultimate": torch.cat(pen), "logits": lg, "softmax": lg.softmax(1)}
    return {k: v.double().numpy() for k, v in out.items()}


def accuracy_pct(logits: np.ndarray, y: np.ndarray) -> float:
    """Top-1 accuracy (%) of logits (N, K) against labels (N,) int."""
    logits, y = np.asarray(logits), np.asarray(y)
    if logits.ndim != 2 or y.shape != (len(logits),) or len(y) == 0:
        raise ValueError(f"parameter 'logits': must be (N, K) with labels (N,), N >= 1 "
                         f"(got {logits.shape} and {y.shape})")
    return 100 * float((logits.argmax(1) == y).mean())
