"""CIFAR-10/100 as normalised tensors, from an ImageFolder root or torchvision.

Two sources, one result (x float32 (N, 3, 32, 32) normalised per channel,
y int64 (N,)):
- an ImageFolder root laid out as ``<root>/<split>/<class>/*.jpg`` with class
  folders that sort into the data set's label order (``../shared/data/cifar10-jpeg``);
- torchvision's ``CIFAR10``/``CIFAR100`` when ``download=True`` (network).
Decoded uint8 arrays are cached as ``.npy`` so images are decoded once.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np
import torch

from memlab.config import ConfigError, data_root
from memlab.progress import progress

DATASETS = {"cifar10": 10, "cifar100": 100}
SPLITS = ("train", "test")
FOLDERS = {"cifar10": "cifar10-jpeg", "cifar100": "cifar100-jpeg"}
MEAN = {"cifar10": (0.4914, 0.4822, 0.4465), "cifar100": (0.5071, 0.4865, 0.4409)}
STD = {"cifar10": (0.2470, 0.2435, 0.2616), "cifar100": (0.2673, 0.2564, 0.2762)}
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def array_cache_dir() -> Path:
    from memlab.cache import sibling_dir

    return sibling_dir("arrays")


def _atomic_save(path: Path, array: np.ndarray) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npy.tmp")
    os.close(fd)
    try:
        with open(tmp, "wb") as f:  # a file object, so np.save adds no ".npy" suffix
            np.save(f, array)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def decode_image_folder(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """Decode every image under ``folder/<class>/`` to uint8 (N, 32, 32, 3) and labels (N,)."""
    from PIL import Image
    from torchvision.datasets import ImageFolder

    index = ImageFolder(str(folder))
    images = np.empty((len(index.samples), 32, 32, 3), dtype=np.uint8)
    for i, (path, _) in enumerate(progress(index.samples, desc=f"decode {folder.name}")):
        with Image.open(path) as im:
            images[i] = np.asarray(im.convert("RGB").resize((32, 32)))
    return images, np.asarray(index.targets, dtype=np.int64)


def _image_folder_root(dataset: str, root: str | os.PathLike | None) -> Path | None:
    if root is not None:
        return Path(root).expanduser()
    base = data_root()
    return base / FOLDERS[dataset] if base is not None else None


def load_raw(split: str, dataset: str = "cifar10", root=None, download: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images (N, 32, 32, 3) and int64 labels (N,) of a split, decoded once and cached."""
    if dataset not in DATASETS:
        raise ConfigError(f"parameter 'dataset': must be one of {', '.join(DATASETS)} (got {dataset!r})")
    if split not in SPLITS:
        raise ConfigError(f"parameter 'split': must be one of {', '.join(SPLITS)} (got {split!r})")
    folder = _image_folder_root(dataset, root)
    if folder is not None and (folder / split).is_dir():
        stamp = f"{dataset}-{split}-{hashlib.sha1(str(folder.resolve()).encode()).hexdigest()[:10]}"
        xs, ys = array_cache_dir() / f"{stamp}-x.npy", array_cache_dir() / f"{stamp}-y.npy"
        if xs.exists() and ys.exists():
            return np.load(xs), np.load(ys)
        x, y = decode_image_folder(folder / split)
        _atomic_save(ys, y)
        _atomic_save(xs, x)
        return x, y
    if download:
        import torchvision

        cls = torchvision.datasets.CIFAR10 if dataset == "cifar10" else torchvision.datasets.CIFAR100
        ds = cls(str(array_cache_dir() / "torchvision"), train=(split == "train"), download=True)
        return np.asarray(ds.data, dtype=np.uint8), np.asarray(ds.targets, dtype=np.int64)
    raise ConfigError(
        f"parameter 'data_root': no {dataset} images at {str(folder)!r}; set MEMLAB_DATA_ROOT (or data_root) "
        f"to a folder holding {FOLDERS[dataset]}/{split}/<class>/*.jpg, or pass download=True"
    )


def normalise(images: np.ndarray, dataset: str = "cifar10") -> torch.Tensor:
    """uint8 (N, 32, 32, 3) -> float32 (N, 3, 32, 32) normalised by the data set's channel mean/std.

    The result is contiguous in NCHW order. Permuting the decoded NHWC array
    alone would leave channels-last strides, and oneDNN's AVX2 convolution
    backward corrupts the heap on channels-last inputs with few channels
    (``benchmarks/repro_onednn_channels_last.py``).
    """
    x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).contiguous().float().div_(255.0)
    mean = torch.tensor(MEAN[dataset]).view(1, 3, 1, 1)
    std = torch.tensor(STD[dataset]).view(1, 3, 1, 1)
    return (x - mean) / std


def per_class_subset(y: np.ndarray, n_per_class: int, seed: int = 0) -> np.ndarray:
    """Sorted indices of ``n_per_class`` samples of every class, drawn reproducibly from ``seed``."""
    rng = np.random.default_rng(seed)
    idx = []
    for c in np.unique(y):
        members = np.flatnonzero(y == c)
        if n_per_class > len(members):
            raise ConfigError(
                f"parameter 'n_per_class': at most {len(members)} images of class {int(c)} exist (got {n_per_class})"
            )
        idx.append(rng.choice(members, size=n_per_class, replace=False))
    return np.sort(np.concatenate(idx))


def load_cifar(
    split: str = "train",
    dataset: str = "cifar10",
    root=None,
    download: bool = False,
    n_per_class: int | None = None,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalised images (N, 3, 32, 32) float32 and labels (N,) int64 of a CIFAR split.

    ``n_per_class`` keeps a class-balanced subset drawn from ``seed``; ``root``
    overrides ``$MEMLAB_DATA_ROOT/cifar10-jpeg``; ``download`` allows torchvision
    to fetch the original data set.
    """
    if n_per_class is not None and (not isinstance(n_per_class, int) or n_per_class < 1):
        raise ConfigError(f"parameter 'n_per_class': must be a positive integer or None (got {n_per_class!r})")
    images, labels = load_raw(split, dataset, root, download)
    if n_per_class is not None:
        keep = per_class_subset(labels, n_per_class, seed)
        images, labels = images[keep], labels[keep]
    return normalise(images, dataset), torch.from_numpy(labels.copy())
