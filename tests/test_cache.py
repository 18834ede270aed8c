import fcntl
import json
import os
import subprocess
import sys
import time
import warnings

import pytest
import torch
from torch import nn

from memlab.core import cache, notices


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.bn = nn.BatchNorm1d(2)
        self.head = nn.Linear(2, 2)

    def forward(self, x):
        return self.head(self.bn(self.lin(x)))


def _train(calls):
    def train(model):
        calls.append(1)
        torch.manual_seed(0)
        model.train()
        model(torch.randn(8, 3))  # moves BN running statistics
        with torch.no_grad():
            model.lin.weight.add_(1.0)

    return train


def test_round_trip_loads_instead_of_training(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path))
    calls = []
    a = cache.load_or_train("ch", "stage", {"lr": 0.1, "n": 2}, Tiny, _train(calls))
    b = cache.load_or_train("ch", "stage", {"n": 2, "lr": 0.1}, Tiny, _train(calls))  # key order irrelevant
    assert calls == [1]
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)
    assert torch.equal(b.bn.running_mean, a.bn.running_mean) and a.bn.num_batches_tracked.item() == 1
    entry = tmp_path / cache.key("ch", "stage", {"lr": 0.1, "n": 2})
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["stage"] == "stage" and meta["config"] == {"lr": 0.1, "n": 2}
    # how it was made, outside the key: the thread count changes training's float sums
    assert meta["torch_threads"] == torch.get_num_threads() and meta["torch"] == torch.__version__
    assert meta["git_commit"]


def test_key_changes_with_config_and_code_version():
    k = cache.key("ch", "s", {"a": 1})
    assert k != cache.key("ch", "s", {"a": 2})
    assert k != cache.key("ch", "s", {"a": 1}, code_version="2")
    assert k != cache.key("ch", "t", {"a": 1})


def test_no_cache_retrains(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path))
    calls = []
    cache.load_or_train("ch", "s", {}, Tiny, _train(calls))
    monkeypatch.setenv("MEMLAB_NO_CACHE", "1")
    cache.load_or_train("ch", "s", {}, Tiny, _train(calls))
    assert calls == [1, 1]


def test_no_cache_trains_each_model_once_per_run_and_shares_it(tmp_path, monkeypatch):
    """--no-cache ignores what earlier runs cached, but a model two stages of one run ask for is trained
    once, as from an empty cache (it once trained chapter 3's memorised adapter twice)."""
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path))
    monkeypatch.setattr(cache, "_MADE_HERE", {})
    calls, computed = [], []
    cache.load_or_train("ch", "s", {"k": 1}, Tiny, _train(calls))  # an earlier run's entry
    monkeypatch.setenv("MEMLAB_NO_CACHE", "1")
    first = cache.load_or_train("ch", "s", {"k": 1}, Tiny, _train(calls))
    again = cache.load_or_train("ch", "s", {"k": 1}, Tiny, _train(calls))
    assert calls == [1, 1]  # retrained once despite the earlier entry, then shared
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), again.state_dict().values()))
    make = lambda: computed.append(1) or {"w": torch.ones(2)}  # noqa: E731
    cache.load_or_compute("ch", "t", {"k": 2}, make)
    assert torch.equal(cache.load_or_compute("ch", "t", {"k": 2}, make)["w"], torch.ones(2)) and computed == [1]


def test_interrupted_write_leaves_no_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path))

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed before rename")

    monkeypatch.setattr(cache, "save_model", crash)
    with pytest.raises(KeyboardInterrupt):
        cache.load_or_train("ch", "s", {"x": 1}, Tiny, lambda m: None)
    # neither the entry nor its temporary folder (the key's lock file stays, empty and unlocked)
    assert [p.name for p in tmp_path.iterdir()] == [".locks"]
    monkeypatch.undo()
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path))
    calls = []
    cache.load_or_train("ch", "s", {"x": 1}, Tiny, _train(calls))
    assert calls == [1]


def test_load_or_compute_tensors(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path))
    calls = []

    def compute():
        calls.append(1)
        return {"a": torch.arange(6).reshape(2, 3).t(), "b": torch.ones(2)}

    first = cache.load_or_compute("ch", "feat", {"k": 1}, compute)
    second = cache.load_or_compute("ch", "feat", {"k": 1}, compute)
    assert calls == [1] and torch.equal(first["a"], second["a"]) and torch.equal(second["b"], torch.ones(2))
    with pytest.raises(TypeError):
        cache.load_or_compute("ch", "bad", {}, lambda: {"a": [1, 2]})


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(5, 4)
        self.out = nn.Linear(4, 5, bias=False)
        self.out.weight = self.emb.weight  # tied, as in GPT-2


def test_tied_weights_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path))

    def train(m):
        with torch.no_grad():
            m.emb.weight.fill_(0.5)

    cache.load_or_train("ch", "tied", {}, Tied, train)
    b = cache.load_or_train("ch", "tied", {}, Tied, lambda m: pytest.fail("should load"))
    assert b.out.weight is b.emb.weight and torch.all(b.emb.weight == 0.5)


@pytest.mark.parametrize("field, other, what", [
    ("torch_threads", torch.get_num_threads() + 1, "torch threads"),
    ("cpu_isa", "AVX512" if torch.backends.cpu.get_cpu_capability() != "AVX512" else "AVX2", r"CPU kernels \(ISA\)"),
])
def test_entry_from_another_thread_count_or_isa_warns_on_load(tmp_path, monkeypatch, field, other, what):
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path))
    cache.load_or_train("ch", "stage", {"n": 1}, Tiny, _train([]))
    entry = tmp_path / cache.key("ch", "stage", {"n": 1})
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["device"] == "cpu"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # same thread count: silent
        cache.load_or_train("ch", "stage", {"n": 1}, Tiny, _train([]))
    assert meta[field] != other
    meta[field] = other
    (entry / "meta.json").write_text(json.dumps(meta))
    with pytest.warns(UserWarning, match=rf"ch/stage entry .* trained with {what} {other}, this run uses"):
        cache.load_or_train("ch", "stage", {"n": 1}, Tiny, _train([]))


def test_many_entries_made_elsewhere_reach_the_terminal_as_one_line_per_cause(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path / "models"))
    log = tmp_path / "notices.log"
    monkeypatch.setenv(notices.ENV, str(log))
    stages = ["a", "a", "a", "b"]
    for n, stage in enumerate(stages):
        cache.load_or_train("ch", stage, {"n": n}, Tiny, _train([]))
        entry = tmp_path / "models" / cache.key("ch", stage, {"n": n})
        meta = json.loads((entry / "meta.json").read_text())
        meta["torch_threads"] = torch.get_num_threads() + 1
        (entry / "meta.json").write_text(json.dumps(meta))
    with pytest.warns(UserWarning):
        for n, stage in enumerate(stages):
            cache.load_or_train("ch", stage, {"n": n}, Tiny, _train([]))
    log.write_text(log.read_text() + "cache: entry x is corrupt or incomplete (bad); rebuilding\n")
    lines = notices.read(log)
    assert len(lines) == 5
    folded = notices.fold(lines)
    threads = torch.get_num_threads()
    assert folded == [f"cache: 4 entries (ch/a 3, ch/b 1) were trained with torch threads {threads + 1}, this "
                      f"run uses {threads}; their weights differ slightly from a fresh training here "
                      "(--no-cache retrains)", "cache: entry x is corrupt or incomplete (bad); rebuilding"]
    assert notices.fold(lines[:1]) == lines[:1]  # one entry keeps its own line, with its id


TRAIN_ONCE = """
import sys, time
from pathlib import Path
import torch
from memlab.core import cache
log = Path(sys.argv[1])
def train(model):
    with log.open("a") as f:
        f.write("trained\\n")
    time.sleep(float(sys.argv[2]))
    with torch.no_grad():
        model.weight.fill_(2.0)
m = cache.load_or_train("ch", "shared", {"n": 1}, lambda: torch.nn.Linear(2, 2), train)
print(float(m.weight[0, 0]))
"""


def test_two_processes_needing_one_model_train_it_once(tmp_path):
    env = {**os.environ, "MEMLAB_CACHE": str(tmp_path / "models")}
    log = tmp_path / "trainings.log"
    first = subprocess.Popen([sys.executable, "-c", TRAIN_ONCE, str(log), "3"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not log.exists() and time.time() < deadline:  # the first is training, holding the lock
        time.sleep(0.05)
    second = subprocess.run([sys.executable, "-c", TRAIN_ONCE, str(log), "0"], env=env,
                            capture_output=True, text=True, timeout=120)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, (err, second.stderr)
    assert log.read_text().splitlines() == ["trained"]  # the second waited and loaded
    assert out.strip() == second.stdout.strip() == "2.0"
    assert "another process is training ch/shared" in second.stderr and "waiting" in second.stderr


def test_a_process_holding_a_lock_never_waits_for_another(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path))
    k = cache.key("ch", "inner", {"n": 1})
    (tmp_path / ".locks").mkdir(parents=True)
    with open(tmp_path / ".locks" / f"{k}.lock", "a+b") as other:  # another open file: another holder
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        calls = []
        outer = lambda m: cache.load_or_train("ch", "inner", {"n": 1}, Tiny, _train(calls))  # noqa: E731
        cache.load_or_train("ch", "outer", {"n": 1}, Tiny, outer)  # would block forever if it waited
    assert calls == [1] and cache.has(k)
