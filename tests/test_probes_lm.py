"""The science modules that chapters 1-5 share: probes, causal-LM helpers, LM unlearning, PII ranking."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from memlab.models import lm
from memlab.science import mia, probes
from memlab.science.unlearning import npo, registry

from test_diffusion_lm import _model as _dlm  # the tiny masked diffusion LM of those tests
from conftest import fp_tol


class _Blobs(nn.Module):
    """A classifier whose penultimate features are its inputs (N, 2): what a probe reads is known."""

    def __init__(self, k: int):
        super().__init__()
        self.head = nn.Linear(2, k)

    def features(self, x):
        return x

    def forward(self, x):
        return self.head(x)


def _blobs(n_per_class: int, k: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[4.0 * math.cos(2 * math.pi * c / k), 4.0 * math.sin(2 * math.pi * c / k)]
                            for c in range(k)])
    y = torch.arange(k).repeat_interleave(n_per_class)
    return centres[y] + 0.3 * torch.randn(len(y), 2, generator=g), y


# ----------------------------------------------------------------------------- probes


def test_balanced_subset_takes_per_class_from_every_class_and_refuses_zero():
    y = torch.tensor([0] * 10 + [1] * 3 + [2] * 7)
    idx = probes.balanced_subset(y, 4, seed=0)
    assert torch.bincount(y[idx]).tolist() == [4, 3, 4]
    assert len(set(idx.tolist())) == len(idx)
    assert torch.equal(idx, probes.balanced_subset(y, 4, seed=0))
    with pytest.raises(ValueError, match="per_class"):
        probes.balanced_subset(y, 0, seed=0)


def test_linear_probe_is_perfect_on_separable_features_and_chance_on_noise():
    x, y = _blobs(40)
    tx, ty = _blobs(20, seed=1)
    model = _Blobs(3)
    assert probes.linear_probe(model, x, y, tx, ty, per_class=10, seed=0) == 100.0
    noise = torch.randn_like(tx)
    assert probes.linear_probe(model, torch.randn_like(x), y, noise, ty, per_class=40, seed=0) < 70.0


def test_relearn_curve_has_epochs_plus_one_points_and_leaves_the_model_alone():
    torch.manual_seed(0)
    x, y = _blobs(30)
    model = _Blobs(3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    forget = y == 0
    curve = probes.relearn_curve(model, x[forget], y[forget], x[~forget], y[~forget], x[forget], y[forget],
                                 samples=10, epochs=3, lr=0.1, seed=0)
    assert curve.shape == (4,)
    assert curve[0] == pytest.approx(100.0 * float((model(x[forget]).argmax(1) == 0).float().mean()))
    assert curve[-1] == 100.0  # ten forget images relearn a separable class
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    again = probes.relearn_curve(model, x[forget], y[forget], x[~forget], y[~forget], x[forget], y[forget],
                                 samples=10, epochs=3, lr=0.1, seed=0)
    assert np.array_equal(curve, again)


def test_relearn_auc_is_zero_for_retrain_one_for_original():
    orig, retr = np.array([90.0, 95.0, 98.0]), np.array([0.0, 40.0, 70.0])
    assert probes.relearn_auc(retr, orig, retr) == 0.0
    assert probes.relearn_auc(orig, orig, retr) == 1.0
    assert probes.relearn_auc((orig + retr) / 2, orig, retr) == pytest.approx(0.5)


def test_softmax_and_entropy_confidence_closed_forms():
    logits = np.array([[0.0, 0.0], [math.log(3.0), 0.0]])
    p = probes.softmax(logits)
    assert np.allclose(p, [[0.5, 0.5], [0.75, 0.25]])
    feats = probes.entropy_confidence(p, np.array([0, 1]))
    assert np.allclose(feats[:, 0], [0.5, 0.25])
    assert feats[0, 1] == pytest.approx(math.log(2.0))
    assert feats[1, 1] == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))


# ----------------------------------------------------------------------------- causal LM helpers


def _tiny_lm(vocab: int = 40):
    from memlab.models import qwen_small as Q

    torch.manual_seed(0)
    return Q.build_small(Q.small_config(vocab, hidden=32, layers=1, heads=2, kv_heads=1))


def test_pad_batch_right_pads_and_cuts():
    ids, att, mask = lm.pad_batch([([1, 2, 3], [False, True, True]), ([4], [True])], pad_id=9)
    assert ids.tolist() == [[1, 2, 3], [4, 9, 9]]
    assert att.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert mask.tolist() == [[False, True, True], [True, False, False]]
    ids, _, _ = lm.pad_batch([([1, 2, 3], [True] * 3)], pad_id=0, max_len=2)
    assert ids.tolist() == [[1, 2]]
    with pytest.raises(ValueError, match="examples"):
        lm.pad_batch([], pad_id=0)


def test_mean_token_nll_is_minus_logprob_per_target_token_and_reference_matches_batches():
    model = _tiny_lm().eval()
    examples = [([3, 4, 5, 6, 7], [False, False, True, True, True]), ([8, 9, 10], [False, True, True])]
    ids, att, mask = lm.pad_batch(examples, pad_id=0)
    with torch.no_grad():
        total = lm.sequence_logprob(model, ids, att, mask)
        nll = lm.mean_token_nll(model, ids, att, mask)
    assert float(nll) == pytest.approx(-float(total.sum()) / 5, rel=1e-5)
    ref = lm.reference_logprobs(model, examples, pad_id=0, batch_size=1)
    # batch of one vs a padded batch: float32 sums over the width (32) of terms up to ~20 nats
    assert ref.shape == (2,) and torch.allclose(ref, total, atol=fp_tol(torch.float32, 64, 20.0), rtol=0)


def test_warmup_cosine_schedule_shape():
    f = lm.warmup_cosine(100, warmup=20)
    assert f(0) == pytest.approx(0.1 * 0.5 * (1 + math.cos(0.0)))   # warm = min(20, 100 // 10) = 10
    assert f(9) == pytest.approx(0.5 * (1 + math.cos(math.pi * 9 / 100)))
    assert f(100) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="steps"):
        lm.warmup_cosine(0, warmup=20)


def test_train_lm_lowers_the_loss_on_a_repeated_sequence():
    model = _tiny_lm()
    examples = [([1, 2, 3, 4, 5, 6, 7, 8], [True] * 8)] * 4
    losses = lm.train_lm(model, examples, steps=40, batch_size=2, lr=1e-2, pad_id=0, seed=0, desc="t")
    assert len(losses) == 40 and losses[-1] < 0.5 * losses[0]
    assert not model.training


def test_text_sequences_chunks_and_deduplicates():
    got = lm.text_sequences([1, 2, 3, 4, 1, 2, 5], 2)
    assert got.tolist() == [[1, 2], [3, 4]]


# ----------------------------------------------------------------------------- NPO / GA for LMs


def test_npo_loss_refuses_a_non_positive_beta():
    with pytest.raises(ValueError, match="beta"):
        npo.npo_loss(torch.zeros(2), torch.zeros(2), 0.0)


@pytest.mark.parametrize("method", ["NPO", "GA"])
def test_lm_unlearn_lowers_the_forget_likelihood_and_reports_each_checkpoint(method):
    model = _tiny_lm()
    forget = [([1, 2, 3, 4, 5, 6], [False, False, True, True, True, True])] * 3
    retain = [([7, 8, 9, 10, 11], [False, True, True, True, True])] * 3
    lm.train_lm(model, forget + retain, steps=30, batch_size=4, lr=1e-2, pad_id=0, seed=0, desc="memorise")
    seen = []

    def at(m, k):
        seen.append(k)
        return float(lm.reference_logprobs(m, forget[:1], 0, 1)[0])

    res = npo.lm_unlearn(model, forget, retain, method=method, checkpoints=(2, 5), lr=1e-2, beta=0.1,
                         retain_weight=1.0, batch_size=2, pad_id=0, seed=1, desc=method, on_checkpoint=at)
    assert seen == [0, 2, 5] and set(res) == {0, 2, 5}
    assert res[5] < res[0]


def test_lm_unlearn_refuses_bad_method_and_steps():
    model = _tiny_lm()
    ex = [([1, 2, 3], [False, True, True])]
    kw = dict(lr=1e-3, beta=0.1, retain_weight=0.0, batch_size=1, pad_id=0, seed=0, desc="x")
    with pytest.raises(ValueError, match="method"):
        npo.lm_unlearn(model, ex, ex, method="SCRUB", checkpoints=(1,), **kw)
    with pytest.raises(ValueError, match="unlearn_steps"):
        npo.lm_unlearn(model, ex, ex, method="NPO", checkpoints=(0, 2), **kw)


def test_lm_methods_stay_out_of_the_classifier_registry():
    # registry.get("GA") is the classifier's gradient ascent; the LM methods are called directly
    assert "NPO" not in registry.names()
    assert registry.get("GA").fn.__module__ == "memlab.science.unlearning.ga"  # the classifier's GA


# ----------------------------------------------------------------------------- PII ranking


def test_rank_candidates_refuses_alpha_outside_unit_interval():
    with pytest.raises(ValueError, match="alpha"):
        mia.rank_candidates(np.array([1.0, 2.0]), np.array([0.0, 1.0]), 1.5)
    # constant scores give no preference
    assert np.allclose(mia.rank_candidates(np.ones(3), np.ones(3), 0.5), 0.0)


def test_span_eligible_refuses_an_unknown_part():
    with pytest.raises(ValueError, match="part"):
        mia.span_eligible(10, 5, 20, 48, "both")


def test_candidate_ce_is_the_mean_masked_nll_under_the_same_masks():
    from memlab.models import diffusion_lm as dlm

    model = _dlm()
    seqs = torch.randint(0, 49, (3, 12))
    got = mia.candidate_ce(model, seqs, repeats=4, mask_share=0.35, generator=torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)
    reps = seqs.repeat_interleave(4, 0)
    masks = torch.rand(reps.shape, generator=g) < 0.35
    masks[:, 0] |= ~masks.any(1)
    want = torch.nanmean(dlm.masked_nll(model, reps, masks).view(3, -1), 1).numpy()
    # other batch compositions: float32 sums over the width, NLLs of a few nats
    assert got.shape == (3,) and np.allclose(got, want, atol=fp_tol(torch.float32, 64, 5.0), rtol=0)


def test_candidate_qskew_is_zero_against_itself_and_one_score_per_candidate():
    model = _dlm()
    seqs = torch.randint(0, 49, (2, 12))
    elig = torch.stack([mia.span_eligible(4, 3, 8, 12, "pii"), mia.span_eligible(4, 3, 8, 12, "context")])
    got = mia.candidate_qskew(model, model, seqs, elig, rho=0.35, rounds=2, h=0.1, seed=0)
    assert got.shape == (2,)
    assert np.array_equal(got, [0.0, 0.0])  # identical models: every delta is 0, qskew of s = 0 is 0
