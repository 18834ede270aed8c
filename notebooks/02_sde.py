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
# ```{glue:md} 02_sde-findings
# :format: myst
# ```

# %% [markdown]
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
# methods — plus its ablations, on CIFAR-10: with the paper's ResNet-18 {cite}`he2016resnet` at
# the `paper` profile, and at the `cpu` profile with a fast-training BatchNorm CNN whose recipe
# was chosen to reach the paper's regime in a few epochs on two CPU cores. The statistic lives in
# `memlab.science.sde`, the orchestration in `memlab.experiments.ch02_sde`.
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
#
# Two things decide what this chapter finds, and both are shown rather than hidden: *which
# outputs* SDE reads (the paper says "model outputs"; we compare logits, softmax and
# penultimate features), and *what the split-half statistic measures* (its mean over
# shuffles is, exactly, a product of the two halves' kernel spreads).

# %% tags=["parameters"]
profile: str = "cpu"  # smoke | cpu | paper
params: dict = {}  # overrides, e.g. {"epochs": 2}; every name: `memlab list` (SPEC)

# %% tags=["hide-input"]
import time

import numpy as np
from IPython.display import Markdown, display

from memlab.experiments import ch02_sde as ch
from memlab.report import pagekit, paper, plotting
from memlab.science import sde

CH = ch.CHAPTER  # the chapter id is declared once, in the chapter package
cfg, run = pagekit.start(CH, profile, params)

# %% [markdown]
# ## Data and models
#
# Every model is trained on a class-balanced subset of CIFAR-10 by the recipe of its kind
# (`memlab.models.recipe.train_supervised`): the paper's ResNet-18 by SGD with cosine decay and
# CIFAR augmentation (random crop, flip), as the paper trains it on all 50,000 images for 182
# epochs; the fast BatchNorm CNN (the shape of Keller Jordan's airbench) by its few-epoch
# recipe, chosen so that the four trained models (three for paper Table 1, one original for
# paper Table 3) reach the paper's regime on two CPU cores (the regime table below says
# whether they do). An epoch's trailing partial batch is merged into the one before it
# (`memlab.models.train`), so no step is taken on a handful of images. What this page's
# profile trains (the table after it gives the sizes):

# %% tags=["remove-input"]
display(Markdown(ch.setup_text(cfg)))

# %%
data = ch.load_data(cfg)
sizes = dict(zip(cfg.holdout_fractions, cfg.subset_sizes))
display(ch.sizes_table(cfg, data))

# %% [markdown]
# ## Regime: how well the original fits
#
# SDE's premise is a model that generalises: the paper's ResNet-18 fits its training data
# (about 98.6%) and loses only about 5 points on unseen data, and its confidence attack
# calls about 30% of the forget set "non-member" for every method. A model that memorises
# its training set (near 100% train against 40% test) makes any membership signal large
# and any comparison with the paper meaningless, so the recipes above were chosen on train
# and test accuracy only (never on a verdict). The paper prints no row for its original
# model; its proxies below are Retrain's accuracies (same recipe, trained without the forget
# set) and the ASR all its rows share. Beside them are the paper's other markers: the
# train-test gap and the network's size.

# %%
regime = ch.regime(cfg, data)
run.record(regime=regime.to_dict())
display(regime.round(2).rename_axis("Original model (paper Table 3 proxies)"))
display(Markdown(ch.regime_text(regime)))

# %% [markdown]
# ## Unlearning methods and their tuning rule
#
# The original model is trained on all data; the forget set is a random $R = 10\%$ of it.
# Retrain is the model trained without the forget set (exact unlearning; shared with
# paper Table 1). RandLabel fine-tunes with random labels on the forget set mixed with retain
# data; Unroll {cite}`thudi2022unrolling` is Thudi et al.'s single-gradient unlearning,
# the first-order undoing of the forget set's SGD steps with the gradient taken at the
# initial weights $w_0$ ($w \leftarrow w_T + s\,\tfrac{\bar\eta E}{B}\sum_{x \in D_f}
# \nabla \ell(w_0; x)$, mean learning rate $\bar\eta$, $E$ epochs, batch $B$);
# Sparsity {cite}`jia2023sparsity` fine-tunes on the retain set with a decaying
# $\ell_1$ penalty; SalUn {cite}`fan2024salun` is random labelling restricted to salient
# weights. RandLabel and SalUn batches are half forget data (random labels) and half
# retain data (`retain_mix`).
#
# **Tuning rule.** A method's `cpu` hyper-parameters (`unlearn_lr`, `unlearn_steps`,
# `unroll_scale`) are the strongest setting, on a coarse grid, whose retain accuracy
# Acc_r stays within 10 points of the original's, as the paper's methods keep theirs
# (paper Table 3: 92.7-99.4%). They are tuned on Acc_r alone, never on OTR, ASR or a verdict.
# Measured on this chapter's `cpu` original (seed 0; Acc_r 92.3% on 5,000 retain images),
# in fp32: Unroll's full first-order step ($s = 1$) left Acc_r at 16.1%, $s = 0.3$ at
# 69.3% and $s = 0.1$ at 89.7%, so `unroll_scale` is 0.1. At 40 steps RandLabel kept
# 68.7%, 74.3% and 92.5% at `unlearn_lr` 0.01, 0.003 and 0.001, SalUn 61.7%, 75.7% and
# 92.8%, and Sparsity 93.4% and 93.7% at 0.01 and 0.003; the three share one rate, so
# `unlearn_lr` is 0.001, the strongest at which all three keep Acc_r. The table below
# re-checks the rule on every run: a method that breaks it is
# flagged, and the Unroll claim is not judged if Unroll does not keep accuracy. The last column re-estimates the BN
# statistics on the retain set (`memlab.science.bn.recalibrate`): a collapse that recalibration
# undoes is a BatchNorm artifact, not damage to the weights.

# %%
models = ch.unlearn_all(cfg, data)
accuracies = ch.accuracy_table(cfg, data, models)
display(ch.accuracy_rule_table(accuracies).round(1))

# %% [markdown]
# ## Telling in- from out-of-training subsets (paper Table 1)
#
# For each held-out fraction $R$ a model is trained on the remaining data (a "retrained"
# model in the paper's terms). Target subsets are drawn from the data it saw (in-training)
# and from the held-out data (out-of-training); SDE labels each one, and we report the F1
# score of detecting out-of-training subsets. CIFAR-10 is the only one of the paper's four
# data sets available offline here. The "±" columns are half-widths of 95% bootstrap
# intervals over the target subsets: the noise band the claims use.

# %%
main = ch.feature_metrics(cfg, data, models, accuracies, cfg.feature)
frames = main.pop("_frames")
f1 = frames["f1"]
main_col = ch.column(cfg.forget_fraction)
run.record(**ch.main_metrics(cfg, data, main))
display(ch.table1(f1).round(2))
display(
    Markdown(
        "SVHN, CIFAR-100 and Tiny-ImageNet: **not run** — no offline copy of these data"
        " sets; their rows show the paper's numbers only."
    )
)

# %% [markdown]
# ## SDE against distribution distances (paper Table 2)
#
# The same targets and references, judged by whether the target's outputs are closer (biased
# squared MMD with the same RBF kernel, or exact 1-Wasserstein distance between the two point
# clouds) to the out-of-training or the in-training reference. The paper's setting is
# $R = 10\%$, $|S| = 1000$; ours is the $R = 10\%$ column of the paper Table 1 reproduction above.

# %%
table2, every_setting = ch.table2(f1, frames["band"], main_col)
display(table2.round(2))
display(every_setting.round(2))

# %% [markdown]
# ## Evaluating unlearning methods (paper Table 3)
#
# **ASR** is the share of the forget set that a logistic-regression attack on
# (true-class confidence, entropy), fitted on retain vs test samples, calls "non-member";
# **OTR** is the share of forget-set subsets that SDE judges out-of-training. Read OTR
# together with the accuracies: a method that has damaged the model rather than removed
# the forget set says little about the paper's point.

# %%
table3 = frames["table3"]
display(ch.table3(table3).round(2))
display(table3[["Acc_test (%)", "Acc_r recal. (%)"]].round(1).T)

# %%
# One panel per model: histograms of the in-training, out-of-training and target
# distributions of the split-half HSIC.
dists = frames["dists"]
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
sweep = frames["sweep"]
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
# training epochs of the same run. "Saturated subsets" counts the subsets (of
# $2 \times$ `n_targets` $+ 2$) whose kernel matrix was near-constant (off-diagonal standard
# deviation below $10^{-3}$, `sde.check_saturation`): there every shuffle gives the same
# HSIC, the dependence distribution is a point, and the verdict is decided by ties.

# %%
r_main = ch.main_fraction(cfg)
final_main, early_main = frames["controlled"]["models"][r_main]
depth = ch.depth_ablation(cfg, data, final_main, r_main, sizes[r_main])
run.record(**ch.depth_metrics(cfg, depth))
display(frames["bandwidth"].round(2).T)
display(depth.round(2).T)
display(
    Markdown(
        f"Early model (after {ch.early_epoch(cfg)} of {cfg.epochs} epochs): SDE F1"
        f" **{main['early_f1']:.2f}** ± {main['early_band']:.2f}; final model:"
        f" **{f1.loc['SDE', main_col]:.2f}**."
    )
)

# %% [markdown]
# ## Which outputs SDE reads
#
# The paper's description says only that SDE measures the dependence between the two
# halves' *model outputs* $h(x)$. For a classifier that could mean the logits, the softmax
# probabilities, or the features before the classifier. The same models and subsets give
# very different answers depending on that choice, so the table below reruns every
# output-dependent number of the chapter (paper Tables 1-3, size, bandwidth, early model; the
# depth ablation reads every depth anyway) for each choice and judges the same claims.
#
# **The chapter's default is the logits**, chosen from the paper's text and fixed before
# this comparison was made: $h$ is the trained network and $h(x)$ its output layer; the
# softmax is a fixed normalisation applied after the network, and the paper's "deeper
# features separate better" treats SDE's input as a layer's activations, with the network's
# last layer the deepest. The choice is not changed by which row reproduces more claims.

# %%
_choices = [c for c in ch.CHOICES if c != cfg.feature]
by_feature = {cfg.feature: main}
for feat in _choices:
    other = ch.feature_metrics(cfg, data, models, accuracies, feat)
    other.pop("_frames")
    by_feature[feat] = other
rows = {}
for feat, m in by_feature.items():
    _inputs = ch.claim_inputs(run.metrics, m)
    _verdicts = paper.evaluate(ch.claims(), _inputs, cfg.profile,
                               regimes=paper.regimes(CH))
    rows[feat] = ch.sensitivity_row(cfg, m, _verdicts)
sensitivity = ch.sensitivity_table(rows)
run.record(sensitivity=sensitivity.to_dict(orient="index"))
display(sensitivity.map(lambda v: round(v, 2) if isinstance(v, float) else v))

# %% [markdown]
# Each row is judged with the same claims, noise bands and regime gates as the claims table at
# the end (the spread identity, a check of our
# arithmetic, is left out here). "Not judged" means the margin lay inside its noise band or a
# precondition failed; "outside the paper's regime" that the claim's regime gate failed.
#
# ## What the split-half statistic measures
#
# The two halves $S_1, S_2$ of a subset hold *different* samples, so pairing sample $i$ of
# $S_1$ with sample $i$ of $S_2$ is arbitrary, and each of the 200 shuffles is HSIC under a
# uniformly random pairing: a draw from HSIC's permutation distribution, the distribution
# a permutation test uses as its *null*. Its mean can be computed exactly. Write
# $\tilde K = HKH$ and $\tilde L = HLH$ ($m \times m$, rows summing to zero), and
# $\pi$ for the random re-ordering:
#
# $$\mathbb E_\pi\, \mathrm{HSIC} = \frac{1}{(m-1)^2} \sum_{i,j} \tilde K_{ij}\,
# \mathbb E\,\tilde L_{\pi(i)\pi(j)}, \qquad \mathbb E\,\tilde L_{\pi(i)\pi(i)} =
# \frac{\operatorname{tr}\tilde L}{m}, \qquad \mathbb E\,\tilde L_{\pi(i)\pi(j)} =
# \frac{\mathbf 1^\top \tilde L \mathbf 1 - \operatorname{tr}\tilde L}{m(m-1)} =
# -\frac{\operatorname{tr}\tilde L}{m(m-1)} \;(i \ne j).$$
#
# With $\sum_{i \ne j} \tilde K_{ij} = -\operatorname{tr}\tilde K$ this gives
#
# $$\mathbb E_\pi\, \mathrm{HSIC} = \frac{\operatorname{tr}(HKH)\,\operatorname{tr}(HLH)}
# {(m-1)^3}, \qquad \operatorname{tr}(HKH) = m\,(1 - \bar K),$$
#
# where $\bar K$ is the mean kernel value: the mean of SDE's dependence distribution is a
# product of the two halves' *spreads* (how far apart their outputs lie relative to
# $\sigma$), with no dependence term. `memlab.science.sde.shuffle_mean` computes it; the unit tests
# check it to $10^{-10}$ against all $6! = 720$ re-orderings of a small case. Below, on
# every subset of the main setting (Retrain model, default outputs), the measured mean over
# 200 shuffles against the identity, and against the subset's kernel spread
# ($1 - $ mean off-diagonal kernel value, `sde.subset_spread`).

# %%
spread = ch.spread_analysis(cfg, data, final_main, r_main, sizes[r_main])
identity = ch.identity_summary(spread)
run.record(identity=identity)
fig, axes = plotting.figure("wide", ncols=2)
for kind, marker in zip(["in-ref", "out-ref", "in-target", "out-target"], "^vos"):
    sel = spread[spread["kind"] == kind]
    axes[0].scatter(sel["predicted"], sel["measured"], marker=marker, s=18, label=kind)
    axes[1].scatter(sel["spread"], sel["measured"], marker=marker, s=18, label=kind)
lims = [spread[["predicted", "measured"]].min().min(), spread["measured"].max()]
axes[0].plot(lims, lims, color="0.4", lw=0.8)
axes[0].set_xlabel("tr(HKH) tr(HLH) / (m-1)^3")
axes[0].set_ylabel("mean split-half HSIC (200 shuffles)")
axes[1].set_xlabel("kernel spread of the subset (1 - mean kernel)")
axes[1].set_title(f"Pearson r = {identity['pearson_spread']:.3f}")
axes[1].legend(fontsize="small")
_ = plotting.publish(fig, "spread", CH)
display(
    Markdown(
        f"Over {identity['n_subsets']} subsets, "
        f"{identity['share_within_3se'] * 100:.0f}% of the measured means lie within"
        f" 3 standard errors of the identity (largest relative gap"
        f" {identity['max_rel_err'] * 100:.1f}%); the mean statistic correlates with"
        " the subset's kernel spread at Pearson"
        f" r = **{identity['pearson_spread']:.3f}**."
    )
)

# %% [markdown]
# ```{glue:figure} 02_sde-spread
# :name: fig-02-spread
# Left: mean of each subset's split-half dependence distribution against the exact shuffle
# mean tr(HKH) tr(HLH)/(m-1)^3 (line: equality). Right: the same means against the
# subset's kernel spread. Markers: references and targets, in- and out-of-training.
# ```
#
# **A variant that separates dependence from spread.** If the spread sets the location
# and scale of every dependence distribution, standardising each distribution by its own
# permutation mean (the identity) and standard deviation, $z_k = (h_k -
# \mathbb E_\pi h) / \mathrm{sd}(h)$ (`sde.standardised_split_half`), leaves only its
# shape; the same JSD decision on the $z$ distributions (SDE-z) then uses no spread at
# all. Its F1 beside the paper's statistic, same models, subsets and shuffles:

# %%
display(ch.variant_table(cfg, main).round(2))

# %% [markdown]
# ## Applying SDE to your own model
#
# The test needs only model outputs for three equal-size subsets: the target, some data the
# model was trained on, and some data it never saw. `memlab.science.sde.sde_test` returns the
# verdict, both divergences (bits) and the three dependence distributions;
# `memlab.science.sde.split_half_dependence(features)` gives one subset's distribution (it warns,
# `sde.SaturationWarning`, when a kernel matrix is near-constant). Here the target is a
# random forget-set subset judged on the retrained model, which never saw it.

# %%
forget_idx, retain_idx = ch.holdout_split(cfg, len(data.y_train), cfg.forget_fraction)
rng = np.random.default_rng(cfg.seed)
s = ch.main_size(cfg)
outs_train, outs_test = ch.all_outputs(models["Retrain"], data, cfg.feature)
verdict = sde.sde_test(
    outs_train[rng.choice(forget_idx, s, replace=False)],  # target subset
    outs_train[rng.choice(retain_idx, s, replace=False)],  # in-training reference
    outs_test[rng.choice(len(outs_test), s, replace=False)],  # out-of-training ref.
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

# %% tags=["remove-input"]
# the models' training cost, kept in the results for `memlab compare`; the page's
# cost section is written from the cost log when the book is rendered
costs = ch.training_costs(cfg)
cpu_s = time.process_time() - run.cpu_started
run.record(cost=ch.cost_metrics(costs, run.elapsed(), cpu_s))

# %% [markdown]
# ## Claims
#
# Each claim of the paper is a predicate over the numbers above; thresholds are stated in the
# claim. A claim that fails at this profile is reported as *not reproduced*, with our numbers.
# A claim whose margin lies inside its noise band (bootstrap over the target subsets for
# F1, binomial for OTR and ASR), or whose precondition fails (Unroll must keep accuracy),
# is *not judged*, with the band in the evidence. The spread identity is a sanity check of
# our arithmetic, not a claim of the paper. At the `smoke` profile (toy sizes) the claims
# are not judged. A claim whose regime gate fails (below) is *outside the paper's regime*.

# %% tags=["hide-input"]
verdicts = pagekit.judge(ch.claims(), run)

# %% [markdown]
# ### How the regime gates were chosen
#
# Every claim of the paper is judged only inside the regime the paper tested it in, a
# precondition read from our run and fixed from the paper's text, before any verdict, by one
# rule: each accuracy or rate the paper reports for its models, less 10 points. The paper's
# ResNet-18 reaches 98.6 % on data it trained on and 93.3 % on data it never saw (paper Table 3,
# Retrain row: the proxies of the regime table above), so our Original must reach 88.6 % and
# 83.3 %; the Unroll claim also needs SDE to call Retrain's forget set unseen as the paper's
# does (OTR 87 %, so at least 77 %). A claim whose gate fails says nothing about the paper
# either way. The table gives each gate, what this run measured, and the run that would bring
# the claims inside it with its estimated cost; the spread identity, a check of our own
# arithmetic, has no gate.

# %% tags=["hide-input"]
display(pagekit.regimes_table(CH, verdicts))

# %% [markdown]
# ## What this means
#
# At the profile of this page, {glue:}`02_sde-n-reproduced` of the paper's claims reproduced,
# {glue:}`02_sde-n-not-reproduced` did not, {glue:}`02_sde-n-outside-regime` lay outside the
# paper's regime, {glue:}`02_sde-n-not-judged` could not be
# judged and {glue:}`02_sde-n-not-run` were not run (the spread identity, a sanity check, is
# counted apart).

# %% tags=["hide-input"]
pagekit.closing_summary(
    verdicts, ch.closing_regime(sensitivity, identity, main), chapter=CH
)

# %% [markdown]
# **Exercises for this chapter:** {ref}`exercises-02-sde` ({doc}`student notebook <../exercises/02_sde>`), autograded with otter-grader; instructors see {doc}`../instructor`.
