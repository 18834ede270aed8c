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
# name: 02_sde
# init_cell: true
# check_all_cell: false
# export_cell: false
# run_tests: false
# solutions_pdf: false
# show_question_points: true
# generate:
#   show_stdout: true

# %% [markdown]
# # Exercises: split-half dependence (Chapter 2)
#
# These exercises go with the chapter *Split-half dependence evaluation of unlearning*.
# SDE asks whether a subset of samples was trained on by measuring how *dependent* two
# random halves of the subset's model outputs are, with the Hilbert-Schmidt independence
# criterion (HSIC), and comparing that dependence distribution with two references. You
# rebuild each piece by hand and check it against `memlab.science.sde`.
#
# | # | exercise | level | graded | time |
# |---|---|---|---|---|
# | 2.1 | HSIC by hand | warm-up | auto | 10 min |
# | 2.2 | one shuffle in O(m²) | core | auto | 15 min |
# | 2.3 | the JSD decision rule | core | auto | 20 min |
# | 2.4 | re-run with other features | open | manual | 20 min |
#
# Every cell runs in seconds on one CPU core. Run the cells in order; `grader.check("q…")`
# runs the public tests of a question (the grader also runs hidden ones).

# %%
import numpy as np

from memlab.science import sde

SEED = 0  # per-student: your instructor may give you another seed
STUDENT = ""  # per-student: your id from your instructor (empty: your login name)
rng = np.random.default_rng(SEED)
x = rng.normal(size=(40, 3))
y = x[:, :2] + 0.5 * rng.normal(size=(40, 2))  # y depends on x

# %% [raw]
# # BEGIN QUESTION
# name: q1
# points: 2

# %% [markdown]
# **Exercise 2.1 (warm-up): HSIC by hand.** Write `hsic_by_hand(x, y)` for paired samples
# `x` of shape (n, d_x) and `y` of shape (n, d_y): build the Gaussian RBF Gram matrices
# $K_{ij} = \exp(-\lVert x_i - x_j\rVert^2 / 2\sigma_x^2)$ and $L$ likewise, with
# $\sigma = \sqrt{d}$ by default, form the centring matrix $H = I - \tfrac1n \mathbf 1
# \mathbf 1^\top$ explicitly, and return $\operatorname{tr}(KHLH) / (n-1)^2$ as a float.
#
# *Hint:* `scipy.spatial.distance.cdist(x, x, "sqeuclidean")` gives the squared distances.
# Do not call `sde.hsic` or `sde.center` inside your function.
#
# *Expected:* `hsic_by_hand(x, y)` agrees with `sde.hsic(x, y)` to 1e-8 (about 0.042 at
# `SEED = 0`), and `hsic_by_hand(x, x[::-1])` (pairs broken) is about a fifth of
# `hsic_by_hand(x, x)` (perfectly paired).

# %%
from scipy.spatial.distance import cdist

# %% [raw]
# # BEGIN SOLUTION

# %%
def hsic_by_hand(x, y, sigma_x=None, sigma_y=None):
    """Biased HSIC trace(K H L H) / (n-1)^2 of x (n, d_x) and y (n, d_y)."""
    # BEGIN SOLUTION
    x = np.asarray(x, dtype=float).reshape(len(x), -1)
    y = np.asarray(y, dtype=float).reshape(len(y), -1)
    n = len(x)
    sx = np.sqrt(x.shape[1]) if sigma_x is None else sigma_x
    sy = np.sqrt(y.shape[1]) if sigma_y is None else sigma_y
    k = np.exp(-cdist(x, x, "sqeuclidean") / (2 * sx**2))
    l = np.exp(-cdist(y, y, "sqeuclidean") / (2 * sy**2))
    h = np.eye(n) - np.ones((n, n)) / n
    return float(np.trace(k @ h @ l @ h) / (n - 1) ** 2)
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %%
print("by hand:", hsic_by_hand(x, y), " memlab:", sde.hsic(x, y))

# %% [raw]
# # BEGIN TESTS

# %%
assert isinstance(hsic_by_hand(x, y), float)

# %%
assert abs(hsic_by_hand(x, y) - sde.hsic(x, y)) < 1e-8

# %%
""" # BEGIN TEST CONFIG
hidden: true
failure_message: >-
  hsic_by_hand disagrees with sde.hsic on other data and bandwidths; are both Gram
  matrices centred with H, and are sigma_x and sigma_y used when given?
"""  # END TEST CONFIG
_r = np.random.default_rng(7)
_a, _b = _r.normal(size=(25, 4)), _r.normal(size=(25, 1))
assert abs(hsic_by_hand(_a, _b) - sde.hsic(_a, _b)) < 1e-8
assert abs(hsic_by_hand(_a, _a**2, 0.7, 3.0) - sde.hsic(_a, _a**2, 0.7, 3.0)) < 1e-8
assert hsic_by_hand(_a, _a) > 2 * hsic_by_hand(_a, _r.normal(size=(25, 4)))

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [raw]
# # BEGIN QUESTION
# name: q2
# points: 2

# %% [markdown]
# **Exercise 2.2 (core): one shuffle in O(m²).** `sde.split_half_dependence` computes
# HSIC between a half $S_1$ and 200 random re-orderings of the other half $S_2$. Rebuilding
# both kernels for every re-ordering costs O(m³); the library computes the two *centred*
# Gram matrices $\tilde K = HKH$, $\tilde L = HLH$ once. Write `shuffled_hsic(kc, lc, perm)`
# that returns HSIC$(S_1, S_2[\text{perm}])$ from `kc` $=\tilde K$, `lc` $=\tilde L$ (both
# (m, m)) and an index permutation `perm`, with no kernel evaluation and no matrix product.
#
# *Hint:* re-ordering the samples of $S_2$ by `perm` permutes the rows *and* the columns of
# $L$ (and of $\tilde L$, because $H$ commutes with permutations); and for symmetric
# matrices $\operatorname{tr}(AB) = \sum_{ij} A_{ij} B_{ij}$.
#
# *Expected:* `shuffled_hsic(kc, lc, perm)` equals `sde.hsic(s1, s2[perm])` to 1e-10.

# %%
s1, s2 = x[:20], y[:20]
kc = sde.center(sde.rbf_kernel(s1, np.sqrt(s1.shape[1])))
lc = sde.center(sde.rbf_kernel(s2, np.sqrt(s2.shape[1])))
perm = np.random.default_rng(SEED + 1).permutation(20)

# %% [raw]
# # BEGIN SOLUTION

# %%
def shuffled_hsic(kc, lc, perm):
    """HSIC of S1 and S2[perm] from the centred Gram matrices kc, lc (m, m)."""
    # BEGIN SOLUTION
    m = len(kc)
    return float(np.sum(kc * lc[np.ix_(perm, perm)]) / (m - 1) ** 2)
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %%
print("shuffle trick:", shuffled_hsic(kc, lc, perm), " direct:", sde.hsic(s1, s2[perm]))

# %% [raw]
# # BEGIN TESTS

# %%
assert abs(shuffled_hsic(kc, lc, perm) - sde.hsic(s1, s2[perm])) < 1e-10

# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG
_r = np.random.default_rng(11)
_u, _v = _r.normal(size=(16, 2)), _r.normal(size=(16, 5))
_ku = sde.center(sde.rbf_kernel(_u, np.sqrt(2)))
_lv = sde.center(sde.rbf_kernel(_v, np.sqrt(5)))
for _p in (_r.permutation(16), np.arange(16), _r.permutation(16)):
    assert abs(shuffled_hsic(_ku, _lv, _p) - sde.hsic(_u, _v[_p])) < 1e-10

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [raw]
# # BEGIN QUESTION
# name: q3
# points: 3

# %% [markdown]
# **Exercise 2.3 (core): the JSD decision rule.** SDE judges a target subset from three
# dependence distributions (target, in-training reference, out-of-training reference; each
# an array of HSIC values). Implement `decide_by_hand(target, in_ref, out_ref, n_bins=30)`
# returning `True` when the target is judged **out of training** (forgotten):
#
# 1. histogram the three samples on `n_bins` equal-width bins spanning their pooled range
#    (if all values are equal, use the single range [v - 0.5, v + 0.5]);
# 2. compute the Jensen-Shannon divergence in bits, $\mathrm{JSD}(P, Q)$, of the target's
#    normalised histogram with each reference's;
# 3. the target is out when JSD(target, out) < JSD(target, in); when the two are equal
#    (to 1e-12, e.g. both saturated at 1 bit) the reference with the nearer *median* wins.
#
# *Hint:* `scipy.spatial.distance.jensenshannon(p, q, base=2)` returns the JS *distance*,
# the square root of the divergence.
#
# *Expected:* your decision equals `sde.decide(...)["out"]` on every case below, including
# the two saturated ones (targets that overlap neither reference).

# %%
from scipy.spatial.distance import jensenshannon

# Stand-ins for the chapter's distributions: the in-training reference is more dependent.
h_in = sde.split_half_dependence(rng.normal(size=(24, 3)), n_shuffles=50, seed=SEED)
h_out = sde.split_half_dependence(0.3 * rng.normal(size=(24, 3)), n_shuffles=50,
                                  seed=SEED + 1)
cases = {
    "in-like": h_in + 0.001 * rng.normal(size=50),
    "out-like": h_out[::-1].copy(),
    "far above both": h_in + 10.0,
    "far below both": h_out - 10.0,
}

# %% [raw]
# # BEGIN SOLUTION

# %%
def decide_by_hand(target, in_ref, out_ref, n_bins=30):
    """True when the target dependence distribution is judged out-of-training."""
    # BEGIN SOLUTION
    pooled = np.concatenate([target, in_ref, out_ref])
    lo, hi = float(pooled.min()), float(pooled.max())
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    edges = np.linspace(lo, hi, n_bins + 1)

    def hist(v):
        c, _ = np.histogram(v, bins=edges)
        return c / c.sum()

    t = hist(target)
    d_out = jensenshannon(t, hist(out_ref), base=2) ** 2
    d_in = jensenshannon(t, hist(in_ref), base=2) ** 2
    if abs(d_out - d_in) <= 1e-12:
        m = np.median(target)
        return bool(abs(m - np.median(out_ref)) < abs(m - np.median(in_ref)))
    return bool(d_out < d_in)
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %%
for name, t in cases.items():
    print(f"{name:>15}: by hand {decide_by_hand(t, h_in, h_out)}",
          f" memlab {sde.decide(t, h_in, h_out)['out']}")

# %% [raw]
# # BEGIN TESTS

# %%
assert decide_by_hand(cases["in-like"], h_in, h_out) is False
assert decide_by_hand(cases["out-like"], h_in, h_out) is True

# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG
for _t in cases.values():
    assert decide_by_hand(_t, h_in, h_out) == sde.decide(_t, h_in, h_out)["out"]
    assert decide_by_hand(_t, h_in, h_out, 7) == sde.decide(_t, h_in, h_out, 7)["out"]
assert decide_by_hand(h_out - 10.0, h_in, h_out) is True
assert decide_by_hand(h_in + 10.0, h_in, h_out) is False

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
# **Exercise 2.4 (open, manually graded): which features carry the signal?** The chapter's
# SDE reads the model's logits. Re-run the chapter at the smoke profile (about a minute) with
# the penultimate-layer features instead, from a terminal in your course folder (the
# student bundle or a clone of the repository). The cell below prints the commands, which
# write into your own folder `RUNS` (`~/memlab-runs/<your id>/`):
#
# ```bash
# memlab run 02_sde --profile smoke -p feature penultimate --book-dir <RUNS>/ex02
# ```
#
# and once more with `-p feature logits` into `<RUNS>/ex02-logits`. Compare the two runs' F1
# of SDE (`metrics["f1"]`) and their claims table (the cell below prints both when the runs
# exist). In 4-6 sentences: which depth separates in- from out-of-training subsets better
# here, and why might dependence between two halves be easier to see in one
# representation than in the other? Is the difference outside the noise a smoke-size run
# can show (how many target subsets does it judge)?

# %%
import json

from memlab.course.exercises import runs_dir

RUNS = runs_dir(STUDENT)  # your own folder for runs: students sharing a server never share it
for feature, run_dir in (("penultimate", RUNS / "ex02"), ("logits", RUNS / "ex02-logits")):
    print(f"memlab run 02_sde --profile smoke -p feature {feature} --book-dir {run_dir}")
for run_dir in (RUNS / "ex02", RUNS / "ex02-logits"):
    path = run_dir / "results" / "02_sde.json"
    if not path.exists():
        print(f"{path}: not there yet (run the command above)")
        continue
    res = json.loads(path.read_text())
    print(run_dir, "feature:", res["params"].get("feature"))
    print("    F1:", res["metrics"].get("f1"))
    print("    metrics (res[\"metrics\"]):", ", ".join(sorted(res["metrics"])))
    for claim in res["claims"]:
        print("   ", claim.get("verdict"), "-", str(claim.get("claim", ""))[:80])

# %% [raw]
# # BEGIN SOLUTION

# %% [markdown]
# *Sample answer (the grader's guide).* A full answer reads both F1 tables, says which
# feature gives the higher F1 and by how much, and notes that at the smoke profile only a
# few target subsets per setting are judged, so one flipped decision moves F1 by a large
# step: a difference of one or two subsets is not evidence. The mechanism: logits are
# low-dimensional and directly shaped by the training loss, so the samples a model was
# trained on share a confident, tightly clustered output pattern whose Gram matrix has
# strong structure, which raises split-half HSIC; penultimate features are
# higher-dimensional with the default bandwidth sigma = sqrt(d), which smooths the kernel
# and can wash the dependence out. Full marks need the numbers, the direction and the
# noise caveat.

# %% [raw]
# # END SOLUTION

# %% [raw]
# # END QUESTION
