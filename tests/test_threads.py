"""Threads: every core by default, `--threads N` or OMP_NUM_THREADS to choose, bad values refused first."""

import json
import os

import pytest

from conftest import SEED_SPEC, install_fake_chapter, seed_chapter_notebook
from memlab import cli
from memlab.core import config
from memlab.core.config import ConfigError

NOTEBOOK = seed_chapter_notebook("threads_spec", """
run.record(torch_threads=torch.get_num_threads(), omp=os.environ.get("OMP_NUM_THREADS"))
run.save(claims=[])
""")


def test_the_default_is_every_core_this_process_may_use(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = config.available_cores()
    assert 1 <= cores <= (os.cpu_count() or 1)
    assert config.thread_count() == cores


def test_the_flag_wins_over_the_environment_which_wins_over_the_default(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert config.thread_count() == 3
    assert config.thread_count(5) == 5


@pytest.mark.parametrize("threads", [0, -1, config.MAX_THREADS + 1, True, 2.5])
def test_a_bad_thread_count_names_the_flag_and_the_range(threads):
    with pytest.raises(ConfigError, match=r"parameter 'threads': must be an integer from 1 to 1024"):
        config.thread_count(threads)


@pytest.mark.parametrize("env", ["x", "0", "2.5", "-3"])
def test_a_bad_environment_value_names_the_variable(monkeypatch, env):
    monkeypatch.setenv("OMP_NUM_THREADS", env)
    with pytest.raises(ConfigError, match=f"OMP_NUM_THREADS: must be an integer.*got '{env}'"):
        config.thread_count()


def test_the_cli_refuses_a_bad_count_before_any_work(tmp_path, monkeypatch, capsys):
    install_fake_chapter(tmp_path, monkeypatch, SEED_SPEC, NOTEBOOK, module="threads_spec")
    assert cli.main(["run", "fake", "--profile", "smoke", "--threads", "0"]) == 2
    assert "parameter 'threads': must be an integer from 1 to 1024 (got 0)" in capsys.readouterr().err
    assert not (tmp_path / "book").exists()
    assert cli.main(["book", "--profile", "smoke", "--threads", "-2"]) == 2
    assert not (tmp_path / "book").exists()


def test_the_kernel_computes_with_the_chosen_threads(tmp_path, monkeypatch):
    install_fake_chapter(tmp_path, monkeypatch, SEED_SPEC, NOTEBOOK, module="threads_spec")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the suite's own setting: the flag must override it
    assert cli.main(["run", "fake", "--profile", "smoke", "--threads", "2"]) == 0
    res = json.loads((tmp_path / "book" / "results" / "fake.json").read_text())
    assert res["metrics"] == {"torch_threads": 2, "omp": "2"}
    assert res["provenance"]["cpu_threads"] == 2
    assert os.environ["OMP_NUM_THREADS"] == "1"  # the command's setting does not leak into the caller
