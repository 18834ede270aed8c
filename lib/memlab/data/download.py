"""Whether loaders may reach the network, and where downloads go (no heavy imports: kernels read it early).

``memlab run --allow-download`` sets ``MEMLAB_ALLOW_DOWNLOAD=1`` for the
chapter's kernel, so every loader a notebook calls (CIFAR through
torchvision, WikiText-2, hub models) sees the same flag without a parameter.
"""
from __future__ import annotations

import os
from pathlib import Path


def allow_download(download: bool | None = None) -> bool:
    """``download`` when given, else whether ``MEMLAB_ALLOW_DOWNLOAD`` is 1."""
    if download is not None:
        return bool(download)
    return os.environ.get("MEMLAB_ALLOW_DOWNLOAD", "0").lower() in ("1", "true", "yes")


def download_dir() -> Path:
    """Where downloaded data sets go: ``$MEMLAB_DOWNLOAD_DIR``, default ``<repo>/data`` (ignored by git)."""
    from memlab.core.config import repo_root

    env = os.environ.get("MEMLAB_DOWNLOAD_DIR")
    return Path(env).expanduser() if env else repo_root() / "data"
