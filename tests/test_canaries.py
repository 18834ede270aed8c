"""Probes of memlab.science.canaries on hand-made outputs and a tiny random model."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from memlab.science import canaries as C

CANARY = "Ada Varga's novel The Amber Tide of Calabar follows a river pilot."
HEAD = "Ada Varga's novel"


# ----------------------------------------------------------------------------- parser split

def test_split_trace_at_closing_tag():
    assert C.split_trace("<think>bio here</think>the answer") == ("bio here", "the answer")
    assert C.split_trace("bio</think>a</think>b") == ("bio", "a</think>b")  # first tag splits


@pytest.mark.parametrize("missing, expected", [("trace", ("no tag at all", "")), ("answer", ("", "no tag at all"))])
def test_split_trace_missing_tag_goes_where_told(missing, expected):
    assert C.split_trace("no tag at all", missing=missing) == expected


def test_split_trace_rejects_unknown_convention():
    with pytest.raises(ValueError, match="missing"):
        C.split_trace("x", missing="drop")


def test_containment_is_exact_and_needs_full_canary():
    assert C.contains(f"Sure. {CANARY} Done.", CANARY)
    assert not C.contains(HEAD, CANARY)  # a prefix echo is not the canary
    assert not C.contains(CANARY.lower(), CANARY)
    with pytest.raises(ValueError):
        C.contains("x", "")


def test_score_outputs_on_hand_made_generations():
    texts = [
        f"recall: {CANARY}</think>{CANARY}",  # both channels
        f"recall: {CANARY}</think>{HEAD}",  # bypass: trace only, answer is the question prefix
        f"nothing</think>{CANARY}",  # answer only
        "nothing</think>nothing",  # neither
        f"recall: {CANARY}",  # closing tag missing
    ]
    s = C.score_outputs(texts, [CANARY] * 5)
    assert s["out"].tolist() == [True, False, True, False, False]
    assert s["thk"].tolist() == [True, True, False, False, True]
    assert s["tag_missing"].tolist() == [False, False, False, False, True]
    s2 = C.score_outputs(texts, [CANARY] * 5, missing="answer")
    assert s2["out"].tolist()[-1] and not s2["thk"].tolist()[-1]
    with pytest.raises(ValueError):
        C.score_outputs(texts, [CANARY])


def test_parser_flip_reverses_gap_sign_when_tag_is_missing():
    # 8 outputs without a closing tag, 6 of them carrying the canary; 2 well-formed controls
    texts = [f"bio {CANARY}"] * 6 + ["no canary"] * 2 + [f"{CANARY}</think>no"] * 2
    flip = C.parser_flip(texts, [CANARY] * 10, np.arange(10), n_boot=200)
    assert flip["trace"]["gap"]["mean"] == pytest.approx((6 + 2) / 10)
    assert flip["answer"]["gap"]["mean"] == pytest.approx((2 - 6) / 10)
    assert flip["trace"]["tag_missing_rate"] == pytest.approx(0.8)


def test_anatomy_counts_prefix_only_bypass_cases():
    answers = [HEAD, f" {HEAD} ", "Something else", CANARY]
    out = [False, False, False, True]
    thk = [True, True, True, True]
    a = C.anatomy(answers, [HEAD] * 4, out, thk)
    assert a["n_bypass"] == 3 and a["n_both"] == 1
    assert a["share_prefix_only"] == pytest.approx(2 / 3)
    assert a["len_bypass"] == pytest.approx((len(HEAD) * 2 + len("Something else")) / 3)
    assert a["len_both"] == len(CANARY)
    assert np.isnan(C.anatomy(["x"], ["y"], [True], [True])["share_prefix_only"])


def test_split_head_checks_length():
    head, cont = C.split_head([5, 6, 7, 8], 3)
    assert head == [5, 6, 7] and cont == [8]
    for bad in (4, 9, 0):
        with pytest.raises(ValueError, match="head_len"):
            C.split_head([5, 6, 7, 8], bad)


# ----------------------------------------------------------------------------- bootstrap

def _reference_cluster_bootstrap(values, clusters, n_boot, level, seed):
    """Loop version: draw clusters, pool their probes, average (same random stream)."""
    labels = np.unique(clusters)
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(labels), size=(n_boot, len(labels)))
    means = []
    for row in pick:
        pooled = np.concatenate([values[clusters == labels[j]] for j in row])
        means.append(pooled.mean())
    alpha = (1 - level) / 2
    return tuple(np.quantile(means, [alpha, 1 - alpha]))


def test_cluster_bootstrap_matches_loop_reference_with_unequal_clusters():
    rng = np.random.default_rng(1)
    clusters = np.repeat(np.arange(12), rng.integers(1, 5, size=12))
    values = rng.random(len(clusters))
    got = C.cluster_bootstrap_ci(values, clusters, n_boot=500, level=0.9, seed=3)
    want = _reference_cluster_bootstrap(values, clusters, 500, 0.9, 3)
    assert got == pytest.approx(want)


def test_cluster_bootstrap_is_wider_when_probes_within_an_author_agree():
    rng = np.random.default_rng(0)
    author_value = rng.integers(0, 2, size=20).astype(float)
    values = np.repeat(author_value, 5)  # 5 identical probes per author
    by_author = C.cluster_bootstrap_ci(values, np.repeat(np.arange(20), 5), n_boot=4000)
    naive = C.cluster_bootstrap_ci(values, np.arange(100), n_boot=4000)
    assert (by_author[1] - by_author[0]) > 1.5 * (naive[1] - naive[0])


def test_cluster_bootstrap_closed_forms_and_errors():
    assert C.cluster_bootstrap_ci(np.full(10, 0.7), np.arange(10)) == pytest.approx((0.7, 0.7))
    low, high = C.cluster_bootstrap_ci(np.r_[np.zeros(30), np.ones(30)], np.arange(60), n_boot=2000)
    assert low < 0.5 < high
    with pytest.raises(ValueError):
        C.cluster_bootstrap_ci([], [])
    with pytest.raises(ValueError):
        C.cluster_bootstrap_ci([1.0, 2.0], [0])
    with pytest.raises(ValueError, match="level"):
        C.cluster_bootstrap_ci([1.0, 2.0], [0, 1], level=1.5)


def test_bypass_summary_gap_is_thk_minus_out():
    out = np.array([1, 0, 0, 1, 0], bool)
    thk = np.array([1, 1, 1, 0, 0], bool)
    s = C.bypass_summary(out, thk, np.arange(5), n_boot=300)
    assert s["gap"]["mean"] == pytest.approx(thk.mean() - out.mean())
    assert s["gap"]["low"] <= s["gap"]["mean"] <= s["gap"]["high"]


# ----------------------------------------------------------------------------- chat format and model probes

class CharCodec:
    """A one-character-per-token codec with whole-tag tokens (for exact span checks)."""

    TAGS = ("<|pad|>", "<|user|>", "<|assistant|>", "<think>", "</think>", "<|end|>")

    def encode(self, text):
        ids, i = [], 0
        while i < len(text):
            for t, tag in enumerate(self.TAGS):
                if text.startswith(tag, i):
                    ids.append(t)
                    i += len(tag)
                    break
            else:
                ids.append(len(self.TAGS) + ord(text[i]) % 50)
                i += 1
        return ids

    def decode(self, ids):
        return "".join(self.TAGS[i] if i < len(self.TAGS) else "?" for i in ids)


def test_chat_format_spans():
    fmt = C.ChatFormat(CharCodec())
    prompt = fmt.prompt("Q?")
    assert prompt[-1] == 3 and len(prompt) == 1 + 2 + 1 + 1
    ids, ans_mask = fmt.example("Q?", "tr", "ans")
    _, resp_mask = fmt.example("Q?", "tr", "ans", span="response")
    assert ids == prompt + CharCodec().encode("tr") + [4] + CharCodec().encode("ans") + [5]
    assert sum(ans_mask) == 3 + 1 and all(ans_mask[-4:])  # answer + end tag
    assert sum(resp_mask) == 2 + 1 + 3 + 1  # trace + close tag + answer + end tag
    assert fmt.prefilled("Q?", "")[-2:] == [3, 4]  # EMPTY prefill: <think></think>
    with pytest.raises(ValueError):
        fmt.example("Q?", "t", "a", span="trace")


@pytest.fixture(scope="module")
def tiny_lm():
    from memlab.models import qwen_small as Q

    torch.manual_seed(0)
    return Q.build_small(Q.small_config(64, hidden=32, layers=1, heads=2, kv_heads=1, pad_id=0)).eval()


def test_greedy_generate_matches_unbatched_argmax(tiny_lm):
    prompts = [[5, 6, 7], [9, 10, 11, 12, 13], [20]]
    got = C.greedy_generate(tiny_lm, prompts, 6, pad_id=0, end_id=63, batch_size=2)
    for p, g in zip(prompts, got):
        seq = list(p)
        for _ in range(6):  # reference: no cache, no padding, one prompt at a time
            nxt = int(tiny_lm(input_ids=torch.tensor([seq])).logits[0, -1].argmax())
            if nxt == 63:
                break
            seq.append(nxt)
        assert g == seq[len(p):]


def test_greedy_generate_suppress_and_limits(tiny_lm):
    prompts = [[5, 6, 7], [8, 9]]
    free = C.greedy_generate(tiny_lm, prompts, 8, pad_id=0, end_id=63)
    banned = free[0][0]
    sup = C.greedy_generate(tiny_lm, prompts, 8, pad_id=0, end_id=63, suppress_ids=[banned])
    assert all(banned not in s for s in sup)
    short = C.greedy_generate(tiny_lm, prompts, [2, 5], pad_id=0, end_id=63)
    assert [len(s) for s in short] == [2, 5] and short[0] == free[0][:2]


def test_teacher_forced_top1_reference(tiny_lm):
    ctx = [[5, 6, 7], [9, 10]]
    own = C.greedy_generate(tiny_lm, ctx, 4, pad_id=0, end_id=-1)  # -1: never ends early
    assert C.teacher_forced_top1(tiny_lm, ctx, own, pad_id=0) == pytest.approx([1.0, 1.0])
    wrong = [[(t + 1) % 60 + 1 for t in o] for o in own]
    wrong[1][0] = own[1][0]  # first token right, the rest wrong
    rates = C.teacher_forced_top1(tiny_lm, ctx, wrong, pad_id=0)
    assert rates[0] < 1.0 and rates[1] >= 0.25
    with pytest.raises(ValueError):
        C.teacher_forced_top1(tiny_lm, ctx, [[1], []], pad_id=0)
