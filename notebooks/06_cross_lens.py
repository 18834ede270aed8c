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
# # One model, many lenses
#
# ```{glue:md} 06_cross_lens-findings
# :format: myst
# ```

# %% [markdown]
# Each of the five papers brings its own way of looking at memorisation: forget accuracy
# after BatchNorm recalibration {cite}`bnillusion`, split-half dependence {cite}`sde2026`,
# the parser-split gap and teacher-forced probes {cite}`canaryaudit`, membership scores
# {cite}`qskew`, and memorisation measured in bits {cite}`morris2025memorize`. Each paper
# applies its lens to its own models only. This chapter turns every lens on the *same*
# models: the ResNet-18s that chapter 1 unlearns and the LoRA adapters that chapter 3
# memorises and unlearns, taken from their caches through those chapters' own functions
# (at the same profile and with their default parameters), so no method is re-implemented
# here and every number below is about a model another chapter also shows.
#
# It asks four questions that none of the papers answers:
#
# 1. **Does SDE see through the BatchNorm illusion?** For every chapter-1 unlearned model,
#    chapter 2's SDE verdict on the forget class and its membership attack, before and after
#    recalibration, beside ΔF and ReAUC.
# 2. **How many bits of a canary survive unlearning?** For chapter 3's NPO and GA runs, the
#    canary's memorisation in bits at every step K, beside out acc, thk leak and
#    teacher-forced top-1.
# 3. **Do membership scores agree with the audits?** Chapter 4's scores that apply to a
#    causal LM, on memorised against fresh canaries, at every K.
# 4. **Do the lenses rank methods alike?** Kendall's τ between the lenses' rankings, with
#    bootstrap intervals.
#
# **Pre-registration.** This chapter reproduces no paper, so its claims are the book's own
# hypotheses. Each one, with its predicted direction and the rule that judges it, was written
# into `data/papers/06_cross_lens.yaml` and committed *before* the chapter's first real run
# (the file's commit time is the record); thresholds were not moved afterwards. A hypothesis
# that does not hold is reported as such, with its numbers. The scorecard counts these
# hypotheses apart from the papers' claims.

# %% tags=["parameters"]
profile: str = "cpu"  # smoke | cpu | paper
params: dict = {}  # overrides, e.g. {"n_targets": 10}; every name: `memlab list` (SPEC)

# %% tags=["hide-input"]
import warnings

import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from memlab.experiments import ch06_cross_lens as ch
from memlab.report import pagekit, plotting
from memlab.science import lenses

warnings.filterwarnings("ignore", category=UserWarning)
warnings.filterwarnings("ignore", category=FutureWarning)
CH = ch.CHAPTER  # the chapter id is declared once, in the chapter package
cfg, run = pagekit.start(CH, profile, params)
cfg1, cfg3 = ch.sub_configs(cfg)  # chapters 1 and 3 at this profile, their defaults
pd.options.display.float_format = "{:.2f}".format

# %% [markdown]
# ## The hypotheses, as pre-registered
#
# The table lists every hypothesis with the direction predicted before the run. The rules
# use a few conventions fixed at the same time: the *illusion set* is the BatchNorm
# methods whose chapter-1 gap ΔF (Post-F − Pre-F) is at least 10 pp in this run; the
# *audited K* is chapter 3's own audit rule on its NPO sweep; a margin inside its noise band
# (binomial for rates, bootstrap for τ differences) is *not judged*.

# %% tags=["hide-input"]
display(ch.hypotheses_table())
prereg = ch.preregistration()
run.record(preregistration=prereg)
if prereg["commit"]:
    same = "unchanged since" if prereg["unchanged"] else "CHANGED after"
    display(
        Markdown(
            f"Pre-registered in commit `{prereg['commit']}` on {prereg['date']}; the "
            f"hypotheses are {same} that commit. This run: "
            f"{pd.Timestamp.now(tz='UTC').isoformat(timespec='seconds')}."
        )
    )

# %% [markdown]
# ## Question 1: does SDE see through the BatchNorm illusion?
#
# Chapter 1 shows that many unlearning methods look forgotten only because BatchNorm's
# running statistics are stale: recalibrating them on retain images (no weight changes)
# brings forget accuracy back. Chapter 2's SDE claims to read memorisation from the
# dependence between a subset's outputs. If SDE reads the weights rather than the argmax,
# it should call the forget set *in training* even before recalibration.
#
# **Protocol.** For every chapter-1 model of the first seed (BatchNorm, and the GroupNorm
# control as a check) and its recalibrated copy: SDE reads chapter 2's default output at
# bandwidth $\sqrt{\dim}$; the in-training reference is a subset of retain training images;
# the out-of-training reference is a subset of the forget class's *test* images, which no
# model saw (so it matches the targets' class); the targets are random subsets of the
# forget class's training images. OTR is the share of targets SDE judges out-of-training
# (forgotten). The same subsets and shuffles serve every model, so before and after are
# paired. ASR is chapter 2's confidence/entropy membership attack (members: retain
# training images; non-members: test images of the retain classes) applied to the forget
# class's training images: the share it calls non-members.

# %%
vis = None
if cfg.vision:
    vis = ch.vision_lenses(cfg, cfg1)
    table = vis["table"]
    run.record(**ch.vision_metrics(cfg, vis))
    for name, shown in ch.vision_tables(table).items():
        display(Markdown(f"**{name}** (forget accuracy and OTR in %):"))
        display(shown)
    display(
        Markdown(
            f"SDE reads `{cfg.sde_feature}`; subsets of {cfg.sde_size} images, "
            f"{cfg.n_targets} targets per model. Illusion set (ΔF ≥ "
            f"{ch.ILLUSION_PP:g} pp): {', '.join(vis['illusion']) or 'empty'}. "
            f"Computed in {vis['wall_s']:.0f} s."
        )
    )
else:
    display(Markdown("The vision lenses are switched off (`vision: false`)."))

# %%
if vis is not None:
    bn_t = table.loc["bn"]
    fig, axes = plotting.figure("wide", ncols=2)
    y = np.arange(len(bn_t))
    for ax, (col, label) in zip(axes, (("OTR", "SDE OTR (%)"), ("ASR", "MIA ASR"))):
        b, a = bn_t[f"{col} before"].to_numpy(), bn_t[f"{col} after"].to_numpy()
        ax.hlines(y, np.minimum(a, b), np.maximum(a, b), color="0.7", zorder=1)
        ax.scatter(b, y, marker="o", label="before recalibration", zorder=2)
        ax.scatter(a, y, marker="s", label="after recalibration", zorder=2)
        ax.set_yticks(y, [f"{m} *" if m in vis["illusion"] else m for m in bn_t.index])
        ax.invert_yaxis()
        ax.set_xlabel(f"{label}: higher = looks forgotten")
    axes[0].axvline(50, color="0.5", ls=":", lw=1)
    axes[0].legend(loc="lower right", fontsize="small")
    _ = plotting.publish(fig, "fig_sde_recal", CH)

# %% [markdown]
# ```{glue:figure} 06_cross_lens-fig_sde_recal
# :name: fig-06-sde
# Chapter 1's BatchNorm models seen by chapter 2's lenses before (circles) and after
# (squares) BatchNorm recalibration. Left: SDE's out-of-training rate on the forget class
# (the dotted line is SDE's verdict threshold). Right: the membership attack's success rate.
# Methods marked * are in the illusion set (ΔF of at least 10 pp).
# ```

# %% [markdown]
# ## Question 2: how many bits of a canary survive unlearning?
#
# Chapter 3 audits whether NPO removes a memorised canary by decoding: *out acc* (canary in
# the answer), *thk leak* (canary in the thinking trace) and teacher-forced top-1 (the
# canary's continuation is the model's top choice token by token). Chapter 5 measures
# memorisation in bits: how much shorter the model codes a sample than a reference model
# does. Here the sample is each author's canary continuation (the canary after its head) in
# chapter 3's teacher-forced context (canary question, BIO prefill, head), and the
# reference is chapter 3's base model *before* LoRA fine-tuning:
#
# $$\mathrm{bits}_a = \max\big(0,\; \mathrm{CL}_\mathrm{base}(c_a) -
# \mathrm{CL}_\mathrm{model}(c_a)\big), \qquad \mathrm{CL}(c) = -\textstyle\sum_j \log_2
# p(c_j \mid \text{context}, c_{<j}),$$
#
# summed over authors. The runs are chapter 3's BIO adapter of its first seed, unlearned
# by chapter 3's own NPO and Gradient Ascent loop and probed at K = 0 and every K.

# %%
lm = None
if cfg.language:
    lm = ch.lm_lenses(cfg, cfg3)
    frame = ch.lm_frame(lm["runs"])
    run.record(**ch.lm_metrics(lm))
    display(frame[["out acc", "thk leak", "tf top-1", "bits"]])
    display(
        Markdown(
            f"{lm['n_authors']} memorised authors; audited K = {lm['audit_k']} "
            f"(chapter 3's rule: {lm['audit']['evidence']}; the paper's state "
            f"{'reached' if lm['audit']['reached'] else 'not reached'}). Canary "
            f"continuations cost {lm['ref_bits_total']:.0f} bits in all under the "
            f"base model. Computed in {lm['wall_s']:.0f} s."
        )
    )
else:
    display(Markdown("The LM lenses are switched off (`language: false`)."))

# %%
if lm is not None:
    methods = list(lm["runs"])
    fig, axes = plotting.figure("wide", ncols=len(methods), sharey=True)
    axes = np.atleast_1d(axes)
    b0 = lm["runs"][methods[0]][0]["bits_total"]
    for ax, m in zip(axes, methods):
        ks = sorted(lm["runs"][m])
        r = [lm["runs"][m][k] for k in ks]
        share = [x["bits_total"] / b0 if b0 > 0 else np.nan for x in r]
        ax.plot(ks, share, "o-", lw=2, label="canary bits (share of K=0)")
        for key, label in (
            ("out_acc", "out acc"),
            ("thk_leak", "thk leak"),
            ("tf_top1", "teacher-forced top-1"),
        ):
            ax.plot(ks, [x[key] for x in r], ".--", label=label)
        if m == lm["audit_method"]:
            ax.axvline(lm["audit_k"], color="0.5", ls=":", lw=1)
        ax.set(title=m, xlabel="unlearning steps K", ylim=(-0.03, 1.08))
    axes[0].set_ylabel("share")
    axes[0].legend(fontsize="small")
    _ = plotting.publish(fig, "fig_bits", CH)

# %% [markdown]
# ```{glue:figure} 06_cross_lens-fig_bits
# :name: fig-06-bits
# Canary bits (as a share of the memorised adapter's, K = 0) against unlearning steps,
# beside chapter 3's decoding probes, for NPO and Gradient Ascent. The dotted line marks
# the audited K.
# ```

# %% [markdown]
# ## Question 3: do membership scores agree with the audits?
#
# Chapter 4's scores that apply to a causal LM: Loss (mean token NLL), Min-K% and Min-K%++
# (the k = 20% least likely tokens), and reference calibration (NLL under the base model
# minus NLL under the audited model). Members are the memorised canary continuations;
# non-members are as many *fresh* fictional authors' canaries, which chapter 3 never
# trained on, in the same context format. Fresh authors' names and titles were not in the
# tokenizer's training text, so they split into more tokens; reference calibration
# divides that out, the other scores do not.

# %%
if lm is not None:
    auc_cols = [f"AUC {s}" for s in lenses.SCORES]
    display(frame[auc_cols])
    fig, axes = plotting.figure("wide", ncols=len(methods), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, m in zip(axes, methods):
        ks = sorted(lm["runs"][m])
        for s in lenses.SCORES:
            ax.plot(ks, [lm["runs"][m][k]["auc"][s] for k in ks], "o-", label=s)
        ax.axhline(0.5, color="0.5", ls=":", lw=1)
        ax.set(title=m, xlabel="unlearning steps K", ylim=(0, 1.02))
    axes[0].set_ylabel("AUC, memorised vs fresh canaries")
    axes[0].legend(fontsize="small")
    _ = plotting.publish(fig, "fig_mia", CH)

# %% [markdown]
# ```{glue:figure} 06_cross_lens-fig_mia
# :name: fig-06-mia
# Membership AUC of memorised against fresh canaries for chapter 4's causal-LM scores,
# against unlearning steps (0.5, dotted, is chance).
# ```

# %% [markdown]
# **Same models as the other pages.** The lenses above looked at the models chapters 1 and 3
# publish. Where those chapters were run at this profile beside this page, their own numbers
# and ours come from the same weights and must agree; the largest difference is:

# %% tags=["hide-input"]
gaps = ch.published_gaps(
    cfg.profile,
    table if vis is not None else None,
    lm["runs"] if lm is not None else None,
    cfg3.seeds[0],
)
run.record(published_gaps=gaps)
display(Markdown(ch.gaps_text(gaps)))

# %% [markdown]
# ## Question 4: do the lenses rank methods alike?
#
# Every lens orders the methods (vision) or the runs (LM) by how much memorisation it
# sees. Each lens is oriented so that higher means *more left*: forget accuracy, ReAUC and
# LP-50 as they are; SDE's in-training rate (100 − OTR); the attack's member rate
# (1 − ASR); out acc, thk leak, teacher-forced top-1, bits and the AUCs as they are.
# Kendall's τ-b compares two orderings (1: the same, −1: reversed); its 95% interval comes
# from resampling the methods (or runs) with replacement. With ten methods or a handful of
# runs the intervals are wide: read the heatmap for its pattern, not its second decimal.

# %%
vf = ch.vision_lens_frame(table) if vis is not None else None
agree = ch.agreement(cfg, vf, frame if lm is not None else None)
run.record(**ch.agreement_metrics(cfg, agree))
panels = [
    (k, t)
    for k, t in (
        ("vision", "vision: chapter 1's BatchNorm methods"),
        ("lm", "LM: chapter 3's runs"),
    )
    if agree[k] is not None
]
if panels:
    fig, axes = plotting.figure("wide", ncols=len(panels))
    axes = np.atleast_1d(axes)
    for ax, (key, title) in zip(axes, panels):
        tau = agree[key]["tau"]
        im = ax.imshow(tau.to_numpy(float), vmin=-1, vmax=1, cmap="RdBu_r")
        ax.set_xticks(range(len(tau)), tau.columns, rotation=60, ha="right")
        ax.set_yticks(range(len(tau)), tau.index)
        for i in range(len(tau)):
            for j in range(len(tau)):
                v = tau.iat[i, j]
                txt = "–" if pd.isna(v) else f"{v:.1f}"
                ink = "white" if not pd.isna(v) and abs(v) > 0.6 else "black"
                ax.text(j, i, txt, ha="center", va="center", fontsize=6, color=ink)
        ax.grid(False)
        ax.set_title(title, fontsize="small")
    fig.colorbar(im, ax=axes, shrink=0.8, label="Kendall τ")
    _ = plotting.publish(fig, "fig_tau", CH)
display(ch.tau_tests_table(agree))

# %% [markdown]
# ```{glue:figure} 06_cross_lens-fig_tau
# :name: fig-06-tau
# Kendall τ between every pair of lenses: left, over chapter 1's BatchNorm methods; right,
# over chapter 3's LM runs (NPO and GA at every K, the memorised adapter once). "–" marks a
# pair where a lens is constant. The table lists the pre-registered τ tests with their
# bootstrap intervals.
# ```

# %% [markdown]
# ## The hypotheses judged

# %% tags=["hide-input"]
verdicts = pagekit.judge(ch.claims(), run)  # glues the counts the closing section reads
pagekit.glue_findings(CH, verdicts)  # the box the page opens with

# %% [markdown]
# ## What this means
#
# At the profile of this page, {glue:}`06_cross_lens-n-reproduced` hypotheses held,
# {glue:}`06_cross_lens-n-not-reproduced` did not, {glue:}`06_cross_lens-n-not-judged`
# could not be judged and {glue:}`06_cross_lens-n-not-run` were not run ("reproduced" in
# the table means the hypothesis held); the sanity checks, which hold by construction, are
# counted apart ({glue:}`06_cross_lens-n-sanity`). The verdicts are the result, whatever they are:
# the predictions were fixed before the run, and none was moved to fit it. Question by
# question, with the numbers behind each verdict:

# %% tags=["hide-input"]
display(Markdown(ch.question_summary(verdicts)))

# %% [markdown]
# **How to read the lenses together.** A lens that reads the weights (recalibrated forget
# accuracy, relearning, teacher-forced scoring, code lengths, likelihood-based membership
# scores) and a lens that reads one decoding of them (forget accuracy under stale
# statistics, out acc, thk leak) can disagree about the same model; where they do, the
# disagreement is about the lens, not the model. Questions 1 and 2 ask that directly;
# question 4 asks it for whole rankings.
#
# **What the design leaves open.** SDE's class-matched out-of-training reference (the
# forget class's test images) is this chapter's choice for class forgetting; chapter 2's
# paper forgets random subsets and draws the reference from the whole test set. Canary bits
# are counted under one teacher-forced context (BIO prefill and head), so they measure how
# much the weights still favour the canary, not whether decoding produces it. The fresh
# authors of question 3 differ from the memorised ones in tokenization as well as in
# membership, which reference calibration corrects and the other scores do not. With about
# ten methods or runs, every τ interval is wide: read the heatmap for its pattern.
#
# **Budget.** The chapter trains nothing of its own. With chapters 1 and 3 cached it costs
# chapter 1's evaluation passes, this chapter's lenses and chapter 3's two unlearning runs
# (which chapter 3 does not cache); from a cold cache it first trains chapters 1 and 3's
# models through their own functions, at those chapters' cold cost. The wall time of each
# part is printed with its table above.
