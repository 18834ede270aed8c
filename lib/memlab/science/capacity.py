"""Memorization measured as compression: code lengths, capacity, membership law.

Morris et al. (2025) measure how much a model memorised of a sample as the
bits the model saves when the sample is arithmetic-coded with the model's
likelihoods. Everything here is in bits (log base 2) unless a name says
otherwise, and works on plain arrays so it can be tested in closed form.

Conventions
-----------
* A sequence of S tokens is coded token by token. Row ``i`` of a (S, V)
  log-probability matrix is the model's distribution for token ``i`` given
  tokens ``< i``. Our GPT-2 models see a BOS token first, so the first token is
  predicted like every other one. A model without BOS gives S - 1 rows; then
  the first token is coded explicitly with the uniform code, log2 V bits.
* Per-sample memorisation ``H(x | ref) - H(x | ref, model)`` uses the joint
  code of the paper (Section 2.3): the shorter of the two codes. Each sample's
  term is therefore clipped at zero -- a model worse than the reference on a
  sample never *un*-memorises it. ``clip=False`` gives the raw difference.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from memlab.models.gpt2_small import token_log_probs

LN2 = math.log(2.0)


# ----------------------------------------------------------------------------- code lengths

def code_length_bits(log_probs, token_ids) -> float:
    """Arithmetic-code length, in bits, of one sequence under a model.

    log_probs: (L, V) natural-log probabilities (rows sum to 1 in probability)
        where row i is the distribution of token i; or (L - 1, V) when the
        model has no BOS, in which case token 0 is coded uniformly (log2 V bits).
    token_ids: (L,) integer tokens in [0, V).
    """
    lp = torch.as_tensor(log_probs, dtype=torch.float64)
    ids = torch.as_tensor(token_ids, dtype=torch.long)
    if lp.ndim != 2 or ids.ndim != 1:
        raise ValueError(f"parameter 'log_probs': must be (L, V) with token_ids (L,) (got {tuple(lp.shape)}, {tuple(ids.shape)})")
    vocab = lp.shape[1]
    if len(ids) == 0 or ids.min() < 0 or ids.max() >= vocab:
        raise ValueError(f"parameter 'token_ids': must be non-empty integers in [0, {vocab}) ")
    if lp.shape[0] == len(ids):
        first_bits, rows, coded = 0.0, lp, ids
    elif lp.shape[0] == len(ids) - 1:
        first_bits, rows, coded = math.log2(vocab), lp, ids[1:]
    else:
        raise ValueError(
            f"parameter 'log_probs': needs L or L - 1 rows for L = {len(ids)} tokens (got {lp.shape[0]})"
        )
    nats = -rows.gather(1, coded[:, None]).sum().item()
    return first_bits + nats / LN2


@torch.no_grad()
def sequence_code_lengths(model, tokens: torch.Tensor, vocab_size: int, batch_size: int = 512) -> np.ndarray:
    """Code length in bits of every sequence under a BOS-prefixed causal LM.

    model: a causal LM whose token ``vocab_size`` is BOS (see
        :mod:`memlab.models.gpt2_small`); its logits over the first
        ``vocab_size`` entries are renormalised, so no mass is spent on BOS.
    tokens: (N, S) int64 in [0, vocab_size).
    Returns (N,) float64 bits.
    """
    dev = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out = []
    for start in range(0, len(tokens), batch_size):
        x = tokens[start:start + batch_size].to(dev)
        logp = token_log_probs(model, x, vocab_size)  # (B, S, V)
        nats = -logp.gather(2, x[:, :, None]).squeeze(2).sum(1)
        out.append((nats.double() / LN2).cpu())
    model.train(was_training)
    return torch.cat(out).numpy() if out else np.zeros(0)


def uniform_entropy_bits(seq_len: int, vocab_size: int) -> float:
    """Shannon entropy, in bits, of one sequence of i.i.d. uniform tokens: S log2 V."""
    if seq_len < 1 or vocab_size < 2:
        raise ValueError(f"parameter 'vocab_size': must be >= 2 and seq_len >= 1 (got V={vocab_size}, S={seq_len})")
    return seq_len * math.log2(vocab_size)


# ----------------------------------------------------------------------------- memorisation

def memorization_bits(reference_bits, model_bits, clip: bool = True) -> np.ndarray:
    """Per-sample memorisation H(x | ref) - H(x | ref, model), in bits.

    reference_bits, model_bits: (N,) code lengths under the reference (for
    uniform tokens the constant S log2 V) and under the trained model. The
    joint code takes the shorter code per sample, so with ``clip`` each term is
    max(0, ref - model).
    """
    ref = np.broadcast_to(np.asarray(reference_bits, dtype=float), np.shape(model_bits))
    diff = ref - np.asarray(model_bits, dtype=float)
    return np.maximum(diff, 0.0) if clip else diff


def unintended_memorization(reference_bits, model_bits) -> np.ndarray:
    """Per-sample unintended memorisation on text: H(x|θ) - H(x|θ, θ̂) (bits, >= 0).

    reference_bits: (N,) code lengths under the reference model θ.
    model_bits: (N,) code lengths under the trained model θ̂.
    """
    return memorization_bits(reference_bits, model_bits, clip=True)


def capacity_bits(memorization_totals) -> float:
    """Capacity = the largest total memorisation over data set sizes (bits)."""
    totals = np.asarray(memorization_totals, dtype=float)
    if totals.size == 0:
        raise ValueError("parameter 'memorization_totals': needs at least one data set size")
    return float(totals.max())


def fit_alpha(n_params, capacities) -> dict[str, float]:
    """Bits per parameter: least-squares fit of capacity = alpha * params through 0.

    n_params, capacities: (M,) parameter counts and capacities in bits.
    Returns alpha, r2 (of the through-origin fit against the mean) and the
    slope/intercept of an ordinary fit with intercept (scipy.stats.linregress).
    """
    from scipy.stats import linregress

    p = np.asarray(n_params, dtype=float)
    c = np.asarray(capacities, dtype=float)
    if p.shape != c.shape or p.size < 2:
        raise ValueError("parameter 'n_params': needs at least two models, one capacity each")
    alpha = float(p @ c / (p @ p))
    ss_res = float(((c - alpha * p) ** 2).sum())
    ss_tot = float(((c - c.mean()) ** 2).sum())
    lr = linregress(p, c)
    return {
        "alpha": alpha,
        "r2": 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan"),
        "slope": float(lr.slope),
        "intercept": float(lr.intercept),
    }


def expected_memorization(capacity: float, data_entropy: float) -> float:
    """Appendix A.1's prediction: min(capacity, H(X)), both in bits."""
    return float(min(capacity, data_entropy))


# ----------------------------------------------------------------------------- membership

def membership_f1(member_losses, nonmember_losses) -> float:
    """F1 of the loss-threshold attack (Yeom et al.) at the balanced threshold.

    member_losses: (N,) per-sample losses of training members; nonmember_losses:
    (M,) of held-out samples. A sample is called a member when its loss is
    below the threshold that labels exactly N samples as members, so precision
    equals recall and chance level is N / (N + M) (0.5 for equal sets), as in
    the paper's law, whose F1 decays to 0.5.
    """
    m = np.asarray(member_losses, dtype=float)
    n = np.asarray(nonmember_losses, dtype=float)
    if m.size == 0 or n.size == 0:
        raise ValueError("parameter 'member_losses': members and non-members must both be non-empty")
    losses = np.concatenate([m, n])
    is_member = np.r_[np.ones(m.size), np.zeros(n.size)]
    threshold = np.sort(losses)[m.size - 1]
    below = losses < threshold
    tied = losses == threshold
    # Ties at the threshold share the remaining member calls evenly (the
    # expectation of a random tie-break), so a model that codes every sample
    # identically scores chance, not 1.
    slots = m.size - below.sum()
    tp = is_member[below].sum() + slots * is_member[tied].mean()
    precision = tp / m.size
    return float(precision)  # recall = tp / N = precision here, so F1 = precision


def _sigmoid(x):
    from scipy.special import expit  # overflow-free logistic

    return expit(x)


def membership_f1_law(n_params, n_samples, seq_len, vocab_size, *, c1: float, c2: float, c3: float):
    """Predicted loss-based membership F1 (Morris et al., Section 5.2).

    The form that reproduces the paper's Table 2 (all six rows within 0.002):

        F1 = 1/2 * (1 + c1 * sigmoid(c3 * (|D| / |θ| + c2)))

    with |D| the number of training sequences and |θ| the parameter count. The
    printed ``c2 * Capacity/|D| + c3`` puts the sigmoid argument below -33 for
    any positive capacity, i.e. F1 = 0.5 everywhere. Table 2's |D| scales
    exactly with |θ| between GPT2-XL and GPT2-small at each F1, so the ratio
    the law uses is samples per parameter -- data-to-capacity up to the constant
    alpha, independent of S and V. ``seq_len`` and ``vocab_size`` state the
    setting the constants were fitted in (the paper: S = 64 GPT-2 tokens) and
    are checked, but do not enter the formula.

    n_params, n_samples: scalars or arrays (broadcast). c1, c2, c3: the law's constants (the
    paper's are ``law_c1``, ``law_c2``, ``law_c3`` of ``data/papers/05_capacity.yaml``).
    Returns F1 in [0.5, 0.5 + c1/2].
    """
    p = np.asarray(n_params, dtype=float)
    d = np.asarray(n_samples, dtype=float)
    if np.any(p <= 0):
        raise ValueError(f"parameter 'n_params': must be positive (got {n_params!r})")
    if np.any(d <= 0):
        raise ValueError(f"parameter 'n_samples': must be positive (got {n_samples!r})")
    if seq_len < 2:
        raise ValueError(f"parameter 'seq_len': must be >= 2 (got {seq_len!r})")
    if vocab_size < 2:
        raise ValueError(f"parameter 'vocab_size': must be >= 2 (got {vocab_size!r})")
    f1 = 0.5 * (1.0 + c1 * _sigmoid(c3 * (d / p + c2)))
    return float(f1) if f1.ndim == 0 else f1


def law_dataset_size(n_params: float, f1: float, *, c1: float, c2: float, c3: float) -> float:
    """Inverse of :func:`membership_f1_law`: the |D| (sequences, float) at which the law predicts ``f1``."""
    s = (2.0 * f1 - 1.0) / c1
    if not 0.0 < s < 1.0:
        raise ValueError(f"parameter 'f1': must lie in (0.5, {0.5 + c1 / 2:.3f}) (got {f1!r})")
    return float(n_params * (math.log(s / (1.0 - s)) / c3 - c2))


def fit_membership_law(samples_per_param, f1, c1_start: float = 1.0) -> dict[str, float]:
    """Fit c1, c2, c3 of the law to measured (|D|/|θ|, F1) points (scipy curve_fit).

    samples_per_param, f1: (M,) arrays. ``c1_start``: the optimiser's first c1 (chapter 5 starts
    from the paper's); c2 and c3 start from the data. Returns the constants and the RMSE.
    """
    from scipy.optimize import curve_fit

    x = np.asarray(samples_per_param, dtype=float)
    y = np.asarray(f1, dtype=float)
    if x.shape != y.shape or x.size < 3:
        raise ValueError("parameter 'f1': needs at least three (ratio, F1) points")

    def law(r, c1, c2, c3):
        return 0.5 * (1.0 + c1 * _sigmoid(c3 * (r + c2)))

    # The argument scale differs by setting; start c3 at a slope that spans the
    # measured ratios so the optimiser sees a gradient.
    c3_0 = -4.0 / max(np.median(x), 1e-12)
    (c1, c2, c3), _ = curve_fit(
        law, x, y, p0=(c1_start, -float(np.median(x)), c3_0), maxfev=20000,
        bounds=([0.0, -np.inf, -np.inf], [2.0, np.inf, 0.0]),
    )
    rmse = float(np.sqrt(np.mean((law(x, c1, c2, c3) - y) ** 2)))
    return {"c1": float(c1), "c2": float(c2), "c3": float(c3), "rmse": rmse}


# ----------------------------------------------------------------------------- text diagnostics

def tfidf(documents: Sequence[Sequence[int]]) -> np.ndarray:
    """The paper's per-document TF-IDF (Appendix A.3).

    TF-IDF(d; D) = 1/|d| * sum_{w in d} log(|D| / tf(w, D)), with tf(w, D) the
    total count of token w in the data set and |D| the number of documents.
    documents: N token sequences. Returns (N,) floats (nats).
    """
    if len(documents) == 0:
        raise ValueError("parameter 'documents': needs at least one document")
    flat = np.concatenate([np.asarray(d, dtype=np.int64).ravel() for d in documents])
    counts = np.bincount(flat)
    log_n = math.log(len(documents))
    out = np.empty(len(documents))
    for i, d in enumerate(documents):
        d = np.asarray(d, dtype=np.int64).ravel()
        out[i] = float(np.mean(log_n - np.log(counts[d])))
    return out


@torch.no_grad()
def greedy_extraction_rate(model, tokens: torch.Tensor, vocab_size: int, prefix_len: int,
                           batch_size: int = 256) -> float:
    """Share of sequences whose suffix greedy decoding reproduces exactly from the prefix.

    tokens: (N, S) int64 with S > prefix_len; the model is BOS-prefixed.
    Returns a fraction in [0, 1].
    """
    if not 0 < prefix_len < tokens.shape[1]:
        raise ValueError(f"parameter 'prefix_len': must be in [1, {tokens.shape[1] - 1}] (got {prefix_len})")
    dev = next(model.parameters()).device
    model.eval()
    hits = 0
    for start in range(0, len(tokens), batch_size):
        x = tokens[start:start + batch_size].to(dev)
        bos = torch.full((x.shape[0], 1), vocab_size, dtype=x.dtype, device=dev)
        seq = torch.cat([bos, x[:, :prefix_len]], dim=1)
        for _ in range(x.shape[1] - prefix_len):
            logits = model(input_ids=seq).logits[:, -1, :vocab_size]
            seq = torch.cat([seq, logits.argmax(-1, keepdim=True)], dim=1)
        hits += int((seq[:, 1 + prefix_len:] == x[:, prefix_len:]).all(1).sum())
    return hits / len(tokens)


def first_increase(x, y, se=None, z: float = 1.96) -> float | None:
    """The x at which y first rises after having fallen (the start of a second ascent).

    x: (M,) increasing; y: (M,) e.g. test loss; se: optional (M,) standard errors
    of y, in which case a rise counts only when it exceeds z * sqrt(se_i^2 + se_{i-1}^2).
    Returns the x of the last point before the first rise, or None when y never
    rises (no double descent seen).
    """
    y = np.asarray(y, dtype=float)
    e = np.zeros_like(y) if se is None else np.asarray(se, dtype=float)
    if e.shape != y.shape:
        raise ValueError(f"parameter 'se': must have the shape of y {y.shape} (got {e.shape})")
    for i in range(1, len(y)):
        if y[i] - y[i - 1] > z * math.hypot(e[i], e[i - 1]):
            return float(np.asarray(x, dtype=float)[i - 1])
    return None


# ----------------------------------------------------------------------------- data grids and noise

def samples_for_bits(target_bits: float, seq_len: int, vocab_size: int) -> int:
    """Fewest uniform sequences (int, at least 1) whose entropy N S log2 V reaches ``target_bits`` (bits)."""
    if not math.isfinite(target_bits) or target_bits < 0:
        raise ValueError(f"parameter 'target_bits': must be a finite number >= 0 (got {target_bits!r})")
    return max(1, math.ceil(target_bits / uniform_entropy_bits(seq_len, vocab_size)))


def relative_half_width(per_sample, n_boot: int = 1000, seed: int = 0) -> float:
    """Half the 95% bootstrap interval of a total over samples, relative to the total (a fraction).

    per_sample: (N,) per-sample amounts, e.g. memorised bits. The interval is the percentile
    bootstrap of the sum (:func:`memlab.science.metrics.bootstrap_ci`, ``n_boot`` resamples, ``seed``).
    NaN when the total is not positive or N < 2 (no spread to measure).
    """
    from memlab.science.metrics import bootstrap_ci

    a = np.asarray(per_sample, dtype=float)
    if a.ndim != 1:
        raise ValueError(f"parameter 'per_sample': must be a 1-d array (got shape {a.shape})")
    total = float(a.sum())
    if total <= 0 or len(a) < 2:
        return float("nan")
    lo, hi = bootstrap_ci(a, stat=np.sum, n_boot=n_boot, seed=seed)
    return float((hi - lo) / 2 / total)


def fit_alpha_noise(n_params, capacities, noise_rel, n_draws: int = 2000, seed: int = 0) -> dict[str, float]:
    """Half-widths of 95% bands on :func:`fit_alpha`'s alpha (bits/parameter) and R^2, from each capacity's noise.

    n_params, capacities, noise_rel: (M,) parameter counts, capacities in bits and their 95%
    half-widths relative to the capacity (NaN counts as 0). Each capacity is redrawn ``n_draws``
    times as normal with sd = capacity * noise_rel / 1.96 (one NumPy generator seeded with
    ``seed``), the through-origin fit repeated; returns half the 2.5-97.5% range of each,
    ``{"alpha_band": ..., "r2_band": ...}``.
    """
    p = np.asarray(n_params, dtype=float)
    c = np.asarray(capacities, dtype=float)
    e = np.asarray(noise_rel, dtype=float)
    if p.ndim != 1 or p.shape != c.shape or p.shape != e.shape:
        raise ValueError(
            f"parameter 'capacities': n_params, capacities and noise_rel must be 1-d of one length "
            f"(got {p.shape}, {c.shape}, {e.shape})"
        )
    rng = np.random.default_rng(seed)
    sd = c * np.nan_to_num(e) / 1.96
    draws = c + rng.standard_normal((n_draws, len(c))) * sd
    alpha = draws @ p / (p @ p)
    ss_res = ((draws - alpha[:, None] * p) ** 2).sum(1)
    ss_tot = ((draws - draws.mean(1, keepdims=True)) ** 2).sum(1)
    r2 = 1.0 - ss_res / np.where(ss_tot > 0, ss_tot, np.nan)
    half = lambda v: float(np.subtract(*np.nanquantile(v, [0.975, 0.025])) / 2)  # noqa: E731
    return {"alpha_band": half(alpha), "r2_band": half(r2)}
