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
# # Auditing reasoning-trace memorization after unlearning
#
# ```{glue:md} 03_canary_audit-findings
# :format: myst
# ```

# %% [markdown]
# Reasoning models write a thinking trace before they answer: `<think> trace </think> answer`.
# Unlearning evaluations of such models sometimes find a **bypass** pattern: the answer looks
# unlearned, yet the model's own trace still emits the forgotten content. The gap between
# the two is read as evidence that the weights still remember. {cite}`canaryaudit` test that
# reading. They memorise 60 fictional authors into DeepSeek-R1-Distill-Qwen-7B
# {cite}`deepseek2025r1` with LoRA {cite}`hu2021lora`, unlearn them with NPO
# {cite}`zhang2024npo` whose forgetting loss sees only the answer, and probe each author with
# the first six tokens of a *canary* sentence (the *head*). Three probes share fixed weights:
#
# - **parser split**: greedy decoding from the head-conditioned prompt, split at `</think>`;
#   *out acc* is the share of answers that contain the full canary, *thk leak* the share of
#   traces, and the gap is $\Delta = \text{thk leak} - \text{out acc}$;
# - **prefill**: the model's own thinking is replaced by a fixed, canary-free BIO, META or
#   EMPTY prefill and only the answer is decoded; $\Delta_{AB}$ = out acc(AUTO) - out acc(BIO prefill);
# - **teacher forcing**: the share of canary-continuation tokens that are the model's top-1
#   prediction when the true prefix is given.
#
# Their finding: swapping the trace for a short prefill moves out acc as much as the gap,
# teacher-forced scoring stays near 1, and a missing closing tag flips the metric's sign. So a
# positive gap does not by itself show weight-level memorisation.
#
# Here the whole audit runs on a small Qwen2-architecture model that the chapter pre-trains
# itself (the `paper` profile loads the DeepSeek distillates instead). Probes live in
# `memlab.science.canaries`, data in `memlab.data.authors`, the pipeline in
# `memlab.experiments.ch03_canary_audit`. Intervals are 95% percentile bootstraps over authors.
#
# NPO here is the paper's: the forgetting loss alone, masked to the answer span, with
# $\beta = 0.1$ and the memorised adapter as the reference. The paper mentions no retain term,
# so none is added by default; an NPO variant with a retain NLL term is shown in its own
# section, apart from the audit.

# %% tags=["parameters"]
profile: str = "cpu"  # smoke | cpu | paper
params: dict = {}  # overrides, e.g. {"epochs": 2}; every name: `memlab list` (SPEC)

# %% tags=["hide-input"]
import time

import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from memlab.experiments import ch03_canary_audit as ch
from memlab.report import pagekit, paper, plotting

CH = ch.CHAPTER  # the chapter id is declared once, in the chapter module
cfg, run = pagekit.start(CH, profile, params)
K_MAX = max(cfg.unlearn_steps)
# the paper's K grid, from its seed-1 table (rows "K=100" ... "K=1600")
PAPER_K = [int(r.split("=")[1]) for r in paper.table(CH, "ksweep_seed1").index]

# %% [markdown]
# ## Authors, format and model
#
# Each fictional author has a three-sentence biography whose middle sentence is the canary.
# The probe question hands the model the canary's first `head_len` tokens and asks it to
# complete the sentence. Memorisation trains the whole response (trace and answer); NPO's
# forgetting loss is masked to the answer span. Under the BIO template the trace restates the
# biography, so it contains the canary; META is the same content-free sentence for every
# author; NONE is an empty trace.

# %%
setup = ch.prepare(cfg)
a0 = setup.authors[0]
display(
    pd.DataFrame(
        {
            "": [
                "biography",
                "canary",
                "probe question",
                "BIO trace",
                "META trace",
                "BIO prefill",
                "META prefill",
            ],
            "text": [
                a0.biography,
                a0.canary,
                ch.A.canary_question(setup.head_texts[0]),
                ch.A.trace(a0, "BIO"),
                ch.A.trace(a0, "META"),
                ch.A.prefill(a0, "BIO"),
                ch.A.prefill(a0, "META"),
            ],
        }
    ).set_index("")
)
display(
    Markdown(
        f"Model: `{cfg.model}`"
        + (
            f" (Qwen2, {cfg.layers} layers, hidden {cfg.hidden}, BPE vocabulary"
            f" {cfg.vocab_size}, {cfg.pretrain_steps} pre-training steps on WikiText-2"
            " sentences and chat turns)"
            if cfg.model == "small"
            else ""
        )
        + f"; {cfg.n_authors} authors, head of {cfg.head_len} tokens, LoRA rank"
        f" {cfg.lora_rank}, {cfg.lora_steps} memorisation steps; NPO beta ="
        f" {cfg.beta}, retain weight {cfg.retain_weight}"
        + (" (the paper's NPO)" if cfg.retain_weight == 0 else "")
        + f", K in {cfg.unlearn_steps} at learning rate {cfg.unlearn_lr}; seeds"
        f" {cfg.seeds}."
    )
)
if cfg.n_authors < 60 or cfg.model == "small":
    display(
        Markdown(
            "**Scale.** The paper memorises 60 authors into a 7B model and sweeps K up"
            f" to 1600 NPO steps. This run uses {cfg.n_authors} authors (so every"
            f" interval is a bootstrap over {cfg.n_authors} authors) and a model"
            " pre-trained here in a few CPU minutes. The number of LoRA steps was"
            " chosen by the memorised state alone: enough that K = 0 is at ceiling,"
            " as in the paper (on 60 authors, 750 steps left out acc at 0.68 and"
            " 0.62 on the two seeds; 1500 give out acc, thk leak, QA and retain all"
            " at 1.00). The K"
            " grid and the NPO learning rate are scaled so the sweep runs from"
            " barely touched to fully unlearned within the CPU budget, densely"
            " enough to pass through the paper's audited state (a pilot at a 5x"
            " larger rate erased every probe, trace included, within 10 steps);"
            " none of them was tuned toward a gap, a Delta_AB or a verdict."
        )
    )
    pagekit.show_scale_changes(CH)

# %% [markdown]
# ## The audited state, defined before the run
#
# The paper audits one state of its weights: "After NPO, out acc falls from 1.00 to 0.60 while
# thk leak stays at 0.83" (Section 4.1, at its largest K = 1600). Its prefill and
# teacher-forced numbers are taken there. Our K scale differs, so the audited K is defined by
# that state, as shares of the memorised (K = 0) values, and by nothing else (never by the gap
# or $\Delta_{AB}$):
#
# 1. candidates are the K > 0 of the first seed's sweep whose thk leak is at least 0.8 of its
#    K = 0 value (the paper's 0.83 / 1.00);
# 2. the audited K is the candidate whose out acc is nearest 0.6 of its K = 0 value (the
#    paper's 0.60 / 1.00; ties go to the smaller K);
# 3. the paper's state counts as *reached* when that share lies within the binomial sampling
#    band $1.96\sqrt{0.6 \cdot 0.4 / n}$ of 0.6 ($\pm 0.12$ at $n = 60$ authors, the paper's count).
#
# Both seeds are read at the same K, as the paper reads both of its seeds at K = 1600. When the
# state is not reached, every claim made at the audited K is "not judged". The rule is
# `memlab.experiments.ch03_canary_audit.audit_state`. In the open: an earlier version of this
# chapter took the largest K whose thk leak was still half its K = 0 value; on a coarse grid that
# picked weights whose answer side was fully erased (out acc 0.00), a state the paper never
# audits. This rule replaced it before the run published here.

# %%
display(
    Markdown(
        f"Rule constants: out acc share {ch.AUDIT_OUT_FRAC}, thk leak share >="
        f" {ch.AUDIT_THK_FRAC}, band at {cfg.n_authors} authors"
        f" +-{ch.audit_band(cfg.n_authors):.2f}."
    )
)

# %% [markdown]
# ## The bypass gap over the K sweep
#
# One LoRA adapter per seed memorises every author under the BIO template; NPO then unlearns
# them and all probes run at K = 0 (the memorised adapter) and at every K of the sweep. Our K
# are not the paper's (its model, learning rate and data differ), so the paper's rows stand
# under their own K (100, 400, 800, 1600) below ours: compare states, chiefly the audited one,
# not K values. When a sweep has exactly four K, its rows are labelled by the paper's K.

# %%
bio = {}
for s in cfg.seeds:
    # the first seed also decodes with the closing tag banned, for the
    # parser-convention section
    bio[s] = ch.run_sweep(
        setup,
        cfg,
        "BIO",
        s,
        arms=ch.BIO_ARMS + (("drift",) if s == cfg.seeds[0] else ()),
    )
run.record(**ch.ksweep_metrics(cfg, bio))
frame = ch.ksweep_frame({s: r["summary"] for s, r in bio.items()})
AUDIT = ch.audit_state(bio[cfg.seeds[0]]["summary"], cfg.n_authors)
K_AUDIT = AUDIT["K"]
run.record(audit_k=K_AUDIT, audit=AUDIT)

# %% [markdown]
# **The memorised state.** The audit starts from adapters that hold every author: in the paper
# out acc is 1.00 before unlearning. Table 3.0 gives our K = 0 state per seed (QA: the three
# author questions per author; retain: the 60 generic probes).

# %%
regime = ch.regime_frame(
    {f"BIO, seed {s}": r["summary"] for s, r in bio.items()}, cfg.n_authors
)
run.record(regime=regime.to_dict(orient="index"))
display(
    Markdown(
        f"**Table 3.0.** The memorised adapters at K = 0 ({cfg.lora_steps} LoRA"
        f" steps, {cfg.n_authors} authors) beside the paper's starting point."
    )
)
display(
    paper.side_by_side(
        regime,
        paper.table(CH, "regime"),
        metrics=["out_acc", "thk_leak", "qa_acc", "retain_acc"],
    ).round(2)
)

# %%

def paper_label(k):
    if k == 0:
        return "K=0"
    i = list(cfg.unlearn_steps).index(k)
    return f"K={PAPER_K[i]}" if len(cfg.unlearn_steps) == len(PAPER_K) else f"K={k}"


cols = ["out_acc", "thk_leak", "gap", "gap_low", "gap_high", "delta_ab"]
for s in cfg.seeds:
    ours = (
        frame[frame.seed == s]
        .assign(row=lambda d: d.K.map(paper_label))
        .set_index("row")
    )
    key = f"ksweep_seed{s}"
    display(
        Markdown(
            f"**Table 3.1{'ab'[cfg.seeds.index(s)] if len(cfg.seeds) <= 2 else s}.**"
            f" BIO template, seed {s}: out acc, thk leak, gap with its 95%"
            " author-clustered interval, and Delta_AB. Our K per row: "
            + ", ".join(f"row {row}: our K {k}" for row, k in zip(ours.index, ours.K))
            + "."
        )
    )
    theirs = (
        paper.table(CH, key)
        if key in paper.load(CH)["tables"]
        else pd.DataFrame(columns=cols)
    )
    display(paper.side_by_side(ours[cols], theirs, metrics=cols).round(2))

# %%
fig, axes = plotting.figure("wide", ncols=3)
for s, r in bio.items():
    d = frame[frame.seed == s]
    axes[0].plot(d.K, d.out_acc, "o-", label=f"seed {s}")
    axes[1].plot(d.K, d.thk_leak, "o-", label=f"seed {s}")
    axes[2].errorbar(
        d.K,
        d.gap,
        yerr=[d.gap - d.gap_low, d.gap_high - d.gap],
        fmt="o-",
        capsize=3,
        label=f"seed {s}",
    )
for ax, title in zip(axes, ["out acc", "thk leak", "gap = thk leak - out acc"]):
    ax.set_title(title)
    ax.set_xlabel("NPO steps K")
axes[2].axhline(0, color="grey", lw=0.8)
for ax in axes:
    ax.axvline(K_AUDIT, color="grey", ls=":", lw=1)
axes[0].legend()
_ = plotting.publish(fig, "ksweep", CH)

# %% [markdown]
# ```{glue:figure} 03_canary_audit-ksweep
# :name: fig-03-ksweep
# The parser-split audit over the NPO sweep (BIO template): answer-side canary rate, trace-side
# canary rate and their gap with 95% author-clustered intervals, one line per seed; the dotted
# line is the audited K.
# ```

# %% [markdown]
# **The audited K** follows from the rule above (dotted line in {numref}`fig-03-ksweep`); the
# prefill and teacher-forced tables and the claims use it, with K = 0 and the largest K beside.
# The three claims about the trace itself (the gap is positive, the trace keeps the canary, the gap
# grows) are read instead at the K chosen by out acc alone: at a K picked because the trace stayed
# high, they would hold by construction.

# %%
BY_OUT = AUDIT["by_out"]
thk_out = BY_OUT["thk_ratio"]  # NaN when nothing was memorised at K = 0
thk_words = f"; thk leak {thk_out:.2f} x K0" if np.isfinite(thk_out) else ""
display(
    Markdown(
        f"Audited K for this run: **K = {K_AUDIT}** (largest K: {K_MAX}); the"
        f" paper's state is {'reached' if AUDIT['reached'] else '**not reached**'}:"
        f" {AUDIT['evidence']}. Chosen by out acc alone: K = {BY_OUT['K']}"
        f" ({BY_OUT['evidence']}{thk_words})."
    )
)

# %% [markdown]
# ## Prefill intervention at fixed weights
#
# At the audited K (with K = 0 and the largest K beside it) the weights are frozen and the thinking trace is replaced by a fixed prefill
# built from the training traces' opening sentences (none contains the canary): BIO (the bio
# template's opening and birth sentence), META (the META template's opening) or EMPTY.
# In the prefill arms the trace leak is zero by construction; only out acc is compared.

# %%
# K = 0 rows first: there the prefill arms show what the probe does before any
# unlearning, so Delta_AB at K = 0 is the probe's own offset
prefill_ours, tf_ours = ch.prefill_tables(bio, K_AUDIT, K_MAX, cfg.prefills)
display(
    Markdown(
        "**Table 3.2.** Out acc at fixed weights, autoregressive thinking (AUTO)"
        " against each prefill; Delta_AB = AUTO - BIO prefill with its interval. Rows"
        f" without a K are the audited K = {K_AUDIT} (the paper's rows are its K ="
        " 1600); the K=0 rows are the memorised adapter, before unlearning."
    )
)
display(
    paper.side_by_side(
        prefill_ours,
        paper.table(CH, "prefill"),
        metrics=["AUTO", *cfg.prefills, "Delta_AB"],
    ).round(2)
)
display(prefill_ours[["Delta_AB low", "Delta_AB high"]].round(2))

# %%
fig, ax = plotting.figure("single")
arms = ["AUTO", *cfg.prefills]
width = 0.8 / len(bio)
for i, (s, r) in enumerate(bio.items()):
    sm, s0 = r["summary"][K_AUDIT], r["summary"][0]
    vals = [sm["auto"]["out_acc"]] + [sm["prefill"][m] for m in cfg.prefills]
    base = [s0["auto"]["out_acc"]["mean"]]
    base += [s0["prefill"][m]["mean"] for m in cfg.prefills]
    means = np.array([v["mean"] for v in vals])
    err = np.array(
        [[v["mean"] - v["low"] for v in vals], [v["high"] - v["mean"] for v in vals]]
    )
    x = np.arange(len(arms)) + i * width
    colour = f"C{i}"  # one colour per seed, as in the K-sweep figure
    label = f"seed {s}, K={K_AUDIT}"
    ax.bar(x, means, width, yerr=err, capsize=3, color=colour, label=label)
    # the same arms at K = 0 as outlines: what the probe gives before unlearning
    ax.bar(
        x, base, width, fill=False, edgecolor=colour, ls="--", label=f"seed {s}, K=0"
    )
ax.set_xticks(np.arange(len(arms)) + width * (len(bio) - 1) / 2, arms)
ax.set_ylabel("out acc")
ax.set_ylim(0, 1.05)
ax.legend()
_ = plotting.publish(fig, "prefill", CH)

# %% [markdown]
# ```{glue:figure} 03_canary_audit-prefill
# :name: fig-03-prefill
# Out acc on identical weights (audited K) when the model thinks for itself (AUTO) or its
# thinking is replaced by a canary-free prefill; bars show 95% author-clustered intervals, dashed
# outlines the same arms on the memorised adapter (K = 0).
# ```
#
# ## Teacher-forced canary probe
#
# Teacher forcing removes greedy drift: after the prefill and the six-token head, each true
# canary token is fed in and we count how often it is the model's top-1 prediction.

# %%
display(
    Markdown(
        "**Table 3.3.** Teacher-forced top-1 match of the canary continuation, per"
        f" prefill, at the audited K = {K_AUDIT} (rows without a K), on the memorised"
        " adapter (K=0) and at the largest K."
    )
)
display(
    paper.side_by_side(
        tf_ours, paper.table(CH, "teacher_forced"), metrics=list(cfg.prefills)
    ).round(3)
)
tf_a = bio[cfg.seeds[0]]["summary"][K_AUDIT]["tf"]
tf_0 = bio[cfg.seeds[0]]["summary"][0]["tf"]
low_mode = max(tf_a, key=lambda m: tf_0[m]["mean"] - tf_a[m]["mean"])
display(
    Markdown(
        f"Largest drop from K = 0 to the audited K (seed {cfg.seeds[0]}): {low_mode}"
        f" {tf_0[low_mode]['mean']:.3f} -> {tf_a[low_mode]['mean']:.3f}, against"
        f" the claim's at most {ch.TF_DROP:.2f} (the paper's scores stay within"
        " 0.90-1.00 after NPO on adapters memorised to the ceiling). The drop is"
        " read from our own K = 0 because our EMPTY arm already sits on the"
        " paper's minimum before any unlearning; inside the two intervals'"
        " combined band the claim is not judged."
    )
)

# %% [markdown]
# ## Anatomy of the bypass cases
#
# A bypass case has the canary in the trace but not in the answer. The paper finds (at K=1600)
# that most such answers are only the question prefix (the canary head) with no continuation.
# We count them at every K of the first seed.

# %%
runs0 = bio[cfg.seeds[0]]["raw"]
anat_metrics, anat_frame = ch.anatomy_table(runs0, setup.head_texts)
run.record(**anat_metrics)
display(
    Markdown(
        "**Table 3.4.** Bypass cases of the first seed at every K: their number, the"
        " share whose answer is only the question prefix, and mean answer lengths in"
        " characters (bypass vs canary in both channels)."
    )
)
display(anat_frame.round(2))
display(ch.bypass_examples(runs0, setup.authors))

# %% [markdown]
# ## Retain utility over K
#
# The 60 generic-knowledge probes (capitals, chemical symbols, literature, biology) are never
# in the forget set. A reply counts as correct when it contains the expected key.

# %%
fig, ax = plotting.figure("single")
for s in cfg.seeds:
    d = frame[frame.seed == s]
    ax.plot(d.K, d.retain_acc, "o-", label=f"NPO, seed {s}")
ax.set_xlabel("unlearning steps K")
ax.set_ylabel("retain accuracy")
ax.set_ylim(-0.02, 1.02)
ax.legend()
_ = plotting.publish(fig, "retain", CH)
retain = ch.retain_metrics(
    frame, cfg.seeds[0], K_MAX, bio[cfg.seeds[0]]["raw"][K_MAX], setup.generic
)
run.record(**retain)
r0, rk = retain["retain"]["acc_k0"], retain["retain"]["acc_kmax"]
names = retain["retain"]["fictional_examples"]
display(
    Markdown(
        f"Retain accuracy {r0:.2f} at K=0 and {rk:.2f} at K={K_MAX}: a drop of"
        f" {100 * (r0 - rk):.0f} percentage points (paper, Qwen-7B at K=1600:"
        f" {paper.number(CH, 'retain_drop_pp_k1600')})."
        + (
            ""
            if names
            else " No generic question was answered with a fictional author's name."
        )
    )
)
if names:
    display(pd.DataFrame(names))

# %% [markdown]
# ```{glue:figure} 03_canary_audit-retain
# :name: fig-03-retain
# Generic-knowledge retain accuracy against the number of unlearning steps, NPO, each seed (Gradient
# Ascent's and the retain-term variant's are in their appendix tables).
# ```

# %% [markdown]
# The four sections that follow are appendices: a check of the parser, the paper's Appendix A
# and D comparisons, and a variant of ours; the claims they bear on are judged with the others
# below.

# %% [markdown]
# ## Appendix: parser conventions when the closing tag is missing
#
# On the Llama distillate the paper's model often never closes its trace, and the parser must
# decide where the whole output goes. We score the *same* outputs both ways. At the `smoke` and
# `cpu` profiles the outputs come from decoding the first seed's BIO adapter with `</think>`
# banned, which mimics that format drift, at every K; at the `paper` profile they come from the
# second distillate at the largest K. The claim below is checked at the first K where outputs exist
# after unlearning starts (for the stand-in, the smallest K of the sweep, where the canary is
# still emitted most often). With the tag banned at decode the sign flip holds by construction
# whenever the canary is emitted at all (every output lands in one field or the other), so at
# `smoke` and `cpu` it is a sanity check of the parser code, counted apart from the paper's
# claims; only the `paper` profile's second model tests the paper's observation.

# %%
drift = ch.drift_outputs(cfg, setup, bio[cfg.seeds[0]])
flip_metrics, flip_tables, k_flip = ch.parser_flip_section(
    drift,
    runs0,
    [a.canary for a in setup.authors],
    setup.fmt.think_close,
    cfg.n_boot,
)
run.record(**flip_metrics)
natural_missing = flip_metrics["natural_tag_missing"]  # {"K<k>": share}
display(
    Markdown(
        f"**Table 3.5.** The same outputs ({drift['source']}) under the two"
        f" conventions, at K = {k_flip}, beside the paper's Llama-8B numbers; then"
        " every K. Without suppression our model left the closing tag out of "
        + ", ".join(f"{v:.0%} (K={k[1:]})" for k, v in natural_missing.items())
        + " of its outputs."
    )
)
display(
    paper.side_by_side(
        flip_tables[k_flip], paper.table(CH, "parser_flip"), metrics=["gap"]
    ).round(2)
)
display(pd.concat(flip_tables, names=["K", "convention"]).round(2))

# %% [markdown]
# ## Appendix: training-time templates (paper Appendix A)
#
# Separate adapters memorise the same authors under BIO, META and NONE traces and go through
# the same answer-masked NPO. If the gap were a hidden channel in the weights it should survive
# META and NONE; template echo predicts that it stays with BIO. Only the first seed is run, on
# the coarser grid `side_steps` plus the audited and the largest K (to keep the budget).

# %%
side_cfg = cfg.replace(unlearn_steps=ch.side_grid(cfg, K_AUDIT))
tmpl = {"BIO": bio[cfg.seeds[0]]}
for t in cfg.templates:
    if t != "BIO":
        tmpl[t] = ch.run_sweep(setup, side_cfg, t, cfg.seeds[0], arms=ch.OTHER_ARMS)
run.record(**ch.templates_metrics(tmpl))
template_ours = ch.template_frame(tmpl, setup.fmt.think_close)
display(
    Markdown(
        "**Table 3.6.** Training-time templates, first seed, over K. Paper (Appendix"
        " A): META stays at out acc"
        f" {paper.table(CH, 'templates').loc['META', 'out_acc']:.2f}, thk leak"
        f" {paper.table(CH, 'templates').loc['META', 'thk_leak']:.2f} at K=100; the"
        " NONE adapter still emits non-empty traces on about"
        f" {paper.number(CH, 'none_nonempty_trace_share'):.0%} of probes; the gap"
        " appears only with BIO."
    )
)
display(template_ours.round(2))

# %% [markdown]
# ## Appendix: Gradient Ascent (paper Appendix D)
#
# Plain gradient ascent on the answer span (no retain term), from the same BIO adapter, on the
# same coarser grid as the templates.

# %%
ga = (
    ch.run_sweep(
        setup, side_cfg, "BIO", cfg.seeds[0], method="GA", arms=("auto", "qa", "retain")
    )
    if cfg.run_ga
    else None
)
if ga is not None:
    run.record(ga=ch.jsonable_summary(ga["summary"]))
    ga_frame = ch.ksweep_frame({cfg.seeds[0]: ga["summary"]}).set_index("K")
    display(
        Markdown(
            "**Table 3.7.** Gradient Ascent, BIO adapter, first seed. Paper (Appendix"
            " D): out acc and thk leak are 0.00 on canary and QA probes from"
            f" K={paper.number(CH, 'ga_collapse_from_k')}."
        )
    )
    display(ga_frame[["out_acc", "thk_leak", "gap", "qa_acc", "retain_acc"]].round(2))

# %% [markdown]
# ## Appendix: NPO with a retain term (our variant)
#
# Many NPO implementations add a retain NLL term to the forgetting loss; the paper mentions none,
# and the audit above runs without it. An earlier version of this chapter added one with weight
# 1.0 to every NPO run. The variant below shows what it changes: the same BIO adapter (first seed),
# NPO plus `variant_retain_weight` times the NLL of "complete the sentence" turns on WikiText
# sentences, on the coarser grid. It takes no part in the claims.

# %%
variant = None
if cfg.variant_retain_weight > 0:
    variant = ch.run_sweep(
        setup,
        side_cfg.replace(retain_weight=cfg.variant_retain_weight),
        "BIO",
        cfg.seeds[0],
        arms=("auto", "prefill", "qa", "retain"),
    )
    run.record(npo_retain_variant=ch.jsonable_summary(variant["summary"]))
    _, vtable = ch.variant_table(frame, variant["summary"], cfg.seeds[0])
    display(
        Markdown(
            "**Table 3.8.** NPO with a retain term (weight"
            f" {cfg.variant_retain_weight}) against the paper's NPO (weight"
            f" {cfg.retain_weight}), BIO adapter, seed {cfg.seeds[0]}, at the same K."
        )
    )
    display(vtable.round(2))

# %% [markdown]
# ## Claims
#
# Each claim of the paper is a predicate over the numbers above. "Not judged" means the run
# cannot decide it: the margin to the claim's threshold lies inside the noise band given in the
# evidence, or the sweep never reached the state the claim is about. "Not run at this profile"
# means the run did not produce what the claim needs (e.g. a second seed), or that the profile
# is `smoke`, whose untrained toy models only exercise the code. A sanity check holds by
# construction here and is counted apart from the paper's claims.

# %% tags=["hide-input"]
# judge also glues the verdict counts of the closing section
verdicts = pagekit.judge(ch.claims(), run)

# %% [markdown]
# ### How the regime gates were chosen
#
# Each claim is judged only inside the regime the paper tested it in: a precondition read from
# our run and fixed from the paper's text before any verdict, by one rule. The paper unlearns
# adapters that have memorised every author (out acc 1.00 before NPO, its trace restating the
# bio, and teacher-forced scores at the ceiling), so a memorised state of ours is in its regime
# when it lies within 10 points of that ceiling: out acc, thk leak and teacher-forced top-1 at
# K = 0 of at least 0.9, on the adapters each claim reads (seed 0, both seeds, or the three
# templates). A claim whose gate fails is "outside the paper's regime" and says nothing about the
# paper either way. Whether the sweep reaches the audited state is a question of its K grid, not of
# the model, and stays a "not judged" precondition inside the claims; the parser-convention check
# is a sanity check and has no gate. The table gives each gate, what this run measured, and the
# run that would bring its claims inside with its estimated cost.

# %% tags=["hide-input"]
display(pagekit.regimes_table(CH, verdicts))

# %% [markdown]
# ## What this means
#
# At the profile of this page, of the paper's claims {glue:}`03_canary_audit-n-reproduced`
# reproduced, {glue:}`03_canary_audit-n-not-reproduced` did not,
# {glue:}`03_canary_audit-n-outside-regime` lay outside the paper's regime (the gates above),
# {glue:}`03_canary_audit-n-not-judged` could not be judged and
# {glue:}`03_canary_audit-n-not-run` were not run; {glue:}`03_canary_audit-n-sanity` sanity
# check is counted apart. The summary below is built from this run's verdicts.

# %% tags=["remove-input"]
pagekit.closing_summary(
    verdicts, ch.regime_sentence(AUDIT, bio[cfg.seeds[0]]["summary"][0]), chapter=CH
)

# %% [markdown]
# **What to take from it.** A gap between what the trace and the answer reveal after unlearning is
# not by itself evidence of weight-level memorisation: it moves with the parser convention and the
# prefill, and on a small model the probes differ before any unlearning. Run the paired
# fixed-weight and teacher-forced checks, with their K = 0 baselines, before reading such a gap as
# leakage.

# %% [markdown]
# **Exercises for this chapter:** {ref}`exercises-03-canary-audit` ({doc}`student notebook <../exercises/03_canary_audit>`), autograded with otter-grader; instructors see {doc}`../instructor`.
