"""Tests of chapter 5's orchestration (memlab.experiments.ch05_capacity) and its parameter checks."""
import numpy as np
import pandas as pd
import pytest

from memlab import config, paper
from memlab.config import ConfigError
from memlab.experiments import ch05_capacity as ex

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


# ----------------------------------------------------------------------------- claims


def _good_metrics():
    """Small hand-made metrics on which every claim of chapter 5 is reproduced."""
    def uni(model, n, mem, data, f1):
        return {"model": model, "precision": "bf16", "n_samples": n, "mem_bits": mem, "data_bits": data,
                "membership_f1": f1}

    def txt(model, n, f1, ext_train, ext_test):
        return {"model": model, "n_samples": n, "membership_f1": f1, "extract_train": ext_train,
                "extract_test": ext_test}

    return {
        "alpha_r2": 0.99, "alpha": 3.5, "alpha_precision": "bf16",
        # memorisation flat (x1.05) over the two largest N and at most 0.25 of H(X); F1 falls with N
        "sweep": [uni("1x8", 256, 200.0, 400.0, 1.0), uni("1x8", 512, 200.0, 800.0, 0.9),
                  uni("1x8", 1024, 210.0, 1600.0, 0.7),
                  uni("2x16", 256, 380.0, 400.0, 1.0), uni("2x16", 512, 390.0, 800.0, 0.95),
                  uni("2x16", 1024, 400.0, 1600.0, 0.8)],
        "alpha_fp32": 3.8, "alpha_bf16": 3.5,
        "a1_error_pct": {"S": 1.5, "V": 4.0},
        "double_descent_onset": {"1x16": 0.5, "1x32": 2.0},
        "text": [txt("1x16", 1024, 0.55, 0.0, 0.0), txt("1x16", 32, 1.0, 0.6, 0.0),
                 txt("1x32", 32, 0.98, 1.0, 0.1), txt("1x32", 1024, 0.6, 0.12, 0.1)],
        "tfidf_spearman": 0.3, "tfidf_pvalue": 0.01,
        "table2_max_abs_error": 0.0016,
    }


def _verdicts(metrics, profile="cpu"):
    from memlab import paper

    return {d["key"]: d["verdict"] for d in paper.evaluate(ex.claims(), metrics, profile)}


def _evidence(metrics, key):
    from memlab import paper

    return {d["key"]: d["evidence"] for d in paper.evaluate(ex.claims(), metrics, "cpu")}[key]


CLAIM_KEYS = ["linear", "alpha", "plateau", "precision", "a1", "double_descent", "mia_decreases", "mia_text",
              "extraction", "tfidf", "table2"]


def test_claims_keys_and_every_profile():
    cs = ex.claims()
    assert [c.key for c in cs] == CLAIM_KEYS
    assert all(c.text and c.source for c in cs)
    # every claim is judged at every profile (the smoke run exercises each predicate)
    for profile in config.PROFILES:
        assert _verdicts(_good_metrics(), profile) == {k: "reproduced" for k in CLAIM_KEYS}
    assert all(tuple(c.profiles) == tuple(config.PROFILES) for c in cs)


def test_claims_not_run_when_a_metric_is_missing():
    m = _good_metrics()
    del m["text"], m["tfidf_spearman"]
    v = _verdicts(m)
    assert v["mia_text"] == v["extraction"] == v["tfidf"] == "not run at this profile"
    assert v["linear"] == v["mia_decreases"] == "reproduced"


def _changed(**changes):
    m = _good_metrics()
    for k, f in changes.items():
        m[k] = f(m[k])
    return m


def _set(rows, i, **kv):
    return [dict(r, **kv) if j == i else r for j, r in enumerate(rows)]


@pytest.mark.parametrize("key, metrics", [
    ("linear", _changed(alpha_r2=lambda _: 0.94)),
    ("alpha", _changed(alpha=lambda _: 3.64 + 0.51)),          # paper alpha_mean 3.64, tolerance 0.5
    ("alpha", _changed(alpha=lambda _: 1.36)),
    # 1x8 grows x1.15 between its two largest N
    ("plateau", _changed(sweep=lambda s: _set(s, 2, mem_bits=230.0))),
    # 2x16 at 0.5 of H(X) at its largest N: not far below the data's entropy
    ("plateau", _changed(sweep=lambda s: _set(s, 5, mem_bits=800.0, data_bits=1600.0))),
    ("precision", _changed(alpha_fp32=lambda _: 3.4)),          # fp32 below bf16
    ("precision", _changed(alpha_fp32=lambda _: 3.5 * 1.26)),   # more than 25% above
    ("a1", _changed(a1_error_pct=lambda e: {**e, "V": 5.1})),
    ("double_descent", _changed(double_descent_onset=lambda o: {**o, "1x32": None})),
    ("double_descent", _changed(double_descent_onset=lambda o: {**o, "1x16": 0.2})),
    ("double_descent", _changed(double_descent_onset=lambda o: {**o, "1x16": 4.5})),
    # 2x16: F1 at N = 1024 as high as at N = 256
    ("mia_decreases", _changed(sweep=lambda s: _set(s, 5, membership_f1=1.0))),
    ("mia_text", _changed(text=lambda t: _set(t, 0, membership_f1=1.0))),
    ("extraction", _changed(text=lambda t: _set(t, 1, extract_train=0.0))),   # not extractable when small
    ("extraction", _changed(text=lambda t: _set(t, 3, extract_train=0.16))),  # 0.06 above test when large
    ("tfidf", _changed(tfidf_spearman=lambda _: -0.2)),
    ("tfidf", _changed(tfidf_pvalue=lambda _: 0.05)),
    ("table2", _changed(table2_max_abs_error=lambda _: 0.011)),
])
def test_each_claim_fails_on_changed_metrics(key, metrics):
    v = _verdicts(metrics)
    assert v[key] == "not reproduced"
    assert all(v[k] == "reproduced" for k in CLAIM_KEYS if k != key)  # the change touches only this claim


def test_plateau_looks_only_at_alpha_precision():
    m = _good_metrics()
    # an fp32 run that doubles memorisation would break the plateau if it were counted
    m["sweep"] = m["sweep"] + [dict(m["sweep"][2], precision="fp32", n_samples=2048, mem_bits=420.0)]
    assert _verdicts(m)["plateau"] == "reproduced"
    m["alpha_precision"] = "fp32"  # now only the lone fp32 run counts: no two N to compare
    v = {d["key"]: d for d in paper.evaluate(ex.claims(), m, "cpu")}
    assert v["plateau"]["verdict"] == paper.NOT_RUN
    assert v["plateau"]["evidence"] == "1x8: one data set size at fp32; a plateau needs at least two"


def test_claim_evidence_strings():
    m = _good_metrics()
    assert _evidence(m, "linear") == "R² = 0.990 (paper > 0.99)"
    assert _evidence(m, "alpha") == "alpha = 3.50 (bf16) vs 3.64 ± 0.5"
    assert _evidence(m, "plateau") == ("1x8: x1.05 from N=512 to 1024 (H x2.0), 0.13 of H(X); "
                                       "2x16: x1.03 from N=512 to 1024 (H x2.0), 0.25 of H(X)")
    assert _evidence(m, "precision") == "alpha fp32 / bf16 = 3.800 / 3.500 = 1.086 (paper 1.091)"
    assert _evidence(m, "a1") == "mean error S: 1.5%, V: 4.0% (paper 1.7%, 1.8%)"
    assert _evidence(_changed(double_descent_onset=lambda o: {**o, "1x32": None}), "double_descent") == \
        "test loss first rises at ratio 1x16: 0.5, 1x32: None"
    assert _evidence(m, "mia_decreases") == "1x8: F1 1.00 -> 0.70; 2x16: F1 1.00 -> 0.80"
    assert _evidence(m, "mia_text") == "1x16: F1 1.00 -> 0.55; 1x32: F1 0.98 -> 0.60"
    assert _evidence(m, "extraction") == ("1x16: train 0.60 vs test 0.00 at N = 32; 0.00 vs 0.00 at N = 1024; "
                                          "1x32: train 1.00 vs test 0.10 at N = 32; 0.12 vs 0.10 at N = 1024")
    assert _evidence(m, "tfidf") == "Spearman rho = 0.300, p = 0.01"
    assert _evidence(m, "table2") == "max |law - Table 2| = 0.0016"
