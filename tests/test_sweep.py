"""``memlab sweep`` on Dask (loopback only): grid parsing, validation before work, a real 2x2 smoke
sweep with its summary, resuming, a worker killed mid-run, a failing run recorded, the SLURM script."""
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from memlab import cli
from memlab.report import sweep_summary
from memlab.run import sweep
from conftest import REPO, install_fake_chapter
from memlab.core.config import ConfigError

FAKE_SPEC = '''
from memlab.core.config import Param
SPEC = {"seed": Param(int, 0, low=0), "n": Param(int, 3, low=1, high=5), "fail": Param(bool, False),
        "sleep": Param(float, 0.0, low=0), "marker_dir": Param(str, ""), "budgets": Param(list, [1], item=int)}
'''

# Each run writes a marker naming its seed and its worker process (the kernel's parent), so the test
# can kill the worker while the run executes; then it sleeps, so the kill lands mid-run.
FAKE_NOTEBOOK = '''
# %% tags=["parameters"]
profile: str = "cpu"
params: dict = {}

# %%
import os, sys, time
sys.path.insert(0, {spec_dir!r})
import fake_spec
from memlab.core import config, results
cfg = config.resolve_spec("fake", fake_spec.SPEC, profile, **params)
run = results.Run(cfg)
if cfg.marker_dir:
    open(os.path.join(cfg.marker_dir, f"seed{cfg.seed}-{os.getppid()}-{time.time()}"), "w").close()
time.sleep(cfg.sleep)

# %%
if cfg.fail:
    raise RuntimeError("planned failure")
run.record(total=cfg.n * (cfg.seed + 1), nested={"half": cfg.seed / 2},
           default_malloc=int("MALLOC_TRIM_THRESHOLD_" not in os.environ))
run.save(claims=[{"key": "odd", "claim": "the seed is odd", "source": "-",
                  "verdict": "reproduced" if cfg.seed % 2 else "not reproduced", "evidence": ""}])
'''

PRELOAD = '''
import sys
from pathlib import Path
sys.path.insert(0, {spec_dir!r})
from memlab import cli
from memlab.core import chapters
from memlab.run import runner
chapters.CHAPTERS["fake"] = chapters.Chapter("fake", "Fake", "fake_spec", "none.txt")
cli.repo_root = runner.repo_root = lambda: Path({root!r})
'''


@pytest.fixture
def fake_project(tmp_path, monkeypatch):
    spec_dir = install_fake_chapter(tmp_path, monkeypatch, FAKE_SPEC, FAKE_NOTEBOOK)
    (tmp_path / "preload.py").write_text(PRELOAD.format(spec_dir=str(spec_dir), root=str(tmp_path)))
    return tmp_path


def test_grid_syntax(fake_project):
    axes = sweep.parse_axes("fake", [("seed", "0..2"), ("n", "1,4"), ("budgets", "[1, 2],[3]")])
    assert axes == {"seed": [0, 1, 2], "n": [1, 4], "budgets": [[1, 2], [3]]}
    combos = sweep.combinations(axes)
    assert len(combos) == 12 and combos[0] == {"seed": 0, "n": 1, "budgets": [1, 2]}
    assert len({sweep.run_id(c) for c in combos}) == 12  # one folder per combination
    assert sweep.sweep_id("fake", "smoke", axes) == sweep.sweep_id("fake", "smoke", dict(axes))
    assert sweep.sweep_id("fake", "smoke", axes) != sweep.sweep_id("fake", "cpu", axes)
    for pairs, message in [([("seed", "3..1")], "range '3..1' is empty"),
                           ([("sleep", "0..2")], "needs an integer parameter"),
                           ([("n", "1,,2")], "an empty item"), ([("n", "2,2")], "a value is repeated"),
                           ([("n", "1,six")], "parameter 'n': must be an integer")]:
        with pytest.raises(ConfigError, match=message):
            sweep.parse_axes("fake", pairs)


def test_interval_is_student_t():
    from scipy import stats

    s = sweep_summary.interval([1.0, 2.0, 4.0])
    lo, hi = stats.t.interval(0.95, 2, loc=7 / 3, scale=stats.sem([1.0, 2.0, 4.0]))
    assert s["mean"] == pytest.approx(7 / 3) and s["ci95"] == pytest.approx([lo, hi])
    assert sweep_summary.interval([5.0])["ci95"] is None and sweep_summary.interval([2.0, 2.0])["ci95"] == [2.0, 2.0]
    assert sweep_summary.flatten({"a": 1, "b": {"c": 2.5, "d": True, "e": [1]}, "f": float("nan")}) == {"a": 1.0, "b.c": 2.5}


def test_bad_value_in_any_combination_stops_before_work(fake_project, capsys):
    out = fake_project / "sweeps"
    assert cli.main(["sweep", "fake", "--profile", "smoke", "-p", "n", "1,7", "--out", str(out)]) == 2
    assert "parameter 'n': must be an integer in [1, 5]" in capsys.readouterr().err
    assert cli.main(["sweep", "fake", "-p", "colour", "red,blue", "--out", str(out)]) == 2
    assert "parameter 'colour': not a parameter of chapter 'fake'" in capsys.readouterr().err
    assert not out.exists()  # no sweep folder, no cluster, no run


def test_cluster_print_shows_slurm_script(fake_project, capsys, tmp_path):
    conf = tmp_path / "slurm.yaml"
    conf.write_text("cores: 6\nmemory: 12GB\nwalltime: '01:30:00'\ngpus: 1\nqueue: short\nthreads: 3\n")
    argv = ["sweep", "fake", "-p", "seed", "0..1", "--cluster", "print", "--cluster-config", str(conf),
            "--out", str(tmp_path / "sweeps")]
    assert cli.main(argv) == 0
    script = capsys.readouterr().out
    for line in ("#SBATCH --cpus-per-task=6", "#SBATCH -t 01:30:00", "#SBATCH -p short", "#SBATCH --gres=gpu:1",
                 "#SBATCH --mem=12G", "export OMP_NUM_THREADS=3", "--resources GPU=1", "--nthreads 1"):
        assert line in script, line
    assert not (tmp_path / "sweeps").exists()  # nothing submitted, nothing run
    conf.write_text("cores: 6\nwall: 2\n")
    assert cli.main(argv) == 2
    assert "unknown key 'wall'" in capsys.readouterr().err


def test_the_sweep_estimate_sums_its_runs_and_spreads_their_wall_over_the_workers():
    run = {"known": True, "this_cpu_s": 600.0, "this_wall_s": 330.0}
    line = sweep.estimate_line([run, run, run, {"known": False}], threads=2, workers=2)
    assert line.startswith("sweep estimate: at most ~30 CPU-min for 3 runs (~8.2 min wall on 2 workers x 2 threads)")
    assert "1 run(s) with no record" in line
    assert "min wall" not in sweep.estimate_line([run], threads=1, workers=None)  # a cluster of unknown size
    assert "none of the 2 runs has a recorded" in sweep.estimate_line([{"known": False}] * 2, threads=1, workers=1)
    assert "the run has no recorded run" in sweep.estimate_line([{"known": False}], threads=1, workers=1)


def _recount(sweep_dir: Path, chapter: str) -> dict:
    counts = {}
    for res in sweep_dir.glob(f"*/results/{chapter}.json"):
        for c in json.loads(res.read_text())["claims"]:
            counts.setdefault(c["key"], [0, 0])  # [reproduced, judged]
            counts[c["key"]][0] += c["verdict"] == "reproduced"
            counts[c["key"]][1] += c["verdict"] in ("reproduced", "not reproduced")
    return counts


@pytest.mark.slow  # an end-to-end run: left out of the ISA legs (scripts/test.sh)
@pytest.mark.skipif(not os.environ.get("MEMLAB_DATA_ROOT"), reason="needs MEMLAB_DATA_ROOT")
def test_real_smoke_sweep_2x2_then_resume(tmp_path, capsys, monkeypatch):
    """05_capacity at smoke, seeds 0,1 x two learning rates, on a 2-worker LocalCluster."""
    monkeypatch.setenv("MEMLAB_PROGRESS", "0")
    argv = ["sweep", "05_capacity", "--profile", "smoke", "-p", "seed", "0..1", "-p", "lr", "0.01,0.02",
            "--workers", "2", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "LocalCluster of 2 worker process(es)" in printed and "dask: dashboard http" in printed  # bokeh is pinned
    assert "sweep estimate: " in printed  # before any run starts
    (sweep_dir,) = tmp_path.iterdir()
    runs = sorted(p.name for p in sweep_dir.iterdir() if p.is_dir())
    assert runs == ["lr-0.01_seed-0", "lr-0.01_seed-1", "lr-0.02_seed-0", "lr-0.02_seed-1"]
    for r in runs:
        assert (sweep_dir / r / "chapters" / "05_capacity.ipynb").exists()
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert (sweep_dir / "summary.png").stat().st_size > 0
    assert len(summary["runs_done"]) == 4 and summary["runs_failed"] == []
    assert [g["params"] for g in summary["groups"]] == [{"lr": 0.01}, {"lr": 0.02}]  # seed is not a group
    counts = {}
    for g in summary["groups"]:
        assert len(g["runs"]) == 2
        for key, c in g["claims"].items():
            counts.setdefault(key, [0, 0])
            counts[key][0] += c["reproduced"]
            counts[key][1] += c["n"]
            run_s = "run" if c["n"] == 1 else "runs"
            assert (c["text"].startswith(f"reproduced in {c['reproduced']} of {c['n']} {run_s}") if c["n"]
                    else c["text"].endswith(("in all 2 runs", ")")) and "0 of 0" not in c["text"])
    assert counts == _recount(sweep_dir, "05_capacity") and counts
    before = (sweep_dir / "summary.json").read_bytes()
    stamps = {r: (sweep_dir / r / "run.json").stat().st_mtime_ns for r in runs}
    assert cli.main(argv) == 0  # the second invocation runs nothing, starts no cluster
    printed = capsys.readouterr().out
    assert "4 already complete, 0 to run" in printed and "LocalCluster" not in printed
    (timing,) = json.loads((sweep_dir / sweep_summary.TIMING_FILE).read_text())  # a resume that ran nothing adds none
    assert timing["executed"] == 4 and timing["workers"] == 2 and timing["threads"] == 1
    assert (sweep_dir / "summary.json").read_bytes() == before
    assert {r: (sweep_dir / r / "run.json").stat().st_mtime_ns for r in runs} == stamps
    assert cli.main(["sweep", "--summary", str(sweep_dir)]) == 0
    assert (sweep_dir / "summary.json").read_bytes() == before
    # committed as they finished, the runs resume on a fresh machine: only what git keeps, no model cache
    fresh = tmp_path / "fresh-clone"
    _copy_what_git_keeps(sweep_dir, fresh / sweep_dir.name)
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path / "empty-cache"))
    assert cli.main([*argv[:-1], str(fresh)]) == 0
    assert "4 already complete, 0 to run" in capsys.readouterr().out


def _copy_what_git_keeps(src: Path, dst: Path) -> None:
    """Copy the files of sweep folder ``src`` that the repository's .gitignore keeps under data/sweeps/."""
    files = [p for p in src.rglob("*") if p.is_file()]
    rel = [f"data/sweeps/{src.name}/{p.relative_to(src).as_posix()}" for p in files]
    ignored = set(subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=REPO, text=True,
                                 input="\n".join(rel), capture_output=True).stdout.split())
    assert not any("/results/" in r or r.endswith("/run.json") for r in ignored), ignored
    for p, r in zip(files, rel):
        if r not in ignored:
            (dst / p.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dst / p.relative_to(src))


@pytest.mark.slow  # an end-to-end run: left out of the ISA legs (scripts/test.sh)
def test_killed_worker_and_failing_run(fake_project, capsys):
    """A worker killed mid-run loses only that run (rescheduled); a failing run is retried once,
    recorded with its cell and error, and the sweep finishes the others."""
    from distributed import LocalCluster

    markers = fake_project / "markers"
    markers.mkdir()
    out = fake_project / "sweeps"
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit=0,
                           dashboard_address=":0", host="127.0.0.1", preload=[str(fake_project / "preload.py")])
    argv = ["sweep", "fake", "--profile", "smoke", "-p", "seed", "0..2", "-p", "sleep", "4",
            "-p", "marker_dir", str(markers), "--scheduler", cluster.scheduler_address, "--out", str(out)]
    codes = []
    try:
        from distributed import Client

        with Client(cluster) as c:  # the precondition of the default_malloc check below
            assert set(c.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_")).values()) == {"65536"}
        # seed 0: killed once mid-run; seeds 1, 2 run normally
        t = threading.Thread(target=lambda: codes.append(cli.main(argv)))
        t.start()
        deadline = time.time() + 120
        while not list(markers.glob("seed0-*")) and time.time() < deadline:
            time.sleep(0.2)
        (marker,) = markers.glob("seed0-*")
        worker_pid = int(marker.name.split("-")[1])
        os.kill(worker_pid, signal.SIGKILL)
        t.join(timeout=180)
        assert codes == [0]
        (sweep_dir,) = out.iterdir()
        assert len(list(markers.glob("seed0-*"))) == 2  # rescheduled once
        assert not [p for p in sweep_dir.iterdir() if p.name.startswith(".")]  # no temp folder left
        runs = sorted(p for p in sweep_dir.iterdir() if p.is_dir())
        assert len(runs) == 3 and all((r / "results" / "fake.json").exists() for r in runs)
        summary = json.loads((sweep_dir / "summary.json").read_text())
        assert len(summary["runs_done"]) == 3
        assert summary["groups"][0]["claims"]["odd"]["text"] == "reproduced in 1 of 3 runs"
        assert summary["groups"][0]["metrics"]["total"]["mean"] == pytest.approx(3 * (1 + 2 + 3) / 3)
        # the Dask workers have MALLOC_TRIM_THRESHOLD_ set; the kernels run with glibc's default
        assert summary["groups"][0]["metrics"]["default_malloc"]["mean"] == 1
        (timing,) = json.loads((sweep_dir / sweep_summary.TIMING_FILE).read_text())
        # the sweep's wall time covers its runs: three 4-second sleeps on two workers, one run twice
        assert timing["executed"] == 3 and timing["cluster"] == "scheduler" and timing["wall_s"] >= 8

        # a failing combination: tried twice, recorded, the other run done; nothing half-written
        argv_fail = ["sweep", "fake", "--profile", "smoke", "-p", "seed", "0..1", "-p", "fail", "true,false",
                     "--scheduler", cluster.scheduler_address, "--out", str(out)]
        assert cli.main(argv_fail) == 0
        err = capsys.readouterr().err
        assert "failed twice" in err and "planned failure" in err
        sweep_dir = next(p for p in out.iterdir() if p.name != sweep_dir.name)
        failed = sorted((sweep_dir / "failed").glob("*.json"))
        assert len(failed) == 2
        rec = json.loads(failed[0].read_text())
        assert rec["params"]["fail"] is True and rec["cell"].startswith("cell ") and "planned failure" in rec["error"]
        summary = json.loads((sweep_dir / "summary.json").read_text())
        assert len(summary["runs_done"]) == 2 and len(summary["runs_failed"]) == 2
        assert not [p for p in sweep_dir.iterdir() if p.name.startswith(".")]
    finally:
        cluster.close()


def test_a_run_of_earlier_chapter_code_is_not_complete(tmp_path):
    """Resuming skips a run only if it ran the chapter's current code; an older run is run again."""
    from memlab.core import results

    folder = tmp_path / "seed-1"
    (folder / "results").mkdir(parents=True)
    (folder / sweep_summary.RUN_FILE).write_text(json.dumps({"chapter": "05_capacity", "profile": "cpu",
                                                     "params": {"seed": 1}}))

    def write(code):
        (folder / "results" / "05_capacity.json").write_text(json.dumps(
            {"profile": "cpu", "provenance": {"chapter_code": code}}))

    write(results.chapter_code("05_capacity"))
    assert sweep.is_complete(folder, "05_capacity", "cpu", {"seed": 1})
    assert not sweep.is_complete(folder, "05_capacity", "cpu", {"seed": 2})
    write("0ld0ld0ld0ld")
    assert not sweep.is_complete(folder, "05_capacity", "cpu", {"seed": 1})
