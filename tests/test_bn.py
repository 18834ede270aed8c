"""Properties of the BatchNorm recalibration operator (memlab.science.bn), Theorem 1 of the BN-illusion paper."""
import copy

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from memlab.models.resnet import resnet18
from memlab.science import bn


def _perturbed(model: nn.Module, seed: int = 0) -> nn.Module:
    """A BN model whose running statistics are far from its activation moments."""
    torch.manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_(0, 3)
            m.running_var.uniform_(0.1, 5)
    return model.eval()


@pytest.fixture(scope="module")
def images():
    return torch.randn(32, 3, 16, 16, generator=torch.Generator().manual_seed(1))


@pytest.fixture()
def model():
    torch.manual_seed(0)
    return _perturbed(resnet18(width=4))


def test_parameters_bitwise_unchanged_and_input_untouched(model, images):
    before = copy.deepcopy(model.state_dict())
    out = bn.recalibrate(model, images, batch_size=16)
    assert bn.weights_equal(model, out)
    for k, v in model.state_dict().items():  # the input model, buffers included, is not modified
        assert torch.equal(v, before[k])
    assert any(not torch.equal(a[0], b[0]) for a, b in zip(bn.running_stats(model).values(),
                                                            bn.running_stats(out).values()))
    assert not out.training


def test_idempotent_on_fixed_batch_order(model, images):
    once = bn.recalibrate(model, images, batch_size=16)
    twice = bn.recalibrate(once, images, batch_size=16)
    for (m1, v1), (m2, v2) in zip(bn.running_stats(once).values(), bn.running_stats(twice).values()):
        assert torch.equal(m1, m2) and torch.equal(v1, v2)


def test_result_does_not_depend_on_the_old_statistics(images):
    torch.manual_seed(0)
    net = resnet18(width=4)
    a = bn.recalibrate(_perturbed(copy.deepcopy(net), 1), images, 16)
    b = bn.recalibrate(_perturbed(copy.deepcopy(net), 2), images, 16)
    for (m1, v1), (m2, v2) in zip(bn.running_stats(a).values(), bn.running_stats(b).values()):
        assert torch.equal(m1, m2) and torch.equal(v1, v2)


def test_full_batch_statistics_equal_direct_activation_moments(model, images):
    out = bn.recalibrate(model, images, batch_size=len(images))
    direct = bn.activation_moments(model, images)
    stored = bn.running_stats(out)
    assert direct.keys() == stored.keys() and len(stored) == 20
    for name, (mean, var) in direct.items():
        torch.testing.assert_close(stored[name][0], mean, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(stored[name][1], var, rtol=1e-4, atol=1e-5)


def test_cumulative_average_over_equal_batches_is_the_mean_of_batch_means():
    # A single BN layer: the stored mean must be the exact average of the equal-size batch means.
    layer = nn.Sequential(nn.BatchNorm2d(3)).eval()
    x = torch.randn(40, 3, 4, 4, generator=torch.Generator().manual_seed(3)) * 2 + 1
    out = bn.recalibrate(layer, x, batch_size=10)
    expected = torch.stack([x[i : i + 10].mean((0, 2, 3)) for i in range(0, 40, 10)]).mean(0)
    torch.testing.assert_close(out[0].running_mean, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out[0].running_mean, x.mean((0, 2, 3)), rtol=1e-5, atol=1e-6)


def test_identity_on_groupnorm(images):
    torch.manual_seed(0)
    gn = resnet18(width=4, norm="gn").eval()
    out = bn.recalibrate(gn, images)
    assert not bn.has_running_stats(gn)
    sd, so = gn.state_dict(), out.state_dict()
    assert sd.keys() == so.keys() and all(torch.equal(sd[k], so[k]) for k in sd)
    with torch.no_grad():
        assert torch.equal(gn(images), out(images))


def test_dataloader_input_matches_tensor_input(model, images):
    loader = DataLoader(TensorDataset(images, torch.zeros(len(images))), batch_size=16, shuffle=False)
    a = bn.recalibrate(model, loader)
    b = bn.recalibrate(model, images, batch_size=16)
    for (m1, v1), (m2, v2) in zip(bn.running_stats(a).values(), bn.running_stats(b).values()):
        torch.testing.assert_close(m1, m2)
        torch.testing.assert_close(v1, v2)


def test_misalignment_is_zero_against_itself_and_positive_when_perturbed(model, images):
    cal = bn.recalibrate(model, images)
    assert all(v == 0.0 for v in bn.mean_misalignment(cal, cal).values())
    assert min(bn.mean_misalignment(model, cal).values()) > 0.1


@pytest.mark.parametrize("bad, kw", [
    (torch.randn(0, 3, 32, 32), {}),
    (torch.randn(3, 32, 32), {}),
    (torch.randn(4, 3, 32, 32), {"batch_size": 0}),
    ([1, 2, 3], {}),
])
def test_bad_input_raises_clear_error(model, bad, kw):
    with pytest.raises(ValueError, match="parameter '(images|batch_size)'"):
        bn.recalibrate(model, bad, **kw)
