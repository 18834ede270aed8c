"""Hugging Face hub models: pinned revisions, remote code only by name, checked before any work.

A model is named by a local folder, or by a hub id with an optional pinned
revision, ``org/name@<commit>``. A hub model is used only when

- it is already in the local Hugging Face cache (then the cached snapshot's
  commit is the revision, so what loads is exactly what is on disk), or
- downloads are allowed (``--allow-download``, i.e. ``MEMLAB_ALLOW_DOWNLOAD=1``)
  and the name carries a revision (``@<commit>``), so a later run gets the
  same weights and code.

A checkpoint that ships its own modelling code (``trust_remote_code``) runs it
only when the user named that model: ``memlab run ... --trust-remote-code
org/name`` (``MEMLAB_TRUST_REMOTE_CODE``, comma-separated names).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from memlab.core.config import ConfigError, path_kind


@dataclass(frozen=True)
class HubRef:
    """A resolved model: a local folder (``revision`` None) or a hub id at a commit."""

    name: str
    revision: str | None
    local: bool

    def kwargs(self) -> dict:
        """Keyword arguments for ``from_pretrained`` (the revision, when on the hub)."""
        return {} if self.local or self.revision is None else {"revision": self.revision}


def split_revision(spec: str) -> tuple[str, str | None]:
    """``"org/name@abc123"`` -> ``("org/name", "abc123")``; no ``@`` -> ``(spec, None)``."""
    if "@" in spec and path_kind(spec) is None:
        name, rev = spec.rsplit("@", 1)
        return name, rev or None
    return spec, None


def _download_allowed(allow_download: bool | None) -> bool:
    from memlab.data.download import allow_download as env_allows

    return env_allows(allow_download)


def cached_revision(name: str, revision: str | None = None) -> str | None:
    """The commit of ``name`` in the local Hugging Face cache (``revision`` or main's), or None."""
    try:
        from huggingface_hub import try_to_load_from_cache

        hit = try_to_load_from_cache(name, "config.json", revision=revision)
    except Exception:  # noqa: BLE001 - a malformed repo id is simply not cached
        return None
    if not isinstance(hit, str):
        return None
    return Path(hit).parent.name  # .../snapshots/<commit>/config.json


def resolve(spec: str, param: str, allow_download: bool | None = None) -> HubRef:
    """Where ``spec`` loads from, or ConfigError naming ``param`` (before any weights are read)."""
    if path_kind(spec) == "folder":
        return HubRef(str(Path(spec).expanduser()), None, True)
    name, rev = split_revision(spec)
    cached = cached_revision(name, rev)
    if cached is not None:
        return HubRef(name, cached, False)
    if not _download_allowed(allow_download):
        raise ConfigError(f"parameter {param!r}: {spec!r} is neither a local folder nor in the Hugging Face "
                          "cache; pass --allow-download (with a pinned revision, NAME@<commit>) or a local folder")
    if rev is None:
        raise ConfigError(f"parameter {param!r}: downloading {name!r} needs a pinned revision; give it as "
                          f"{name}@<commit> (the commit from https://huggingface.co/{name}/commits/main)")
    return HubRef(name, rev, False)


def remote_code_allowed(name: str) -> bool:
    """Whether the user named ``name`` with ``--trust-remote-code`` (``MEMLAB_TRUST_REMOTE_CODE``)."""
    allowed = {n.strip() for n in os.environ.get("MEMLAB_TRUST_REMOTE_CODE", "").split(",") if n.strip()}
    base, _ = split_revision(name)
    return name in allowed or base in allowed  # by name only: no wildcard trusts every model


def check_remote_code(name: str, wanted: bool, param: str = "trust_remote_code") -> bool:
    """``wanted`` when the user named the model; ConfigError when code would run without that."""
    if wanted and not remote_code_allowed(name):
        base, _ = split_revision(name)
        raise ConfigError(f"parameter {param!r}: {base!r} ships its own modelling code; run it only by "
                          f"naming it: --trust-remote-code {base}")
    return bool(wanted)


def pretrained_kwargs(spec: str, param: str, trust_remote_code: bool = False,
                      allow_download: bool | None = None) -> tuple[str, dict]:
    """``(name, kwargs)`` for ``from_pretrained``: pinned revision, checked remote-code permission."""
    ref = resolve(spec, param, allow_download)
    kwargs = {**ref.kwargs(), "trust_remote_code": check_remote_code(spec, trust_remote_code)}
    if not _download_allowed(allow_download):
        kwargs["local_files_only"] = True
    return ref.name, kwargs
