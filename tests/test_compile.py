"""torch.compile of the long training loops (issue 27): same training as eager within float
tolerance, a switch that turns it off, one clear error on a bad switch, and an eager fallback when
compiling fails."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from memlab import cli
from memlab.core import compiling
from memlab.core.config import COMPILE_ENV, ConfigError, compile_enabled
from memlab.models import train


def _tiny(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))


def _data(n: int = 19):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 3, 8, 8, generator=g), torch.randint(0, 3, (n,), generator=g)


def _train(monkeypatch, mode: str, min_steps: int = 1) -> tuple[nn.Module, list[float]]:
    monkeypatch.setenv(COMPILE_ENV, mode)
    monkeypatch.setattr(train, "COMPILE_MIN_STEPS", min_steps)
    model = _tiny()
    x, y = _data()  # 19 images at batch 8: batches of 8 and 11 (the merged trailing batch)
    losses = train.train_classifier(model, x, y, epochs=2, batch_size=8, lr=0.05, augment=False, seed=3)
    return model, losses


@pytest.mark.parametrize("text, expected", [("", False), ("1", True), ("on", True), ("0", False), ("off", False)])
def test_switch_values(monkeypatch, text, expected):
    monkeypatch.setenv(COMPILE_ENV, text)
    assert compile_enabled() is expected


def test_bad_switch_is_one_clear_error(monkeypatch, capsys):
    monkeypatch.setenv(COMPILE_ENV, "maybe")
    with pytest.raises(ConfigError, match=r"MEMLAB_COMPILE.*'maybe'"):
        compile_enabled()
    assert cli.main(["run", "02_sde", "--profile", "smoke", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "MEMLAB_COMPILE" in err and "'maybe'" in err and err.count("\n") == 1


def test_short_loops_stay_eager(monkeypatch):
    seen = []
    monkeypatch.setattr(torch, "compile", lambda m, **kw: seen.append(m) or m)
    before = compiling.long_loops()
    _train(monkeypatch, "1", min_steps=10_000)
    assert not seen and compiling.loop_mode(before) is None


def test_compile_keeps_the_nchw_layout(monkeypatch):
    # inductor's channels-last layout would meet oneDNN's AVX2 heap corruption
    # (benchmarks/repro_onednn_channels_last.py)
    seen = []
    monkeypatch.setattr(torch, "compile", lambda m, **kw: seen.append(kw) or m)
    monkeypatch.setattr(compiling, "FAILED", [])
    _train(monkeypatch, "1")
    assert seen == [{"dynamic": False, "options": {"layout_optimization": False}}]


def test_groupnorm_models_train_eagerly(monkeypatch):
    # a compiled GroupNorm ResNet step crashed (segfault) on CI's AVX2 leg; they are not compiled
    seen = []
    monkeypatch.setattr(torch, "compile", lambda m, **kw: seen.append(m) or m)
    monkeypatch.setenv(COMPILE_ENV, "1")
    monkeypatch.setattr(train, "COMPILE_MIN_STEPS", 1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.GroupNorm(2, 4), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))
    before = compiling.long_loops()
    x, y = _data()
    train.train_classifier(model, x, y, epochs=2, batch_size=8, augment=False)
    assert not seen and compiling.loop_mode(before) == "eager"


def test_switched_off_long_loop_counts_as_eager(monkeypatch):
    seen = []
    monkeypatch.setattr(torch, "compile", lambda m, **kw: seen.append(m) or m)
    before = compiling.long_loops()
    _train(monkeypatch, "0")
    assert not seen and compiling.loop_mode(before) == "eager"


def test_failed_compile_falls_back_to_eager_with_a_warning(monkeypatch):
    eager, eager_losses = _train(monkeypatch, "0")

    class Broken(nn.Module):
        def forward(self, x):
            raise RuntimeError("no C++ compiler\nsecond line")

    monkeypatch.setattr(compiling, "FAILED", [])
    monkeypatch.setattr(torch, "compile", lambda m, **kw: Broken())
    before = compiling.long_loops()
    with pytest.warns(UserWarning, match="torch.compile failed .*no C\\+\\+ compiler.*training eagerly"):
        model, losses = _train(monkeypatch, "1")
    assert losses == eager_losses  # the failed step was redone eagerly on the same batch
    for a, b in zip(eager.state_dict().values(), model.state_dict().values()):
        assert torch.equal(a, b)
    assert compiling.loop_mode(before) == "eager" and not compiling.compiled_steps()


@pytest.mark.slow
def test_compiled_training_matches_eager(monkeypatch):
    monkeypatch.setattr(compiling, "FAILED", [])
    eager, eager_losses = _train(monkeypatch, "0")
    before = compiling.long_loops()
    compiled, losses = _train(monkeypatch, "1")
    assert compiling.loop_mode(before) == "compiled", compiling.FAILED
    assert losses == pytest.approx(eager_losses, rel=1e-4, abs=1e-5)
    for (name, a), b in zip(eager.state_dict().items(), compiled.state_dict().values()):
        assert torch.allclose(a.float(), b.float(), rtol=1e-3, atol=1e-5), name
