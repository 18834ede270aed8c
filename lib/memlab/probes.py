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

from memlab.train import accuracy, features

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
