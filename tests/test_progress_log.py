"""Progress without a terminal: `memlab book > book.log 2>&1` (a cluster job, nohup, CI) gets plain
lines, one when each stage (a progress bar) starts and ends, and a heartbeat every
MEMLAB_PROGRESS_EVERY_S seconds (30 by default) with what runs, how far and the time left; no
carriage returns, no redraws. tests/test_run_terminal.py shows what a terminal gets."""
import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import install_fake_chapter
from test_run_terminal import FAKE_SPEC  # the same two-parameter spec the terminal test runs
from memlab.core import relay
from memlab.core.config import ConfigError
from memlab.core.fsutil import append_line

REPO = Path(__file__).resolve().parents[1]


def _log_env(**extra) -> dict:
    """This process's environment with progress shown (the suite hides it) and a 0.2 s heartbeat."""
    env = {k: v for k, v in os.environ.items() if k not in ("MEMLAB_PROGRESS", "MEMLAB_RUN_PROGRESS", relay.ENV)}
    return {**env, "PYTHONPATH": str(REPO / "lib"), "OMP_NUM_THREADS": "1", relay.LOG_EVERY_ENV: "0.2", **extra}


BARS = '''
import time
from memlab.core.progress import progress, ticking
for _ in progress(range(5), desc="steps", mininterval=0):
    time.sleep(0.15)
with progress(desc="a silent step", bar_format="{desc} [{elapsed}]") as bar, ticking(bar, 0.05):
    time.sleep(0.5)
'''


def test_a_bar_writes_plain_lines_to_a_log():
    done = subprocess.run([sys.executable, "-c", BARS], env=_log_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr and "\x1b" not in done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == "steps: started (5 steps)"
    assert any(line.startswith("steps: done, 5 in 00:0") for line in lines), lines
    # between start and end: count, percentage, time so far and the time left, at most every 0.2 s
    beats = [line for line in lines if line.startswith("steps: ") and " so far, ~" in line]
    assert beats and all(line.endswith(" s left") for line in beats), lines
    assert 1 <= len(beats) <= 6, lines  # throttled, not one per step redraw
    # a bar with nothing to count, kept ticking, says how long it has been going
    assert "a silent step: started" in lines and lines[-1].startswith("a silent step: done in 00:0")
    assert any(line.startswith("a silent step [00:0") for line in lines), lines


def test_progress_hidden_writes_nothing_to_a_log():
    env = _log_env(MEMLAB_PROGRESS="0")
    done = subprocess.run([sys.executable, "-c", BARS], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_the_interval_must_be_a_positive_number(monkeypatch):
    monkeypatch.setenv(relay.LOG_EVERY_ENV, "0.25")
    assert relay.log_every_s() == 0.25
    monkeypatch.delenv(relay.LOG_EVERY_ENV)
    assert relay.log_every_s() == relay.LOG_EVERY_S <= 30  # at least a line a minute, even when one is late
    for bad in ("0", "-1", "soon", "inf"):
        monkeypatch.setenv(relay.LOG_EVERY_ENV, bad)
        with pytest.raises(ConfigError, match=f"{relay.LOG_EVERY_ENV}: must be a positive number of seconds"):
            relay.log_every_s()


def test_a_log_follows_a_kernel_stage_by_stage_with_a_heartbeat_and_the_time_left(tmp_path, monkeypatch):
    monkeypatch.setenv(relay.LOG_EVERY_ENV, "0.2")
    path = tmp_path / "progress.log"
    path.write_text("")
    out = io.StringIO()  # no terminal

    def kernel() -> None:
        for line in ["train: started (4 steps)", "train: 25% 1/4 [00:01<00:03, 1.00it/s]",
                     "train: 50% 2/4 [00:02<00:02, 1.00it/s]", "train: done, 4 in 00:04"]:
            append_line(path, line)
            time.sleep(0.3)

    with relay.Follower(path, "01_x", stream=out, expected_s=600, note=lambda s: "~1 h 00 min of the book left"):
        writer = threading.Thread(target=kernel)
        writer.start()
        writer.join()
        time.sleep(0.5)
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    # stage lines as they happen; the bar's redraws only through the heartbeat
    assert [line for line in lines if not line.startswith("01_x: running ")] == [
        "01_x: train: started (4 steps)", "01_x: train: done, 4 in 00:04"]
    beats = [line for line in lines if line.startswith("01_x: running ")]
    assert len(beats) >= 3, lines
    assert all(" left of ~10 min 00 s estimated (~1 h 00 min of the book left)" in line for line in beats), beats
    assert any(line.endswith("; now train: 50% 2/4 [00:02<00:02, 1.00it/s]") for line in beats), beats
    assert beats[-1].endswith("; after train: done, 4 in 00:04"), beats
    assert relay.time_left(700, 600) == "over the estimated ~10 min 00 s by 1 min 40 s, time left unknown"
    assert relay.time_left(5, None).startswith("time left not estimated")



NOTEBOOK = '''
# %% tags=["parameters"]
profile: str = "cpu"
params: dict = {}

# %%
import sys, time
sys.path.insert(0, {spec_dir!r})
import log_spec
from memlab.core import config, results
cfg = config.resolve_spec("fake", log_spec.SPEC, profile, **params)
run = results.Run(cfg)

# %%
from memlab.core.progress import progress
for _ in progress(range(4), desc="fake steps", mininterval=0):
    time.sleep(0.5)
time.sleep(1.0)  # a step without a bar: the heartbeat still comes
run.record(ok=1)
run.save(claims=[])
'''

BOOK = '''
import sys
from pathlib import Path
sys.path.insert(0, {spec_dir!r})
from memlab import cli
from memlab.core import chapters
from memlab.run import runner
chapters.CHAPTERS["fake"] = chapters.Chapter("fake", "Fake", "log_spec", "none.txt")
cli.repo_root = runner.repo_root = lambda: Path({root!r})
cli.render = lambda *a, **k: __import__("time").sleep(0.5)  # no HTML book: its stage lines only
sys.exit(cli.main(["book", "--profile", "smoke", "--chapters", "fake", "--jobs", "1", "--threads", "1"]))
'''


def test_memlab_book_to_a_file_prints_stages_and_a_heartbeat(tmp_path, monkeypatch):
    spec_dir = install_fake_chapter(tmp_path, monkeypatch, FAKE_SPEC, NOTEBOOK, module="log_spec")
    script = tmp_path / "book_fake.py"
    script.write_text(BOOK.format(spec_dir=str(spec_dir), root=str(tmp_path)))
    log = tmp_path / "book.log"
    with open(log, "w") as f:  # memlab book > book.log 2>&1
        done = subprocess.run([sys.executable, str(script)], env=_log_env(MEMLAB_CACHE=str(tmp_path / "cache")),
                              stdout=f, stderr=subprocess.STDOUT, timeout=240)
    text = log.read_text()
    assert done.returncode == 0, text
    assert "\r" not in text and "\x1b" not in text, text
    lines = text.splitlines()

    def at(prefix: str) -> int:
        found = [i for i, line in enumerate(lines) if line.startswith(prefix)]
        assert found, f"no line starting {prefix!r} in:\n{text}"
        return found[0]

    # the book's own stages, the chapter's, in order
    order = [at("book: checking: started (1 step)"), at("book: checking: done, 1 in"),
             at("book: chapter 1 of 1: fake"), at("fake: fake steps: started (4 steps)"),
             at("fake: fake steps: done, 4 in"), at("fake: ran at profile smoke"),
             at("book: rendering the HTML book: started"), at("book: rendering the HTML book: done in")]
    assert order == sorted(order), text
    # the chapter's heartbeat: time so far, time left (none recorded yet: it says so), the latest bar line
    beats = [line for line in lines if line.startswith("fake: running ")]
    assert len(beats) >= 5, text
    assert all(", time left not estimated (no recorded run at these parameters)" in line for line in beats), beats
    assert any("; now fake steps: " in line and "/4 [" in line for line in beats), beats


def test_a_sweep_to_a_log_keeps_its_heartbeat_while_no_run_ends(tmp_path, monkeypatch, capsys):
    """`memlab sweep > sweep.log`: runs of an hour finish rarely; the bar's line still comes every interval."""
    import distributed

    from memlab.run import sweep

    monkeypatch.setenv(relay.LOG_EVERY_ENV, "0.2")
    monkeypatch.delenv("MEMLAB_PROGRESS", raising=False)
    monkeypatch.delenv(relay.ENV, raising=False)
    start = time.monotonic()

    def wait(futures, timeout, return_when):  # distributed.wait: nothing ends for 1.5 s, then all
        time.sleep(0.05)
        if time.monotonic() - start < 1.5:
            raise TimeoutError
        return set(futures), set()

    class Future:
        status = "finished"

    class Client:
        def scheduler_info(self):
            return {"workers": {"w": {"nthreads": 1}}}

        def processing(self):
            return {"w": ["seed-0"]}

    monkeypatch.setattr(distributed, "wait", wait)
    sweep._follow(Client(), {Future(): ("seed-0", {"seed": 0})}, tmp_path)
    err = capsys.readouterr().err
    beats = [line for line in err.splitlines() if line.startswith("sweep: 0/1 (0%), ")]
    assert len(beats) >= 4 and all("running 1" in line for line in beats), err
