"""Decide how scripts/setup.sh installs torch and torchvision, without downloading anything.

The pins come from pyproject.toml. A torch (and torchvision) already installed at the pinned version
is kept whatever its build: ``2.14.1``, ``2.14.1+cpu`` and ``2.14.1+cu130`` all count as pinned (the
local label after ``+`` names the build), so a CPU or CUDA build someone installed on purpose is not
replaced by PyPI's default. ``MEMLAB_TORCH`` chooses where a missing or other-version torch comes from:

* unset, empty or ``pypi`` -- PyPI's default build (on Linux x86-64 the CUDA build with its NVIDIA
  libraries; what CI installs);
* ``cpu`` -- PyTorch's CPU-only build from https://download.pytorch.org/whl/cpu, PyTorch's documented
  ``pip install torch==V torchvision==W --index-url https://download.pytorch.org/whl/cpu``.

Usage (setup.sh runs both with the venv's Python, which is the one whose packages are read):

* ``python scripts/torch_install.py`` prints the arguments of the ``pip install`` to run, one a line,
  and nothing when the pinned torch and torchvision are already there; what it decided goes to stderr.
* ``python scripts/torch_install.py --constraints`` prints pip constraints holding torch and
  torchvision to exactly the installed builds, for the install of the rest of the requirements.
"""
from __future__ import annotations

import os
import re
import sys
from importlib import metadata
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
PACKAGES = ("torch", "torchvision")
TORCH_INDEX = "https://download.pytorch.org/whl"
SETTING = "MEMLAB_TORCH"
SOURCES = ("pypi", "cpu")


def pins(pyproject: Path = PYPROJECT) -> dict[str, str]:
    """The ``==`` pins of torch and torchvision in pyproject.toml's dependencies."""
    text = pyproject.read_text()
    found = {name: m.group(1) for name in PACKAGES
             if (m := re.search(rf'^\s*"{name}==([^";\s]+)"', text, re.MULTILINE))}
    missing = [name for name in PACKAGES if name not in found]
    if missing:
        raise SystemExit(f"torch_install: no '==' pin for {', '.join(missing)} in {pyproject}")
    return found


def installed_versions() -> dict[str, str | None]:
    """The installed version of each package (``None`` when it is not installed)."""
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def public(version: str) -> str:
    """The version without its local label: ``2.14.1+cu130`` -> ``2.14.1``."""
    return version.split("+", 1)[0]


def local_label(version: str) -> str:
    """The local label naming the build: ``2.14.1+cu130`` -> ``cu130``; ``""`` for PyPI's plain version."""
    return version.split("+", 1)[1] if "+" in version else ""


def is_pinned(version: str | None, pin: str) -> bool:
    return version is not None and public(version) == pin


def source(env: dict[str, str]) -> str:
    value = env.get(SETTING, "").strip().lower() or "pypi"
    if value not in SOURCES:
        raise SystemExit(f"setup: {SETTING}={env[SETTING]!r} is not one of {', '.join(SOURCES)} "
                         f"(unset means pypi)")
    return value


def index_args(label: str) -> list[str]:
    """pip's index for a build label: PyTorch's own index for ``cpu`` / ``cuNNN``, PyPI otherwise."""
    if re.fullmatch(r"cpu|cu\d+|rocm[\d.]+|xpu", label):
        return ["--index-url", f"{TORCH_INDEX}/{label}"]
    return []


def plan(installed: dict[str, str | None], pinned: dict[str, str], env: dict[str, str]) -> tuple[list[str], str]:
    """The ``pip install`` arguments (empty: nothing to install) and a line saying why."""
    wanted = source(env)
    torch, vision = installed["torch"], installed["torchvision"]
    if is_pinned(torch, pinned["torch"]):
        if is_pinned(vision, pinned["torchvision"]):
            note = f"keeping the installed torch {torch} and torchvision {vision} (pinned versions)"
            if wanted == "cpu" and local_label(torch) != "cpu":
                note += (f"; {SETTING}=cpu applies to a fresh install: remove .venv (or pip uninstall "
                         "torch torchvision) to switch to the CPU build")
            return [], note
        # torchvision from the index of the kept torch's build, so the two builds match
        args = [f"torchvision=={pinned['torchvision']}", *index_args(local_label(torch))]
        return args, f"keeping the installed torch {torch}; installing torchvision {pinned['torchvision']} to match"
    args = [f"torch=={pinned['torch']}", f"torchvision=={pinned['torchvision']}"]
    if wanted == "cpu":
        args += index_args("cpu")
    have = f"torch {torch} is installed" if torch else "torch is not installed"
    build = "PyTorch's CPU build" if wanted == "cpu" else "PyPI's default build"
    return args, f"{have}; installing torch {pinned['torch']}, torchvision {pinned['torchvision']} ({build})"


def constraints(installed: dict[str, str | None], pinned: dict[str, str]) -> list[str]:
    """Constraint lines holding each installed pinned package to its exact installed build."""
    return [f"{name}=={installed[name]}" for name in PACKAGES if is_pinned(installed[name], pinned[name])]


def main(argv: list[str]) -> int:
    pinned = pins()
    installed = installed_versions()
    if argv[1:] == ["--constraints"]:
        print("\n".join(constraints(installed, pinned)))
        return 0
    if argv[1:]:
        print(f"usage: {argv[0]} [--constraints]", file=sys.stderr)
        return 2
    args, note = plan(installed, pinned, dict(os.environ))
    print(f"setup: {note}", file=sys.stderr)
    if args:
        print("\n".join(args))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
