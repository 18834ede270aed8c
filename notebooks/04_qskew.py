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
# # Q-Skew membership inference on diffusion language models
#
# Masked diffusion language models such as LLaDA {cite}`nie2025llada` and Dream {cite}`ye2025dream`
# are trained to fill in randomly masked tokens. The paper {cite}`qskew` argues that this makes
# fine-tuning memorise a sequence *unevenly*: a token is trained only when it happens to be masked,
# and the gain is largest when it was masked at a low mask ratio (little else hidden). Summed over
# epochs, a member's per-token gains form a zero-inflated mixture with a long right tail, while a
# non-member's per-token differences stay roughly symmetric. The attack, **Q-Skew**, measures exactly
# that: the skewness of the per-token loss differences between a reference model and the fine-tuned
# target, with a quantile weighting that makes it robust to outliers.
#
# This chapter re-runs the paper's experiments on a small masked diffusion LM that we pre-train
# on WikiText-2 {cite}`merity2016wikitext` ourselves (profiles `smoke` and `cpu`); the `paper`
# profile points the same code at LLaDA-8B / Dream-7B through `transformers`. We compare Q-Skew with
# Loss, Min-K% {cite}`shi2024mink`, Min-K%++ {cite}`zhang2025minkpp`, reference calibration,
# SecMI adapted to masking {cite}`duan2023secmi` and SAMA {cite}`qskew_chen2026sama`, all computed from one masked-likelihood
# interface, and we try the paper's PII reconstruction attack (in the spirit of
# {cite}`carlini2021extracting`).

# %% tags=["parameters"]
profile: str = "cpu"  # smoke | cpu | paper
params: dict = {}  # overrides, e.g. {"epochs": 2}; every name: `memlab list` (SPEC)

# %% tags=["hide-input"]
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from memlab import config, mia, paper, plotting, results
from memlab.experiments import ch04_qskew as ch

CH = ch.CHAPTER  # the chapter id is declared once, in the chapter module
cfg = config.resolve(CH, profile=profile, **params)
run = results.Run(cfg)
run.provenance_box()
pd.set_option("display.precision", 1)

# %% [markdown]
# ## Setup: the model, the data and the one likelihood interface
#
# **Model.** At `smoke`/`cpu` the base model is a small bidirectional transformer with a mask
# token (`memlab.models.diffusion_lm.MaskedDiffusionLM`), pre-trained with the LLaDA objective on the
# WikiText-2 *test* split: a ratio $t \sim U(0,1)$ is drawn per sequence, every token is masked with
# probability $t$, and the cross-entropy on masked tokens is weighted by $1/t$. An "instruct"
# variant is the base trained further on instruction pairs from the same test split. Both are cached.
#
# **Members and non-members** come from the WikiText-2 *validation* split, drawn at random from the
# same pool in every run, so they share one distribution:
#
# * *domain fine-tuning*: fixed-length blocks of consecutive tokens; the base model is fine-tuned on the
#   members (AdamW, `epochs` epochs, batch 16);
# * *instruction fine-tuning*: variable-length pairs built from consecutive sentences of one paragraph,
#   prompt = `Instruction : continue the article . Input : <sentence i> Response :`, response =
#   sentence $i+1$, padded to a fixed length. The instruct variant is fine-tuned on the member pairs,
#   and prompt tokens are never masked, in training or when scoring.
#
# **One interface.** Every score below calls `masked_nll(model, ids, masks)`: per-token negative
# log-probabilities of the original tokens at the masked positions of given mask patterns, batched.
# The patterns are drawn once per sequence and shared by the target and the reference.
# All patterns of all sequences go through the model in a few large batches, and only the masked
# rows pass through the last block and the vocabulary head (the other rows' outputs are never
# scored). `benchmarks/bench_qskew.py` times this against one mask pattern per forward on the same
# sequences and checks that the scores agree; `benchmarks/README.md` gives the measured speed-ups.

# %%
setup = ch.prepare(cfg)
run.record(setup=setup.info)
display(pd.Series(setup.info, name="value").to_frame())

# %% [markdown]
# ## The Q-Skew score
#
# For a sequence $x$ of $L$ tokens, **cyclic sampling** runs $R$ rounds; each round permutes the
# positions and cuts them into $C=\mathrm{round}(1/\rho)$ disjoint batches of about $\rho L$ tokens
# ($\rho=0.35$), so every token is masked exactly once per round. For each batch $M$ and each masked
# token $i \in M$,
#
# $$\Delta_{i,M} = -\log p_{\mathrm{ref}}(x_i \mid x_{M^c}) + \log p_{\mathrm{target}}(x_i \mid x_{M^c}).$$
#
# With $\hat F$ the empirical CDF of the $n = R L$ values, $m$ their median and $s$ their standard
# deviation, the score we implement (`memlab.mia.qskew`) is
#
# $$W_i = e^{-(\hat F(\Delta_i)-0.15)^2/2h^2} + e^{-(\hat F(\Delta_i)-0.85)^2/2h^2},\qquad
# \mathrm{QSkew}(x) = \frac{1}{n}\sum_i \frac{W_i}{\bar W}\,\frac{3(\Delta_i - m)}{s},$$
#
# Pearson's median skewness $3(\mathrm{mean}-\mathrm{median})/s$ whose mean is a weighted mean
# concentrated at the 15th and 85th percentiles ($h=0.1$), normalised by the mean weight $\bar W$.
# It is invariant to shifting and to positive scaling of $\Delta$, zero on a sample that is
# symmetric about its median, and positive for a long right tail:

# %%
rng = np.random.default_rng(0)
demo = {
    "right-skewed (exponential)": rng.exponential(1, 2000),
    "symmetric (normal)": rng.normal(0, 1, 2000),
    "left-skewed": -rng.exponential(1, 2000),
}
display(
    pd.DataFrame(
        {
            "Q-Skew": {k: mia.qskew(v) for k, v in demo.items()},
            "mean": {k: v.mean() for k, v in demo.items()},
        }
    ).round(3)
)

# %% [markdown]
# **Baselines on the same interface.** *Loss* {cite}`qskew_yeom2018privacy`: minus the target's mean
# masked NLL over the cyclic masks. *Min-K%* ($k=20\%$): minus the mean NLL of the 20% worst-predicted positions. *Min-K%++*:
# the mean of the 20% lowest $z_i=(\log p(x_i)-\mu_i)/\sigma_i$, with $\mu_i,\sigma_i$ the mean and
# standard deviation of $\log p$ under the predicted distribution ($\sigma$ floored, at least one
# token kept). *Calibration* {cite}`qskew_watson2022calibration`: mean reference NLL minus mean target NLL. *SecMI*: minus the target's
# masked NLL at fixed ratios 0.2/0.4/0.6/0.8 with deterministic, nested masks (the discrete analogue
# of SecMI's deterministic forward process). *SAMA* {cite}`qskew_chen2026sama`: over growing nested masks (5% to 50%), the share
# of random 8-token subsets whose summed reference NLL exceeds the summed target NLL, steps weighted
# $1/s$. Metrics: AUC and TPR at 10% and 1% FPR from scikit-learn's ROC, mean over runs.

# %% [markdown]
# ## Domain fine-tuning (Table 1)

# %%
dft = ch.domain_experiment(setup)
ours_dft = ch.table1(dft)
run.record(domain=ours_dft.to_dict(orient="index"))
paper_dft = paper.table(CH, "table1_wikitext")
paper.side_by_side(ours_dft, paper_dft, ch.METRICS)

# %% [markdown]
# Paper: LLaDA-8B-Base fine-tuned on WikiText (Table 1; only the Q-Skew and SAMA entries are in our
# summary of the paper). Ours: the small DLM fine-tuned on WikiText-2 blocks, mean over runs, in %.
# Where the paper reports no number the cell shows –.

# %% [markdown]
# ### Why skewness: the distribution of $\Delta$

# %%
if dft.examples is not None and dft.examples["qskew"] is not None:
    ex = dft.examples
    from scipy.stats import skew as _skew

    pairs = list(zip(ex["deltas"], ex["labels"]))
    pooled = {lab: np.concatenate([d for d, y in pairs if y == lab]) for lab in (1, 0)}
    # Left: pooled Delta of members vs non-members; right: Q-Skew score histograms.
    fig, (a, b) = plotting.figure("wide", ncols=2)
    lo, hi = np.percentile(np.r_[pooled[1], pooled[0]], [0.5, 99.5])
    bins = np.linspace(lo, hi, 60)
    a.hist(pooled[0], bins, density=True, alpha=0.6, label="non-members")
    a.hist(pooled[1], bins, density=True, alpha=0.6, label="members")
    a.set_xlabel(r"$\Delta$ = NLL$_{ref}$ - NLL$_{target}$ per masked token (nats)")
    a.set_ylabel("density")
    a.legend()
    q, lab = ex["qskew"], ex["labels"]
    bins = np.linspace(q.min(), q.max(), 25)
    b.hist(q[lab == 0], bins, alpha=0.6, label="non-members")
    b.hist(q[lab == 1], bins, alpha=0.6, label="members")
    b.set_xlabel("Q-Skew score per sequence")
    b.legend()
    _ = plotting.publish(fig, "deltas", CH)
    delta_stats = pd.DataFrame(
        {
            name: {
                "mean": v.mean(),
                "median": np.median(v),
                "skewness": _skew(v),
                "Q-Skew (pooled)": mia.qskew(v),
            }
            for name, v in (("members", pooled[1]), ("non-members", pooled[0]))
        }
    ).T
    run.record(delta_stats=delta_stats.to_dict(orient="index"))
    display(delta_stats.round(3))
    m_, n_ = delta_stats.loc["members"], delta_stats.loc["non-members"]
    predicted = (
        m_["Q-Skew (pooled)"] > 0 and m_["Q-Skew (pooled)"] > n_["Q-Skew (pooled)"]
    )
    display(
        Markdown(
            f"In this run the members' $\\Delta$ have mean {m_['mean']:.3f} nats"
            f" against {n_['mean']:.3f} for non-members, and pooled Q-Skew"
            f" {m_['Q-Skew (pooled)']:.2f} against {n_['Q-Skew (pooled)']:.2f}. "
            + (
                "As the paper predicts, the members' differences are right-skewed and"
                " more so than the non-members'."
                if predicted
                else (
                    "The paper predicts a right-skewed member distribution (pooled"
                    " Q-Skew above zero and above the non-members'); here fine-tuning"
                    " mainly *shifts* the members' differences instead. A location"
                    " statistic such as Calibration picks the shift up; Q-Skew,"
                    " invariant to shifts by design, does not."
                )
            )
        )
    )

# %% [markdown]
# ```{glue:figure} 04_qskew-deltas
# :name: fig-04-deltas
# Left: per-token differences $\Delta$ = reference NLL minus target NLL, pooled over the members and
# over the non-members of run 0 (domain fine-tuning). Right: the Q-Skew score of each sequence.
# ```

# %% [markdown]
# ## Instruction fine-tuning (Table 2)

# %%
ift = ch.instruction_experiment(setup)
ours_ift = ch.table2(ift)
run.record(instruction=ours_ift.to_dict(orient="index"))
paper.side_by_side(ours_ift, paper.table(CH, "table2_alpaca"), ch.METRICS)

# %% [markdown]
# Paper: LLaDA-8B-Instruct fine-tuned on Alpaca (Table 2, the general-purpose instruction set
# closest to our WikiText continuation pairs). For reference, the paper's Q-Skew AUC on MedQA and
# Tulu-3 is 72.8 and 67.2, and Table 3 reports the weaker Dream models:

# %%
display(paper.table(CH, "table3_dream"))

# %% [markdown]
# ## Attack strength against fine-tuning epochs (Figure 2)

# %%
sweep = ch.figure2_table(dft)
fig, ax = plotting.figure("single")
for label, row in sweep.iterrows():
    width = 2.2 if label == "Q-Skew" else 1.2
    ax.plot(sweep.columns, row.to_numpy(), marker="o", lw=width, label=label)
ax.axhline(50, color="grey", lw=0.8, ls="--")
ax.set_xticks(list(sweep.columns))
ax.set_xlabel("fine-tuning epochs")
ax.set_ylabel("AUC (%)")
ax.legend(ncol=2)
_ = plotting.publish(fig, "epochs", CH)
run.record(epochs_sweep_auc={str(e): sweep[e].to_dict() for e in sweep.columns})
sweep

# %% [markdown]
# ```{glue:figure} 04_qskew-epochs
# :name: fig-04-epochs
# AUC (%) of every score against the number of fine-tuning epochs (domain fine-tuning, snapshots of
# one run per seed, mean over runs). The paper's Figure 2 shows Q-Skew above the baselines at every
# epoch; its point values are not in our summary of the paper.
# ```

# %% [markdown]
# ## Mismatched reference models (Table 4)
#
# *Other-variant reference*: the instruct model as the reference of the domain-tuned base, and the
# base as the reference of the instruction-tuned instruct model. *Para-modification reference*: the
# golden reference fine-tuned, with the same recipe, on *other* data (held-out blocks or pairs) in
# which 20% of the tokens were replaced at random.

# %%
t4 = ch.table4(dft, ift, cfg.scores)
for side, ours in t4.items():
    label, key = ch.TABLE4_SIDES[side]
    run.record(**{f"table4_{side}": ours.to_dict(orient="index")})
    display(Markdown(f"**{label}** (paper: {paper.source(CH, key)})"))
    display(paper.side_by_side(ours, paper.table(CH, key), ch.METRICS))

# %% [markdown]
# ## Ablation (Table 5)
#
# *w/o cyclic sampling*: the same number of masks, each token masked independently with probability
# $\rho$. *Mean instead of skewness*: the quantile-weighted mean of $\Delta$. *w/o quantile
# weighting*: plain $3(\mathrm{mean}-\mathrm{median})/s$.

# %%
ours_abl = ch.table5(dft)
if ours_abl is not None:
    run.record(ablation=ours_abl.to_dict(orient="index"))
    display(paper.side_by_side(ours_abl, paper.table(CH, "table5"), ch.METRICS))

# %% [markdown]
# ## Token-level asymmetry (Figure 1)
#
# The method rests on one assumption (the paper's Assumption 3.1): when a token is masked and
# trained, its gain is larger the lower the mask ratio. We fine-tune the base on the members at a
# *fixed* mask ratio (0.25, 0.5, 0.75) and measure every member token's gain, base NLL minus
# fine-tuned NLL, under one shared round of cyclic masks. Two readings are shown: the total gain after
# training (what the paper's Figure 1 plots) and the gain per step in which the token was masked
# (total divided by ratio times epochs, since a higher ratio trains each token more often).

# %%
asym = ch.asymmetry_experiment(setup)
# Violin plot of per-token gains by fine-tuning mask ratio (Figure 1 analogue).
fig, ax = plotting.figure("single")
ratios = list(asym["gains"])
ax.violinplot([asym["gains"][r] for r in ratios], showmedians=True)
ax.set_xticks(range(1, len(ratios) + 1), [f"{r:g}" for r in ratios])
ax.axhline(0, color="grey", lw=0.8)
ax.set_xlabel("fine-tuning mask ratio")
ax.set_ylabel("per-token gain NLL$_{base}$ - NLL$_{ft}$ (nats)")
_ = plotting.publish(fig, "asymmetry", CH)
run.record(asymmetry=asym["table"].to_dict(orient="index"))
asym["table"].set_axis([f"{r:g}" for r in asym["table"].index]).round(3)

# %% [markdown]
# ```{glue:figure} 04_qskew-asymmetry
# :name: fig-04-asymmetry
# Per-token memorisation gain (nats) of member tokens after fine-tuning at a fixed mask ratio
# (paper: LLaDA on XSUM, four epochs; ours: the small DLM on WikiText-2 blocks).
# ```

# %% [markdown]
# ## PII reconstruction (Table 6)
#
# Records are synthetic (`memlab.data.pii`): a fictional name and topic followed by an e-mail address
# or a phone number, e.g. `Maria Lopez of the harbour survey , email : maria.lopez41@inbox.net`,
# padded with an end-of-text token. The base model is fine-tuned on all target records. For each
# record, 20 mask tokens replace the PII (and the padding after it), $N$ candidates come from
# independent denoising runs (LLaDA's low-confidence remasking, temperature 1), and the unique
# candidates are ranked by cross-entropy (target model, random 35% masks; lower is better), by Q-Skew
# with cyclic masks over the PII tokens only, by Q-Skew over the context tokens of a 20-token span
# only, and by $-(1-\alpha)Z(\mathrm{CE}) + \alpha Z(\mathrm{QSkew})$ with $\alpha=0.1$. Success means
# the top candidate equals the true string; the last row shows how often it was among the candidates.

# %%
pii = ch.pii_experiment(setup)
run.record(
    pii={
        "hits": pii["hits"],
        "oracle": pii["oracle"],
        "targets_per_kind": pii["n"],
        "memorisation": pii["memorisation"].to_dict(orient="index"),
    }
)
ours_pii = pii["table"][["Phone ASR", "Email ASR"]].astype(float)
display(paper.side_by_side(ours_pii, paper.table(CH, "table6")))
display(pii["examples"])
display(
    Markdown(
        "Mean NLL (nats per token) of the true PII with the whole PII masked, before"
        " and after fine-tuning on the records:"
    )
)
display(pii["memorisation"].round(2))

# %% [markdown]
# ## Claims

# %% tags=["hide-input"]
# The claim predicates live in the library (`memlab.experiments.ch04_qskew.claims`)
# so they are unit-tested.
verdicts = paper.evaluate(
    ch.claims(), run.metrics, cfg.profile, reasons=paper.reasons(cfg.chapter)
)
if (
    cfg.profile == "smoke"
):  # still run every predicate, so the smoke test catches a broken one
    paper.evaluate(ch.claims(), run.metrics, "cpu")
display(paper.claims_table(verdicts))
_ = run.save(claims=verdicts)

# %%
tally = paper.tally(verdicts)
if "qskew" in cfg.scores and len(cfg.scores) > 1:
    q_d, (b_d, a_d) = run.metrics["domain"]["Q-Skew"]["AUC"], ch.best_baseline(
        run.metrics, "domain"
    )
    q_i, (b_i, a_i) = run.metrics["instruction"]["Q-Skew"]["AUC"], ch.best_baseline(
        run.metrics, "instruction"
    )
    display(
        Markdown(
            f"**Summary of this run (profile `{cfg.profile}`).** Q-Skew reaches an AUC"
            f" of {q_d:.1f}% after domain fine-tuning (best baseline: {b_d},"
            f" {a_d:.1f}%) and {q_i:.1f}% after instruction fine-tuning (best baseline:"
            f" {b_i}, {a_i:.1f}%); the paper reports 80.3% (WikiText) and 81.4%"
            " (Alpaca) on LLaDA-8B. "
            + ", ".join(f"{n} claims {v}" for v, n in tally.items() if n)
            + "."
        )
    )

# %% [markdown]
# The verdicts are computed from this run's numbers. The rendered book shows the `cpu` profile: a
# transformer of well under a million parameters, pre-trained for a few hundred steps and fine-tuned on
# a few dozen WikiText-2 blocks, not the paper's 8B models. A "not reproduced" here says that the
# effect does not show at this scale; it is not a refutation of the paper, and the `paper` profile runs
# the same code on LLaDA.

# %% tags=["remove-input"]
from myst_nb import glue

for _verdict, _n in paper.tally(verdicts).items():  # counts for the closing section
    _slug = _verdict.split(" at ")[0].replace(" ", "-")  # e.g. "not-run"
    glue(f"{cfg.chapter}-n-{_slug}", _n, display=False)

# %% [markdown]
# ## What this means
#
# At the profile of this page, {glue:}`04_qskew-n-reproduced` reproduced, {glue:}`04_qskew-n-not-reproduced` did
# not and {glue:}`04_qskew-n-not-run` were not run. The reading below is of the `cpu` run that
# this book publishes.
#
# **What held.** The mechanism's first step: a masked token gains more per training step at a lower mask
# ratio ({numref}`fig-04-asymmetry`).
#
# **What did not.** Almost everything built on it. On our tiny diffusion LM, Q-Skew stays near chance
# while a loss-calibration baseline separates members well, under domain and instruction fine-tuning
# alike and at every epoch count ({numref}`fig-04-epochs`); members' per-token differences are at most
# barely more right-skewed than non-members' ({numref}`fig-04-deltas`; the claims table gives the pooled
# values, which sit close to zero on both sides); replacing skewness by the mean helps; and no score
# recovers any PII. The reasons in the table agree: the token-level skew the method reads does not form in a model of
# well under a million parameters fine-tuned on a few dozen blocks.
#
# **What to take from it.** At this scale the chapter tests that the code runs the paper's pipeline, not
# the paper's claim; it is no refutation. On tiny models a plain calibrated loss is a strong membership
# signal. The fair test is the `paper` profile on LLaDA, which runs the same code.
