import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score, roc_auc_score

from memlab.models import train
from memlab.models.resnet import resnet18
from memlab.science import metrics


@pytest.mark.parametrize("norm", ["bn", "gn"])
def test_resnet_shapes_and_norm_switch(norm):
    m = resnet18(num_classes=10, norm=norm, width=4)
    x = torch.randn(2, 3, 32, 32)
    assert m(x).shape == (2, 10) and m.features(x).shape == (2, 32)
    has_running = any(isinstance(mod, torch.nn.BatchNorm2d) for mod in m.modules())
    assert has_running == (norm == "bn")
    with pytest.raises(ValueError, match="parameter 'norm'"):
        resnet18(norm="ln")
    with pytest.raises(ValueError, match="parameter 'width'"):
        resnet18(width=0)


def test_augment_keeps_shape_and_zero_shift_identity():
    x = torch.arange(2 * 3 * 32 * 32, dtype=torch.float32).reshape(2, 3, 32, 32)
    out = train.augment_batch(x, torch.Generator().manual_seed(0))
    assert out.shape == x.shape
    # every output row is a (possibly flipped) crop of the reflect-padded input
    padded = torch.nn.functional.pad(x, (4, 4, 4, 4), mode="reflect")
    found = False
    for dy in range(9):
        for dx in range(9):
            crop = padded[0, :, dy : dy + 32, dx : dx + 32]
            if torch.equal(out[0], crop) or torch.equal(out[0], crop.flip(-1)):
                found = True
    assert found


def test_training_learns_a_separable_problem():
    torch.manual_seed(0)
    x = torch.randn(64, 3, 32, 32)
    y = (x[:, 0].mean((1, 2)) > 0).long()
    m = resnet18(num_classes=2, norm="gn", width=4)  # no running statistics to lag behind the weights
    before = train.accuracy(m, x, y)
    losses = train.train_classifier(m, x, y, epochs=8, batch_size=16, lr=0.05, augment=False)
    assert losses[-1] < losses[0] and train.accuracy(m, x, y) > max(before, 0.8)
    assert not m.training and train.features(m, x).shape == (64, 32)


@pytest.mark.parametrize("n,bs,sizes", [(70, 16, [16, 16, 16, 22]), (64, 16, [16] * 4), (5, 16, [5])])
def test_trailing_partial_batch_is_merged(n, bs, sizes):
    bounds = train.batch_bounds(n, bs)
    assert [b - a for a, b in bounds] == sizes and train.steps_per_epoch(n, bs) == len(sizes)
    assert bounds[0][0] == 0 and bounds[-1][1] == n  # every image once, contiguous
    assert all(prev[1] == nxt[0] for prev, nxt in zip(bounds, bounds[1:]))
    with pytest.raises(ValueError, match="batch_size=0"):
        train.steps_per_epoch(10, 0)


def test_training_batches_never_fall_below_batch_size():
    seen: list[int] = []
    m = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 2))
    m.register_forward_pre_hook(lambda _mod, args: seen.append(len(args[0])))
    x, y = torch.randn(70, 3, 32, 32), torch.randint(0, 2, (70,))
    train.train_classifier(m, x, y, epochs=2, batch_size=16, augment=False)
    assert seen == [16, 16, 16, 22] * 2


def test_roc_metrics_agree_with_sklearn_and_extremes():
    rng = np.random.default_rng(0)
    labels = np.r_[np.ones(100), np.zeros(100)]
    scores = labels + rng.normal(0, 1, 200)
    out = metrics.roc_metrics(scores, labels)
    assert out["auc"] == pytest.approx(roc_auc_score(labels, scores))
    assert 0 <= out["tpr@1%fpr"] <= out["tpr@10%fpr"] <= 1
    perfect = metrics.roc_metrics(labels * 2, labels)
    assert perfect == {"auc": 1.0, "tpr@10%fpr": 1.0, "tpr@1%fpr": 1.0}
    with pytest.raises(ValueError, match="parameter 'labels'"):
        metrics.roc_metrics(scores, np.ones(200))


def test_best_f1_matches_brute_force():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 60)
    scores = np.round(labels + rng.normal(0, 1, 60), 1)  # ties on purpose
    brute = max(f1_score(labels, (scores >= t).astype(int)) for t in np.unique(scores))
    f1, t = metrics.best_f1(scores, labels)
    assert f1 == pytest.approx(brute) and f1_score(labels, (scores >= t).astype(int)) == pytest.approx(brute)
