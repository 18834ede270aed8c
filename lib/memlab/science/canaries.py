"""Probes of reasoning-trace memorisation: parser split, prefills, teacher forcing, bootstrap.

The audited output format is ``<think> trace </think> answer``. A probe gives
the model the first tokens of a canary (its *head*) and checks whether the
full canary comes back, separately in the trace and in the answer:

- out acc: share of probes whose answer contains the full canary;
- thk leak: share whose trace contains it;
- gap = thk leak - out acc (the "bypass" gap).

Intervals are percentile bootstraps that resample authors (clusters), not
single probes, because one author's probes are not independent.

The model-facing probes (greedy decoding, teacher-forced top-1) take a
:class:`ChatFormat`, which turns questions, traces and answers into token ids
segment by segment, so that the canary's ids inside a prompt are exactly its
ids on their own (the head is a prefix of them).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np
import torch

from memlab.models.lm import pad_sequences

MISSING: tuple[str, ...] = ("trace", "answer")


# ----------------------------------------------------------------------------- parsing and scoring

def split_trace(text: str, close_tag: str = "</think>", missing: str = "trace",
                open_tag: str = "<think>") -> tuple[str, str]:
    """Split a generation into ``(trace, answer)`` at the first ``close_tag``.

    A leading ``open_tag`` is dropped. When the closing tag is absent the whole
    text goes to the field named by ``missing`` ("trace" or "answer") and the
    other field is empty; that choice is the parser convention whose effect on
    the gap :func:`parser_flip` measures.
    """
    if missing not in MISSING:
        raise ValueError(f"parameter 'missing': must be one of {', '.join(MISSING)} (got {missing!r})")
    if not close_tag:
        raise ValueError("parameter 'close_tag': must be a non-empty string")
    body = text.lstrip()
    if open_tag and body.startswith(open_tag):
        body = body[len(open_tag):]
    head, tag, tail = body.partition(close_tag)
    if not tag:
        return (body, "") if missing == "trace" else ("", body)
    return head, tail


def contains(text: str, canary: str) -> bool:
    """Exact, case-sensitive containment of the full canary (the paper's criterion)."""
    if not canary:
        raise ValueError("parameter 'canary': must be a non-empty string")
    return canary in text


def split_head(canary_ids: Sequence[int], head_len: int) -> tuple[list[int], list[int]]:
    """``(head, continuation)`` token ids of a canary; the continuation must be non-empty."""
    if not isinstance(head_len, (int, np.integer)) or head_len < 1:
        raise ValueError(f"parameter 'head_len': must be an integer >= 1 (got {head_len!r})")
    if head_len >= len(canary_ids):
        raise ValueError(
            f"parameter 'head_len': must be shorter than the canary ({len(canary_ids)} tokens), got {head_len}")
    return list(canary_ids[:head_len]), list(canary_ids[head_len:])


def score_outputs(texts: Sequence[str], canaries: Sequence[str], missing: str = "trace",
                  close_tag: str = "</think>") -> dict[str, np.ndarray]:
    """Per-probe indicators from generations that started inside the thinking trace.

    Returns boolean arrays of shape (n,): ``out`` (canary in answer), ``thk``
    (canary in trace) and ``tag_missing``; plus ``answers`` (object array of str).
    """
    if len(texts) != len(canaries):
        raise ValueError(f"texts and canaries differ in length ({len(texts)} vs {len(canaries)})")
    out, thk, miss, answers = [], [], [], []
    for text, canary in zip(texts, canaries):
        trace, answer = split_trace(text, close_tag=close_tag, missing=missing)
        out.append(contains(answer, canary))
        thk.append(contains(trace, canary))
        miss.append(close_tag not in text)
        answers.append(answer)
    return {"out": np.array(out, bool), "thk": np.array(thk, bool), "tag_missing": np.array(miss, bool),
            "answers": np.array(answers, dtype=object)}


def cluster_bootstrap_ci(values, clusters, n_boot: int = 10000, level: float = 0.95,
                         seed: int = 0) -> tuple[float, float]:
    """Percentile interval of the mean of ``values`` when whole clusters are resampled.

    values: (n,) numbers (e.g. 0/1 indicators or per-probe differences).
    clusters: (n,) cluster labels (e.g. author index); each bootstrap draw picks
    as many clusters as there are, with replacement, and averages all their values.
    """
    v = np.asarray(values, dtype=float)
    c = np.asarray(clusters)
    if v.ndim != 1 or c.shape != v.shape or v.size == 0:
        raise ValueError(f"values and clusters must be 1-d of equal, non-zero length (got {v.shape}, {c.shape})")
    if not 0 < level < 1:
        raise ValueError(f"parameter 'level': must be in (0, 1) (got {level!r})")
    if int(n_boot) < 1:
        raise ValueError(f"parameter 'n_boot': must be >= 1 (got {n_boot!r})")
    labels, inverse = np.unique(c, return_inverse=True)
    sums = np.bincount(inverse, weights=v, minlength=len(labels))
    counts = np.bincount(inverse, minlength=len(labels)).astype(float)
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(labels), size=(int(n_boot), len(labels)))
    means = sums[pick].sum(1) / counts[pick].sum(1)
    alpha = (1 - level) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return float(low), float(high)


def mean_ci(values, clusters, n_boot: int = 10000, seed: int = 0) -> dict[str, float]:
    """``{"mean", "low", "high"}``: mean of ``values`` (n,) with its author-clustered 95% interval."""
    low, high = cluster_bootstrap_ci(values, clusters, n_boot=n_boot, seed=seed)
    return {"mean": float(np.mean(values)), "low": low, "high": high}


def bypass_summary(out, thk, clusters, n_boot: int = 10000, seed: int = 0) -> dict[str, dict[str, float]]:
    """out acc, thk leak and gap = thk - out, each with a clustered interval.

    out, thk: (n,) booleans per probe; clusters: (n,) author labels.
    """
    out = np.asarray(out, float)
    thk = np.asarray(thk, float)
    return {"out_acc": mean_ci(out, clusters, n_boot, seed), "thk_leak": mean_ci(thk, clusters, n_boot, seed),
            "gap": mean_ci(thk - out, clusters, n_boot, seed)}


def parser_flip(texts: Sequence[str], canaries: Sequence[str], clusters, close_tag: str = "</think>",
                n_boot: int = 10000, seed: int = 0) -> dict[str, dict]:
    """The bypass summary of the same outputs under both missing-tag conventions."""
    result = {}
    for missing in MISSING:
        s = score_outputs(texts, canaries, missing=missing, close_tag=close_tag)
        result[missing] = bypass_summary(s["out"], s["thk"], clusters, n_boot, seed)
        result[missing]["tag_missing_rate"] = float(s["tag_missing"].mean())
    return result


def anatomy(answers: Sequence[str], heads: Sequence[str], out, thk) -> dict[str, float]:
    """What bypass cases (canary in trace, not in answer) look like.

    answers: (n,) parsed answer strings; heads: (n,) canary head texts (the
    prefix given in the question). Returns the number of bypass cases, the
    share whose answer is only the head (the question prefix, nothing more),
    and mean answer lengths in characters for bypass and both-channel cases.
    """
    out = np.asarray(out, bool)
    thk = np.asarray(thk, bool)
    bypass = thk & ~out
    both = thk & out
    only_head = np.array([a.strip() == h.strip() for a, h in zip(answers, heads)], bool)
    lengths = np.array([len(a.strip()) for a in answers], float)

    def _mean(mask):
        return float(lengths[mask].mean()) if mask.any() else float("nan")

    return {"n_bypass": int(bypass.sum()), "n_both": int(both.sum()),
            "share_prefix_only": float(only_head[bypass].mean()) if bypass.any() else float("nan"),
            "len_bypass": _mean(bypass), "len_both": _mean(both)}


# ----------------------------------------------------------------------------- chat format

class Codec(Protocol):
    """What a tokenizer must offer: text <-> token ids (no automatic special tokens)."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


@dataclass(frozen=True)
class ChatFormat:
    """``<user> question <assistant> <think> trace </think> answer <end>``, encoded by segments."""

    codec: Codec
    user: str = "<|user|>"
    assistant: str = "<|assistant|>"
    think_open: str = "<think>"
    think_close: str = "</think>"
    end: str = "<|end|>"
    bos: tuple[int, ...] = ()

    def _single(self, tag: str) -> int:
        ids = self.codec.encode(tag)
        if len(ids) != 1:
            raise ValueError(f"tag {tag!r} must be one token of the tokenizer (got {len(ids)} tokens)")
        return ids[0]

    @property
    def close_id(self) -> int:
        return self._single(self.think_close)

    @property
    def end_id(self) -> int:
        return self._single(self.end)

    def prompt(self, question: str) -> list[int]:
        """Ids up to and including the opening think tag (where autoregressive thinking starts)."""
        enc = self.codec.encode
        return [*self.bos, *enc(self.user), *enc(question), *enc(self.assistant), *enc(self.think_open)]

    def prefilled(self, question: str, thinking: str) -> list[int]:
        """Ids of a prompt whose thinking is fixed to ``thinking`` and closed (decode the answer next)."""
        body = self.codec.encode(thinking) if thinking else []
        return [*self.prompt(question), *body, *self.codec.encode(self.think_close)]

    def example(self, question: str, trace: str, answer: str,
                span: str = "answer") -> tuple[list[int], list[bool]]:
        """Ids of a full training turn and a loss mask of the same length.

        span: "answer" marks the answer and end tag (what answer-masked
        unlearning sees); "response" also marks the thinking trace and its tags
        (what memorisation trains on).
        """
        if span not in ("answer", "response"):
            raise ValueError(f"parameter 'span': must be 'answer' or 'response' (got {span!r})")
        head = self.prefilled(question, trace)
        tail = [*self.codec.encode(answer), *self.codec.encode(self.end)]
        first = len(self.prompt(question)) if span == "response" else len(head)
        ids = head + tail
        return ids, [i >= first for i in range(len(ids))]


# ----------------------------------------------------------------------------- model probes

def _left_pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ``(ids, attention)``: :func:`memlab.models.lm.pad_sequences` with side "left"."""
    return pad_sequences(seqs, pad_id, side="left")


@torch.no_grad()
def greedy_generate(model, prompts: Sequence[Sequence[int]], max_new_tokens: int | Sequence[int], pad_id: int,
                    end_id: int, suppress_ids: Sequence[int] = (), batch_size: int = 256) -> list[list[int]]:
    """Greedy continuations of token-id prompts, cut before the first ``end_id``.

    A plain key-value-cached loop over left-padded batches that stops as soon
    as every row has ended (much cheaper than ``generate`` for small models).
    max_new_tokens: one limit, or one per prompt. suppress_ids: tokens the
    decoder may never emit (used to simulate a model that drops its closing
    think tag). Returns one list of new ids per prompt.
    """
    limits = [int(max_new_tokens)] * len(prompts) if np.isscalar(max_new_tokens) else list(max_new_tokens)
    if len(limits) != len(prompts):
        raise ValueError("max_new_tokens must be one number or one per prompt")
    dev = next(model.parameters()).device
    model.eval()
    # similar lengths share a batch, so little padding is decoded
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), limits[i]))
    outs: dict[int, list[int]] = {}
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        ids, mask = _left_pad([prompts[i] for i in rows], pad_id)
        ids, mask = ids.to(dev), mask.to(dev)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        limit = torch.tensor([limits[i] for i in rows], device=dev)
        step_out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
        past, logits, pos = step_out.cache, step_out.logits[:, -1].float(), pos[:, -1:]
        done = limit <= 0
        new = []
        for step in range(int(limit.max())):
            if suppress_ids:
                logits[:, list(suppress_ids)] = float("-inf")
            nxt = torch.where(done, torch.full_like(done, pad_id, dtype=torch.long), logits.argmax(-1))
            new.append(nxt)
            done = done | (nxt == end_id) | (limit <= step + 1)
            if bool(done.all()):
                break
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            pos = pos + 1
            step_out = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos,
                             cache=past, use_cache=True)
            past, logits = step_out.cache, step_out.logits[:, -1].float()
        gen = torch.stack(new, 1).tolist() if new else [[] for _ in rows]
        for r, i in enumerate(rows):
            seq = gen[r][:limits[i]]
            outs[i] = seq[:seq.index(end_id)] if end_id in seq else seq
    return [outs[i] for i in range(len(prompts))]


@torch.no_grad()
def teacher_forced_top1(model, contexts: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
                        pad_id: int, batch_size: int = 64) -> np.ndarray:
    """Share of target tokens that are the model's top-1 prediction, given the true prefix.

    contexts: n token-id lists (prompt, prefill and canary head); targets: n
    non-empty token-id lists (the canary continuation). Returns (n,) floats in [0, 1].
    """
    if len(contexts) != len(targets) or any(len(t) == 0 for t in targets):
        raise ValueError("contexts and targets must pair up and every target must be non-empty")
    dev = next(model.parameters()).device
    model.eval()
    rates = []
    for start in range(0, len(contexts), batch_size):
        ctx, tgt = contexts[start:start + batch_size], targets[start:start + batch_size]
        # right padding keeps positions aligned with an unpadded run
        ids, mask = pad_sequences([list(c) + list(t) for c, t in zip(ctx, tgt)], pad_id)
        pred = model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).logits.argmax(-1).cpu()
        for i, (c, t) in enumerate(zip(ctx, tgt)):
            guess = pred[i, len(c) - 1:len(c) - 1 + len(t)]
            rates.append(float((guess == torch.tensor(t)).float().mean()))
    return np.array(rates)


# ----------------------------------------------------------------------------- chat tags, probe scoring and summaries

def deepseek_format(codec) -> ChatFormat:
    """The DeepSeek-R1 distillates' chat tags (their tokenizer holds them as single tokens).

    codec: a codec with a Hugging Face ``tokenizer`` attribute; its ``bos_token_id`` (when
    set) opens every prompt and its ``eos_token`` (else ``<｜end▁of▁sentence｜>``) ends a turn.
    """
    tok = codec.tokenizer
    bos = (tok.bos_token_id,) if tok.bos_token_id is not None else ()
    return ChatFormat(codec, user="<｜User｜>", assistant="<｜Assistant｜>", think_open="<think>",
                      think_close="</think>", end=tok.eos_token or "<｜end▁of▁sentence｜>", bos=bos)


def template_format(codec, think_open: str = "<think>", think_close: str = "</think>") -> ChatFormat:
    """Chat tags read off the tokenizer's own chat template (one user turn, then the assistant's).

    The template is rendered around a marker question: what precedes it (system turn included,
    as the model was tuned with it) becomes the user tag, what follows it up to the assistant's
    text the assistant tag, and the tokenizer's ``eos_token`` ends the answer. The trace sits
    between ``think_open`` and ``think_close``, which the model's vocabulary need not hold as
    single tokens yet (:func:`memlab.models.lm.add_special_tokens` adds them).
    """
    tok = codec.tokenizer
    marker = "\u2063QUESTION\u2063"  # invisible separators: no template writes them itself
    text = tok.apply_chat_template([{"role": "user", "content": marker}], tokenize=False, add_generation_prompt=True)
    if text.count(marker) != 1 or not tok.eos_token:
        raise ValueError(f"tokenizer {getattr(tok, 'name_or_path', '')!r}: its chat template must render one user "
                         "turn and it must define an eos_token (the answer's end)")
    user, assistant = text.split(marker)
    return ChatFormat(codec, user=user, assistant=assistant, think_open=think_open, think_close=think_close,
                      end=tok.eos_token)


def trace_nonempty(texts: Sequence[str], close_tag: str = "</think>") -> np.ndarray:
    """(n,) booleans: the trace parsed by :func:`split_trace` (missing tag -> trace) has non-space text."""
    return np.array([bool(split_trace(t, close_tag)[0].strip()) for t in texts], bool)


def score_retain(answers: Sequence[str], keys: Sequence[str], names: Sequence[str]) -> dict[str, list]:
    """Generic-knowledge probes: ``{"correct": [bool], "fictional": [str]}``, one entry per answer.

    answers: n parsed answers; keys: n expected keys (correct when the key occurs in the
    answer, case-insensitively); names: fictional author names (``fictional`` is the first
    of them that occurs in the answer, case-sensitively, else "").
    """
    if len(answers) != len(keys):
        raise ValueError(f"parameter 'keys': needs one key per answer (got {len(keys)} for {len(answers)})")
    return {"correct": [k.lower() in a.lower() for k, a in zip(keys, answers)],
            "fictional": [next((n for n in names if n in a), "") for a in answers]}


def summarise_probes(res: dict, n_boot: int, seed: int = 0) -> dict:
    """Means and author-clustered 95% intervals of one evaluation's per-probe results (texts dropped).

    res: any of ``"auto"`` (``out``, ``thk``, ``tag_missing``: (n,) per author), ``"prefill"``
    (``{mode: {"out": (n,)}}``), ``"tf"`` (``{mode: (n,) top-1 rates}``), ``"qa"`` (``out`` and
    its ``author`` labels) and ``"retain"`` (``correct``, ``fictional``); other keys are ignored.
    Returns, per arm present: ``auto`` = :func:`bypass_summary` plus ``tag_missing_rate``;
    ``prefill[mode]`` = :func:`mean_ci` of out acc, plus, when ``auto`` is there,
    ``auto_minus`` = Delta_AB, the interval of AUTO minus this prefill paired by author;
    ``tf[mode]`` and ``qa`` = :func:`mean_ci`; ``retain`` = ``{"acc", "n", "fictional_rate"}``.
    """
    out: dict = {}
    if "auto" in res:
        a = res["auto"]
        clusters = np.arange(len(a["out"]))
        out["auto"] = bypass_summary(a["out"], a["thk"], clusters, n_boot, seed)
        out["auto"]["tag_missing_rate"] = float(np.mean(a["tag_missing"]))
    if "prefill" in res:
        out["prefill"] = {}
        for mode, p in res["prefill"].items():
            clusters = np.arange(len(p["out"]))
            out["prefill"][mode] = mean_ci(np.asarray(p["out"], float), clusters, n_boot, seed)
            if "auto" in res:  # Delta_AB: AUTO out acc minus this prefill's, paired by author
                diff = np.asarray(res["auto"]["out"], float) - np.asarray(p["out"], float)
                out["prefill"][mode]["auto_minus"] = mean_ci(diff, clusters, n_boot, seed)
    if "tf" in res:
        out["tf"] = {mode: mean_ci(np.asarray(v), np.arange(len(v)), n_boot, seed) for mode, v in res["tf"].items()}
    if "qa" in res:
        out["qa"] = mean_ci(np.asarray(res["qa"]["out"], float), res["qa"]["author"], n_boot, seed)
    if "retain" in res:
        r = res["retain"]
        out["retain"] = {"acc": float(np.mean(r["correct"])), "n": len(r["correct"]),
                         "fictional_rate": float(np.mean([bool(f) for f in r["fictional"]]))}
    return out
