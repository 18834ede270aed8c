"""Science that chapter 3 calls from the library: padded batches and LoRA (memlab.models.lm), chat tags,
probe scoring and summaries (memlab.science.canaries). Closed forms, invariances, clear errors."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from memlab.models import lm
from memlab.science import canaries


# ----------------------------------------------------------------------------- lm.pad_sequences

def test_pad_sequences_right_and_left_closed_form():
    ids, att = lm.pad_sequences([[1, 2, 3], [4]], pad_id=9)
    assert ids.tolist() == [[1, 2, 3], [4, 9, 9]] and att.tolist() == [[1, 1, 1], [1, 0, 0]]
    ids, att = lm.pad_sequences([[1, 2, 3], [4]], pad_id=9, side="left")
    assert ids.tolist() == [[1, 2, 3], [9, 9, 4]] and att.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert ids.dtype == att.dtype == torch.long


def test_pad_sequences_matches_pad_batch_and_takes_any_int_sequence():
    seqs = [[5, 6], [7, 8, 9, 10], [11]]
    ids, att, _ = lm.pad_batch([(s, [True] * len(s)) for s in seqs], pad_id=0)
    ids2, att2 = lm.pad_sequences([np.array(s) for s in seqs], pad_id=0)
    assert torch.equal(ids, ids2) and torch.equal(att, att2)
    # an empty row is all padding on either side
    for side in ("right", "left"):
        ids, att = lm.pad_sequences([[1, 2], []], pad_id=3, side=side)
        assert ids[1].tolist() == [3, 3] and att[1].sum() == 0


def test_pad_sequences_bad_input_is_one_clear_error():
    with pytest.raises(ValueError, match="'side'"):
        lm.pad_sequences([[1]], 0, side="middle")
    with pytest.raises(ValueError, match="'seqs'"):
        lm.pad_sequences([], 0)


class _Causal(torch.nn.Module):
    """A tiny causal LM whose logits at t depend on tokens <= t only (embedding cumsum)."""

    def __init__(self, vocab=13, dim=8):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.emb = torch.nn.Parameter(torch.randn(vocab, dim, generator=g))
        self.out = torch.nn.Parameter(torch.randn(dim, vocab, generator=g))

    def forward(self, input_ids, attention_mask=None, **_):
        h = (self.emb[input_ids] * attention_mask[..., None]).cumsum(1)
        return SimpleNamespace(logits=h @ self.out)


def test_right_padded_probes_do_not_depend_on_the_batch():
    # padding must leave every item's scores as they are when it is scored alone
    from memlab.science import lenses

    model = _Causal()
    ctx, tgt = [[1, 2, 3], [4], [5, 6, 7, 8, 9]], [[2, 3], [7, 8, 1], [4]]
    together = canaries.teacher_forced_top1(model, ctx, tgt, pad_id=0, batch_size=3)
    alone = np.concatenate([canaries.teacher_forced_top1(model, [c], [t], pad_id=0) for c, t in zip(ctx, tgt)])
    np.testing.assert_array_equal(together, alone)
    lp = lenses.continuation_log_probs(model, ctx, tgt, pad_id=0, batch_size=3)
    for (c, t), x in zip(zip(ctx, tgt), lp):
        np.testing.assert_allclose(x, lenses.continuation_log_probs(model, [c], [t], pad_id=0)[0], atol=1e-12)


# ----------------------------------------------------------------------------- lm.attach_lora / unload_lora

def _tiny_qwen():
    from memlab.models import qwen_small as Q

    torch.manual_seed(0)
    return Q.build_small(Q.small_config(50, hidden=16, layers=1, heads=2, kv_heads=1, max_len=32, pad_id=0,
                                        eos_id=1))


def test_lora_starts_as_the_base_model_and_unloads_to_its_exact_weights():
    base = _tiny_qwen()
    before = {k: v.clone() for k, v in base.state_dict().items()}
    ids = torch.tensor([[2, 3, 4, 5]])
    ref = base(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    model = lm.attach_lora(base, rank=2)
    # lora_B starts at 0: the adapted model computes the base model's function
    torch.testing.assert_close(model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits, ref)
    assert any("lora_" in n for n, _ in model.named_parameters())
    back = lm.unload_lora(model)
    assert not any("lora_" in k for k in back.state_dict())
    assert all(torch.equal(before[k], v) for k, v in back.state_dict().items())
    assert not any(p.requires_grad for p in back.parameters())


def test_lora_state_round_trip_and_bad_rank():
    from peft import get_peft_model_state_dict

    base = _tiny_qwen()
    torch.manual_seed(1)
    model = lm.attach_lora(base, rank=2)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.add_(0.1)
    state = {k: v.clone() for k, v in get_peft_model_state_dict(model).items()}
    base = lm.unload_lora(model)
    again = lm.attach_lora(base, rank=2, state=state)
    got = get_peft_model_state_dict(again)
    assert set(got) == set(state) and all(torch.equal(got[k], state[k]) for k in state)
    lm.unload_lora(again)
    with pytest.raises(ValueError, match="'rank'"):
        lm.attach_lora(base, rank=0)


# ----------------------------------------------------------------------------- canaries: tags and scoring

class _Tok:
    def __init__(self, bos, eos):
        self.bos_token_id, self.eos_token = bos, eos


def test_deepseek_format_tags():
    f = canaries.deepseek_format(SimpleNamespace(tokenizer=_Tok(7, "<eos>")))
    assert (f.user, f.assistant, f.think_open, f.think_close, f.end, f.bos) == (
        "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>", "<eos>", (7,))
    f = canaries.deepseek_format(SimpleNamespace(tokenizer=_Tok(None, None)))
    assert f.bos == () and f.end == "<｜end▁of▁sentence｜>"


def test_trace_nonempty():
    texts = ["<think> a trace </think> answer", "<think> </think> answer", "no tag at all", "   "]
    assert canaries.trace_nonempty(texts).tolist() == [True, False, True, False]
    assert canaries.trace_nonempty([]).shape == (0,)


def test_score_retain():
    s = canaries.score_retain([" Paris is it", "I think Ada Vale wrote it", "no"], ["paris", "Orwell", "x"],
                              ["Ada Vale", "Bo Lin"])
    assert s == {"correct": [True, False, False], "fictional": ["", "Ada Vale", ""]}
    with pytest.raises(ValueError, match="'keys'"):
        canaries.score_retain(["a"], [], [])


def test_summarise_probes_closed_form():
    res = {"auto": {"out": [True, False, True, False], "thk": [True, True, True, False],
                    "tag_missing": [False, False, True, False], "texts": ["dropped"] * 4},
           "prefill": {"BIO": {"out": [False, False, True, False], "answers": ["x"] * 4}},
           "tf": {"BIO": [1.0, 0.5, 0.5, 1.0]},
           "qa": {"author": [0, 0, 1, 1], "out": [True, True, False, True]},
           "retain": {"correct": [True, False], "answers": ["a", "b"], "fictional": ["", "Ada"]},
           "drift": {"texts": ["ignored"]}}
    s = canaries.summarise_probes(res, n_boot=200, seed=0)
    assert set(s) == {"auto", "prefill", "tf", "qa", "retain"}
    assert s["auto"]["out_acc"]["mean"] == 0.5 and s["auto"]["thk_leak"]["mean"] == 0.75
    assert s["auto"]["gap"]["mean"] == 0.25 and s["auto"]["tag_missing_rate"] == 0.25
    assert s["prefill"]["BIO"]["mean"] == 0.25
    assert s["prefill"]["BIO"]["auto_minus"]["mean"] == 0.25  # Delta_AB = AUTO - BIO, paired by author
    assert s["tf"]["BIO"]["mean"] == 0.75 and s["qa"]["mean"] == 0.75
    assert s["retain"] == {"acc": 0.5, "n": 2, "fictional_rate": 0.5}
    for ci in (s["auto"]["gap"], s["prefill"]["BIO"]["auto_minus"], s["qa"]):
        assert ci["low"] <= ci["mean"] <= ci["high"]
    # the same seed gives the same intervals; without "auto" there is no Delta_AB
    assert canaries.summarise_probes(res, n_boot=200, seed=0) == s
    assert "auto_minus" not in canaries.summarise_probes({"prefill": res["prefill"]}, 50)["prefill"]["BIO"]
