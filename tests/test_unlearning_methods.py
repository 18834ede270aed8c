"""The chapter-1 unlearning methods: registry entries, BN treatment, and each method's defining property."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from memlab.science import bn
from memlab.models.resnet import resnet18
from memlab.science.unlearning import registry
from memlab.science.unlearning.pgu import core_projections
from memlab.science.unlearning.retrain import reinitialise
from memlab.science.unlearning.salun import saliency_mask
from memlab.science.unlearning._common import UnlearningDiverged, check_finite
from memlab.science.unlearning.ssd import dampen, importances

BN_MODES = {"Retrain": "n/a", "GA": "train", "GA+FT": "train", "SalUn": "train", "SCRUB": "train",
            "BadTeacher": "eval", "IncompTeacher": "train", "NoiseInject": "mixed", "SSD": "eval", "PGU": "eval"}
TINY = {
    "Retrain": dict(epochs=1, batch_size=16),
    "GA": dict(steps=2, batch_size=8),
    "GA+FT": dict(ga_steps=1, ft_steps=2, batch_size=8),
    "SalUn": dict(steps=2, batch_size=8),
    "SCRUB": dict(epochs=2, msteps=1, max_steps=1, min_steps=1, batch_size=8),
    "BadTeacher": dict(max_steps=2, batch_size=8),
    "IncompTeacher": dict(max_steps=2, batch_size=8),
    "NoiseInject": dict(noise_batch=4, noise_steps=2, retain_per_class=2, batch_size=8),
    "SSD": dict(max_batches=2, batch_size=8),
    "PGU": dict(retain_samples=8, positions=4, steps=2, batch_size=8),
}


@pytest.fixture(scope="module")
def splits():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 3, 16, 16, generator=g)
    y = torch.arange(40) % 4
    return registry.Splits(x[y == 0], y[y == 0], x[y != 0], y[y != 0], 4)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return resnet18(num_classes=4, width=2).eval()


def _buffers_equal(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.buffers(), b.buffers()))


def test_every_method_is_registered_with_its_bn_mode():
    for name, mode in BN_MODES.items():
        assert registry.bn_mode(name) == mode


@pytest.mark.parametrize("name", list(TINY))
def test_method_returns_new_model_and_leaves_input_untouched(name, model, splits):
    before = copy.deepcopy(model.state_dict())
    out = registry.get(name).fn(model, splits, TINY[name])
    assert out is not model and type(out) is type(model) and not out.training
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert not bn.weights_equal(out, model)  # every method moves some weight
    if BN_MODES[name] == "eval":  # misalignment: weights drift, statistics stay
        assert _buffers_equal(out, model)
    else:  # 'train' or 'mixed': forget/retain batches flow through the BN moving average
        assert not _buffers_equal(out, model)


@pytest.mark.parametrize("name", list(TINY))
def test_unknown_or_negative_hyperparameter_is_a_clear_error(name, model, splits):
    with pytest.raises(ValueError, match="unknown hyperparameter 'nope'"):
        registry.get(name).fn(model, splits, {"nope": 1})
    key = next(k for k, v in TINY[name].items() if isinstance(v, int))
    with pytest.raises(ValueError, match=f"'{key}' must be >= 0"):
        registry.get(name).fn(model, splits, {key: -1})


def test_unknown_method_name_lists_the_allowed_ones():
    with pytest.raises(ValueError, match="parameter 'method'.*allowed:.*SalUn"):
        registry.get("Salun")


def test_retrain_does_not_depend_on_the_original_weights(splits):
    torch.manual_seed(1)
    a = resnet18(num_classes=4, width=2)
    torch.manual_seed(2)
    b = resnet18(num_classes=4, width=2)
    ra = registry.get("Retrain").fn(a, splits, TINY["Retrain"])
    rb = registry.get("Retrain").fn(b, splits, TINY["Retrain"])
    assert all(torch.equal(x, y) for x, y in zip(ra.state_dict().values(), rb.state_dict().values()))


def test_reinitialise_resets_running_statistics(model):
    net = reinitialise(copy.deepcopy(model), 0)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            assert torch.equal(m.running_mean, torch.zeros_like(m.running_mean))


def test_ga_raises_the_forget_loss(model, splits):
    def loss(m):
        with torch.no_grad():
            return F.cross_entropy(m.eval()(splits.forget_x), splits.forget_y).item()

    out = registry.get("GA").fn(model, splits, dict(steps=3, lr=0.05, batch_size=10))
    assert loss(out) > loss(model)


def test_salun_mask_keeps_the_requested_share_and_masked_weights_stay_fixed(model, splits):
    mask = saliency_mask(copy.deepcopy(model), splits.forget_x, splits.forget_y, 0.3)
    kept = sum(float(m.sum()) for m in mask.values()) / sum(m.numel() for m in mask.values())
    assert abs(kept - 0.3) < 0.01
    out = registry.get("SalUn").fn(model, splits, dict(steps=3, batch_size=8, mask_ratio=0.3, weight_decay=0.0,
                                                       momentum=0.0))
    p0, p1 = dict(model.named_parameters()), dict(out.named_parameters())
    for name, m in mask.items():
        frozen = m == 0
        assert torch.equal(p1[name][frozen], p0[name][frozen])


def test_salun_retain_mix_out_of_range_is_an_error(model, splits):
    with pytest.raises(ValueError, match="retain_mix"):
        registry.get("SalUn").fn(model, splits, dict(retain_mix=1.0))


def test_ssd_dampening_matches_closed_form():
    net = nn.Linear(3, 1, bias=False)
    with torch.no_grad():
        net.weight.copy_(torch.tensor([[2.0, 4.0, 8.0]]))
    imp_full = {"weight": torch.tensor([[1.0, 1.0, 1.0]])}
    imp_forget = {"weight": torch.tensor([[5.0, 20.0, 40.0]])}  # alpha=10 selects the last two
    changed = dampen(net, imp_full, imp_forget, alpha=10.0, lam=1.0)
    assert changed == 2
    torch.testing.assert_close(net.weight, torch.tensor([[2.0, 4.0 * 1 / 20, 8.0 * 1 / 40]]))


def test_pgu_projector_removes_the_retain_subspace():
    net = nn.Sequential(nn.Flatten(), nn.Linear(6, 3))
    basis = torch.randn(6, 2, generator=torch.Generator().manual_seed(0))
    x = (torch.randn(50, 2) @ basis.T).view(50, 6, 1, 1)  # retain inputs span a 2-d subspace
    proj = core_projections(net, x, threshold=0.999999, positions=1, seed=0)["1"]
    torch.testing.assert_close(proj @ proj, proj, atol=1e-5, rtol=0)
    torch.testing.assert_close(proj @ basis, torch.zeros_like(basis), atol=1e-4, rtol=0)


def test_pgu_keeps_retain_outputs_of_a_linear_model():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(6, 3))
    basis = torch.randn(6, 2)
    retain_x = (torch.randn(30, 2) @ basis.T).view(30, 6, 1, 1)
    forget_x = torch.randn(10, 6, 1, 1)
    s = registry.Splits(forget_x, torch.zeros(10, dtype=torch.long), retain_x, torch.ones(30, dtype=torch.long), 3)
    out = registry.get("PGU").fn(net, s, dict(retain_samples=30, positions=1, threshold=0.999999, steps=5,
                                              lr=0.5, batch_size=10))
    with torch.no_grad():
        torch.testing.assert_close(out[1].weight @ basis, net[1].weight @ basis, atol=1e-4, rtol=0)
        assert not torch.allclose(out(forget_x), net(forget_x))


def test_badteacher_pulls_forget_outputs_toward_the_incompetent_teacher(model, splits):
    out = registry.get("BadTeacher").fn(model, splits, dict(epochs=3, lr=1e-2, batch_size=8))
    with torch.no_grad():
        p0 = F.softmax(model.eval()(splits.forget_x), 1)[:, 0].mean()
        p1 = F.softmax(out(splits.forget_x), 1)[:, 0].mean()
    assert p1 < p0


def test_ssd_follows_the_reference_eval_mode_order(model, splits):
    # ssd_tuning: model.eval(), forget importances, then those of D, then dampen; BN untouched.
    hp = dict(alpha=2.0, lam=1.0, batch_size=8)
    out = registry.get("SSD").fn(model, splits, hp)
    ref = copy.deepcopy(model).eval()
    full_x = torch.cat([splits.retain_x, splits.forget_x])
    full_y = torch.cat([splits.retain_y, splits.forget_y])
    perm = torch.randperm(len(full_x), generator=torch.Generator().manual_seed(0))
    kw = dict(batch_size=8, max_batches=0, bn_mode="eval", desc="ref")
    imp_f = importances(ref, splits.forget_x, splits.forget_y, **kw)
    imp_d = importances(ref, full_x[perm], full_y[perm], **kw)
    assert dampen(ref, imp_d, imp_f, 2.0, 1.0) > 0
    assert all(torch.equal(a, b) for a, b in zip(out.state_dict().values(), ref.state_dict().values()))
    assert _buffers_equal(out, model)  # misalignment only: running statistics unchanged


def test_noiseinject_repair_keeps_the_running_statistics(model, splits):
    # With the impair step switched off only the repair runs: weights move, BN buffers stay.
    hp = dict(noise_batch=4, noise_steps=1, retain_per_class=4, batch_size=8, impair_epochs=0)
    out = registry.get("NoiseInject").fn(model, splits, hp)
    assert _buffers_equal(out, model) and not bn.weights_equal(out, model)


def test_diverged_method_fails_loudly_naming_it(model, splits):
    with pytest.raises(UnlearningDiverged, match=r"^GA: the unlearned model has non-finite"):
        registry.get("GA").fn(model, splits, dict(steps=3, lr=1e30, batch_size=8))


def test_nan_guard_checks_weights_buffers_and_logits(model, splits):
    check_finite(model, "ok", splits.retain_x[:4])  # a finite model passes
    for name in ("conv1.weight", "bn1.running_var"):
        bad = copy.deepcopy(model)
        with torch.no_grad():
            dict(bad.state_dict(keep_vars=True))[name].view(-1)[0] = float("nan")
        with pytest.raises(UnlearningDiverged, match="PGU: .*first '" + name.replace(".", r"\.") + "'"):
            check_finite(bad, "PGU", splits.retain_x[:4])
    huge = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 2))
    with torch.no_grad():
        huge[1].weight.fill_(3e38)  # finite weights whose logits overflow to inf
    with pytest.raises(UnlearningDiverged, match="SSD: the unlearned model's logits are non-finite"):
        check_finite(huge, "SSD", splits.retain_x[:4].abs() + 1)
    guarded = registry._guarded("Fake", lambda m, s, c: huge)
    with pytest.raises(UnlearningDiverged, match="^Fake: "):
        guarded(model, registry.Splits(splits.forget_x, splits.forget_y, splits.retain_x.abs() + 1,
                                       splits.retain_y, 4))
