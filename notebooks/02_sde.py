# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
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

# %% [markdown]
# # Split-half dependence evaluation of unlearning
#
# Has a model really forgotten a subset of its training data? Comparing it with a model
# retrained without that subset defeats the purpose of unlearning, and sample-level
# membership attacks are weak once only a few percent of the data is removed.
# {cite}`sde2026` propose **split-half dependence evaluation (SDE)**: training ties the
# outputs of trained-on samples together through shared gradient updates, so two random
# halves of a trained-on subset are more *dependent* than two halves of unseen data.
# SDE measures that dependence with the Hilbert-Schmidt independence criterion (HSIC,
# {cite}`gretton2005hsic`) and asks whether a target subset's dependence looks like that of
# training data (retain set) or of unseen data (test set).
#
# This chapter re-runs the paper's three tables — the controlled experiment with retrained
# models, the comparison with distribution distances, and the evaluation of five unlearning
# methods — plus its ablations, on CIFAR-10 with a ResNet-18 {cite}`he2016resnet`. The
# statistic lives in `memlab.sde`, the orchestration in `memlab.experiments.ch02_sde`.
#
# **The statistic.** For paired samples $x_i, y_i$ ($i = 1..n$) with Gaussian RBF Gram
# matrices $K_{ij} = \exp(-\lVert x_i - x_j\rVert^2 / 2\sigma^2)$, $L$ likewise, and the
# centring matrix $H = I - \tfrac1n \mathbf 1 \mathbf 1^\top$,
#
# $$\mathrm{HSIC}(X, Y) = \frac{\operatorname{tr}(K H L H)}{(n-1)^2}, \qquad \sigma = \sqrt{\dim}.$$
#
# A subset $S$ is split once into random halves $S_1, S_2$ and $\mathrm{HSIC}(h(S_1), h(S_2))$ is
# computed for 200 random re-orderings of $S_2$, giving a *dependence distribution*. A target
# subset counts as **out-of-training (forgotten)** when the Jensen-Shannon divergence between
# its distribution and that of an out-of-training reference (test data) is smaller than to an
# in-training reference (retain data). The three distributions are histogrammed on shared
# equal-width bins spanning their pooled range; when both divergences saturate (the target
# overlaps neither reference) the reference with the nearer median decides. All subsets of
# one comparison have the same size.

# %% tags=["parameters"]
profile: str = "cpu"  # smoke | cpu | paper
params: dict = {}  # overrides, e.g. {"epochs": 2}; every name: `memlab list` (SPEC)

# %% tags=["hide-input"]
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from memlab import config, paper, plotting, results, sde
from memlab.experiments import ch02_sde as ch

CH = ch.CHAPTER  # the chapter id is declared once, in the chapter module
cfg = config.resolve(CH, profile=profile, **params)
run = results.Run(cfg)
run.provenance_box()

# %% [markdown]
# ## Data and models
#
# Every model is a CIFAR ResNet-18 trained with SGD and cosine decay on a class-balanced
# subset of CIFAR-10. The paper trains full-width networks on all 50,000 images; at the
# `cpu` profile the network is narrow, the training set small and augmentation off, so that
# the four trained models (three for Table 1, one original for Table 3) fit on two CPU cores.
# Small models on small data memorise less cleanly than the paper's, so the numbers here are a
# scaled-down check of the method, not a replication of the paper's magnitudes. The tables below say which sizes were used.

# %%
data = ch.load_data(cfg)
sizes = dict(zip(cfg.holdout_fractions, cfg.subset_sizes))
display(
    pd.DataFrame(
        {
            "held-out samples": {
                f"R={r * 100:g}%": int(round(r * len(data.y_train)))
                for r in cfg.holdout_fractions
            },
            "|S| ours": {f"R={r * 100:g}%": s for r, s in sizes.items()},
            "|S| paper": {"R=5%": 400, "R=10%": 1000, "R=20%": 2000},
        }
    ).rename_axis(f"{len(data.y_train)} training, {len(data.y_test)} test images")
)

# %% [markdown]
# ## Table 1: telling in- from out-of-training subsets
#
# For each held-out fraction $R$ a model is trained on the remaining data (a "retrained"
# model in the paper's terms). Target subsets are drawn from the data it saw (in-training)
# and from the held-out data (out-of-training); SDE labels each one, and we report the F1
# score of detecting out-of-training subsets. CIFAR-10 is the only one of the paper's four
# data sets available offline here.

# %%
controlled = ch.controlled_experiment(cfg, data)
f1 = controlled["f1"]
main_col = f"R={cfg.forget_fraction * 100:g}%"
run.record(f1=f1.to_dict(orient="index"), main_column=main_col)

ours1 = pd.concat(
    [
        f1.loc[["SDE"]].rename(index={"SDE": "CIFAR-10"}),
        pd.DataFrame(np.nan, index=list(ch.NOT_RUN_DATASETS), columns=f1.columns),
    ]
)
table1 = paper.side_by_side(ours1, paper.table(CH, "table1"))
display(table1.round(2))
display(
    Markdown(
        "SVHN, CIFAR-100 and Tiny-ImageNet: **not run** — no offline copy of these data"
        " sets; their rows show the paper's numbers only."
    )
)

# %% [markdown]
# ## Table 2: SDE against distribution distances
#
# The same targets and references, judged by whether the target's outputs are closer (biased
# squared MMD with the same RBF kernel, or exact 1-Wasserstein distance between the two point
# clouds) to the out-of-training or the in-training reference. The paper's setting is
# $R = 10\%$, $|S| = 1000$; ours is the $R = 10\%$ column of Table 1.

# %%
ours2 = f1[[main_col]].rename(columns={main_col: "F1"})
display(paper.side_by_side(ours2, paper.table(CH, "table2")).round(2))
display(f1.round(2).rename_axis("F1 at every setting"))

# %% [markdown]
# ## Table 3: evaluating unlearning methods
#
# The original model is trained on all data; the forget set is a random $R = 10\%$ of it.
# Retrain is the model trained without the forget set (exact unlearning; shared with Table 1).
# RandLabel fine-tunes with random labels on the forget set mixed with retain data; Unroll
# {cite}`thudi2022unrolling` adds back the forget set's accumulated SGD contribution (first-order
# unrolling: the forget-set gradient recorded at the end of every epoch of the original training,
# times that epoch's mean learning rate over the batch size); Sparsity {cite}`jia2023sparsity` fine-tunes on the
# retain set with a decaying $\ell_1$ penalty; SalUn {cite}`fan2024salun` is random labelling
# restricted to salient weights (chapter 1's implementation). RandLabel and SalUn batches are
# half forget data (random labels) and half retain data (`retain_mix`); RandLabel, Sparsity and
# SalUn each run `unlearn_steps` SGD steps (values in the provenance box). **ASR** is the share of the
# forget set that a logistic-regression attack on (true-class confidence, entropy), fitted on
# retain vs test samples, calls "non-member"; **OTR** is the share of forget-set subsets that
# SDE judges out-of-training.

# %%
models = ch.unlearn_all(cfg, data)
unlearning = ch.evaluate_unlearning(cfg, data, models)
table3 = unlearning["table"]
run.record(table3=table3.to_dict(orient="index"))
display(
    paper.side_by_side(
        table3, paper.table(CH, "table3"), ["Acc_r (%)", "Acc_f (%)", "ASR", "OTR (%)"]
    ).round(2)
)
display(table3[["Acc_test (%)"]].round(1).T)

# %% [markdown]
# Read OTR together with the accuracies. Where a method's Acc_r falls far below the original
# model's, it has damaged the model rather than removed the forget set, and its OTR says little
# about the paper's point. Our Unroll is a pure first-order update: gradients recorded along the
# training run and added back at its end point, far from where they were taken. The paper's
# Unroll keeps retain accuracy near the original's, so its implementation evidently differs;
# compare the Acc_r columns before reading the OTR and ASR of that row.

# %%
# One panel per model: histograms of the in-training, out-of-training and target
# distributions of the split-half HSIC.
dists = unlearning["dists"]
ncols = min(3, len(dists))
nrows = int(np.ceil(len(dists) / ncols))
fig, axes = plotting.figure(
    "tall" if nrows > 1 else "wide", ncols=ncols, nrows=nrows, squeeze=False
)
labels = {
    "in": "in-training ref. (retain)",
    "out": "out-of-training ref. (test)",
    "target": "target (forget subset)",
}
for ax, (name, d) in zip(axes.ravel(), dists.items()):
    edges = sde.shared_edges(d["in"], d["out"], d["target"], n_bins=30)
    for key, label in labels.items():
        ax.hist(d[key], bins=edges, alpha=0.55, label=label)
    ax.set_title(name)
    ax.set_xlabel("split-half HSIC")
for ax in axes.ravel()[len(dists) :]:
    ax.set_visible(False)
axes.ravel()[0].legend()
_ = plotting.publish(fig, "dependence", CH)

# %% [markdown]
# ```{glue:figure} 02_sde-dependence
# :name: fig-02-dependence
# Split-half dependence distributions (HSIC over shufflings of the second half) of an
# in-training reference (retain subset), an out-of-training reference (test subset) and one
# forget-set target subset, for the original model and each unlearning method. A forgotten
# target should sit on the out-of-training reference.
# ```

# %% [markdown]
# ## Ablations
#
# ### Subset size
#
# F1 of the three detectors against the subset size, on the model trained without the largest
# held-out fraction.

# %%
r_max = max(cfg.holdout_fractions)
model_rmax = controlled["models"][r_max][0]
sweep = ch.size_sweep(cfg, data, model_rmax, r_max)
run.record(
    size_sweep={d: {int(k): v for k, v in sweep[d].items()} for d in sweep.columns}
)
display(sweep.round(2))
fig, ax = plotting.figure("single")
for col, marker in zip(sweep.columns, "osd"):
    ax.plot(sweep.index, sweep[col], marker=marker, label=col)
ax.set_xlabel("subset size |S|")
ax.set_ylabel("F1 (out-of-training detection)")
ax.set_ylim(-0.02, 1.02)
ax.legend()
_ = plotting.publish(fig, "size", CH)

# %% [markdown]
# ```{glue:figure} 02_sde-size
# :name: fig-02-size
# F1 of out-of-training detection against subset size for SDE, MMD and Wasserstein distance
# (model trained without the largest held-out fraction).
# ```
#
# ### Bandwidth, feature depth and an early model
#
# At the main setting ($R = 10\%$): the RBF bandwidth as a multiple of $\sqrt{\dim}$; the
# layer whose (globally pooled) outputs SDE reads; and the checkpoint taken after 20% of the
# training epochs of the same run.

# %%
r_main = min(cfg.holdout_fractions, key=lambda r: abs(r - cfg.forget_fraction))
final_main, early_main = controlled["models"][r_main]
bandwidth = ch.bandwidth_ablation(cfg, data, final_main, r_main, sizes[r_main])
depth = ch.depth_ablation(cfg, data, final_main, r_main, sizes[r_main])
early_f1 = ch.early_check(cfg, data, early_main, r_main, sizes[r_main])
run.record(
    bandwidth={str(k): v for k, v in bandwidth.items()},
    depth=depth.to_dict(),
    early_f1=early_f1,
    early_epochs=ch.early_epoch(cfg),
)
display(bandwidth.round(2).to_frame().T)
display(depth.round(2).to_frame().T)
display(
    Markdown(
        f"Early model (after {ch.early_epoch(cfg)} of {cfg.epochs} epochs): SDE F1"
        f" **{early_f1:.2f}**; final model: **{f1.loc['SDE', main_col]:.2f}**."
    )
)

# %% [markdown]
# ## Applying SDE to your own model
#
# The test needs only model outputs for three equal-size subsets: the target, some data the
# model was trained on, and some data it never saw. `memlab.sde.sde_test` returns the
# verdict, both divergences (bits) and the three dependence distributions;
# `memlab.sde.split_half_dependence(features)` gives one subset's distribution. Here the
# target is a random forget-set subset judged on the retrained model, which never saw it.

# %%
from memlab import sde

forget_idx, retain_idx = ch.holdout_split(cfg, len(data.y_train), cfg.forget_fraction)
rng = np.random.default_rng(cfg.seed)
s = ch.main_size(cfg)
outs_train, outs_test = ch.all_outputs(models["Retrain"], data, cfg.feature)
verdict = sde.sde_test(
    outs_train[rng.choice(forget_idx, s, replace=False)],  # target subset
    outs_train[rng.choice(retain_idx, s, replace=False)],  # in-training reference
    outs_test[
        rng.choice(len(outs_test), s, replace=False)
    ],  # out-of-training reference
    n_shuffles=cfg.n_shuffles,
    seed=cfg.seed,
)
display(
    Markdown(
        f"JSD to the out-of-training reference {verdict['jsd_out']:.3f} bits, to the"
        f" in-training reference {verdict['jsd_in']:.3f} bits: the target is judged"
        f" **{'out-of-training (forgotten)' if verdict['out'] else 'in-training'}**."
    )
)

# %% [markdown]
# ## Claims
#
# Each claim of the paper is a predicate over the numbers above; thresholds are stated in the
# claim. A claim that fails at this profile is reported as *not reproduced*, with our numbers.
# At the `smoke` profile (toy sizes, one training epoch) the claims are not judged.

# %% tags=["hide-input"]
verdicts = paper.evaluate(
    ch.claims(), run.metrics, cfg.profile, reasons=paper.reasons(cfg.chapter)
)
display(paper.claims_table(verdicts))
_ = run.save(claims=verdicts)

# %% tags=["remove-input"]
from myst_nb import glue

for _verdict, _n in paper.tally(verdicts).items():  # counts for the closing section
    _slug = _verdict.split(" at ")[0].replace(" ", "-")  # e.g. "not-run"
    glue(f"{cfg.chapter}-n-{_slug}", _n, display=False)

# %% [markdown]
# ## What this means
#
# At the profile of this page, {glue:}`02_sde-n-reproduced` reproduced, {glue:}`02_sde-n-not-reproduced` did not
# and {glue:}`02_sde-n-not-run` were not run. The reading below is of the `cpu` run that
# this book publishes.
#
# **What held.** Training leaves a measurable dependence between two halves of a trained-on subset
# ({numref}`fig-02-dependence`): SDE's F1 grows with the subset size ({numref}`fig-02-size`) and deeper
# features separate in- from out-of-training subsets better than early layers, as the paper reports.
#
# **What did not.** At the main setting SDE's F1 stays under the claim's 0.8, a plain MMD on the same
# outputs does better, the result depends on the kernel bandwidth, and an early checkpoint shows almost
# no dependence. Our first-order Unroll damages the model rather than imitating the paper's, so its OTR
# says little. The reasons in the table point to one cause: narrow networks trained briefly on a small
# subset memorise less cleanly than the paper's.
#
# **What to take from it.** SDE needs no retrained model and its signal is real, but at small scale it
# is not stronger than a distribution distance; read OTR together with retain accuracy, and check the
# subset size and bandwidth before trusting one verdict.
