"""Membership scores for masked diffusion language models.

Every score is computed from the one masked-likelihood interface
(:func:`memlab.models.diffusion_lm.masked_nll`) under mask patterns that are
drawn once per sequence (:class:`Probe`) and shared by the target and the
reference model, so a reference "view" can be reused for several targets.

The Q-Skew paper (Section 4, experimental setup) gives every method the same
budget: 16 denoising steps (forward passes) per sample. The likelihood baselines
read the model the way it is trained and evaluated, LLaDA's random-t masks
(:func:`llada_masks`); Q-Skew reads its own cyclic probe; SecMI and SAMA their
own nested masks. Scores (higher = more likely a member):

* ``loss``: minus the target's LLaDA loss, the per-token negative-ELBO estimate
  over the random-t masks (:func:`llada_loss`; Yeom et al. 2018's loss attack);
* ``min_k``: minus the mean NLL of the k% worst-predicted positions, each
  position's NLL averaged over the random-t masks that hid it (Shi et al. 2024);
* ``min_k_pp``: mean of the k% lowest per-position Min-K%++ z-scores, each z
  formed from one mask's own prediction and averaged over the masks that hid the
  position (Zhang et al. 2025);
* ``calibration``: the reference's LLaDA loss minus the target's on the same
  random-t masks (Watson et al. 2022's difficulty calibration);
* ``det_loss``: minus the target's masked NLL at a few deterministic, nested mask
  ratios, averaged over ratios (the "SecMI adapted to DLMs" of public DLM code:
  SecMI's deterministic masks without its consistency test);
* ``secmi``: SecMI's t-error (Duan et al. 2023) in the masked setting: from the
  deterministic state at ratio t, mask deterministically up to t + k, let the model
  take one deterministic reverse step back to t (its expected one-hot vector at the
  re-revealed tokens) and score minus the squared error against the true state;
* ``sama``: share of random token subsets on which the reference's summed NLL
  exceeds the target's, over growing masks, each token's loss kept from the step it
  was first masked, early steps weighted 1/s (SAMA, Chen et al. 2026);
* ``qskew``: the quantile-weighted median skewness of the per-token differences
  Delta = NLL_ref - NLL_target under cyclic masks (:func:`qskew`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from memlab.models.diffusion_lm import check_same_vocab, masked_nll

# Which probe groups each score reads.
NEEDS = {"loss": "llada", "min_k": "llada", "min_k_pp": "llada", "calibration": "llada",
         "det_loss": "secmi", "secmi": "secmi", "sama": "sama", "qskew": "cyclic",
         "qskew_no_cyclic": "random", "qskew_mean": "cyclic", "qskew_no_weight": "cyclic"}
SCORES: tuple[str, ...] = ("loss", "min_k", "min_k_pp", "calibration", "det_loss", "secmi", "sama", "qskew")
ABLATIONS: tuple[str, ...] = ("qskew_no_cyclic", "qskew_mean", "qskew_no_weight")
LABELS = {"loss": "Loss", "min_k": "Min-K%", "min_k_pp": "Min-K%++", "calibration": "Calibration",
          "det_loss": "Loss at deterministic masks", "secmi": "SecMI (t-error)", "sama": "SAMA",
          "qskew": "Q-Skew",
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
    """Min-K%: mean log-probability of the k% least likely tokens. nll: (n,) nats (NaN ignored).

    Shi et al. 2024 (Detecting Pretraining Data from Large Language Models, ICLR),
    Section 3, Min-K% Prob: (1/|min-k|) sum over the k% lowest-probability tokens of log p.
    """
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
    """Min-K%++ of one sequence (Zhang et al. 2025, Min-K%++, ICLR, Section 3).

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


# ----------------------------------------------------------------------------- likelihood baselines (random-t masks)

LLADA_EPS = 1e-3  # t is drawn from [eps, 1 - eps], as LLaDA's forward process does, so 1/t stays finite


def llada_masks(eligible: torch.Tensor, n: int, generator: torch.Generator,
                eps: float = LLADA_EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """LLaDA's forward process, ``n`` times: draw t ~ U[eps, 1 - eps], mask each eligible token with probability t.

    Nie et al. 2025 (LLaDA), Section 2.1 and Eq. (3): the training objective masks every
    token independently with probability t ~ U(0, 1) and weights the masked tokens'
    cross-entropy by 1/t; the public DLM membership code (SAMA's baselines) scores
    likelihood attacks on the same masks. eligible: (L,) bool. Returns (masks (n, L)
    bool, t (n,) float64). A pattern that masks nothing is kept empty (all False) and
    skipped by :func:`llada_loss`, as a pass that masks nothing carries no loss.
    """
    if n < 1:
        raise ValueError(f"parameter 'mc_steps': must be >= 1 (got {n})")
    e = eligible.bool()
    t = eps + (1 - 2 * eps) * torch.rand(n, generator=generator, dtype=torch.float64)
    masks = (torch.rand(n, e.numel(), generator=generator, dtype=torch.float64) < t[:, None]) & e
    return masks, t


def llada_loss(nll, t, n_eligible: int) -> float:
    """LLaDA's per-token loss (nats/token) of one sequence from its random-t passes.

    nll: (P, L) masked NLL (nats), NaN where unmasked; t: (P,) each pass's mask
    probability; n_eligible: the sequence's maskable tokens L'. Each pass gives the
    unbiased estimate sum_{i masked} NLL_i / (t L') of the negative ELBO per token
    (Nie et al. 2025, Eq. 3, divided by L'); the result is their mean over the passes
    that masked at least one token. This is the loss the DLM is trained on, so it is
    the loss of Yeom et al.'s attack and of Watson et al.'s calibration.
    """
    a = np.asarray(nll, dtype=float)
    t = np.asarray(t, dtype=float).ravel()
    if a.ndim != 2 or t.shape != (a.shape[0],):
        raise ValueError(f"parameter 'nll': must be (P, L) with t (P,) (got {a.shape}, {t.shape})")
    if n_eligible < 1:
        raise ValueError(f"parameter 'n_eligible': must be >= 1 (got {n_eligible})")
    seen = np.isfinite(a)
    used = seen.any(1)
    if not used.any():
        raise ValueError("parameter 'nll': no pass masks any token")
    per_pass = np.where(seen, a, 0.0).sum(1)[used] / (t[used] * n_eligible)
    return float(per_pass.mean())


def per_position_mean(x) -> np.ndarray:
    """(P, L) with NaN where unmasked -> (L,) mean over the patterns that masked each position (NaN if none)."""
    a = np.asarray(x, dtype=float)
    cnt = np.isfinite(a).sum(0)
    tot = np.where(np.isfinite(a), a, 0).sum(0)
    return np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)


def min_k_positions(nll, k: float = 0.2) -> float:
    """Min-K% over random masks: each position's NLL averaged over the masks that hid it, then :func:`min_k`.

    nll: (P, L) masked NLL (nats), NaN where unmasked. Shi et al. 2024 (Min-K% Prob,
    Section 3) score one log-probability per token; a DLM gives one per (mask, token),
    so a token's log-probability is its mean over the masks that hid it (as the public
    DLM membership code does), and positions never masked are left out.
    """
    return min_k(per_position_mean(nll), k)


def min_k_pp_positions(nll, mu, sigma, k: float = 0.2, eps: float = 1e-6) -> float:
    """Min-K%++ over random masks: the k% lowest per-position z-scores, mean (Zhang et al. 2025, Section 3).

    nll, mu, sigma: (P, L) per (mask, position), NaN where unmasked (``masked_nll(...,
    with_stats=True)``: mu and sigma are the mean and standard deviation of log p under
    that mask's predicted distribution). z = (log p(x_i) - mu) / max(sigma, eps) is
    formed within each mask, from its own prediction, as Min-K%++ forms it from one
    prefix; a position's z is its mean over the masks that hid it; the score is the
    mean of the k% lowest of these (at least one).
    """
    nll, mu, sigma = (np.asarray(a, dtype=float) for a in (nll, mu, sigma))
    if not nll.shape == mu.shape == sigma.shape:
        raise ValueError(f"parameter 'nll': nll, mu, sigma must share a shape (got {nll.shape}, {mu.shape}, "
                         f"{sigma.shape})")
    z = (-nll - mu) / np.maximum(sigma, eps)
    zp = per_position_mean(np.where(np.isfinite(z), z, np.nan))
    zp = zp[np.isfinite(zp)]
    if zp.size == 0:
        raise ValueError("parameter 'nll': needs at least one finite value")
    return float(np.sort(zp)[:_keep(zp.size, k)].mean())


# ----------------------------------------------------------------------------- SAMA

FLOYD_MAX = 10_000  # numpy's Generator.choice draws without replacement by Floyd's algorithm up to this size


def choice_rows(m: int, s: int, num: int, rng: np.random.Generator) -> np.ndarray:
    """``num`` random s-subsets of range(m): the rows ``rng.choice(m, size=s, replace=False)`` would give.

    Returns (num, s) int64, bit for bit the ``num`` calls' results, with ``rng`` left in the
    same state, from one bounded-integer draw. SAMA draws 128 subsets per step, per sequence,
    per model; numpy's per-call overhead made that loop 17 % of chapter 4's CPU time. numpy's
    choice (for m up to :data:`FLOYD_MAX`) draws s values by Floyd's algorithm (the j-th draw
    uniform on [0, m - s + j]; a value already taken is replaced by m - s + j), then shuffles
    them by Fisher-Yates (the draw for slot i uniform on [0, i], i = s-1 .. 1); every draw is
    one ``random_bounded_uint64``, as ``integers(0, highs, endpoint=True)`` makes them, in order.
    The replay keeps the subsets (and their order, which sets the float sums) exactly.
    """
    if not 0 <= s <= m:
        raise ValueError(f"parameter 'subset_size': must be in [0, {m}] (got {s})")
    if m > FLOYD_MAX:  # numpy may shuffle a full range instead (large s): call it
        return np.stack([rng.choice(m, size=s, replace=False) for _ in range(num)]).reshape(num, s)
    highs = np.r_[np.arange(m - s, m), np.arange(s - 1, 0, -1)].astype(np.int64)
    draws = rng.integers(0, np.tile(highs, num), endpoint=True, dtype=np.int64).reshape(num, highs.size)
    idx = np.empty((num, s), dtype=np.int64)
    for j in range(s):  # Floyd
        taken = (idx[:, :j] == draws[:, j, None]).any(1)
        idx[:, j] = np.where(taken, m - s + j, draws[:, j])
    rows = np.arange(num)
    for k, i in enumerate(range(s - 1, 0, -1)):  # Fisher-Yates: swap slot i with slot draws[:, s + k]
        other = draws[:, s + k]
        held = idx[rows, other]
        idx[rows, other] = idx[:, i]
        idx[:, i] = held
    return idx


def sama_vote(nll_target, nll_ref, subset_size: int, num_subsets: int, rng: np.random.Generator) -> float:
    """Share of random subsets (size ``subset_size``) with sum NLL_ref > sum NLL_target.

    nll_target, nll_ref: (m,) per-token NLL at the currently masked positions. SAMA's
    per-step vote (Chen et al. 2026, arXiv 2601.20125, the subset-aggregated test; its
    reference code draws 128 subsets of 8 tokens per step).
    """
    t, r = np.asarray(nll_target, float), np.asarray(nll_ref, float)
    idx = choice_rows(t.size, min(subset_size, t.size), num_subsets, rng)
    return float((r[idx].sum(1) > t[idx].sum(1)).mean())


def first_masked_losses(nll: np.ndarray) -> np.ndarray:
    """(S, L) NLL under nested growing masks (NaN where unmasked) -> (S, L) with each token's first loss.

    Row s keeps, at every position masked at step s, the NLL from the step at which
    that position was first masked (SAMA's bookkeeping: a token is scored once, under
    the sparser mask that first hid it, and later steps only add new tokens).
    """
    a = np.asarray(nll, dtype=float)
    seen = np.isfinite(a)
    first = np.where(seen.any(0), seen.argmax(0), 0)  # (L,) step of first masking
    loss = a[first, np.arange(a.shape[1])]             # (L,) loss at that step
    return np.where(seen, loss[None, :], np.nan)


def sama_score(nll_target, nll_ref, subset_size: int, num_subsets: int, rng: np.random.Generator) -> float:
    """SAMA of one sequence from (S, L) NLLs under nested growing masks (NaN where unmasked).

    Chen et al. 2026 (SAMA, arXiv 2601.20125, Membership Inference Attacks on Finetuned
    Diffusion Language Models): progressive masking from 5 % to 50 % of the tokens over
    S steps (:func:`sama_masks`; S = 16 in the reference code, the Q-Skew paper's 16
    steps), a subset vote per step, inverse-step weights. Each step s votes :func:`sama_vote` over all positions masked so far, with
    first-masked losses (:func:`first_masked_losses`); a step that masks no new token
    is skipped; the votes are averaged with weights 1/s over the steps kept.
    """
    t, r = first_masked_losses(nll_target), first_masked_losses(nll_ref)
    seen = np.isfinite(t)
    votes, before = [], np.zeros(t.shape[1], dtype=bool)
    for s in range(t.shape[0]):
        if not (seen[s] & ~before).any():
            continue
        before = before | seen[s]
        votes.append(sama_vote(t[s][seen[s]], r[s][seen[s]], subset_size, num_subsets, rng))
    if not votes:
        raise ValueError("parameter 'nll_target': no step masks any token")
    return float(np.average(votes, weights=1.0 / np.arange(1, len(votes) + 1)))


# ----------------------------------------------------------------------------- SecMI

def secmi_t_error(brier_new) -> float:
    """SecMI's t-error from (Q, L) squared errors at the re-revealed tokens (NaN elsewhere).

    Duan et al. 2023 (SecMI, ICML), Section 4: the t-error of a sample is
    ||psi(phi(x~_t, t), t + k) - x~_t||^2, x~_t its deterministic state at step t, phi one
    deterministic forward step to t + k and psi one deterministic reverse step back;
    SecMI_stat thresholds it at one t. In a masked DLM the deterministic state hides a
    fixed share t of the tokens (:func:`secmi_masks`), the forward step hides k more and
    the reverse step returns the model's expected one-hot vector there. Deviation: we
    average the t-error over several t (``secmi_ratios``) where SecMI_stat reads one;
    with a step of a few tokens a single t is too noisy on short blocks.

    brier_new[q, i] = ||p_theta(. | x_{t_q + k})_i - e_{x_i}||^2 for the tokens the
    reverse step t_q + k -> t_q reveals; the t-error of step q is their mean (the
    still-masked tokens match on both sides, error 0, and are left out); the result
    is the mean over the Q steps. Lower = more likely a member.
    """
    b = np.asarray(brier_new, dtype=float)
    per_step = [row[np.isfinite(row)].mean() for row in b if np.isfinite(row).any()]
    if not per_step:
        raise ValueError("parameter 'brier_new': no step reveals any token")
    return float(np.mean(per_step))


# ----------------------------------------------------------------------------- mask patterns

def cyclic_batch_size(n: int, rho: float) -> int:
    """Tokens per cyclic batch: round(rho * n), at least 1 (rounding half up)."""
    return max(1, int(np.floor(check_rho(rho) * n + 0.5)))


def cyclic_masks(eligible: torch.Tensor, rho: float, rounds: int, generator: torch.Generator) -> torch.Tensor:
    """Cyclic sampling: R rounds, each a random permutation cut into disjoint batches of ~ rho n tokens.

    eligible: (L,) bool, positions that may be masked (n = its sum, n >= 2).
    Each round permutes the eligible positions and cuts them into consecutive
    batches of b = :func:`cyclic_batch_size` tokens, the last one shorter when b does
    not divide n, so every eligible position is masked exactly once per round and a
    full batch masks a share b / n of the tokens (within 1 / 2n of rho). Returns
    (rounds * ceil(n / b), L) bool.
    """
    rho = check_rho(rho)
    pos = torch.nonzero(eligible.bool()).squeeze(1)
    if pos.numel() < 2:
        raise ValueError(f"parameter 'ids': a sequence needs at least two scorable tokens (got {pos.numel()})")
    b = cyclic_batch_size(pos.numel(), rho)
    c = -(-pos.numel() // b)
    out = torch.zeros(rounds * c, eligible.numel(), dtype=torch.bool)
    for r in range(rounds):
        perm = pos[torch.randperm(pos.numel(), generator=generator)]
        for j, chunk in enumerate(torch.split(perm, b)):
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


def check_secmi(ratios, step: float) -> tuple[tuple[float, ...], float]:
    ratios = tuple(float(r) for r in ratios)
    if not ratios or not all(0 < r < 1 for r in ratios):
        raise ValueError(f"parameter 'secmi_ratios': must be numbers in (0, 1) (got {list(ratios)})")
    if not 0 < step < 1 or max(ratios) + step > 1 + 1e-9:
        raise ValueError(f"parameter 'secmi_step': must be in (0, 1) with max(secmi_ratios) + step <= 1 "
                         f"(got {step!r} with max ratio {max(ratios)})")
    return ratios, float(step)


def secmi_masks(eligible: torch.Tensor, ratios, step: float = 0.2) -> tuple[torch.Tensor, torch.Tensor]:
    """SecMI's deterministic states in the masked setting: (after, revealed), each (Q, L) bool.

    One fixed permutation (seed 0) orders the eligible positions; the state at ratio
    t masks its first round(t n) positions, so states are nested and identical across
    calls (the deterministic forward process). For each t in ``ratios``, ``after`` is
    the state at t + step (at least one more token) and ``revealed`` the tokens a
    reverse step from t + step back to t un-masks: after minus the state at t.
    """
    ratios, step = check_secmi(ratios, step)
    pos = torch.nonzero(eligible.bool()).squeeze(1)
    n = pos.numel()
    perm = pos[torch.randperm(n, generator=torch.Generator().manual_seed(0))]
    after = torch.zeros(len(ratios), eligible.numel(), dtype=torch.bool)
    revealed = torch.zeros_like(after)
    for i, r in enumerate(ratios):
        lo = min(n - 1, int(np.floor(r * n + 0.5)))
        hi = min(n, max(lo + 1, int(np.floor((r + step) * n + 0.5))))
        after[i, perm[:hi]] = True
        revealed[i, perm[lo:hi]] = True
    return after, revealed


def sama_masks(eligible: torch.Tensor, steps: int, lo: float, hi: float, generator: torch.Generator) -> torch.Tensor:
    """Growing masks: step s masks ~ (lo + (hi - lo)(s+1)/(steps+1)) n positions, nested.

    SAMA's linear progressive schedule (Chen et al. 2026; lo = 0.05, hi = 0.5 in its code).

    Returns (steps, L) bool; row s contains row s-1.
    """
    pos = torch.nonzero(eligible.bool()).squeeze(1)
    perm = pos[torch.randperm(pos.numel(), generator=generator)]
    out = torch.zeros(steps, eligible.numel(), dtype=torch.bool)
    for s in range(steps):
        frac = lo + (hi - lo) * (s + 1) / (steps + 1)
        out[s, perm[:max(1, round(frac * pos.numel()))]] = True
    return out


def _stack_padded(rows: list[torch.Tensor]) -> torch.Tensor:
    """Stack (P_i, L) patterns into (N, max P_i, L), padding with empty (all-False) patterns."""
    p = max(r.shape[0] for r in rows)
    out = torch.zeros(len(rows), p, rows[0].shape[1], dtype=torch.bool)
    for i, r in enumerate(rows):
        out[i, :r.shape[0]] = r
    return out


@dataclass
class Probe:
    """Mask patterns for N sequences, shared by every model that scores them.

    cyclic: (N, P, L), P = rounds * ceil(n / round(rho n)) for the longest sequence,
    shorter sequences padded with empty patterns (skipped by :func:`model_view`);
    random: (N, P, L) or None (the no-cyclic ablation); secmi: (N, Q, L) SecMI's
    states at t + k and secmi_revealed (N, Q, L) the tokens the reverse step
    re-reveals; sama: (N, S, L) nested; llada: (N, K, L) LLaDA's random-t masks
    (:func:`llada_masks`, K = ``mc_steps``) with llada_t (N, K) their mask
    probabilities, the likelihood baselines' passes (None: not drawn).
    """

    cyclic: torch.Tensor
    random: torch.Tensor | None
    secmi: torch.Tensor
    sama: torch.Tensor
    secmi_revealed: torch.Tensor | None = None
    llada: torch.Tensor | None = None
    llada_t: torch.Tensor | None = None

    def groups(self) -> dict[str, torch.Tensor]:
        g = {"cyclic": self.cyclic, "secmi": self.secmi, "sama": self.sama}
        if self.random is not None:
            g["random"] = self.random
        if self.llada is not None:
            g["llada"] = self.llada
        return g


def make_probe(eligible: torch.Tensor, *, rho: float = 0.35, rounds: int = 5,
               secmi_ratios=(0.1, 0.3, 0.5, 0.7), secmi_step: float = 0.2, sama_steps: int = 8,
               sama_range=(0.05, 0.5), with_random: bool = False, mc_steps: int = 16, seed: int = 0) -> Probe:
    """Draw every mask pattern for N sequences. eligible: (N, L) bool (n_i >= 2 each).

    ``mc_steps``: LLaDA random-t passes per sequence for the likelihood baselines (the
    Q-Skew paper gives every method 16 denoising steps per sample); 0 draws none. They
    are drawn after every other group, so the cyclic, SecMI and SAMA masks of a seed
    do not depend on it.
    """
    check_rho(rho)
    if mc_steps < 0:
        raise ValueError(f"parameter 'mc_steps': must be >= 0 (got {mc_steps})")
    check_secmi(secmi_ratios, secmi_step)
    if rounds < 1:
        raise ValueError(f"parameter 'rounds': must be >= 1 (got {rounds})")
    g = torch.Generator().manual_seed(seed)
    cyc_rows = [cyclic_masks(e, rho, rounds, g) for e in eligible]
    cyc = _stack_padded(cyc_rows)
    rnd = (_stack_padded([random_masks(e, rho, c.shape[0], g) for e, c in zip(eligible, cyc_rows)])
           if with_random else None)
    sec = [secmi_masks(e, secmi_ratios, secmi_step) for e in eligible]
    sam = torch.stack([sama_masks(e, sama_steps, *sama_range, g) for e in eligible])
    lla = lla_t = None
    if mc_steps:
        drawn = [llada_masks(e, mc_steps, g) for e in eligible]
        lla, lla_t = torch.stack([m for m, _ in drawn]), torch.stack([t for _, t in drawn])
    return Probe(cyc, rnd, torch.stack([a for a, _ in sec]), sam, torch.stack([b for _, b in sec]), lla, lla_t)


def model_view(model, ids: torch.Tensor, probe: Probe, attention_mask: torch.Tensor | None = None,
               batch_size: int = 64, groups=None, stats: bool = True) -> dict[str, torch.Tensor]:
    """Run ``masked_nll`` for every pattern of ``probe`` (or only the named ``groups``).

    ids: (N, L). Returns {group: nll (N, P_group, L)} plus, with ``stats``,
    ``llada_mu`` and ``llada_sigma`` (N, K, L) for Min-K%++, and with the secmi
    group ``secmi_brier`` (N, Q, L), the squared error ||p - e_x||^2 per masked token;
    NaN at unmasked positions. Empty (padding) patterns are not run.
    """
    out = {}
    for name, pats in probe.groups().items():
        if groups is not None and name not in groups:
            continue
        n, p, l = pats.shape
        flat = pats.reshape(n * p, l)
        keep = flat.any(1)
        rep_ids = ids.repeat_interleave(p, 0)[keep]
        rep_am = None if attention_mask is None else attention_mask.repeat_interleave(p, 0)[keep]
        want = stats and name == "llada"
        brier = name == "secmi"
        res = masked_nll(model, rep_ids, flat[keep], rep_am, batch_size, with_stats=want, with_brier=brier)
        res = res if isinstance(res, tuple) else (res,)

        def full(t: torch.Tensor) -> torch.Tensor:
            o = torch.full((n * p, l), float("nan"), dtype=t.dtype)  # keep float64 models exact
            o[keep] = t
            return o.view(n, p, l)

        res = [full(t) for t in res]
        out[name] = res[0]
        if want:
            out.update(llada_mu=res[1], llada_sigma=res[2])
        if brier:
            out["secmi_brier"] = res[-1]
    return out


def deltas_of(target_view: dict, ref_view: dict, group: str = "cyclic") -> list[np.ndarray]:
    """Per-sequence flat arrays of Delta = NLL_ref - NLL_target (nats) over every masked entry.

    Returns a list of N arrays, one per sequence, of shape (n_i,) (its finite masked entries).
    """
    d = (ref_view[group] - target_view[group]).numpy()
    return [row[np.isfinite(row)] for row in d.reshape(d.shape[0], -1)]


def compute_scores(target_view: dict, ref_view: dict | None, probe: Probe, scores=SCORES, *,
                   h: float = 0.1, k: float = 0.2, sama_subset: int = 8, sama_subsets: int = 128,
                   seed: int = 0, eligible: torch.Tensor | None = None) -> dict[str, np.ndarray]:
    """All requested scores, one value per sequence: {name: (N,) float64}.

    eligible: (N, L) bool, each sequence's maskable tokens, the L' that LLaDA's loss
    divides by (None: read from the probe, whose cyclic rounds mask every eligible
    token once).
    """
    scores = check_score_names(scores)
    check_h(h)
    needs_ref = {"calibration", "sama", "qskew", *ABLATIONS}
    if ref_view is None and needs_ref & set(scores):
        raise ValueError("parameter 'reference': the scores " + ", ".join(sorted(needs_ref & set(scores))) +
                         " need a reference model view")
    if "qskew_no_cyclic" in scores and probe.random is None:
        raise ValueError("parameter 'probe': the no-cyclic ablation needs make_probe(with_random=True)")
    if {s for s in scores if NEEDS[s] == "llada"} and probe.llada is None:
        raise ValueError("parameter 'mc_steps': the likelihood baselines need make_probe(mc_steps >= 1)")
    n = probe.cyclic.shape[0]
    rng = np.random.default_rng(seed)
    out = {s: np.empty(n) for s in scores}
    d_cyc = deltas_of(target_view, ref_view) if ref_view is not None else None
    d_rnd = deltas_of(target_view, ref_view, "random") if "qskew_no_cyclic" in scores else None
    loss_of = {}  # LLaDA loss per (view, sequence): computed once, read by loss and calibration

    def llada(view: dict, i: int) -> float:
        key = (id(view), i)
        if key not in loss_of:
            n_elig = int(probe.cyclic[i].any(0).sum()) if eligible is None else int(eligible[i].sum())
            loss_of[key] = llada_loss(view["llada"][i].numpy(), probe.llada_t[i].numpy(), n_elig)
        return loss_of[key]

    for i in range(n):
        for s in scores:
            if s == "loss":
                v = -llada(target_view, i)
            elif s == "min_k":
                v = min_k_positions(target_view["llada"][i].numpy(), k)
            elif s == "min_k_pp":
                v = min_k_pp_positions(target_view["llada"][i].numpy(), target_view["llada_mu"][i].numpy(),
                                       target_view["llada_sigma"][i].numpy(), k)
            elif s == "calibration":
                # Watson et al.: the target's loss calibrated by the reference's on the same passes.
                v = llada(ref_view, i) - llada(target_view, i)
            elif s == "det_loss":
                sec = target_view["secmi"][i]
                v = -float(np.mean([row[torch.isfinite(row)].mean().item() for row in sec]))
            elif s == "secmi":
                rev = probe.secmi_revealed[i]
                v = -secmi_t_error(torch.where(rev, target_view["secmi_brier"][i], float("nan")).numpy())
            elif s == "sama":
                v = sama_score(target_view["sama"][i].numpy(), ref_view["sama"][i].numpy(), sama_subset,
                               sama_subsets, rng)
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
    return compute_scores(tv, rv, probe, scores, h=h, k=k, seed=seed, eligible=eligible)


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
                 eligible: torch.Tensor | None = None, batch_size: int = 64) -> np.ndarray:
    """(C,) mean NLL (nats/token) of each candidate record under ``repeats`` random masks.

    seqs: (C, L) candidate records; eligible: (C, L) bool, the record's non-padding
    tokens (None: all). Each repeat masks every eligible token with probability
    ``mask_share`` (at least one per row); the cross-entropy baseline of Table 6.
    """
    if not 0 < mask_share < 1:
        raise ValueError(f"parameter 'mask_share': must be in (0, 1) (got {mask_share!r})")
    elig = torch.ones_like(seqs, dtype=torch.bool) if eligible is None else eligible.bool()
    if not elig.any(1).all():
        raise ValueError("parameter 'eligible': every candidate needs at least one eligible token")
    reps, elig = seqs.repeat_interleave(repeats, 0), elig.repeat_interleave(repeats, 0)
    masks = (torch.rand(reps.shape, generator=generator) < mask_share) & elig
    for i in torch.nonzero(~masks.any(1)).squeeze(1).tolist():
        masks[i, torch.nonzero(elig[i])[0]] = True
    nll = masked_nll(model, reps, masks, batch_size=batch_size)
    return torch.nanmean(nll.view(seqs.shape[0], -1), 1).numpy()


def candidate_qskew(target, reference, seqs: torch.Tensor, eligible: torch.Tensor, *, rho: float, rounds: int,
                    h: float, seed: int, batch_size: int = 64) -> np.ndarray:
    """(C,) Q-Skew of each candidate record with cyclic masks over its ``eligible`` (C, L) tokens."""
    probe = make_probe(eligible, rho=rho, rounds=rounds, sama_steps=1, mc_steps=0, seed=seed)
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


# ----------------------------------------------------------------------------- PII reconstruction attack (Table 6)

def reconstruct_pii(target, reference, record: torch.Tensor, prefix_len: int, *, slots: int, eos_id: int,
                    candidates: int, steps: int, repeats: int, ce_share: float, span: int, rho: float,
                    rounds: int, h: float, alpha: float, generator: torch.Generator,
                    batch_size: int = 64) -> dict | None:
    """Reconstruct the masked PII of one record by denoising, and rank the unique candidates (Table 6).

    record: (L,) token ids of the record whose PII starts at ``prefix_len``. ``slots``
    positions from there are set to ``eos_id`` and masked; ``candidates`` rows are
    filled by independent denoising runs of ``target`` (``steps`` steps, temperature
    1, ``generator``), and each row's tokens up to its first ``eos_id`` are a
    candidate (kept if at least 2 tokens; duplicates dropped, first-seen order).
    Each candidate record (prefix + candidate, padded with ``eos_id``) is ranked by

    * ``ce``: (C,) mean target NLL (nats/token) under ``repeats`` random masks hiding
      a ``ce_share`` of its own tokens (:func:`candidate_ce`; lower = better);
    * ``qskew_pii`` / ``qskew_context``: (C,) Q-Skew of target against ``reference``
      with cyclic masks over the candidate's tokens / the context of a ``span``-token
      span (:func:`span_eligible`, :func:`candidate_qskew`);
    * ``combined``: (C,) :func:`rank_candidates` of ``ce`` and ``qskew_pii`` with ``alpha``.

    Returns ``{"candidates": list of token tuples, "ce", "qskew_pii", "qskew_context",
    "combined"}``, or None when no candidate has 2 tokens. ``generator`` is advanced by
    the denoising and then by the CE masks, in that order.
    """
    from memlab.models.diffusion_lm import denoise

    if record.ndim != 1:
        raise ValueError(f"parameter 'record': must be one (L,) token sequence (got shape {tuple(record.shape)})")
    length = record.shape[0]
    if not 0 <= prefix_len < length or prefix_len + slots > length:
        raise ValueError(f"parameter 'slots': prefix_len {prefix_len} + slots {slots} must fit the record "
                         f"length {length}")
    x = record.clone()
    mask = torch.zeros(length, dtype=torch.bool)
    mask[prefix_len:prefix_len + slots] = True
    x[mask] = eos_id
    batch = x.expand(candidates, -1).clone()
    filled = denoise(target, batch, mask.expand_as(batch), steps=steps, temperature=1.0, generator=generator)
    cands = {}
    for row in filled:
        toks = row[prefix_len:prefix_len + slots].tolist()
        toks = toks[:toks.index(eos_id)] if eos_id in toks else toks
        if len(toks) >= 2:
            cands.setdefault(tuple(toks), None)
    if not cands:
        return None
    cand_list = list(cands)
    seqs = torch.full((len(cand_list), length), eos_id, dtype=torch.long)
    seqs[:, :prefix_len] = record[:prefix_len]
    for j, c in enumerate(cand_list):
        seqs[j, prefix_len:prefix_len + len(c)] = torch.tensor(c)
    # The CE masks hide a share of the record's own tokens (prefix and candidate), never the padding.
    lengths = torch.tensor([prefix_len + len(c) for c in cand_list])
    real = torch.arange(length)[None, :] < lengths[:, None]
    ce = candidate_ce(target, seqs, repeats=repeats, mask_share=ce_share, generator=generator, eligible=real,
                      batch_size=batch_size)
    sk = {}
    for part in ("pii", "context"):
        elig = torch.stack([span_eligible(prefix_len, len(c), span, length, part) for c in cand_list])
        sk[part] = candidate_qskew(target, reference, seqs, elig, rho=rho, rounds=rounds, h=h, seed=prefix_len,
                                   batch_size=batch_size)
    return {"candidates": cand_list, "ce": ce, "qskew_pii": sk["pii"], "qskew_context": sk["context"],
            "combined": rank_candidates(ce, sk["pii"], alpha)}


def pii_memorisation(base, target, ids: torch.Tensor, prefix_len: torch.Tensor, pii_len: torch.Tensor,
                     batch_size: int = 64) -> dict[str, dict[str, float]]:
    """Mean NLL (nats/token) of the true PII tokens with the whole PII masked, base vs fine-tuned.

    ids: (N, L) encoded records, e-mails first then phones, N/2 of each (the
    layout of :func:`memlab.data.pii.make_pii_records`); prefix_len, pii_len: (N,)
    where each record's PII starts and how many tokens it has. The gap says how much
    of the PII the fine-tuned model has memorised, whether or not denoising then
    reproduces it exactly. Returns ``{"email" | "phone": {"base NLL", "fine-tuned NLL"}}``.
    """
    if ids.ndim != 2 or prefix_len.shape != (ids.shape[0],) or pii_len.shape != (ids.shape[0],):
        raise ValueError(f"pii_memorisation: ids must be (N, L) and prefix_len, pii_len (N,) "
                         f"(got {tuple(ids.shape)}, {tuple(prefix_len.shape)}, {tuple(pii_len.shape)})")
    pos = torch.arange(ids.shape[1])
    masks = (pos >= prefix_len[:, None]) & (pos < (prefix_len + pii_len)[:, None])
    nb = masked_nll(base, ids, masks, batch_size=batch_size)
    nt = masked_nll(target, ids, masks, batch_size=batch_size)
    half = ids.shape[0] // 2
    rows = {}
    for kind, sl in (("email", slice(0, half)), ("phone", slice(half, None))):
        rows[kind] = {"base NLL": float(torch.nanmean(nb[sl])), "fine-tuned NLL": float(torch.nanmean(nt[sl]))}
    return rows
