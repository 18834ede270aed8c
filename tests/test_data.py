import numpy as np
import pytest
import torch
from PIL import Image

from memlab.core.config import ConfigError
from memlab.data import splits, text, vision

from conftest import require_data


def _image_folder(root, n_per_class=1, classes=vision.CIFAR10_CLASSES):
    rng = np.random.default_rng(0)
    for c in classes:
        (root / "train" / c).mkdir(parents=True)
        for i in range(n_per_class):
            Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(root / "train" / c / f"{i}.png")
    return root


def test_image_folder_loader_decodes_once_and_normalises(tmp_path, monkeypatch):
    root = _image_folder(tmp_path / "imgs", n_per_class=2)
    x, y = vision.load_cifar("train", root=root)
    assert x.shape == (20, 3, 32, 32) and x.dtype == torch.float32 and y.tolist() == [i // 2 for i in range(20)]
    raw = np.asarray(Image.open(root / "train" / "airplane" / "0.png"))
    expect = (raw[..., 0] / 255.0 - vision.MEAN["cifar10"][0]) / vision.STD["cifar10"][0]
    assert np.allclose(x[0, 0].numpy(), expect, atol=1e-5)
    monkeypatch.setattr(vision, "decode_image_folder", lambda *a: pytest.fail("decoded twice"))
    x2, _ = vision.load_cifar("train", root=root)
    assert torch.equal(x, x2)


def test_missing_data_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("MEMLAB_DATA_ROOT", raising=False)
    with pytest.raises(ConfigError, match="parameter 'data_root'"):
        vision.load_cifar("train", root=tmp_path / "nothing")
    with pytest.raises(ConfigError, match="parameter 'split'"):
        vision.load_cifar("val", root=tmp_path)
    with pytest.raises(ConfigError, match="parameter 'data_root'"):
        text.load_wikitext2("valid", root=tmp_path)


def test_per_class_subset_is_reproducible_and_balanced():
    y = np.repeat(np.arange(3), 10)
    a, b = vision.per_class_subset(y, 4, seed=1), vision.per_class_subset(y, 4, seed=1)
    assert np.array_equal(a, b) and np.bincount(y[a]).tolist() == [4, 4, 4]
    assert not np.array_equal(a, vision.per_class_subset(y, 4, seed=2))
    with pytest.raises(ConfigError, match="n_per_class"):
        vision.per_class_subset(y, 11)


def test_class_and_random_splits():
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    f, r = splits.class_split(y, 0, num_classes=3)
    assert f.tolist() == [0, 3] and r.tolist() == [1, 2, 4, 5]
    f, r = splits.class_split(y, [1, 2], num_classes=3)
    assert f.tolist() == [1, 2, 4, 5]
    with pytest.raises(ConfigError, match="parameter 'forget_class'"):
        splits.class_split(y, 3, num_classes=3)
    a, b = splits.random_split(100, 0.2, seed=5)
    assert len(a) == 20 and len(np.intersect1d(a, b)) == 0 and np.array_equal(a, splits.random_split(100, 0.2, 5)[0])
    with pytest.raises(ConfigError, match="parameter 'fraction'"):
        splits.random_split(10, 1.5)


def test_real_cifar10_layout_matches_label_order():
    root = require_data("cifar10-jpeg")
    x, y = vision.load_cifar("test", root=root, n_per_class=2, seed=0)
    assert x.shape == (20, 3, 32, 32) and np.bincount(y.numpy()).tolist() == [2] * 10
    assert abs(float(x.mean())) < 0.5  # normalised


def test_wikitext_and_bpe(tmp_path):
    (tmp_path / "valid.txt").write_text(" = Alpha = \n\n some text about alpha . \n = = Sub = = \n more \n = Beta = \n beta text \n")
    raw = text.load_wikitext2("valid", root=tmp_path)
    arts = text.wikitext_articles(raw)
    assert len(arts) == 2 and arts[0].startswith("= Alpha =") and "= = Sub = =" in arts[0]
    tok = text.train_bpe(arts * 20, vocab_size=300, special_tokens=["<mask>"], name="t")
    ids = tok.encode("some text about beta").ids
    assert tok.decode(ids) == "some text about beta"
    assert tok.token_to_id("<mask>") is not None
    again = text.train_bpe(arts * 20, vocab_size=300, special_tokens=["<mask>"], name="t")
    assert again.get_vocab() == tok.get_vocab()
    with pytest.raises(ConfigError, match="vocab_size"):
        text.train_bpe(arts, vocab_size=1)


def test_real_wikitext():
    root = require_data("wikitext-2")
    raw = text.load_wikitext2("valid", root=root)
    assert len(raw.split()) > 150_000 and len(text.wikitext_articles(raw)) > 20


def test_cached_arrays_are_checked_against_their_sha256_and_decoded_again_when_damaged(tmp_path):
    from memlab.core.cache import CacheWarning

    root = _image_folder(tmp_path / "imgs", n_per_class=2)
    x, y = vision.load_cifar("train", root=root)
    fp = vision.check_image_root("cifar10", root, splits=("train",))["train"]
    xs, _ = vision._array_paths("cifar10", "train", fp)
    sums = vision._sums_path(xs)
    assert sums.exists() and xs.name in sums.read_text()
    raw = bytearray(xs.read_bytes())
    raw[-1] ^= 0xFF  # one pixel's byte: np.load would read it without complaint
    xs.write_bytes(bytes(raw))
    with pytest.warns(CacheWarning, match="damaged"):
        x2, y2 = vision.load_cifar("train", root=root)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    sums.unlink()  # arrays cached before checksums existed: decoded again, without a warning
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        x3, _ = vision.load_cifar("train", root=root)
    assert torch.equal(x, x3) and sums.exists()
