"""The fast CIFAR net and recipe (issue 53): whitening, the schedule, learning, bf16 choice, and a
training that resumes after a kill as if it had never stopped."""
import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from memlab.core import cache
from memlab.core.config import BF16_ENV, ConfigError, cpu_bf16
from memlab.models import fastcnn as fc
from memlab.models.recipe import Recipe, lr_factor, param_groups, train_fast

TINY = (8, 16, 16)  # widths of a net the tests train in seconds


def _toy(n: int = 64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Two classes told apart by the sign of the red channel's mean, plus noise: (n, 3, 32, 32), (n,)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 2
    x = torch.randn(n, 3, 32, 32, generator=g) * 0.5
    x[:, 0] += (2 * y - 1)[:, None, None].float()
    return x, y


def test_whiten_init_whitens_the_patches_it_was_fitted_on():
    g = torch.Generator().manual_seed(0)
    base = torch.randn(40, 1, 32, 32, generator=g)
    images = torch.cat([base, 0.5 * base + 0.1 * torch.randn(40, 1, 32, 32, generator=g),
                        torch.randn(40, 1, 32, 32, generator=g)], 1)  # correlated channels
    model = fc.FastCNN(widths=TINY)
    fc.whiten_init(model, images)
    patches = images.unfold(2, 2, 1).unfold(3, 2, 1).permute(0, 2, 3, 1, 4, 5).reshape(-1, 12).double()
    w = model.whiten.weight.double().reshape(24, 12)
    z = patches @ w[:12].T  # the first half; the second is its negative
    cov = z.T @ z / len(z)
    eig = torch.linalg.eigvalsh(patches.T @ patches / len(patches)).flip(0)
    expected = torch.diag(torch.sort(eig / (eig + fc.WHITEN_EPS)).values)
    got = torch.diag(torch.sort(torch.diagonal(cov)).values)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)  # float32 weights: ~1e-6 relative
    assert torch.allclose(cov - torch.diag(torch.diagonal(cov)), torch.zeros(12, 12, dtype=torch.float64), atol=1e-3)
    torch.testing.assert_close(w[12:], -w[:12])
    assert not model.whiten.weight.requires_grad


@pytest.mark.parametrize("norm", ["bn", "gn"])
def test_the_net_has_its_norm_in_every_block_and_fc_is_its_head(norm):
    model = fc.fastcnn(norm=norm, shape="airbench93").eval()
    x = torch.randn(4, 3, 32, 32)
    assert model(x).shape == (4, 10) and model.features(x).shape == (4, 128)
    torch.testing.assert_close(model.fc(model.features(x)), model(x))
    norms = [m for m in model.modules() if isinstance(m, (torch.nn.BatchNorm2d, torch.nn.GroupNorm))]
    assert len(norms) == 6 and all(not m.weight.requires_grad and m.bias.requires_grad for m in norms)
    kind = torch.nn.BatchNorm2d if norm == "bn" else torch.nn.GroupNorm
    assert all(isinstance(m, kind) for m in norms)
    assert all(m.track_running_stats for m in norms) if norm == "bn" else not any(
        isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())


def test_bad_net_settings_are_refused_naming_them():
    with pytest.raises(ValueError, match="parameter 'norm'"):
        fc.FastCNN(norm="ln")
    with pytest.raises(ValueError, match="parameter 'shape'"):
        fc.fastcnn(shape="resnet")
    with pytest.raises(ValueError, match="parameter 'widths'"):
        fc.FastCNN(widths=(8, 16))


def test_the_schedule_rises_then_falls_to_its_end():
    r = Recipe(warmup=0.25, start=0.2, end=0.07)
    total = 100
    f = [lr_factor(s, total, r) for s in range(total)]
    assert f[0] == pytest.approx(0.2) and f[25] == pytest.approx(1.0) and f[-1] == pytest.approx(0.07)
    assert all(a < b for a, b in zip(f[:25], f[1:26])) and all(a > b for a, b in zip(f[25:-1], f[26:]))


def test_both_groups_decay_alike_and_norm_shifts_learn_faster():
    model = fc.FastCNN(widths=TINY)
    r = Recipe(lr=0.5, norm_lr_mult=10, decay=0.003)
    slow, fast = param_groups(model, r)
    assert slow["lr"] * slow["weight_decay"] == pytest.approx(fast["lr"] * fast["weight_decay"]) == pytest.approx(0.003)
    assert fast["lr"] == pytest.approx(5.0)
    ids = {id(p) for p in fast["params"]}
    assert id(model.whiten.bias) in ids and id(model.group1.norm1.bias) in ids
    assert id(model.group1.conv1.weight) not in ids and id(model.fc.linear.weight) not in ids


@pytest.mark.parametrize("bf16", [False, True])
def test_the_recipe_learns_a_separable_toy(bf16):
    torch.manual_seed(0)
    x, y = _toy(128)
    model = fc.FastCNN(widths=TINY)
    recipe = Recipe(epochs=4, batch_size=32, lr=0.2, whiten_images=128)
    losses = train_fast(model, x, y, recipe, seed=0, bf16=bf16)
    assert len(losses) == 4 and losses[-1] < losses[0]
    xt, yt = _toy(64, seed=1)
    assert (model(xt).argmax(1) == yt).float().mean() >= 0.9
    assert not model.training


def test_cpu_bf16_follows_the_flags_and_the_switch(monkeypatch):
    monkeypatch.setattr("memlab.core.config.cpu_flags", lambda: {"avx2", "avx512_bf16"})
    monkeypatch.delenv(BF16_ENV, raising=False)
    assert cpu_bf16() is True
    monkeypatch.setattr("memlab.core.config.cpu_flags", lambda: {"avx2", "fma"})
    assert cpu_bf16() is False
    monkeypatch.setenv(BF16_ENV, "1")
    assert cpu_bf16() is True
    monkeypatch.setenv(BF16_ENV, "0")
    assert cpu_bf16() is False
    monkeypatch.setenv(BF16_ENV, "half")
    with pytest.raises(ConfigError, match=f"{BF16_ENV}.*'half'"):
        cpu_bf16()


def test_the_cache_offers_a_checkpoint_only_while_it_trains_an_entry(monkeypatch):
    seen = []
    assert cache.checkpoint_path() is None

    def train(model):
        seen.append(cache.checkpoint_path())
        seen[-1].parent.mkdir(parents=True)
        seen[-1].write_bytes(b"x")

    cache.load_or_train("99_t", "s", {"a": 1}, lambda: torch.nn.Linear(2, 2), train)
    assert seen[0].name == "checkpoint.pt" and not seen[0].parent.exists()  # gone once the entry is written
    assert cache.checkpoint_path() is None

    def compute():  # a stage caching tensors (chapter 2's trainings) is offered one too
        train(None)
        return {"w": torch.zeros(1)}

    cache.load_or_compute("99_t", "c", {"a": 1}, compute)
    assert seen[-1].name == "checkpoint.pt" and seen[-1] != seen[0] and not seen[-1].parent.exists()
    assert cache.checkpoint_path() is None
    monkeypatch.setenv("MEMLAB_NO_CACHE", "1")
    cache.load_or_train("99_t", "s", {"a": 2}, lambda: torch.nn.Linear(2, 2), lambda m: seen.append(cache.checkpoint_path()))
    assert seen[-1] is None


CHILD = textwrap.dedent("""
    import os, signal, sys
    import torch
    sys.path.insert(0, {tests!r})
    from test_fast_recipe import TINY, _toy
    from memlab.models.fastcnn import FastCNN
    from memlab.models.recipe import Recipe, train_fast

    torch.set_num_threads(1)
    kill_at = int(sys.argv[1])
    if kill_at:
        steps = [0]
        real = torch.optim.SGD.step

        def step(self, *a, **k):
            steps[0] += 1
            if steps[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)  # mid-epoch, no chance to clean up
            return real(self, *a, **k)

        torch.optim.SGD.step = step
    torch.manual_seed(0)
    x, y = _toy(96)
    model = FastCNN(widths=TINY)
    ckpt = sys.argv[2]
    train_fast(model, x, y, Recipe(epochs=3, batch_size=16, lr=0.2, whiten_images=96), seed=0, bf16=False,
               checkpoint=ckpt if ckpt != "-" else None)
    torch.save(model.state_dict(), sys.argv[3])
""")


def _child(tmp_path: Path, kill_at: int, ckpt: str, out: Path) -> int:
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(tests=str(Path(__file__).parent)))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MEMLAB_PROGRESS": "0"}
    return subprocess.run([sys.executable, str(script), str(kill_at), ckpt, str(out)], env=env,
                          capture_output=True, text=True, timeout=300).returncode


def test_a_training_killed_mid_epoch_resumes_to_the_uninterrupted_weights(tmp_path):
    ckpt = tmp_path / "partial" / "checkpoint.pt"
    # 6 steps an epoch: step 9 is in the middle of the second epoch, after the first checkpoint
    assert _child(tmp_path, 9, str(ckpt), tmp_path / "never.pt") == -signal.SIGKILL
    assert ckpt.exists() and torch.load(ckpt, weights_only=False)["epoch"] == 1
    assert _child(tmp_path, 0, str(ckpt), tmp_path / "resumed.pt") == 0
    assert _child(tmp_path, 0, "-", tmp_path / "straight.pt") == 0
    resumed, straight = torch.load(tmp_path / "resumed.pt"), torch.load(tmp_path / "straight.pt")
    assert resumed.keys() == straight.keys()
    for k in straight:  # the same kernels in the same order: equal up to the last bit, or very near it
        torch.testing.assert_close(resumed[k], straight[k], rtol=1e-6, atol=1e-7)


def test_a_checkpoint_of_another_recipe_is_not_resumed(tmp_path):
    x, y = _toy(32)
    ckpt = tmp_path / "c.pt"
    torch.manual_seed(0)
    train_fast(fc.FastCNN(widths=TINY), x, y, Recipe(epochs=1, batch_size=16, whiten_images=32), bf16=False,
               checkpoint=ckpt)
    torch.manual_seed(0)
    other = replace(Recipe(epochs=2, batch_size=16, whiten_images=32), lr=0.1)
    losses = train_fast(fc.FastCNN(widths=TINY), x, y, other, bf16=False, checkpoint=ckpt)
    assert len(losses) == 2 and torch.load(ckpt, weights_only=False)["recipe"]["lr"] == 0.1


def test_widths_and_memory_follow_airbench94_ratios():
    assert fc.widths_of(64) == fc.SHAPES["airbench94"]
    params = sum(p.numel() for p in fc.fastcnn(width=64).parameters())
    assert 1.9e6 < params < 2.0e6
    # the estimate counts the parameters four times plus the activations, and grows with the batch
    assert fc.train_memory_bytes(64, 1024) > fc.train_memory_bytes(64, 256) > 16 * params
    with pytest.raises(ValueError, match="parameter 'width'.*got 0"):
        fc.widths_of(0)


def test_a_chapter_builds_either_classifier_and_refuses_another():
    from memlab.models.recipe import cifar_classifier

    net = cifar_classifier("fastcnn", 10, norm="gn", width=4)
    assert isinstance(net, fc.FastCNN) and net.widths == (4, 16, 16) and net.norm == "gn"
    bn = cifar_classifier("fastcnn", 10, width=4)
    assert all(m.momentum == 0.1 for m in bn.modules() if isinstance(m, torch.nn.BatchNorm2d))
    assert type(cifar_classifier("resnet18", 10, width=2)).__name__ == "ResNet18"
    with pytest.raises(ValueError, match="parameter 'arch'.*vgg"):
        cifar_classifier("vgg", 10)


def test_retrain_of_the_fast_net_starts_fresh_and_trains_by_its_recipe(monkeypatch):
    """Retrain re-initialises the fast CNN by building it anew (whitening and Dirac init included) and
    trains it by train_fast with the chapter's epochs, batch and learning rate; the original is untouched."""
    from memlab.models import recipe as R
    from memlab.science.unlearning import retrain as RT
    from memlab.science.unlearning.registry import Splits

    x, y = _toy(64)
    torch.manual_seed(0)
    original = fc.FastCNN(widths=TINY)
    train_fast(original, x, y, Recipe(epochs=1, batch_size=32, lr=0.2, whiten_images=64), seed=0, bf16=False)
    before = {k: v.clone() for k, v in original.state_dict().items()}
    seen = {}
    real = R.train_fast

    def spy(model, xs, ys, recipe, **kw):
        seen.update(recipe=recipe, start=model.group1.conv1.weight.detach().clone(), n=len(xs))
        return real(model, xs, ys, recipe, **kw)

    monkeypatch.setattr(R, "train_fast", spy)
    net = RT.retrain(original, Splits(x[:16], y[:16], x[16:], y[16:], 2),
                     {"epochs": 2, "batch_size": 16, "lr": 0.1, "seed": 3})
    assert seen["n"] == 48 and (seen["recipe"].epochs, seen["recipe"].batch_size, seen["recipe"].lr) == (2, 16, 0.1)
    torch.manual_seed(3)
    assert torch.equal(seen["start"], fc.FastCNN(widths=TINY).group1.conv1.weight)  # a fresh, seeded init
    assert all(torch.equal(before[k], v) for k, v in original.state_dict().items())
    assert not torch.equal(net.group1.conv1.weight, original.group1.conv1.weight) and not net.training


def test_train_supervised_gives_groupnorm_its_own_norm_rate():
    from memlab.models.recipe import NORM_RECIPE, recipe_for

    assert recipe_for(fc.FastCNN(widths=TINY, norm="bn"), 3, 64, 1.0).norm_lr_mult == Recipe().norm_lr_mult
    gn = recipe_for(fc.FastCNN(widths=TINY, norm="gn"), 3, 64, 1.0)
    assert gn.norm_lr_mult == NORM_RECIPE["gn"]["norm_lr_mult"] < Recipe().norm_lr_mult and gn.epochs == 3
    assert gn.clip == NORM_RECIPE["gn"]["clip"] > 0 == recipe_for("bn", 3, 64, 1.0).clip


def test_a_clipped_step_moves_the_weights_by_at_most_the_clipped_gradient():
    """One SGD step (no decay) with the gradient's norm clipped to 1e-4 moves the conv weights by
    (1 + momentum) x lr x at most 1e-4 (Nesterov's first step), far less than the unclipped step."""
    x, y = _toy(32)
    moved = {}
    for clip in (0.0, 1e-4):
        torch.manual_seed(0)
        net = fc.FastCNN(widths=TINY)
        start = net.group2.conv2.weight.detach().clone()
        recipe = Recipe(epochs=1, batch_size=32, lr=0.5, decay=0.0, warmup=0.0, start=1.0, clip=clip)
        train_fast(net, x, y, recipe, seed=0, bf16=False)
        moved[clip] = float((net.group2.conv2.weight.detach() - start).norm())
    bound = (1 + Recipe().momentum) * 0.5 * 1e-4
    assert 0 < moved[1e-4] <= bound * 1.001 < moved[0.0] / 10


def test_train_supervised_counts_epochs_from_one_for_either_kind_of_net():
    """on_epoch gets the number of epochs done (train_fast's count), also through train_classifier's
    0-based on_epoch_end, so a chapter's early checkpoint means the same epoch for both nets."""
    from memlab.models.recipe import train_supervised
    from memlab.models.resnet import resnet18

    x, y = _toy(32)
    for model in (fc.FastCNN(widths=TINY), resnet18(2, width=2)):
        seen = []
        train_supervised(model, x, y, epochs=2, batch_size=16, lr=0.05, seed=0,
                         on_epoch=lambda epoch, m: seen.append((epoch, m.training)))
        assert [e for e, _ in seen] == [1, 2], type(model).__name__
