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
# name: 04_qskew
# init_cell: true
# check_all_cell: false
# export_cell: false
# run_tests: false
# solutions_pdf: false
# show_question_points: true
# generate:
#   show_stdout: true

# %% [markdown]
# # Exercises: Q-Skew membership inference (Chapter 4)
#
# These exercises go with the chapter *Q-Skew membership inference on diffusion language
# models*. For a candidate sequence, the attack looks at the per-token loss differences
# $\Delta_i = \mathrm{NLL}_\mathrm{ref}(i) - \mathrm{NLL}_\mathrm{target}(i)$ between a reference
# model and the fine-tuned target. Fine-tuning lowers the loss of a few memorised tokens a lot,
# so a member's $\Delta$ has a long right tail: Q-Skew measures that *skewness* instead of the
# mean. You compute the statistic by hand, then see why its invariances matter when the
# reference model is mismatched.
#
# | # | exercise | level | graded | time |
# |---|---|---|---|---|
# | 4.1 | Pearson's median skewness | warm-up | auto | 10 min |
# | 4.2 | Q-Skew by hand | core | auto | 20 min |
# | 4.3 | a mismatched reference | core | auto | 20 min |
# | 4.4 | re-run with another mask ratio | open | manual | 25 min |
#
# Every cell runs in seconds on one CPU core. Run the cells in order; `grader.check("q…")`
# runs the public tests of a question (the grader also runs hidden ones).

# %%
import numpy as np

from memlab.science import metrics, mia

SEED = 0  # per-student: your instructor may give you another seed
STUDENT = ""  # per-student: your id from your instructor (empty: your login name)
rng = np.random.default_rng(SEED)
# A member-like sample: most tokens unchanged, 15% memorised (a long right tail).
delta = rng.normal(size=200)
hot = rng.random(200) < 0.15
delta[hot] += rng.exponential(3.0, size=hot.sum())

# %% [raw]
# # BEGIN QUESTION
# name: q1
# points: 2

# %% [markdown]
# **Exercise 4.1 (warm-up): Pearson's median skewness.** Write `median_skew_by_hand(d)`
# returning $3(\bar d - \operatorname{median}(d)) / s$ with $s$ the *population* standard
# deviation (`np.std`, ddof 0), and 0.0 when $s = 0$.
#
# *Hint:* a long right tail pulls the mean above the median; the sign of the statistic
# says which tail is long.
#
# *Expected:* equal to `mia.median_skew(delta)` to 1e-12; positive (about 0.5 at `SEED = 0`)
# for the member-like `delta` above, and 0.0 for a constant sample.

# %% [raw]
# # BEGIN SOLUTION

# %%
def median_skew_by_hand(d):
    """Pearson's second skewness 3 (mean - median) / std of a 1-D sample (float)."""
    # BEGIN SOLUTION
    d = np.asarray(d, dtype=float)
    s = d.std()
    return 0.0 if s == 0 else float(3 * (d.mean() - np.median(d)) / s)
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %%
print("by hand:", median_skew_by_hand(delta), " memlab:", mia.median_skew(delta))

# %% [raw]
# # BEGIN TESTS

# %%
assert abs(median_skew_by_hand(delta) - mia.median_skew(delta)) < 1e-12

# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG
_r = np.random.default_rng(5)
_z = _r.gamma(2.0, size=31)
assert abs(median_skew_by_hand(_z) - mia.median_skew(_z)) < 1e-12
assert median_skew_by_hand(np.full(9, 2.5)) == 0.0
assert median_skew_by_hand(-_z) < 0 < median_skew_by_hand(_z)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [raw]
# # BEGIN QUESTION
# name: q2
# points: 3

# %% [markdown]
# **Exercise 4.2 (core): Q-Skew by hand.** Q-Skew replaces the mean in Pearson's median
# skewness by a weighted mean that emphasises the 15th and 85th percentiles. With the
# empirical CDF at mid-ranks $F_i = (\operatorname{rank}(\Delta_i) - \tfrac12)/n$ (ties get
# their average rank), the weights
# $W_i = \sum_{q \in \{0.15, 0.85\}} \exp\!\big(-(F_i - q)^2 / 2h^2\big)$ and
#
# $$Q = \frac1n \sum_i \frac{W_i}{\bar W}\, \frac{3(\Delta_i - \operatorname{median}\Delta)}{s},$$
#
# with $s$ the population standard deviation (return 0.0 when $s = 0$). Write
# `qskew_by_hand(d, h=0.1)`.
#
# *Hint:* `scipy.stats.rankdata` gives average ranks for ties.
#
# *Expected:* equal to `mia.qskew(delta)` to 1e-10; the same value for `5 * delta + 3`
# (Q-Skew is invariant to a shift and to a positive scale of $\Delta$), the opposite sign for
# `-delta`.

# %%
from scipy.stats import rankdata

# %% [raw]
# # BEGIN SOLUTION

# %%
def qskew_by_hand(d, h=0.1, quantiles=(0.15, 0.85)):
    """Quantile-weighted median skewness of a 1-D sample of loss differences (float)."""
    # BEGIN SOLUTION
    d = np.asarray(d, dtype=float)
    s = d.std()
    if s == 0:
        return 0.0
    f = (rankdata(d) - 0.5) / d.size
    w = sum(np.exp(-((f - q) ** 2) / (2 * h * h)) for q in quantiles)
    return float(np.mean(w / w.mean() * 3 * (d - np.median(d)) / s))
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %%
print("by hand:", qskew_by_hand(delta), " memlab:", mia.qskew(delta))
print("after 5*delta + 3:", qskew_by_hand(5 * delta + 3))

# %% [raw]
# # BEGIN TESTS

# %%
assert abs(qskew_by_hand(delta) - mia.qskew(delta)) < 1e-10

# %%
assert abs(qskew_by_hand(5 * delta + 3) - qskew_by_hand(delta)) < 1e-10

# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG
_r = np.random.default_rng(9)
_z = np.round(_r.lognormal(size=64), 1)  # rounded: ties in the ranks
assert abs(qskew_by_hand(_z) - mia.qskew(_z)) < 1e-10
assert abs(qskew_by_hand(_z, h=0.3) - mia.qskew(_z, h=0.3)) < 1e-10
assert abs(qskew_by_hand(-_z) + qskew_by_hand(_z)) < 1e-10
assert qskew_by_hand(np.ones(8)) == 0.0

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [raw]
# # BEGIN QUESTION
# name: q3
# points: 3

# %% [markdown]
# **Exercise 4.3 (core): a mismatched reference.** The cell below simulates 40 candidate
# sequences of 128 tokens, half of them members. A *mismatched* reference model changes each
# sequence's loss differences by its own affine map $\Delta \mapsto a\Delta + b$
# ($a \in [0.5, 3]$, $b \in [-3, 3]$), as a reference of another size or domain would. Score
# every sequence twice: by Q-Skew (`mia.qskew`) and by the mean of $\Delta$ (the plain
# loss-difference baseline). Store the ROC AUC of each score in the dict
# `auc = {"qskew": ..., "mean": ...}` using `metrics.roc_metrics(scores, labels)["auc"]`.
#
# *Hint:* one score per sequence: a list comprehension over `seqs` for each score.
#
# *Expected:* Q-Skew's AUC stays high (about 0.9 at `SEED = 0`), the mean's falls towards
# 0.5-0.7: the offsets $b$ drown the members' mean shift, while the skewness does not see
# them at all.

# %%
seqs, labels = [], []
for i in range(40):
    member = i % 2 == 0
    d = rng.normal(size=128)
    if member:
        hot = rng.random(128) < 0.15
        d[hot] += rng.exponential(3.0, size=hot.sum())
    a, b = rng.uniform(0.5, 3.0), rng.uniform(-3.0, 3.0)  # the mismatched reference
    seqs.append(a * d + b)
    labels.append(int(member))

# %% [raw]
# # BEGIN SOLUTION

# %%
auc = {"qskew": None, "mean": None}
# BEGIN SOLUTION
auc["qskew"] = metrics.roc_metrics([mia.qskew(s) for s in seqs], labels)["auc"]
auc["mean"] = metrics.roc_metrics([np.mean(s) for s in seqs], labels)["auc"]
# END SOLUTION

# %% [raw]
# # END SOLUTION

# %%
print(auc)

# %% [raw]
# # BEGIN TESTS

# %%
assert set(auc) == {"qskew", "mean"} and all(isinstance(v, float) for v in auc.values())

# %%
assert auc["qskew"] > 0.75 and auc["qskew"] > auc["mean"]

# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG
_q = metrics.roc_metrics([mia.qskew(s) for s in seqs], labels)["auc"]
_m = metrics.roc_metrics([float(np.mean(s)) for s in seqs], labels)["auc"]
assert abs(auc["qskew"] - _q) < 1e-12 and abs(auc["mean"] - _m) < 1e-12

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [raw]
# # BEGIN QUESTION
# name: q4
# manual: true
# points: 3

# %% [markdown]
# **Exercise 4.4 (open, manually graded): the mask ratio and the bandwidth.** The chapter
# masks a share $\rho = 0.35$ of the tokens per cyclic round and uses the bandwidth
# $h = 0.1$. Re-run it at the smoke profile (a minute or two) with other values,
# from a terminal in your course folder (the student bundle or a clone of the repository).
# The cell below prints the commands, which write into your own folder `RUNS`
# (`~/memlab-runs/<your id>/`):
#
# ```bash
# memlab run 04_qskew --profile smoke --book-dir <RUNS>/ex04
# memlab run 04_qskew --profile smoke -p rho 0.6 -p h 0.3 --book-dir <RUNS>/ex04-rho
# ```
#
# It then prints both runs' claims. In 4-6 sentences: how does the Q-Skew AUC move
# against the baselines when more tokens are masked and the weights are flatter? Explain
# with exercise 4.2's formula what a larger $h$ does to the weights (what is Q-Skew as
# $h \to \infty$?), and say whether a smoke run's handful of members can separate the two
# settings from noise.

# %%
import json

from memlab.course.exercises import runs_dir

RUNS = runs_dir(STUDENT)  # your own folder for runs: students sharing a server never share it
print(f"memlab run 04_qskew --profile smoke --book-dir {RUNS / 'ex04'}")
print(f"memlab run 04_qskew --profile smoke -p rho 0.6 -p h 0.3 --book-dir {RUNS / 'ex04-rho'}")
for run_dir in (RUNS / "ex04", RUNS / "ex04-rho"):
    path = run_dir / "results" / "04_qskew.json"
    if not path.exists():
        print(f"{path}: not there yet (run the commands above)")
        continue
    res = json.loads(path.read_text())
    print(run_dir, {k: res["params"].get(k) for k in ("rho", "h")})
    print("    metrics (res[\"metrics\"]):", ", ".join(sorted(res["metrics"])))
    for claim in res["claims"]:
        print("   ", claim.get("verdict"), "-", str(claim.get("claim", ""))[:80])

# %% [raw]
# # BEGIN SOLUTION

# %% [markdown]
# *Sample answer (the grader's guide).* As $h \to \infty$ every weight tends to 2, so
# $W_i / \bar W \to 1$ and Q-Skew becomes Pearson's median skewness (exercise 4.1): the
# emphasis on the 15th and 85th percentiles, which keeps single outlier tokens from
# dominating, is lost. A larger masked share changes which tokens are scored together in a
# round and so the spread of the per-token differences. A good answer quotes the AUCs of both
# runs from the claims/metrics, names the direction of the change, and notes that with a dozen
# members and non-members per run one swapped pair moves the AUC by several points, so a
# difference of that size is inside the noise; a convincing comparison needs the cpu profile
# or several seeds (`-p seed`).

# %% [raw]
# # END SOLUTION

# %% [raw]
# # END QUESTION
