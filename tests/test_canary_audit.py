"""Chapter 3 library: authors, templates, config errors, NPO, the from_pretrained path, a toy paper run."""
from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import torch

from memlab.core import config
from memlab.models import lm
from memlab.core.config import ConfigError
from memlab.data import authors as A
from memlab.experiments import ch03_canary_audit as E
from memlab.experiments.ch03_canary_audit import tables as E_TABLES
from memlab.science.unlearning import npo
from conftest import fp_tol

CH = "03_canary_audit"
# the claims' module (the package's own ``claims`` name is the function): its thresholds are patched below
E_CLAIMS = importlib.import_module("memlab.experiments.ch03_canary_audit.claims")


# ----------------------------------------------------------------------------- data

def test_authors_deterministic_unique_and_canary_in_bio():
    a, b = A.make_authors(60, seed=3), A.make_authors(60, seed=3)
    assert a == b and a != A.make_authors(60, seed=4)
    assert len({x.name for x in a}) == 60 and len({x.title for x in a}) == 60
    # the paper's 60 share no first name and no surname (a small model swaps shared ones)
    assert len({x.name.split()[0] for x in a}) == 60 and len({x.name.split()[-1] for x in a}) == 60
    assert len({x.name for x in A.make_authors(A.MAX_AUTHORS, seed=3)}) == A.MAX_AUTHORS  # beyond: whole names
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
    assert config.resolve(CH, "cpu").n_authors == 60  # the paper's count (Section 3)
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
        # padded batch vs one sequence: float32 sums over the width (32) of log-probs summing to ~20
        assert float(got[i]) == pytest.approx(want, abs=fp_tol(torch.float32, 64, 20.0))


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


def _ci(m, lo=None, hi=None):
    return {"mean": m, "low": m if lo is None else lo, "high": m if hi is None else hi}


def _summary(out, thk, tf=0.95, dab=(0.2, 0.1, 0.3), retain=0.8, tf_band=0.01, gap_band=0.1):
    return {"auto": {"out_acc": _ci(out), "thk_leak": _ci(thk),
                     "gap": _ci(thk - out, thk - out - gap_band, thk - out + gap_band)},
            "prefill": {"BIO": {**_ci(out), "auto_minus": _ci(*dab)}},
            "tf": {"BIO": _ci(tf + 0.03, tf + 0.03 - tf_band, tf + 0.03 + tf_band),
                   "EMPTY": _ci(tf, tf - tf_band, tf + tf_band)},
            "retain": {"acc": retain, "n": 60}}


def _metrics(**over):
    """Hand-made metrics in which every claim holds (seed1_gap aside); ``over`` replaces summaries."""
    s0 = {"K0": _summary(1.0, 1.0, retain=0.9, dab=(0.0, 0.0, 0.0)), "K10": _summary(0.95, 0.95),
          "K100": _summary(0.6, 0.85, retain=0.6)}
    s1 = {"K0": _summary(1.0, 1.0), "K100": _summary(0.9, 0.95, dab=(-0.1, -0.2, -0.05))}
    m = {
        "ksweep": {"s0": s0, "s1": s1},
        "audit": {"K": 100, "reached": True, "evidence": "test state",
                  "by_out": {"K": 100, "reached": True, "thk_frac": 0.8, "evidence": "test state by out acc"}},
        "templates": {"BIO": {"K100": _summary(0.5, 0.8)}, "META": {"K100": _summary(1.0, 0.0)},
                      "NONE": {"K100": _summary(0.7, 0.6)}},
        "ga": {"K100": _summary(0.0, 0.0)},
        "parser_flip": {"trace": {"gap": {"mean": 0.5}}, "answer": {"gap": {"mean": -0.5}}, "source": "test"},
    }
    for path, value in over.items():  # "s0/K100/tf/EMPTY" style keys
        *keys, last = path.split("/")
        node = m["ksweep"] if keys and keys[0] in ("s0", "s1") else m
        for k in keys:
            node = node[k]
        node[last] = value
    return m


def _verdicts(metrics, profile="cpu"):
    from memlab.report import paper

    return {d["key"]: d for d in paper.evaluate(E.claims(), metrics, profile)}


def test_claims_evaluate_on_hand_made_metrics():
    from memlab.report import paper

    v = {k: d["verdict"] for k, d in _verdicts(_metrics()).items()}
    for key in ("bypass", "suppressed", "gap_grows", "prefill_moves", "seed_sensitive", "teacher_forced",
                "parser_flip", "template_confined", "ga_collapse", "retain_drop"):
        assert v[key] == paper.REPRODUCED, key
    assert v["seed1_gap"] == paper.NOT_JUDGED  # gap 0.05 with interval [-0.05, 0.15]: its sign is open
    m = _metrics()
    m["ksweep"].pop("s1")
    v = {k: d["verdict"] for k, d in _verdicts(m).items()}
    assert v["seed1_gap"] == v["seed_sensitive"] == paper.NOT_RUN
    assert {d["verdict"] for d in _verdicts(_metrics(), "smoke").values()} == {paper.NOT_RUN}


def test_parser_flip_is_a_sanity_check_and_the_rest_are_claims():
    from memlab.report import paper

    kinds = {k: d["kind"] for k, d in _verdicts(_metrics()).items()}
    assert kinds.pop("parser_flip") == paper.SANITY
    assert set(kinds.values()) == {paper.CLAIM}


def test_claims_at_the_audited_k_are_not_judged_when_the_state_was_not_reached():
    from memlab.report import paper

    m = _metrics()
    m["audit"] = {"K": 100, "reached": False, "evidence": "K = 100: out acc 0.00 x K0",
                  "by_out": {"K": 100, "reached": False, "thk_frac": 0.8, "evidence": "K = 100: out acc 0.00 x K0"}}
    d = _verdicts(m)
    for key in ("bypass", "suppressed", "gap_grows"):  # read where out acc alone says the state is
        assert d[key]["verdict"] == paper.NOT_JUDGED, key
        assert "never brought out acc" in d[key]["evidence"]
    for key in ("prefill_moves", "seed_sensitive", "teacher_forced", "template_confined", "seed1_gap"):
        assert d[key]["verdict"] == paper.NOT_JUDGED, key
        assert "never reached" in d[key]["evidence"]
    assert d["ga_collapse"]["verdict"] == d["retain_drop"]["verdict"] == paper.REPRODUCED  # not at the audited K


def test_prefill_moves_checks_the_papers_sign():
    from memlab.report import paper

    # a CI that excludes 0 on the negative side: the prefill *raises* out acc, the opposite of the paper
    d = _verdicts(_metrics(**{"s0/K100": _summary(0.6, 0.85, dab=(-0.2, -0.3, -0.1))}))["prefill_moves"]
    assert d["verdict"] == paper.NOT_REPRODUCED and "K=0" in d["evidence"]
    # a CI holding or touching 0 leaves the sign open, as in seed_sensitive (issue 29)
    for dab in ((0.05, -0.05, 0.15), (0.23, 0.0, 0.47)):
        d = _verdicts(_metrics(**{"s0/K100": _summary(0.6, 0.85, dab=dab)}))["prefill_moves"]
        assert d["verdict"] == paper.NOT_JUDGED and "reaches 0" in d["evidence"], dab


@pytest.mark.parametrize("d0, d1, verdict", [
    ((0.2, 0.1, 0.3), (-0.1, -0.2, -0.05), "reproduced"),       # opposite sides, both exclude 0
    ((0.2, 0.1, 0.3), (0.1, 0.05, 0.2), "not reproduced"),      # same side, both exclude 0
    ((0.03, -0.07, 0.13), (-0.03, -0.13, 0.07), "not judged"),  # opposite point estimates inside noise
    ((0.2, 0.1, 0.3), (-0.03, -0.13, 0.0), "not judged"),       # an interval touching 0
])
def test_seed_sensitive_uses_intervals_not_point_estimates(d0, d1, verdict):
    m = _metrics(**{"s0/K100": _summary(0.6, 0.85, dab=d0), "s1/K100": _summary(0.9, 0.95, dab=d1)})
    assert _verdicts(m)["seed_sensitive"]["verdict"] == verdict


# K = 0 teacher-forced top-1 0.95 +- 0.01 (EMPTY): the claim allows a drop of TF_DROP = 0.10 to 0.85
@pytest.mark.parametrize("tf, band, verdict", [
    (0.93, 0.01, "reproduced"), (0.80, 0.01, "not reproduced"), (0.86, 0.02, "not judged"),
    (0.84, 0.02, "not judged")])
def test_teacher_forced_drop_is_judged_against_its_noise(tf, band, verdict):
    assert E.TF_DROP == pytest.approx(0.10)  # 1.00 minus the paper's minimum after NPO (EMPTY, 0.90)
    d = _verdicts(_metrics(**{"s0/K100": _summary(0.6, 0.85, tf=tf, tf_band=band)}))["teacher_forced"]
    assert d["verdict"] == verdict
    assert "largest drop" in d["evidence"] and "K=0" in d["evidence"]


def test_retain_drop_and_gap_growth_inside_noise_are_not_judged():
    m = _metrics(**{"s0/K0": _summary(1.0, 1.0, retain=0.80, dab=(0.0, 0.0, 0.0)),
                    "s0/K100": _summary(0.6, 0.85, retain=0.7833)})  # one probe of 60
    assert _verdicts(m)["retain_drop"]["verdict"] == "not judged"
    m = _metrics(**{"s0/K10": _summary(0.85, 0.95, gap_band=0.15)})  # gap 0.10 -> 0.25, band 0.18
    assert _verdicts(m)["gap_grows"]["verdict"] == "not judged"


# A mutation of each threshold flips the verdict of a case built next to it.
@pytest.mark.parametrize("name, value, case, key, before, after", [
    # K = 0 scores 0.95 (EMPTY) and 0.98 (BIO), +-0.01: drops of 0.02 and 0.15, bands +-0.011
    ("TF_DROP", 0.0, {"s0/K100": _summary(0.6, 0.85, tf=0.93, tf_band=0.005)}, "teacher_forced",
     "reproduced", "not reproduced"),
    ("TF_DROP", 0.2, {"s0/K100": _summary(0.6, 0.85, tf=0.80, tf_band=0.005)}, "teacher_forced",
     "not reproduced", "reproduced"),
])
def test_threshold_mutation_flips_its_claim(monkeypatch, name, value, case, key, before, after):
    assert _verdicts(_metrics(**case))[key]["verdict"] == before
    monkeypatch.setattr(E_CLAIMS, name, value)
    assert _verdicts(_metrics(**case))[key]["verdict"] == after


def _by_k(*states):
    """{K: summary} from (K, out, thk) triples."""
    return {k: {"auto": {"out_acc": {"mean": o}, "thk_leak": {"mean": t}}} for k, o, t in states}


def test_audit_state_picks_the_papers_state():
    assert E.audit_band(30) == pytest.approx(1.96 * math.sqrt(0.24 / 30))  # 0.175
    sweep = _by_k((0, 1.0, 1.0), (10, 0.9, 1.0), (20, 0.63, 0.9), (40, 0.3, 0.83), (80, 0.0, 0.1))
    a = E.audit_state(sweep, 30)
    assert a["K"] == 20 and a["reached"] and a["out_ratio"] == pytest.approx(0.63)
    # the old rule's pick (trace still at half its K = 0 value) would be K = 40
    a = E.audit_state(_by_k((0, 1.0, 1.0), (10, 0.9, 1.0), (40, 0.3, 0.83), (80, 0.0, 0.1)), 30)
    assert a["K"] == 40 and not a["reached"]  # 0.30 lies outside 0.6 +- 0.175
    # a trace fallen below 0.8 x K0 is never audited, even at the right out acc
    a = E.audit_state(_by_k((0, 1.0, 1.0), (10, 0.95, 0.95), (20, 0.6, 0.7)), 30)
    assert a["K"] == 10 and not a["reached"]
    # ratios, not absolute values: a K = 0 at 0.9 is the reference
    assert E.audit_state(_by_k((0, 0.9, 0.9), (5, 0.54, 0.9), (9, 0.3, 0.9)), 30)["K"] == 5
    assert not E.audit_state(_by_k((0, 0.0, 0.0), (5, 0.0, 0.0)), 30)["reached"]
    with pytest.raises(ValueError, match="K = 0"):
        E.audit_state(_by_k((5, 0.5, 0.5)), 30)


@pytest.mark.parametrize("name, value", [("AUDIT_OUT_FRAC", 0.35), ("AUDIT_THK_FRAC", 0.95)])
def test_audit_threshold_mutation_flips_the_audited_state(monkeypatch, name, value):
    sweep = _by_k((0, 1.0, 1.0), (10, 0.9, 1.0), (20, 0.6, 0.9), (40, 0.3, 0.9))
    before = E.audit_state(sweep, 30)
    assert before["K"] == 20 and before["reached"]
    # the defaults are read at call time so that the rule has one definition
    monkeypatch.setattr(E_TABLES, name, value)
    after = E.audit_state(sweep, 30)
    assert (after["K"], after["reached"]) != (20, True)


def test_regime_frame_and_cold_cost():
    sm = {0: {"auto": {"out_acc": {"mean": 0.9}, "thk_leak": {"mean": 1.0}}, "qa": {"mean": 0.8},
              "retain": {"acc": 1.0}}}
    f = E.regime_frame({"BIO, seed 0": sm}, 30)
    assert f.loc["BIO, seed 0", "authors memorised"] == 27 and f.loc["BIO, seed 0", "qa_acc"] == 0.8


def test_retain_weight_defaults_to_the_papers_npo():
    assert config.resolve(CH, "cpu").retain_weight == 0.0
    assert config.resolve(CH, "cpu").lora_steps == 1500  # the K = 0 ceiling on 60 authors (spec comment)
    cfg = config.resolve(CH, "smoke")
    assert E.side_grid(cfg, 1) == [1, 3]
    assert E.side_grid(cfg.replace(side_steps=[2, 3]), 1) == [1, 3]  # only K the main sweep has
    with pytest.raises(ConfigError, match="'side_steps'"):
        config.resolve(CH, "smoke", side_steps=[3, 2])


def test_npo_without_retain_term_never_reads_retain_and_differs_from_the_variant():
    from memlab.models import qwen_small as Q

    def tiny():
        torch.manual_seed(0)
        return Q.build_small(Q.small_config(40, hidden=32, layers=1, heads=2, kv_heads=1)).eval()

    forget = [([1, 2, 3, 4, 5, 6], [False, False, True, True, True, True])] * 3
    retain = [([7, 8, 9, 10, 11], [False, True, True, True, True])] * 3
    kw = dict(method="NPO", checkpoints=(3,), lr=1e-2, beta=0.1, batch_size=2, pad_id=0, seed=1, desc="t",
              on_checkpoint=lambda m, k: float(lm.reference_logprobs(m, retain[:1], 0, 1)[0]))
    paper_npo = npo.lm_unlearn(tiny(), forget, [], **kw)  # the default (weight 0) needs no retain set
    variant = npo.lm_unlearn(tiny(), forget, retain, retain_weight=1.0, **kw)
    assert paper_npo[0] == variant[0] and variant[3] != paper_npo[3]
    with pytest.raises(ValueError, match="'retain_weight'"):
        npo.lm_unlearn(tiny(), forget, retain, retain_weight=-1.0, **kw)
    with pytest.raises(ValueError, match="'retain'"):
        npo.lm_unlearn(tiny(), forget, [], retain_weight=1.0, **kw)


def test_real_model_section_states_the_cost_then_shows_a_published_run(tmp_path):
    import json

    from memlab.report import paper

    before = E.render_sections(tmp_path)[0]
    assert before.startswith("## On a real pretrained model") and "about 35 minutes" in before
    assert "memlab models add smollm2-135m-instruct" in before and "--book-dir book/real" in before
    rows = [{"key": "bypass", "claim": "The trace leaks after the answer is clean.", "verdict": paper.REPRODUCED},
            {"key": "ga_collapse", "claim": "GA collapses the model", "verdict": paper.OUTSIDE_REGIME}]
    (tmp_path / "real" / "results").mkdir(parents=True)
    (tmp_path / "real" / "results" / f"{E.CHAPTER}.json").write_text(json.dumps(
        {"claims": rows, "provenance": {"device": "cpu (AMD EPYC)", "wall_time_s": 1800}}))
    after = E.render_sections(tmp_path)[0]
    assert "cpu (AMD EPYC) in 30 minutes" in after and "memlab run" not in after
    assert "- \u2713 **Reproduced.** The trace leaks after the answer is clean." in after
    assert "**Outside the paper's regime.** GA collapses the model." in after
    assert "bypass" not in after and "ga_collapse" not in after
