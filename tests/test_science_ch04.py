"""Unit tests of the science chapter 4 (Q-Skew) moved out of its package: the WikiText parser and token
blocks (memlab.data.text), the ROC rows, AUC band, context regime and gain summary (memlab.science.metrics),
the PII attack (memlab.science.mia) and the tokenizer adapters, LoRA and snapshot helpers
(memlab.models.diffusion_lm)."""
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from memlab.data import text as T
from memlab.models import diffusion_lm as dlm
from memlab.science import metrics, mia

DATA = Path(os.environ.get("MEMLAB_DATA_ROOT", Path(__file__).resolve().parents[2] / "shared" / "data"))
VALID = DATA / "wikitext-2" / "valid.txt"


# --- memlab.data.text --------------------------------------------------------------------------------

def _ch03_wikitext_sentences(text, n, seed=0, min_words=8, max_words=24):
    """Chapter 3's parser as it was (lib/memlab/experiments/ch03_canary_audit.py), the reference."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("="):
            continue
        line = line.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
        line = re.sub(r" ([.,;:!?')])", r"\1", line).replace("( ", "(").replace(" 's", "'s")
        for sent in re.split(r"(?<=[.!?]) ", line):
            words = sent.split()
            if "<unk>" in sent or '"' in sent or not min_words <= len(words) <= max_words:
                continue
            if sent[0].isupper() and sent.endswith("."):
                out.append(sent)
    rng = np.random.default_rng(seed)
    rng.shuffle(out)
    return out[:n]


@pytest.mark.skipif(not VALID.exists(), reason="needs MEMLAB_DATA_ROOT with wikitext-2")
@pytest.mark.parametrize("kwargs", [{"n": 400}, {"n": 50, "seed": 3, "min_words": 5, "max_words": 12}])
def test_wikitext_sentences_reproduce_chapter_3_on_wikitext_valid(kwargs):
    text = VALID.read_text(encoding="utf-8")
    got = T.wikitext_sentences(text, **kwargs)
    assert got == _ch03_wikitext_sentences(text, **kwargs) and len(got) == kwargs["n"]


def test_wikitext_sentences_clean_and_refuse_bad_bounds():
    text = (" = Title = \n Alpha beta gamma delta epsilon zeta eta theta . Short one . "
            "The 1 @,@ 000 @-@ strong army ( mostly ) marched far away from home .\n"
            " Bad <unk> token sentence goes here and there now .\n")
    got = T.wikitext_sentences(text, 10, min_words=5)
    assert sorted(got) == ["Alpha beta gamma delta epsilon zeta eta theta.",
                           "The 1,000-strong army (mostly) marched far away from home."]
    with pytest.raises(ValueError, match="min_words"):
        T.wikitext_sentences(text, 1, min_words=9, max_words=3)
    with pytest.raises(ValueError, match="n must be"):
        T.wikitext_sentences(text, -1)


def test_wikitext_paragraphs_split_sentences_and_skip_headings():
    text = (" = H = \n\n one two three four five . six seven eight nine ten eleven . tiny .\n"
            " = = Sub = = \n only one sentence of five words here .\n")
    assert T.wikitext_paragraphs(text) == [["one two three four five .", "six seven eight nine ten eleven ."]]
    # A line's last sentence keeps its own " ." and gets the added one (how chapter 4 always cut its pairs).
    assert T.wikitext_paragraphs(text, min_sentences=1)[1] == ["only one sentence of five words here . ."]
    with pytest.raises(ValueError, match="min_sentences"):
        T.wikitext_paragraphs(text, min_sentences=0)


def test_stream_blocks_instruction_pairs_and_perturb_refuse_bad_input():
    assert T.stream_blocks(list(range(25)), 8).tolist()[2] == list(range(16, 24))
    with pytest.raises(ValueError, match="length"):
        T.stream_blocks([1, 2], 0)
    codec = dlm.Codec(lambda s: [3 + len(w) for w in s.split()], lambda ids: "", 50, 0, 1, 2)
    ids, elig, attn = T.instruction_pairs("a b c d e f . g h i j k l m n .", codec, 40)
    assert ids.shape == (1, 40) and elig.sum() == 10 and attn.sum() == int(attn[0].nonzero().max()) + 1
    assert (ids[0][~attn[0]] == codec.pad_id).all()
    with pytest.raises(ValueError, match="length"):
        T.instruction_pairs("x", codec, 1)
    with pytest.raises(ValueError, match="frac"):
        T.perturb(ids, elig, 1.5, 50, (), 0)
    assert torch.equal(T.perturb(ids, elig, 0.0, 50, (), 0), ids)
    assert torch.equal(T.perturb(ids, elig, 0.5, 50, (0,), 4), T.perturb(ids, elig, 0.5, 50, (0,), 4))


# --- memlab.science.metrics ----------------------------------------------------------------------------------

def test_roc_row_matches_roc_metrics_and_drops_unsupported_tprs():
    rng = np.random.default_rng(0)
    labels = np.r_[np.ones(600), np.zeros(600)]
    scores = rng.normal(labels, 1.0)
    ref = metrics.roc_metrics(scores, labels)
    row = metrics.roc_row(scores, labels, min_fp=5)
    assert row["AUC"] == 100 * ref["auc"] and row["TPR@1%FPR"] == 100 * ref["tpr@1%fpr"]
    few = metrics.roc_row(scores[550:650], labels[550:650], min_fp=5)  # 50 non-members: 0.5 false positives
    assert math.isnan(few["TPR@1%FPR"]) and not math.isnan(few["TPR@10%FPR"])
    assert metrics.tpr_supported(0.1, 50, 5) and not metrics.tpr_supported(0.01, 499, 5)
    with pytest.raises(ValueError, match="fpr"):
        metrics.tpr_supported(0.0, 10, 1)


def test_auc_variance_is_the_mann_whitney_null_variance_at_one_half():
    # Hanley & McNeil at AUC 0.5: Q1 = Q2 = 1/3, so the variance is (n1 + n0 + 1) / (12 n1 n0).
    for n1, n0 in ((10, 10), (50, 40), (3, 200)):
        assert metrics.auc_variance(0.5, n1, n0) == pytest.approx((n1 + n0 + 1) / (12 * n1 * n0))
    assert metrics.auc_variance(1.0, 20, 20) > 0  # clipped, finite
    with pytest.raises(ValueError, match="positive"):
        metrics.auc_variance(0.7, 0, 5)


def test_auc_diff_band_shrinks_with_runs_and_refuses_percent_out_of_range():
    one = metrics.auc_diff_band(80.0, 70.0, 50, 40, runs=1)
    assert one == pytest.approx(100 * 1.96 * math.sqrt(metrics.auc_variance(0.8, 50, 40)
                                                      + metrics.auc_variance(0.7, 50, 40)))
    assert metrics.auc_diff_band(80.0, 70.0, 50, 40, runs=4) == pytest.approx(one / 2)
    with pytest.raises(ValueError, match="in %"):
        metrics.auc_diff_band(0.8, 170.0, 50, 40)
    with pytest.raises(ValueError, match="runs"):
        metrics.auc_diff_band(80.0, 70.0, 50, 40, runs=0)


class _Uniform(nn.Module):
    """A masked LM that predicts the uniform distribution everywhere: masked NLL = ln V exactly."""

    def __init__(self, vocab: int, mask_id: int):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.vocab_size, self.mask_id = vocab, mask_id

    def forward(self, ids, attention_mask=None):
        return torch.zeros(*ids.shape, self.vocab_size) + 0 * self.w


def test_context_regime_of_a_uniform_model_gains_nothing_over_a_uniform_unigram():
    v = 16
    ids = torch.randint(0, v, (6, 12), generator=torch.Generator().manual_seed(0))
    train = torch.arange(v).repeat(10)  # every token equally often: the unigram is uniform too
    r = metrics.context_regime(_Uniform(v, mask_id=v - 1), ids, train, v, rho=0.35)
    assert r["base masked NLL"] == pytest.approx(math.log(v), abs=1e-6)
    assert r["unigram NLL"] == pytest.approx(math.log(v)) and abs(r["context gain"]) < 1e-6
    assert r["ln V"] == pytest.approx(math.log(v)) and r["blocks"] == 6
    with pytest.raises(ValueError, match=r"\(N, L\)"):
        metrics.context_regime(_Uniform(v, v - 1), ids[0], train, v, rho=0.35)


def test_gain_summary_divides_by_the_expected_masked_steps():
    g = np.array([0.0, 0.0, 0.0, 4.0])
    s = metrics.gain_summary(g, 0.5, 4)
    assert s["mean gain (nats)"] == 1.0 and s["median gain"] == 0.0 and s["tokens"] == 4
    assert s["gain per masked step"] == 0.5 and s["skewness"] > 0  # a long right tail
    with pytest.raises(ValueError, match="ratio"):
        metrics.gain_summary(g, 0.0, 4)
    with pytest.raises(ValueError, match="non-empty"):
        metrics.gain_summary(np.array([]), 0.5, 4)


# --- memlab.science.mia --------------------------------------------------------------------------------------

def _tiny(seed=0, vocab=24):
    torch.manual_seed(seed)
    return dlm.MaskedDiffusionLM(dlm.DLMConfig(vocab_size=vocab, mask_id=vocab - 1, block_size=20, n_layer=1,
                                                n_head=1, n_embd=8)).eval()


def test_reconstruct_pii_ranks_unique_candidates_deterministically():
    target, ref = _tiny(0), _tiny(1)
    record = torch.randint(3, 20, (20,), generator=torch.Generator().manual_seed(2))
    kw = dict(slots=6, eos_id=2, candidates=8, steps=3, repeats=2, ce_share=0.35, span=12, rho=0.35,
              rounds=1, h=0.1, alpha=0.1)
    got = mia.reconstruct_pii(target, ref, record, 8, generator=torch.Generator().manual_seed(5), **kw)
    again = mia.reconstruct_pii(target, ref, record, 8, generator=torch.Generator().manual_seed(5), **kw)
    assert got is not None and got["candidates"] == again["candidates"]
    c = len(got["candidates"])
    assert len(set(got["candidates"])) == c and all(2 <= len(x) <= 6 and 2 not in x for x in got["candidates"])
    for key in ("ce", "qskew_pii", "qskew_context", "combined"):
        assert got[key].shape == (c,) and np.array_equal(got[key], again[key], equal_nan=True)
    assert np.allclose(got["combined"], mia.rank_candidates(got["ce"], got["qskew_pii"], 0.1))
    with pytest.raises(ValueError, match="record"):
        mia.reconstruct_pii(target, ref, record[None], 8, generator=torch.Generator(), **kw)
    with pytest.raises(ValueError, match="slots"):
        mia.reconstruct_pii(target, ref, record, 16, generator=torch.Generator(), **kw)


def test_pii_memorisation_of_a_model_against_itself_is_equal():
    model = _tiny(0)
    ids = torch.randint(3, 20, (4, 20), generator=torch.Generator().manual_seed(0))
    pre, n = torch.tensor([5, 6, 5, 7]), torch.tensor([4, 3, 5, 2])
    rows = mia.pii_memorisation(model, model, ids, pre, n)
    assert set(rows) == {"email", "phone"}
    for r in rows.values():
        assert r["base NLL"] == r["fine-tuned NLL"] and r["base NLL"] > 0
    with pytest.raises(ValueError, match=r"\(N, L\)"):
        mia.pii_memorisation(model, model, ids, pre[:2], n)


# --- memlab.models.diffusion_lm -----------------------------------------------------------------------

def test_bpe_codec_round_trips_and_record_tokenizer_has_ids(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path / "cache"))
    codec = dlm.bpe_codec(["the cat sat on the mat . " * 40, "email : a.b@c.net"], 300, name="t")
    assert (codec.mask_id, codec.pad_id, codec.eos_id) == (0, 1, 2) and codec.vocab_size <= 300
    ids = codec.encode("the cat sat")
    assert codec.decode(ids) == "the cat sat" and codec.encode_many(["the cat sat"]) == [ids]
    assert dlm.RecordTokenizer(codec).encode("the mat").ids == codec.encode("the mat")


def test_with_lora_leaves_a_tiny_model_alone():
    m = _tiny()
    assert dlm.with_lora(m, 0) is m and dlm.with_lora(m, 4) is m


def test_train_snapshots_keep_the_states_train_dlm_reaches():
    start = _tiny(0)
    ids = torch.randint(3, 20, (8, 20), generator=torch.Generator().manual_seed(1))
    states = dlm.train_snapshots(start, ids, keep=[1, 2], epochs=2, batch_size=4, lr=1e-2, seed=3)
    assert {k.split("/")[0] for k in states} == {"1", "2"}
    ref = _tiny(0)
    dlm.train_dlm(ref, ids, epochs=2, batch_size=4, lr=1e-2, seed=3, desc="fine-tune")
    loaded = dlm.load_snapshot(start, states, 2)
    assert not loaded.training and loaded is not start
    for (name, a), b in zip(loaded.state_dict().items(), ref.state_dict().values()):
        assert torch.equal(a, b), name
    first = dlm.load_snapshot(start, states, 1).state_dict()
    assert any(not torch.equal(first[k], v) for k, v in ref.state_dict().items())  # epoch 1 is not epoch 2


def test_auto_class_reads_the_checkpoint_architecture(tmp_path):
    transformers = pytest.importorskip("transformers")
    conf = transformers.BertConfig(vocab_size=50, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                   num_attention_heads=2)
    for arch, want in (("BertForMaskedLM", "AutoModelForMaskedLM"), ("GPT2LMHeadModel", "AutoModel"),
                       ("LlamaForCausalLM", "AutoModelForCausalLM")):
        conf.architectures = [arch]
        conf.save_pretrained(tmp_path / arch)
        assert dlm.auto_class(str(tmp_path / arch)) == want
