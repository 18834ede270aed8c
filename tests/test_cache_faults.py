"""The cache under faults: corrupt entries are detected, reported once, moved aside and rebuilt;
kill -9 during a save leaves no entry that loads and no orphan after the next start; concurrent
writers never produce a partial entry; an entry without its checksum is corrupt, never trusted."""
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from memlab.core import cache, fsutil

REPO = Path(__file__).resolve().parents[1]


def _fresh(monkeypatch, path: Path) -> None:
    monkeypatch.setenv("MEMLAB_CACHE", str(path))
    monkeypatch.delenv("MEMLAB_NO_CACHE", raising=False)
    cache._CLEANED.discard(path)


def _compute(calls):
    def compute():
        calls.append(1)
        return {"w": torch.arange(4096, dtype=torch.float32).reshape(64, 64), "b": torch.ones(7)}

    return compute


def _truncate(entry):
    w = entry / cache.WEIGHTS
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])


def _flip(entry):
    w = entry / cache.WEIGHTS
    data = bytearray(w.read_bytes())
    data[-100] ^= 0xFF  # inside the tensor data: same size, header intact
    w.write_bytes(bytes(data))


def _no_meta(entry):
    (entry / cache.META).unlink()


def _bad_meta(entry):
    (entry / cache.META).write_text("{not json")


def _no_weights(entry):
    (entry / cache.WEIGHTS).unlink()


def _garbage(entry):
    (entry / cache.WEIGHTS).write_bytes(b"\x00" * 64)


@pytest.mark.parametrize("damage", [_truncate, _flip, _no_meta, _bad_meta, _no_weights, _garbage],
                         ids=lambda f: f.__name__.strip("_"))
def test_corrupt_entry_is_reported_once_moved_aside_and_rebuilt(tmp_path, monkeypatch, damage):
    _fresh(monkeypatch, tmp_path)
    calls = []
    first = cache.load_or_compute("ch", "feat", {"k": 1}, _compute(calls))
    entry = tmp_path / cache.key("ch", "feat", {"k": 1})
    damage(entry)
    with pytest.warns(cache.CacheWarning) as record:
        again = cache.load_or_compute("ch", "feat", {"k": 1}, _compute(calls))
    msgs = [str(r.message) for r in record if issubclass(r.category, cache.CacheWarning)]
    assert len(msgs) == 1 and str(entry) in msgs[0] and "rebuilding" in msgs[0] and "\n" not in msgs[0]
    assert calls == [1, 1] and torch.equal(again["w"], first["w"])
    assert len(list((tmp_path / ".corrupt").iterdir())) == 1  # the bad copy kept for a look, out of the way
    cache.verify(entry)  # the rebuilt entry checks out
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reported once: the next load is clean and silent
        third = cache.load_or_compute("ch", "feat", {"k": 1}, _compute(calls))
    assert calls == [1, 1] and torch.equal(third["b"], first["b"])


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)


def test_corrupt_model_entry_is_retrained(tmp_path, monkeypatch):
    _fresh(monkeypatch, tmp_path)
    calls = []

    def train(m):
        calls.append(1)
        with torch.no_grad():
            m.lin.weight.fill_(0.25)

    cache.load_or_train("ch", "m", {}, Small, train)
    _flip(tmp_path / cache.key("ch", "m", {}))
    with pytest.warns(cache.CacheWarning, match="does not match the SHA-256"):
        m = cache.load_or_train("ch", "m", {}, Small, train)
    assert calls == [1, 1] and torch.all(m.lin.weight == 0.25)


_META_TAMPERS = {
    "no-size": lambda m: m.pop("size"),
    "no-sha256": lambda m: m.pop("sha256"),
    "neither": lambda m: (m.pop("size"), m.pop("sha256")),
    "size-as-text": lambda m: m.update(size=str(m["size"])),
    "size-null": lambda m: m.update(size=None),
    "sha256-empty": lambda m: m.update(sha256=""),
    "sha256-not-hex": lambda m: m.update(sha256="z" * 64),
}


@pytest.mark.parametrize("weights_changed", [False, True], ids=["weights-intact", "weights-changed"])
@pytest.mark.parametrize("tamper", sorted(_META_TAMPERS))
def test_a_checksum_cannot_be_skipped(tmp_path, monkeypatch, tamper, weights_changed):
    """Removing or spoiling size/sha256 in meta.json makes the entry corrupt, whatever the weights hold:
    it is rebuilt, never trusted, and the load does not write a fresh checksum of what it found."""
    _fresh(monkeypatch, tmp_path)
    calls = []
    first = cache.load_or_compute("ch", "feat", {"k": 2}, _compute(calls))
    entry = tmp_path / cache.key("ch", "feat", {"k": 2})
    if weights_changed:
        _flip(entry)
    meta = json.loads((entry / cache.META).read_text())
    _META_TAMPERS[tamper](meta)
    (entry / cache.META).write_text(json.dumps(meta))
    with pytest.warns(cache.CacheWarning, match="rebuilding"):
        again = cache.load_or_compute("ch", "feat", {"k": 2}, _compute(calls))
    assert calls == [1, 1] and torch.equal(again["w"], first["w"])
    aside = list((tmp_path / ".corrupt").iterdir())
    assert len(aside) == 1 and json.loads((aside[0] / cache.META).read_text()) == meta  # not rewritten
    rebuilt = cache.verify(entry)
    assert rebuilt["sha256"] == cache.sha256_file(entry / cache.WEIGHTS)


def test_verify_reads_but_never_writes(tmp_path, monkeypatch):
    """Hashing happens on write only: loading a good entry leaves its meta.json byte-for-byte alone."""
    _fresh(monkeypatch, tmp_path)
    cache.load_or_compute("ch", "feat", {"k": 4}, _compute([]))
    entry = tmp_path / cache.key("ch", "feat", {"k": 4})
    before = (entry / cache.META).read_bytes(), (entry / cache.META).stat().st_mtime_ns
    cache.load_or_compute("ch", "feat", {"k": 4}, _compute([]))
    assert ((entry / cache.META).read_bytes(), (entry / cache.META).stat().st_mtime_ns) == before


def test_files_follow_the_umask(tmp_path, monkeypatch):
    _fresh(monkeypatch, tmp_path)
    old = os.umask(0o022)
    try:
        cache.load_or_compute("ch", "feat", {"k": 3}, _compute([]))
        from memlab.core.results import write_json_atomic

        write_json_atomic(tmp_path / "r" / "x.json", {"a": 1})
    finally:
        os.umask(old)
    entry = tmp_path / cache.key("ch", "feat", {"k": 3})
    assert stat.S_IMODE(entry.stat().st_mode) == 0o755
    assert stat.S_IMODE((entry / cache.WEIGHTS).stat().st_mode) == 0o644
    assert stat.S_IMODE((entry / cache.META).stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "r" / "x.json").stat().st_mode) == 0o644


WRITER = textwrap.dedent('''
    import sys, torch
    from memlab.core import cache
    big = torch.ones(4_000_000)  # 16 MB: most of the loop's time is spent saving and hashing
    print("ready", flush=True)
    i = 0
    while True:
        cache.load_or_compute("ch", "big", {"i": i}, lambda: {"x": big})
        i += 1
''')


def _python(code: str, env: dict, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True, **kw)


def test_kill_9_during_save_leaves_no_loadable_partial_and_no_orphan(tmp_path, monkeypatch):
    env = {**os.environ, "MEMLAB_CACHE": str(tmp_path), "OMP_NUM_THREADS": "1"}
    orphans: list[Path] = []
    for attempt in range(8):  # bounded: a kill lands inside a save in most attempts
        proc = _python(WRITER, env)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.3 + 0.15 * attempt)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        orphans = [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
        if orphans:
            break
    assert orphans, "no kill landed inside a save in 8 attempts"
    assert all(fsutil.is_orphan(p) for p in orphans)  # the writer is dead
    # Every entry that exists is whole: each verifies and loads.
    entries = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    for e in entries:
        cache.verify(e)
    # The next process to use the cache removes the dead writer's temporary folder.
    _fresh(monkeypatch, tmp_path)
    cache.cache_dir()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    got = cache.load_or_compute("ch", "big", {"i": 0}, lambda: {"x": torch.ones(4_000_000)})
    assert torch.equal(got["x"], torch.ones(4_000_000))


RACER = textwrap.dedent('''
    import sys, torch, warnings
    from memlab.core import cache
    warnings.simplefilter("error", cache.CacheWarning)  # any corrupt entry seen is a failure
    for r in range(int(sys.argv[1])):
        for k in range(4):
            out = cache.load_or_compute("ch", "race", {"k": k, "r": r // 3},
                                        lambda: {"x": torch.full((20_000,), float(k))})
            assert torch.equal(out["x"], torch.full((20_000,), float(k))), (r, k)
    print("ok", flush=True)
''')


def test_concurrent_writers_never_see_a_partial_entry(tmp_path):
    env = {**os.environ, "MEMLAB_CACHE": str(tmp_path), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", RACER, "12"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.strip() == "ok", err[-2000:]
    entries = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    assert len(entries) == 16  # 4 keys x 4 values of r // 3
    for e in entries:
        cache.verify(e)
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name or p.name == ".corrupt"]


def test_second_writer_of_a_key_keeps_the_first_entry(tmp_path, monkeypatch):
    """The exists-check/rename race: the loser's rename fails atomically and its copy is dropped."""
    _fresh(monkeypatch, tmp_path)
    k = cache.key("ch", "dup", {})
    meta = {"kind": "tensors"}
    from safetensors.torch import save_file

    cache._write_entry(k, lambda d: save_file({"x": torch.zeros(3)}, str(d / cache.WEIGHTS)), meta)
    cache._write_entry(k, lambda d: save_file({"x": torch.ones(3)}, str(d / cache.WEIGHTS)), meta)
    got = cache.load_or_compute("ch", "dup", {}, lambda: pytest.fail("should load"))
    assert torch.equal(got["x"], torch.zeros(3))
    assert [p.name for p in tmp_path.iterdir()] == [k]


def test_orphan_rules(tmp_path):
    dead = tmp_path / ".abc.tmp-999999999-0123abcd"  # no such pid
    live = fsutil.make_tmp_dir(tmp_path, "mine")
    legacy_old = tmp_path / ".0123456789ab-xyzABC12"
    legacy_new = tmp_path / ".ba9876543210-xyzABC12"
    for p in (dead, legacy_old, legacy_new):
        p.mkdir()
    os.utime(legacy_old, (time.time() - 2 * fsutil.LEGACY_MAX_AGE_S,) * 2)
    removed = fsutil.clean_orphans(tmp_path)
    assert sorted(removed) == sorted([dead, legacy_old])
    assert live.exists() and legacy_new.exists()


def test_damaged_array_and_tokenizer_caches_are_rebuilt(tmp_path, monkeypatch):
    from PIL import Image
    import numpy as np

    from memlab.data import text, vision

    _fresh(monkeypatch, tmp_path / "models")
    root = tmp_path / "imgs"
    rng = np.random.default_rng(0)
    for c in vision.CIFAR10_CLASSES:
        (root / "train" / c).mkdir(parents=True)
        Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(root / "train" / c / "0.png")
    x, y = vision.load_raw("train", root=root)
    xs = next((tmp_path / "arrays").glob("*-x.npy"))
    xs.write_bytes(xs.read_bytes()[:200])  # truncated
    with pytest.warns(cache.CacheWarning, match=f"{xs} is damaged"):
        x2, y2 = vision.load_raw("train", root=root)
    assert np.array_equal(x, x2) and np.array_equal(y, y2)
    texts = ["alpha beta gamma delta " * 20]
    tok = text.train_bpe(texts, vocab_size=300, name="t")
    saved = next((tmp_path / "tokenizers").glob("t-*.json"))
    saved.write_text("{broken")
    with pytest.warns(cache.CacheWarning, match="is damaged"):
        again = text.train_bpe(texts, vocab_size=300, name="t")
    assert again.get_vocab() == tok.get_vocab()
