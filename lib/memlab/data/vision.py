"""CIFAR-10/100 as normalised tensors, from an ImageFolder root or torchvision.

Two sources, one result (x float32 (N, 3, 32, 32) normalised per channel,
y int64 (N,)):
- an ImageFolder root laid out as ``<root>/<split>/<class>/*.jpg`` with class
  folders that sort into the data set's label order (``../shared/data/cifar10-jpeg``);
- torchvision's ``CIFAR10``/``CIFAR100``: read from ``<repo>/data/`` when an
  earlier download put it there, fetched there when downloads are allowed
  (``download=True`` or ``MEMLAB_ALLOW_DOWNLOAD=1``, which ``memlab run
  --allow-download`` sets).
Decoded uint8 arrays are cached as ``.npy`` under a key made from the folder's
content (every file's path, size and modification time), so a changed folder
is decoded again; a sidecar records each array's SHA-256, as a model entry's
meta does, and a cached array that fails it (a flipped byte in the pixels
would otherwise train silently on other images) is reported and decoded again. Before decoding, :func:`check_cifar` refuses a root whose
train or test split misses a class folder (which would shift every label) or
holds an empty, truncated or non-image file, naming the first bad one.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import torch

from memlab.core.config import ConfigError, data_root
from memlab.core.progress import progress
from memlab.data.download import allow_download, download_dir  # noqa: F401 - part of this module's API

DATASETS = {"cifar10": 10, "cifar100": 100}
SPLITS = ("train", "test")
FOLDERS = {"cifar10": "cifar10-jpeg", "cifar100": "cifar100-jpeg"}
MEAN = {"cifar10": (0.4914, 0.4822, 0.4465), "cifar100": (0.5071, 0.4865, 0.4409)}
STD = {"cifar10": (0.2470, 0.2435, 0.2616), "cifar100": (0.2673, 0.2564, 0.2762)}
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def array_cache_dir() -> Path:
    from memlab.core.cache import sibling_dir

    return sibling_dir("arrays")


def _atomic_save(path: Path, array: np.ndarray) -> None:
    from memlab.core.fsutil import write_atomic

    write_atomic(path, lambda f: np.save(f, array))  # a file object, so np.save adds no ".npy" suffix


IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
_SIGNATURES = {".jpg": (b"\xff\xd8", b"\xff\xd9"), ".jpeg": (b"\xff\xd8", b"\xff\xd9"),
               ".png": (b"\x89PNG", b"\xaeB`\x82")}


def _image_files(folder: Path) -> list[tuple[str, int, int]]:
    """(relative path, size, mtime_ns) of every image under ``folder/<class>/``, sorted.

    This one listing is what the check, the fingerprint and the decoder all read. Hidden files
    (``.DS_Store``) are skipped; any other entry that is not an image file of
    :data:`IMAGE_SUFFIXES` (a ``.bmp``, a folder named ``x.jpg``, a broken link) is refused
    naming it, so that no file is read by one and not by the other.
    """
    out = []
    for cls in sorted(os.scandir(folder), key=lambda e: e.name):
        if not cls.is_dir():
            continue
        for f in os.scandir(cls.path):
            if f.name.startswith("."):
                continue
            where = f"parameter 'data_root': {f.path!r}"
            if not f.name.lower().endswith(IMAGE_SUFFIXES):
                raise ConfigError(f"{where} is not an image memlab reads (class folders hold only "
                                  f"{', '.join(IMAGE_SUFFIXES)} files)")
            try:
                is_file, st = f.is_file(), f.stat()
            except OSError:
                raise ConfigError(f"{where} is a broken link") from None
            if not is_file:
                kind = "a folder" if f.is_dir() else "not a regular file"
                raise ConfigError(f"{where} is {kind}, not an image file")
            out.append((f"{cls.name}/{f.name}", st.st_size, st.st_mtime_ns))
    out.sort()
    return out


def fingerprint(files: list[tuple[str, int, int]]) -> str:
    """A hash of image files' names, sizes and modification times (from :func:`_image_files`).

    It keys the decoded-array cache: adding, removing, replacing or touching a
    file gives another key, so a changed folder is decoded again.
    """
    h = hashlib.sha256()
    for rel, size, mtime in files:
        h.update(f"{rel}\0{size}\0{mtime}\n".encode())
    return h.hexdigest()[:16]


def _scan_headers(folder: Path, files: list[tuple[str, int, int]]) -> None:
    """Refuse the first empty, truncated, unreadable or non-image file (by its first and last bytes),
    and the first image that is not 32x32 RGB (read from its header; CIFAR images are all that)."""
    from PIL import Image

    for rel, size, _ in files:
        path = folder / rel
        head, tail = _SIGNATURES[path.suffix.lower()]
        if size < len(head) + len(tail):
            raise ConfigError(f"parameter 'data_root': image {str(path)!r} is empty or truncated "
                              f"({size} bytes)")
        try:
            with open(path, "rb") as fh:
                first = fh.read(len(head))
                fh.seek(-len(tail), os.SEEK_END)
                last = fh.read(len(tail))
        except OSError as err:
            raise ConfigError(f"parameter 'data_root': image {str(path)!r} cannot be read "
                              f"({err.strerror or type(err).__name__})") from None
        if first != head:
            raise ConfigError(f"parameter 'data_root': {str(path)!r} is not a {path.suffix} image "
                              f"(starts with {first!r})")
        if last != tail:
            raise ConfigError(f"parameter 'data_root': image {str(path)!r} is truncated "
                              "(no end-of-image marker)")
        try:
            with Image.open(path) as im:  # lazy: reads the header only
                shape = im.size, im.mode
        except (OSError, ValueError, SyntaxError) as err:
            raise ConfigError(f"parameter 'data_root': image {str(path)!r} cannot be decoded "
                              f"({type(err).__name__})") from None
        if shape != ((32, 32), "RGB"):
            raise ConfigError(f"parameter 'data_root': image {str(path)!r} is {shape[0][0]}x{shape[0][1]} "
                              f"{shape[1]}; CIFAR images are 32x32 RGB (it would be resized or converted "
                              "silently)")


def expected_classes(dataset: str, folder: Path, splits=SPLITS) -> list[str]:
    """Class folder names a split of ``dataset`` must have.

    CIFAR-10's ten names; for CIFAR-100 the train split's folders (or, when
    only other splits are read, the first of those), which must number 100.
    """
    if dataset == "cifar10":
        return sorted(CIFAR10_CLASSES)
    for split in ("train", *splits):
        if (folder / split).is_dir():
            return sorted(e.name for e in os.scandir(folder / split) if e.is_dir())
    return []


def check_image_root(dataset: str, folder: Path, splits=SPLITS, scan: bool = True) -> dict[str, str]:
    """Refuse an ImageFolder root that would load wrongly; return each split's content fingerprint.

    Checks, naming the first bad folder or file: both splits exist; each holds
    every class folder of the data set (a missing one shifts every later label)
    and no other; no class folder is empty; with ``scan``, every image starts
    and ends with its format's markers (splits whose decoded arrays are cached
    for their current fingerprint were decoded cleanly and are not re-read).
    """
    folder = Path(folder)
    classes = expected_classes(dataset, folder, splits)
    if len(classes) != DATASETS[dataset]:
        ref = folder / ("train" if (folder / "train").is_dir() or not splits else splits[0])
        raise ConfigError(f"parameter 'data_root': {str(ref)!r} must hold "
                          f"{DATASETS[dataset]} class folders for {dataset} (found {len(classes)})")
    prints = {}
    for split in splits:
        sdir = folder / split
        if not sdir.is_dir():
            raise ConfigError(f"parameter 'data_root': {dataset} split folder {str(sdir)!r} is missing")
        present = sorted(e.name for e in os.scandir(sdir) if e.is_dir())
        missing = [c for c in classes if c not in present]
        if missing:
            raise ConfigError(f"parameter 'data_root': class folder {str(sdir / missing[0])!r} is missing "
                              f"({len(missing)} of {len(classes)} missing; every class must be present, or "
                              "labels shift)")
        extra = [c for c in present if c not in classes]
        if extra:
            raise ConfigError(f"parameter 'data_root': {str(sdir / extra[0])!r} is not a {dataset} "
                              f"class folder (expected {', '.join(classes[:10])}"
                              f"{' ...' if len(classes) > 10 else ''})")
        files = _image_files(sdir)
        counts = {c: 0 for c in classes}
        for rel, _, _ in files:
            counts[rel.split("/", 1)[0]] += 1
        empty = [c for c, n in counts.items() if n == 0]
        if empty:
            raise ConfigError(f"parameter 'data_root': class folder {str(sdir / empty[0])!r} holds no images")
        prints[split] = fingerprint(files)
        xs, ys = _array_paths(dataset, split, prints[split])
        if scan and not (xs.exists() and ys.exists()):
            _scan_headers(sdir, files)
    return prints


def check_cifar(dataset: str = "cifar10", root=None, download: bool | None = None, splits=SPLITS) -> str:
    """Preflight of the CIFAR data a run will read; returns a one-line description of the source.

    Raises :class:`ConfigError` (one line, naming the folder or file, and what
    to set) when neither an ImageFolder root nor a torchvision copy is present
    and downloads are not allowed, or when the root is malformed.
    """
    if dataset not in DATASETS:
        raise ConfigError(f"parameter 'dataset': must be one of {', '.join(DATASETS)} (got {dataset!r})")
    folder = _image_folder_root(dataset, root)
    if folder is not None and folder.exists():
        if not folder.is_dir():
            raise ConfigError(f"parameter 'data_root': {str(folder)!r} is not a folder")
        check_image_root(dataset, folder, splits)
        return f"{dataset} images at {folder}"
    if _torchvision_present(dataset):
        return f"{dataset} (torchvision copy) at {download_dir()}"
    if allow_download(download):
        return f"{dataset} to be downloaded into {download_dir()}"
    where = (f"no {FOLDERS[dataset]} folder at {str(folder)!r}" if folder is not None
             else "MEMLAB_DATA_ROOT is unset")
    raise ConfigError(f"parameter 'data_root': {where}; set MEMLAB_DATA_ROOT to a folder holding "
                      f"{FOLDERS[dataset]}/{{train,test}}/<class>/*.jpg, or pass --allow-download to fetch "
                      f"{dataset} into {download_dir()}")


_TV_FOLDERS = {"cifar10": "cifar-10-batches-py", "cifar100": "cifar-100-python"}


def _torchvision_present(dataset: str) -> bool:
    return (download_dir() / _TV_FOLDERS[dataset]).is_dir()


def _array_paths(dataset: str, split: str, fp: str) -> tuple[Path, Path]:
    from memlab.core.cache import cache_path

    folder = cache_path().parent / "arrays"  # not created here: a preflight writes nothing
    stamp = f"{dataset}-{split}-{fp}"
    return folder / f"{stamp}-x.npy", folder / f"{stamp}-y.npy"


def _sums_path(xs: Path) -> Path:
    return xs.with_name(xs.name.removesuffix("-x.npy") + "-sha256.json")


def _save_arrays(xs: Path, ys: Path, x: np.ndarray, y: np.ndarray) -> None:
    """Both arrays, then their SHA-256 sidecar (last: arrays without one are never trusted)."""
    from memlab.core.cache import sha256_file
    from memlab.core.results import write_json_atomic

    _atomic_save(ys, y)
    _atomic_save(xs, x)
    write_json_atomic(_sums_path(xs), {p.name: sha256_file(p) for p in (xs, ys)})


class _Unchecked(Exception):
    """Cached arrays without a checksum sidecar (written before sidecars existed): decoded again quietly."""


def _load_arrays(xs: Path, ys: Path) -> tuple[np.ndarray, np.ndarray]:
    """The cached arrays, after checking their sidecar's SHA-256; ValueError if they differ from it,
    :class:`_Unchecked` without one."""
    import json

    from memlab.core.cache import sha256_file

    try:
        sums = json.loads(_sums_path(xs).read_text())
    except (OSError, ValueError):
        raise _Unchecked from None
    for p in (xs, ys):
        if sums.get(p.name) != sha256_file(p):
            raise ValueError(f"{p.name} does not match its recorded SHA-256")
    x, y = np.load(xs), np.load(ys)
    if len(x) != len(y) or x.shape[1:] != (32, 32, 3):
        raise ValueError(f"shapes {x.shape} and {y.shape} do not match")
    return x, y


def decode_image_folder(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """Decode every image under ``folder/<class>/`` to uint8 (N, 32, 32, 3) and labels (N,).

    The files are those of :func:`_image_files` (the ones the check and the fingerprint saw),
    labelled by the sorted class folder names as torchvision's ``ImageFolder`` labels them.
    An image PIL cannot decode, or one that is not 32x32 RGB, raises :class:`ConfigError` naming it.
    """
    from PIL import Image

    files = _image_files(folder)
    classes = sorted({rel.split("/", 1)[0] for rel, _, _ in files})
    label = {c: i for i, c in enumerate(classes)}
    images = np.empty((len(files), 32, 32, 3), dtype=np.uint8)
    targets = np.empty(len(files), dtype=np.int64)
    for i, (rel, _, _) in enumerate(progress(files, desc=f"decode {folder.name}")):
        path = str(folder / rel)
        try:
            with Image.open(path) as im:
                if (im.size, im.mode) != ((32, 32), "RGB"):
                    raise ConfigError(f"parameter 'data_root': image {path!r} is {im.size[0]}x{im.size[1]} "
                                      f"{im.mode}; CIFAR images are 32x32 RGB")
                images[i] = np.asarray(im)
        except (OSError, ValueError, SyntaxError) as err:  # PIL: truncated, unidentified, broken
            raise ConfigError(f"parameter 'data_root': image {path!r} cannot be decoded "
                              f"({type(err).__name__}: {err})") from None
        targets[i] = label[rel.split("/", 1)[0]]
    return images, targets


def _image_folder_root(dataset: str, root: str | os.PathLike | None) -> Path | None:
    if root is not None:
        return Path(root).expanduser()
    base = data_root()
    return base / FOLDERS[dataset] if base is not None else None


def load_raw(split: str, dataset: str = "cifar10", root=None,
             download: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images (N, 32, 32, 3) and int64 labels (N,) of a split, decoded once and cached."""
    if dataset not in DATASETS:
        raise ConfigError(f"parameter 'dataset': must be one of {', '.join(DATASETS)} (got {dataset!r})")
    if split not in SPLITS:
        raise ConfigError(f"parameter 'split': must be one of {', '.join(SPLITS)} (got {split!r})")
    folder = _image_folder_root(dataset, root)
    if folder is not None and folder.exists():
        # Checked every time (a stat per file, ~0.2 s for CIFAR-10): a missing class folder would
        # shift labels, and the fingerprint keys the decoded arrays to the folder's current content.
        fp = check_image_root(dataset, folder, splits=(split,))[split]
        xs, ys = _array_paths(dataset, split, fp)
        if xs.exists() and ys.exists():
            try:
                return _load_arrays(xs, ys)
            except _Unchecked:
                pass
            except (OSError, ValueError, EOFError) as err:  # truncated or damaged: decode again
                from memlab.data.text import _report_damaged

                _report_damaged(xs, err)
                ys.unlink(missing_ok=True)
        x, y = decode_image_folder(folder / split)
        array_cache_dir()  # created, and dead writers' temporary files removed, before the first save
        _save_arrays(xs, ys, x, y)
        return x, y
    if _torchvision_present(dataset) or allow_download(download):
        return _load_torchvision(split, dataset, download=allow_download(download))
    check_cifar(dataset, root, download)  # raises the one-line error saying what to set
    raise AssertionError("unreachable")  # pragma: no cover


def _load_torchvision(split: str, dataset: str, download: bool) -> tuple[np.ndarray, np.ndarray]:
    """torchvision's CIFAR arrays from ``download_dir()``, fetched there if allowed.

    torchvision shows a progress bar and checks the archive's MD5 and each batch file's MD5.
    """
    import torchvision

    cls = torchvision.datasets.CIFAR10 if dataset == "cifar10" else torchvision.datasets.CIFAR100
    target = download_dir()
    fetched = download and not _torchvision_present(dataset)
    target.mkdir(parents=True, exist_ok=True)
    # torchvision verifies the archive's MD5 and its batch files' MD5s before using them
    ds = cls(str(target), train=(split == "train"), download=download)
    if fetched:
        print(f"memlab: downloaded {dataset} into {target / _TV_FOLDERS[dataset]} (reused by later runs)")
    return np.asarray(ds.data, dtype=np.uint8), np.asarray(ds.targets, dtype=np.int64)


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
    download: bool | None = None,
    n_per_class: int | None = None,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalised images (N, 3, 32, 32) float32 and labels (N,) int64 of a CIFAR split.

    ``n_per_class`` keeps a class-balanced subset drawn from ``seed``; ``root``
    overrides ``$MEMLAB_DATA_ROOT/cifar10-jpeg``; ``download`` allows torchvision
    to fetch the original data set (default: ``MEMLAB_ALLOW_DOWNLOAD``).
    """
    if n_per_class is not None and (not isinstance(n_per_class, int) or n_per_class < 1):
        raise ConfigError(f"parameter 'n_per_class': must be a positive integer or None (got {n_per_class!r})")
    images, labels = load_raw(split, dataset, root, download)
    if n_per_class is not None:
        keep = per_class_subset(labels, n_per_class, seed)
        images, labels = images[keep], labels[keep]
    return normalise(images, dataset), torch.from_numpy(labels.copy())


def patch_shuffle(x: torch.Tensor, patch: int = 8, seed: int = 0) -> torch.Tensor:
    """Images (N, C, H, W) with their patch x patch tiles randomly permuted, per image.

    Returns a new (N, C, H, W) tensor holding the same tiles in another order (one
    permutation per image, drawn from a generator seeded with ``seed``). Keeps every pixel
    value and local texture of natural images but destroys the object layout: chapter 1's
    offline stand-in for CIFAR-100 pixels as an out-of-distribution source. Raises
    ValueError if ``x`` is not 4-D or ``patch`` does not divide H and W.
    """
    if x.dim() != 4:
        raise ValueError(f"patch_shuffle: images must be (N, C, H, W) (got shape {tuple(x.shape)})")
    n, c, h, w = x.shape
    if patch < 1 or h % patch or w % patch:
        raise ValueError(f"parameter 'patch': must divide the image size {h}x{w} (got {patch})")
    gh, gw = h // patch, w // patch
    tiles = x.reshape(n, c, gh, patch, gw, patch).permute(0, 2, 4, 1, 3, 5).reshape(n, gh * gw, c, patch, patch)
    g = torch.Generator().manual_seed(seed)
    order = torch.stack([torch.randperm(gh * gw, generator=g) for _ in range(n)])
    tiles = tiles[torch.arange(n)[:, None], order]
    return tiles.reshape(n, gh, gw, c, patch, patch).permute(0, 3, 1, 4, 2, 5).reshape(n, c, h, w).contiguous()
