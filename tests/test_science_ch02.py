"""Unit tests of the science chapter 2 moved out of its package: F1 and its bootstrap band
(memlab.science.metrics), outputs at each depth and top-1 accuracy (memlab.science.probes)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from memlab.models.resnet import resnet18
from memlab.science import metrics, probes

# ----------------------------------------------------------------------------- memlab.science.metrics: F1


def test_f1_score_closed_form():
    labels = np.array([True, True, True, False, False, False])
    verdicts = np.array([True, True, False, True, False, False])  # TP 2, FP 1, FN 1
    assert metrics.f1_score(verdicts, labels) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert metrics.f1_score(labels, labels) == 1.0
    assert metrics.f1_score(~labels, labels) == 0.0  # no true positive
    assert metrics.f1_score(np.zeros(6, bool), labels) == 0.0


def test_f1_score_symmetric_in_verdicts_and_labels():
    # F1 = 2 TP / (2 TP + FP + FN): swapping verdicts and labels swaps FP and FN, so F1 is unchanged.
    r = np.random.default_rng(1)
    for _ in range(20):
        v, lab = r.random(15) < 0.5, r.random(15) < 0.5
        assert metrics.f1_score(v, lab) == metrics.f1_score(lab, v)
    labels = np.array([False, False, True, True])
    assert metrics.f1_score(np.array([True, False, True, True]), labels) == pytest.approx(0.8)  # TP 2, FP 1


def test_f1_score_rejects_bad_shapes():
    with pytest.raises(ValueError, match="f1_score"):
        metrics.f1_score(np.ones(3, bool), np.ones(4, bool))
    with pytest.raises(ValueError, match="f1_score"):
        metrics.f1_score(np.ones((2, 2), bool), np.ones((2, 2), bool))


def test_f1_band_zero_when_nothing_varies_and_reproducible():
    labels = np.array([False] * 20 + [True] * 20)
    assert metrics.f1_band(labels, labels) == 0.0
    coin = np.random.default_rng(0).random(40) < 0.5
    band = metrics.f1_band(labels, coin)
    assert 0.1 < band < 0.5 and band == metrics.f1_band(labels, coin)  # fixed seed
    assert metrics.f1_band(labels, coin, coin) == 0.0  # paired difference of identical verdicts


def test_f1_band_matches_a_direct_bootstrap():
    r = np.random.default_rng(5)
    labels, verdicts = r.random(30) < 0.5, r.random(30) < 0.5
    idx = np.random.default_rng(0).integers(0, 30, size=(2000, 30))
    boots = [metrics.f1_score(verdicts[i], labels[i]) for i in idx]
    lo, hi = np.quantile(boots, [0.025, 0.975])
    assert metrics.f1_band(labels, verdicts) == pytest.approx((hi - lo) / 2, abs=1e-12)


# ----------------------------------------------------------------------------- memlab.science.probes: outputs, accuracy


def test_layer_outputs_shapes_and_reference_values():
    torch.manual_seed(0)
    model = resnet18(num_classes=10, width=2).eval()
    x = torch.randn(5, 3, 32, 32)
    out = probes.layer_outputs(model, x, batch_size=2)
    assert tuple(out) == probes.OUTPUT_DEPTHS
    dims = {"layer2": 4, "layer3": 8, "penultimate": 16, "logits": 10, "softmax": 10}
    for depth, d in dims.items():
        assert out[depth].shape == (5, d) and out[depth].dtype == np.float64
    np.testing.assert_allclose(out["softmax"].sum(1), 1.0, atol=1e-6)
    with torch.no_grad():
        np.testing.assert_allclose(out["logits"], model(x).double().numpy(), atol=1e-5)
        np.testing.assert_allclose(out["penultimate"], model.features(x).double().numpy(), atol=1e-5)
        # layer2: its stage's activations, globally average-pooled (a hook on the same module).
        acts = []
        h = model.layer2.register_forward_hook(lambda _m, _i, o: acts.append(o))
        model(x)
        h.remove()
        np.testing.assert_allclose(out["layer2"], F.adaptive_avg_pool2d(acts[0], 1).flatten(1).double(),
                                   atol=1e-5)
    # Batching does not change the outputs, and no hook is left behind.
    np.testing.assert_allclose(probes.layer_outputs(model, x, batch_size=512)["layer3"], out["layer3"], atol=1e-5)
    assert not model.layer2._forward_hooks and not model.layer3._forward_hooks


def test_layer_outputs_rejects_bad_input():
    model = resnet18(num_classes=10, width=2).eval()
    with pytest.raises(ValueError, match="'x'"):
        probes.layer_outputs(model, torch.randn(5, 3 * 32 * 32))
    with pytest.raises(ValueError, match="'model'"):
        probes.layer_outputs(torch.nn.Linear(3, 2), torch.randn(2, 3, 4, 4))


def test_accuracy_pct():
    logits = np.array([[2.0, 0.0], [0.0, 1.0], [3.0, 1.0], [0.0, 5.0]])
    assert probes.accuracy_pct(logits, np.array([0, 1, 1, 1])) == 75.0
    assert probes.accuracy_pct(logits, np.array([0, 1, 0, 1])) == 100.0
    with pytest.raises(ValueError, match="logits"):
        probes.accuracy_pct(logits, np.array([0, 1]))
    with pytest.raises(ValueError, match="logits"):
        probes.accuracy_pct(np.zeros(4), np.zeros(4, int))
