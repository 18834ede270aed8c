"""Causal language-model likelihoods and training: the pieces chapters 3 and 5 share.

An *example* is a pair ``(token ids, loss mask)`` of equal-length lists; the
mask says which tokens are targets (e.g. only the answer span). Batches are
right-padded tensors ``ids (B, T)``, ``attention (B, T)``, ``loss mask (B, T)``.
Models are Hugging Face causal LMs: ``model(input_ids=..., attention_mask=...).logits``
of shape (B, T, V). Log-probabilities are in nats.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from memlab.core.config import autocast
from memlab.core.progress import progress
from memlab.models.train import optimizer_step

Example = tuple[list[int], list[bool]]


def pad_batch(examples: Sequence[Example], pad_id: int, max_len: int | None = None):
    """Right-padded ``(ids (B, T), attention (B, T), loss mask (B, T))`` tensors, each cut to ``max_len``."""
    if not examples:
        raise ValueError("parameter 'examples': need at least one example to batch (got none)")
    seqs = [(e[0][:max_len], e[1][:max_len]) if max_len else e for e in examples]
    width = max(len(s[0]) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), width), dtype=torch.long)
    loss_mask = torch.zeros((len(seqs), width), dtype=torch.bool)
    for i, (s, m) in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        att[i, :len(s)] = 1
        loss_mask[i, :len(s)] = torch.tensor(m)
    return ids, att, loss_mask


def sequence_logprob(model, ids: torch.Tensor, att: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Sum over masked target tokens of log p(token | prefix), shape (B,).

    ids, att, loss_mask: (B, T); ``loss_mask[b, t]`` says token t is a target
    (token 0 never is: it has no prefix).
    """
    logits = model(input_ids=ids, attention_mask=att).logits[:, :-1].float()
    target = ids[:, 1:]
    logp = torch.log_softmax(logits, -1).gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return (logp * loss_mask[:, 1:]).sum(-1)


def mean_token_nll(model, ids: torch.Tensor, att: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood per masked target token over the whole batch (scalar).

    Not to be confused with :func:`memlab.models.diffusion_lm.masked_nll`, which
    returns per-token NLLs of a *masked* (diffusion) LM, shape (N, L).
    """
    return -sequence_logprob(model, ids, att, loss_mask).sum() / loss_mask[:, 1:].sum().clamp(min=1)


@torch.no_grad()
def reference_logprobs(model, examples: Sequence[Example], pad_id: int, batch_size: int) -> torch.Tensor:
    """(N,) float32 :func:`sequence_logprob` of every example under ``model`` in eval mode, on the CPU."""
    dev = next(model.parameters()).device
    model.eval()
    out = []
    for start in range(0, len(examples), batch_size):
        ids, att, mask = (t.to(dev) for t in pad_batch(examples[start:start + batch_size], pad_id))
        with autocast(dev):
            out.append(sequence_logprob(model, ids, att, mask).float().cpu())
    return torch.cat(out)


def warmup_cosine(steps: int, warmup: int):
    """LR multiplier of step s: linear warm-up over ``warm`` steps times a cosine decay to 0 at ``steps``.

    ``s -> min(1, (s+1)/warm) * (1 + cos(pi * min(s, steps) / steps)) / 2`` with
    ``warm = min(warmup, max(1, steps // 10))``.
    """
    if steps < 1:
        raise ValueError(f"parameter 'steps': must be at least 1 (got {steps})")
    warm = min(warmup, max(1, steps // 10))
    return lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))


def train_lm(model, examples: Sequence[Example], *, steps: int, batch_size: int, lr: float, pad_id: int,
             seed: int, desc: str, max_len: int | None = None, warmup: int = 20) -> list[float]:
    """Masked next-token training of the trainable parameters, in place; returns the loss of every step.

    AdamW (no weight decay), linear warm-up then cosine decay (:func:`warmup_cosine`),
    gradient norm clipped at 1; each step draws ``batch_size`` examples with
    replacement from a NumPy generator seeded with ``seed``. Leaves the model in eval mode.
    """
    dev = next(model.parameters()).device
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(steps, warmup))
    rng = np.random.default_rng(seed)
    model.train()
    losses = []
    for _ in progress(range(steps), desc=desc):
        pick = rng.integers(0, len(examples), size=min(batch_size, len(examples)))
        ids, att, mask = (t.to(dev) for t in pad_batch([examples[i] for i in pick], pad_id, max_len))
        with autocast(dev):
            loss = mean_token_nll(model, ids, att, mask)
        optimizer_step(loss, opt, sched, params, max_grad_norm=1.0)
        losses.append(float(loss.detach()))
    model.eval()
    return losses


def text_sequences(ids, seq_len: int) -> torch.Tensor:
    """Non-overlapping ``seq_len``-token chunks of one token stream, exact duplicates removed.

    ids: (T,) token ids. Returns (M, seq_len) int64 in first-occurrence order.
    """
    ids = torch.as_tensor(ids, dtype=torch.int64)
    n = len(ids) // seq_len
    if n == 0:
        raise ValueError(f"parameter 'seq_len': the text has fewer than {seq_len} tokens")
    chunks = ids[: n * seq_len].view(n, seq_len)
    _, inverse = torch.unique(chunks, dim=0, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1,), n, dtype=torch.int64).scatter_reduce(
        0, inverse, torch.arange(n), reduce="amin")
    return chunks[first.sort().values]


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int, side: str = "right") -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids (B, T), attention (B, T))`` int64 tensors of token-id lists padded to the longest, T.

    side: "right" keeps every row's positions aligned with an unpadded run (teacher
    forcing, scoring); "left" ends every row at column T - 1 (batched greedy decoding).
    Padding ids are ``pad_id``, padding attention 0, real tokens' attention 1.
    """
    if side not in ("right", "left"):
        raise ValueError(f"parameter 'side': must be 'right' or 'left' (got {side!r})")
    if len(seqs) == 0:
        raise ValueError("parameter 'seqs': need at least one sequence to pad (got none)")
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        cols = slice(0, len(s)) if side == "right" else slice(width - len(s), width)
        ids[i, cols] = torch.as_tensor(list(s), dtype=torch.long)
        att[i, cols] = 1
    return ids, att


#: the projections of a Qwen2/Llama block that a LoRA adapter wraps
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def add_special_tokens(model, tokenizer, tokens: Sequence[str]) -> tuple[int, ...]:
    """Make each of ``tokens`` one special token of ``tokenizer``; the ids of those it had to add.

    A pretrained tokenizer may split a tag such as ``</think>`` into several pieces (SmolLM2's
    gives 3), while the chapter's probes ban, find and split on the tag as one id. Tokens already
    encoded as one id are left alone. The model's embeddings (and a tied output head) grow to the
    new vocabulary; new rows start at the old rows' mean and covariance (transformers'
    ``mean_resizing``), so they change the base model's outputs on no old token. The added ids are
    for :func:`attach_lora`'s ``trainable_tokens``: only their rows train.
    """
    missing = [t for t in tokens if len(tokenizer(t, add_special_tokens=False)["input_ids"]) != 1]
    if not missing:
        return ()
    tokenizer.add_tokens(missing, special_tokens=True)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=True)
    return tuple(int(tokenizer.convert_tokens_to_ids(t)) for t in missing)


def attach_lora(model, rank: int, state: dict[str, torch.Tensor] | None = None, targets: Sequence[str] = LORA_TARGETS,
                trainable_tokens: Sequence[int] = ()):
    """``model`` wrapped by peft in a LoRA adapter of ``rank`` (alpha 2 rank, no dropout) on ``targets``.

    ``trainable_tokens``: vocabulary ids whose embedding rows (and tied output rows) train as a
    delta beside the adapter (peft's ``trainable_token_indices``): the tags
    :func:`add_special_tokens` added, which the base model has never seen.

    The adapter is fresh (peft's initialisation, from torch's global generator: lora_B = 0, so
    the output is the base model's) or loaded from ``state`` (a peft adapter state dict
    ``{name: tensor}``, lora_A of shape (rank, in) and lora_B (out, rank) per wrapped projection,
    moved to the model's device). The base weights are shared, not copied; undo with
    :func:`unload_lora`.
    """
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

    if int(rank) < 1:
        raise ValueError(f"parameter 'rank': must be an integer >= 1 (got {rank!r})")
    dev = next(model.parameters()).device
    extra = {"trainable_token_indices": [int(i) for i in trainable_tokens]} if len(trainable_tokens) else {}
    config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=list(targets),
                        task_type="CAUSAL_LM", **extra)
    peft_model = get_peft_model(model, config)
    if state is not None:
        set_peft_model_state_dict(peft_model, {k: v.to(dev) for k, v in state.items()})
    return peft_model


def lora_state(peft_model) -> dict[str, torch.Tensor]:
    """The adapter's trained tensors on the CPU, ``{name: tensor}``: LoRA factors (lora_A of shape
    (rank, in), lora_B (out, rank)) and trainable-token deltas ((n_tokens, hidden) each), never the
    base's (resized) embedding matrices of shape (vocab, hidden), which peft would otherwise save whole."""
    from peft import get_peft_model_state_dict

    state = get_peft_model_state_dict(peft_model, save_embedding_layers=False)
    return {k: v.detach().cpu().clone() for k, v in state.items()}


def unload_lora(peft_model):
    """The base model of :func:`attach_lora` with the LoRA layers removed (not merged), all parameters frozen."""
    base = peft_model.unload()
    for p in base.parameters():
        p.requires_grad_(False)
    return base
