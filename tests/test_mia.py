"""Unit tests of memlab.science.mia: Q-Skew, Min-K%++, the cyclic sampler and bad input."""
import numpy as np
import pytest
import torch
from scipy import stats

from memlab.science import mia


def _samples(kind: str, n: int = 4000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "right":
        return rng.exponential(1.0, n)
    if kind == "left":
        return -rng.exponential(1.0, n)
    return rng.normal(0.0, 1.0, n)


def test_qskew_sign_follows_skew():
    assert mia.qskew(_samples("right")) > 0.3
    assert mia.qskew(_samples("left")) < -0.3
    assert abs(mia.qskew(_samples("sym"))) < 0.1


def test_qskew_symmetric_sample_is_exactly_zero():
    # A sample symmetric about its median has mirrored ranks, hence mirrored weights.
    x = np.array([-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0])
    assert mia.qskew(x) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("shift,scale", [(5.0, 1.0), (-2.0, 3.0), (0.0, 0.01)])
def test_qskew_invariant_to_shift_and_positive_scale(shift, scale):
    x = _samples("right", 300, seed=1)
    assert mia.qskew(shift + scale * x) == pytest.approx(mia.qskew(x), rel=1e-9)
    assert mia.qskew(-x) == pytest.approx(-mia.qskew(x), rel=1e-9)


def test_qskew_matches_written_formula():
    x = np.array([0.1, 0.4, 0.2, 2.5, -0.3, 0.0, 1.1, 0.7])
    h = 0.1
    f = (stats.rankdata(x) - 0.5) / x.size
    w = np.exp(-(f - 0.15) ** 2 / (2 * h * h)) + np.exp(-(f - 0.85) ** 2 / (2 * h * h))
    expected = np.mean(w / w.mean() * 3 * (x - np.median(x)) / x.std())
    assert mia.qskew(x, h=h) == pytest.approx(expected, rel=1e-12)


def test_median_skew_and_weighted_mean_reference():
    x = _samples("right", 200, seed=2)
    assert mia.median_skew(x) == pytest.approx(3 * (x.mean() - np.median(x)) / x.std())
    # Constant weights in the limit of a huge bandwidth: weighted mean -> plain mean.
    assert mia.weighted_mean(x, h=1e6) == pytest.approx(x.mean(), rel=1e-6)


def test_min_k_plus_plus_matches_direct_formula():
    probs = np.array([[0.7, 0.2, 0.1], [0.25, 0.25, 0.5], [0.05, 0.9, 0.05], [0.4, 0.3, 0.3], [1 / 3, 1 / 3, 1 / 3]])
    tokens = np.array([0, 2, 0, 1, 2])
    logp = np.log(probs)
    z = []
    for p, lp, t in zip(probs, logp, tokens):
        mu = np.sum(p * lp)
        sigma = np.sqrt(max(np.sum(p * lp ** 2) - mu ** 2, 0))
        z.append((lp[t] - mu) / max(sigma, 1e-6))
    z = np.sort(z)
    assert mia.min_k_plus_plus(logp, tokens, k=0.4) == pytest.approx(z[:2].mean(), rel=1e-9)
    # k * L < 1 still keeps one token; the uniform row (sigma = 0) stays finite.
    assert mia.min_k_plus_plus(logp, tokens, k=0.1) == pytest.approx(z[0], rel=1e-9)


def test_min_k_takes_worst_tokens():
    nll = np.array([0.1, 5.0, 0.2, 3.0, np.nan, 0.3, 0.4, 0.5, 0.6, 0.7])
    assert mia.min_k(nll, k=0.25) == pytest.approx(-(5.0 + 3.0) / 2)


def test_cyclic_sampler_covers_each_position_once_per_round():
    eligible = torch.tensor([False, True, True, True, True, True, True, True, True, True, False, True])
    masks = mia.cyclic_masks(eligible, rho=0.35, rounds=4, generator=torch.Generator().manual_seed(0))
    n = int(eligible.sum())  # 10 -> batches of round(3.5) = 4 tokens: 4, 4, 2
    c = 3
    assert masks.shape == (4 * c, eligible.numel())
    per_round = masks.view(4, c, -1).sum(1)
    assert torch.equal(per_round, eligible.long().expand(4, -1))
    assert masks.view(4, c, -1).sum(2).tolist() == [[4, 4, n - 8]] * 4
    assert not masks[:, ~eligible].any()


@pytest.mark.parametrize("n", [48, 100, 31])
def test_cyclic_full_batch_share_tracks_rho(n):
    e = torch.ones(n, dtype=torch.bool)
    for rho in np.arange(0.10, 0.501, 0.05):
        masks = mia.cyclic_masks(e, float(rho), 1, torch.Generator().manual_seed(0))
        share = masks.sum(1).max().item() / n  # a full batch
        assert abs(share - rho) <= 0.5 / n + 1e-12, (n, rho, share)
        sizes = masks.sum(1)
        assert (sizes[:-1] == sizes[0]).all() and 0 < sizes[-1] <= sizes[0]  # only the remainder is short
        assert int(sizes.sum()) == n


def test_cyclic_masks_differ_between_nearby_rhos():
    # The old sampler cut each round into round(1/rho) batches: 0.30 gave the masks of 0.35
    # and 0.40/0.45 those of 0.50. Batches of ~ rho n tokens tell them apart.
    e = torch.ones(48, dtype=torch.bool)
    got = {rho: mia.cyclic_masks(e, rho, 2, torch.Generator().manual_seed(3)) for rho in (0.30, 0.35, 0.40, 0.45)}
    shapes = {rho: tuple(m.sum(1)[:m.shape[0] // 2].tolist()) for rho, m in got.items()}
    assert shapes == {0.30: (14, 14, 14, 6), 0.35: (17, 17, 14), 0.40: (19, 19, 10), 0.45: (22, 22, 4)}
    assert len(set(shapes.values())) == 4


def test_secmi_masks_deterministic_and_nested():
    e = torch.ones(20, dtype=torch.bool)
    (a, ra), (b, rb) = mia.secmi_masks(e, (0.1, 0.4, 0.6), 0.2), mia.secmi_masks(e, (0.1, 0.4, 0.6), 0.2)
    assert torch.equal(a, b) and torch.equal(ra, rb)
    assert a.sum(1).tolist() == [6, 12, 16]  # the states at t + k: 0.3, 0.6, 0.8 of 20 tokens
    assert ra.sum(1).tolist() == [4, 4, 4]   # re-revealed: round(0.2 * 20) each
    assert (a[0] <= a[1]).all() and (a[1] <= a[2]).all()
    assert (ra <= a).all()
    # The revealed set is the state at t + k minus the state at t (t = 0.4: 8 tokens).
    before = a[1] & ~ra[1]
    assert before.sum() == 8 and (a[0] <= before).all()  # the state at 0.3 lies inside the one at 0.4


@pytest.mark.parametrize("ratios,step", [((0.0, 0.5), 0.2), ((0.5, 0.9), 0.2), ((0.3,), 0.0)])
def test_secmi_bad_ratios(ratios, step):
    with pytest.raises(ValueError, match="secmi"):
        mia.secmi_masks(torch.ones(10, dtype=torch.bool), ratios, step)


def test_secmi_t_error_on_hand_made_errors():
    nan = np.nan
    brier = np.array([[0.2, nan, 0.4, nan], [nan, 1.0, nan, nan], [nan, nan, nan, nan]])
    assert mia.secmi_t_error(brier) == pytest.approx((0.3 + 1.0) / 2)  # empty steps are skipped
    with pytest.raises(ValueError, match="reveals"):
        mia.secmi_t_error(np.full((2, 3), nan))


def test_secmi_score_is_minus_brier_of_revealed_tokens():
    from memlab.models import diffusion_lm as dlm

    torch.manual_seed(0)
    arch = dlm.DLMConfig(vocab_size=12, mask_id=11, block_size=10, n_layer=1, n_head=1, n_embd=8)
    model = dlm.MaskedDiffusionLM(arch).double().eval()  # float64: the test is about the formula
    ids = torch.randint(0, 11, (2, 10))
    probe = mia.make_probe(torch.ones(2, 10, dtype=torch.bool), rounds=1, sama_steps=2,
                           secmi_ratios=(0.2, 0.5), secmi_step=0.3)
    v = mia.model_view(model, ids, probe)
    got = mia.compute_scores(v, None, probe, ["secmi", "det_loss"])
    for i in range(2):
        errs, losses = [], []
        for after, rev in zip(probe.secmi[i], probe.secmi_revealed[i]):
            x = torch.where(after, torch.full_like(ids[i], 11), ids[i])
            p = torch.softmax(model(x[None])[0], -1)
            onehot = torch.nn.functional.one_hot(ids[i], 12).float()
            errs.append(((p - onehot) ** 2).sum(-1)[rev].mean().item())
            losses.append(-torch.log(p.gather(1, ids[i][:, None]).squeeze(1))[after].mean().item())
        assert got["secmi"][i] == pytest.approx(-np.mean(errs), rel=1e-9)
        assert got["det_loss"][i] == pytest.approx(-np.mean(losses), rel=1e-9)


def test_first_masked_losses_keep_the_loss_of_the_first_step():
    nan = np.nan
    nll = np.array([[1.0, nan, nan, nan],
                    [9.0, 2.0, nan, nan],   # position 0 re-scored at step 1: SAMA keeps 1.0
                    [9.0, 9.0, 3.0, nan]])
    got = mia.first_masked_losses(nll)
    np.testing.assert_array_equal(got, [[1.0, nan, nan, nan], [1.0, 2.0, nan, nan], [1.0, 2.0, 3.0, nan]])


def test_sama_score_on_hand_made_losses():
    nan = np.nan
    # Step 0: one token, ref > target (vote 1). Step 1 adds a token whose reference loss is lower
    # under the denser mask; with first-masked losses the token 0 comparison is kept from step 0.
    t = np.array([[1.0, nan], [5.0, 1.0]])
    r = np.array([[2.0, nan], [0.0, 0.5]])
    rng = np.random.default_rng(0)
    # Subsets of size 2 at step 1 hold both tokens: 2 + 0.5 > 1 + 1 -> vote 1; weights 1, 1/2.
    assert mia.sama_score(t, r, 2, 16, rng) == pytest.approx(1.0)
    # Re-scored at step 1 (the old behaviour) the vote would be 0 + 0.5 > 5 + 1 -> 0.
    assert mia.sama_vote(t[1], r[1], 2, 16, rng) == 0.0
    # A step adding no new token is skipped.
    t3, r3 = np.vstack([t[:1], t[:1], t[1:]]), np.vstack([r[:1], r[:1], r[1:]])
    assert mia.sama_score(t3, r3, 2, 16, rng) == pytest.approx(1.0)
    t4 = np.array([[1.0, nan], [5.0, 4.0]])  # step 1: 2 + 0.5 < 1 + 4 -> vote 0
    assert mia.sama_score(t4, r, 2, 16, rng) == pytest.approx((1 * 1 + 0 * 0.5) / 1.5)


def test_min_k_pp_forms_z_per_pattern():
    # Two patterns mask the same token with different predictions; z is formed per pattern.
    nan = np.nan
    nll = np.array([[1.0, nan], [3.0, 2.0]])
    mu = np.array([[-1.5, nan], [-1.0, -2.0]])
    sigma = np.array([[0.5, nan], [1.0, 1.0]])
    z = [(-1.0 + 1.5) / 0.5, (-3.0 + 1.0) / 1.0, (-2.0 + 2.0) / 1.0]  # 1, -2, 0
    assert mia.min_k_pp_from_stats(nll.ravel(), mu.ravel(), sigma.ravel(), k=0.34) == pytest.approx(-2.0)
    assert mia.min_k_pp_from_stats(nll.ravel(), mu.ravel(), sigma.ravel(), k=1.0) == pytest.approx(np.mean(z))


def test_sama_vote_extremes():
    rng = np.random.default_rng(0)
    t, r = np.zeros(10), np.ones(10)
    assert mia.sama_vote(t, r, 4, 32, rng) == 1.0
    assert mia.sama_vote(r, t, 4, 32, rng) == 0.0


@pytest.mark.parametrize("rho", [0.0, 1.0, -0.1, 1.5])
def test_bad_rho(rho):
    with pytest.raises(ValueError, match="rho"):
        mia.cyclic_masks(torch.ones(8, dtype=torch.bool), rho, 1, torch.Generator())


@pytest.mark.parametrize("h", [0.0, -1.0, float("nan")])
def test_bad_h(h):
    with pytest.raises(ValueError, match="'h'"):
        mia.qskew(np.arange(5.0), h=h)


def test_too_short_sequence():
    with pytest.raises(ValueError, match="at least two"):
        mia.cyclic_masks(torch.tensor([True, False, False]), 0.35, 1, torch.Generator())
    with pytest.raises(ValueError, match="at least two"):
        mia.qskew([1.0])


def test_unknown_score_name():
    with pytest.raises(ValueError, match="unknown score 'zlib'"):
        mia.check_score_names(["loss", "zlib"])


def test_probe_pads_short_sequences_with_empty_patterns():
    e = torch.zeros(2, 10, dtype=torch.bool)
    e[0, :10], e[1, :4] = True, True
    probe = mia.make_probe(e, rho=0.35, rounds=2, sama_steps=2, with_random=True, seed=1)
    # 10 tokens: batches 4, 4, 2 (3 per round); 4 tokens: round(1.4) = 1 -> 4 per round.
    assert probe.cyclic.shape == (2, 8, 10)
    assert torch.equal(probe.cyclic[1].sum(0), e[1].long() * 2)
    assert probe.cyclic[0, 6:].sum() == 0  # padding patterns
    assert probe.random[0, 6:].sum() == 0 and probe.random[0, :6].any(1).all()


def test_probe_scores_agree_with_direct_deltas():
    from memlab.models import diffusion_lm as dlm

    torch.manual_seed(0)
    arch = dlm.DLMConfig(vocab_size=30, mask_id=29, block_size=10, n_layer=1, n_head=1, n_embd=8)
    # float64: the test is about the formula (batched patterns vs one forward each); in float32 the
    # skewness of ~20 small deltas differs by ~1e-5 relative between CPU kernels (AVX2 vs AVX-512).
    target = dlm.MaskedDiffusionLM(arch).double().eval()
    ref = dlm.MaskedDiffusionLM(arch).double().eval()
    ids = torch.randint(0, 29, (3, 10))
    probe = mia.make_probe(torch.ones(3, 10, dtype=torch.bool), rounds=2, sama_steps=2, seed=0)
    tv, rv = mia.model_view(target, ids, probe), mia.model_view(ref, ids, probe)
    out = mia.compute_scores(tv, rv, probe, ["qskew", "calibration", "loss"])
    for i in range(3):
        d = []
        for m in probe.cyclic[i]:
            t = dlm.masked_nll(target, ids[i:i + 1], m[None])[0]
            r = dlm.masked_nll(ref, ids[i:i + 1], m[None])[0]
            d.append((r - t)[m])
        d = torch.cat(d).numpy()
        assert out["qskew"][i] == pytest.approx(mia.qskew(d), rel=1e-9)
        # Loss and Calibration read LLaDA's random-t passes, one forward each, not the cyclic probe.
        loss = {}
        for name, model in (("target", target), ("ref", ref)):
            per_pass = []
            for m, t in zip(probe.llada[i], probe.llada_t[i]):
                if m.any():
                    nll = dlm.masked_nll(model, ids[i:i + 1], m[None])[0]
                    per_pass.append(nll[m].sum().item() / (t.item() * 10))
            loss[name] = np.mean(per_pass)
        assert out["loss"][i] == pytest.approx(-loss["target"], rel=1e-9)
        assert out["calibration"][i] == pytest.approx(loss["ref"] - loss["target"], rel=1e-9, abs=1e-12)
        assert out["calibration"][i] != pytest.approx(d.mean(), rel=1e-3)  # not the cyclic mean ablation


@pytest.mark.parametrize("m", [1, 2, 7, 8, 9, 33, 48, 300, 10_001])
def test_choice_rows_replays_numpys_choice_bit_for_bit(m):
    # SAMA's subsets, drawn at once, must be the ones the per-subset loop drew (published numbers).
    for seed in range(20):
        for s in {1, min(8, m), m if m < 50 else 20}:
            a, b = np.random.default_rng(seed), np.random.default_rng(seed)
            loop = np.stack([a.choice(m, size=s, replace=False) for _ in range(64)])
            np.testing.assert_array_equal(mia.choice_rows(m, s, 64, b), loop)
            assert a.bit_generator.state == b.bit_generator.state


def test_choice_rows_are_subsets_without_repeats():
    got = mia.choice_rows(20, 8, 500, np.random.default_rng(1))
    assert got.shape == (500, 8) and got.min() >= 0 and got.max() < 20
    assert all(len(set(row)) == 8 for row in got)
    # every element is as likely as any other: 500 * 8 / 20 = 200 expected hits each
    counts = np.bincount(got.ravel(), minlength=20)
    assert counts.min() > 140 and counts.max() < 260
    with pytest.raises(ValueError, match="subset_size"):
        mia.choice_rows(5, 6, 1, np.random.default_rng(0))


# --- the baselines on constructed cases whose values are known by hand ------------------------------

class _TableLM(torch.nn.Module):
    """A masked LM that ignores its input: position i always predicts the fixed distribution probs[i].

    So every masked token's NLL, and the mean and spread of log p there, are known in closed form
    whatever the mask: each baseline's value can be computed by hand from the table and the masks.
    """

    def __init__(self, probs: torch.Tensor, mask_id: int):
        super().__init__()
        self.register_buffer("logits", torch.log(probs.double()))
        self.w = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
        self.vocab_size, self.mask_id = probs.shape[1], mask_id

    def forward(self, ids, attention_mask=None):
        return self.logits.expand(ids.shape[0], -1, -1) + 0 * self.w


def _table(p_true: list[float], ids: list[int], vocab: int) -> torch.Tensor:
    """(L, V) rows giving the true token ids[i] probability p_true[i], the rest spread evenly."""
    probs = torch.empty(len(ids), vocab, dtype=torch.float64)
    for i, (p, x) in enumerate(zip(p_true, ids)):
        probs[i] = (1 - p) / (vocab - 1)
        probs[i, x] = p
    return probs


IDS = [0, 1, 2, 3, 0, 1]
TARGET_P = [0.9, 0.5, 0.3, 0.7, 0.05, 0.6]  # no row uniform: sd of log p > 0
REF_P = [0.6, 0.5, 0.1, 0.6, 0.05, 0.3]


def _table_scores(scores, k=0.34, mc_steps=8, seed=3):
    v = 5  # token 4 is the mask token
    target, ref = _TableLM(_table(TARGET_P, IDS, v), 4), _TableLM(_table(REF_P, IDS, v), 4)
    ids = torch.tensor([IDS])
    probe = mia.make_probe(torch.ones(1, 6, dtype=torch.bool), rounds=1, sama_steps=2, mc_steps=mc_steps, seed=seed)
    tv, rv = mia.model_view(target, ids, probe), mia.model_view(ref, ids, probe)
    return mia.compute_scores(tv, rv, probe, scores, k=k), probe


def _hand_llada_loss(p_true, masks, ts) -> float:
    nll = -np.log(p_true)
    per = [nll[m.numpy()].sum() / (t.item() * len(p_true)) for m, t in zip(masks, ts) if m.any()]
    return float(np.mean(per))


def test_loss_and_calibration_are_llada_losses_on_random_t_masks():
    got, probe = _table_scores(["loss", "calibration"])
    masks, ts = probe.llada[0], probe.llada_t[0]
    assert masks.shape == (8, 6) and ((ts >= mia.LLADA_EPS) & (ts <= 1 - mia.LLADA_EPS)).all()
    lt, lr = _hand_llada_loss(TARGET_P, masks, ts), _hand_llada_loss(REF_P, masks, ts)
    assert got["loss"][0] == pytest.approx(-lt, rel=1e-12)           # Yeom et al.: minus the loss
    assert got["calibration"][0] == pytest.approx(lr - lt, rel=1e-12)  # Watson et al.: ref minus target


def test_min_k_baselines_on_a_table_model():
    got, probe = _table_scores(["min_k", "min_k_pp"], k=0.34)
    seen = probe.llada[0].any(0).numpy()
    assert seen.sum() >= 2
    nll = -np.log(TARGET_P)[seen]
    worst = np.sort(nll)[::-1][:max(1, int(seen.sum() * 0.34))]
    assert got["min_k"][0] == pytest.approx(-worst.mean(), rel=1e-12)  # Shi et al.: the k% least likely
    # Min-K%++ (Zhang et al.): z = (log p(x) - E_p[log p]) / sd_p[log p], per position, k% lowest.
    probs = _table(TARGET_P, IDS, 5).numpy()
    lp = np.log(probs)
    mu = (probs * lp).sum(1)
    sd = np.sqrt((probs * lp ** 2).sum(1) - mu ** 2)
    z = ((np.log(TARGET_P) - mu) / sd)[seen]
    assert got["min_k_pp"][0] == pytest.approx(np.sort(z)[:max(1, int(seen.sum() * 0.34))].mean(), rel=1e-9)


def test_llada_loss_on_hand_made_passes_and_its_unbiasedness():
    nan = np.nan
    nll = np.array([[1.0, nan, 3.0, nan], [nan, nan, nan, nan], [2.0, 2.0, 2.0, 2.0]])
    t = np.array([0.5, 0.3, 0.8])
    # pass 0: 4 / (0.5 * 4) = 2; pass 1 masks nothing and is skipped; pass 2: 8 / (0.8 * 4) = 2.5
    assert mia.llada_loss(nll, t, 4) == pytest.approx(2.25)
    with pytest.raises(ValueError, match="no pass"):
        mia.llada_loss(np.full((2, 3), nan), np.array([0.5, 0.5]), 3)
    with pytest.raises(ValueError, match="n_eligible"):
        mia.llada_loss(nll, t, 0)
    # a constant per-token NLL c: E[sum_masked c / (t L)] = c, the per-token loss, whatever t
    e = torch.ones(40, dtype=torch.bool)
    masks, ts = mia.llada_masks(e, 20000, torch.Generator().manual_seed(0))
    est = mia.llada_loss(np.where(masks.numpy(), 1.5, np.nan), ts.numpy(), 40)
    assert est == pytest.approx(1.5, rel=0.05)


def test_llada_masks_mask_each_eligible_token_with_probability_t():
    e = torch.tensor([True] * 30 + [False] * 10)
    masks, t = mia.llada_masks(e, 4000, torch.Generator().manual_seed(1))
    assert masks.shape == (4000, 40) and not masks[:, 30:].any()
    share = masks[:, :30].double().mean(1)
    assert float(np.corrcoef(share.numpy(), t.numpy())[0, 1]) > 0.95  # each pass hides ~ t of the tokens
    assert abs(float(t.mean()) - 0.5) < 0.02  # t ~ U[eps, 1 - eps]
    again, t2 = mia.llada_masks(e, 4000, torch.Generator().manual_seed(1))
    assert torch.equal(masks, again) and torch.equal(t, t2)
    with pytest.raises(ValueError, match="mc_steps"):
        mia.llada_masks(e, 0, torch.Generator())


def test_llada_passes_leave_the_other_probe_groups_unchanged():
    e = torch.ones(3, 12, dtype=torch.bool)
    a = mia.make_probe(e, rounds=2, sama_steps=3, mc_steps=16, seed=4)
    b = mia.make_probe(e, rounds=2, sama_steps=3, mc_steps=0, seed=4)
    assert torch.equal(a.cyclic, b.cyclic) and torch.equal(a.sama, b.sama) and torch.equal(a.secmi, b.secmi)
    assert b.llada is None and a.llada.shape == (3, 16, 12)
    with pytest.raises(ValueError, match="mc_steps"):
        mia.compute_scores({}, None, b, ["loss"])


def test_min_k_pp_positions_average_z_per_position():
    nan = np.nan
    # position 0 is hidden by both masks (z = 1 and -2: mean -0.5), position 1 by the second (z = 0)
    nll = np.array([[1.0, nan], [3.0, 2.0]])
    mu = np.array([[-1.5, nan], [-1.0, -2.0]])
    sigma = np.array([[0.5, nan], [1.0, 1.0]])
    assert mia.min_k_pp_positions(nll, mu, sigma, k=0.5) == pytest.approx(-0.5)
    assert mia.min_k_pp_positions(nll, mu, sigma, k=1.0) == pytest.approx(-0.25)
    assert mia.min_k_positions(nll, k=0.5) == pytest.approx(-2.0)  # position NLLs 2.0 and 2.0
