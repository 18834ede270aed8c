"""Shared fixtures: a scratch cache per test session, helpers for fake chapters."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


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
