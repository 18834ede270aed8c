"""Tests of memlab.science.capacity, memlab.data.synthetic and memlab.models.gpt2_small (chapter 5)."""
import math

import numpy as np
import pytest
import torch
from torch import nn

from memlab.science import capacity as cap
from memlab.report import paper
from memlab.core.config import ConfigError
from memlab.data.synthetic import uniform_tokens
from memlab.models.lm import text_sequences
from memlab.models import gpt2_small as g2
from memlab.models import gpt2_stacked as st


# ----------------------------------------------------------------------------- code lengths

@pytest.mark.parametrize("S, V", [(64, 2048), (5, 2), (16, 32)])
def test_uniform_model_codes_exactly_S_log2_V(S, V):
    ids = torch.randint(0, V, (S,))
    uniform = torch.full((S, V), -math.log(V), dtype=torch.float64)
    assert cap.code_length_bits(uniform, ids) == pytest.approx(S * math.log2(V), abs=1e-9)
    # without BOS: S - 1 rows, first token coded uniformly -- the same total
    assert cap.code_length_bits(uniform[1:], ids) == pytest.approx(S * math.log2(V), abs=1e-9)
    assert cap.uniform_entropy_bits(S, V) == pytest.approx(S * math.log2(V))


def test_code_length_of_known_probabilities():
    # p(true token) = 1/2, 1/4, 1 -> 1 + 2 + 0 bits
    probs = torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25], [0.0, 0.0, 1.0, 0.0]], dtype=torch.float64)
    ids = torch.tensor([1, 3, 2])
    assert cap.code_length_bits(torch.log(probs), ids) == pytest.approx(3.0, abs=1e-12)


def test_code_length_rejects_bad_shapes():
    with pytest.raises(ValueError, match="log_probs"):
        cap.code_length_bits(torch.zeros(2, 4), torch.tensor([0, 1, 2, 3]))
    with pytest.raises(ValueError, match="token_ids"):
        cap.code_length_bits(torch.zeros(2, 4), torch.tensor([0, 7]))


def test_model_code_lengths_match_reference_per_sequence():
    V, S = 11, 6
    model = g2.build("1x8", V, S, seed=3).double()  # float64: batched vs one at a time, not rounding
    x = uniform_tokens(5, S, V, seed=1)
    fast = cap.sequence_code_lengths(model, x, V, batch_size=2)
    for i in range(len(x)):
        logp = g2.token_log_probs(model, x[i:i + 1], V)[0].detach()
        assert fast[i] == pytest.approx(cap.code_length_bits(logp, x[i]), rel=1e-12)


def test_zero_embedding_gpt2_is_the_uniform_code():
    # zero (tied) embeddings make every logit 0; renormalised over the V data
    # tokens (not BOS) the code is exactly S log2 V
    V, S = 13, 9
    model = g2.build("1x8", V, S)
    with torch.no_grad():
        model.transformer.wte.weight.zero_()
    bits = cap.sequence_code_lengths(model, uniform_tokens(4, S, V), V)
    np.testing.assert_allclose(bits, S * math.log2(V), rtol=1e-6)


# ----------------------------------------------------------------------------- memorisation, capacity

def test_memorization_clips_each_sample_at_zero():
    ref, model = np.array([10.0, 10.0, 10.0]), np.array([4.0, 12.0, 10.0])
    np.testing.assert_allclose(cap.memorization_bits(ref, model), [6.0, 0.0, 0.0])
    np.testing.assert_allclose(cap.memorization_bits(ref, model, clip=False), [6.0, -2.0, 0.0])
    np.testing.assert_allclose(cap.memorization_bits(10.0, model), [6.0, 0.0, 0.0])
    np.testing.assert_allclose(cap.unintended_memorization([5.0, 3.0], [4.0, 9.0]), [1.0, 0.0])


def test_capacity_is_the_max_and_alpha_recovers_a_line():
    assert cap.capacity_bits([3.0, 9.0, 7.0]) == 9.0
    p = np.array([1e3, 4e3, 9e3, 2e4])
    fit = cap.fit_alpha(p, 3.6 * p)
    assert fit["alpha"] == pytest.approx(3.6) and fit["r2"] == pytest.approx(1.0)
    noisy = cap.fit_alpha(p, 3.6 * p + np.array([50.0, -50.0, 50.0, -50.0]))
    assert 3.5 < noisy["alpha"] < 3.7 and noisy["r2"] < 1.0
    with pytest.raises(ValueError):
        cap.capacity_bits([])


def test_expected_memorization_is_min_of_capacity_and_entropy():
    assert cap.expected_memorization(100.0, 40.0) == 40.0
    assert cap.expected_memorization(100.0, 400.0) == 100.0


def test_plateau_rule():
    assert not g2.plateaued([0, 10, 20], patience=2, tol=0.01)     # too short
    assert not g2.plateaued([0, 10, 20, 30], patience=2, tol=0.01)  # still gaining
    assert g2.plateaued([0, 100, 100.5, 100.4], patience=2, tol=0.01)
    assert g2.plateaued([0, 100, 90, 95], patience=2, tol=0.0)     # got worse


# ----------------------------------------------------------------------------- membership

def test_membership_f1_extremes_and_chance():
    assert cap.membership_f1([0.1, 0.2, 0.3], [1.0, 2.0, 3.0]) == 1.0
    assert cap.membership_f1([1.0, 2.0, 3.0], [0.1, 0.2, 0.3]) == 0.0
    assert cap.membership_f1(np.ones(10), np.ones(10)) == pytest.approx(0.5)
    rng = np.random.default_rng(0)
    assert cap.membership_f1(rng.normal(size=4000), rng.normal(size=4000)) == pytest.approx(0.5, abs=0.03)
    # two members below the threshold among 3 calls: precision = recall = 2/3
    assert cap.membership_f1([0.0, 1.0, 5.0], [2.0, 3.0, 4.0]) == pytest.approx(2 / 3)


# The law's constants as printed (Section 5.2.1), from the chapter's paper numbers.
LAW = {c: paper.number("05_capacity", f"law_{c}") for c in ("c1", "c2", "c3")}

TABLE2 = [  # (params, |D|, predicted F1) from the paper's Table 2
    (1_556_075_200, 170_654_583, 0.55), (1_556_075_200, 76_795_021, 0.75), (1_556_075_200, 18_851_574, 0.95),
    (123_702_528, 13_566_442, 0.55), (123_702_528, 6_104_935, 0.75), (123_702_528, 1_498_634, 0.95),
]


@pytest.mark.parametrize("params, n, f1", TABLE2)
def test_membership_law_reproduces_table2(params, n, f1):
    assert cap.membership_f1_law(params, n, 64, 50257, **LAW) == pytest.approx(f1, abs=0.01)
    # and the inverse lands within 3% of the paper's |D|
    assert cap.law_dataset_size(params, f1, **LAW) == pytest.approx(n, rel=0.03)


def test_membership_law_limits_and_inverse():
    assert cap.membership_f1_law(1e6, 1e12, 64, 2048, **LAW) == pytest.approx(0.5)
    assert cap.membership_f1_law(1e6, 1.0, 64, 2048, **LAW) == pytest.approx(0.5 * (1 + 1.34 * (1 / (1 + math.exp(-33.14 * 0.034)))), rel=1e-4)
    d = cap.law_dataset_size(5e6, 0.8, **LAW)
    assert cap.membership_f1_law(5e6, d, 64, 2048, **LAW) == pytest.approx(0.8, abs=1e-9)
    for bad in (dict(n_params=0), dict(n_samples=0), dict(seq_len=1), dict(vocab_size=1)):
        args = dict(n_params=1e6, n_samples=1e5, seq_len=64, vocab_size=2048) | bad
        with pytest.raises(ValueError, match=list(bad)[0]):
            cap.membership_f1_law(**args, **LAW)
    with pytest.raises(ValueError, match="f1"):
        cap.law_dataset_size(1e6, 0.4, **LAW)


def test_law_fit_recovers_constants():
    c1, c2, c3 = 1.2, -0.5, -6.0
    x = np.linspace(0.05, 2.0, 25)
    y = 0.5 * (1 + c1 / (1 + np.exp(-c3 * (x + c2))))
    fit = cap.fit_membership_law(x, y)
    assert fit["rmse"] < 1e-4
    assert (fit["c1"], fit["c2"], fit["c3"]) == pytest.approx((c1, c2, c3), rel=1e-2)


# ----------------------------------------------------------------------------- text diagnostics

def test_tfidf_closed_form():
    docs = [[0, 0], [0, 1]]  # tf(0) = 3, tf(1) = 1, |D| = 2
    got = cap.tfidf(docs)
    np.testing.assert_allclose(got, [math.log(2 / 3), (math.log(2 / 3) + math.log(2)) / 2])
    assert got[1] > got[0]  # the rarer token raises the score


class _CountingLM(nn.Module):
    """Predicts next token = previous + 1 (mod V); BOS is V. Stands in for a trained LM."""

    def __init__(self, V):
        super().__init__()
        self.V = V
        self.dummy = nn.Parameter(torch.zeros(1))

    def forward(self, input_ids):
        nxt = (input_ids + 1) % self.V
        logits = torch.full((*input_ids.shape, self.V + 1), -1e4)
        logits.scatter_(2, nxt[..., None], 0.0)

        class Out:
            pass
        out = Out()
        out.logits = logits
        return out


def test_greedy_extraction_rate_counts_exact_suffixes():
    V, S = 10, 8
    model = _CountingLM(V)
    counting = torch.stack([(torch.arange(S) + s) % V for s in range(4)])
    broken = counting.clone()
    broken[:2, -1] = (broken[:2, -1] + 3) % V
    assert cap.greedy_extraction_rate(model, counting, V, prefix_len=3) == 1.0
    assert cap.greedy_extraction_rate(model, broken, V, prefix_len=3) == 0.5
    with pytest.raises(ValueError, match="prefix_len"):
        cap.greedy_extraction_rate(model, counting, V, prefix_len=S)


def test_first_increase():
    assert cap.first_increase([1, 2, 3, 4], [5, 4, 6, 3]) == 2.0
    assert cap.first_increase([1, 2, 3], [3, 2, 1]) is None
    # with standard errors a rise must clear z * sqrt(se_i^2 + se_{i-1}^2): 2 > 1.96 * sqrt(2) * 0.7 = 1.94
    assert cap.first_increase([1, 2, 3, 4], [5, 4, 6, 3], se=[0.7] * 4) == 2.0
    assert cap.first_increase([1, 2, 3, 4], [5, 4, 6, 3], se=[0.75] * 4) is None
    with pytest.raises(ValueError, match="se"):
        cap.first_increase([1, 2], [1, 2], se=[0.1])


def test_text_sequences_chunks_and_deduplicates():
    ids = [1, 2, 3, 4, 1, 2, 5, 6, 3, 4, 9]  # chunks (1,2)(3,4)(1,2)(5,6)(3,4), tail dropped
    got = text_sequences(ids, 2)
    assert got.tolist() == [[1, 2], [3, 4], [5, 6]]
    with pytest.raises(ValueError, match="seq_len"):
        text_sequences([1, 2], 5)


# ----------------------------------------------------------------------------- data and models

def test_uniform_tokens_range_nesting_and_errors():
    x = uniform_tokens(50, 7, 5, seed=2)
    assert x.shape == (50, 7) and x.dtype == torch.int64 and x.min() >= 0 and x.max() < 5
    assert torch.equal(uniform_tokens(20, 7, 5, seed=2), x[:20])
    assert not torch.equal(uniform_tokens(20, 7, 5, seed=3), x[:20])
    for bad, name in ((dict(vocab_size=1), "vocab_size"), (dict(seq_len=1), "seq_len"), (dict(n_samples=0), "n_samples")):
        args = dict(n_samples=4, seq_len=4, vocab_size=4) | bad
        with pytest.raises(ConfigError, match=name):
            uniform_tokens(**args)


@pytest.mark.parametrize("size, V, S", [("1x8", 32, 16), ("2x12", 7, 5), ("3x16", 100, 64)])
def test_closed_form_param_count_matches_transformers(size, V, S):
    model = g2.build(size, V, S)
    s = g2.parse_size(size)
    assert g2.n_params(model) == g2.count_params(s.n_layer, s.n_embd, V + 1, S)


def test_param_count_matches_table2_models():
    # the paper's Table 2 counts GPT-2 with 64 positions (its sequence length)
    assert g2.count_params(48, 1600, 50257, 64) == 1_556_075_200
    assert g2.count_params(12, 768, 50257, 64) == 123_702_528


def test_heads_are_at_most_64_wide_and_divide_the_width():
    assert g2.Size(48, 1600).n_head == 25 and g2.Size(12, 768).n_head == 12
    for d in (4, 16, 96, 100, 130, 512):
        h = g2.Size(1, d).n_head
        assert d % h == 0 and d // h <= 64


def test_bad_model_and_precision_are_clear_errors():
    with pytest.raises(ConfigError, match="model_sizes"):
        g2.parse_size("tiny")
    with pytest.raises(ConfigError, match="precision"):
        g2.build("1x8", 8, 8, precision="fp16")


def test_bf16_build_and_training_lowers_code_length():
    V, S = 8, 6
    x = uniform_tokens(4, S, V, seed=0)
    for precision in g2.PRECISIONS:
        model = g2.build("1x8", V, S, precision=precision, seed=0)
        assert next(model.parameters()).dtype == g2.DTYPES[precision]
        before = cap.sequence_code_lengths(model, x, V).sum()
        hist = g2.train_until_plateau(model, x, V, evaluate=lambda: 0.0, max_steps=60, batch_size=4, lr=1e-2,
                                      eval_every=1000, patience=2, tol=0.01)
        assert hist["tokens"] == 60 * 4 * S
        assert cap.sequence_code_lengths(model, x, V).sum() < before - 10  # memorised > 10 bits


# ----------------------------------------------------------------------------- stacked training

def _models(size, V, S, n, dtype=torch.float32):
    return [g2.build(size, V, S, seed=i).to(dtype) for i in range(n)]


@pytest.mark.parametrize("size", ["1x8", "2x16"])
def test_stacked_forward_equals_each_hf_model(size):
    V, S = 11, 7
    models = _models(size, V, S, 3, torch.float64)  # float64: the test is about the stacking, not rounding
    x = torch.stack([uniform_tokens(5, S, V, seed=g) for g in range(3)])
    got = st.token_log_probs(st.stack(models), x, V, g2.parse_size(size).n_head)
    for g, m in enumerate(models):
        torch.testing.assert_close(got[g], g2.token_log_probs(m, x[g], V), atol=1e-12, rtol=0)
    bits = st.code_lengths(st.stack(models), 1, x[1], V, g2.parse_size(size).n_head)
    np.testing.assert_allclose(bits, cap.sequence_code_lengths(models[1], x[1], V), rtol=1e-12)


@pytest.mark.parametrize("dtype, steps, lr, tol", [(torch.float32, 5, 1e-3, 1e-5), (torch.float64, 20, 1e-2, 1e-7)])
def test_stacked_training_equals_training_one_model_at_a_time(dtype, steps, lr, tol):
    # three same-shape models, each with its own data set (sizes 5, 12, 30: some below the batch), its own
    # batch order and Adam state, trained as one stack and one at a time through the HF forward
    V, S, size = 8, 6, "2x8"
    data = [uniform_tokens(n, S, V, seed=i) for i, n in enumerate([5, 12, 30])]
    stacked, alone = _models(size, V, S, 3, dtype), _models(size, V, S, 3, dtype)
    hist = st.train_stacked(stacked, data, V, n_head=1, steps=steps, batch_size=8, lr=lr, warmup=2,
                            seeds=[0, 1, 2], evaluate_at=[0, steps], evaluate=lambda p: [0.0] * 3)
    for g in range(3):
        st.train_one(alone[g], data[g], V, steps=steps, batch_size=8, lr=lr, warmup=2, seed=g)
    for a, b in zip(stacked, alone):
        for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
            assert (pa - pb).abs().max().item() <= tol, name
        assert any((pa - pi).abs().max() > 1e-4 for pa, pi in zip(a.parameters(), _models(size, V, S, 1, dtype)[0]
                                                                  .parameters()))  # and they did train
    assert hist["step"] == [0, steps] and hist["tokens"] == steps * 8 * S


def test_per_model_clipping_is_each_models_own_norm():
    a = torch.zeros(2, 3, requires_grad=True)
    b = torch.zeros(2, 4, requires_grad=True)
    a.grad = torch.tensor([[3.0, 0, 0], [0.1, 0, 0]])
    b.grad = torch.tensor([[4.0, 0, 0, 0], [0, 0, 0, 0]])
    st._clip_per_model([a, b], 1.0)
    # model 0: norm 5 -> scaled by 1/5; model 1: norm 0.1 < 1 -> unchanged
    torch.testing.assert_close(a.grad, torch.tensor([[0.6, 0, 0], [0.1, 0, 0]]), atol=1e-6, rtol=0)
    torch.testing.assert_close(b.grad[0], torch.tensor([0.8, 0, 0, 0]), atol=1e-6, rtol=0)


def test_batch_stream_covers_every_sequence_each_epoch():
    s = st.BatchStream(5, 3, seed=0)
    seen = torch.cat([s.next() for _ in range(5)])  # 15 indices = 3 epochs
    assert sorted(seen.tolist()) == sorted(list(range(5)) * 3)
    assert len(st.BatchStream(2, 7, seed=0).next()) == 7  # a batch larger than N holds repeats
    with pytest.raises(ValueError, match="batch_size"):
        st.BatchStream(0, 3, seed=0)


def test_cosine_schedule_warms_up_and_ends_at_zero():
    f = st.cosine_lambda(100, 10)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0) and f(10) == pytest.approx(1.0)
    assert f(55) == pytest.approx(0.5) and f(100) == pytest.approx(0.0, abs=1e-12)
    assert st.checkpoints(100, 4) == [0, 25, 50, 75, 100]
    with pytest.raises(ValueError, match="steps"):
        st.cosine_lambda(0, 1)


def test_stacking_refuses_models_of_different_shapes():
    with pytest.raises(ValueError, match="same-shape"):
        st.stack([g2.build("1x8", 8, 6), g2.build("1x12", 8, 6)])
    with pytest.raises(ValueError, match="datasets"):
        st.train_stacked(_models("1x8", 8, 6, 2), [uniform_tokens(4, 6, 8)], 8, n_head=1, steps=1, batch_size=2,
                         lr=1e-3, warmup=0, seeds=[0, 1])
