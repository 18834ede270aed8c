"""What `memlab run` leaves on the terminal and on disk: the kernel's progress bars and cache warnings
reach stderr, and a run killed with -9 leaves its kernel's connection file only in its staging
folder, which the next run removes."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memlab import cli
from memlab.core import relay
from conftest import install_fake_chapter

REPO = Path(__file__).resolve().parents[1]

FAKE_SPEC = '''
from memlab.core.config import Param
SPEC = {"seed": Param(int, 0, low=0), "sleep": Param(float, 0.0, low=0.0)}
'''

FAKE_NOTEBOOK = '''
# %% tags=["parameters"]
profile: str = "cpu"
params: dict = {}

# %%
import sys, time
sys.path.insert(0, {spec_dir!r})
import term_spec
import torch
from memlab.core import cache, config, results
cfg = config.resolve_spec("fake", term_spec.SPEC, profile, **params)
run = results.Run(cfg)

# %%
from memlab.core.progress import progress
for _ in progress(range(4), desc="fake steps", mininterval=0):
    time.sleep(cfg.sleep / 4)
make = lambda: {"w": torch.ones(8)}
cache.load_or_compute("fake", "t", {"seed": cfg.seed}, make)
entry = cache.entry_path(cache.key("fake", "t", {"seed": cfg.seed}))
(entry / cache.WEIGHTS).write_bytes(b"damaged")  # the next load finds it corrupt
cache.load_or_compute("fake", "t", {"seed": cfg.seed}, make)
run.record(ok=1)
run.save(claims=[])
'''


@pytest.fixture
def fake(tmp_path, monkeypatch):
    spec_dir = install_fake_chapter(tmp_path, monkeypatch, FAKE_SPEC, FAKE_NOTEBOOK, module="term_spec")
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path / "cache" / "models"))
    return tmp_path, spec_dir


def test_cache_warnings_of_the_kernel_reach_the_terminal(fake, capsys):
    root, _ = fake
    assert cli.main(["run", "fake", "--profile", "smoke"]) == 0
    err = capsys.readouterr().err.splitlines()
    warned = [line for line in err if line.startswith("memlab: warning: cache: entry")]
    assert len(warned) == 1 and "corrupt or incomplete" in warned[0] and "rebuilding" in warned[0], err


def test_the_kernels_progress_reaches_the_terminal_and_silence_gets_a_heartbeat(fake, capsys, monkeypatch):
    monkeypatch.setattr(relay, "is_terminal", lambda stream: True)  # capsys's stream is none
    monkeypatch.setattr(relay, "HEARTBEAT_S", 1.0)
    assert cli.main(["run", "fake", "--profile", "smoke", "-p", "sleep", "2"]) == 0
    # on a terminal each line overwrites the last one
    err = re.split(r"\r\x1b\[K|\n", capsys.readouterr().err)
    steps = [line for line in err if line.startswith("fake: fake steps:")]
    assert any("25% 1/4" in line for line in steps) and steps[-1].startswith("fake: fake steps: done, 4 in"), err
    assert any(line.startswith("fake: running, ") and line.endswith(" s so far") for line in err), err


def test_no_progress_lines_without_a_terminal_when_progress_is_hidden(fake, capsys, monkeypatch):
    # MEMLAB_PROGRESS=0 (the fixture's, as in the whole test suite) keeps a log free of progress
    # lines; tests/test_progress_log.py shows what a log gets without it
    monkeypatch.delenv("MEMLAB_RUN_PROGRESS", raising=False)
    assert cli.main(["run", "fake", "--profile", "smoke"]) == 0
    assert not [line for line in capsys.readouterr().err.splitlines() if line.startswith("fake:")]


RUNNER = '''
import sys
from pathlib import Path
sys.path.insert(0, {spec_dir!r})
from memlab import cli
from memlab.core import chapters
from memlab.run import runner
chapters.CHAPTERS["fake"] = chapters.Chapter("fake", "Fake", "term_spec", "none.txt")
cli.repo_root = runner.repo_root = lambda: Path({root!r})
sys.exit(cli.main(["run", "fake", "--profile", "smoke", "-p", "sleep", sys.argv[1]]))
'''


def test_a_killed_run_leaves_its_kernel_files_where_the_next_run_removes_them(fake, tmp_path):
    root, spec_dir = fake
    script = root / "run_fake.py"
    script.write_text(RUNNER.format(spec_dir=str(spec_dir), root=str(root)))
    runtime = tmp_path / "tmp"  # jupyter_client's default place for connection files: tempfile's folder
    runtime.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO / "lib"), "TMPDIR": str(runtime), "MEMLAB_PROGRESS": "0"}
    proc = subprocess.Popen([sys.executable, str(script), "60"], env=env, stderr=subprocess.DEVNULL)
    book = root / "book"
    deadline = time.time() + 120
    while time.time() < deadline and not list(book.glob(".staging-*/kernel-*.json")):
        time.sleep(0.5)
    connection = list(book.glob(".staging-*/kernel-*.json"))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert connection, "the kernel never started"
    assert not list(runtime.glob("*.json"))  # no connection file left in the temporary folder
    time.sleep(3)  # the orphaned kernel notices its parent died and exits
    done = subprocess.run([sys.executable, str(script), "0"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not list(book.glob(".staging-*"))  # the dead run's folder, connection file included, is gone
    assert json.loads((book / "results" / "fake.json").read_text())["metrics"]["ok"] == 1


def test_a_sweeps_run_relays_its_progress_to_its_file_for_the_sweeps_bar(fake, capsys, monkeypatch):
    from memlab.run import runner, sweep

    root, _ = fake
    monkeypatch.setenv("MEMLAB_RUN_PROGRESS", "1")  # even when told to show progress, a sweep's run shows nothing itself
    progress_file = root / "sweeps" / ".progress" / "seed-0.log"
    progress_file.parent.mkdir(parents=True)
    runner.run_chapter("fake", "smoke", {}, book_dir=root / "out", progress_file=progress_file)
    assert not [line for line in capsys.readouterr().err.splitlines() if line.startswith("fake:")]
    assert relay.last_line(progress_file).startswith("fake steps: done, 4 in")
    assert sweep.running_lines(root / "sweeps", ["seed-0", "seed-1"]).startswith("seed-0: fake steps: done, 4 in")
    assert len(sweep.running_lines(root / "sweeps", ["seed-0"], width=20)) == 20
    # run_one relays there while the run goes, and removes the file when it ends
    assert sweep.run_one("fake", "smoke", {"seed": 1}, str(root / "sweeps" / "seed-1"))["status"] == "done"
    assert not sweep.progress_path(root / "sweeps", "seed-1").exists()
