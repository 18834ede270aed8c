"""Tests of the chapter-4 orchestration: parameter checks, data builders, ranking, and the
paper-profile code path (transformers backbone + LoRA) at toy size."""
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from memlab import config, mia
from memlab.config import ConfigError
from memlab.data import pii as pii_data
from memlab.experiments import ch04_qskew as qs

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
    assert np.argmax(mia.rank_candidates(ce, sk, 0.0)) == 1  # lowest cross-entropy
    assert np.argmax(mia.rank_candidates(ce, sk, 1.0)) == 2  # highest skewness
    z = lambda x: (x - x.mean()) / x.std()  # noqa: E731
    assert np.allclose(mia.rank_candidates(ce, sk, 0.1), -0.9 * z(ce) + 0.1 * z(sk))


def test_span_parts_are_disjoint():
    pii = mia.span_eligible(10, 5, 20, 48, "pii")
    ctx = mia.span_eligible(10, 5, 20, 48, "context")
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
    table = qs.table1(dft)
    assert list(table.index) == ["Loss", "Min-K%", "Min-K%++", "Calibration", "SecMI", "SAMA", "Q-Skew"]
    assert table.notna().all().all() and ((table >= 0) & (table <= 100)).all().all()
    assert len(dft.ablation) == 1 and len(dft.ref_para) == 1
    assert list(qs.table5(dft).index)[0] == "Q-Skew" and list(qs.figure2_table(dft).columns) == [1]
    ift = qs.instruction_experiment(setup)
    assert set(ift.main[0]) == set(cfg.scores)
    t4 = qs.table4(dft, ift, cfg.scores)
    assert set(t4) == {"base", "instruct"}
    assert list(t4["base"].index) == ["Golden reference", "Other-variant reference",
                                      "Para-modification reference", "SAMA (w/ Ref)"]
    assert t4["base"].loc["Golden reference"].equals(table.loc["Q-Skew"].rename("Golden reference"))
    pii = qs.pii_experiment(setup)
    assert pii["n"] == 1 and set(pii["hits"]["CE"]) == {"email", "phone"}


# --- paper claims (memlab.experiments.ch04_qskew.claims) on hand-made metrics -----------------------

def _auc(**rows):
    return {name: {"AUC": auc, "TPR@10%FPR": 0.0, "TPR@1%FPR": 0.0} for name, auc in rows.items()}


def _paper_like():
    """Metrics shaped like run.metrics on which every claim holds."""
    return {
        "domain": _auc(**{"Loss": 60.0, "Calibration": 65.0, "SAMA": 68.0, "Q-Skew": 80.0}),
        "instruction": _auc(**{"Loss": 55.0, "Calibration": 70.0, "Q-Skew": 82.0}),
        "delta_stats": {"members": {"Q-Skew (pooled)": 0.4}, "non-members": {"Q-Skew (pooled)": -0.2}},
        # run.metrics keys the asymmetry table by float ratio, deliberately out of order here
        "asymmetry": {0.5: {"mean gain (nats)": 0.2, "gain per masked step": 0.1},
                      0.25: {"mean gain (nats)": 0.3, "gain per masked step": 0.3},
                      0.75: {"mean gain (nats)": 0.1, "gain per masked step": 0.03}},
        "table4_base": _auc(**{"Golden reference": 80.0, "Other-variant reference": 76.0,
                               "Para-modification reference": 78.0, "SAMA (w/ Ref)": 70.0}),
        "table4_instruct": _auc(**{"Golden reference": 82.0, "Other-variant reference": 79.0,
                                   "Para-modification reference": 81.0, "SAMA (w/ Ref)": 75.0}),
        "ablation": _auc(**{"Q-Skew": 80.0, "w/o cyclic sampling": 77.0, "mean instead of skewness": 70.0,
                            "w/o quantile weighting": 78.0}),
        "pii": {"hits": {"CE": {"email": 3, "phone": 2}, "Q-Skew (PII mask)": {"email": 1, "phone": 0},
                         "Q-Skew (context mask)": {"email": 0, "phone": 0}, "Combine-0.1": {"email": 4, "phone": 2}},
                "targets_per_kind": 5},
    }


CLAIM_KEYS = ["dft-best", "ift-best", "gain10", "member-skew", "asymmetry", "per-step", "mismatch", "ablation",
              "pii-combine", "pii-skew-alone"]


def _verdicts(m, profile="cpu"):
    from memlab import paper
    return {d["key"]: d["verdict"] for d in paper.evaluate(qs.claims(), m, profile)}


def _evidence(m):
    from memlab import paper
    return {d["key"]: d["evidence"] for d in paper.evaluate(qs.claims(), m, "cpu")}


def test_claims_all_reproduced_on_paper_like_metrics():
    assert _verdicts(_paper_like()) == {k: "reproduced" for k in CLAIM_KEYS}
    ev = _evidence(_paper_like())
    assert ev["dft-best"] == "Q-Skew AUC 80.0 vs best baseline SAMA 68.0"
    assert ev["gain10"] == "Q-Skew minus best baseline AUC: +12.0, +12.0"
    assert ev["asymmetry"] == "mean gain by ratio 0.25: 0.300, 0.5: 0.200, 0.75: 0.100"
    assert ev["mismatch"] == ("base: golden 80.0, worst mismatched 76.0, SAMA 70.0; "
                              "instruct: golden 82.0, worst mismatched 79.0, SAMA 75.0")
    assert ev["pii-combine"] == "top-1 hits CE phone 2/5, email 3/5; Combine-0.1 phone 2/5, email 4/5"
    assert ev["pii-skew-alone"] == "Q-Skew (PII mask) 1 hits vs CE 5"


def _set(path, value):
    def edit(m):
        d = m
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
    return edit


# One change per claim that breaks exactly that claim (and, where they share numbers, its neighbours).
BREAKS = {
    "dft-best": (_set(("domain", "Calibration", "AUC"), 85.0), {"dft-best", "gain10"}),
    "ift-best": (_set(("instruction", "Loss", "AUC"), 82.0), {"ift-best", "gain10"}),  # a tie is not a win
    "gain10": (_set(("domain", "SAMA", "AUC"), 75.0), {"gain10"}),  # still best, gains +5 and +12: mean 8.5
    "member-skew": (_set(("delta_stats", "non-members", "Q-Skew (pooled)"), 0.5), {"member-skew"}),
    # above the non-members but left-skewed (the published cpu run: -0.098 vs -0.270)
    "member-skew-negative": (_set(("delta_stats", "members", "Q-Skew (pooled)"), -0.01), {"member-skew"}),
    "asymmetry": (_set(("asymmetry", 0.75, "mean gain (nats)"), 0.25), {"asymmetry"}),
    "per-step": (_set(("asymmetry", 0.5, "gain per masked step"), 0.3), {"per-step"}),
    "mismatch-drop": (_set(("table4_instruct", "Other-variant reference", "AUC"), 75.5), {"mismatch"}),
    "mismatch-sama": (_set(("table4_base", "SAMA (w/ Ref)", "AUC"), 77.0), {"mismatch"}),
    "ablation": (_set(("ablation", "mean instead of skewness", "AUC"), 80.5), {"ablation"}),
    "pii-combine-kind": (_set(("pii", "hits", "Combine-0.1", "phone"), 1), {"pii-combine"}),
    "pii-combine-total": (_set(("pii", "hits", "Combine-0.1", "email"), 3), {"pii-combine"}),
    "pii-skew-alone": (_set(("pii", "hits", "Q-Skew (PII mask)", "email"), 5), {"pii-skew-alone"}),
}


@pytest.mark.parametrize("case", list(BREAKS))
def test_each_claim_fails_on_contrary_metrics(case):
    edit, broken = BREAKS[case]
    m = _paper_like()
    edit(m)
    assert _verdicts(m) == {k: "not reproduced" if k in broken else "reproduced" for k in CLAIM_KEYS}


def test_claims_read_ratio_keys_back_from_json():
    import json
    m = _paper_like()
    back = json.loads(json.dumps(m))  # the results file: float ratio keys become strings
    assert set(back["asymmetry"]) == {"0.25", "0.5", "0.75"}
    assert _evidence(back) == _evidence(m) and _verdicts(back) == _verdicts(m)


def test_claims_not_judged_at_smoke_or_without_metrics():
    from memlab import paper
    assert _verdicts(_paper_like(), "smoke") == {k: paper.NOT_RUN for k in CLAIM_KEYS}
    assert _verdicts(_paper_like(), "paper") == {k: "reproduced" for k in CLAIM_KEYS}
    m = _paper_like()
    del m["pii"], m["ablation"]  # e.g. a run with a reduced score list
    v = _verdicts(m)
    assert {k for k, x in v.items() if x == paper.NOT_RUN} == {"pii-combine", "pii-skew-alone", "ablation"}
    assert all(v[k] == "reproduced" for k in CLAIM_KEYS if k not in ("pii-combine", "pii-skew-alone", "ablation"))


def test_best_baseline_skips_qskew():
    m = {"domain": _auc(**{"Loss": 60.0, "Q-Skew": 99.0, "SecMI": 61.0})}
    assert qs.best_baseline(m, "domain") == ("SecMI", 61.0)


def test_claims_a_run_cannot_decide_are_not_judged():
    """One fixed mask ratio has no trend, and Q-Skew alone has no baseline to beat: not run, with the reason."""
    from memlab import paper

    m = _paper_like()
    m["asymmetry"] = {0.5: m["asymmetry"][0.5]}
    m["domain"] = _auc(**{"Q-Skew": 80.0})
    got = {d["key"]: d for d in paper.evaluate(qs.claims(), m, "cpu")}
    for key in ("asymmetry", "per-step", "dft-best", "gain10"):
        assert got[key]["verdict"] == paper.NOT_RUN, key
    assert got["asymmetry"]["evidence"] == "one fixed mask ratio (0.5); a trend needs at least two"
    assert got["dft-best"]["evidence"] == "domain: no baseline score was run to compare with"
    assert got["ift-best"]["verdict"] == "reproduced"
