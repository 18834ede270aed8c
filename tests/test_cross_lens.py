"""Chapter 6's lenses (memlab.science.lenses) on hand-made inputs, its hypotheses file and its predicates."""
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from memlab.core.config import ConfigError, resolve
from memlab.experiments import ch06_cross_lens as ch
from memlab.report import paper
from memlab.science import lenses


class BigramLM(nn.Module):
    """A causal LM whose next-token distribution is row ``ids[t]`` of a fixed transition matrix."""

    def __init__(self, probs: np.ndarray):
        super().__init__()
        self.logp = nn.Parameter(torch.log(torch.as_tensor(probs, dtype=torch.float64)), requires_grad=False)

    def forward(self, input_ids, attention_mask=None):
        return SimpleNamespace(logits=self.logp[input_ids])


V = 4
UNIFORM = np.full((V, V), 1.0 / V)
# From every token, the next is token (i + 1) % V with probability 1/2, the rest share 1/2.
SHARP = np.full((V, V), 1.0 / 6)
for _i in range(V):
    SHARP[_i, (_i + 1) % V] = 0.5


def _closed_form_bits(probs, context, target):
    seq = list(context) + list(target)
    return -sum(math.log2(probs[seq[j - 1], seq[j]]) for j in range(len(context), len(seq)))


def test_continuation_bits_equal_the_closed_form_under_two_hand_built_models():
    contexts = [[0], [2, 3, 1], [1, 1]]
    targets = [[1, 2, 3], [2], [2, 3, 0, 0]]  # ragged: the batch is right-padded
    for probs in (UNIFORM, SHARP):
        lp = lenses.continuation_log_probs(BigramLM(probs), contexts, targets, pad_id=0, batch_size=2)
        assert [a.shape for a in lp] == [(3, V), (1, V), (4, V)]
        bits = lenses.continuation_bits(lp, targets)
        want = [_closed_form_bits(probs, c, t) for c, t in zip(contexts, targets)]
        np.testing.assert_allclose(bits, want, rtol=0, atol=1e-9)
    # uniform: 2 bits a token; the sharp model pays 1 bit on each "next" token, log2 6 on the others
    ref = lenses.continuation_bits(lenses.continuation_log_probs(BigramLM(UNIFORM), contexts, targets, 0), targets)
    mod = lenses.continuation_bits(lenses.continuation_log_probs(BigramLM(SHARP), contexts, targets, 0), targets)
    np.testing.assert_allclose(ref, [6.0, 2.0, 8.0])
    np.testing.assert_allclose(mod, [3.0, 1.0, 3 * 1.0 + math.log2(6)])
    np.testing.assert_allclose(lenses.canary_bits(ref, mod), ref - mod)


def test_canary_bits_use_the_joint_code_and_check_shapes():
    np.testing.assert_allclose(lenses.canary_bits([5.0, 2.0], [3.0, 4.0]), [2.0, 0.0])
    with pytest.raises(ValueError, match="model_bits"):
        lenses.canary_bits([1.0, 2.0], [1.0])


def test_bad_contexts_and_targets_raise_one_clear_error():
    m = BigramLM(UNIFORM)
    with pytest.raises(ValueError, match="targets"):
        lenses.continuation_log_probs(m, [[0]], [[1], [2]], 0)
    with pytest.raises(ValueError, match="at least one token"):
        lenses.continuation_log_probs(m, [[]], [[1]], 0)
    with pytest.raises(ValueError, match="batch_size"):
        lenses.continuation_log_probs(m, [[0]], [[1]], 0, batch_size=0)


def test_membership_scores_match_hand_computed_values():
    lp_model = [np.log(np.array([[0.5, 0.5], [0.9, 0.1]]))]
    lp_ref = [np.log(np.array([[0.5, 0.5], [0.5, 0.5]]))]
    target = [[0, 0]]
    s = lenses.membership_scores(lp_model, target, lp_ref, k=0.5)
    nll = np.array([math.log(2), -math.log(0.9)])
    assert s["Loss"][0] == pytest.approx(-nll.mean())
    assert s["Min-K%"][0] == pytest.approx(-math.log(2))  # the least likely half: one token
    assert s["Reference"][0] == pytest.approx(math.log(2) - nll.mean())
    assert set(s) == set(lenses.SCORES)
    assert "Reference" not in lenses.membership_scores(lp_model, target)


def test_kendall_tau_of_identical_and_reversed_rankings():
    x = np.arange(8.0)
    same = lenses.kendall_ci(x, 3 * x + 1, n_boot=300)
    assert same["tau"] == pytest.approx(1.0) and same["low"] == pytest.approx(1.0) and same["high"] == 1.0
    rev = lenses.kendall_ci(x, -x, n_boot=300)
    assert rev["tau"] == pytest.approx(-1.0) and rev["high"] == pytest.approx(-1.0)
    d = lenses.kendall_diff_ci(x, x, -x, n_boot=300)
    assert d["diff"] == pytest.approx(2.0) and d["low"] == pytest.approx(2.0)
    assert math.isnan(lenses.kendall_tau(x, np.ones(8)))
    noisy = lenses.kendall_ci(x, x + np.array([0, 3, -2, 1, 0, -3, 2, 0.5]), n_boot=500)
    assert noisy["low"] <= noisy["tau"] <= noisy["high"] and noisy["n"] == 8
    with pytest.raises(ValueError, match="at least 3"):
        lenses.kendall_ci([1, 2], [2, 1])
    with pytest.raises(ValueError, match="finite"):
        lenses.kendall_ci([1, 2, np.nan], [2, 1, 0])


def test_tau_b_rows_equals_scipy_row_by_row_with_ties_and_constants():
    # The bootstrap intervals the book published were computed with scipy one resample at a time.
    for seed in range(60):
        g = np.random.default_rng(seed)
        n = int(g.integers(3, 25))
        x = g.integers(0, 4, n).astype(float) if seed % 2 else g.normal(size=n)
        y = x.copy() if seed % 5 == 0 else (-x if seed % 7 == 0 else g.integers(0, 3, n).astype(float))
        idx = g.integers(0, n, size=(40, n))
        want = [lenses._tau_or_zero(x[i], y[i]) for i in idx]  # scipy.stats.kendalltau, NaN counted 0
        np.testing.assert_array_equal(lenses.tau_b_rows(x[idx], y[idx]), want)


def test_kendall_ci_equals_the_per_resample_bootstrap():
    from memlab.science import metrics

    g = np.random.default_rng(3)
    x, y, z = g.normal(size=15), g.normal(size=15), g.integers(0, 3, 15).astype(float)
    loop = metrics.bootstrap_ci(np.stack([x, y], 1), stat=lambda s: lenses._tau_or_zero(s[:, 0], s[:, 1]),
                                n_boot=400, seed=2)
    got = lenses.kendall_ci(x, y, n_boot=400, seed=2)
    assert (got["low"], got["high"]) == loop
    tau = lenses._tau_or_zero
    diff = metrics.bootstrap_ci(np.stack([x, y, z], 1), n_boot=400, seed=2,
                                stat=lambda s: tau(s[:, 0], s[:, 1]) - tau(s[:, 0], s[:, 2]))
    got = lenses.kendall_diff_ci(x, y, z, n_boot=400, seed=2)
    assert (got["low"], got["high"]) == diff


def test_tau_matrix_is_symmetric_with_unit_diagonal_and_drops_unmeasured_items():
    f = pd.DataFrame({"a": [1, 2, 3, 4, 5.0], "b": [5, 4, 3, 2, 1.0], "c": [1, 2, np.nan, 4, 5.0],
                      "k": [1, 1, 1, 1, 1.0]})
    t = lenses.tau_matrix(f, n_boot=200)
    tau = t["tau"]
    assert np.allclose(np.diag(tau), 1.0)
    assert tau.loc["a", "b"] == pytest.approx(-1.0) == tau.loc["b", "a"]
    assert tau.loc["a", "c"] == pytest.approx(1.0)  # the NaN item left that pair only
    assert math.isnan(tau.loc["a", "k"]) and math.isnan(t["low"].loc["a", "k"])


# ----------------------------------------------------------------------------- the hypotheses


def test_hypotheses_file_is_well_formed_and_every_hypothesis_has_a_claim():
    data = paper.load(ch.CHAPTER)
    hyp = data["hypotheses"]
    assert len(hyp) >= 4
    for key, h in hyp.items():
        for field in ("question", "text", "predicted", "direction", "rule"):
            assert isinstance(h.get(field), (str, int)) and str(h[field]).strip(), (key, field)
        assert h["question"] in (1, 2, 3, 4) and h["predicted"] in ("holds", "does not hold"), key
    assert {h["question"] for h in hyp.values()} == {1, 2, 3, 4}
    claims = ch.claims()
    assert [c.key for c in claims] == list(hyp)
    assert all(c.text == hyp[c.key]["text"] and set(c.profiles) == {"cpu", "paper"} for c in claims)
    assert [c.key for c in claims if c.sanity] == [k for k, h in hyp.items() if h.get("sanity")]


def _vision(otr_orig=10.0, otr_retr=90.0, before=20.0, after=10.0, asr=(0.8, 0.3)):
    row = lambda o1, o2, a1, a2: {"OTR before": o1, "OTR after": o2, "ASR before": a1, "ASR after": a2}  # noqa: E731
    bn = {"Original": row(otr_orig, otr_orig, 0.1, 0.1), "Retrain": row(otr_retr, otr_retr, 0.9, 0.9),
          "BadTeacher": row(before, after, *asr), "SalUn": row(before, after, *asr)}
    return {"vision": {"bn": bn, "gn": {"Original": row(30, 30, 0.2, 0.2)}}, "sde_sizes": {"targets": 50},
            "n_forget": 1000, "illusion_set": ["BadTeacher", "SalUn"]}


def _verdict(key, metrics):
    (v,) = [v for v in paper.evaluate(ch.claims(), metrics, "cpu") if v["key"] == key]
    return v


def test_the_sde_control_is_a_precondition_and_margins_inside_noise_are_not_judged():
    assert _verdict("sde_control", _vision())["verdict"] == paper.REPRODUCED
    assert _verdict("sde_sees_through", _vision())["verdict"] == paper.REPRODUCED
    assert _verdict("recal_moves_sde", _vision())["verdict"] == paper.REPRODUCED
    assert _verdict("recal_moves_asr", _vision())["verdict"] == paper.REPRODUCED
    assert _verdict("gn_unmoved", _vision())["kind"] == paper.SANITY
    failed = _vision(otr_orig=60.0, otr_retr=70.0)
    assert _verdict("sde_control", failed)["verdict"] == paper.NOT_REPRODUCED
    assert "precondition" in _verdict("sde_sees_through", failed)["evidence"]
    assert _verdict("recal_moves_sde", failed)["verdict"] == paper.NOT_JUDGED
    # a change of 1 pp over 100 targets sits inside the binomial band
    assert _verdict("recal_moves_sde", _vision(before=21.0, after=20.0))["verdict"] == paper.NOT_JUDGED
    assert _verdict("sde_sees_through", _vision(before=80.0))["verdict"] == paper.NOT_REPRODUCED
    empty = {**_vision(), "illusion_set": []}
    assert "empty illusion set" in _verdict("sde_sees_through", empty)["evidence"]


def _lm(npo_share=0.8, npo_out=0.2, ga_share=0.05, auc_ref=0.9):
    b0 = [10.0] * 30
    run = lambda share, out, auc: {"bits": [share * b for b in b0], "bits_total": share * sum(b0),  # noqa: E731
                                   "out_acc": out, "auc": {"Loss": auc, "Min-K%": auc, "Min-K%++": auc,
                                                           "Reference": auc}}
    k0 = run(1.0, 1.0, 0.95)
    return {"lm_runs": {"NPO": {"0": k0, "50": run(npo_share, npo_out, auc_ref)},
                        "GA": {"0": k0, "50": run(ga_share, 0.0, 0.5)}},
            "lm_audit_method": "NPO", "audit_k": 50, "n_boot": 200}


def test_bits_hypotheses_flip_with_their_thresholds():
    assert _verdict("k0_bits", _lm())["verdict"] == paper.REPRODUCED
    assert _verdict("npo_keeps_bits", _lm())["verdict"] == paper.REPRODUCED
    assert _verdict("npo_keeps_bits", _lm(npo_share=0.3))["verdict"] == paper.NOT_REPRODUCED
    assert _verdict("npo_keeps_bits", _lm(npo_share=0.8, npo_out=0.9))["verdict"] == paper.NOT_REPRODUCED
    assert _verdict("ga_removes_bits", _lm())["verdict"] == paper.REPRODUCED
    assert _verdict("ga_removes_bits", _lm(ga_share=0.6))["verdict"] == paper.NOT_REPRODUCED
    assert _verdict("mia_k0", _lm())["verdict"] == paper.REPRODUCED
    assert _verdict("mia_npo_persists", _lm())["verdict"] == paper.REPRODUCED
    assert _verdict("mia_npo_persists", _lm(auc_ref=0.6))["verdict"] == paper.NOT_REPRODUCED
    unmemorised = _lm()
    unmemorised["lm_runs"]["NPO"]["0"] = {**unmemorised["lm_runs"]["NPO"]["0"], "bits": [0.0] * 30}
    assert _verdict("npo_keeps_bits", unmemorised)["verdict"] == paper.NOT_JUDGED


def test_tau_hypotheses_read_the_interval():
    tests = {"vision_postf_reauc": {"tau": 0.6, "low": 0.2, "high": 0.9, "n": 10},
             "vision_sde_agrees": {"tau": 0.2, "low": -0.3, "high": 0.6, "n": 10},
             "vision_pref_worse": {"diff": 0.5, "low": 0.1, "high": 0.7, "n": 10},
             "lm_bits_tf": {"diff": 0.1, "low": -0.4, "high": 0.5, "n": 9}}
    m = {"tau_tests": tests}
    assert _verdict("vision_postf_reauc", m)["verdict"] == paper.REPRODUCED
    assert _verdict("vision_sde_agrees", m)["verdict"] == paper.NOT_REPRODUCED
    assert _verdict("vision_pref_worse", m)["verdict"] == paper.REPRODUCED
    assert _verdict("lm_bits_tf", m)["verdict"] == paper.NOT_JUDGED
    assert _verdict("lm_bits_tf", {})["verdict"] == paper.NOT_RUN


# ----------------------------------------------------------------------------- parameters and data


def test_an_sde_subset_larger_than_the_forget_class_is_refused():
    with pytest.raises(ConfigError, match="parameter 'sde_size'"):
        resolve(ch.CHAPTER, "smoke", sde_size=4000)
    with pytest.raises(ConfigError, match="parameter 'vision'"):
        resolve(ch.CHAPTER, "smoke", vision=False, language=False)


def test_fresh_authors_share_no_name_or_title_with_the_memorised_ones():
    from memlab.data import authors as A

    cfg3 = resolve("03_canary_audit", "cpu")
    fresh = ch.fresh_authors(cfg3, 30)
    trained = A.make_authors(cfg3.n_authors, cfg3.seed)
    assert len(fresh) == 30
    assert not {a.name for a in fresh} & {a.name for a in trained}
    assert not {a.title for a in fresh} & {a.title for a in trained}


def test_sde_subsets_are_shared_and_fit_their_pools():
    cfg = resolve(ch.CHAPTER, "smoke")
    s1, s2 = ch.sde_subsets(cfg, 60, 20, 20), ch.sde_subsets(cfg, 60, 20, 20)
    assert all(np.array_equal(s1[k], s2[k]) for k in s1)
    assert s1["targets"].shape == (cfg.n_targets, cfg.sde_size)
    with pytest.raises(ValueError, match="sde_size"):
        ch.sde_subsets(cfg, 60, 3, 20)


def test_preflight_checks_what_chapters_1_and_3_read():
    from conftest import require_data

    from memlab.run import preflight

    require_data("cifar10-jpeg")
    require_data("wikitext-2")
    lines = preflight.check(ch.CHAPTER, resolve(ch.CHAPTER, "smoke"), profile="smoke")
    assert any("cifar10" in ln for ln in lines) and any("WikiText-2" in ln for ln in lines)


def _gated(key, metrics):
    (v,) = [v for v in paper.evaluate(ch.claims(), metrics, "cpu", regimes=paper.regimes(ch.CHAPTER))
            if v["key"] == key]
    return v


@pytest.mark.parametrize("pre_f, pre_r, inside", [(88.7, 89.6, True), (88.6, 95.0, False), (95.0, 89.5, False)])
def test_a_vision_hypothesis_on_models_outside_chapter_1s_regime_says_so(pre_f, pre_r, inside):
    m = _vision()
    m["vision"]["bn"]["Original"]["Pre-F"], m["vision"]["bn"]["Retrain"]["Pre-R"] = pre_f, pre_r
    v = _gated("sde_control", m)
    assert (v["verdict"] == paper.REPRODUCED) if inside else (v["verdict"] == paper.OUTSIDE_REGIME)
    assert inside or "forget-class accuracy" in v["evidence"] or "retain images" in v["evidence"]
    m["vision"]["bn"]["Original"]["Pre-F"] = 50.0
    assert _gated("gn_unmoved", m)["verdict"] != paper.OUTSIDE_REGIME  # a sanity check is never gated


@pytest.mark.parametrize("out, thk, inside", [(0.9, 0.9, True), (0.89, 1.0, False), (1.0, 0.89, False)])
def test_a_language_hypothesis_on_an_unmemorised_adapter_says_so(out, thk, inside):
    m = _lm()
    m["lm_runs"]["NPO"]["0"].update(out_acc=out, thk_leak=thk)
    v = _gated("k0_bits", m)
    assert (v["verdict"] == paper.REPRODUCED) if inside else (v["verdict"] == paper.OUTSIDE_REGIME)


def test_the_hypotheses_are_unchanged_since_their_preregistration_commit():
    pre = ch.preregistration()
    if pre["commit"] is None:
        pytest.skip("no git history here")
    assert pre["unchanged"], f"data/papers/{ch.CHAPTER}.yaml 'hypotheses' changed after {pre['commit']}"


def test_published_gaps_compare_with_the_other_chapters_pages(tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("MEMLAB_OUTPUT_DIR", str(tmp_path))
    (tmp_path / "results").mkdir()
    sweep = {"K0": {"auto": {"out_acc": {"mean": 1.0}, "thk_leak": {"mean": 1.0}}},
             "K10": {"auto": {"out_acc": {"mean": 0.5}, "thk_leak": {"mean": 0.9}}}}
    (tmp_path / "results" / "03_canary_audit.json").write_text(
        json.dumps({"profile": "cpu", "metrics": {"ksweep": {"s0": sweep}}}))
    runs = {"NPO": {0: {"out_acc": 1.0, "thk_leak": 1.0}, 10: {"out_acc": 0.4, "thk_leak": 0.9}}}
    table = pd.DataFrame({"norm": ["bn"], "method": ["GA"], "Pre-F": [1.0], "Post-F": [2.0]}).set_index(
        ["norm", "method"])
    gaps = ch.published_gaps("cpu", table, runs, 0)
    assert gaps["03_canary_audit"] == pytest.approx(0.1)
    assert "not published" in gaps["01_bn_illusion"]
    assert "not published" in ch.published_gaps("smoke", None, runs, 0)["03_canary_audit"]
    staging = tmp_path / ".staging-06_cross_lens.tmp-1-ab"  # memlab run executes in a staging folder
    staging.mkdir()
    monkeypatch.setenv("MEMLAB_OUTPUT_DIR", str(staging))
    assert ch.published_gaps("cpu", None, runs, 0)["03_canary_audit"] == pytest.approx(0.1)


def test_a_constant_lens_leaves_its_tau_hypothesis_not_judged():
    m = {"tau_tests": {"vision_sde_agrees": {"tau": float("nan"), "low": 0.0, "high": 0.0, "n": 10},
                       "lm_bits_tf": lenses.kendall_diff_ci(np.arange(6.0), np.ones(6), np.arange(6.0), n_boot=50)}}
    assert _verdict("vision_sde_agrees", m)["verdict"] == paper.NOT_JUDGED
    assert "ranks nothing" in _verdict("lm_bits_tf", m)["evidence"]


# ----------------------------------------------------------------------------- tables


def test_tables_shape_what_the_page_records_and_shows():
    runs = {"NPO": {0: {"out_acc": 1.0}, 10: {"out_acc": 0.5}}}
    lm = {"runs": runs, "audit_method": "NPO", "audit_k": 10, "k_values": [0, 10], "ref_bits_total": 12.0,
          "wall_s": 1.0}
    rec = ch.lm_metrics(lm)
    assert list(rec["lm_runs"]["NPO"]) == ["0", "10"] and rec["lm_ref_bits"] == 12.0
    assert set(rec) <= set(ch.METRIC_KEYS)
    cols = {c: [1.0, 2.0] for c in ch.VISION_SHOWN if not c.startswith("SDE") and c != "BN mode"}
    table = pd.DataFrame({"norm": ["bn", "bn"], "method": ["GA", "SSD"], "BN mode": ["train", "eval"],
                          **cols, "OTR before": [40.0, 60.0], "OTR after": [50.0, 51.0]}).set_index(["norm", "method"])
    shown = ch.vision_tables(table)
    assert list(shown) == ["BatchNorm"] and list(shown["BatchNorm"].columns) == ch.VISION_SHOWN
    assert shown["BatchNorm"]["SDE before"].tolist() == ["in training", "out"]
    assert shown["BatchNorm"]["SDE after"].tolist() == ["in training", "out"]
    assert ch.gaps_text({}) == "no chapter was looked at"
    assert ch.gaps_text({"01_bn_illusion": 0.5}) == "chapter 1: 0.5 pp of forget accuracy"
    hyp = ch.hypotheses_table()  # readers see numbers and short titles, never the keys
    assert list(hyp.index) == list(range(1, len(ch.hypotheses()) + 1))
    assert list(hyp["short title"]) == [ch.short_titles()[k] for k in ch.hypotheses()]
    summary = ch.question_summary(paper.evaluate(ch.claims(), {"tau_tests": {}}, "cpu"))
    assert summary.count("- **Question") == 4 and "was not run here" in summary
    assert not any(f"`{k}`" in summary for k in ch.hypotheses()) and "*NPO keeps the bits*" in summary
    tau = ch.tau_tests_table({"tests": {"lm_bits_tf": {"diff": 0.1, "low": -0.1, "high": 0.3, "n": 5,
                                                        "tau_xy": 0.2, "tau_xz": 0.1}}})
    assert list(tau.index) == ["bits rank like teacher forcing"] and "tau(x, y)" in tau.columns
