"""The benchmark scripts run end to end at toy size and record what they measured.

Speed ratios are not asserted here (timed tests flake on a shared machine);
what is asserted is what must hold at any speed: the fast and the reference
implementation agree, and the record names its configuration and provenance.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, tmp_path: Path, *args: str, timeout: int = 300) -> dict:
    env = {**os.environ, "MEMLAB_BENCH_RESULTS": str(tmp_path), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], env=env,
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    name = script.removeprefix("bench_").removesuffix(".py")
    return json.loads((tmp_path / f"{name}.json").read_text())


def test_qskew_benchmark_batched_scores_equal_the_loop(tmp_path):
    rec = _run("bench_qskew.py", tmp_path, "--n", "3", "--length", "12", "--n-embd", "16", "--vocab", "64",
               "--rounds", "2", "--repeats", "1", "--threads", "1", "2")
    m = rec["measurements"]
    assert [r["threads"] for r in m["rows"]] == [1, 2]
    assert m["scores_agree"] and all(r["max_abs_score_diff"] <= 1e-4 for r in m["rows"])
    assert all(r["speedup"] > 0 and r["batched_tokens_per_s"] > 0 for r in m["rows"])
    assert m["config"]["masked_tokens_per_pass"] == 2 * 3 * 2 * 12  # every position once per round, two models
    assert rec["provenance"]["profile"] == "benchmark" and rec["provenance"]["torch"]


def test_qskew_benchmark_rejects_bad_thread_count(tmp_path):
    env = {**os.environ, "MEMLAB_BENCH_RESULTS": str(tmp_path)}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_qskew.py"), "--threads", "0"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--threads" in out.stderr
    assert not list(tmp_path.iterdir())


def test_sama_benchmark_subsets_drawn_at_once_score_as_the_loop(tmp_path):
    rec = _run("bench_sama.py", tmp_path, "--n", "12", "--length", "10", "--steps", "3", "--repeats", "1")
    m = rec["measurements"]
    assert m["results_identical"] is True and m["speedup"] > 0
    assert m["config"] == {"n": 12, "length": 10, "steps": 3, "subset": 8, "subsets": 128, "repeats": 1}


def test_kendall_benchmark_intervals_at_once_equal_the_loop(tmp_path):
    rec = _run("bench_kendall.py", tmp_path, "--items", "9", "--pairs", "2", "--n-boot", "50", "--repeats", "1")
    m = rec["measurements"]
    assert m["results_identical"] is True and m["speedup"] > 0
    assert m["config"] == {"items": 9, "pairs": 2, "n_boot": 50, "repeats": 1}


def test_sde_benchmark_vectorised_equals_loop(tmp_path):
    rec = _run("bench_sde.py", tmp_path, "--n", "60", "--dim", "8", "--shuffles", "6", "--loop-shuffles", "3")
    m = rec["measurements"]
    assert m["max_abs_diff"] <= 1e-8 and m["loop_scaled_by"] == 2


def test_sweep_benchmark_times_a_run_and_a_seed_sweep(tmp_path):
    if not os.environ.get("MEMLAB_DATA_ROOT"):
        import pytest

        pytest.skip("needs MEMLAB_DATA_ROOT")
    # three cold smoke runs of a chapter (one alone, two on the cluster): minutes on a loaded machine
    rec = _run("bench_sweep.py", tmp_path, "05_capacity", "--profile", "smoke", "--seeds", "2", "--workers", "2",
               timeout=1200)
    (row,) = rec["measurements"]["rows"]
    assert row["chapter"] == "05_capacity" and row["seeds"] == 2 and row["workers"] == 2
    assert row["single_run_s"] > 0 and row["sweep_s"] > 0
    # the record rounds times to 0.1 s and the efficiency (from unrounded times) to 0.001
    assert abs(row["parallel_efficiency"] - row["single_run_s"] / row["sweep_s"]) <= 0.01


def test_sweep_benchmark_refuses_an_unknown_chapter(tmp_path):
    env = {**os.environ, "MEMLAB_BENCH_RESULTS": str(tmp_path)}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_sweep.py"), "07_nope"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "unknown chapter '07_nope'" in out.stderr and not any(tmp_path.iterdir())


def test_sweep_benchmark_records_a_finished_sweep(tmp_path):
    """--from-sweep: the busy fraction and runs in flight are the closed forms of the folder's own times."""
    sweep_dir = tmp_path / "sweeps" / "05_capacity-abc"
    runs = {"seed-0": 10.0, "seed-1": 20.0, "seed-2": 30.0}
    for rid, wall in runs.items():
        (sweep_dir / rid).mkdir(parents=True)
        (sweep_dir / rid / "run.json").write_text(json.dumps({"wall_time_s": wall}))
    (sweep_dir / "sweep.json").write_text(json.dumps(
        {"chapter": "05_capacity", "profile": "cpu", "axes": {"seed": [0, 1, 2]}, "runs": list(runs)}))
    (sweep_dir / "timing.json").write_text(json.dumps([{"wall_s": 35.0, "workers": 2, "threads": 1}]))
    rec = _run("bench_sweep.py", tmp_path, "--from-sweep", str(sweep_dir))
    (row,) = rec["measurements"]["rows"]
    assert row["run_wall_s"] == runs and row["sweep_s"] == 35.0 and row["workers"] == 2
    assert row["busy_fraction"] == round(60 / (2 * 35), 3) and row["mean_runs_in_flight"] == round(60 / 35, 3)
    (sweep_dir / "timing.json").unlink()
    env = {**os.environ, "MEMLAB_BENCH_RESULTS": str(tmp_path / "none")}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_sweep.py"), "--from-sweep",
                          str(sweep_dir)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "is not a finished sweep folder (no timing.json" in out.stderr
    assert not (tmp_path / "none").exists()


def test_book_benchmark_times_cold_runs_at_each_thread_count(tmp_path):
    if not os.environ.get("MEMLAB_DATA_ROOT"):
        import pytest

        pytest.skip("needs MEMLAB_DATA_ROOT")
    # two cold smoke runs of the quickest chapter, one per thread count, each with an empty cache
    rec = _run("bench_book.py", tmp_path, "--chapters", "02_sde", "--profile", "smoke", "--threads", "1", "2",
               "--name", "book", timeout=1200)
    m = rec["measurements"]
    runs = m["chapters"]["02_sde"]["runs"]
    assert [r["threads"] for r in runs] == [1, 2]
    assert all(r["kind"] == "cold" and r["trained"] > 0 and r["loaded"] == 0 for r in runs)  # empty caches
    assert all(r["cpu_s"] > 0 and r["wall_s"] > 0 and r["peak_memory_mb"] > 0 for r in runs)
    assert runs[0]["estimate_line"].startswith("estimate: no recorded run of 02_sde at smoke")
    ratio = m["chapters"]["02_sde"]["wall_ratio_to_first"]
    assert ratio["1"] == 1.0 and abs(ratio["2"] - round(runs[0]["wall_s"] / runs[1]["wall_s"], 2)) < 1e-9
    assert set(runs[0]["verdicts"]) == set(runs[1]["verdicts"])  # the same claims, judged at both counts
    assert m["book_wall_s"]["2"] == runs[1]["wall_s"]


def test_compile_benchmark_projects_the_chapter_ratio_and_decides(tmp_path):
    rec = _run("bench_compile.py", tmp_path, "--width", "2", "--batch", "8", "--steps", "2", "--repeats", "2",
               "--steps-per-model", "10", "--models", "3", timeout=900)
    m = rec["measurements"]
    te, tc = m["eager_ms_per_step"] / 1e3, m["compiled_ms_per_step"] / 1e3
    # the chapter ratio is the closed form of the recorded parts, and the decision follows the bar
    want = 3 * 10 * te / (m["compile_cold_s"] + 2 * m["compile_warm_s"] + 3 * 10 * tc)
    assert abs(m["chapter_ratio"] - want) <= 2e-3 * want + 1e-3
    assert m["kept"] == (m["chapter_ratio"] >= m["keep_at"]) and m["keep_at"] == 1.15
    assert m["compile_cold_s"] > 0 and m["max_loss_difference"] < 1e-3  # compiled training is the same training
    assert rec["provenance"]["profile"] == "benchmark"


@pytest.mark.parametrize("loop, record", [("dlm", "compile-dlm"), ("gpt2_stacked", "compile-gpt2_stacked"),
                                          ("qwen_small", "compile-qwen_small")])
def test_compile_benchmark_measures_the_language_model_loops(tmp_path, loop, record):
    env = {**os.environ, "MEMLAB_BENCH_RESULTS": str(tmp_path)}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_compile.py"), "--loop", loop,
                          "--batch", "2", "--steps", "1", "--repeats", "1", "--steps-per-model", "10"],
                         env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    m = json.loads((tmp_path / f"{record}.json").read_text())["measurements"]
    assert m["loop_name"] == loop and m["batch"] == 2 and m["steps_per_model"] == 10
    te, tc, n = m["eager_ms_per_step"] / 1e3, m["compiled_ms_per_step"] / 1e3, m["models"]
    warm = m["compile_cold_s"] if m["shapes_differ"] else m["compile_warm_s"]
    want = n * 10 * te / (m["compile_cold_s"] + (n - 1) * warm + n * 10 * tc)
    assert abs(m["chapter_ratio"] - want) <= 2e-3 * want + 1e-3
    assert m["shapes_differ"] is (loop == "gpt2_stacked")  # chapter 5's stacks differ in shape
    assert m["kept"] == (m["chapter_ratio"] >= 1.15) and m["max_loss_difference"] < 1e-3


def test_compile_benchmark_rejects_bad_sizes(tmp_path):
    env = {**os.environ, "MEMLAB_BENCH_RESULTS": str(tmp_path)}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_compile.py"), "--models", "0"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--models" in out.stderr and not list(tmp_path.iterdir())


def test_canaries_benchmark_decoders_agree_and_times_lora_steps_per_thread_count(tmp_path):
    rec = _run("bench_canaries.py", tmp_path, "--profile", "smoke", "--batch", "4", "--new", "5",
               "--threads", "1", "2", "--lora-steps", "2", "--rounds", "2")
    m = rec["measurements"]
    assert [r["threads"] for r in m["rows"]] == [1, 2] and all(r["identical_tokens"] for r in m["rows"])
    assert [r["threads"] for r in m["lora_step"]] == [1, 2]
    assert m["lora_step"][0]["speedup_vs_first"] == 1.0 and all(r["step_s"] > 0 for r in m["lora_step"])


def test_stack_resnet_benchmark_stacked_training_is_separate_training(tmp_path):
    rec = _run("bench_stack_resnet.py", tmp_path, "--width", "2", "--batch", "8", "--steps", "1", "--repeats", "2",
               "--threads", "1", "--stacks", "2", "3")
    m = rec["measurements"]
    assert m["max_loss_difference"] < 1e-5 and m["max_stem_weight_difference"] < 1e-3
    assert [r["models"] for r in m["rows"]] == [2, 3] and all(r["speedup"] > 0 for r in m["rows"])
    assert m["kept"] == all(r["speedup"] >= m["keep_at"] for r in m["rows"])
    # in float64 the stacked steps are the separate steps up to rounding
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import torch

    import bench_stack_resnet
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        exact = bench_stack_resnet.agreement(3, 2, 8)
    finally:
        torch.set_default_dtype(before)
    assert max(exact.values()) < 1e-12


def test_stack_resnet_benchmark_rejects_a_single_model(tmp_path):
    env = {**os.environ, "MEMLAB_BENCH_RESULTS": str(tmp_path)}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_stack_resnet.py"), "--stacks", "1"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--stacks" in out.stderr and not list(tmp_path.iterdir())


def test_gpu_benchmark_measures_every_loop_that_sizes_the_gpu_evidence(tmp_path):
    env = {**os.environ, "MEMLAB_BENCH_RESULTS": str(tmp_path), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_gpu.py"), "--toy"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    rec = json.loads((tmp_path / "gpu_toy.json").read_text())  # a toy run never overwrites gpu.json
    m = rec["measurements"]
    assert m["toy"] is True and set(m["train_steps_per_s"]) == {
        "resnet18 bn batch 256 deterministic", "resnet18 bn batch 256 cudnn autotuned",
        "resnet18 bn batch 128 deterministic", "resnet18 gn batch 256 deterministic"}
    assert all(v > 0 for v in m["train_steps_per_s"].values()) and m["inference_images_per_s"] > 0
    assert len(m["stacked_gpt2_steps_per_s"]) == 4 and all(v > 0 for v in m["stacked_gpt2_steps_per_s"].values())
    assert set(m["sde"]) == {"8", "16"} and rec["provenance"]["device"]
    # the committed record is the one measured on a GPU
    gpu = json.loads((ROOT / "benchmarks" / "results" / "gpu.json").read_text())
    assert gpu["measurements"]["toy"] is False and "H200" in gpu["provenance"]["device"]


def test_cifar_recipe_benchmark_records_each_epochs_gate_measures(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_cifar_recipe.py"), "bn", "--toy"],
                         env={**os.environ, "MEMLAB_BENCH_RESULTS": str(tmp_path), "OMP_NUM_THREADS": "1",
                              "MEMLAB_PROGRESS": "0"}, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    rec = json.loads((tmp_path / "cifar_recipe-toy.json").read_text())
    row = rec["measurements"]["bn-2ep"]
    assert [e["epoch"] for e in row["epochs"]] == [1, 2] and row["train_images"] == 200
    assert all(0 <= e[k] <= 1 for e in row["epochs"] for k in ("test_acc", "train_acc_no_aug", "airplane_test_acc"))
    assert row["epochs"][1]["train_wall_s"] >= row["epochs"][0]["train_wall_s"] > 0 and row["params"] > 0


def test_cifar_recipe_benchmark_refuses_an_unknown_candidate(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_cifar_recipe.py"), "resnet99"],
                         env={**os.environ, "MEMLAB_BENCH_RESULTS": str(tmp_path)}, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and "resnet99" in out.stderr and "bn-ls" in out.stderr
    assert not list(tmp_path.iterdir())
