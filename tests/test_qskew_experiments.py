"""Tests of the chapter-4 orchestration: parameter checks, data builders, ranking, and the
paper-profile code path (transformers backbone + LoRA) at toy size."""
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from memlab import config
from memlab.config import ConfigError
from memlab.data import pii as pii_data
from memlab.experiments import qskew as qs

DATA = Path(os.environ.get("MEMLAB_DATA_ROOT", Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.mark.parametrize("override,match", [
    ({"rho": 1.0}, "rho"), ({"rho": 0.0}, "rho"), ({"h": 0.0}, "'h'"), ({"scores": ["loss", "zlib"]}, "scores"),
    ({"epochs_sweep": [1, 9]}, "epochs_sweep"), ({"runs": 0}, "runs"), ({"qskew_rounds": 3}, "qskew_rounds"),
])
def test_bad_parameters_fail_before_work(override, match):
    with pytest.raises(ConfigError, match=match):
        config.resolve("04_qskew", "smoke", **override)


def test_paper_profile_model_paths_follow_the_family():
    llada = config.resolve("04_qskew", "paper")
    assert qs.model_paths(llada) == ("GSAI-ML/LLaDA-8B-Base", "GSAI-ML/LLaDA-8B-Instruct")
    dream = config.resolve("04_qskew", "paper", backbone="dream")
    assert qs.model_paths(dream)[0].startswith("Dream-org/") and "Instruct" in qs.model_paths(dream)[1]
    assert qs.model_paths(config.resolve("04_qskew", "paper", base_model="/x", instruct_model="/y")) == ("/x", "/y")


def _codec():
    vocab = {f"w{i}": i + 3 for i in range(40)}
    enc = lambda s: [vocab.setdefault(w, len(vocab) + 3) for w in s.split()]  # noqa: E731
    return qs.Codec(enc, lambda ids: " ".join(map(str, ids)), 200, 0, 1, 2)


def test_instruction_pairs_mask_only_responses():
    text = ("alpha beta gamma delta epsilon . zeta eta theta iota kappa lambda . mu nu xi omicron pi rho .\n"
            "= Heading =\n" "one two three four five six . seven eight nine ten eleven twelve thirteen .")
    ids, elig, attn = qs.instruction_pairs(text, _codec(), 32)
    assert ids.shape[0] == 3 and ids.shape == elig.shape == attn.shape
    for row, e, a in zip(ids, elig, attn):
        first = int(e.nonzero()[0])
        assert not e[:first].any() and a[:first].all()  # the prompt: visible, never masked
        assert (row[~a] == 1).all() and not e[~a].any()  # padding: hidden, never masked
    assert len(set(attn.sum(1).tolist())) > 1  # variable length


def test_stream_blocks_and_perturb():
    blocks = qs.stream_blocks(list(range(103)), 10)
    assert blocks.shape == (10, 10) and blocks[3, 0] == 30
    elig = torch.zeros(10, 10, dtype=torch.bool)
    elig[:, 5:] = True
    out = qs.perturb(blocks, elig, 0.5, 200, (0,), seed=0)
    assert torch.equal(out[:, :5], blocks[:, :5])
    changed = (out != blocks).float().mean().item()
    assert 0.1 < changed < 0.4 and not (out[out != blocks] == 0).any()


def test_rank_candidates_limits():
    ce = np.array([2.0, 1.0, 3.0])
    sk = np.array([0.1, -0.5, 0.9])
    assert np.argmax(qs.rank_candidates(ce, sk, 0.0)) == 1  # lowest cross-entropy
    assert np.argmax(qs.rank_candidates(ce, sk, 1.0)) == 2  # highest skewness
    z = lambda x: (x - x.mean()) / x.std()  # noqa: E731
    assert np.allclose(qs.rank_candidates(ce, sk, 0.1), -0.9 * z(ce) + 0.1 * z(sk))


def test_span_parts_are_disjoint():
    pii = qs._span_eligible(10, 5, 20, 48, "pii")
    ctx = qs._span_eligible(10, 5, 20, 48, "context")
    assert pii.sum() == 5 and not (pii & ctx).any()
    assert ctx[2:10].all() and not ctx[:2].any() and ctx.sum() == 20 - 5


def test_pii_records_distinct_and_encoded_exactly():
    recs = pii_data.make_pii_records(5, seed=1)
    assert len({r.pii for r in recs}) == 10 and {r.kind for r in recs} == {"email", "phone"}
    assert all(r.text.endswith(r.pii) for r in recs)
    with pytest.raises(ValueError, match="n_per_kind"):
        pii_data.make_pii_records(0)


@pytest.mark.skipif(not (DATA / "wikitext-2" / "valid.txt").exists(), reason="needs MEMLAB_DATA_ROOT with wikitext-2")
def test_paper_profile_path_on_tiny_local_checkpoint(tmp_path, monkeypatch):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    monkeypatch.setenv("MEMLAB_DATA_ROOT", str(DATA))
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MEMLAB_PROGRESS", "0")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(["the cat sat on the mat . " * 50, "1234567890 @ . - email phone"],
                            trainers.BpeTrainer(vocab_size=300, special_tokens=["<mask>", "<pad>", "<eos>"],
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    hf_tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, mask_token="<mask>", pad_token="<pad>",
                                                  eos_token="<eos>")
    bert = transformers.BertConfig(vocab_size=len(hf_tok), hidden_size=16, intermediate_size=32,
                                   num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=128)
    torch.manual_seed(0)
    for name in ("base", "instruct"):
        transformers.BertForMaskedLM(bert).save_pretrained(tmp_path / name)
        hf_tok.save_pretrained(tmp_path / name)
    cfg = config.resolve(
        "04_qskew", "paper", backbone="llada", base_model=str(tmp_path / "base"),
        instruct_model=str(tmp_path / "instruct"), mask_id=hf_tok.mask_token_id, trust_remote_code=False,
        lora_rank=2, runs=1, epochs=1, epochs_sweep=[1], n_members=6, n_nonmembers=6, block_len=16, ift_len=32,
        pii_len=100, pii_targets=1, pii_candidates=2, pii_steps=2, pii_repeats=1, rounds=1, sama_steps=2,
        eval_batch=32, fixed_ratios=[0.5], fixed_ratio_epochs=1, lr=1e-3)
    setup = qs.prepare(cfg)
    assert setup.base.mask_id == hf_tok.mask_token_id and not setup.base.shift_logits
    dft = qs.domain_experiment(setup)
    table = qs.mean_table(dft["main"])
    assert list(table.index) == ["Loss", "Min-K%", "Min-K%++", "Calibration", "SecMI", "SAMA", "Q-Skew"]
    assert table.notna().all().all() and ((table >= 0) & (table <= 100)).all().all()
    assert len(dft["ablation"]) == 1 and len(dft["ref_para"]) == 1
    ift = qs.instruction_experiment(setup)
    assert set(ift["main"][0]) == set(cfg.scores)
    pii = qs.pii_experiment(setup)
    assert pii["n"] == 1 and set(pii["hits"]["CE"]) == {"email", "phone"}
