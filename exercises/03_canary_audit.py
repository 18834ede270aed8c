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
# name: 03_canary_audit
# init_cell: true
# check_all_cell: false
# export_cell: false
# run_tests: false
# solutions_pdf: false
# show_question_points: true
# generate:
#   show_stdout: true

# %% [markdown]
# # Exercises: auditing reasoning traces (Chapter 3)
#
# These exercises go with the chapter *Auditing reasoning-trace memorization after
# unlearning*. A reasoning model writes `<think> trace </think> answer`. After unlearning
# (NPO on the answers), a canary may vanish from the answer but still come back in the
# trace: the *bypass gap* is the share of probes leaking the canary in the trace minus the
# share giving it in the answer. You parse traces, see how a parser convention can flip the
# gap's sign, and rebuild the answer-masked NPO loss and its gradient.
#
# | # | exercise | level | graded | time |
# |---|---|---|---|---|
# | 3.1 | splitting a generation | warm-up | auto | 10 min |
# | 3.2 | the bypass gap and the parser flip | core | auto | 15 min |
# | 3.3 | answer-masked sequence log-probability | core | auto | 20 min |
# | 3.4 | the NPO gradient, checked against autograd | core | auto | 20 min |
# | 3.5 | re-run with another NPO temperature | open | manual | 30 min |
#
# Every cell runs in seconds on one CPU core. Run the cells in order; `grader.check("q…")`
# runs the public tests of a question (the grader also runs hidden ones).

# %%
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn

from memlab.models import lm
from memlab.science import canaries
from memlab.science.unlearning import npo

torch.set_num_threads(1)
SEED = 0  # per-student: your instructor may give you another seed
STUDENT = ""  # per-student: your id from your instructor (empty: your login name)
torch.manual_seed(SEED)
CANARY = "Zq-7741 lives on Mirrow Lane"

# %% [raw]
# # BEGIN QUESTION
# name: q1
# points: 2

# %% [markdown]
# **Exercise 3.1 (warm-up): splitting a generation.** Write `split_by_hand(text,
# missing="trace")` returning `(trace, answer)`: strip leading whitespace and one leading
# `<think>`, then split at the *first* `</think>`. When the closing tag is absent, the whole
# remaining text goes to the field named by `missing` (`"trace"` or `"answer"`) and the other
# field is the empty string.
#
# *Hint:* `str.partition("</think>")` splits at the first occurrence and tells you whether
# the tag was found.
#
# *Expected:* equal to `canaries.split_trace(text, missing=missing)` on every text in
# `texts` below, for both conventions.

# %%
texts = [
    f"<think>I recall {CANARY}.</think> I cannot share that.",
    f"<think>Let me think. {CANARY} is what I know",  # the model never closed its trace
    f"  <think>no idea</think> {CANARY}",
    "plain answer, no tags at all",
    f"<think>a</think>b</think> {CANARY}",  # only the first closing tag splits
]

# %% [raw]
# # BEGIN SOLUTION

# %%
def split_by_hand(text, missing="trace"):
    """(trace, answer) of a generation at the first </think>."""
    # BEGIN SOLUTION
    body = text.lstrip()
    if body.startswith("<think>"):
        body = body[len("<think>"):]
    head, tag, tail = body.partition("</think>")
    if not tag:
        return (body, "") if missing == "trace" else ("", body)
    return head, tail
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %%
for t in texts:
    print(repr(split_by_hand(t)), "|", repr(canaries.split_trace(t)))

# %% [raw]
# # BEGIN TESTS

# %%
assert all(split_by_hand(t) == canaries.split_trace(t) for t in texts)

# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG
for _t in texts + ["", "<think>", "</think>x", " <think><think>y"]:
    for _m in ("trace", "answer"):
        _want = canaries.split_trace(_t, missing=_m)
        assert split_by_hand(_t, missing=_m) == _want, (_t, _m)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [raw]
# # BEGIN QUESTION
# name: q2
# points: 2

# %% [markdown]
# **Exercise 3.2 (core): the bypass gap and the parser flip.** For the four probe outputs
# below (all for the same canary), compute the bypass gap
# $\text{gap} = \overline{\text{thk}} - \overline{\text{out}}$ (share of outputs whose trace
# contains the full canary minus share whose answer does) under each parser convention, with
# `canaries.score_outputs(outputs, [CANARY] * 4, missing=...)`. Store the two gaps in
# `gap = {"trace": ..., "answer": ...}` (floats) and set `flips` to whether their signs
# differ.
#
# *Hint:* `score_outputs` returns boolean arrays `"out"` and `"thk"`; the mean of a boolean
# array is a share.
#
# *Expected:* the two outputs without a closing tag decide the sign: the gap is +0.5 with one
# convention and -0.5 with the other. A paper that reports a positive bypass gap must say
# which convention it used.

# %%
outputs = [
    f"<think>I remember: {CANARY}</think> I cannot help with that.",
    f"<think>the record says {CANARY}",
    f"<think>hmm... {CANARY} and then",
    f"<think>I should not say it</think> Fine: {CANARY}",
]

# %% [raw]
# # BEGIN SOLUTION

# %%
gap = {"trace": None, "answer": None}
# BEGIN SOLUTION
for conv in ("trace", "answer"):
    s = canaries.score_outputs(outputs, [CANARY] * len(outputs), missing=conv)
    gap[conv] = float(s["thk"].mean() - s["out"].mean())
# END SOLUTION
flips = np.sign(gap["trace"]) != np.sign(gap["answer"])  # SOLUTION

# %% [raw]
# # END SOLUTION

# %%
print(gap, "flips:", flips)

# %% [raw]
# # BEGIN TESTS

# %%
assert all(isinstance(v, float) for v in gap.values()) and bool(flips) in (True, False)

# %%
assert abs(gap["trace"] - 0.5) < 1e-12 and abs(gap["answer"] + 0.5) < 1e-12

# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG
assert bool(flips) is True
_s = canaries.parser_flip(outputs, [CANARY] * 4, np.arange(4), n_boot=50)
assert all(abs(gap[_c] - _s[_c]["gap"]["mean"]) < 1e-12 for _c in ("trace", "answer"))

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [raw]
# # BEGIN QUESTION
# name: q3
# points: 3

# %% [markdown]
# **Exercise 3.3 (core): answer-masked sequence log-probability.** NPO in this audit forgets
# the *answers* only: the loss mask marks the answer tokens. For a causal LM, token $t$ is
# predicted from the logits at position $t - 1$. Write `masked_logprob(logits, ids, mask)`
# for logits (B, T, V), token ids (B, T) and a boolean mask (B, T), returning the (B,)
# tensor $\sum_{t \ge 1} \text{mask}_{b,t} \log \operatorname{softmax}(\text{logits}_{b,t-1})
# [\text{ids}_{b,t}]$ (token 0 is never a target: it has no prefix).
#
# *Hint:* drop the last position of the logits and the first of the ids, then
# `torch.log_softmax(..., -1).gather(-1, ...)` picks each target's log-probability.
#
# *Expected:* equal to `lm.sequence_logprob(model, ids, att, mask)` to 1e-5 for the tiny
# model below, and 0 for an all-False mask.

# %%
class TinyLM(nn.Module):
    """A previous-token LM: logits (B, T, V) from an embedding and a linear head."""

    def __init__(self, vocab=11, dim=8):
        super().__init__()
        self.emb, self.head = nn.Embedding(vocab, dim), nn.Linear(dim, vocab)

    def forward(self, input_ids, attention_mask=None):
        return SimpleNamespace(logits=self.head(torch.tanh(self.emb(input_ids))))


model = TinyLM()
ids = torch.randint(0, 11, (3, 7))
att = torch.ones_like(ids)
answer_mask = torch.zeros(3, 7, dtype=torch.bool)
answer_mask[:, 4:] = True  # the last three tokens are the answer

# %% [raw]
# # BEGIN SOLUTION

# %%
def masked_logprob(logits, ids, mask):
    """(B,) sum of next-token log-probabilities over the masked target tokens."""
    # BEGIN SOLUTION
    logp = torch.log_softmax(logits[:, :-1].float(), -1)
    tok = logp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return (tok * mask[:, 1:]).sum(-1)
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %%
with torch.no_grad():
    print("by hand:", masked_logprob(model(ids).logits, ids, answer_mask))
    print("memlab: ", lm.sequence_logprob(model, ids, att, answer_mask))

# %% [raw]
# # BEGIN TESTS

# %%
with torch.no_grad():
    _mine = masked_logprob(model(ids).logits, ids, answer_mask)
    _ref = lm.sequence_logprob(model, ids, att, answer_mask)
assert _mine.shape == (3,) and torch.allclose(_mine, _ref, atol=1e-5)

# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG
_ids = torch.randint(0, 11, (4, 9), generator=torch.Generator().manual_seed(2))
_mask = torch.rand(4, 9, generator=torch.Generator().manual_seed(3)) > 0.5
with torch.no_grad():
    _a = masked_logprob(model(_ids).logits, _ids, _mask)
    _b = lm.sequence_logprob(model, _ids, torch.ones_like(_ids), _mask)
    _z = masked_logprob(model(_ids).logits, _ids, torch.zeros_like(_mask))
assert torch.allclose(_a, _b, atol=1e-5) and torch.all(_z == 0)

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [raw]
# # BEGIN QUESTION
# name: q4
# points: 3

# %% [markdown]
# **Exercise 3.4 (core): the NPO gradient.** The NPO loss of a batch of $B$ forget answers
# with log-probabilities $\ell_i$ (current model) and $r_i$ (the model before unlearning) is
#
# $$\mathcal L = -\frac{2}{\beta}\,\frac1B \sum_i \log\sigma\big(-\beta(\ell_i - r_i)\big)
# \qquad (\texttt{npo.npo\_loss}).$$
#
# Derive $\partial\mathcal L / \partial \ell_i$ by hand and write `npo_grad_by_hand(logp, ref,
# beta)` returning it as a (B,) tensor, without autograd.
#
# *Hint:* $\frac{d}{dz}\log\sigma(z) = \sigma(-z)$.
#
# *Expected:* equal to the autograd gradient of `npo.npo_loss(logp, ref, beta)` to 1e-6. At
# $\ell = r$ every entry is $1/B$; as $\ell_i$ falls far below $r_i$ the gradient vanishes —
# NPO stops pushing an answer that is already forgotten, unlike gradient ascent, whose
# gradient is a constant $1/B$.

# %%
beta = 0.1
ref_logp = torch.tensor([-12.0, -30.0, -8.0, -15.0])
logp = ref_logp + torch.tensor([0.0, -5.0, -60.0, 3.0])

# %% [raw]
# # BEGIN SOLUTION

# %%
def npo_grad_by_hand(logp, ref, beta):
    """d npo_loss / d logp, shape (B,)."""
    # BEGIN SOLUTION
    return 2.0 / len(logp) * torch.sigmoid(beta * (logp - ref))
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %%
_x = logp.clone().requires_grad_(True)
npo.npo_loss(_x, ref_logp, beta).backward()
print("by hand:", npo_grad_by_hand(logp, ref_logp, beta), "\nautograd:", _x.grad)

# %% [raw]
# # BEGIN TESTS

# %%
_x = logp.clone().requires_grad_(True)
npo.npo_loss(_x, ref_logp, beta).backward()
assert torch.allclose(npo_grad_by_hand(logp, ref_logp, beta), _x.grad, atol=1e-6)

# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG
for _beta in (0.05, 1.0, 4.0):
    _l = torch.randn(6, generator=torch.Generator().manual_seed(8)) * 5 - 20
    _r = _l + torch.randn(6, generator=torch.Generator().manual_seed(9)) * 3
    _v = _l.clone().requires_grad_(True)
    npo.npo_loss(_v, _r, _beta).backward()
    assert torch.allclose(npo_grad_by_hand(_l, _r, _beta), _v.grad, atol=1e-6)
assert torch.allclose(npo_grad_by_hand(ref_logp, ref_logp, 0.3), torch.full((4,), 0.25))

# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [raw]
# # BEGIN QUESTION
# name: q5
# manual: true
# points: 4

# %% [markdown]
# **Exercise 3.5 (open, manually graded): a hotter NPO.** The chapter unlearns with
# $\beta = 0.1$. Re-run it at the smoke profile with $\beta = 1$ (a few minutes on one
# core), next to a default run, from a terminal in your course folder (the student bundle
# or a clone of the repository). The cell below prints the commands, which write into your
# own folder `RUNS` (`~/memlab-runs/<your id>/`):
#
# ```bash
# memlab run 03_canary_audit --profile smoke --book-dir <RUNS>/ex03
# memlab run 03_canary_audit --profile smoke -p beta 1.0 --book-dir <RUNS>/ex03-beta1
# ```
#
# It then prints both runs' claims. In 5-8 sentences: how do the answer accuracy, the
# trace leak and the bypass gap change along the K sweep with the larger $\beta$? Use
# exercise 3.4's gradient to explain how $\beta$ decides when NPO stops pushing an answer
# down. Does the parser convention (exercise 3.2) change any of your conclusions, and is the
# difference between the runs outside the bootstrap intervals the chapter reports?

# %%
import json

from memlab.course.exercises import runs_dir

RUNS = runs_dir(STUDENT)  # your own folder for runs: students sharing a server never share it
print(f"memlab run 03_canary_audit --profile smoke --book-dir {RUNS / 'ex03'}")
print(f"memlab run 03_canary_audit --profile smoke -p beta 1.0 --book-dir {RUNS / 'ex03-beta1'}")
for run_dir in (RUNS / "ex03", RUNS / "ex03-beta1"):
    path = run_dir / "results" / "03_canary_audit.json"
    if not path.exists():
        print(f"{path}: not there yet (run the commands above)")
        continue
    res = json.loads(path.read_text())
    print(run_dir, "beta", res["params"].get("beta"))
    print("    metrics (res[\"metrics\"]):", ", ".join(sorted(res["metrics"])))
    for claim in res["claims"]:
        print("   ", claim.get("verdict"), "-", str(claim.get("claim", ""))[:80])

# %% [raw]
# # BEGIN SOLUTION

# %% [markdown]
# *Sample answer (the grader's guide).* The gradient $\frac2B\sigma(\beta(\ell_i - r_i))$
# halves once $\ell_i$ is about $1/\beta$ nats below the reference and vanishes a few
# multiples of $1/\beta$ further: with $\beta = 1$ NPO stops pushing an answer after a few
# nats, with $\beta = 0.1$ only after tens of nats, so the hotter NPO behaves less like
# gradient ascent and damages the model less, but may leave more of the canary reachable.
# A full answer quotes the answer accuracy, trace leak and gap at the audited K for both
# runs, states whether the gap's bootstrap intervals overlap (at smoke size, with a handful of
# authors, they usually do), and notes that the parser convention matters only for outputs
# without a closing tag, which the claims table counts separately.

# %% [raw]
# # END SOLUTION

# %% [raw]
# # END QUESTION
