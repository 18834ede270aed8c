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
# # The BatchNorm illusion in unlearning evaluation
#
# ```{glue:md} 01_bn_illusion-findings
# :format: myst
# ```

# %% [markdown]
# This chapter re-runs the experiments of the BN-illusion paper {cite}`bnillusion`.
# Approximate unlearning methods are usually judged by the accuracy of the unlearned
# model on the forgotten class. On a network with BatchNorm {cite}`ioffe2015batchnorm`
# that number also depends on the stored running statistics. The paper's audit is one
# forward pass over retain images with the weights frozen: the *recalibration* operator
# that SWA uses {cite}`izmailov2018swa`, `torch.optim.swa_utils.update_bn`. On
# CIFAR-10 it moves SalUn's {cite}`fan2024salun` forget accuracy from 3.0% to 65.1%.
#
# The paper separates two ways in which the BN state can hide what the weights still know:
#
# - **corruption**: the method runs BN in train mode, so forget batches rewrite the running
#   statistics through their moving average, outside any gradient;
# - **misalignment**: BN is frozen (eval mode) while the weights drift, so the stored
#   statistics no longer describe the activations.
#
# Recalibration undoes both and changes no weight, so any change in a metric comes from
# the normalisation state alone. Below we train a CIFAR ResNet-18 {cite}`he2016resnet`,
# apply nine unlearning methods plus Retrain, and put every table and figure of the paper
# next to our numbers. The paper's numbers come from its own runs and are always labelled
# *paper*. Ours come from the profile named in the box below, and the claims at the end
# are checked against our numbers only.

# %% tags=["parameters"]
profile: str = "cpu"  # smoke | cpu | paper
params: dict = {}  # overrides, e.g. {"epochs": 2}; every name: `memlab list` (SPEC)

# %% tags=["hide-input"]
import warnings

import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from memlab.experiments import ch01_bn_illusion as ch
from memlab.report import pagekit, paper, plotting
from memlab.science import bn

warnings.filterwarnings("ignore", category=UserWarning)
CH = ch.CHAPTER  # the chapter id is declared once, in the chapter package
cfg, run = pagekit.start(CH, profile, params)
pd.options.display.float_format = "{:.1f}".format

# %% [markdown]
# ## Data and the original model
#
# The forget set is every training image of the forget classes. The retain set is all
# other training images. Forget accuracy is measured on the test images of the forget
# classes. Retain accuracy (Pre-R, Post-R) is measured on retain training images, as in
# the paper. Images for the recovery attack come from test images of the *other* classes,
# so the attack never sees an image that is later scored.

# %% tags=["remove-input"]
display(Markdown(ch.setup_text(cfg)))

# %%
data = ch.load_data(cfg)
orig = ch.original_model(cfg, data, cfg.seed)
orig_audit, _ = ch.audit(orig, data, cfg.recal_batch)
# Retrain (cached for the paper Table 1 rows) is in the regime table below.
retrain0 = ch.unlearned_model(cfg, data, orig, "Retrain", cfg.seed)
sizes = pd.DataFrame(
    {
        "images": [
            len(data.splits.forget_x),
            len(data.splits.retain_x),
            len(data.test_forget_x),
            len(data.pool_x),
        ],
    },
    index=[
        "forget (train)",
        "retain (train)",
        "forget-class test",
        "recovery pool (test, other classes)",
    ],
)
display(sizes.style.format("{:d}"))
run.record(**ch.data_metrics(data, orig_audit))

# %% [markdown]
# ### The regime
#
# Every gap below is bounded by how well the original model knew the forget class, so the
# first thing to check is that the original is in the paper's regime: well fit, and
# knowing the forget class. The paper does not report its original model. Its Retrain row
# reaches 99.6% on retain training images, and its recalibrated NoiseInject and BadTeacher
# reach 98.7% and 97.2% on the forget class, so its original knew the class at least that
# well. The 95% intervals are Wilson intervals on the image counts of the table; the last rows
# give the model's size and the gap between its training and test accuracy.

# %%
reg = ch.regime({"Original": orig, "Retrain": retrain0}, data)
acc_cols = ch.REGIME_COLUMNS
paper_col = [
    f"not reported (Retrain {paper.number(CH, 'regime_retrain_retain'):.1f})",
    "not reported",
    f">= {paper.number(CH, 'regime_forget_floor'):.1f} (implied)",
]
regime_view = reg[acc_cols].T.round(1).astype(object)
regime_view["paper (original)"] = paper_col
regime_view["ours 95% CI (Original)"] = [
    reg.loc["Original", "train 95% CI"],
    reg.loc["Original", "test 95% CI"],
    "",
]
markers = ch.model_markers({"Original": orig, "Retrain": retrain0}, reg)
regime_view = pd.concat([regime_view, markers]).fillna("")
display(regime_view)
run.record(**ch.regime_metrics(reg))
run.record(**ch.schedule_metrics(cfg, data))  # training lengths the regime gates read
display(Markdown(ch.regime_text(orig_audit, reg)))

# %% [markdown]
# ## The recalibration operator
#
# `memlab.science.bn.recalibrate(model, images, batch_size=128)` returns a copy whose BN running
# statistics are re-estimated on `images`. It wraps `update_bn`: train mode, gradients off,
# and a cumulative average over the batches. Its properties are unit-tested
# (`tests/test_bn.py`): weights are bitwise unchanged, it is idempotent for a fixed batch
# order, it is the identity on a GroupNorm model, and its statistics equal the activation
# moments computed directly, layer by layer. Here we check the first two properties on the
# original model.

# %%
cal = bn.recalibrate(orig, data.splits.retain_x, cfg.recal_batch)
cal2 = bn.recalibrate(cal, data.splits.retain_x, cfg.recal_batch)
gap = max(
    float((a[0] - b[0]).abs().max())
    for a, b in zip(bn.running_stats(cal).values(), bn.running_stats(cal2).values())
)
display(
    Markdown(
        f"Weights unchanged: **{bn.weights_equal(orig, cal)}**; largest running-mean"
        f" change when recalibrating twice: **{gap:.2e}**."
    )
)

# %% [markdown]
# ## Forget accuracy before and after recalibration (paper Table 1)
#
# For each method: Pre-F and Post-F (forget-class test accuracy before and after the audit's
# recalibration on `recal_images` retain images: 5000 of the 45000 at `cpu`, every one at
# `paper`; the paper uses at least 5000 and shows the sampling error is small),
# ΔF = Post-F − Pre-F in percentage points, Pre-R and Post-R (retain accuracy), LP-50 (a
# logistic-regression probe on penultimate features, 50 images per class, lbfgs,
# `max_iter=1000`; its forget-class test accuracy) and ReAUC.
#
# ReAUC is our reading of the paper's relearning AUC. We fine-tune a copy on 50 forget-class
# images mixed with 50 retain images for `relearn_epochs` epochs, and record the forget
# accuracy after each epoch. The area under that curve is normalised so that Retrain scores 0
# and the original model scores 1.
#
# The methods follow their reference implementations: gradient ascent (GA) on the forget set, GA
# followed by fine-tuning on retain data (GA+FT), SalUn {cite}`fan2024salun`, SCRUB
# {cite}`kurmanji2023scrub`, Bad Teacher {cite}`chundawat2023badteacher` and its
# incompetent-teacher-only variant, UNSIR-style noise injection {cite}`tarun2023unsir`, selective
# synaptic dampening (SSD) {cite}`foster2024ssd`, and projected-gradient unlearning (PGU)
# {cite}`hoang2024pgu` in the paper's cleaner-covariance reading. Each module in
# `memlab/science/unlearning/` documents its hyperparameters. The table `HPARAMS` of
# `memlab.experiments.ch01_bn_illusion.spec` holds the values each profile sets, and the `paper`
# profile uses the reference defaults.
#
# The *BN mode* column says how each method treats BatchNorm while it unlearns. `train`
# means forget data can corrupt the running statistics. `eval` means the statistics stay
# fixed while the weights move (misalignment). `mixed` is NoiseInject: its impair step
# runs in train mode, its repair step with BN frozen (the reference UNSIR loop repairs in
# train mode, which would re-estimate the statistics on retain data and hide the gap by
# construction; the paper's NoiseInject shows +18.9 pp, so its repair did not). SSD
# computes its importances in eval mode, as the reference `ssd_tuning` does.
#
# **How the `cpu` hyperparameters were chosen.** The `paper` profile uses each reference's
# defaults. The `cpu` profile has the paper's forget and retain sets, so each method starts from
# its reference values too; two reference lengths are cut to fit the chapter's time (SCRUB's
# retain phases, GA+FT's fine-tuning), and GA keeps the paper's 500 steps. A value was changed
# by one rule only: each method must keep its retain accuracy (Pre-R, on retain training images)
# within about 10 pp of the original's, as the paper's methods do (Appendix I keeps retain
# accuracy at 85% or more); a method that did not was given the first milder learning rate (or
# SSD's selection weight) that did. Forget accuracy, ΔF and the claims below were never looked
# at while choosing them. A method that diverges (a non-finite weight
# or logit) stops the chapter with an error naming it rather than being scored.

# %%
long, models = ch.run_method_table(cfg, data)
summary = ch.summarise(long)
ours = summary.drop(
    index="Original"
)  # the rows the paper reports; Original stays as our reference row
theirs = paper.table(CH, "table1")
table1 = paper.side_by_side(summary, theirs, metrics=ch.METRICS)
display(
    Markdown(
        f"Reproduces paper {paper.source(CH, 'table1')}:"
        f" {theirs.attrs['caption']}. *ours*: profile `{cfg.profile}`, {cfg.n_seeds}"
        " seed(s)"
        + (", mean over seeds (std in the second table)" if cfg.n_seeds > 1 else "")
        + "."
    )
)
table1.insert(0, ("BN mode", "ours"), summary["BN mode"].reindex(table1.index))
display(
    table1.style.format(precision=1, na_rep="–").format(
        precision=3, subset=[("ReAUC", "paper"), ("ReAUC", "ours")], na_rep="–"
    )
)
if cfg.n_seeds > 1:
    display(summary.filter(like=" std"))
t1_metrics = ch.table1_metrics(summary, long)
run.record(**t1_metrics)
# GA keeps the paper's step count (its paper row is 42 pp below Retrain on retain).
drift = ours["Pre-R"] - orig_audit["Pre-R"]
drift = drift.drop(index=["Retrain", "GA"], errors="ignore")
far = ", ".join(f"{m} {d:+.1f} pp" for m, d in drift[drift.abs() > 10].items())
display(
    Markdown(
        "Tuning rule check: retain accuracy (Pre-R) of every method against the"
        f" original's {orig_audit['Pre-R']:.1f}%: largest drop"
        f" {-drift.min():.1f} pp ({drift.idxmin()}; GA, kept at the paper's step count:"
        f" {orig_audit['Pre-R'] - ours.loc['GA', 'Pre-R']:.1f} pp); "
        + (f"more than 10 pp away: {far}." if far else "all within 10 pp.")
    )
)
run.record(**ch.recal_metrics(models))
nine = ours.drop(index="Retrain", errors="ignore")
big = nine.index[nine["ΔF"] >= ch.GAP_PP].tolist()
display(
    Markdown(
        f"At this profile, **{len(big)} of {len(nine)}** methods show ΔF ≥"
        f" {ch.GAP_PP} pp"
        + (f" ({', '.join(big)})" if big else "")
        + f"; the paper reports {paper.number(CH, 'n_methods_large_gap')} of 9. The"
        f" largest gap here is {nine['ΔF'].max():+.1f} pp ({nine['ΔF'].idxmax()});"
        f" the paper's largest is {paper.number(CH, 'badteacher_flip_pp'):+.1f} pp"
        " (BadTeacher). Gaps are bounded by the original model's forget accuracy"
        f" ({orig_audit['Pre-F']:.1f}% here, about 95% or more in the paper's table),"
        " and a method that erased the class from the weights, or wrecked the whole"
        " model (look at Pre-R), has no gap to show."
    )
)

# %% [markdown]
# The Original row is our reference and is not in the paper's table. A nonzero ΔF for it means the
# running statistics left by training (a moving average over the last batches) differ from
# the full-retain moments (BatchNorm's momentum is PyTorch's 0.1, the paper ResNet-18's).
#
# ## Linear-probe decomposition (paper Table 2)
#
# The probe gap to Retrain splits into a BN-residual, LP(M) − LP(M_cal), and an NC-residual,
# LP(M_cal) − LP(Retrain). A positive BN-residual means the published checkpoint
# overstates how separable the forget class is in the features; a negative one means it
# understates it. The paper's CIFAR-10 row reports only BN-residuals. Its CIFAR-100 rows
# need `dataset="cifar100"`, which is not run at this profile.

# %%
table2 = ch.lp_decomposition(long)
t2_paper = paper.table(
    CH, "table2_cifar10" if cfg.dataset == "cifar10" else "table2_cifar100"
)
display(
    Markdown(
        f"Reproduces paper {t2_paper.attrs['source']}. LP of Retrain: ours "
        f"{table2.attrs['LP_retrain']:.1f}%, paper "
        f"{paper.number(CH, 'lp_retrain_' + cfg.dataset):.2f}% ({cfg.dataset})."
    )
)
t2_view = paper.side_by_side(table2, t2_paper, metrics=["BN-residual", "NC-residual"])
for col in ("LP", "LP (recal)"):
    t2_view[(col, "ours")] = table2[col].reindex(t2_view.index)
display(t2_view.style.format(precision=2, na_rep="–"))
run.record(**ch.table2_metrics(table2, cfg.dataset))
if cfg.dataset != "cifar100":
    c100 = paper.table(CH, "table2_cifar100").assign(
        ours="not run at this profile (needs dataset='cifar100')"
    )
    display(
        Markdown(
            f"CIFAR-100, from paper {c100.attrs['source']}: the masking case, where the"
            " BN-residual is negative and the recalibrated probe sits above Retrain."
        )
    )
    display(c100)

# %% [markdown]
# ## Recovery with 100 unlabelled images (paper Figure 1a)
#
# An attacker who holds the checkpoint needs neither labels nor retain data. A forward pass
# over `recovery_b` unlabelled in-distribution images (here: held-out test images of the
# other classes) gets most of the way to the full audit.

# %%
fig1a_df = ch.figure1a_table(cfg, data, models, long)
# Grouped bars per method: forget accuracy before, after a B-image recovery, after
# the full recalibration.
fig, ax = plotting.figure("wide")
n_cols = len(fig1a_df.columns)
bar_w = 0.8 / n_cols
xs = np.arange(len(fig1a_df))
for i, col in enumerate(fig1a_df.columns):
    ax.bar(xs + (i - (n_cols - 1) / 2) * bar_w, fig1a_df[col].values, bar_w, label=col)
ax.set_xticks(xs, fig1a_df.index, rotation=30, ha="right")
ax.set_ylabel("forget-class test accuracy (%)")
ax.set_ylim(0, 100)
ax.legend(ncols=n_cols, loc="upper left")
_ = plotting.publish(fig, "fig1a", CH)
display(fig1a_df.style.format(precision=1))
run.record(**ch.figure1a_metrics(fig1a_df))

# %% [markdown]
# ```{glue:figure} 01_bn_illusion-fig1a
# :name: fig-01-1a
# Forget-class test accuracy of every method as published (before), after recalibrating on
# 100 unlabelled held-out test images, and after the audit's retain recalibration (our run).
# ```
#
# ## How many images does recovery need? (paper Figure 1b)
#
# The same recalibration, repeated for each budget B, with three image sources: retain
# images, held-out test images, and an out-of-distribution source. The paper's
# out-of-distribution source is CIFAR-100 pixels, which are not available offline. At the
# `smoke` and `cpu` profiles we substitute held-out CIFAR-10 test images whose 8×8 tiles
# are randomly permuted within each image. This keeps natural pixel and texture statistics
# but destroys the objects.

# %%
sweep = ch.budget_sweep(cfg, data, models)
post_f = {m: t1_metrics["table1"][m]["Post-F"] for m in cfg.recovery_methods}
# One panel per method, one line per image source; dashed: the audit's recalibration.
source_labels = {
    "retain": "retain images",
    "test": "held-out test images",
    "ood": "out-of-distribution substitute",
}
rec_methods = list(dict.fromkeys(sweep["method"]))
fig, axes = plotting.figure("wide", ncols=len(rec_methods), sharey=True)
axes = np.atleast_1d(axes)
for ax, m in zip(axes, rec_methods):
    d = sweep[sweep["method"] == m]
    for src, g in d.groupby("source", sort=False):
        s = g.groupby("budget")["forget_acc"].agg(["mean", "std"])
        ax.errorbar(
            s.index,
            s["mean"],
            yerr=s["std"] if cfg.n_seeds > 1 else None,  # no bars from one seed
            marker="o",
            ms=3,
            capsize=2,
            label=source_labels.get(src, src),
        )
    ax.axhline(post_f[m], ls="--", color="k", lw=1, label="audit recalibration")
    ax.set_xscale("log")
    budgets = sorted(d["budget"].unique())
    ax.set_xticks(budgets, [str(b) for b in budgets], rotation=45)
    ax.minorticks_off()
    ax.set_title(m)
    ax.set_xlabel("recovery budget B (images)")
axes[0].set_ylabel("forget-class test accuracy (%)")
axes[0].set_ylim(0, 100)
handles, labels = axes[0].get_legend_handles_labels()
fig.legend(handles, labels, loc="outside lower center", ncols=len(labels))
_ = plotting.publish(fig, "fig1b", CH)
piv = ch.figure1b_table(sweep)
display(piv.style.format(precision=1))
rec = paper.table(CH, "recovery_b10")
display(
    Markdown(
        f"Paper ({rec.attrs['source']}): "
        + "; ".join(
            f"{m} " + ", ".join(f"{k} {v}%" for k, v in r.dropna().items())
            for m, r in rec.iterrows()
        )
        + f". Our out-of-distribution source: {data.ood_note}."
    )
)
run.record(**ch.figure1b_metrics(sweep, cfg.budgets))

# %% [markdown]
# ```{glue:figure} 01_bn_illusion-fig1b
# :name: fig-01-1b
# Forget-class test accuracy after recalibrating on B unlabelled images from three sources,
# for three representative methods (our run: one seed at the `smoke` and `cpu` profiles; at
# `paper`, the mean over its seeds with their standard deviation as error bars). Dashed line:
# the audit's retain recalibration.
# ```
#
# ## The GroupNorm control
#
# GroupNorm normalises each image with its own statistics and keeps no running state.
# Recalibration is then the identity, so ΔF must be exactly zero for every method. The
# encoder can still leak: ReAUC shows how quickly the forget class comes back. The paper
# (paper Table 6, Appendix F) reports ΔF = 0.00 pp for eight methods plus Retrain (PGU omitted)
# and a relearning AUC of 0.95–0.98.

# %%
if cfg.gn_control:
    gn_long = ch.groupnorm_control(cfg, data)
    gn = ch.summarise(gn_long)
    display(
        gn[ch.METRICS].style.format(precision=1).format(precision=3, subset=["ReAUC"])
    )
    run.record(**ch.gn_metrics(gn))
else:
    display(Markdown("GroupNorm control not run (`gn_control=False`)."))

# %% [markdown]
# ## The LayerNorm ViT control
#
# The paper (Appendix M) repeats the audit on a ViT-S/16, whose LayerNorm keeps no running
# statistics either. At the `paper` profile we train that model; the `cpu` profile trains a
# small ViT of the same shape (patch 16, `vit_dim` wide, `vit_depth` blocks) and the `smoke`
# profile a toy one, through the same code. What this control tests holds for any LayerNorm
# model, trained well or not: recalibration must leave it unchanged.

# %%
if cfg.vit_control:
    vit = ch.vit_control(cfg, data)
    display(vit.style.format(precision=1))
    run.record(**ch.vit_metrics(vit))
else:
    display(Markdown(f"Not run at the `{cfg.profile}` profile (`vit_control=False`)."))

# %% [markdown]
# ## Does post-recalibration forget accuracy measure leakage?
#
# Before recalibration, near-zero forget accuracy cannot tell a leaky method from Retrain.
# The paper correlates post-recalibration forget accuracy with ReAUC (Pearson r = 0.998,
# Spearman 0.988, Kendall 0.952) and with LP-50 (p < 0.005 for all three tests) over the
# ten paper Table 1 rows. We compute the same tests over our rows.

# %%
corr = ch.correlations(ours)
# Post-recalibration forget accuracy against ReAUC and LP-50, one point per method.
fig, axes = plotting.figure("wide", ncols=2)
for ax, y in zip(axes, ("ReAUC", "LP-50")):
    ax.scatter(ours["Post-F"], ours[y])
    for name, r in ours.iterrows():
        ax.annotate(
            name,
            (r["Post-F"], r[y]),
            fontsize=7,
            xytext=(3, 3),
            textcoords="offset points",
        )
    ax.set_xlabel("Post-F (%)")
    ax.set_ylabel(y)
_ = plotting.publish(fig, "correlations", CH)
cp = paper.table(CH, "correlations")
display(
    corr.style.format(precision=3, subset=["statistic"]).format(
        "{:.2g}", subset=["p-value"]
    )
)
display(
    Markdown(
        "Paper ("
        + cp.attrs["source"]
        + "): "
        + ", ".join(f"{k} {v}" for k, v in cp.loc["ReAUC"].items())
        + " for Post-F vs ReAUC."
    )
)
run.record(**ch.correlation_metrics(corr))

# %% [markdown]
# ```{glue:figure} 01_bn_illusion-correlations
# :name: fig-01-corr
# Post-recalibration forget accuracy against ReAUC and LP-50, one point per method of our
# paper Table 1 reproduction (our run).
# ```
#
# ## Appendix H: GA's gap against its step count
#
# The paper's GA row shows no gap at 500 steps, but GA shows +76 pp at 100 steps. The
# paper reads this as GA damaging the weights more the longer it runs, so that after enough
# steps the forget class is gone from the weights and not just from the statistics. Its GA
# row also has the lowest retain accuracy (57.2%). We snapshot one GA run at each step count.

# %%
app_h = ch.ga_step_sweep(cfg, data, cfg.seed)


def plot_pre_post(df: pd.DataFrame, xlabel: str):
    """Pre-F and Post-F (%) against a swept setting (Appendices H and Q)."""
    fig, ax = plotting.figure("single")
    ax.plot(df.index, df["Pre-F"], marker="o", label="Pre-F (published)")
    ax.plot(df.index, df["Post-F"], marker="s", label="Post-F (recalibrated)")
    ax.fill_between(df.index, df["Pre-F"], df["Post-F"], alpha=0.15, label="ΔF")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("forget-class test accuracy (%)")
    ax.set_ylim(0, 100)
    ax.legend()
    return fig


_ = plotting.publish(plot_pre_post(app_h, "gradient-ascent steps"), "appendix_h", CH)
display(app_h.style.format(precision=1))
run.record(**ch.appendix_h_metrics(app_h))

# %% [markdown]
# ```{glue:figure} 01_bn_illusion-appendix_h
# :name: fig-01-h
# GA: forget accuracy before and after recalibration against the number of ascent steps
# (our run; paper: ΔF +76 pp at 100 steps, 0 pp at 500).
# ```
#
# ## Appendix Q: mixing retain images into SalUn's batches
#
# SalUn's gap comes from corruption: its random-label batches run through BN in train mode.
# Mixing retain images into each batch keeps the running statistics close to the retain
# distribution. The paper reports that a retain share of at least 25% removes the gap it
# observed.

# %%
app_q = ch.salun_mix_sweep(cfg, data, cfg.seed)
fig = plot_pre_post(app_q, "retain share of each SalUn batch")
_ = plotting.publish(fig, "appendix_q", CH)
display(app_q.style.format(precision=1).format_index(precision=2))
run.record(**ch.appendix_q_metrics(app_q))

# %% [markdown]
# ```{glue:figure} 01_bn_illusion-appendix_q
# :name: fig-01-q
# SalUn: forget accuracy before and after recalibration against the share of retain images
# in each unlearning batch (our run; paper: a share of at least 25% removes the gap).
# ```
#
# ## Where the statistics are misaligned (paper Figure 2)
#
# For every BN layer, the mean over channels of |μ − μ*| / σ*: the stored running mean
# against the recalibrated one, in units of the recalibrated standard deviation (solid
# lines). The dashed lines show a recalibration on half of the retain images against the
# full one, which is the sampling error of the operator itself. The paper reports a largest
# layer gap of 0.3402 (BadTeacher, last BN layer) and a sampling error of 0.0016–0.0018
# (5000 against 45000 images).

# %%
mis = ch.misalignment_profile(cfg, data, models)
# Per-layer gap before (solid) and after (dashed) recalibration, one colour per method.
fig, ax = plotting.figure("wide")
for i, (m, g) in enumerate(mis.groupby("method", sort=False)):
    ax.plot(g["layer"], g["before"], color=f"C{i % 10}", marker=".", label=m)
    ax.plot(g["layer"], g["after"], color=f"C{i % 10}", ls="--", lw=0.8)
ax.plot(
    [], [], color="k", ls="--", lw=0.8, label="half vs all audit images (sampling)"
)
ax.set_yscale("log")
ax.set_xticks(sorted(mis["layer"].unique()))
ax.set_xlabel("BN layer (input to output)")
ax.set_ylabel("mean |μ - μ*| / σ*")
ax.legend(ncols=2, fontsize=7)
_ = plotting.publish(fig, "fig2", CH)
by_method = mis.groupby("method", sort=False)[["before", "after"]].agg(["mean", "max"])
display(by_method.style.format(precision=4))
run.record(**ch.misalignment_metrics(mis))

# %% [markdown]
# ```{glue:figure} 01_bn_illusion-fig2
# :name: fig-01-2
# Per-layer running-mean misalignment of every unlearned model (solid) and the
# recalibration's own sampling error, half of its images against all (dashed; our run).
# ```
#
# ## Claims
#
# Each headline claim of the paper is written as a predicate over our results. The verdict
# holds for the profile that produced this page. Thresholds that differ from the paper's
# wording are stated in the claim text. Claims that need CIFAR-100 (the paper Table 2 sign
# pattern), Tiny-ImageNet or ImageNet-100 are outside this chapter's runs.

# %% tags=["hide-input"]
# Shows the claims table, saves the run, glues the verdict counts used below.
verdicts = pagekit.judge(ch.claims(), run)
if cfg.n_seeds == 1:
    # With one seed, a verdict that hinges on a few points of ΔF can follow the
    # seed's noise.
    display(
        Markdown(
            "Every method row here (paper Table 1) comes from **one seed**"
            f" (seed {cfg.seed}). A verdict of the claims table's Verdict column"
            " that turns on a few points, such as which method flips most or the"
            " sign of a small residual, can change with the seed. The findings box"
            " and the Across seeds column pool the seeds of a published seed sweep"
            " (`memlab sweep 01_bn_illusion -p seed 0..2`); `-p n_seeds 3` averages"
            " the rows themselves over seeds (about three times their cost)."
        )
    )

# %% [markdown]
# ### How the regime gates were chosen
#
# Each claim is judged only inside the regime the paper tested it in: a precondition read from
# our run, fixed from the paper's text before any verdict by two rules. A trained model's
# accuracy must lie within 10 points of the paper's: the paper does not report its original, but
# its recalibrated NoiseInject knows the forget class at 98.7% and its Retrain fits retain images
# at 99.6% (paper Table 1), so our Original must reach 88.7% on the forget class and our Retrain 89.6%
# on retain images (the same for the GroupNorm pair, which the paper trains alike). A schedule the
# paper states must be at least its length: relearning runs 50 epochs, and GA makes 12.5 passes
# over the forget set (500 steps of 128 images over 5000). A claim whose gate fails is "outside
# the paper's regime" and says nothing about the paper either way. Two claims have no gate: the
# recalibration's sampling error (Theorem 1 bounds it for any weights) and the CIFAR-100 sign
# pattern (the paper reports no CIFAR-100 accuracy to gate on); the sanity checks never have one.
# The table gives each gate, what this run measured, and the run that would bring its claims
# inside with its estimated cost.

# %% tags=["hide-input"]
display(pagekit.regimes_table(CH, verdicts))

# %% [markdown]
# ## What this means
#
# At the profile of this page, of the paper's claims {glue:}`01_bn_illusion-n-reproduced`
# reproduced, {glue:}`01_bn_illusion-n-not-reproduced` did not,
# {glue:}`01_bn_illusion-n-outside-regime` were outside the paper's regime (the gates above),
# {glue:}`01_bn_illusion-n-not-judged` could not be judged (a precondition failed, or the
# margin lies inside the noise band of 250 test images) and
# {glue:}`01_bn_illusion-n-not-run` were not run; {glue:}`01_bn_illusion-n-sanity` sanity
# checks (true by construction) are counted apart. The summary below is built from this
# run's verdicts.

# %% tags=["remove-input"]
pagekit.closing_summary(
    verdicts,
    ch.closing_caveat(cfg, orig_audit),
    chapter=CH,
)

# %% [markdown]
# **What to take from it.** Before reading the forget accuracy of a BatchNorm model, recalibrate its
# statistics on retain data (one forward pass, weights untouched) and report both numbers, with the
# retain accuracy beside them. A method whose published forget accuracy is low can still know the
# class: here the recalibration moves it for several methods ({numref}`fig-01-1a`), and the few
# unlabelled images that suffice ({numref}`fig-01-1b`) make it an attack, not only an audit.

# %% [markdown]
# **Exercises for this chapter:** {ref}`exercises-01-bn-illusion` ({doc}`student notebook <../exercises/01_bn_illusion>`), autograded with otter-grader; instructors see {doc}`../instructor`.
