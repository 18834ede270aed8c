"""``scripts/torch_install.py``: how ``scripts/setup.sh`` installs torch and torchvision.

A torch already at the pinned version is kept whatever its build (``+cpu``, ``+cu130``, PyPI's plain
version); another version or none is (re)installed; ``MEMLAB_TORCH=cpu`` installs from PyTorch's CPU
index. Nothing here downloads: the plan is computed from installed versions, and the end-to-end test
reads fake ``*.dist-info`` folders in a throwaway directory.
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "torch_install.py"
CPU_INDEX = ["--index-url", "https://download.pytorch.org/whl/cpu"]


def _load():
    spec = importlib.util.spec_from_file_location("torch_install", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ti = _load()
PINS = ti.pins()
TORCH, VISION = PINS["torch"], PINS["torchvision"]
INSTALL_BOTH = [f"torch=={TORCH}", f"torchvision=={VISION}"]


def test_pins_are_pyprojects_and_setup_sh_uses_the_helper():
    text = (REPO / "pyproject.toml").read_text()
    assert f'"torch=={TORCH}"' in text and f'"torchvision=={VISION}"' in text
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert "scripts/torch_install.py" in setup and "torch_install.py --constraints" in setup
    assert not re.search(r"torch==\d", setup), "setup.sh must take the pins from pyproject.toml"


@pytest.mark.parametrize("build", ["", "+cpu", "+cu130"])
@pytest.mark.parametrize("env", [{}, {"MEMLAB_TORCH": "cpu"}, {"MEMLAB_TORCH": "pypi"}])
def test_a_pinned_torch_of_any_build_is_kept(build, env):
    installed = {"torch": TORCH + build, "torchvision": VISION + build}
    args, note = ti.plan(installed, PINS, env)
    assert args == [] and "keeping" in note
    # ... and the rest of the requirements are resolved around exactly that build
    assert ti.constraints(installed, PINS) == [f"torch=={TORCH}{build}", f"torchvision=={VISION}{build}"]


def test_cpu_opt_in_does_not_replace_a_pinned_cuda_build_but_says_how_to_switch():
    args, note = ti.plan({"torch": TORCH + "+cu130", "torchvision": VISION + "+cu130"}, PINS,
                         {"MEMLAB_TORCH": "cpu"})
    assert args == [] and "remove .venv" in note


@pytest.mark.parametrize("torch", [None, "2.13.0+cpu", "2.13.0", "9.9.9+cu130"])
def test_a_missing_or_other_torch_is_installed_from_pypi_by_default(torch):
    for env in ({}, {"MEMLAB_TORCH": ""}, {"MEMLAB_TORCH": "pypi"}):
        args, _ = ti.plan({"torch": torch, "torchvision": None}, PINS, env)
        assert args == INSTALL_BOTH  # exactly today's command: no index of PyTorch's own
    assert ti.constraints({"torch": torch, "torchvision": None}, PINS) == []


@pytest.mark.parametrize("torch", [None, "2.13.0", "2.13.0+cu130"])
def test_cpu_opt_in_installs_from_pytorchs_cpu_index(torch):
    args, note = ti.plan({"torch": torch, "torchvision": None}, PINS, {"MEMLAB_TORCH": "cpu"})
    assert args == INSTALL_BOTH + CPU_INDEX
    assert "CPU build" in note


@pytest.mark.parametrize("build, index", [("+cpu", CPU_INDEX), ("+cu130", ["--index-url",
                                          "https://download.pytorch.org/whl/cu130"]), ("", [])])
def test_a_kept_torch_gets_a_torchvision_of_its_own_build(build, index):
    args, note = ti.plan({"torch": TORCH + build, "torchvision": "0.28.0"}, PINS, {})
    assert args == [f"torchvision=={VISION}", *index]
    assert ti.constraints({"torch": TORCH + build, "torchvision": "0.28.0"}, PINS) == [f"torch=={TORCH}{build}"]


def test_an_unknown_setting_is_refused_with_the_choices():
    with pytest.raises(SystemExit, match="MEMLAB_TORCH='cuda' is not one of pypi, cpu"):
        ti.plan({"torch": None, "torchvision": None}, PINS, {"MEMLAB_TORCH": "cuda"})


def _fake_site(root: Path, **versions: str) -> Path:
    for name, version in versions.items():
        info = root / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return root


def _run(site: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    # -S: no site-packages, so only the fake distributions on PYTHONPATH are seen
    full = {k: v for k, v in os.environ.items() if k != "MEMLAB_TORCH"} | {"PYTHONPATH": str(site)} | env
    return subprocess.run([sys.executable, "-S", str(SCRIPT), *args], env=full, capture_output=True,
                          text=True, timeout=60)


def test_the_script_reads_installed_versions_and_prints_pip_arguments(tmp_path):
    site = _fake_site(tmp_path / "cu", torch=TORCH + "+cu130", torchvision=VISION + "+cu130")
    kept = _run(site)
    assert kept.returncode == 0 and kept.stdout == "" and f"keeping the installed torch {TORCH}+cu130" in kept.stderr
    cons = _run(site, "--constraints")
    assert cons.stdout.split() == [f"torch=={TORCH}+cu130", f"torchvision=={VISION}+cu130"]

    empty = tmp_path / "empty"
    empty.mkdir()
    assert _run(empty).stdout.split() == INSTALL_BOTH
    assert _run(empty, MEMLAB_TORCH="cpu").stdout.split() == INSTALL_BOTH + CPU_INDEX
    assert _run(empty, "--constraints").stdout.strip() == ""
    refused = _run(empty, MEMLAB_TORCH="gpu")
    assert refused.returncode != 0 and "MEMLAB_TORCH='gpu'" in refused.stderr
