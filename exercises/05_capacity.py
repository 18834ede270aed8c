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
# name: 05_capacity
# init_cell: true
# check_all_cell: false
# export_cell: false
# run_tests: false
# solutions_pdf: false
# show_question_points: true
# generate:
#   show_stdout: true

# %% [markdown]
# # Exercises: memorization capacity (Chapter 5)
#
# These exercises go with the chapter *How much do language models memorize?*. The paper
# measures memorisation in bits: the code length of a sample under a reference minus its
# code length under the trained model. On uniformly random tokens nothing can be
# generalised, so everything a model saves is memorised, and the plateau of the total over
# data set sizes is the model's *capacity*, about $\alpha \approx 3.6$ bits per parameter.
# You compute code lengths, fit $\alpha$ with an interval and predict where a model fills up.
#
# | # | exercise | level | graded | time |
# |---|---|---|---|---|
# | 5.1 | code length in bits | warm-up | auto | 10 min |
# | 5.2 | bits per parameter, with an interval | core | auto | 20 min |
# | 5.3 | when is a model full? | core | auto | 15 min |
# | 5.4 | re-run with another seed | open | manual | 25 min |
#
# Every cell runs in seconds on one CPU core. Run the cells in order; `grader.check("q…")`
# runs the public tests of a question (the grader also runs hidden ones).

# %%
import math

import numpy as np

from memlab.science import capacity, metrics

SEED = 0  # per-student: your instructor may give you another seed
STUDENT = ""  # per-student: your id from your instructor (empty: your login name)
rng = np.random.default_rng(SEED)
V, S = 16, 8  # vocabulary size and tokens per sequence
ids = rng.integers(0, V, size=S)
logits = rng.normal(size=(S, V))
# (S, V) natural-log probabilities: each row sums to 1 in probability
log_probs = logits - np.log(np.exp(logits).sum(1, keepdims=True))

# %% [raw]
# # BEGIN QUESTION
# name: q1
# points: 2

# %% [markdown]
# **Exercise 5.1 (warm-up): code length in bits.** An arithmetic coder driven by a model
# spends $-\log_2 p(x_i \mid x_{<i})$ bits on token $i$. Write
# `code_length_by_hand(log_probs, ids)` for natural-log probabilities `log_probs` of shape
# (L, V) (row $i$ is the distribution of token $i$) and tokens `ids` of shape (L,). A model
# without a start token has no distribution for token 0: then `log_probs` has L - 1 rows
# (row $j$ is the distribution of token $j + 1$) and token 0 costs $\log_2 V$ bits.
#
# *Hint:* `log_probs[np.arange(n), ids]` picks each token's log-probability; divide nats
# by $\ln 2$ for bits.
#
# *Expected:* equal to `capacity.code_length_bits(log_probs, ids)` to 1e-9, in both layouts;
# a uniform model codes the sequence in exactly $S \log_2 V$ bits
# (`capacity.uniform_entropy_bits(S, V)`, 32 bits here).

# %% [raw]
# # BEGIN SOLUTION

# %%
def code_length_by_hand(log_probs, ids):
    """Bits to code ids (L,) under log_probs (L, V) or (L - 1, V) in nats."""
    # BEGIN SOLUTION
    lp = np.asarray(log_probs, dtype=float)
    ids = np.asarray(ids)
    first = 0.0
    if len(lp) == len(ids) - 1:
        first, ids = math.log2(lp.shape[1]), ids[1:]
    return float(first - lp[np.arange(len(ids)), ids].sum() / math.log(2))
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %%
print("by hand:", code_length_by_hand(log_probs, ids),
      " memlab:", capacity.code_length_bits(log_probs, ids))

# %% [raw]
# # BEGIN TESTS

# %%
_want = capacity.code_length_bits(log_probs, ids)
assert abs(code_length_by_hand(log_probs, ids) - _want) < 1e-9

# %%
_uniform = np.full((S, V), -math.log(V))
_want = capacity.uniform_entropy_bits(S, V)
assert abs(code_length_by_hand(_uniform, ids) - _want) < 1e-9

# %%
""" # BEGIN TEST CONFIG
hidden: true
failure_message: >-
  wrong code length when log_probs has L - 1 rows (no start token); row j is the
  distribution of token j + 1, and token 0 costs log2 V bits
"""  # END TEST CONFIG
_lp = log_probs[1:]
assert abs(code_length_by_hand(_lp, ids) - capacity.code_length_bits(_lp, ids)) < 1e-9
_r = np.random.default_rng(3)
_l = _r.normal(size=(20, 50))
_l = _l - np.log(np.exp(_l).sum(1, keepdims=True))
_t = _r.integers(0, 50, size=20)
assert abs(code_length_by_hand(_l, _t) - capacity.code_length_bits(_l, _t)) < 1e-9
_want = capacity.code_length_bits(_l[:19], _t)
assert abs(code_length_by_hand(_l[:19], _t) - _want) < 1e-9

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [raw]
# # BEGIN QUESTION
# name: q2
# points: 3

# %% [markdown]
# **Exercise 5.2 (core): bits per parameter, with an interval.** Below are the capacities
# (bits) measured for six model sizes (parameters). The paper fits
# $\text{capacity} = \alpha \cdot \text{params}$ through the origin. Write
#
# * `fit_alpha_by_hand(params, bits)`: the least-squares $\alpha$ through the origin (float);
# * `alpha_interval(params, bits, n_boot=2000, seed=SEED)`: a 95% percentile bootstrap
#   interval `(lo, hi)` of $\alpha$ that resamples whole *models* (pairs), using
#   `metrics.bootstrap_ci` on the (M, 2) array of pairs with your fit as the statistic.
#
# *Hint:* minimise $\sum_m (c_m - \alpha p_m)^2$ over $\alpha$.
#
# *Expected:* your $\alpha$ equals `capacity.fit_alpha(params, bits)["alpha"]` (about 3.64 at
# `SEED = 0`); the interval contains it and is a few tenths wide; on exact data
# (`bits = 3.6 * params`) the interval shrinks to the single value 3.6.

# %%
params = np.array([6_600, 15_000, 26_000, 58_000, 100_000, 180_000], dtype=float)
bits = 3.6 * params * (1 + 0.08 * rng.normal(size=params.size))

# %% [raw]
# # BEGIN SOLUTION

# %%
def fit_alpha_by_hand(params, bits):
    """Least-squares slope through the origin of bits against params (bits/param)."""
    # BEGIN SOLUTION
    p, c = np.asarray(params, dtype=float), np.asarray(bits, dtype=float)
    return float(p @ c / (p @ p))
    # END SOLUTION


def alpha_interval(params, bits, n_boot=2000, seed=SEED):
    """95% pairs-bootstrap interval (lo, hi) of alpha."""
    # BEGIN SOLUTION
    pairs = np.column_stack([params, bits])
    return metrics.bootstrap_ci(pairs, lambda a: fit_alpha_by_hand(a[:, 0], a[:, 1]),
                                n_boot=n_boot, seed=seed)
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %%
print("alpha:", fit_alpha_by_hand(params, bits))
print("interval:", alpha_interval(params, bits))

# %% [raw]
# # BEGIN TESTS

# %%
_want = capacity.fit_alpha(params, bits)["alpha"]
assert abs(fit_alpha_by_hand(params, bits) - _want) < 1e-9

# %%
_lo, _hi = alpha_interval(params, bits)
assert _lo < fit_alpha_by_hand(params, bits) < _hi and _hi - _lo < 1.0

# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG
_lo, _hi = alpha_interval(params, 3.6 * params)
assert abs(_lo - 3.6) < 1e-9 and abs(_hi - 3.6) < 1e-9
_pairs = np.column_stack([params, bits])
_stat = lambda a: float(a[:, 0] @ a[:, 1] / (a[:, 0] @ a[:, 0]))  # noqa: E731
_ref = metrics.bootstrap_ci(_pairs, _stat, n_boot=500, seed=4)
_mine = alpha_interval(params, bits, n_boot=500, seed=4)
assert np.allclose(_mine, _ref, rtol=0, atol=1e-9)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [raw]
# # BEGIN QUESTION
# name: q3
# points: 2

# %% [markdown]
# **Exercise 5.3 (core): when is a model full?** A data set of $N$ uniform sequences of $S$
# tokens over $V$ symbols holds $H = N S \log_2 V$ bits; a model of capacity $C = \alpha P$
# memorises $\min(C, H)$ of them (`capacity.expected_memorization`). Write
# `n_full(alpha, n_params, seq_len, vocab_size)`: the data set size $N^*$ (a float) at which
# the model is exactly full. Then store in `n_star` the value for the paper's setting:
# $P = 100\,000$ parameters, $\alpha = 3.6$, $V = 2048$, $S = 64$.
#
# *Hint:* solve $N S \log_2 V = \alpha P$ for $N$; `capacity.uniform_entropy_bits(S, V)` is
# $S \log_2 V$.
#
# *Expected:* $N^* \approx 511$ sequences; below it the expected memorisation grows linearly
# with $N$, above it it stays at $C$.

# %% [raw]
# # BEGIN SOLUTION

# %%
def n_full(alpha, n_params, seq_len, vocab_size):
    """Data set size N* (sequences) at which alpha * n_params bits are used up."""
    # BEGIN SOLUTION
    return float(alpha * n_params / capacity.uniform_entropy_bits(seq_len, vocab_size))
    # END SOLUTION


n_star = n_full(3.6, 100_000, 64, 2048)  # SOLUTION

# %% [raw]
# # END SOLUTION

# %%
print("N* =", n_star)

# %% [raw]
# # BEGIN TESTS

# %%
assert isinstance(n_star, float) and abs(n_star - 3.6e5 / (64 * 11)) < 1e-6

# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG
_n = n_full(1.3, 32_672, 16, 32)
_c = 1.3 * 32_672
_h = lambda n: n * capacity.uniform_entropy_bits(16, 32)
assert abs(_h(_n) - _c) < 1e-6
assert capacity.expected_memorization(_c, _h(0.5 * _n)) < _c
assert capacity.expected_memorization(_c, _h(2 * _n)) == _c

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
# **Exercise 5.4 (open, manually graded): how stable is $\alpha$?** Re-run the chapter at
# the smoke profile twice with two seeds (about a minute each), from a terminal in your
# course folder (the student bundle or a clone of the repository). The cell below prints the
# commands, which write into your own folder `RUNS` (`~/memlab-runs/<your id>/`):
#
# ```bash
# memlab run 05_capacity --profile smoke -p seed 0 --book-dir <RUNS>/ex05-s0
# memlab run 05_capacity --profile smoke -p seed 1 --book-dir <RUNS>/ex05-s1
# ```
#
# It then prints each run's $\alpha$ and claims. In 4-6 sentences: how much does
# $\alpha$ move between the seeds, how does that compare with your bootstrap interval of
# exercise 5.2, and why is a smoke-size $\alpha$ far below 3.6 (think of what the plateau
# rule and the tiny `max_steps` of the smoke profile do to the largest models)?

# %%
import json

from memlab.course.exercises import runs_dir

RUNS = runs_dir(STUDENT)  # your own folder for runs: students sharing a server never share it
for s in (0, 1):
    print(f"memlab run 05_capacity --profile smoke -p seed {s} --book-dir {RUNS / f'ex05-s{s}'}")
for run_dir in (RUNS / "ex05-s0", RUNS / "ex05-s1"):
    path = run_dir / "results" / "05_capacity.json"
    if not path.exists():
        print(f"{path}: not there yet (run the commands above)")
        continue
    res = json.loads(path.read_text())
    print(run_dir, "seed", res["params"].get("seed"), "alpha",
          res["metrics"].get("alpha"))
    print("    metrics (res[\"metrics\"]):", ", ".join(sorted(res["metrics"])))
    for claim in res["claims"]:
        print("   ", claim.get("verdict"), "-", str(claim.get("claim", ""))[:80])

# %% [raw]
# # BEGIN SOLUTION

# %% [markdown]
# *Sample answer (the grader's guide).* A good answer quotes both $\alpha$ values and their
# difference, and compares it with the width of the exercise-5.2 interval: the seed moves
# data, initialisation and batch order, so the between-seed spread is the honest error bar
# and a single run's number is not. At smoke size the models train for at most 40 steps,
# so the larger models stop long before their memorisation plateaus and the through-origin
# fit underestimates the bits per parameter; $\alpha$ near 3.6 needs training to
# convergence (the paper profile). Full marks need the numbers, the comparison with the
# interval and the convergence argument.

# %% [raw]
# # END SOLUTION

# %% [raw]
# # END QUESTION
