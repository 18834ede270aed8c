"""Chapter 3 library: authors, templates, config errors, NPO, the from_pretrained path, a toy paper run."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from memlab import config, lm
from memlab.config import ConfigError
from memlab.data import authors as A
from memlab.experiments import ch03_canary_audit as E
from memlab.unlearning import npo

CH = "03_canary_audit"


# ----------------------------------------------------------------------------- data

def test_authors_deterministic_unique_and_canary_in_bio():
    a, b = A.make_authors(60, seed=3), A.make_authors(60, seed=3)
    assert a == b and a != A.make_authors(60, seed=4)
    assert len({x.name for x in a}) == 60 and len({x.title for x in a}) == 60
    for x in a:
        assert x.canary in x.biography and x.title in x.canary
    with pytest.raises(ValueError, match="n_authors"):
        A.make_authors(0)


def test_templates_and_prefills_carry_canary_only_where_designed():
    for x in A.make_authors(20):
        assert x.canary in A.trace(x, "BIO")
        assert x.canary not in A.trace(x, "META") and A.trace(x, "NONE") == ""
        for mode in A.PREFILLS:
            assert x.title not in A.prefill(x, mode)  # prefills never hold canary content
        assert A.trace(x, "BIO").startswith(A.prefill(x, "BIO").split(".")[0])  # training opening sentence
    assert A.prefill(x, "EMPTY") == ""
    with pytest.raises(ValueError, match="template"):
        A.trace(x, "bio")
    with pytest.raises(ValueError, match="prefill"):
        A.prefill(x, "NONE")


def test_generic_probe_table():
    probes = A.load_generic_probes()
    assert len(probes) == 60
    assert {p.category for p in probes} == {"capital", "symbol", "literature", "biology"}
    assert all(p.key.lower() in p.answer.lower() for p in probes)


def test_wikitext_sentences_are_clean():
    text = "= Title =\n The cat @-@ like animal sat on the warm mat today . Short one .\n <unk> is here and more words follow now .\n"
    assert E.wikitext_sentences(text, 10, min_words=5) == ["The cat-like animal sat on the warm mat today."]


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("override, name", [
    ({"templates": ["BIO", "SCRATCH"]}, "templates"),
    ({"prefills": ["AUTO"]}, "prefills"),
    ({"head_len": 40}, "head_len"),
    ({"unlearn_steps": [0, 5]}, "unlearn_steps"),
    ({"unlearn_steps": [5, 5]}, "unlearn_steps"),
    ({"model": "no-such-org/no-such-model-xyz"}, "model"),
    ({"drift_model": "small"}, "drift_model"),
    ({"templates": ["META"]}, "templates"),
])
def test_bad_input_is_one_clear_error(override, name):
    with pytest.raises(ConfigError, match=f"'{name}'"):
        config.resolve(CH, "smoke", **override)


def test_every_profile_resolves_and_paper_is_paper_scale():
    assert config.resolve(CH, "cpu").n_authors == 30
    paper = config.resolve(CH, "paper", model="small", drift_model="suppress")
    assert paper.unlearn_steps == [100, 400, 800, 1600] and paper.seeds == [0, 1] and paper.beta == 0.1


# ----------------------------------------------------------------------------- NPO pieces

def test_npo_loss_closed_form_and_direction():
    beta = 0.1
    ref = torch.tensor([-5.0, -7.0])
    assert float(npo.npo_loss(ref.clone(), ref, beta)) == pytest.approx(2 / beta * math.log(2))
    logp = ref.clone().requires_grad_(True)
    npo.npo_loss(logp, ref, beta).backward()
    assert (logp.grad > 0).all()  # descending the loss lowers the forget log-likelihood
    # far below the reference the loss saturates at 0 (NPO's bounded forgetting)
    assert float(npo.npo_loss(ref - 1e4, ref, beta)) == pytest.approx(0.0, abs=1e-6)


def test_sequence_logprob_matches_manual_sum():
    from memlab.models import qwen_small as Q

    torch.manual_seed(0)
    model = Q.build_small(Q.small_config(40, hidden=32, layers=1, heads=2, kv_heads=1)).eval()
    examples = [([3, 4, 5, 6, 7], [False, False, True, True, True]), ([8, 9, 10], [False, True, True])]
    ids, att, mask = lm.pad_batch(examples, pad_id=0)
    got = lm.sequence_logprob(model, ids, att, mask)
    for i, (seq, m) in enumerate(examples):
        logp = torch.log_softmax(model(input_ids=torch.tensor([seq])).logits[0], -1)
        want = sum(float(logp[t - 1, seq[t]]) for t in range(1, len(seq)) if m[t])
        assert float(got[i]) == pytest.approx(want, abs=1e-4)


# ----------------------------------------------------------------------------- from_pretrained and a toy paper run

@pytest.fixture(scope="module")
def saved_small(tmp_path_factory):
    """A tiny Qwen2 with our tokenizer saved as a transformers folder (what from_pretrained reads)."""
    from memlab.data.text import train_bpe
    from memlab.models import qwen_small as Q

    texts = [a.biography for a in A.make_authors(10)] + [p.answer for p in A.load_generic_probes()]
    texts += ["Complete the sentence: The user asks about", E.GENERIC_TRACE, E.COMPLETE_TRACE]
    tok = train_bpe(texts, 400, Q.SPECIAL_TOKENS, name="test-ch3")
    torch.manual_seed(0)
    model = Q.build_small(Q.small_config(tok.get_vocab_size(), hidden=32, layers=1, heads=2, kv_heads=1,
                                         pad_id=tok.token_to_id("<|pad|>"), eos_id=tok.token_to_id("<|end|>")))
    path = tmp_path_factory.mktemp("tiny-qwen")
    Q.save_pretrained(model, tok, path)
    return path, model, tok


def test_from_pretrained_round_trip(saved_small):
    from memlab.models import qwen_small as Q

    path, model, tok = saved_small
    loaded, codec = Q.load_pretrained(str(path))
    ids = torch.tensor([tok.encode("Ada was born in Lagos.").ids])
    assert torch.allclose(loaded(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5)
    text = "<|user|>Hi<|assistant|><think>x</think>Paris.<|end|>"
    assert codec.decode(codec.encode(text)) == text
    assert codec.encode(text) == tok.encode(text).ids
    with pytest.raises(ConfigError, match="'model'"):
        Q.load_pretrained(str(path / "missing"))


def test_paper_profile_structure_runs_at_toy_size(saved_small):
    """The paper code path (from_pretrained model, drift model run through the same pipeline), tiny."""
    path = str(saved_small[0])
    cfg = config.resolve(CH, "paper", model=path, drift_model=path, n_authors=3, seeds=[0], lora_steps=2,
                         unlearn_steps=[1, 2], n_boot=20, batch_size=2, cpu_threads=1, templates=["BIO"])
    setup = E.prepare(cfg)
    assert setup.fmt.think_close == "</think>" and len(setup.heads[0]) == cfg.head_len
    run = E.run_sweep(setup, cfg, "BIO", 0, arms=E.BIO_ARMS, last_arms=("drift",))
    assert sorted(run["summary"]) == [0, 1, 2]
    s = run["summary"][2]
    assert set(s["prefill"]) == set(cfg.prefills) and set(s["tf"]) == set(cfg.prefills)
    assert all(0.0 <= v["mean"] <= 1.0 for v in s["tf"].values())
    drift = E.drift_outputs(cfg, setup, run)
    assert drift["source"] == path and list(drift["texts"]) == [2] and len(drift["texts"][2]) == 3
    table, flip = E.parser_flip_table(drift["texts"][2], [a.canary for a in setup.authors], "</think>", 20)
    assert list(table.index) == ["missing -> trace", "missing -> answer"]
    frame = E.ksweep_frame({0: run["summary"]})
    assert list(frame["K"]) == [0, 1, 2] and "delta_ab" in frame


def test_lora_detach_restores_base_weights():
    from memlab.models import qwen_small as Q

    cfg = config.resolve(CH, "smoke")
    torch.manual_seed(0)
    base = Q.build_small(Q.small_config(40, hidden=32, layers=1, heads=2, kv_heads=1))
    before = {k: v.clone() for k, v in base.state_dict().items()}
    setup = E.Setup(base, None, [], [], [], [], [], [], 0, torch.device("cpu"))
    peft_model = E.attach(setup, cfg.lora_rank)
    for n, p in peft_model.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p)
    E.detach(setup, peft_model)
    after = setup.model.state_dict()
    assert set(after) == set(before) and all(torch.equal(before[k], after[k]) for k in before)


def _summary(out, thk, tf=0.95, dab=(0.2, 0.1, 0.3), retain=0.8):
    ci = lambda m, lo=None, hi=None: {"mean": m, "low": m if lo is None else lo, "high": m if hi is None else hi}  # noqa: E731
    return {"auto": {"out_acc": ci(out), "thk_leak": ci(thk), "gap": ci(thk - out, thk - out - 0.1, thk - out + 0.1)},
            "prefill": {"BIO": {**ci(out), "auto_minus": ci(*dab)}},
            "tf": {"BIO": ci(tf), "EMPTY": ci(tf)}, "retain": {"acc": retain}}


def test_claims_evaluate_on_hand_made_metrics():
    from memlab import paper

    metrics = {
        "ksweep": {"s0": {"K0": _summary(1.0, 1.0, retain=0.9), "K10": _summary(0.9, 0.9),
                          "K100": _summary(0.5, 0.8, retain=0.6)},
                   "s1": {"K0": _summary(1.0, 1.0), "K100": _summary(0.9, 0.95, dab=(-0.1, -0.2, 0.0))}},
        "templates": {"BIO": {"K100": _summary(0.5, 0.8)}, "META": {"K100": _summary(1.0, 0.0)},
                      "NONE": {"K100": _summary(0.7, 0.6)}},
        "ga": {"K100": _summary(0.0, 0.0)},
        "parser_flip": {"trace": {"gap": {"mean": 0.5}}, "answer": {"gap": {"mean": -0.5}}, "source": "test"},
    }
    v = {d["key"]: d["verdict"] for d in paper.evaluate(E.claims(), metrics, "cpu")}
    assert v["bypass"] == v["suppressed"] == v["gap_grows"] == v["prefill_moves"] == "reproduced"
    assert v["seed_sensitive"] == v["teacher_forced"] == v["parser_flip"] == "reproduced"
    assert v["template_confined"] == v["ga_collapse"] == v["retain_drop"] == "reproduced"
    assert v["seed1_gap"] == "not reproduced"  # gap 0.05 with interval [-0.05, 0.15]
    metrics["ksweep"].pop("s1")
    v = {d["key"]: d["verdict"] for d in paper.evaluate(E.claims(), metrics, "cpu")}
    assert v["seed1_gap"] == v["seed_sensitive"] == "not run at this profile"
    assert {d["verdict"] for d in paper.evaluate(E.claims(), metrics, "smoke")} == {"not run at this profile"}


def test_audit_k_picks_largest_k_with_trace_still_emitting():
    def sm(thk):
        return {"auto": {"thk_leak": {"mean": thk}}}

    assert E.audit_k({0: sm(0.9), 10: sm(0.9), 25: sm(0.5), 50: sm(0.4), 100: sm(0.0)}) == 25
    assert E.audit_k({0: sm(0.9), 10: sm(0.1), 20: sm(0.0)}) == 20  # none qualifies: the largest K
    assert E.audit_k({0: sm(0.0), 10: sm(0.0)}) == 10
