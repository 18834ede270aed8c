"""Chapter 2 on the fast BatchNorm CNN (issue 53): its profiles, the early checkpoint and learning-rate
schedule of the fast recipe, Unroll's whitened w_0, and the Original shared with chapter 1."""
import numpy as np
import pytest
import torch

from memlab.core import config
from memlab.data import vision
from memlab.experiments import ch01_bn_illusion as ch1
from memlab.experiments import ch02_sde as ex
from memlab.experiments.ch02_sde import stages
from memlab.models import recipe
from memlab.models.fastcnn import FastCNN, whiten_init


def synthetic_data(n_per_class: int, n_test_per_class: int = 4, seed: int = 0) -> ex.Data:
    """Ten classes of noise images (N, 3, 32, 32) whose mean moves with the label."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(10).repeat_interleave(n_per_class)
    yt = torch.arange(10).repeat_interleave(n_test_per_class)
    x = torch.randn(len(y), 3, 32, 32, generator=g) + (y.float() / 10).view(-1, 1, 1, 1)
    return ex.Data(x, y, torch.randn(len(yt), 3, 32, 32, generator=g), yt)


def _fake_cifar(split="train", dataset="cifar10", root=None, download=None, n_per_class=None, seed=0):
    """Stand-in for memlab.data.vision.load_cifar: the same images for the same arguments."""
    per = n_per_class or (1000 if split == "test" else 30)
    g = torch.Generator().manual_seed({"train": 1, "test": 2}[split] + 10 * seed)
    y = torch.arange(10).repeat_interleave(per)
    return torch.randn(len(y), 3, 32, 32, generator=g) * 0.5 + (y.float() / 10).view(-1, 1, 1, 1), y


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """An empty model cache, no progress bars and no models of another test in the process."""
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path / "models"))
    monkeypatch.setenv("MEMLAB_PROGRESS", "0")
    stages._MODELS.clear()
    yield
    stages._MODELS.clear()


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_cpu_trains_the_fast_cnn_on_all_of_cifar10_and_paper_the_resnet():
    cpu, paper = config.resolve("02_sde", "cpu"), config.resolve("02_sde", "paper")
    assert (cpu.arch, cpu.width, cpu.n_per_class, cpu.n_test_per_class, cpu.epochs, cpu.batch_size, cpu.lr,
            cpu.n_targets) == ("fastcnn", 64, 5000, 1000, 6, 1024, 1.5, 50)
    assert (paper.arch, paper.width, paper.subset_sizes) == ("resnet18", 64, [400, 1000, 2000])
    # a quarter of the paper's subsets, on the paper's held-out pools (2500, 5000, 10000 images)
    assert cpu.subset_sizes == [s // 4 for s in paper.subset_sizes]
    assert ex.chapter1_config(cpu) is not None  # the same training as chapter 1's cpu Original
    assert ex.chapter1_config(paper) is None and ex.chapter1_config(config.resolve("02_sde", "smoke")) is None


def test_the_fast_recipe_keeps_the_early_checkpoint_after_early_epoch_epochs(scratch, monkeypatch):
    cfg = config.resolve("02_sde", "smoke", epochs=3, early_fraction=0.6)
    assert cfg.arch == "fastcnn" and ex.early_epoch(cfg) == 2
    seen: dict[int, dict] = {}
    real = recipe.train_fast

    def spy(model, x, y, rec, **kw):
        inner = kw["on_epoch"]

        def record(epoch, m):
            seen[epoch] = _state(m)
            inner(epoch, m)

        return real(model, x, y, rec, **{**kw, "on_epoch": record})

    monkeypatch.setattr(recipe, "train_fast", spy)
    final, early = ex.train_model(cfg, synthetic_data(8), 0.1)
    assert sorted(seen) == [1, 2, 3]  # epochs done, 1-based
    assert _same(_state(early), seen[2]) and _same(_state(final), seen[3])
    assert not torch.equal(early.group1.conv1.weight, final.group1.conv1.weight)


def test_epoch_mean_lrs_follow_the_schedule_the_fast_cnn_trains_by(scratch, monkeypatch):
    cfg = config.resolve("02_sde", "smoke", epochs=3, batch_size=16)
    data = synthetic_data(7)  # 70 images: 4 steps an epoch, the trailing 6 images merged into the last
    lrs = []
    real = torch.optim.SGD.step

    def step(self, *a, **k):
        lrs.append(self.param_groups[0]["lr"])  # the weights' group
        return real(self, *a, **k)

    monkeypatch.setattr(torch.optim.SGD, "step", step)
    ex.train_model(cfg, data, 0)
    assert len(lrs) == 3 * 4
    got = np.array(lrs).reshape(3, 4).mean(axis=1)
    np.testing.assert_allclose(ex.epoch_mean_lrs(cfg, len(data.y_train)), got, rtol=1e-12)
    # the recipe's warm-up and linear decay, not the cosine the ResNet-18 trains by
    cosine = ex.epoch_mean_lrs(config.resolve("02_sde", "smoke", arch="resnet18", epochs=3, batch_size=16), 70)
    assert not np.allclose(got, cosine)


def test_unrolls_w0_is_the_whitened_net_the_original_trained_from(scratch):
    cfg = config.resolve("02_sde", "smoke")
    data = synthetic_data(10)
    original, _ = ex.train_model(cfg, data, 0)
    ref = ex.reference_state(cfg, data)
    assert ref["whiten.weight"].abs().sum() > 0
    # the whitening conv is never trained: the Original still has the one it started from
    assert torch.equal(ref["whiten.weight"], original.whiten.weight)
    expected = ex.build_model(cfg)
    assert isinstance(expected, FastCNN)
    whiten_init(expected, data.x_train[: recipe.Recipe.whiten_images])
    assert _same(ref, expected.state_dict())
    fresh = ex.build_model(cfg).state_dict()
    assert all(torch.equal(ref[k], v) for k, v in fresh.items() if k != "whiten.weight")
    assert not torch.equal(fresh["whiten.weight"], ref["whiten.weight"])
    assert torch.equal(ex.method_config(cfg, data, "Unroll")["reference_state"]["whiten.weight"], ref["whiten.weight"])


def test_the_original_is_chapter_1s_trained_once_and_shared(scratch, monkeypatch):
    monkeypatch.setattr(vision, "load_cifar", _fake_cifar)  # chapter 1 reads vision.load_cifar
    monkeypatch.setattr(stages, "load_cifar", _fake_cifar)
    cfg = config.resolve("02_sde", "smoke", n_per_class=20, lr=0.2)  # chapter 1's smoke Original
    c1 = ex.chapter1_config(cfg)
    assert c1 is not None and (c1.train_per_class, c1.lr, c1.seed) == (20, 0.2, cfg.seed)
    starts = []
    real = recipe.train_fast

    def spy(model, x, y, rec, **kw):
        starts.append(_state(model))  # before the training whitens it
        return real(model, x, y, rec, **kw)

    monkeypatch.setattr(recipe, "train_fast", spy)
    data = ex.load_data(cfg)
    final, early = ex.train_model(cfg, data, 0)  # chapter 2 first: chapter 1's stage trains it
    assert len(starts) == 1 and early is None
    orig1 = ch1.original_model(c1, ch1.load_data(c1), c1.seed)  # chapter 1 then reads the cache
    assert len(starts) == 1 and _same(_state(final), _state(orig1))
    assert ex.train_model(cfg, data, 0.0)[0] is final  # the regime table's R = 0.0 is the same model
    costs = ex.training_costs(cfg)
    assert costs.loc["R=0%", "shared with chapter 1"] and not costs.loc["R=0%", "cached"]
    assert ex.cost_metrics(costs, 1.0, 1.0)["original_shared"]
    assert "trained once, shared with chapter 1" in ex.setup_text(cfg)
    # Unroll's w_0 is chapter 1's: its net at its seed, whitened on the first images it trained on
    ref = ex.reference_state(cfg, data)
    assert torch.equal(ref["whiten.weight"], orig1.whiten.weight) and ref["whiten.weight"].abs().sum() > 0
    assert all(torch.equal(ref[k], v) for k, v in starts[0].items() if k != "whiten.weight")
    # a fresh process after chapter 1 ran: read from the cache, no training
    stages._MODELS.clear()
    again, _ = ex.train_model(cfg, data, 0)
    assert len(starts) == 1 and _same(_state(again), _state(orig1))
    row = ex.training_costs(cfg).loc["R=0%"]
    assert row["cached"] and np.isnan(row["CPU s"])
    # other settings: chapter 2 trains its own Original
    own = config.resolve("02_sde", "smoke", n_per_class=20, lr=0.1)
    assert ex.chapter1_config(own) is None and "trained here" in ex.setup_text(own)
    ex.train_model(own, data, 0)
    assert len(starts) == 2
