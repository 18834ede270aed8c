import numpy as np
import pytest
import torch

from memlab.core import config
from memlab.core.config import Config, ConfigError, Param, resolve_spec

SPEC = {
    "seed": Param(int, 0, low=0),
    "width": Param(int, {"smoke": 4, "cpu": 16, "paper": 64}, low=1, high=512),
    "lr": Param(float, 0.1, low=0.0, high=10.0),
    "method": Param(str, "GA", choices=("GA", "SalUn")),
    "methods": Param(list, ["GA"], item=str, choices=("GA", "SalUn", "SCRUB")),
    "budgets": Param(list, [10, 100], item=int, low=1),
    "augment": Param(bool, True),
    "limit": Param(int, None, low=1, allow_none=True),
}


def test_profile_defaults_fill_in():
    for profile, width in (("smoke", 4), ("cpu", 16), ("paper", 64)):
        cfg = resolve_spec("x", SPEC, profile)
        assert cfg.width == width and cfg["width"] == width and cfg.profile == profile


def test_none_override_means_profile_default_and_values_normalised():
    cfg = resolve_spec("x", SPEC, "cpu", width=None, lr=1, budgets=(5, 7))
    assert cfg.width == 16 and isinstance(cfg.lr, float) and cfg.budgets == [5, 7]
    assert cfg.to_dict()["chapter"] == "x" and cfg.limit is None


@pytest.mark.parametrize(
    "override, fragment",
    [
        ({"nope": 1}, "parameter 'nope': not a parameter of chapter 'x'"),
        ({"width": "wide"}, "parameter 'width': must be an integer"),
        ({"width": 0}, "parameter 'width': must be an integer in [1, 512]"),
        ({"width": 2.5}, "parameter 'width'"),
        ({"lr": float("nan")}, "parameter 'lr'"),
        ({"method": "Magic"}, "parameter 'method': must be a string from 'GA', 'SalUn'"),
        ({"methods": ["GA", "Magic"]}, "parameter 'methods'"),
        ({"methods": []}, "parameter 'methods': must be a non-empty"),
        ({"budgets": [0]}, "parameter 'budgets'"),
        ({"augment": 1}, "parameter 'augment': must be true or false"),
        ({"seed": True}, "parameter 'seed'"),
    ],
)
def test_bad_values_name_the_parameter(override, fragment):
    with pytest.raises(ConfigError) as e:
        resolve_spec("x", SPEC, "cpu", **override)
    assert fragment in str(e.value)
    assert "\n" not in str(e.value)


def test_bad_profile_and_checks():
    with pytest.raises(ConfigError, match="parameter 'profile': must be one of smoke, cpu, paper"):
        resolve_spec("x", SPEC, "gpu")

    def check(cfg):
        if cfg.width > 32 and cfg.profile != "paper":
            raise ConfigError("parameter 'width': at most 32 outside the paper profile")

    with pytest.raises(ConfigError, match="at most 32"):
        resolve_spec("x", SPEC, "cpu", checks=[check], width=64)
    assert resolve_spec("x", SPEC, "paper", checks=[check]).width == 64


def test_unknown_chapter():
    with pytest.raises(ConfigError, match="chapter 'nope': must be one of 01_bn_illusion"):
        config.resolve("nope")


def test_config_is_read_only():
    cfg = Config("x", "cpu", {"a": 1})
    with pytest.raises(AttributeError):
        cfg.a = 2
    assert cfg.replace(a=3).a == 3 and cfg.a == 1


def test_seeding_repeats_numbers():
    def draw():
        config.seed_everything(123)
        import random

        return random.random(), np.random.rand(), torch.rand(3).tolist()

    assert draw() == draw()
    config.seed_everything(124)
    assert torch.rand(1).item() != (config.seed_everything(123) or torch.rand(1).item())
    with pytest.raises(ConfigError, match="parameter 'seed'"):
        config.seed_everything(-1)


def test_device_and_autocast_on_cpu(monkeypatch):
    monkeypatch.setenv("MEMLAB_DEVICE", "cpu")
    dev = config.device()
    assert dev.type == "cpu"
    with config.autocast(dev):
        assert torch.ones(2, 2).matmul(torch.ones(2, 2)).dtype == torch.float32


def test_require_path(tmp_path):
    assert config.require_path(tmp_path, "data_root") == tmp_path
    with pytest.raises(ConfigError, match="parameter 'data_root'"):
        config.require_path(tmp_path / "missing", "data_root")
