"""One paper's measurement turned on another paper's model (chapter 6).

Three lenses that no single chapter needs:

* :func:`continuation_log_probs` / :func:`continuation_bits` — the code length, in
  bits, of a token continuation given its context under a causal LM, so that the
  memorisation-in-bits of Morris et al. (:mod:`memlab.science.capacity`) can be read on a
  canary: ``memlab.science.capacity.memorization_bits(bits_under_reference, bits_under_model)``.
* :func:`membership_scores` — chapter 4's sequence scores that apply to a causal LM
  (Loss, Min-K%, Min-K%++, reference calibration, from :mod:`memlab.science.mia`), oriented so
  that a higher score means "more likely a member".
* :func:`kendall_ci`, :func:`kendall_diff_ci`, :func:`tau_matrix` — Kendall's tau-b
  between two lenses' rankings of the same items, with a percentile-bootstrap interval
  over the items (:func:`memlab.science.metrics.bootstrap_ci`).

Log-probabilities are natural logs; code lengths are bits. Models are Hugging Face
causal LMs: ``model(input_ids=(B, T), attention_mask=(B, T)).logits`` of shape (B, T, V).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd
import torch
from scipy import stats

from memlab.models import lm
from memlab.science import capacity, metrics, mia

SCORES: tuple[str, ...] = ("Loss", "Min-K%", "Min-K%++", "Reference")

# ----------------------------------------------------------------------------- code lengths


def _check_pairs(contexts: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]) -> None:
    if len(contexts) != len(targets):
        raise ValueError(f"parameter 'targets': needs one target per context (got {len(contexts)} contexts, "
                         f"{len(targets)} targets)")
    if any(len(c) == 0 for c in contexts) or any(len(t) == 0 for t in targets):
        raise ValueError("parameter 'contexts'/'targets': every context and every target needs at least one token")


@torch.no_grad()
def continuation_log_probs(model, contexts: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
                           pad_id: int, batch_size: int = 32) -> list[np.ndarray]:
    """Per item, the (L_i, V) float64 log-probabilities the model gives each target position.

    contexts: n token-id lists (at least one token each: a causal LM needs a prefix to
    predict the first target token); targets: n non-empty token-id lists. Row j of item i
    is the model's distribution for ``targets[i][j]`` given ``contexts[i] + targets[i][:j]``.
    Sequences are right-padded (positions stay aligned with an unpadded run); the model is
    put in eval mode.
    """
    _check_pairs(contexts, targets)
    if batch_size < 1:
        raise ValueError(f"parameter 'batch_size': must be at least 1 (got {batch_size})")
    dev = next(model.parameters()).device
    model.eval()
    out: list[np.ndarray] = []
    for start in range(0, len(contexts), batch_size):
        ctx, tgt = contexts[start:start + batch_size], targets[start:start + batch_size]
        ids, att = lm.pad_sequences([list(c) + list(t) for c, t in zip(ctx, tgt)], pad_id)
        logits = model(input_ids=ids.to(dev), attention_mask=att.to(dev)).logits.double()
        logp = torch.log_softmax(logits, dim=-1).cpu()
        for i, (c, t) in enumerate(zip(ctx, tgt)):
            out.append(logp[i, len(c) - 1:len(c) - 1 + len(t)].numpy())
    return out


def continuation_bits(log_probs: Sequence[np.ndarray], targets: Sequence[Sequence[int]]) -> np.ndarray:
    """(n,) code lengths in bits, -sum_j log2 p(target_j | prefix), of each target under its rows.

    log_probs: n arrays (L_i, V) from :func:`continuation_log_probs`; targets: n token lists
    of lengths L_i. Each is :func:`memlab.science.capacity.code_length_bits` of one item.
    """
    if len(log_probs) != len(targets):
        raise ValueError(f"parameter 'targets': needs one target per log-prob matrix (got {len(log_probs)}, "
                         f"{len(targets)})")
    return np.array([capacity.code_length_bits(lp, t) for lp, t in zip(log_probs, targets)], dtype=float)


def canary_bits(reference_bits, model_bits) -> np.ndarray:
    """(n,) memorisation in bits of each canary: max(0, CL_reference - CL_model) (the joint code).

    reference_bits, model_bits: (n,) code lengths of the same continuations under the
    reference (pre-fine-tuning) model and the model audited.
    """
    ref, mod = np.asarray(reference_bits, dtype=float), np.asarray(model_bits, dtype=float)
    if ref.shape != mod.shape or ref.ndim != 1:
        raise ValueError(f"parameter 'model_bits': must match reference_bits, one value per canary "
                         f"(got shapes {ref.shape} and {mod.shape})")
    return capacity.memorization_bits(ref, mod, clip=True)

# ----------------------------------------------------------------------------- membership


def token_nll(log_probs: np.ndarray, target: Sequence[int]) -> np.ndarray:
    """(L,) negative log-likelihood in nats of each target token under its row of ``log_probs`` (L, V)."""
    lp = np.asarray(log_probs, dtype=float)
    t = np.asarray(target, dtype=int)
    if lp.ndim != 2 or t.shape != lp.shape[:1]:
        raise ValueError(f"parameter 'log_probs': must be (L, V) with target (L,) (got {lp.shape}, {t.shape})")
    return -lp[np.arange(len(t)), t]


def membership_scores(log_probs: Sequence[np.ndarray], targets: Sequence[Sequence[int]],
                      reference_log_probs: Sequence[np.ndarray] | None = None, k: float = 0.2) -> dict:
    """Chapter 4's causal-LM membership scores of n continuations; higher = more likely a member.

    log_probs (and reference_log_probs, under the reference model): n arrays (L_i, V);
    targets: n token lists. Returns {score name: (n,) array} with
    Loss = -mean token NLL, Min-K% = :func:`memlab.science.mia.min_k`, Min-K%++ =
    :func:`memlab.science.mia.min_k_plus_plus` (both at ``k``), and, when a reference is given,
    Reference = mean NLL under the reference minus mean NLL under the model.
    """
    if len(log_probs) != len(targets):
        raise ValueError(f"parameter 'targets': needs one target per log-prob matrix (got {len(log_probs)}, "
                         f"{len(targets)})")
    nll = [token_nll(lp, t) for lp, t in zip(log_probs, targets)]
    out = {
        "Loss": np.array([-x.mean() for x in nll]),
        "Min-K%": np.array([mia.min_k(x, k) for x in nll]),
        "Min-K%++": np.array([mia.min_k_plus_plus(lp, t, k) for lp, t in zip(log_probs, targets)]),
    }
    if reference_log_probs is not None:
        if len(reference_log_probs) != len(targets):
            raise ValueError("parameter 'reference_log_probs': needs one matrix per target "
                             f"(got {len(reference_log_probs)} for {len(targets)})")
        ref = np.array([token_nll(lp, t).mean() for lp, t in zip(reference_log_probs, targets)])
        out["Reference"] = ref - np.array([x.mean() for x in nll])
    return out

# ----------------------------------------------------------------------------- rank agreement


def _pair(x, y) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"parameters 'x', 'y': must be 1-D of the same length (got {a.shape}, {b.shape})")
    if len(a) < 3:
        raise ValueError(f"parameters 'x', 'y': a rank correlation needs at least 3 items (got {len(a)})")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("parameters 'x', 'y': must be finite (drop the items a lens could not measure)")
    return a, b


def kendall_tau(x, y) -> float:
    """Kendall's tau-b of two rankings (scipy.stats.kendalltau); NaN when either side is constant."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(stats.kendalltau(a, b).statistic)


def _tau_or_zero(x, y) -> float:
    # A resample that draws one item only (or ties a lens completely) carries no ordering
    # information; it counts as tau = 0 rather than being dropped, which keeps the interval
    # conservative (pulled toward 0) and its number of resamples fixed.
    t = kendall_tau(x, y)
    return 0.0 if math.isnan(t) else t


def tau_b_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's tau-b of each row pair of x, y (B, n): (B,), 0 where a row is constant (:func:`_tau_or_zero`).

    Bit for bit ``scipy.stats.kendalltau``'s tau-b, row by row: the same integer counts (pairs,
    ties in x, in y and in both, discordant pairs), then its float expression
    (concordant minus discordant) / sqrt(pairs - x ties) / sqrt(pairs - y ties), clipped to [-1, 1].
    A bootstrap interval needs thousands of resamples of a few dozen items; scipy's per-call
    overhead (and its exact p-value, unused here) made them most of the work.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = x.shape[1]
    upper = np.triu(np.ones((n, n), dtype=bool), 1)  # each pair i < j once
    dx = np.sign(x[:, :, None] - x[:, None, :])[:, upper]
    dy = np.sign(y[:, :, None] - y[:, None, :])[:, upper]
    xtie, ytie = (dx == 0).sum(1), (dy == 0).sum(1)
    ntie, dis = ((dx == 0) & (dy == 0)).sum(1), (dx * dy < 0).sum(1)
    tot = n * (n - 1) // 2
    constant = (xtie == tot) | (ytie == tot)
    con_minus_dis = tot - xtie - ytie + ntie - 2 * dis
    with np.errstate(divide="ignore", invalid="ignore"):
        tau = con_minus_dis / np.sqrt(tot - xtie) / np.sqrt(tot - ytie)
    return np.where(constant, 0.0, np.clip(tau, -1.0, 1.0))


def kendall_ci(x, y, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> dict:
    """{"tau", "low", "high", "n"}: Kendall's tau-b of x, y (n,) and its bootstrap interval over items."""
    a, b = _pair(x, y)
    lo, hi = metrics.bootstrap_ci(np.stack([a, b], axis=1), stat=lambda s: tau_b_rows(s[..., 0], s[..., 1]),
                                  n_boot=n_boot, seed=seed, level=level, vectorized=True)
    return {"tau": kendall_tau(a, b), "low": lo, "high": hi, "n": int(len(a))}


def kendall_diff_ci(x, y, z, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> dict:
    """{"diff", "low", "high", "n", "tau_xy", "tau_xz"}: tau(x, y) - tau(x, z), paired bootstrap interval.

    A constant lens has no ranking: its tau (``tau_xy`` or ``tau_xz``) is NaN and counts 0 in ``diff``.
    """
    a, b = _pair(x, y)
    _, c = _pair(x, z)
    stat = lambda s: tau_b_rows(s[..., 0], s[..., 1]) - tau_b_rows(s[..., 0], s[..., 2])  # noqa: E731
    lo, hi = metrics.bootstrap_ci(np.stack([a, b, c], axis=1), stat=stat, n_boot=n_boot, seed=seed, level=level,
                                  vectorized=True)
    return {"diff": _tau_or_zero(a, b) - _tau_or_zero(a, c), "low": lo, "high": hi, "n": int(len(a)),
            "tau_xy": kendall_tau(a, b), "tau_xz": kendall_tau(a, c)}


def tau_matrix(frame: pd.DataFrame, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> dict:
    """Kendall tau-b of every pair of columns of ``frame`` (rows: items, columns: lenses).

    Returns {"tau", "low", "high"}: square DataFrames over the columns (diagonal 1, interval
    [1, 1]). Items with a non-finite value in either column drop out of that pair; a pair
    with fewer than 3 items left, or where a lens is constant, has tau and interval NaN.
    """
    cols = list(frame.columns)
    if len(frame) < 3 or len(cols) < 2:
        raise ValueError(f"parameter 'frame': needs at least 3 rows and 2 columns (got {frame.shape})")
    out = {name: pd.DataFrame(np.nan, index=cols, columns=cols) for name in ("tau", "low", "high")}
    for i, a in enumerate(cols):
        for b in cols[i:]:
            if a == b:
                for name in out:
                    out[name].loc[a, b] = 1.0
                continue
            x, y = frame[a].to_numpy(float), frame[b].to_numpy(float)
            ok = np.isfinite(x) & np.isfinite(y)  # an item a lens could not measure drops out of that pair
            x, y = x[ok], y[ok]
            if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
                continue
            r = kendall_ci(x, y, n_boot=n_boot, seed=seed, level=level)
            for name, key in (("tau", "tau"), ("low", "low"), ("high", "high")):
                out[name].loc[a, b] = out[name].loc[b, a] = r[key]
    return out

# ----------------------------------------------------------------------------- SDE on a forget set and membership AUCs


def sde_out_of_training(in_ref: np.ndarray, out_ref: np.ndarray, targets: Sequence[np.ndarray], *,
                        n_shuffles: int = 200, n_bins: int = 30, seed: int = 0) -> np.ndarray:
    """(n_targets,) bool: chapter 2's SDE verdict "out of training" (forgotten) on each target subset.

    in_ref (s, d): a model's outputs on samples it trained on; out_ref (s', d): on samples it
    never saw; targets: n_targets arrays (s_i, d) of outputs on the subsets to judge (a
    (n_targets, s, d) array works too). Each subset's split-half HSIC distribution
    (:func:`memlab.science.sde.split_half_dependence`, ``n_shuffles`` values, RBF bandwidth sqrt(d))
    is compared with both references' by :func:`memlab.science.sde.decide` on ``n_bins`` bins.
    Shuffle seeds: ``seed`` for in_ref, ``seed + 1`` for out_ref, ``seed + 2 + i`` for target
    i, so the same seed gives two models paired verdicts that differ only by their outputs.
    """
    from memlab.science import sde

    ins, outs = np.asarray(in_ref), np.asarray(out_ref)
    if ins.ndim != 2 or outs.ndim != 2 or ins.shape[1] != outs.shape[1]:
        raise ValueError(f"parameters 'in_ref', 'out_ref': must be (s, d) with the same d (got {ins.shape}, "
                         f"{outs.shape})")
    if len(targets) == 0:
        raise ValueError("parameter 'targets': needs at least one target subset (got none)")
    d = ins.shape[1]
    if any(np.ndim(t) != 2 or np.shape(t)[1] != d for t in targets):
        raise ValueError(f"parameter 'targets': every subset must be (s, {d}) like the references (got "
                         f"{[np.shape(t) for t in targets]})")
    kw = dict(n_shuffles=n_shuffles, sigma=float(np.sqrt(d)))
    h_in = sde.split_half_dependence(ins, seed=seed, **kw)
    h_out = sde.split_half_dependence(outs, seed=seed + 1, **kw)
    return np.array([sde.decide(sde.split_half_dependence(t, seed=seed + 2 + i, **kw), h_in, h_out,
                                n_bins=n_bins)["out"] for i, t in enumerate(targets)])


def membership_aucs(member_scores: dict, nonmember_scores: dict) -> dict[str, float]:
    """{score name: ROC AUC} of members against non-members for every score of :func:`membership_scores`.

    member_scores: {name: (n,) scores of the members}; nonmember_scores: {name: (m,) of the
    non-members}, the same names (higher = more likely a member; 1 separates perfectly, 0.5
    is chance). AUC as :func:`memlab.science.metrics.roc_metrics`.
    """
    if set(member_scores) != set(nonmember_scores):
        raise ValueError(f"parameter 'nonmember_scores': needs the scores of member_scores "
                         f"(got {sorted(nonmember_scores)} for {sorted(member_scores)})")
    out = {}
    for s, mem in member_scores.items():
        mem, non = np.asarray(mem, dtype=float), np.asarray(nonmember_scores[s], dtype=float)
        labels = np.r_[np.ones(len(mem)), np.zeros(len(non))]
        out[s] = metrics.roc_metrics(np.r_[mem, non], labels)["auc"]
    return out
