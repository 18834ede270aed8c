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
# ```{glue:md} 04_qskew-findings
# :format: myst
# ```

# %% [markdown]
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
# the loss at deterministic masks, SecMI's t-error carried over to masking {cite}`duan2023secmi` and
# SAMA {cite}`qskew_chen2026sama`, all computed from one masked-likelihood interface, and we try the
# paper's PII reconstruction attack (in the spirit of {cite}`carlini2021extracting`).
#
# Two things decide whether a small model can test the paper at all, and the chapter measures both
# before any attack: whether the base model *reads context* (a masked LM that only learned token
# frequencies gives Q-Skew nothing to skew), and whether fine-tuning crosses a *domain gap* (as
# LLaDA, pre-trained on web text, fine-tuned on WikiText), which is what makes a plain calibrated
# loss noisy in the paper. Our domain-gap setting fine-tunes on the docstrings of standard-library
# modules the base has never read, its pre-training having read those of the other modules: a
# domain it knows, in texts it has not seen.

# %% tags=["parameters"]
profile: str = "cpu"  # smoke | cpu | paper
params: dict = {}  # overrides, e.g. {"epochs": 2}; every name: `memlab list` (SPEC)

# %% tags=["hide-input"]
import numpy as np
import pandas as pd
from IPython.display import Markdown, display
from myst_nb import glue

from memlab.experiments import ch04_qskew as ch
from memlab.report import pagekit, paper, plotting
from memlab.science import mia

CH = ch.CHAPTER  # the chapter id is declared once, in the chapter module
cfg, run = pagekit.start(CH, profile, params)
pd.set_option("display.precision", 1)

# %% [markdown]
# ## Setup: the model, the data and the one likelihood interface
#
# **Model.** At `smoke`/`cpu` the base model is a small bidirectional transformer with a mask
# token (`memlab.models.diffusion_lm.MaskedDiffusionLM`), pre-trained with the LLaDA objective on the
# WikiText-2 *test* split and the docstrings of 28 of the 56 standard-library modules below: a ratio
# $t \sim U(0,1)$ is drawn per sequence, every token is masked with probability $t$, and the
# cross-entropy on masked tokens is weighted by $1/t$. At `cpu` it is pre-trained for 4000 batches of
# 32 blocks of 64 tokens, the paper's shortest fine-tuning block, long enough that it reads context
# (next section). An "instruct" variant is the base trained further on
# instruction pairs from the same test split. Both are cached: the pre-training is the chapter's
# cold cost (given at the end of the chapter, as measured).
#
# **Members and non-members** are drawn at random from one pool in every run, so they share one
# distribution:
#
# * *domain fine-tuning*, in two settings: **same domain**, fixed-length blocks of the WikiText-2
#   *validation* split (the pre-training domain), and **domain gap**, blocks of the docstrings of
#   the other 28 standard-library modules (`memlab.data.docstrings`: technical English about
#   programming, read at run time with `inspect.getdoc`, identical on every machine with the same
#   Python version, which the provenance records). Every other module of the list goes to the
#   pre-training, so the base knows the domain, as LLaDA's web-scale pre-training knows WikiText's,
#   but has never seen a member or non-member text. The base model is fine-tuned on the members
#   (AdamW, `epochs` epochs, batch 16). The claims below judge the domain-gap setting, the paper's,
#   when its base reads context there (the regime gates below); the same-domain setting is the
#   control;
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
display(
    pd.Series({k: v for k, v in setup.info.items() if not k.endswith("_corpus")},
              name="value")
    .astype(str)
    .to_frame()
)
corpora = {
    "pre-training share": "pretrain_corpus",
    "fine-tuning share (domain gap)": "gap_corpus",
}
corpora = {name: setup.info[k] for name, k in corpora.items() if k in setup.info}
if corpora:
    display(pd.DataFrame(corpora).rename_axis("docstring corpus"))

# %% [markdown]
# ### The regime: does the base model read context?
#
# A masked LM that has only learned how frequent each token is predicts every masked token from the
# same unigram distribution, whatever the context; fine-tuning then moves frequency priors, and the
# per-token differences Q-Skew reads carry no trace of *which* tokens were memorised. The table gives
# the base's masked NLL at $\rho$ (one round of cyclic masks over 256 fixed random blocks, every token
# scored once) beside the NLL of an add-one unigram model of the pre-training tokens on the same
# blocks. The run fails, with a clear error, when the base is less than `context_margin` (0.5) nats
# below the unigram on its own domain (`ch.check_context`). The paper's models report no masked
# NLL; they are web-scale pre-trained models that certainly read context.

# %%
run.record(regime=setup.regime)
ch.regime_table(setup)

# %% [markdown]
# ## The Q-Skew score
#
# For a sequence $x$ of $L$ tokens, **cyclic sampling** runs $R$ rounds; each round permutes the
# positions and cuts them into consecutive batches of $b=\mathrm{round}(\rho L)$ tokens
# ($\rho=0.35$; at $L=64$, batches of 22, 22 and 20), the last one shorter where $b$ does not
# divide $L$, so every token is masked exactly once per round and a full batch hides a share
# $\rho$ of the tokens, within $1/2L$ (`tests/test_mia.py` checks this over $\rho$ = 0.1 to 0.5).
# For each batch $M$ and each masked token $i \in M$,
#
# $$\Delta_{i,M} = -\log p_{\mathrm{ref}}(x_i \mid x_{M^c}) + \log p_{\mathrm{target}}(x_i \mid x_{M^c}).$$
#
# With $\hat F$ the empirical CDF of the $n = R L$ values, $m$ their median and $s$ their standard
# deviation, the score we implement (`memlab.science.mia.qskew`) is
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
# **Baselines on the same interface, each as its own paper defines it** (Loss, Calibration,
# Min-K%, Min-K%++, SecMI and SAMA; the appendix on the baselines gives each definition). The
# paper gives every method 16 denoising steps (forward passes) per sample: the likelihood
# baselines read 16 of LLaDA's random-$t$ passes per sequence, shared by the target and the
# reference; Q-Skew's cyclic probe serves no baseline.
# Metrics: AUC and TPR at 10% and 1% FPR from scikit-learn's ROC, mean over runs. A TPR at FPR $f$
# is reported only when $f$ times the number of non-members allows at least five false positives;
# otherwise the cell says "n/a" with the count (with 250 non-members, TPR@1%FPR would be the TPR
# at two false positives).

# %% [markdown]
# ## Domain fine-tuning (paper Table 1)
#
# Each domain setting fine-tunes the base on its own members; scores, references and runs are
# otherwise identical. The paper's numbers (LLaDA-8B-Base fine-tuned on WikiText, paper Table 1; only the
# Q-Skew and SAMA entries are in our summary of the paper) sit beside both.

# %%
DOMAIN_NAMES = {
    "same": "Same domain (WikiText-2 valid, the pre-training domain)",
    "gap": "Domain gap (docstrings of modules the pre-training did not read)",
}
n_non, min_fp = cfg.n_nonmembers, cfg.tpr_min_fp
dft = {d: ch.domain_experiment(setup, d) for d in cfg.domains}
ours_dft = {d: ch.table1(r) for d, r in dft.items()}
run.record(**ch.domain_metrics(ours_dft))
paper_dft = paper.table(CH, "table1_wikitext")
for d, t in ours_dft.items():
    display(Markdown(f"**{DOMAIN_NAMES[d]}**"))
    display(ch.na_cells(paper.side_by_side(t, paper_dft, ch.METRICS), n_non, min_fp))

# %% [markdown]
# Ours: the small DLM fine-tuned on 64-token blocks, mean over runs, in %. Where the paper reports
# no number the cell shows –.

# %% [markdown]
# ### Why skewness: the distribution of $\Delta$

# %%
delta_rows, delta_bands, zero_bands = {}, {}, {}
shown = [
    d for d in cfg.domains if dft[d].examples and dft[d].examples["qskew"] is not None
]
if shown:
    # One row per domain setting. Left: pooled Delta of members vs non-members;
    # right: Q-Skew score histograms.
    fig, axes = plotting.figure(
        "tall" if len(shown) > 1 else "wide", ncols=2, nrows=len(shown), squeeze=False
    )
    for (a, b), d in zip(axes, shown):
        ex = dft[d].examples
        pooled = ch.pooled_deltas(ex)
        lo, hi = np.percentile(np.r_[pooled[1], pooled[0]], [0.5, 99.5])
        bins = np.linspace(lo, hi, 60)
        a.hist(pooled[0], bins, density=True, alpha=0.6, label="non-members")
        a.hist(pooled[1], bins, density=True, alpha=0.6, label="members")
        a.set_xlabel(r"$\Delta$ = NLL$_{ref}$ - NLL$_{target}$ (nats)")
        a.set_ylabel(f"density ({d})")
        a.legend()
        q, lab = ex["qskew"], ex["labels"]
        bins = np.linspace(q.min(), q.max(), 25)
        b.hist(q[lab == 0], bins, alpha=0.6, label="non-members")
        b.hist(q[lab == 1], bins, alpha=0.6, label="members")
        b.set_xlabel("Q-Skew score per sequence")
        b.legend()
        delta_rows[d] = ch.delta_table(ex)
        delta_bands[d] = ch.skew_gap_band(ex, seed=cfg.seed)
        zero_bands[d] = ch.skew_zero_band(ex, seed=cfg.seed)
    _ = plotting.publish(fig, "deltas", CH)
    run.record(**ch.delta_metrics(delta_rows, delta_bands, zero_bands))
    for d, t in delta_rows.items():
        m_, n_ = t.loc["members"], t.loc["non-members"]
        mq, nq = m_["Q-Skew (pooled)"], n_["Q-Skew (pooled)"]
        # the paper's contrast: members right-skewed, non-members near zero
        # (nearer zero than to the members' skew, ch.NEAR_ZERO)
        skewed = mq > 0 and mq > nq and abs(nq) <= ch.NEAR_ZERO * mq
        display(Markdown(f"**{DOMAIN_NAMES[d]}**"))
        display(t.round(3))
        display(
            Markdown(
                f"Members' $\\Delta$: mean {m_['mean']:.3f} nats against"
                f" {n_['mean']:.3f} for non-members; pooled Q-Skew"
                f" {m_['Q-Skew (pooled)']:.2f} against {n_['Q-Skew (pooled)']:.2f}. "
                + (
                    "The members' differences are right-skewed and the non-members'"
                    " skew is nearer zero than theirs, as the paper predicts."
                    if skewed
                    else "The members' differences are not right-skewed beyond the"
                    " non-members', or the non-members' skew is not near zero (nearer"
                    " zero than half the members'), contrary to the paper's picture."
                )
            )
        )

# %% [markdown]
# ```{glue:figure} 04_qskew-deltas
# :name: fig-04-deltas
# Left: per-token differences $\Delta$ = reference NLL minus target NLL, pooled over the members and
# over the non-members of run 0, one row per domain setting (top: same domain, bottom: domain gap).
# Right: the Q-Skew score of each sequence.
# ```

# %% [markdown]
# ## Instruction fine-tuning (paper Table 2)

# %%
ift = ch.instruction_experiment(setup)
ours_ift = ch.table2(ift)
run.record(**ch.instruction_metrics(ours_ift))
# the task's difficulty, shown in the regime section above (glued there)
run.record(**ch.baseline_level_metrics(ours_dft, ours_ift))
glue(f"{CH}-baseline-level", ch.baseline_level_table(run.metrics), display=False)
ch.na_cells(
    paper.side_by_side(ours_ift, paper.table(CH, "table2_alpaca"), ch.METRICS),
    n_non,
    min_fp,
)

# %% [markdown]
# Paper: LLaDA-8B-Instruct fine-tuned on Alpaca (paper Table 2, the general-purpose instruction set
# closest to our WikiText continuation pairs). For reference, the paper's Q-Skew AUC on MedQA and
# Tulu-3 is 72.8 and 67.2, and paper Table 3 reports the weaker Dream models:

# %%
display(paper.table(CH, "table3_dream"))

# %% [markdown]
# ## Attack strength against fine-tuning epochs (paper Figure 2)

# %%
sweeps = {d: ch.figure2_table(r) for d, r in dft.items()}
fig, axes = plotting.figure("wide", ncols=len(sweeps), squeeze=False, sharey=True)
for ax, (d, sweep) in zip(axes[0], sweeps.items()):
    for label, row in sweep.iterrows():
        width = 2.2 if label == "Q-Skew" else 1.2
        ax.plot(sweep.columns, row.to_numpy(), marker="o", lw=width, label=label)
    ax.axhline(50, color="grey", lw=0.8, ls="--")
    ax.set_xticks(list(sweep.columns))
    ax.set_xlabel("fine-tuning epochs")
    ax.set_title(DOMAIN_NAMES[d].split(" (")[0])
axes[0][0].set_ylabel("AUC (%)")
axes[0][-1].legend(fontsize="small")
_ = plotting.publish(fig, "epochs", CH)
run.record(**ch.sweep_metrics(sweeps))
# one table, the two settings side by side (AUC %, columns: fine-tuning epochs),
# under short names so it fits
short = {d: DOMAIN_NAMES[d].split(" (")[0] for d in sweeps}
display(pd.concat({short[d]: sweep for d, sweep in sweeps.items()}, axis=1))

# %% [markdown]
# ```{glue:figure} 04_qskew-epochs
# :name: fig-04-epochs
# AUC (%) of every score against the number of fine-tuning epochs (snapshots of one run per seed,
# mean over runs), one panel per domain setting. Paper Figure 2 shows Q-Skew above the
# baselines at every epoch; its point values are not in our summary of the paper.
# ```

# %% [markdown]
# ## Token-level asymmetry (paper Figure 1)
#
# The method rests on one assumption (the paper's Assumption 3.1): when a token is masked and
# trained, its gain is larger the lower the mask ratio. In each of the `runs` seeds we draw
# members, fine-tune the base on them at a *fixed* mask ratio (0.25, 0.5, 0.75) and measure every
# member token's gain, base NLL minus fine-tuned NLL, under one shared round of cyclic masks; the
# gains are pooled over the seeds. Two readings are shown: the total gain after training (what
# paper Figure 1 plots) and the gain per step in which the token was masked (total divided by
# ratio times epochs, since a higher ratio trains each token more often). The bands resample
# member sequences, not tokens: the tokens of one sequence share its fine-tuning.
#
# One deviation: the paper plots the difference of the true token's *confidence logit* after
# training; we take the difference of its log-probability, the logit minus the log-partition.
# A raw logit is defined only up to a shift per position, so it cannot be compared between the
# base and the fine-tuned model; the log-probability can.

# %%
asym = ch.asymmetry_experiment(setup)
# Violin plot of per-token gains by fine-tuning mask ratio (analogue of paper Figure 1).
fig, ax = plotting.figure("single")
ratios = list(asym["gains"])
ax.violinplot([asym["gains"][r] for r in ratios], showmedians=True)
ax.set_xticks(range(1, len(ratios) + 1), [f"{r:g}" for r in ratios])
ax.axhline(0, color="grey", lw=0.8)
ax.set_xlabel("fine-tuning mask ratio")
ax.set_ylabel("per-token gain NLL$_{base}$ - NLL$_{ft}$ (nats)")
_ = plotting.publish(fig, "asymmetry", CH)
run.record(**ch.asymmetry_metrics(asym))
asym["table"].set_axis([f"{r:g}" for r in asym["table"].index]).round(3)

# %% [markdown]
# ```{glue:figure} 04_qskew-asymmetry
# :name: fig-04-asymmetry
# Per-token memorisation gain (nats) of member tokens after fine-tuning at a fixed mask ratio
# (paper: LLaDA on XSUM, four epochs; ours: the small DLM on WikiText-2 blocks).
# ```

# %% [markdown]
# ## PII reconstruction (paper Table 6)
#
# Records are synthetic (`memlab.data.pii`): a fictional name and topic followed by an e-mail address
# or a phone number, e.g. `Maria Lopez of the harbour survey , email : maria.lopez41@inbox.net`,
# padded with an end-of-text token. The base model is fine-tuned on all target records (at `cpu`
# for `pii_epochs` epochs against the paper's 6: after 6 our small model regenerates no target's
# PII at all, and the last row of the table shows how often the true PII is among the
# candidates). Too many epochs put the cross-entropy ranking near its ceiling, where the paper's
# CE finds a quarter of the targets, so the claims are gated on CE's rate (below), and the `cpu`
# value of `pii_epochs` was chosen on that rate alone, never on the rankings the claims compare:
# of the epochs measured, the one inside the gate whose rate is nearest the paper's (the grid is
# in the gate's table). For each
# record, 20 mask tokens replace the PII (and the padding after it), $N$ candidates come from
# independent denoising runs (LLaDA's low-confidence remasking, temperature 1), and the unique
# candidates are ranked by cross-entropy (target model, random masks hiding 35% of the record's own
# tokens, never the padding, a share set apart from $\rho$ as in the paper; lower is better), by Q-Skew
# with cyclic masks over the PII tokens only, by Q-Skew over the context tokens of a 20-token span
# only, and by $-(1-\alpha)Z(\mathrm{CE}) + \alpha Z(\mathrm{QSkew})$ with $\alpha=0.1$. Success means
# the top candidate equals the true string; the last row shows how often it was among the candidates.
# A ranking can only be judged on targets whose truth is among the candidates, so the claims are
# "not judged" when none is, and when two rankings' hit rates differ by less than their noise band.
# The rankings are compared on the same targets, so the band is that of paired outcomes: only the
# targets one ranking gets and the other misses carry noise (`memlab.science.metrics.paired_diff_band`).

# %%
pii = ch.pii_experiment(setup)
run.record(**ch.pii_metrics(pii, cfg))
ours_pii = ch.table6(pii)[["Phone ASR", "Email ASR"]].astype(float)
display(paper.side_by_side(ours_pii, paper.table(CH, "table6")))
display(pii["examples"])
_o, _n = pii["oracle"], pii["n"]
display(
    Markdown(
        f"The true PII is among the unique candidates for {_o['phone']}/{_n} phone"
        f" numbers and {_o['email']}/{_n} e-mail addresses ({cfg.pii_candidates}"
        " denoising runs each,"
        f" after {cfg.pii_epochs} fine-tuning epochs): the ceiling of every ranking."
    )
)
display(
    Markdown(
        "Mean NLL (nats per token) of the true PII with the whole PII masked, before"
        " and after fine-tuning on the records:"
    )
)
display(pii["memorisation"].round(2))

# %% [markdown]
# The two sections that follow are appendices: how the attack fares with a reference model other
# than the golden one, and which of its parts carry it; the claims they bear on are judged with
# the others below.

# %% [markdown]
# ## Appendix: the baselines' definitions
#
# The likelihood baselines read the model the way a masked diffusion LM is trained and evaluated
# {cite}`nie2025llada`: 16 passes per sequence, each drawing $t \sim U(0,1)$ and hiding every
# token with probability $t$ (`memlab.science.mia.llada_masks`), shared by the target and the
# reference. *Loss* {cite}`qskew_yeom2018privacy`: minus the
# target's LLaDA loss, the per-token estimate $\frac{1}{16}\sum_k \frac{1}{t_k L}
# \sum_{i \in M_k} -\log p(x_i \mid x_{M_k^c})$ of the loss the model is trained on.
# *Calibration* {cite}`qskew_watson2022calibration`: the reference's LLaDA loss minus the
# target's, on the same passes. *Min-K%* {cite}`shi2024mink` ($k=20\%$): each token's NLL
# averaged over the passes that hid it, then minus the mean of the 20% worst. *Min-K%++*
# {cite}`zhang2025minkpp`: $z=(\log p(x_i)-\mu)/\sigma$, with $\mu,\sigma$ the mean and
# standard deviation of $\log p$ under that pass's predicted distribution, averaged per token
# over the passes that hid it; the score is the mean of the 20% lowest. *Loss at deterministic
# masks*: minus the target's masked NLL at fixed nested masks (ratios 0.3/0.5/0.7/0.9 of one fixed
# permutation), averaged; public DLM code calls this "SecMI adapted to DLMs", but it lacks SecMI's
# defining step. *SecMI (t-error)* {cite}`duan2023secmi`: SecMI compares a sample's
# deterministic state $\tilde x_t$ with the result of one deterministic forward step and one
# deterministic reverse step, $\ell_t=\lVert\psi_\theta(\phi_\theta(\tilde x_t,t),t+k)-\tilde
# x_t\rVert^2$. With masks: $\tilde x_t$ hides the first $tL$ tokens of a fixed permutation, the
# forward step hides $kL$ more ($k=0.2$), and the reverse step returns the model's expected one-hot
# vector at those $kL$ tokens (the still-hidden ones agree on both sides); $\ell_t$ is the mean
# squared error $\lVert p_\theta(\cdot\mid\tilde x_{t+k})_i-e_{x_i}\rVert^2$ over them, and the
# score is minus its mean over $t$ = 0.1/0.3/0.5/0.7 (SecMI's statistical attack reads one $t$; a
# step of a few tokens makes one $t$ too noisy on short blocks, our one deviation here). *SAMA*
# {cite}`qskew_chen2026sama`: over 16 growing nested masks (5% to 50%), the share of random
# 8-token subsets whose summed reference NLL exceeds the summed target NLL, steps weighted $1/s$;
# as in the public SAMA code, each token keeps the loss of the step at which it was first masked.
# `tests/test_mia.py` checks each score on a constructed case whose value is known by hand.

# %% [markdown]
# ## Appendix: mismatched reference models (paper Table 4)
#
# *Other-variant reference*: the instruct model as the reference of the domain-tuned base, and the
# base as the reference of the instruction-tuned instruct model. *Para-modification reference*: the
# golden reference fine-tuned, with the same recipe, on *other* data of the same domain (held-out
# blocks or pairs) in which 20% of the tokens were replaced at random; the paper says only "a model
# fine-tuned on other perturbed data", so this construction is ours. The paper's sentence says two
# things. The claim is judged on the first, the cost: the drop from the golden reference is a few
# points (at most 6, against the paper's 1.3 to 5.0). The second, still above the strongest
# baseline, is a separate labelled part of its evidence, outside the verdict: where Q-Skew is
# below a baseline even with its golden reference, that is the finding of the best-AUC claims, not
# a cost of the mismatch.

# %%
t4 = {d: ch.table4(r, ift, cfg.scores) for d, r in dft.items()}
if any(t4.values()):
    run.record(**ch.table4_metrics(t4))
    for side in ("base", "instruct"):
        label, key = ch.TABLE4_SIDES[side]
        for d, t in t4.items():
            if not t:
                continue
            display(
                Markdown(
                    f"**{label}**"
                    + (f", {DOMAIN_NAMES[d]}" if side == "base" else "")
                    + f" (paper {paper.source(CH, key)})"
                )
            )
            display(
                ch.na_cells(
                    paper.side_by_side(t[side], paper.table(CH, key), ch.METRICS),
                    n_non,
                    min_fp,
                )
            )
            if side == "instruct":
                break

# %% [markdown]
# ## Appendix: ablation (paper Table 5)
#
# *w/o cyclic sampling*: the same number of masks, each token masked independently with probability
# $\rho$. *Mean instead of skewness*: the quantile-weighted mean of $\Delta$. *w/o quantile
# weighting*: plain $3(\mathrm{mean}-\mathrm{median})/s$.

# %%
ours_abl = {d: ch.table5(r) for d, r in dft.items()}
ours_abl = {d: t for d, t in ours_abl.items() if t is not None}
if ours_abl:
    run.record(**ch.ablation_metrics(ours_abl))
    for d, t in ours_abl.items():
        display(Markdown(f"**{DOMAIN_NAMES[d]}**"))
        display(
            ch.na_cells(
                paper.side_by_side(t, paper.table(CH, "table5"), ch.METRICS),
                n_non,
                min_fp,
            )
        )

# %% [markdown]
# ## Claims

# %% tags=["hide-input"]
# The claim predicates live in the library (`memlab.experiments.ch04_qskew.claims`)
# so they are unit-tested.
# pagekit.judge glues the verdict counts of the closing section.
verdicts = pagekit.judge(ch.claims(), run)
# At smoke, still run every predicate, so the smoke test catches a broken one.
if cfg.profile == "smoke":
    paper.evaluate(ch.claims(), run.metrics, "cpu")

# %% [markdown]
# ### How the regime gates were chosen
#
# Each claim is judged only inside the regime the paper tested it in: a precondition read from
# our run and fixed from the paper's text before any verdict, by one rule for every setting. The
# paper fine-tunes LLaDA-8B and Dream-7B, language models pre-trained at web scale, on text they
# already model (WikiText, ArXiv and XSUM; Alpaca, MedQA and Tulu-3). It reports no masked NLL, so
# a setting of ours is in its regime when the base reads context on the fine-tuning text by the
# chapter's own guard: a masked NLL at least 0.5 nats below a unigram model's, the rule the `cpu`
# profile already enforces on the pre-training domain, applied unchanged to the docstrings of the
# domain-gap setting. A claim whose gate fails is "outside the paper's regime" and says nothing
# about the paper either way. The two PII claims have their own gate: the paper's cross-entropy
# ranking finds 25% of its targets, far from a ceiling, which leaves the skewness targets to add;
# ours must find at most half (twice the paper's rate), or the two claims hold or fail by
# construction. The claims that Q-Skew is best, and by the paper's margin, carry a second
# marker: our best baseline no more than 10 AUC points (the margin the paper claims) above the
# paper's strongest best baseline of the same kind of fine-tuning (the table after the gates').
# The per-step gain is a sanity check, counted apart from the paper's claims: it falls
# with the ratio whenever the total gain grows more slowly than the ratio. The table gives each
# gate, what this run measured, and the run that would bring its claims inside with its
# estimated cost.

# %% tags=["hide-input"]
display(pagekit.regimes_table(CH, verdicts))

# %% [markdown]
# ### The second marker: how hard is the membership task?
#
# The paper's baselines say how hard its membership task is. On LLaDA its best baseline reaches
# an AUC of about 70 under domain fine-tuning and at most 69 under instruction fine-tuning (paper
# Tables 1 and 2; less on Dream, paper Table 3), and Section 4 says Q-Skew beats it by more than
# 10 points. Where our best baseline is stronger than the paper's by more than that whole margin,
# our baselines alone do what the paper's Q-Skew does: the task is easier than the paper's, and
# the claims that Q-Skew is *best*, or beats the best by the paper's margin, cannot show what
# they test. The table puts our best baseline, measured in the sections above, beside the
# paper's, with the gate's bound on it: the paper's strongest best baseline of the same kind of
# fine-tuning plus those 10 points, fixed from the paper's text before any result of this code
# was read. The same-domain setting is a control and carries no gate.
#
# ```{glue} 04_qskew-baseline-level
# ```

# %%
tally = paper.tally(verdicts, kind=paper.CLAIM)
if "qskew" in cfg.scores and len(cfg.scores) > 1:
    parts = []
    for d, t in ours_dft.items():
        others = t["AUC"].drop("Q-Skew")
        parts.append(
            f"{t.loc['Q-Skew', 'AUC']:.1f}% after domain fine-tuning, {d} setting (best"
            f" baseline: {others.idxmax()}, {others.max():.1f}%)"
        )
    others = ours_ift["AUC"].drop("Q-Skew")
    parts.append(
        f"{ours_ift.loc['Q-Skew', 'AUC']:.1f}% after instruction fine-tuning (best"
        f" baseline: {others.idxmax()}, {others.max():.1f}%)"
    )
    display(
        Markdown(
            f"**Summary of this run (profile `{cfg.profile}`).**"
            " Q-Skew reaches an AUC of "
            + "; ".join(parts)
            + ". The paper reports 80.3% (WikiText) and 81.4% (Alpaca) on LLaDA-8B. "
            + ", ".join(f"{n} claims {v}" for v, n in tally.items() if n)
            + "."
        )
    )

# %% [markdown]
# The verdicts are computed from this run's numbers, on a transformer of under a million
# parameters, not the paper's 8B models; the `paper` profile runs the same code on LLaDA. The base
# model reads context on its own domain (the regime table), so the instruction-side claims are
# about the method in a regime the paper's mechanism can act in, at a small scale. On the
# domain-gap docstrings it reads context only because half the docstring modules are in its
# pre-training; the gates above say whether that was enough for the claims judged there.

# %% [markdown]
# ## What this means
#
# At the profile of this page, {glue:}`04_qskew-n-reproduced` claims reproduced,
# {glue:}`04_qskew-n-not-reproduced` did not, {glue:}`04_qskew-n-outside-regime` lay outside the
# paper's regime (the gates above), {glue:}`04_qskew-n-not-judged` could not be judged
# (a failed precondition or a margin inside its noise band) and {glue:}`04_qskew-n-not-run` were
# not run. The summary below is built from this run's verdicts and numbers.

# %% tags=["remove-input"]
regime = ch.closing_regime(run.metrics, ours_dft, cfg.context_margin)
pagekit.closing_summary(verdicts, regime, chapter=CH)

# %% [markdown]
# **Exercises for this chapter:** {ref}`exercises-04-qskew` ({doc}`student notebook <../exercises/04_qskew>`), autograded with otter-grader; instructors see {doc}`../instructor`.
