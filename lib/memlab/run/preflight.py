"""Checks of what a chapter run needs, before any work: data, hub models, a GPU.

``memlab run`` calls :func:`check` from its validation step, after the
parameters resolved and before the notebook starts, so a run that cannot
finish stops within seconds with one line naming the parameter or file and
what to set, and writes nothing. Per chapter it checks

- the data it reads (CIFAR-10/100 ImageFolder roots: every class folder of
  both splits, images readable; WikiText-2 splits present and non-trivial),
  or that downloads are allowed and the data can be fetched;
- the hub models of the chosen configuration (a local folder, a cached copy,
  or ``--allow-download`` with a pinned revision) and ``trust_remote_code``
  only for a model the user named with ``--trust-remote-code``;
- the ``paper`` profile's GPU: without CUDA it refuses unless ``--allow-cpu``.

Flags reach it as arguments or, inside a run, through the environment
(``MEMLAB_ALLOW_DOWNLOAD``, ``MEMLAB_ALLOW_CPU``, ``MEMLAB_TRUST_REMOTE_CODE``).
:func:`fetch` downloads what :func:`check` found missing (only when allowed),
so a download happens once, before the chapter's kernel starts.
"""
from __future__ import annotations

import os
from typing import Any, Callable

from memlab.core.config import ConfigError


def _flag(value: bool | None, env: str) -> bool:
    if value is not None:
        return bool(value)
    return os.environ.get(env, "0").lower() in ("1", "true", "yes")


def _get(cfg: Any, name: str, default: Any = None) -> Any:
    try:
        return cfg[name]
    except (KeyError, TypeError):
        return getattr(cfg, name, default)


# ----------------------------------------------------------------------------- what each chapter reads

def _cifar_needs(cfg) -> list[tuple[str, tuple[str, ...]]]:
    """(dataset, splits) pairs a vision chapter loads."""
    needs = [(_get(cfg, "dataset", "cifar10") or "cifar10", ("train", "test"))]
    if _get(cfg, "ood_source") == "cifar100":
        needs.append(("cifar100", ("test",)))
    return needs


def _lens_sub(cfg, chapter: str):
    """Chapter 6 reads chapters 1 and 3 at its own profile with their defaults (their needs are its needs)."""
    from memlab.core.config import resolve

    return resolve(chapter, profile=_get(cfg, "profile") or "cpu")


def _hub_needs(chapter: str, cfg) -> list[tuple[str, str, bool]]:
    """(parameter, model spec, wants remote code) of the hub models a configuration loads."""
    if chapter == "06_cross_lens":
        return _hub_needs("03_canary_audit", _lens_sub(cfg, "03_canary_audit")) if _get(cfg, "language", True) else []
    if chapter == "03_canary_audit":
        out = []
        for param, local in (("model", "small"), ("drift_model", "suppress")):
            spec = _get(cfg, param)
            if spec and spec != local:
                out.append((param, spec, False))
        return out
    if chapter == "04_qskew" and _get(cfg, "backbone", "tiny") != "tiny":
        from memlab.models import diffusion_lm as dlm

        fam = dlm.FAMILIES[_get(cfg, "backbone")]
        trust = bool(_get(cfg, "trust_remote_code", False))
        return [("base_model", _get(cfg, "base_model") or fam["base"], trust),
                ("instruct_model", _get(cfg, "instruct_model") or fam["instruct"], trust)]
    return []


DATA: dict[str, dict[str, Callable]] = {
    "01_bn_illusion": {"cifar": _cifar_needs},
    "02_sde": {"cifar": lambda cfg: [("cifar10", ("train", "test"))]},
    "03_canary_audit": {"wikitext": lambda cfg: ("valid",)},
    "04_qskew": {"wikitext": lambda cfg: ("test", "valid")},
    "05_capacity": {"wikitext": lambda cfg: ("valid", "test")},
    "06_cross_lens": {"cifar": lambda cfg: _cifar_needs(_lens_sub(cfg, "01_bn_illusion")),
                      "wikitext": lambda cfg: ("valid",)},
}


# ----------------------------------------------------------------------------- the checks

def check_gpu(profile: str, allow_cpu: bool | None = None) -> str:
    """Refuse the ``paper`` profile without CUDA unless the CPU was allowed explicitly."""
    if profile != "paper":
        return "cpu or gpu"
    import torch

    if torch.cuda.is_available():
        return f"gpu ({torch.cuda.get_device_name(0)})"
    if _flag(allow_cpu, "MEMLAB_ALLOW_CPU") or os.environ.get("MEMLAB_DEVICE") == "cpu":
        return "cpu (paper profile without a GPU, allowed by --allow-cpu; expect days)"
    raise ConfigError("parameter 'profile': 'paper' needs a CUDA GPU and none is visible; its settings "
                      "would run for days on this CPU. Pass --allow-cpu to run it anyway, or use --profile cpu")


def check(chapter: str, cfg: Any, *, allow_download: bool | None = None, allow_cpu: bool | None = None,
          profile: str | None = None) -> list[str]:
    """Everything a run of ``chapter`` with ``cfg`` needs, or ConfigError (one line) before any work.

    Returns one line per checked need (what will be read from where).
    """
    from memlab.data import text, vision
    from memlab.models import hub

    download = _flag(allow_download, "MEMLAB_ALLOW_DOWNLOAD")
    profile = profile or getattr(cfg, "profile", None) or ""
    lines = [f"device: {check_gpu(profile, allow_cpu)}"]
    needs = DATA.get(chapter, {})
    if "cifar" in needs:
        for dataset, splits in needs["cifar"](cfg):
            lines.append(vision.check_cifar(dataset, download=download, splits=splits))
    if "wikitext" in needs:
        lines.append(text.check_wikitext(needs["wikitext"](cfg), download=download))
    # Chapter 3 has its own allow_download parameter (passed to from_pretrained).
    hub_download = download or bool(_get(cfg, "allow_download", False))
    for param, spec, trust in _hub_needs(chapter, cfg):
        ref = hub.resolve(spec, param, hub_download)
        hub.check_remote_code(spec, trust)
        where = "local folder" if ref.local else f"hub at {ref.revision}"
        lines.append(f"{param}: {ref.name} ({where}{', remote code allowed' if trust else ''})")
    return lines


def fetch(chapter: str, cfg: Any, *, allow_download: bool | None = None) -> list[str]:
    """Download the data ``chapter`` needs and lacks (only when allowed); return what was fetched.

    A download that fails (offline, checksum mismatch) raises ConfigError
    before the chapter's kernel starts.
    """
    from memlab.data import text, vision

    if not _flag(allow_download, "MEMLAB_ALLOW_DOWNLOAD"):
        return []
    fetched = []
    needs = DATA.get(chapter, {})
    try:
        if "cifar" in needs:
            for dataset, splits in needs["cifar"](cfg):
                folder = vision._image_folder_root(dataset, None)
                if (folder is None or not folder.exists()) and not vision._torchvision_present(dataset):
                    for split in splits:
                        vision._load_torchvision(split, dataset, download=True)
                    fetched.append(dataset)
        if "wikitext" in needs:
            for split in needs["wikitext"](cfg):
                if text.find_wikitext2(split) is None:
                    text.fetch_wikitext2(split)
                    fetched.append(f"wikitext-2/{split}")
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001 - network and archive errors become one line
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ConfigError(f"parameter 'data_root': downloading the data of {chapter} failed "
                          f"({type(err).__name__}: {first}); connect to the network, or set "
                          "MEMLAB_DATA_ROOT to a folder holding cifar10-jpeg/ and wikitext-2/") from None
    return fetched
