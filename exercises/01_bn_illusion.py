# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [raw]
# # ASSIGNMENT CONFIG
# name: 01_bn_illusion
# init_cell: true
# check_all_cell: false
# export_cell: false
# run_tests: false
# solutions_pdf: false
# show_question_points: true
# generate:
#   show_stdout: true

# %% [markdown]
# # Exercises: the BatchNorm illusion (Chapter 1)
#
# These exercises go with the chapter *The BatchNorm illusion in unlearning evaluation*. A
# BatchNorm network is evaluated with *running* statistics, estimated while it trained. An
# unlearning method that runs forward passes in train mode changes those statistics without
# changing a weight; forget accuracy measured with stale or skewed statistics can then look
# like forgetting that is not there. The audit *recalibrates* the statistics on retain data
# (`memlab.science.bn.recalibrate`) and measures again. You rebuild the operator, the misalignment
# diagnostic and the illusion itself on a tiny network that trains in a second.
#
# | # | exercise | level | graded | time |
# |---|---|---|---|---|
# | 1.1 | recalibration by hand | warm-up | auto | 15 min |
# | 1.2 | running-mean misalignment | core | auto | 15 min |
# | 1.3 | which BN mode hides forgetting? | core | auto | 20 min |
# | 1.4 | re-run with your own forget class | open | manual | 30 min |
#
# Every cell runs in seconds on one CPU core. Run the cells in order; `grader.check("q…")`
# runs the public tests of a question (the grader also runs hidden ones).

# %%
import copy

import torch
from torch import nn

from memlab.science import bn, metrics

torch.set_num_threads(1)
SEED = 0  # per-student: your instructor may give you another seed
STUDENT = ""  # per-student: your id from your instructor (empty: your login name)
FORGET_CLASS = 0  # per-student: the class you forget in exercise 1.4 (CIFAR-10: 0-9)
g = torch.Generator().manual_seed(SEED)
torch.manual_seed(SEED)


def make_images(labels):
    """(N, 3, 8, 8) noisy images; class c brightens colour channel c."""
    x = 0.5 * torch.randn(len(labels), 3, 8, 8, generator=g)
    x[torch.arange(len(labels)), labels] += 1.0
    return x


y_train = torch.arange(3).repeat(100)
x_train = make_images(y_train)
y_test = torch.arange(3).repeat(40)
x_test = make_images(y_test)
net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3))
opt = torch.optim.Adam(net.parameters(), lr=0.02)
for step in range(60):
    idx = torch.randint(0, 300, (32,), generator=g)
    loss = nn.functional.cross_entropy(net(x_train[idx]), y_train[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
net.eval()
toy_forget = FORGET_CLASS % 3  # the toy data has three classes
retain_images = x_train[y_train != toy_forget]
test_acc = metrics.accuracy(net(x_test).argmax(1).numpy(), y_test.numpy())
print("trained; test accuracy", test_acc)

# %% [raw]
# # BEGIN QUESTION
# name: q1
# points: 3

# %% [markdown]
# **Exercise 1.1 (warm-up): recalibration by hand.** `bn.recalibrate(model, images,
# batch_size)` is exactly `torch.optim.swa_utils.update_bn` on a copy: for every BatchNorm
# layer, reset the running statistics and set `momentum = None` (a *cumulative* average over
# the batches instead of an exponential one); run every batch of `images` through the model
# in train mode with gradients off; restore each layer's momentum; return the copy in eval
# mode. Write `recalibrate_by_hand(model, images, batch_size=128)` without calling `bn` or
# `update_bn`; `model` itself must not change.
#
# *Hint:* `isinstance(m, nn.modules.batchnorm._BatchNorm)` finds the layers;
# `m.reset_running_stats()` resets one.
#
# *Expected:* your running means and variances equal those of
# `bn.recalibrate(net, retain_images, 64)` to 1e-6, every weight is unchanged
# (`bn.weights_equal`), and the input network keeps its own statistics.

# %% [raw]
# # BEGIN SOLUTION

# %%
def recalibrate_by_hand(model, images, batch_size=128):
    """A copy of model, BN running statistics re-estimated on images (N, C, H, W)."""
    # BEGIN SOLUTION
    out = copy.deepcopy(model)
    bn_type = nn.modules.batchnorm._BatchNorm
    layers = [m for m in out.modules() if isinstance(m, bn_type)]
    momenta = [m.momentum for m in layers]
    for m in layers:
        m.reset_running_stats()
        m.momentum = None
    out.train()
    with torch.no_grad():
        for i in range(0, len(images), batch_size):
            out(images[i:i + batch_size])
    for m, mom in zip(layers, momenta):
        m.momentum = mom
    return out.eval()
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %%
mine = recalibrate_by_hand(net, retain_images, 64)
ref = bn.recalibrate(net, retain_images, 64)
print("running means, mine:", bn.running_stats(mine)["1"][0][:3] if mine else None)
print("running means, memlab:", bn.running_stats(ref)["1"][0][:3])

# %% [raw]
# # BEGIN TESTS

# %%
assert isinstance(mine, nn.Module) and not mine.training

# %%
assert all(torch.allclose(a, b, atol=1e-6) for k in bn.running_stats(ref)
           for a, b in zip(bn.running_stats(mine)[k], bn.running_stats(ref)[k]))

# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG
_before = bn.running_stats(net)
_m = recalibrate_by_hand(net, retain_images[:70], 16)
_r = bn.recalibrate(net, retain_images[:70], 16)
for _k, (_mu, _var) in bn.running_stats(_r).items():
    assert torch.allclose(bn.running_stats(_m)[_k][0], _mu, atol=1e-6)
    assert torch.allclose(bn.running_stats(_m)[_k][1], _var, atol=1e-6)
assert bn.weights_equal(_m, net)
assert all(torch.equal(_before[_k][0], bn.running_stats(net)[_k][0]) for _k in _before)
_momenta = [l.momentum for _, l in bn.bn_layers(net)]
assert [l.momentum for _, l in bn.bn_layers(_m)] == _momenta

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [raw]
# # BEGIN QUESTION
# name: q2
# points: 2

# %% [markdown]
# **Exercise 1.2 (core): running-mean misalignment.** The chapter's diagnostic compares a
# model's running means $\mu$ with those of its recalibrated copy $(\mu^*, \sigma^{*2})$:
# per BN layer, the mean over channels $c$ of $|\mu_c - \mu^*_c| / \sqrt{\sigma^{*2}_c +
# \epsilon}$ (with the layer's own `eps`). Write `misalignment_by_hand(model, reference)`
# returning a dict layer name -> float, using `bn.bn_layers` to list the layers.
#
# *Hint:* `dict(bn.bn_layers(reference))[name]` is the reference's layer of the same name;
# `m.running_mean`, `m.running_var` and `m.eps` are its statistics.
#
# *Expected:* equal to `bn.mean_misalignment(net, ref)` to 1e-6 for the trained network
# against its recalibrated copy (a small number: the training statistics are nearly right),
# and exactly 0 for a model against itself.

# %% [raw]
# # BEGIN SOLUTION

# %%
def misalignment_by_hand(model, reference):
    """Layer name -> mean normalised gap of running means (dimensionless)."""
    # BEGIN SOLUTION
    ref = dict(bn.bn_layers(reference))
    out = {}
    for name, m in bn.bn_layers(model):
        r = ref[name]
        gap = (m.running_mean - r.running_mean).abs()
        gap = gap / torch.sqrt(r.running_var + r.eps)
        out[name] = float(gap.mean())
    return out
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %%
print("by hand:", misalignment_by_hand(net, ref))
print("memlab: ", bn.mean_misalignment(net, ref))

# %% [raw]
# # BEGIN TESTS

# %%
_mine = misalignment_by_hand(net, ref)
assert isinstance(_mine, dict) and set(_mine) == set(bn.mean_misalignment(net, ref))

# %%
_mine = misalignment_by_hand(net, ref)
assert all(abs(_mine[k] - v) < 1e-6 for k, v in bn.mean_misalignment(net, ref).items())

# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG
_skewed = copy.deepcopy(net)
for _, _l in bn.bn_layers(_skewed):
    _l.running_mean += 0.5
for _k, _v in bn.mean_misalignment(_skewed, ref).items():
    assert abs(misalignment_by_hand(_skewed, ref)[_k] - _v) < 1e-6
assert all(v == 0 for v in misalignment_by_hand(ref, ref).values())

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [raw]
# # BEGIN QUESTION
# name: q3
# points: 3

# %% [markdown]
# **Exercise 1.3 (core): which BN mode hides forgetting?** Some unlearning steps run forward
# passes over the forget images (here: amplified threefold, as an impair step's inputs are)
# and may leave BatchNorm in train mode while doing so. Write
#
# * `forward_pass(model, images, mode)`: a copy of `model` after forward passes over
#   `images` in batches of 20, in `mode` `"train"` or `"eval"`, gradients off, returned in
#   eval mode (no weight changes);
# * `forget_accuracy_pre_post(model)`: the forget-class test accuracy `(pre, post)` of
#   `model` as it is and after `bn.recalibrate(model, retain_images)`, with
#   `metrics.accuracy` on the argmax predictions.
#
# Then set `hiding_mode` to the mode (`"train"` or `"eval"`) whose pass makes the forget
# class look forgotten before recalibration.
#
# *Hint:* only `model.train()` makes BatchNorm update its running statistics; a forward pass
# in eval mode only reads them. Compare `bn.running_stats` before and after each pass.
#
# *Expected:* after the train-mode pass the forget accuracy is near 0 before and near 1
# after recalibration — the illusion: no weight changed. After the eval-mode pass both are
# near 1.

# %%
forget_images = 3.0 * x_train[y_train == toy_forget]
x_forget, y_forget = x_test[y_test == toy_forget], y_test[y_test == toy_forget]

# %% [raw]
# # BEGIN SOLUTION

# %%
def forward_pass(model, images, mode):
    """A copy of model after no-grad forward passes over images (train or eval mode)."""
    # BEGIN SOLUTION
    out = copy.deepcopy(model)
    out.train(mode == "train")
    with torch.no_grad():
        for i in range(0, len(images), 20):
            out(images[i:i + 20])
    return out.eval()
    # END SOLUTION


def forget_accuracy_pre_post(model):
    """Forget-class test accuracy (pre, post) recalibration on retain_images."""
    # BEGIN SOLUTION
    with torch.no_grad():
        pre = metrics.accuracy(model(x_forget).argmax(1).numpy(), y_forget.numpy())
        recal = bn.recalibrate(model, retain_images)
        post = metrics.accuracy(recal(x_forget).argmax(1).numpy(), y_forget.numpy())
    return pre, post
    # END SOLUTION


hiding_mode = "train"  # SOLUTION

# %% [raw]
# # END SOLUTION

# %%
for mode in ("train", "eval"):
    after = forward_pass(net, forget_images, mode)
    print(mode, "pass: forget accuracy (pre, post) =",
          forget_accuracy_pre_post(after) if after is not None else None)

# %% [raw]
# # BEGIN TESTS

# %%
assert hiding_mode in ("train", "eval")

# %%
_pre, _post = forget_accuracy_pre_post(forward_pass(net, forget_images, hiding_mode))
assert _pre < 0.5 and _post > 0.9

# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG
assert hiding_mode == "train"
_e = forward_pass(net, forget_images, "eval")
assert all(torch.equal(a, b) for k in bn.running_stats(net)
           for a, b in zip(bn.running_stats(_e)[k], bn.running_stats(net)[k]))
_t = forward_pass(net, forget_images, "train")
assert bn.weights_equal(_t, net) and not _t.training
with torch.no_grad():
    _ref_pre = metrics.accuracy(_t(x_forget).argmax(1).numpy(), y_forget.numpy())
    _rc = bn.recalibrate(_t, retain_images)
    _ref_post = metrics.accuracy(_rc(x_forget).argmax(1).numpy(), y_forget.numpy())
assert forget_accuracy_pre_post(_t) == (_ref_pre, _ref_post)
assert forget_accuracy_pre_post(_e)[0] > 0.9

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [raw]
# # BEGIN QUESTION
# name: q4
# manual: true
# points: 4

# %% [markdown]
# **Exercise 1.4 (open, manually graded): your own forget class.** Re-run the chapter at the
# smoke profile with the forget class `FORGET_CLASS` set at the top of this notebook and
# three of its methods (a few minutes on one core), from a terminal in your course folder
# (the student bundle or a clone of the repository). The cell below prints the exact
# command for your class; it writes into your own folder `RUNS` (`~/memlab-runs/<your id>/`):
#
# ```bash
# memlab run 01_bn_illusion --profile smoke -p forget_class <FORGET_CLASS> \
#     -p methods "[Retrain, GA, NoiseInject]" -p recovery_methods "[NoiseInject]" \
#     --book-dir <RUNS>/ex01
# ```
#
# In 5-8 sentences: which methods' forget accuracy rises after recalibration (Post-R
# against Pre-R in the Table 1 metrics), and by how much? Relate what you see to exercise
# 1.3: what must a method do during unlearning for its forgetting to be an illusion? Why is
# Retrain's forget accuracy unchanged by recalibration, and why would a GroupNorm network's
# be unchanged for every method (think of `bn.has_running_stats`)? At the smoke size, is the
# jump outside the noise of the few test images per class?

# %%
import json

from memlab.course.exercises import runs_dir

RUNS = runs_dir(STUDENT)  # your own folder for runs: students sharing a server never share it
print(f"memlab run 01_bn_illusion --profile smoke -p forget_class {FORGET_CLASS} "
      '-p methods "[Retrain, GA, NoiseInject]" -p recovery_methods "[NoiseInject]" '
      f"--book-dir {RUNS / 'ex01'}")
path = RUNS / "ex01" / "results" / "01_bn_illusion.json"
if path.exists():
    res = json.loads(path.read_text())
    print("forget class", res["params"].get("forget_class"))
    print("    metrics (res[\"metrics\"]):", ", ".join(sorted(res["metrics"])))
    for claim in res["claims"]:
        print("   ", claim.get("verdict"), "-", str(claim.get("claim", ""))[:80])
else:
    print(f"{path}: not there yet (run the command above)")

# %% [raw]
# # BEGIN SOLUTION

# %% [markdown]
# *Sample answer (the grader's guide).* Methods whose unlearning runs the network in train
# mode on inputs unlike the retain data (NoiseInject's impair step on noise maximising the
# forget loss; gradient ascent on the forget class) leave running statistics fitted to those
# inputs; evaluated with them, forget images are mis-normalised and the forget accuracy looks
# low. Recalibration on retain data restores statistics that fit the weights, and the forget
# accuracy rises: the knowledge was still in the weights, as in exercise 1.3 where no weight
# changed at all. Retrain never saw the forget class, so its weights cannot classify it and
# recalibration has nothing to reveal; a GroupNorm network keeps no running statistics, so
# recalibration returns an identical model for every method. A full answer quotes Pre-R and
# Post-R per method for the student's class and notes that with 20 test images per class a
# difference of one or two images (5-10 points) is inside the noise.

# %% [raw]
# # END SOLUTION

# %% [raw]
# # END QUESTION
