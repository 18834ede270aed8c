"""memlab acts on the project of the folder it runs in (memlab.core.config.repo_root).

The project is the nearest folder at or above the working directory holding pyproject.toml and
book/; outside every project memlab falls back to the repository it was installed from and says so
in one line. Two clones sharing one install each build their exercises and run their chapters into
themselves, never into the clone the package came from.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from memlab.core import config

REPO = Path(__file__).resolve().parents[1]
MEMLAB = [str(Path(sys.executable).parent / "memlab")]  # the shared install's command


def _project(folder: Path) -> Path:
    (folder / "book").mkdir(parents=True)
    (folder / "pyproject.toml").write_text("[tool.memlab]\n")
    return folder


needs_clone_install = pytest.mark.skipif(config.installed_repository() != REPO,
                                         reason="memlab is not installed editable from this checkout")


@pytest.fixture
def notices(monkeypatch):
    monkeypatch.setattr(config, "_ROOT_NOTICES", set())


def test_the_project_is_found_upward_from_the_working_directory(tmp_path, monkeypatch, capsys, notices):
    monkeypatch.chdir(REPO / "lib" / "memlab")
    assert config.repo_root() == REPO
    course = _project(tmp_path / "course")
    (course / "assignments" / "deep").mkdir(parents=True)
    monkeypatch.chdir(course / "assignments" / "deep")
    assert config.repo_root() == course.resolve()
    assert capsys.readouterr().err == "", "inside a project there is no notice"


@needs_clone_install
def test_outside_a_project_it_falls_back_with_one_notice(tmp_path, monkeypatch, capsys, notices):
    half = tmp_path / "half"  # pyproject.toml without book/ is not a memlab project
    half.mkdir()
    (half / "pyproject.toml").write_text("[project]\nname = 'other'\n")
    monkeypatch.chdir(half)
    assert config.repo_root() == config.installed_repository() == REPO
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(half.resolve()) in err and str(REPO) in err, err
    assert "installed from" in err
    assert config.repo_root() == REPO and capsys.readouterr().err == "", "the notice is said once"


def test_without_an_installed_repository_it_uses_the_working_directory(tmp_path, monkeypatch, capsys, notices):
    monkeypatch.setattr(config, "installed_repository", lambda: None)  # memlab installed from a wheel
    monkeypatch.chdir(tmp_path)
    assert config.repo_root() == tmp_path.resolve()
    assert "using the working directory" in capsys.readouterr().err


# ----------------------------------------------------------------------------- two clones, one install

TINY_CHAPTER = '''# %% tags=["parameters"]
profile: str = "cpu"  # smoke | cpu | paper
params: dict = {}  # overrides

# %%
from memlab.core import config, results

cfg = config.resolve("05_capacity", profile=profile, **params)
run = results.Run(cfg)
print("ROOT=" + str(config.repo_root()))
run.save(claims=[])
'''


def _clone(folder: Path) -> Path:
    """A clone with its own exercises/ (one master), book/, a tiny chapter 5 and fake WikiText-2
    in its data/ (where a clone's downloads go): no lib/, so memlab can only be the shared install."""
    _project(folder)
    (folder / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())
    (folder / "exercises").mkdir()
    (folder / "exercises" / "02_sde.py").write_text((REPO / "exercises" / "02_sde.py").read_text())
    (folder / "notebooks").mkdir()
    (folder / "notebooks" / "05_capacity.py").write_text(TINY_CHAPTER)
    (folder / "data" / "papers").mkdir(parents=True)
    paper = "data/papers/05_capacity.yaml"
    (folder / paper).write_text((REPO / paper).read_text())
    text = folder / "data" / "wikitext-2"
    text.mkdir()
    words = " ".join(f"w{i % 97}" for i in range(3000))  # enough words for the preflight, not the real set
    for split in ("valid", "test"):
        (text / f"{split}.txt").write_text(words + "\n")
    return folder


def _memlab(args: list[str], cwd: Path, tmp: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("MEMLAB_DATA_ROOT", "MEMLAB_CACHE",
                                                            "MEMLAB_DOWNLOAD_DIR", "MEMLAB_OUTPUT_DIR")}
    env.update(OMP_NUM_THREADS="1", MEMLAB_PROGRESS="0", MEMLAB_CACHE=str(tmp / "cache"))
    return subprocess.run(MEMLAB + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@needs_clone_install
def test_two_clones_sharing_one_install_build_and_run_in_their_own_folders(tmp_path):
    repo_build = REPO / "_build" / "exercises" / "02_sde" / "02_sde-autograder.zip"
    before = repo_build.stat().st_mtime_ns if repo_build.exists() else None
    repo_page = REPO / "book" / "chapters" / "05_capacity.ipynb"
    page_before = repo_page.read_bytes() if repo_page.exists() else None
    clones = [_clone(tmp_path / name) for name in ("clone-a", "clone-b")]
    t0 = time.perf_counter()
    for clone in clones:
        built = _memlab(["exercises", "build", "02_sde"], clone / "exercises", tmp_path)  # from a subfolder
        assert built.returncode == 0, built.stderr
        assert "no project folder" not in built.stderr
        assert (clone / "_build" / "exercises" / "02_sde" / "02_sde-autograder.zip").is_file()
        assert (clone / "_build" / "exercises" / "memlab-course" / "assignments" / "02_sde.ipynb").is_file()
        assert str(clone / "_build") in built.stdout and str(REPO / "_build") not in built.stdout
        ran = _memlab(["run", "05_capacity", "--profile", "smoke"], clone, tmp_path)
        assert ran.returncode == 0, ran.stderr[-2000:]
        page = nbformat.read(str(clone / "book" / "chapters" / "05_capacity.ipynb"), as_version=4)
        printed = "".join(o.get("text", "") for c in page.cells for o in c.get("outputs", []))
        assert f"ROOT={clone}" in printed, printed
        assert (clone / "book" / "results" / "05_capacity.json").is_file()
    print(f"project root: two clones built and ran in {time.perf_counter() - t0:.1f} s")
    after = repo_build.stat().st_mtime_ns if repo_build.exists() else None
    assert after == before, "a clone's build wrote into the installed repository's _build/"
    page_after = repo_page.read_bytes() if repo_page.exists() else None
    assert page_after == page_before, "a clone's run published into the installed repository's book/"
