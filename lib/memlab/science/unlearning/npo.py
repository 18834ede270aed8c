"""NPO and gradient ascent for causal language models (the reasoning-trace audit of chapter 3).

This is the package's language-model section. The registry's methods
(:mod:`memlab.science.unlearning.registry`) take an image classifier and
:class:`~memlab.science.unlearning.registry.Splits` of image tensors; these take a
causal LM and token *examples* ``(ids, loss mask)`` (see :mod:`memlab.models.lm`), so
they are called directly rather than through ``registry.get``.

* :func:`npo_loss` — Negative Preference Optimization (Zhang et al., 2024):
  ``-(2/beta) * mean log sigmoid(-beta * (log p - log p_ref))``.
* :func:`lm_unlearn` — the unlearning loop: NPO on the forget answers, or plain
  gradient ascent (GA) on the forget answers. ``retain_weight`` > 0 adds a
  retain NLL term to NPO; the audited paper's NPO has none (its loss is the
  answer-masked NPO term alone), so chapter 3 runs ``retain_weight=0`` by
  default and shows the retain-regularised NPO as a variant.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from memlab.core.config import autocast
from memlab.core.progress import progress
from memlab.models.lm import Example, mean_token_nll, pad_batch, reference_logprobs, sequence_logprob

LM_METHODS = ("NPO", "GA")


def npo_loss(logp: torch.Tensor, ref_logp: torch.Tensor, beta: float) -> torch.Tensor:
    """NPO forgetting loss ``-(2/beta) * mean log sigmoid(-beta * (logp - ref_logp))`` (scalar).

    logp, ref_logp: (B,) sequence log-probabilities (nats) of the forget answers under
    the current and the reference (memorised) model. Equals ``(2/beta) log 2`` at
    ``logp == ref_logp`` and falls to 0 as ``logp`` falls below the reference.
    """
    if beta <= 0:
        raise ValueError(f"parameter 'beta': must be > 0 (got {beta})")
    return -(2.0 / beta) * F.logsigmoid(-beta * (logp - ref_logp)).mean()


def lm_unlearn(model, forget: Sequence[Example], retain: Sequence[Example], *, method: str,
               checkpoints: Sequence[int], lr: float, beta: float, batch_size: int, pad_id: int, seed: int,
               desc: str, retain_weight: float = 0.0,
               on_checkpoint: Callable | None = None) -> dict[int, object]:
    """Unlearn ``forget`` from ``model`` in place: ``max(checkpoints)`` AdamW steps of its trainable weights.

    method: "NPO" (:func:`npo_loss` against the model's own log-probabilities
    before unlearning, plus ``retain_weight`` times the retain NLL when > 0; the
    default 0 is the paper's NPO, and ``retain`` is then never read) or "GA"
    (gradient ascent on the forget NLL, no retain term). Each step draws
    ``min(batch_size, len(forget))`` forget (and as many retain) examples with
    replacement from a NumPy generator seeded with ``seed``; gradients are
    clipped at norm 1. ``on_checkpoint(model, k)`` is called at k = 0 (before
    any step) and after each step k in ``checkpoints``; its results are
    returned as ``{k: result}``.
    """
    if method not in LM_METHODS:
        raise ValueError(f"parameter 'method': must be 'NPO' or 'GA' (got {method!r})")
    if retain_weight < 0:
        raise ValueError(f"parameter 'retain_weight': must be >= 0 (got {retain_weight})")
    if method == "NPO" and retain_weight > 0 and not retain:
        raise ValueError("parameter 'retain': must be non-empty when retain_weight > 0")
    if not checkpoints or any(k < 1 for k in checkpoints):
        raise ValueError(f"parameter 'unlearn_steps': every K must be >= 1 (got {list(checkpoints)})")
    ref = reference_logprobs(model, forget, pad_id, 2 * batch_size) if method == "NPO" else None
    results = {0: on_checkpoint(model, 0)} if on_checkpoint else {}
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    rng = np.random.default_rng(seed)
    dev = next(model.parameters()).device
    bs = min(batch_size, len(forget))
    for step in progress(range(1, max(checkpoints) + 1), desc=desc):
        model.train()
        pick = rng.integers(0, len(forget), size=bs)
        ids, att, mask = (t.to(dev) for t in pad_batch([forget[i] for i in pick], pad_id))
        with autocast(dev):
            if method == "NPO":
                logp = sequence_logprob(model, ids, att, mask)
                loss = npo_loss(logp.float(), ref[pick].to(dev), beta)
                if retain_weight > 0:
                    rpick = rng.integers(0, len(retain), size=bs)
                    r = (t.to(dev) for t in pad_batch([retain[i] for i in rpick], pad_id))
                    loss = loss + retain_weight * mean_token_nll(model, *r)
            else:
                loss = -mean_token_nll(model, ids, att, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step in checkpoints and on_checkpoint:
            results[step] = on_checkpoint(model, step)
    return results
