"""Fail before work, never silently wrong: bad data, missing data, hub and GPU needs are refused
before any work with one line naming the folder/file/parameter; every failure mid-run (an
exception, a killed or aborted kernel) is one line naming the cell and the saved notebook, and the
published book is untouched; downloads are wired to every loader (tested without a network)."""
import hashlib
import io
import json
import os
import shutil
import socket
import time
from pathlib import Path

import numpy as np
import pytest

from memlab import cli
from memlab.core import netguard, results
from memlab.run import preflight
from memlab.core.config import ConfigError
from memlab.data import text, vision

from conftest import install_fake_chapter, shared_data_root

CLASSES = vision.CIFAR10_CLASSES
_SHARED = shared_data_root()  # read at import: the fixtures below unset MEMLAB_DATA_ROOT


def require_data(sub: str) -> Path:
    if _SHARED is None or not (_SHARED / sub).exists():
        if os.environ.get("CI"):
            pytest.fail(f"MEMLAB_DATA_ROOT must hold {sub} in CI")
        pytest.skip(f"needs MEMLAB_DATA_ROOT with {sub}")
    return _SHARED / sub


def _tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    if root.exists():
        for p in sorted(root.rglob("*")):
            h.update(str(p.relative_to(root)).encode())
            if p.is_file():
                h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture
def tiny_cifar(tmp_path):
    """A 10-class CIFAR-10 ImageFolder root (2 real JPEGs per class and split), copied into tmp."""
    src = require_data("cifar10-jpeg")
    root = tmp_path / "data" / "cifar10-jpeg"
    for split in ("train", "test"):
        for c in CLASSES:
            (root / split / c).mkdir(parents=True)
            for f in sorted((src / split / c).iterdir())[:2]:
                shutil.copy(f, root / split / c / f.name)
    return root


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No data root, an empty download folder, a scratch cache; returns (book dir, cache dir)."""
    monkeypatch.delenv("MEMLAB_DATA_ROOT", raising=False)
    monkeypatch.delenv("MEMLAB_ALLOW_DOWNLOAD", raising=False)
    monkeypatch.setenv("MEMLAB_DOWNLOAD_DIR", str(tmp_path / "downloads"))
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path / "cache" / "models"))
    monkeypatch.setenv("MEMLAB_PROGRESS", "0")
    return tmp_path / "book", tmp_path / "cache"


def _refused(capsys, argv, book, cache_root, code=2):
    """Run the CLI; assert exit ``code``, one stderr line, quick, nothing written. Returns the line."""
    from memlab.core.config import chapter_module

    chapter_module(argv[1])  # imports (torch, the chapter) are not part of the time to refusal
    before = (_tree_hash(book), _tree_hash(cache_root))
    start = time.perf_counter()
    rc = cli.main(argv + ["--book-dir", str(book)])
    took = time.perf_counter() - start
    err = capsys.readouterr().err.strip()
    assert rc == code, err
    assert len(err.splitlines()) == 1, err
    assert took < 8.0, f"refusal took {took:.1f} s"
    assert (_tree_hash(book), _tree_hash(cache_root)) == before
    assert not book.exists() or not any(book.iterdir())
    return err


# ----------------------------------------------------------------------------- bad data, refused before work

def _drop_train_class(root):
    shutil.rmtree(root / "train" / "cat")
    return "train/cat"


def _drop_test_class(root):
    shutil.rmtree(root / "test" / "truck")
    return "test/truck"


def _empty_class(root):
    for f in (root / "test" / "dog").iterdir():
        f.unlink()
    return "test/dog"


def _truncated_jpeg(root):
    f = sorted((root / "train" / "bird").iterdir())[0]
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    return f"train/bird/{f.name}"


def _not_a_jpeg(root):
    f = sorted((root / "test" / "ship").iterdir())[1]
    f.write_bytes(b"<html>not an image</html>")
    return f"test/ship/{f.name}"


def _empty_jpeg(root):
    f = sorted((root / "train" / "frog").iterdir())[0]
    f.write_bytes(b"")
    return f"train/frog/{f.name}"


def _stray_folder(root):
    (root / "train" / "unicorn").mkdir()
    return "train/unicorn"


def _stray_bmp(root):
    """A file torchvision's ImageFolder would decode but the check and the fingerprint never saw."""
    from PIL import Image

    Image.new("RGB", (32, 32)).save(root / "train" / "airplane" / "0000a.bmp")
    return "train/airplane/0000a.bmp"


def _folder_named_jpg(root):
    (root / "test" / "cat" / "x.jpg").mkdir()
    return "test/cat/x.jpg"


def _broken_link(root):
    (root / "train" / "deer" / "gone.jpg").symlink_to(root / "nowhere.jpg")
    return "train/deer/gone.jpg"


def _unreadable_jpeg(root):
    f = sorted((root / "test" / "frog").iterdir())[0]
    f.chmod(0)
    if os.access(f, os.R_OK):  # root reads any file: make it unreadable another way
        f.unlink()
        os.mkfifo(f)  # a name that cannot be read as an image file
    return f"test/frog/{f.name}"


def _wrong_size(root):
    from PIL import Image

    f = sorted((root / "train" / "horse").iterdir())[0]
    Image.open(f).convert("RGB").resize((48, 48)).save(f, "JPEG")
    return f"train/horse/{f.name}"


def _grayscale(root):
    from PIL import Image

    f = sorted((root / "test" / "ship").iterdir())[0]
    Image.open(f).convert("L").save(f, "JPEG")
    return f"test/ship/{f.name}"


@pytest.mark.parametrize("damage", [_drop_train_class, _drop_test_class, _empty_class, _truncated_jpeg,
                                    _not_a_jpeg, _empty_jpeg, _stray_folder, _stray_bmp, _folder_named_jpg,
                                    _broken_link, _unreadable_jpeg, _wrong_size, _grayscale],
                         ids=lambda f: f.__name__[1:])
def test_bad_cifar_root_is_refused_naming_the_folder_or_file(tiny_cifar, isolated, monkeypatch, capsys, damage):
    book, cache_root = isolated
    named = damage(tiny_cifar)
    monkeypatch.setenv("MEMLAB_DATA_ROOT", str(tiny_cifar.parent))
    err = _refused(capsys, ["run", "02_sde", "--profile", "smoke"], book, cache_root)
    assert "parameter 'data_root'" in err and str(tiny_cifar / named) in err


@pytest.mark.parametrize("content, words", [("", "is empty"), ("= T =\n a b c\n", "is too short (6 words")])
def test_empty_or_short_wikitext_is_refused_naming_the_file(tmp_path, isolated, monkeypatch, capsys, content,
                                                            words):
    book, cache_root = isolated
    root = tmp_path / "data"
    (root / "wikitext-2").mkdir(parents=True)
    real = require_data("wikitext-2")
    shutil.copy(real / "test.txt", root / "wikitext-2" / "test.txt")
    (root / "wikitext-2" / "valid.txt").write_text(content)
    monkeypatch.setenv("MEMLAB_DATA_ROOT", str(root))
    err = _refused(capsys, ["run", "05_capacity", "--profile", "smoke"], book, cache_root)
    assert str(root / "wikitext-2" / "valid.txt") in err and words in err


@pytest.mark.parametrize("chapter, what", [("02_sde", "MEMLAB_DATA_ROOT is unset"),
                                           ("03_canary_audit", "WikiText-2 valid split not found")])
def test_no_data_offline_stops_saying_what_to_set(isolated, capsys, chapter, what):
    book, cache_root = isolated
    err = _refused(capsys, ["run", chapter, "--profile", "smoke"], book, cache_root)
    assert what in err and "MEMLAB_DATA_ROOT" in err and "--allow-download" in err


def test_missing_class_is_refused_by_the_loader_too(tiny_cifar, isolated):
    """Outside memlab run (a notebook in Jupyter) the loader itself refuses: labels never shift."""
    shutil.rmtree(tiny_cifar / "test" / "horse")
    with pytest.raises(ConfigError, match=r"class folder '.*test/horse' is missing"):
        vision.load_cifar("test", root=tiny_cifar)


def test_decoded_arrays_follow_the_folder_content(tiny_cifar, isolated, monkeypatch):
    x, y = vision.load_raw("test", root=tiny_cifar)
    assert sorted(set(y.tolist())) == list(range(10)) and len(y) == 20
    decodes = []
    real_decode = vision.decode_image_folder
    monkeypatch.setattr(vision, "decode_image_folder", lambda f: decodes.append(f) or real_decode(f))
    vision.load_raw("test", root=tiny_cifar)
    assert decodes == []  # same content: from the array cache
    src = sorted((tiny_cifar / "train" / "cat").iterdir())[0]
    shutil.copy(src, tiny_cifar / "test" / "cat" / "extra.jpg")  # one image more
    x2, y2 = vision.load_raw("test", root=tiny_cifar)
    assert len(decodes) == 1 and len(y2) == 21 and int((y2 == CLASSES.index("cat")).sum()) == 3
    shutil.rmtree(tiny_cifar / "test" / "deer")
    with pytest.raises(ConfigError, match="test/deer"):  # never the stale 10-class arrays
        vision.load_raw("test", root=tiny_cifar)


def test_undecodable_jpeg_is_named(tiny_cifar, isolated):
    f = sorted((tiny_cifar / "train" / "dog").iterdir())[0]
    data = bytearray(f.read_bytes())
    data[2:40] = b"\x00" * 38  # markers at both ends intact, the header inside broken
    f.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=f"image '{f}' cannot be decoded"):
        vision.load_raw("train", root=tiny_cifar)


# ----------------------------------------------------------------------------- hub and GPU needs

def test_paper_profile_without_gpu_is_refused_unless_allowed(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("MEMLAB_ALLOW_CPU", raising=False)
    monkeypatch.delenv("MEMLAB_DEVICE", raising=False)
    with pytest.raises(ConfigError, match=r"parameter 'profile': 'paper' needs a CUDA GPU.*--allow-cpu"):
        preflight.check_gpu("paper")
    assert "allowed by --allow-cpu" in preflight.check_gpu("paper", allow_cpu=True)
    assert preflight.check_gpu("cpu") == "cpu or gpu"


@pytest.mark.parametrize("argv, message", [
    ([], "parameter 'base_model': 'GSAI-ML/LLaDA-8B-Base' is neither a local folder nor in the Hugging Face "
         "cache"),
    (["--allow-download"], "parameter 'base_model': downloading 'GSAI-ML/LLaDA-8B-Base' needs a pinned "
                           "revision"),
    (["--allow-download", "-p", "base_model", "GSAI-ML/LLaDA-8B-Base@0123abc", "-p", "trust_remote_code",
      "true"], "parameter 'trust_remote_code': 'GSAI-ML/LLaDA-8B-Base' ships its own modelling code; run it only "
               "by naming it: --trust-remote-code GSAI-ML/LLaDA-8B-Base"),
])
def test_hub_models_are_checked_before_work(isolated, monkeypatch, capsys, argv, message):
    book, cache_root = isolated
    root = require_data("wikitext-2").parent
    monkeypatch.setenv("MEMLAB_DATA_ROOT", str(root))
    monkeypatch.setenv("HF_HOME", str(book.parent / "hf"))  # an empty hub cache
    monkeypatch.delenv("MEMLAB_TRUST_REMOTE_CODE", raising=False)
    err = _refused(capsys, ["run", "04_qskew", "--profile", "smoke", "-p", "backbone", "llada"] + argv,
                   book, cache_root)
    assert message in err


def test_remote_code_runs_only_for_a_named_model(monkeypatch):
    from memlab.models import hub

    monkeypatch.setenv("MEMLAB_TRUST_REMOTE_CODE", "org/a,org/b")
    assert hub.check_remote_code("org/a@123", True) and not hub.check_remote_code("org/c", False)
    with pytest.raises(ConfigError, match="--trust-remote-code org/c"):
        hub.check_remote_code("org/c", True)


# ----------------------------------------------------------------------------- failures mid-run, named

FAKE_SPEC = '''
from memlab.core.config import Param
SPEC = {"seed": Param(int, 0, low=0), "fail": Param(str, "no", choices=("no", "raise", "abort", "kill", "net"))}
'''

FAKE_NOTEBOOK = '''
# %% tags=["parameters"]
profile: str = "cpu"
params: dict = {}

# %%
import sys
sys.path.insert(0, {spec_dir!r})
import failsafe_spec
from memlab.core import config, netguard, results
from memlab.data import download
cfg = config.resolve_spec("fake", failsafe_spec.SPEC, profile, **params)
run = results.Run(cfg)

# %%
import os, signal, socket
if cfg.fail == "raise":
    raise RuntimeError("planned failure")
if cfg.fail in ("abort", "kill"):
    os.kill(os.getpid(), signal.SIGABRT if cfg.fail == "abort" else signal.SIGKILL)
if cfg.fail == "net":
    socket.getaddrinfo("example.org", 443)
run.record(allow_download=download.allow_download(), guard=netguard.active())

# %%
run.save(claims=[])  # a cell after the failing one: a dead kernel must be reported at the cell it ran
'''


@pytest.fixture
def fake_chapter(tmp_path, monkeypatch):
    install_fake_chapter(tmp_path, monkeypatch, FAKE_SPEC, FAKE_NOTEBOOK, module="failsafe_spec")
    monkeypatch.delenv("MEMLAB_OFFLINE", raising=False)  # memlab run must turn the guard on itself
    return tmp_path


FAILURES = [
    ("raise", "RuntimeError: planned failure"),
    ("abort", "the kernel aborted (SIGABRT)"),
    ("kill", "the kernel killed (SIGKILL, e.g. out of memory)"),
    ("net", "ConnectionRefusedError: memlab offline mode: name lookup of 'example.org' refused"),
]


def test_runs_publish_failures_are_named_and_the_book_is_untouched(fake_chapter, capsys):
    """One published run, then every failure kind (one kernel each), then a run with --allow-download."""
    book = fake_chapter / "book"
    book.mkdir()
    dead = book / ".staging-fake.tmp-999999999-0123abcd"  # left by a killed run
    dead.mkdir()
    assert cli.main(["run", "fake", "--profile", "smoke"]) == 0
    res = json.loads((book / "results" / "fake.json").read_text())
    assert res["metrics"] == {"allow_download": False, "guard": True}  # the guard is on at smoke
    assert not dead.exists() and not list(book.glob(".staging-*"))
    before = _tree_hash(book)
    failed = fake_chapter / "_build" / "failed" / "fake.ipynb"
    for mode, what in FAILURES:
        capsys.readouterr()
        failed.unlink(missing_ok=True)
        assert cli.main(["run", "fake", "--profile", "smoke", "-p", "fail", mode]) == 1, mode
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("memlab:")]
        assert len(err) == 1 and what in err[0], err
        # cell 4 is In [4] of the saved notebook (papermill's injected parameters cell is In [2])
        assert "chapter 'fake' failed in cell 4 (`import os, signal, socket`)" in err[0], err
        assert f"failed notebook: {failed}" in err[0] and failed.exists()  # saved for a dead kernel too
        assert _tree_hash(book) == before, mode  # previous results untouched, no staging left
        if mode == "abort":  # the kernel's own stderr: faulthandler's stack names the line that died
            log = failed.with_suffix(".kernel.log")
            assert f"kernel log: {log}" in err[0]
            assert "Fatal Python error: Aborted" in log.read_text(errors="replace")
    assert cli.main(["run", "fake", "--profile", "smoke", "--allow-download"]) == 0
    res = json.loads((book / "results" / "fake.json").read_text())
    assert res["metrics"] == {"allow_download": True, "guard": False}  # the flag reaches the loaders


# ----------------------------------------------------------------------------- downloads, without a network

class FakeCIFAR10:
    calls: list = []

    def __init__(self, root, train=True, download=False):
        FakeCIFAR10.calls.append((root, train, download))
        folder = Path(root) / "cifar-10-batches-py"
        if download:
            folder.mkdir(parents=True, exist_ok=True)
        elif not folder.is_dir():
            raise RuntimeError("Dataset not found or corrupted. You can use download=True to download it")
        n = 20 if train else 10
        self.data = np.zeros((n, 32, 32, 3), dtype=np.uint8)
        self.targets = [i % 10 for i in range(n)]


def test_cifar_download_is_wired_and_reused(isolated, monkeypatch, capsys):
    import torchvision

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", FakeCIFAR10)
    FakeCIFAR10.calls = []
    with pytest.raises(ConfigError, match="--allow-download"):
        vision.load_cifar("train")
    monkeypatch.setenv("MEMLAB_ALLOW_DOWNLOAD", "1")  # what memlab run --allow-download sets
    x, y = vision.load_cifar("train")
    target = Path(os.environ["MEMLAB_DOWNLOAD_DIR"])
    assert FakeCIFAR10.calls == [(str(target), True, True)] and x.shape == (20, 3, 32, 32)
    assert f"downloaded cifar10 into {target / 'cifar-10-batches-py'}" in capsys.readouterr().out
    monkeypatch.setenv("MEMLAB_ALLOW_DOWNLOAD", "0")
    vision.load_cifar("test")  # fetched once, then reused without the network
    assert FakeCIFAR10.calls[-1] == (str(target), False, False)
    assert "torchvision copy" in vision.check_cifar("cifar10")


class _Response(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@pytest.mark.parametrize("tamper", [False, True])
def test_wikitext_download_is_checksummed(isolated, monkeypatch, capsys, tamper):
    real = (require_data("wikitext-2") / "valid.txt").read_bytes()
    asked = []

    def opener(url):
        asked.append(url)
        return _Response(real + (b"x" if tamper else b""))

    monkeypatch.setattr(text, "_urlopen", opener)
    monkeypatch.setenv("MEMLAB_ALLOW_DOWNLOAD", "1")
    dest = Path(os.environ["MEMLAB_DOWNLOAD_DIR"]) / "wikitext-2"
    if tamper:
        with pytest.raises(ConfigError, match="does not match its pinned SHA-256"):
            text.load_wikitext2("valid")
        assert not dest.exists() or not any(dest.iterdir())  # nothing kept, no temporary file
    else:
        assert text.load_wikitext2("valid") == real.decode("utf-8")
        assert (dest / "valid.txt").read_bytes() == real
        assert f"downloaded WikiText-2 valid into {dest / 'valid.txt'}" in capsys.readouterr().err
        monkeypatch.setattr(text, "_urlopen", lambda url: pytest.fail("fetched twice"))
        monkeypatch.setenv("MEMLAB_ALLOW_DOWNLOAD", "0")
        assert text.load_wikitext2("valid") == real.decode("utf-8")  # reused offline
    assert asked == [text.WIKITEXT_SOURCES["valid"][0]] and "/37ce9402ff0cae48d764d7788810fd2ed8238b25/" in asked[0]


def test_preflight_fetch_downloads_before_the_kernel(isolated, monkeypatch):
    import torchvision

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", FakeCIFAR10)
    FakeCIFAR10.calls = []
    assert preflight.fetch("02_sde", {}, allow_download=False) == []
    assert preflight.fetch("02_sde", {}, allow_download=True) == ["cifar10"]
    assert [c[2] for c in FakeCIFAR10.calls] == [True, True]

    def offline(url):
        raise OSError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(text, "_urlopen", offline)
    with pytest.raises(ConfigError, match=r"downloading the data of 05_capacity failed \(OSError"):
        preflight.fetch("05_capacity", {}, allow_download=True)


# ----------------------------------------------------------------------------- side doors

def test_outside_memlab_run_outputs_go_to_scratch(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MEMLAB_OUTPUT_DIR", raising=False)
    monkeypatch.setattr(results, "repo_root", lambda: tmp_path)
    monkeypatch.setattr(results, "_SCRATCH_SAID", [])
    assert results.output_dir() == tmp_path / "_build" / "scratch"
    assert results.results_path("x") == tmp_path / "_build" / "scratch" / "results" / "x.json"
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [f"memlab: not run by 'memlab run': outputs go to {tmp_path / '_build' / 'scratch'} "
                   "(the published book/ is left alone)"]


@pytest.mark.parametrize("call", [
    lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("192.0.2.1", 53)),
    lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendmsg([b"x"], [], 0, ("192.0.2.1", 53)),
    lambda: socket.socket().connect_ex(("192.0.2.1", 80)),
    lambda: __import__("_socket").socket().connect(("192.0.2.1", 80)),
    lambda: socket.getaddrinfo("example.org", 443),
    lambda: socket.gethostbyname("example.org"),
    lambda: socket.gethostbyaddr("192.0.2.1"),
], ids=["udp-sendto", "udp-sendmsg", "connect_ex", "native-connect", "getaddrinfo", "gethostbyname",
        "gethostbyaddr"])
def test_guard_refuses_udp_native_connect_and_dns(call):
    was_on = netguard.active()  # MEMLAB_OFFLINE=1 sessions keep their guard after this test
    netguard.install()
    try:
        with pytest.raises(ConnectionRefusedError, match="memlab offline mode"):
            call()
        # loopback still works: a UDP datagram to ourselves
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        s.sendto(b"ok", s.getsockname())
        assert s.recv(2) == b"ok"
        s.close()
        assert socket.getaddrinfo("localhost", 80)
    finally:
        if not was_on:
            netguard.uninstall()


@pytest.mark.parametrize("flags, rc", [([], 2), (["--allow-cpu"], 0)])
def test_paper_without_gpu_through_the_cli(fake_chapter, monkeypatch, capsys, flags, rc):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("MEMLAB_ALLOW_CPU", raising=False)
    monkeypatch.delenv("MEMLAB_DEVICE", raising=False)
    assert cli.main(["run", "fake", "--profile", "paper", "--dry-run"] + flags) == rc
    err = capsys.readouterr().err.strip()
    if rc:
        assert err.startswith("memlab: error: parameter 'profile': 'paper' needs a CUDA GPU") and "\n" not in err
    assert "MEMLAB_ALLOW_CPU" not in os.environ  # the flag lived only for the run
    assert not (fake_chapter / "book").exists()
