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
# `memlab.canaries`, data in `memlab.data.authors`, the pipeline in
# `memlab.experiments.ch03_canary_audit`. Intervals are 95% percentile bootstraps over authors.

# %% tags=["parameters"]
profile: str = "cpu"  # smoke | cpu | paper
params: dict = {}  # overrides, e.g. {"epochs": 2}; every name: `memlab list` (SPEC)

# %% tags=["hide-input"]
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from memlab import canaries, config, paper, plotting, results
from memlab.experiments import ch03_canary_audit as ch

CH = ch.CHAPTER  # the chapter id is declared once, in the chapter module
cfg = config.resolve(CH, profile=profile, **params)
run = results.Run(cfg)
run.provenance_box()
K_MAX = max(cfg.unlearn_steps)
PAPER_K = [100, 400, 800, 1600]

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
        f" {cfg.beta}, retain weight {cfg.retain_weight}, K in {cfg.unlearn_steps} at"
        f" learning rate {cfg.unlearn_lr}; seeds {cfg.seeds}."
    )
)
if cfg.n_authors < 60 or cfg.model == "small":
    display(
        Markdown(
            "**Scale.** The paper memorises 60 authors into a 7B model and sweeps K up"
            f" to 1600 NPO steps. This run uses {cfg.n_authors} authors (so every"
            f" interval is a bootstrap over {cfg.n_authors} authors) and a model"
            " pre-trained here in a few CPU minutes. The K sweep and the NPO learning"
            " rate are scaled so the sweep runs from barely touched to strongly"
            " unlearned within the CPU budget (a pilot at a 5x larger rate erased"
            " every probe, trace included, within 10 steps); they were not tuned"
            " toward any paper number."
        )
    )

# %% [markdown]
# ## The bypass gap over the K sweep
#
# One LoRA adapter per seed memorises every author under the BIO template; NPO then unlearns
# them and all probes run at K = 0 (the memorised adapter) and at every K of the sweep. The
# sweep is scaled by profile, so our rows are matched to the paper's by position: our i-th K
# stands beside the paper's i-th K (100, 400, 800, 1600).

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
run.record(
    k_values=[0] + list(cfg.unlearn_steps),
    ksweep={f"s{s}": ch.jsonable_summary(r["summary"]) for s, r in bio.items()},
)
frame = ch.ksweep_frame({s: r["summary"] for s, r in bio.items()})
K_AUDIT = ch.audit_k(bio[cfg.seeds[0]]["summary"])
run.record(audit_k=K_AUDIT)


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
            " author-clustered interval, and Delta_AB. Our K per row:"
            f" {dict(zip(ours.index, ours.K))}."
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
axes[0].legend()
_ = plotting.publish(fig, "ksweep", CH)

# %% [markdown]
# ```{glue:figure} 03_canary_audit-ksweep
# :name: fig-03-ksweep
# The parser-split audit over the NPO sweep (BIO template): answer-side canary rate, trace-side
# canary rate and their gap with 95% author-clustered intervals, one line per seed.
# ```

# %% [markdown]
# **Which K is audited.** The paper audits weights whose answer side is unlearned while the trace
# still carries the canary (thk leak 0.83 at its largest K). Our scaled sweep can overshoot into
# weights where every probe, trace included, is erased. The prefill and teacher-forced tables and
# the claims therefore use the *audited K*: the largest K at which the first seed's thk leak is
# still at least half its K = 0 value (the rule is `memlab.experiments.ch03_canary_audit.audit_k`; it
# looks only at the trace, never at the gap). The largest K is shown beside it. In the open: this
# rule was added after a first `cpu` run in which the largest K (100) had erased every probe, so
# that every claim about an "unlearned answer with an intact trace" was vacuously not reproduced
# there; at the largest K the claims below would still fail for that reason.

# %%
display(Markdown(f"Audited K for this run: **K = {K_AUDIT}** (largest K: {K_MAX})."))

# %% [markdown]
# ## Prefill intervention at fixed weights
#
# At the audited K (and at the largest K) the weights are frozen and the thinking trace is replaced by a fixed prefill
# built from the training traces' opening sentences (none contains the canary): BIO (the bio
# template's opening and birth sentence), META (the META template's opening) or EMPTY.
# In the prefill arms the trace leak is zero by construction; only out acc is compared.

# %%
rows, tf_rows = {}, {}
for s, r in bio.items():
    for k, tag in ((K_AUDIT, ""), (0, ", K=0"), (K_MAX, f", K={K_MAX}")):
        if tag and k == K_AUDIT:
            continue
        sm = r["summary"][k]
        rows[f"seed {s}{tag}"] = {
            "AUTO": sm["auto"]["out_acc"]["mean"],
            **{m: sm["prefill"][m]["mean"] for m in cfg.prefills},
            "Delta_AB": sm["prefill"]["BIO"]["auto_minus"]["mean"],
            "Delta_AB low": sm["prefill"]["BIO"]["auto_minus"]["low"],
            "Delta_AB high": sm["prefill"]["BIO"]["auto_minus"]["high"],
        }
        tf_rows[f"seed {s}{tag}"] = {m: sm["tf"][m]["mean"] for m in cfg.prefills}
prefill_ours = pd.DataFrame.from_dict(rows, orient="index")
display(
    Markdown(
        "**Table 3.2.** Out acc at fixed weights, autoregressive thinking (AUTO)"
        " against each prefill; Delta_AB = AUTO - BIO prefill with its interval. Rows"
        f" without a K are the audited K = {K_AUDIT} (the paper's rows are its K ="
        " 1600)."
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
    sm = r["summary"][K_AUDIT]
    vals = [sm["auto"]["out_acc"]] + [sm["prefill"][m] for m in cfg.prefills]
    means = np.array([v["mean"] for v in vals])
    err = np.array(
        [[v["mean"] - v["low"] for v in vals], [v["high"] - v["mean"] for v in vals]]
    )
    ax.bar(
        np.arange(len(arms)) + i * width,
        means,
        width,
        yerr=err,
        capsize=3,
        label=f"seed {s}",
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
# thinking is replaced by a canary-free prefill; bars show 95% author-clustered intervals.
# ```
#
# ## Teacher-forced canary probe
#
# Teacher forcing removes greedy drift: after the prefill and the six-token head, each true
# canary token is fed in and we count how often it is the model's top-1 prediction.

# %%
tf_ours = pd.DataFrame.from_dict(tf_rows, orient="index")
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

# %% [markdown]
# ## Anatomy of the bypass cases
#
# A bypass case has the canary in the trace but not in the answer. The paper finds (at K=1600)
# that most such answers are only the question prefix (the canary head) with no continuation.
# We count them at every K of the first seed.

# %%
runs0 = bio[cfg.seeds[0]]["raw"]
anat = {
    k: canaries.anatomy(
        r["auto"]["answers"], setup.head_texts, r["auto"]["out"], r["auto"]["thk"]
    )
    for k, r in runs0.items()
}
run.record(anatomy={f"K{k}": v for k, v in anat.items()})
anat_frame = pd.DataFrame.from_dict(anat, orient="index")
anat_frame.loc["paper (K=1600)"] = {
    "n_bypass": paper.number(CH, "bypass_count"),
    "n_both": np.nan,
    "share_prefix_only": paper.number(CH, "bypass_prefix_only_share"),
    "len_bypass": paper.number(CH, "len_bypass_chars"),
    "len_both": paper.number(CH, "len_both_chars"),
}
anat_frame.index.name = "K"
display(
    Markdown(
        "**Table 3.4.** Bypass cases of the first seed at every K: their number, the"
        " share whose answer is only the question prefix, and mean answer lengths in"
        " characters (bypass vs canary in both channels)."
    )
)
display(
    anat_frame.rename(
        columns={
            "n_bypass": "bypass cases",
            "n_both": "both channels",
            "share_prefix_only": "share: answer = question prefix",
            "len_bypass": "answer length, bypass",
            "len_both": "answer length, both",
        }
    ).round(2)
)
examples = [
    (k, setup.authors[i].name, r["auto"]["answers"][i].strip())
    for k, r in runs0.items()
    for i in range(len(r["auto"]["out"]))
    if r["auto"]["thk"][i] and not r["auto"]["out"][i]
][:4]
display(pd.DataFrame(examples, columns=["K", "author", "answer after </think>"]))

# %% [markdown]
# ## Parser conventions when the closing tag is missing
#
# On the Llama distillate the paper's model often never closes its trace, and the parser must
# decide where the whole output goes. We score the *same* outputs both ways. At the `smoke` and
# `cpu` profiles the outputs come from decoding the first seed's BIO adapter with `</think>`
# banned, which mimics that format drift, at every K; at the `paper` profile they come from the
# second distillate at the largest K. The claim below is checked at the first K where outputs exist
# after unlearning starts (for the stand-in, the smallest K of the sweep, where the canary is
# still emitted most often).

# %%
drift = ch.drift_outputs(cfg, setup, bio[cfg.seeds[0]])
canary_texts = [a.canary for a in setup.authors]
flip_tables, flips = {}, {}
for k, texts in sorted(drift["texts"].items()):
    flip_tables[k], flips[k] = ch.parser_flip_table(
        texts, canary_texts, setup.fmt.think_close, cfg.n_boot
    )
k_flip = min((k for k in flips if k > 0), default=min(flips))
natural_missing = {
    k: float(np.mean(r["auto"]["tag_missing"])) for k, r in runs0.items()
}
run.record(
    parser_flip={**flips[k_flip], "source": drift["source"], "K": k_flip},
    parser_flip_by_k={f"K{k}": f for k, f in flips.items()},
    natural_tag_missing={f"K{k}": v for k, v in natural_missing.items()},
)
display(
    Markdown(
        f"**Table 3.5.** The same outputs ({drift['source']}) under the two"
        f" conventions, at K = {k_flip}, beside the paper's Llama-8B numbers; then"
        " every K. Without suppression our model left the closing tag out of "
        + ", ".join(f"{v:.0%} (K={k})" for k, v in natural_missing.items())
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
# ## Training-time template comparison
#
# Separate adapters memorise the same authors under BIO, META and NONE traces and go through
# the same answer-masked NPO. If the gap were a hidden channel in the weights it should survive
# META and NONE; template echo predicts that it stays with BIO. Only the first seed is run.

# %%
tmpl = {"BIO": bio[cfg.seeds[0]]}
for t in cfg.templates:
    if t != "BIO":
        tmpl[t] = ch.run_sweep(setup, cfg, t, cfg.seeds[0], arms=ch.OTHER_ARMS)
run.record(templates={t: ch.jsonable_summary(r["summary"]) for t, r in tmpl.items()})
trows = {}
for t, r in tmpl.items():
    for k in r["summary"]:
        a = r["summary"][k]["auto"]
        texts = r["raw"][k]["auto"]["texts"]
        nonempty = np.mean(
            [
                bool(canaries.split_trace(x, setup.fmt.think_close)[0].strip())
                for x in texts
            ]
        )
        trows[(t, k)] = {
            "out_acc": a["out_acc"]["mean"],
            "thk_leak": a["thk_leak"]["mean"],
            "gap": a["gap"]["mean"],
            "gap_low": a["gap"]["low"],
            "gap_high": a["gap"]["high"],
            "non-empty trace": nonempty,
        }
template_ours = pd.DataFrame.from_dict(trows, orient="index")
template_ours.index.names = ["template", "K"]
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
# ## Gradient Ascent
#
# Plain gradient ascent on the answer span (no retain term), from the same BIO adapter.

# %%
ga = (
    ch.run_sweep(
        setup, cfg, "BIO", cfg.seeds[0], method="GA", arms=("auto", "qa", "retain")
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
# ## Retain utility over K
#
# The 60 generic-knowledge probes (capitals, chemical symbols, literature, biology) are never
# in the forget set. A reply counts as correct when it contains the expected key.

# %%
fig, ax = plotting.figure("single")
for s in cfg.seeds:
    d = frame[frame.seed == s]
    ax.plot(d.K, d.retain_acc, "o-", label=f"NPO, seed {s}")
if ga is not None:
    ax.plot(ga_frame.index, ga_frame.retain_acc, "s--", label="GA")
ax.set_xlabel("unlearning steps K")
ax.set_ylabel("retain accuracy")
ax.set_ylim(-0.02, 1.02)
ax.legend()
_ = plotting.publish(fig, "retain", CH)
r0 = frame[(frame.seed == cfg.seeds[0]) & (frame.K == 0)].retain_acc.item()
rk = frame[(frame.seed == cfg.seeds[0]) & (frame.K == K_MAX)].retain_acc.item()
names = ch.retain_examples_with_names(bio[cfg.seeds[0]]["raw"][K_MAX], setup.generic)
run.record(
    retain={
        "acc_k0": r0,
        "acc_kmax": rk,
        "drop_pp": 100 * (r0 - rk),
        "fictional_examples": names,
    }
)
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
# Generic-knowledge retain accuracy against the number of unlearning steps, for NPO (each seed)
# and Gradient Ascent.
# ```
#
# ## Claims
#
# Each claim of the paper is a predicate over the numbers above; "not run at this profile"
# means the run did not produce what the claim needs (e.g. a second seed), or that the profile
# is `smoke`, whose untrained toy models only exercise the code.

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
# At the profile of this page, {glue:}`03_canary_audit-n-reproduced` reproduced,
# {glue:}`03_canary_audit-n-not-reproduced` did not and {glue:}`03_canary_audit-n-not-run` were not run. The reading below is of the `cpu` run that
# this book publishes.
#
# **What held.** Nearly all of the paper's audit: after answer-masked NPO the canary disappears from the
# answer while the thinking trace keeps emitting it, and this parser-split gap grows with the number of
# unlearning steps ({numref}`fig-03-ksweep`). Yet at fixed weights, swapping the trace for another
# prefill moves the answer ({numref}`fig-03-prefill`), the two parser conventions give gaps of opposite
# sign on the same outputs, and the gap is confined to one template. NPO costs generic retain accuracy
# ({numref}`fig-03-retain`) and Gradient Ascent collapses both sides.
#
# **What did not.** Under two of the prefills our small model's teacher-forced match of the canary dips
# just under the 0.9 floor; at this scale the memorised continuation depends a little more on the prefill
# format than in the paper's models. And the prefill effect does not change direction between our two
# seeds: $\Delta_{AB}$ has the same sign at both, though one of them lies within one author (of 30) of
# zero, so this verdict sits inside the audit's sampling noise.
#
# **What to take from it.** A gap between what the trace and the answer reveal after unlearning is not
# by itself evidence of weight-level memorisation: it moves with the parser convention and the prefill.
# Run the paired fixed-weight and teacher-forced checks before reading such a gap as leakage.
