"""Tests of chapter 5's orchestration (memlab.experiments.capacity) and its parameter checks."""
import numpy as np
import pandas as pd
import pytest

from memlab import config
from memlab.config import ConfigError
from memlab.experiments import capacity as ex

from conftest import require_data

TINY = dict(vocab_size=6, seq_len=4, model_sizes=["1x4", "1x8"], dataset_sizes=[2, 8], max_steps=20, eval_every=5,
            patience=2, batch_size=8, precision_dataset_sizes=[8], a1_model="1x4", a1_n_samples=4,
            a1_seq_lens=[3, 4], a1_vocab_sizes=[3, 6], a1_fixed_seq_len=3)


def test_profiles_resolve():
    for profile in config.PROFILES:
        cfg = config.resolve("05_capacity", profile)
        assert cfg.prefix_len < cfg.text_seq_len
    assert config.resolve("05_capacity", "paper").vocab_size == 2048
    assert config.resolve("05_capacity", "paper").seq_len == 64


@pytest.mark.parametrize("override, name", [
    (dict(vocab_size=1), "vocab_size"),
    (dict(seq_len=1), "seq_len"),
    (dict(dataset_sizes=[16, 0]), "dataset_sizes"),
    (dict(precision="fp16"), "precision"),
    (dict(model_sizes=["1x8", "big"]), "model_sizes"),
    (dict(model_sizes=["48x1600"]), "model_sizes"),  # does not fit the cpu profile's memory
    (dict(reference_model="64x4096"), "reference_model"),
    (dict(prefix_len=64), "prefix_len"),
    (dict(convergence_model="9x9"), "convergence_model"),
    (dict(colour="red"), "colour"),
])
def test_bad_parameters_fail_before_any_work(override, name):
    with pytest.raises(ConfigError, match=name):
        config.resolve("05_capacity", "cpu", **override)


def test_paper_profile_runs_the_same_code_path_at_toy_size():
    # paper structure (bf16 main sweep, fp32 comparison) with tiny sizes
    cfg = config.resolve("05_capacity", "paper", **TINY)
    assert cfg.precision == "bf16"
    sweep = ex.capacity_sweep(cfg)
    assert set(sweep["precision"]) == {"bf16"} and len(sweep) == 4
    assert (sweep["mem_bits"] >= 0).all()
    assert (sweep["mem_bits"] <= sweep["data_bits"] + 1e-6).all()        # cannot memorise more than H(X)
    assert (sweep["mem_bits"] >= sweep["mem_bits_unclipped"] - 1e-9).all()  # clipping only adds back
    assert sweep["membership_f1"].between(0, 1).all()
    caps = ex.capacities(sweep)
    assert list(caps.index) == ["1x4", "1x8"]
    np.testing.assert_allclose(caps["bits_per_param"], caps["capacity_bits"] / caps["params"])
    fp32 = ex.capacity_sweep(cfg, precision="fp32", dataset_sizes=cfg.precision_dataset_sizes)
    assert set(fp32["precision"]) == {"fp32"}
    a1 = ex.a1_sweep(cfg, alpha=3.6)
    assert len(a1) == 4
    np.testing.assert_allclose(a1["predicted_bits"], np.minimum(3.6 * a1["params"], a1["data_bits"]))


def test_runs_are_cached_and_training_memorises():
    cfg = config.resolve("05_capacity", "smoke", **TINY)
    first = ex.synthetic_run(cfg, "1x8", 2)
    again = ex.synthetic_run(cfg, "1x8", 2)
    assert first["mem_bits"] == again["mem_bits"] and first["history"] == again["history"]
    assert first["history"]["value"][-1] > first["history"]["value"][0]  # training memorised bits
    assert first["tokens_seen"] == first["steps"] * 2 * 4
    with pytest.raises(ConfigError, match="precision"):
        ex.synthetic_run(cfg, "1x8", 2, precision="int8")
    with pytest.raises(ConfigError, match="dataset_sizes"):
        ex.synthetic_run(cfg, "1x8", 0)


def test_table2_law_matches_the_paper_within_0_01():
    t2 = ex.table2_law()
    assert len(t2) == 6
    err = (t2["law F1 at paper |D| (ours)"] - t2["predicted F1 (paper)"]).abs()
    assert err.max() <= 0.01


def test_law_fit_and_throughput_on_a_frame():
    pts = pd.DataFrame({"n_samples": [1, 2, 4, 8, 16, 32], "params": [10] * 6,
                        "membership_f1": [0.99, 0.97, 0.9, 0.7, 0.55, 0.5]})
    fit = ex.law_fit(pts)
    assert fit["rmse"] < 0.05 and fit["c3"] < 0
    assert "error" in ex.law_fit(pts.iloc[:2])
    bench = ex.benchmark_throughput(pd.DataFrame({"params": [100], "tokens_seen": [1000], "wall_s": [2.0]}))
    assert bench["achieved_flops_per_s"] == pytest.approx(6 * 100 * 1000 / 2.0)


def test_double_descent_onset_per_model():
    text = pd.DataFrame({"model": ["a"] * 4 + ["b"] * 3, "data_to_capacity": [0.1, 0.5, 1.0, 2.0, 0.1, 0.2, 0.4],
                         "test_loss": [5.0, 4.0, 4.5, 3.0, 5.0, 4.0, 3.0]})
    assert ex.double_descent_onsets(text) == {"a": 0.5, "b": None}


def test_text_pipeline_on_wikitext():
    require_data("wikitext-2")
    cfg = config.resolve("05_capacity", "smoke", text_dataset_sizes=[4, 8], text_test_size=4, text_max_steps=4,
                         eval_every=2)
    corpus = ex.text_corpus(cfg)
    pool, test = corpus["pool"], corpus["test"]
    assert pool.shape[1] == cfg.text_seq_len and len(test) == 4
    rows = {tuple(r) for r in pool.tolist()} | {tuple(r) for r in test.tolist()}
    assert len(rows) == len(pool) + len(test)  # de-duplicated, test disjoint from training
    ref = ex.reference_code_lengths(cfg, corpus)
    row = ex.text_run(cfg, corpus, ref, "1x8", 8, alpha=3.6)
    assert row["unintended_bits"] >= 0 and 0 <= row["extract_train"] <= 1
    assert row["data_to_capacity"] == pytest.approx(ref["pool"][:8].sum() / (3.6 * row["params"]))
    tf = ex.tfidf_vs_memorization(corpus, pd.Series(row))
    assert len(tf) == 8
