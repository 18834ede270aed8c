"""Membership scores for masked diffusion language models.

Every score is computed from the one masked-likelihood interface
(:func:`memlab.models.diffusion_lm.masked_nll`) under mask patterns that are
drawn once per sequence (:class:`Probe`) and shared by the target and the
reference model, so a reference "view" can be reused for several targets.

Scores (higher = more likely a member):

* ``loss``: minus the mean masked NLL of the target (Yeom et al.);
* ``min_k``: minus the mean NLL of the k% worst-predicted positions (Shi et al.);
* ``min_k_pp``: mean of the k% lowest Min-K%++ z-scores (Zhang et al.);
* ``calibration``: reference NLL minus target NLL, averaged (Watson et al.);
* ``secmi``: SecMI adapted to masking: minus the target's masked NLL at a few
  deterministic mask ratios, averaged over ratios (Duan et al.);
* ``sama``: share of random token subsets on which the reference's summed NLL
  exceeds the target's, over growing masks, early steps weighted 1/s (SAMA);
* ``qskew``: the quantile-weighted median skewness of the per-token differences
  Delta = NLL_ref - NLL_target under cyclic masks (:func:`qskew`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from memlab.models.diffusion_lm import check_same_vocab, masked_nll

# Which probe groups each score reads.
NEEDS = {"loss": "cyclic", "min_k": "cyclic", "min_k_pp": "cyclic", "calibration": "cyclic", "secmi": "secmi",
         "sama": "sama", "qskew": "cyclic", "qskew_no_cyclic": "random", "qskew_mean": "cyclic",
         "qskew_no_weight": "cyclic"}
SCORES: tuple[str, ...] = ("loss", "min_k", "min_k_pp", "calibration", "secmi", "sama", "qskew")
ABLATIONS: tuple[str, ...] = ("qskew_no_cyclic", "qskew_mean", "qskew_no_weight")
LABELS = {"loss": "Loss", "min_k": "Min-K%", "min_k_pp": "Min-K%++", "calibration": "Calibration",
          "secmi": "SecMI", "sama": "SAMA", "qskew": "Q-Skew",
          "qskew_no_cyclic": "w/o cyclic sampling", "qskew_mean": "mean instead of skewness",
          "qskew_no_weight": "w/o quantile weighting"}


# ----------------------------------------------------------------------------- checks

def check_rho(rho: float) -> float:
    if not (isinstance(rho, (int, float)) and 0 < rho < 1):
        raise ValueError(f"parameter 'rho': must be a number in the open interval (0, 1) (got {rho!r})")
    return float(rho)


def check_h(h: float) -> float:
    if not (isinstance(h, (int, float)) and np.isfinite(h) and h > 0):
        raise ValueError(f"parameter 'h': must be a positive number (got {h!r})")
    return float(h)


def check_score_names(names) -> list[str]:
    names = [names] if isinstance(names, str) else list(names)
    for n in names:
        if n not in SCORES + ABLATIONS:
            raise ValueError(f"parameter 'scores': unknown score {n!r}; allowed: {', '.join(SCORES + ABLATIONS)}")
    return names


# ----------------------------------------------------------------------------- skewness

def quantile_weights(deltas: np.ndarray, h: float = 0.1, quantiles=(0.15, 0.85)) -> np.ndarray:
    """W_i = sum_q exp(-(F(Delta_i) - q)^2 / (2 h^2)), F the empirical CDF (mid-ranks / n).

    deltas: (n,). Returns (n,) positive weights.
    """
    d = np.asarray(deltas, dtype=float)
    from scipy.stats import rankdata

    f = (rankdata(d) - 0.5) / d.size
    return sum(np.exp(-((f - q) ** 2) / (2 * h * h)) for q in quantiles)


def _as_deltas(deltas) -> np.ndarray:
    d = np.asarray(deltas, dtype=float).ravel()
    d = d[np.isfinite(d)]
    if d.size < 2:
        raise ValueError(f"parameter 'deltas': needs at least two finite values (got {d.size}); "
                         "sequences must have at least two scored tokens")
    return d


def qskew(deltas, h: float = 0.1, quantiles=(0.15, 0.85)) -> float:
    """Q-Skew: quantile-weighted median (Pearson second) skewness of token differences.

    deltas: (n,) per-token loss differences Delta_i = NLL_ref - NLL_target in nats
    (NaNs ignored). With F the empirical CDF, m the median, s the standard deviation,

        W_i  = exp(-(F(Delta_i) - 0.15)^2 / 2h^2) + exp(-(F(Delta_i) - 0.85)^2 / 2h^2)
        Q    = (1/n) sum_i (W_i / mean_j W_j) * 3 (Delta_i - m) / s

    i.e. Pearson's median skewness 3 (mean - median) / s with the mean replaced by a
    weighted mean that emphasises the 15th and 85th percentiles, normalised by the
    mean weight. Q > 0 for a long right tail, ~0 for symmetric samples; invariant to
    shifting Delta and to scaling it by a positive factor. Returns 0 when s = 0.
    """
    h = check_h(h)
    d = _as_deltas(deltas)
    s = d.std()
    if s == 0:
        return 0.0
    w = quantile_weights(d, h, quantiles)
    return float(np.mean(w / w.mean() * 3 * (d - np.median(d)) / s))


def median_skew(deltas) -> float:
    """Pearson's second (median) skewness 3 (mean - median) / std, unweighted."""
    d = _as_deltas(deltas)
    s = d.std()
    return 0.0 if s == 0 else float(3 * (d.mean() - np.median(d)) / s)


def weighted_mean(deltas, h: float = 0.1, quantiles=(0.15, 0.85)) -> float:
    """Mean of Delta with the Q-Skew weights (the 'mean instead of skewness' ablation)."""
    d = _as_deltas(deltas)
    w = quantile_weights(d, check_h(h), quantiles)
    return float(np.mean(w / w.mean() * d))


# ----------------------------------------------------------------------------- Min-K

def _keep(n: int, k: float) -> int:
    if not 0 < k <= 1:
        raise ValueError(f"parameter 'k': must be in (0, 1] (got {k!r})")
    return max(1, int(n * k))


def min_k(nll, k: float = 0.2) -> float:
    """Min-K%: mean log-probability of the k% least likely tokens. nll: (n,) nats (NaN ignored)."""
    x = np.asarray(nll, dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        raise ValueError("parameter 'nll': needs at least one finite value")
    return float(-np.sort(x)[::-1][:_keep(x.size, k)].mean())


def min_k_pp_from_stats(nll, mu, sigma, k: float = 0.2, eps: float = 1e-6) -> float:
    """Min-K%++ from per-token statistics: mean of the k% lowest (log p(x_i) - mu_i) / sigma_i.

    nll, mu, sigma: (n,) as returned by ``masked_nll(..., with_stats=True)``;
    sigma is floored at ``eps`` so that a one-hot prediction cannot divide by zero.
    """
    nll, mu, sigma = (np.asarray(a, dtype=float).ravel() for a in (nll, mu, sigma))
    ok = np.isfinite(nll) & np.isfinite(mu) & np.isfinite(sigma)
    if not ok.any():
        raise ValueError("parameter 'nll': needs at least one finite value")
    z = (-nll[ok] - mu[ok]) / np.maximum(sigma[ok], eps)
    return float(np.sort(z)[:_keep(z.size, k)].mean())


def min_k_plus_plus(log_probs, token_ids, k: float = 0.2) -> float:
    """Min-K%++ of one sequence.

    log_probs: (L, V) normalised log-probabilities (one row per scored position);
    token_ids: (L,) int, the observed tokens. Each token gets
    z_i = (log p(x_i) - E_p[log p]) / sqrt(Var_p[log p]); the score is the mean of
    the k% lowest z (at least one token).
    """
    from memlab.models.diffusion_lm import log_prob_stats

    lp = torch.as_tensor(np.asarray(log_probs), dtype=torch.float64)
    ids = torch.as_tensor(np.asarray(token_ids), dtype=torch.long)
    if lp.ndim != 2 or ids.shape != lp.shape[:1]:
        raise ValueError(f"parameter 'log_probs': must be (L, V) with token_ids (L,) (got {tuple(lp.shape)}, {tuple(ids.shape)})")
    mu, sigma = log_prob_stats(lp)
    nll = -lp.gather(1, ids[:, None]).squeeze(1)
    return min_k_pp_from_stats(nll.numpy(), mu.numpy(), sigma.numpy(), k)


# ----------------------------------------------------------------------------- SAMA

def sama_vote(nll_target, nll_ref, subset_size: int, num_subsets: int, rng: np.random.Generator) -> float:
    """Share of random subsets (size ``subset_size``) with sum NLL_ref > sum NLL_target.

    nll_target, nll_ref: (m,) per-token NLL at the currently masked positions.
    """
    t, r = np.asarray(nll_target, float), np.asarray(nll_ref, float)
    m = t.size
    s = min(subset_size, m)
    idx = np.stack([rng.choice(m, size=s, replace=False) for _ in range(num_subsets)])
    return float((r[idx].sum(1) > t[idx].sum(1)).mean())


# ----------------------------------------------------------------------------- mask patterns

def cyclic_masks(eligible: torch.Tensor, rho: float, rounds: int, generator: torch.Generator) -> torch.Tensor:
    """Cyclic sampling: R rounds, each a random permutation cut into disjoint batches.

    eligible: (L,) bool, positions that may be masked (n = its sum, n >= 2).
    Each round permutes the eligible positions and cuts them into C = round(1 / rho)
    nearly equal batches (about rho * n tokens each), so every eligible position
    is masked exactly once per round. Returns (rounds * C, L) bool.
    """
    rho = check_rho(rho)
    pos = torch.nonzero(eligible.bool()).squeeze(1)
    if pos.numel() < 2:
        raise ValueError(f"parameter 'ids': a sequence needs at least two scorable tokens (got {pos.numel()})")
    # A fixed number of batches per round keeps every sequence's pattern count equal
    # (batches are empty only when n < C), so probes of different lengths stack.
    c = max(1, round(1 / rho))
    out = torch.zeros(rounds * c, eligible.numel(), dtype=torch.bool)
    for r in range(rounds):
        perm = pos[torch.randperm(pos.numel(), generator=generator)]
        for j, chunk in enumerate(torch.tensor_split(perm, c)):
            out[r * c + j, chunk] = True
    return out


def random_masks(eligible: torch.Tensor, rho: float, n: int, generator: torch.Generator) -> torch.Tensor:
    """Independent Monte Carlo masks: each eligible token masked with probability rho.

    eligible: (L,) bool. Returns (n, L) bool, each row with at least one masked token.
    """
    rho = check_rho(rho)
    e = eligible.bool()
    out = (torch.rand(n, e.numel(), generator=generator) < rho) & e
    pos = torch.nonzero(e).squeeze(1)
    for i in torch.nonzero(~out.any(1)).squeeze(1).tolist():
        out[i, pos[torch.randint(pos.numel(), (1,), generator=generator)]] = True
    return out


def secmi_masks(eligible: torch.Tensor, ratios) -> torch.Tensor:
    """Deterministic masks at fixed ratios (SecMI's deterministic forward process).

    The pattern for ratio r masks the first ceil(r n) eligible positions of one
    fixed permutation (seed 0), so masks are nested and identical across calls.
    Returns (len(ratios), L) bool.
    """
    pos = torch.nonzero(eligible.bool()).squeeze(1)
    perm = pos[torch.randperm(pos.numel(), generator=torch.Generator().manual_seed(0))]
    out = torch.zeros(len(ratios), eligible.numel(), dtype=torch.bool)
    for i, r in enumerate(ratios):
        out[i, perm[:max(1, int(np.ceil(r * pos.numel())))]] = True
    return out


def sama_masks(eligible: torch.Tensor, steps: int, lo: float, hi: float, generator: torch.Generator) -> torch.Tensor:
    """Growing masks: step s masks ~ (lo + (hi - lo)(s+1)/(steps+1)) n positions, nested.

    Returns (steps, L) bool; row s contains row s-1.
    """
    pos = torch.nonzero(eligible.bool()).squeeze(1)
    perm = pos[torch.randperm(pos.numel(), generator=generator)]
    out = torch.zeros(steps, eligible.numel(), dtype=torch.bool)
    for s in range(steps):
        frac = lo + (hi - lo) * (s + 1) / (steps + 1)
        out[s, perm[:max(1, round(frac * pos.numel()))]] = True
    return out


@dataclass
class Probe:
    """Mask patterns for N sequences, shared by every model that scores them.

    cyclic: (N, P, L) with P = rounds * round(1/rho); random: (N, P, L) or None
    (for the no-cyclic ablation); secmi: (N, Q, L); sama: (N, S, L) nested.
    """

    cyclic: torch.Tensor
    random: torch.Tensor | None
    secmi: torch.Tensor
    sama: torch.Tensor

    def groups(self) -> dict[str, torch.Tensor]:
        g = {"cyclic": self.cyclic, "secmi": self.secmi, "sama": self.sama}
        if self.random is not None:
            g["random"] = self.random
        return g


def make_probe(eligible: torch.Tensor, *, rho: float = 0.35, rounds: int = 5,
               secmi_ratios=(0.2, 0.4, 0.6, 0.8), sama_steps: int = 8, sama_range=(0.05, 0.5),
               with_random: bool = False, seed: int = 0) -> Probe:
    """Draw every mask pattern for N sequences. eligible: (N, L) bool (n_i >= 2 each)."""
    check_rho(rho)
    if rounds < 1:
        raise ValueError(f"parameter 'rounds': must be >= 1 (got {rounds})")
    g = torch.Generator().manual_seed(seed)
    cyc = torch.stack([cyclic_masks(e, rho, rounds, g) for e in eligible])
    rnd = torch.stack([random_masks(e, rho, cyc.shape[1], g) for e in eligible]) if with_random else None
    sec = torch.stack([secmi_masks(e, secmi_ratios) for e in eligible])
    sam = torch.stack([sama_masks(e, sama_steps, *sama_range, g) for e in eligible])
    return Probe(cyc, rnd, sec, sam)


def model_view(model, ids: torch.Tensor, probe: Probe, attention_mask: torch.Tensor | None = None,
               batch_size: int = 64, groups=None, stats: bool = True) -> dict[str, torch.Tensor]:
    """Run ``masked_nll`` for every pattern of ``probe`` (or only the named ``groups``).

    ids: (N, L). Returns {group: nll (N, P_group, L)} plus, with ``stats``,
    ``cyclic_mu`` and ``cyclic_sigma`` (N, P, L) for Min-K%++; NaN at unmasked positions.
    """
    out = {}
    for name, pats in probe.groups().items():
        if groups is not None and name not in groups:
            continue
        n, p, l = pats.shape
        rep_ids = ids.repeat_interleave(p, 0)
        rep_am = None if attention_mask is None else attention_mask.repeat_interleave(p, 0)
        want = stats and name == "cyclic"
        res = masked_nll(model, rep_ids, pats.reshape(n * p, l), rep_am, batch_size, with_stats=want)
        if want:
            nll, mu, sigma = (t.view(n, p, l) for t in res)
            out.update(cyclic=nll, cyclic_mu=mu, cyclic_sigma=sigma)
        else:
            out[name] = res.view(n, p, l)
    return out


def _per_position(x: torch.Tensor) -> np.ndarray:
    """(P, L) with NaN where unmasked -> (L,) mean over patterns (NaN where never masked)."""
    a = x.numpy()
    cnt = np.isfinite(a).sum(0)
    tot = np.where(np.isfinite(a), a, 0).sum(0)
    return np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)


def deltas_of(target_view: dict, ref_view: dict, group: str = "cyclic") -> list[np.ndarray]:
    """Per-sequence flat arrays of Delta = NLL_ref - NLL_target over every masked entry."""
    d = (ref_view[group] - target_view[group]).numpy()
    return [row[np.isfinite(row)] for row in d.reshape(d.shape[0], -1)]


def compute_scores(target_view: dict, ref_view: dict | None, probe: Probe, scores=SCORES, *,
                   h: float = 0.1, k: float = 0.2, sama_subset: int = 8, sama_subsets: int = 128,
                   seed: int = 0) -> dict[str, np.ndarray]:
    """All requested scores, one value per sequence: {name: (N,) float64}."""
    scores = check_score_names(scores)
    check_h(h)
    needs_ref = {"calibration", "sama", "qskew", *ABLATIONS}
    if ref_view is None and needs_ref & set(scores):
        raise ValueError("parameter 'reference': the scores " + ", ".join(sorted(needs_ref & set(scores))) +
                         " need a reference model view")
    if "qskew_no_cyclic" in scores and probe.random is None:
        raise ValueError("parameter 'probe': the no-cyclic ablation needs make_probe(with_random=True)")
    n = probe.cyclic.shape[0]
    rng = np.random.default_rng(seed)
    out = {s: np.empty(n) for s in scores}
    d_cyc = deltas_of(target_view, ref_view) if ref_view is not None else None
    d_rnd = deltas_of(target_view, ref_view, "random") if "qskew_no_cyclic" in scores else None
    for i in range(n):
        tc = target_view["cyclic"][i]
        flat = tc[torch.isfinite(tc)].numpy()
        for s in scores:
            if s == "loss":
                v = -flat.mean()
            elif s == "min_k":
                v = min_k(_per_position(tc), k)
            elif s == "min_k_pp":
                v = min_k_pp_from_stats(_per_position(tc), _per_position(target_view["cyclic_mu"][i]),
                                        _per_position(target_view["cyclic_sigma"][i]), k)
            elif s == "calibration":
                v = d_cyc[i].mean()
            elif s == "secmi":
                sec = target_view["secmi"][i]
                v = -float(np.mean([row[torch.isfinite(row)].mean().item() for row in sec]))
            elif s == "sama":
                t_s, r_s = target_view["sama"][i], ref_view["sama"][i]
                votes = [sama_vote(t_s[j][torch.isfinite(t_s[j])].numpy(), r_s[j][torch.isfinite(r_s[j])].numpy(),
                                   sama_subset, sama_subsets, rng) for j in range(t_s.shape[0])]
                w = 1.0 / np.arange(1, len(votes) + 1)
                v = float(np.average(votes, weights=w))
            elif s == "qskew":
                v = qskew(d_cyc[i], h)
            elif s == "qskew_no_cyclic":
                v = qskew(d_rnd[i], h)
            elif s == "qskew_mean":
                v = weighted_mean(d_cyc[i], h)
            else:  # qskew_no_weight
                v = median_skew(d_cyc[i])
            out[s][i] = v
    return out


def score_sequences(target, reference, ids: torch.Tensor, eligible: torch.Tensor,
                    attention_mask: torch.Tensor | None = None, scores=SCORES, *, rho: float = 0.35,
                    rounds: int = 5, h: float = 0.1, k: float = 0.2, seed: int = 0,
                    batch_size: int = 64, **probe_kw) -> dict[str, np.ndarray]:
    """One call: draw a probe, view both models, compute ``scores``. ids/eligible: (N, L)."""
    scores = check_score_names(scores)
    check_rho(rho)
    check_h(h)
    if reference is not None:
        check_same_vocab(target, reference)
    probe = make_probe(eligible, rho=rho, rounds=rounds, with_random="qskew_no_cyclic" in scores,
                       seed=seed, **probe_kw)
    tv = model_view(target, ids, probe, attention_mask, batch_size)
    rv = model_view(reference, ids, probe, attention_mask, batch_size) if reference is not None else None
    return compute_scores(tv, rv, probe, scores, h=h, k=k, seed=seed)


# ----------------------------------------------------------------------------- PII reconstruction ranking

def span_eligible(prefix_len: int, cand_len: int, span: int, length: int, part: str) -> torch.Tensor:
    """(length,) bool: the PII tokens (``part='pii'``) or the context tokens (``part='context'``) of a span.

    The span covers ``span`` tokens starting 8 tokens before the PII (as in the
    Q-Skew paper's X = 20 example), at least up to one token after the candidate.
    """
    if part not in ("pii", "context"):
        raise ValueError(f"parameter 'part': must be 'pii' or 'context' (got {part!r})")
    start = max(0, prefix_len - 8)
    end = min(length, start + max(span, prefix_len - start + cand_len + 1))
    e = torch.zeros(length, dtype=torch.bool)
    if part == "pii":
        e[prefix_len:prefix_len + cand_len] = True
    else:
        e[start:end] = True
        e[prefix_len:prefix_len + cand_len] = False
    return e


def candidate_ce(model, seqs: torch.Tensor, *, repeats: int, mask_share: float, generator: torch.Generator,
                 batch_size: int = 64) -> np.ndarray:
    """(C,) mean NLL (nats/token) of each candidate record under ``repeats`` random masks.

    seqs: (C, L) candidate records. Each repeat masks every token with probability
    ``mask_share`` (at least one token per row); the cross-entropy baseline of Table 6.
    """
    reps = seqs.repeat_interleave(repeats, 0)
    masks = torch.rand(reps.shape, generator=generator) < mask_share
    masks[:, 0] |= ~masks.any(1)
    nll = masked_nll(model, reps, masks, batch_size=batch_size)
    return torch.nanmean(nll.view(seqs.shape[0], -1), 1).numpy()


def candidate_qskew(target, reference, seqs: torch.Tensor, eligible: torch.Tensor, *, rho: float, rounds: int,
                    h: float, seed: int, batch_size: int = 64) -> np.ndarray:
    """(C,) Q-Skew of each candidate record with cyclic masks over its ``eligible`` (C, L) tokens."""
    probe = make_probe(eligible, rho=rho, rounds=rounds, sama_steps=1, seed=seed)
    tv = model_view(target, seqs, probe, None, batch_size, groups={"cyclic"})
    rv = model_view(reference, seqs, probe, None, batch_size, groups={"cyclic"})
    return np.array([qskew(d, h) for d in deltas_of(tv, rv)])


def _zscore(x: np.ndarray) -> np.ndarray:
    s = x.std()
    return np.zeros_like(x) if s == 0 else (x - x.mean()) / s


def rank_candidates(ce: np.ndarray, skewness: np.ndarray, alpha: float) -> np.ndarray:
    """Combined score ``-(1 - alpha) Z(CE) + alpha Z(skew)`` over one target's candidates (higher = better).

    ce, skewness: (C,) per-candidate cross-entropy and Q-Skew; alpha in [0, 1]
    (0: lowest cross-entropy wins, 1: highest skewness wins).
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"parameter 'alpha': must be in [0, 1] (got {alpha})")
    return -(1 - alpha) * _zscore(np.asarray(ce, float)) + alpha * _zscore(np.asarray(skewness, float))
