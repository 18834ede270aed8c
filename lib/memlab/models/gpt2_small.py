"""Small GPT-2 language models built from configs (transformers), and their training loop.

Model sizes are written ``"LxD"``: L layers of width D (e.g. ``"2x128"``, the
Appendix A.1 model). Every model gets one extra token, BOS (id = V), so the
first data token is predicted like every other one; dropout is off because
memorisation, not regularisation, is being measured.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from memlab.core.config import ConfigError
from memlab.core.progress import progress
from memlab.models.train import optimizer_step

_SIZE = re.compile(r"^(\d+)x(\d+)$")
PRECISIONS = ("fp32", "bf16")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class Size:
    """Depth and width of a GPT-2 model; ``n_head`` follows the width (head size <= 64)."""

    n_layer: int
    n_embd: int

    @property
    def n_head(self) -> int:
        h = -(-self.n_embd // 64)  # fewest heads of size <= 64 that divide the width
        while self.n_embd % h:
            h += 1
        return h

    def __str__(self) -> str:
        return f"{self.n_layer}x{self.n_embd}"


def parse_size(text: str) -> Size:
    """``"LxD"`` -> Size; raises ConfigError naming ``model_sizes`` otherwise."""
    m = _SIZE.match(str(text).strip())
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 4:
        raise ConfigError(f"parameter 'model_sizes': each must look like 'LxD' with L >= 1 and D >= 4 (got {text!r})")
    return Size(int(m.group(1)), int(m.group(2)))


def gpt2_config(size: Size | str, vocab_size: int, seq_len: int):
    """A transformers GPT2Config for V data tokens plus BOS, S positions, no dropout."""
    from transformers import GPT2Config

    size = parse_size(size) if isinstance(size, str) else size
    return GPT2Config(
        vocab_size=vocab_size + 1, n_positions=seq_len, n_embd=size.n_embd, n_layer=size.n_layer,
        n_head=size.n_head, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=vocab_size, eos_token_id=vocab_size, tie_word_embeddings=True,
    )


def count_params(n_layer: int, n_embd: int, vocab_size: int, n_positions: int) -> int:
    """Closed-form parameter count of a weight-tied GPT2LMHeadModel.

    Token and position embeddings, 12 D^2 + 13 D per block (attention QKV and
    projection, 4x MLP, two LayerNorms) and the final LayerNorm. ``vocab_size``
    is the embedding's row count (include BOS if the model has one).
    """
    d = n_embd
    return vocab_size * d + n_positions * d + n_layer * (12 * d * d + 13 * d) + 2 * d


def n_params(model: torch.nn.Module) -> int:
    """Number of distinct trainable parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())


def train_memory_bytes(size: Size | str, vocab_size: int, seq_len: int, batch_size: int) -> int:
    """Rough peak bytes of one training step in fp32 with Adam.

    Weights, gradients and two Adam moments (16 bytes a parameter) plus the
    activations autograd keeps: about 34 D + 5 H S floats per token per layer
    (Korthikanti et al.'s count) and the (B, S, V) logits twice.
    """
    size = parse_size(size) if isinstance(size, str) else size
    p = count_params(size.n_layer, size.n_embd, vocab_size + 1, seq_len)
    tokens = batch_size * seq_len
    acts = size.n_layer * tokens * (34 * size.n_embd + 5 * size.n_head * seq_len) + 2 * tokens * (vocab_size + 1)
    return 16 * p + 4 * acts


def build(size: Size | str, vocab_size: int, seq_len: int, precision: str = "fp32", seed: int = 0,
          device: torch.device | str = "cpu"):
    """A freshly initialised GPT2LMHeadModel with parameters in ``precision``."""
    from transformers import GPT2LMHeadModel

    if precision not in PRECISIONS:
        raise ConfigError(f"parameter 'precision': must be one of {', '.join(PRECISIONS)} (got {precision!r})")
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(gpt2_config(size, vocab_size, seq_len))
    return model.to(device=device, dtype=DTYPES[precision])


def token_log_probs(model, tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(B, S, V) log-probabilities (float32; float64 for a float64 model) of each position's token given
    the earlier ones.

    tokens: (B, S) int64; a BOS token (id ``vocab_size``) is prepended and the
    last position dropped, so position i is predicted from tokens < i.
    """
    bos = torch.full((tokens.shape[0], 1), vocab_size, dtype=tokens.dtype, device=tokens.device)
    inputs = torch.cat([bos, tokens[:, :-1]], dim=1)
    logits = model(input_ids=inputs).logits[..., :vocab_size]
    return F.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)


def lm_loss(model, tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Mean next-token cross-entropy (nats) of a (B, S) batch after a BOS token."""
    logp = token_log_probs(model, tokens, vocab_size)
    return F.nll_loss(logp.reshape(-1, vocab_size), tokens.reshape(-1))


def plateaued(history: Sequence[float], patience: int, tol: float) -> bool:
    """The plateau rule: stop when the last ``patience`` evaluations gained < tol.

    history: memorisation (bits) at each evaluation, in order. The gain is the
    best of the last ``patience`` values over the best before them, relative to
    the larger of that earlier best and 1 bit.
    """
    if len(history) <= patience:
        return False
    before = max(history[:-patience])
    recent = max(history[-patience:])
    return (recent - before) < tol * max(abs(before), 1.0)


def train_until_plateau(
    model,
    tokens: torch.Tensor,
    vocab_size: int,
    *,
    evaluate: Callable[[], float],
    max_steps: int,
    batch_size: int,
    lr: float,
    eval_every: int,
    patience: int,
    tol: float,
    seed: int = 0,
    desc: str = "train",
) -> dict[str, list]:
    """Train with Adam until ``evaluate()`` stops improving (the plateau rule).

    tokens: (N, S) int64 training set. Every ``eval_every`` steps
    ``evaluate()`` is recorded (e.g. total memorisation in bits); training stops
    once :func:`plateaued` says the last ``patience``
    evaluations gained less than ``tol`` relative, or after ``max_steps``.
    Learning rate: linear warm-up over the first eval interval, then constant,
    so stopping time is set by the data, not by a schedule.
    Returns ``{"step": [...], "value": [...], "stopped": "plateau" | "max_steps",
    "tokens": tokens trained on}``.
    """
    dev = next(model.parameters()).device
    data = tokens.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0,
                            eps=1e-6 if next(model.parameters()).dtype == torch.bfloat16 else 1e-8)
    warmup = max(1, min(eval_every, max_steps // 10))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    gen = torch.Generator().manual_seed(seed)
    history = {"step": [0], "value": [evaluate()], "stopped": "max_steps", "tokens": 0}
    model.train()
    bar = progress(total=max_steps, desc=desc)
    step = 0
    while step < max_steps:
        order = torch.randperm(len(data), generator=gen).to(dev)
        for start in range(0, len(data), batch_size):
            batch = data[order[start:start + batch_size]]
            optimizer_step(lm_loss(model, batch, vocab_size), opt, sched, model.parameters(), 1.0)
            step += 1
            history["tokens"] += batch.numel()
            bar.update(1)
            if step % eval_every == 0 or step == max_steps:
                history["step"].append(step)
                history["value"].append(evaluate())
                model.train()
                if plateaued(history["value"], patience, tol):
                    history["stopped"] = "plateau"
                    bar.close()
                    model.eval()
                    return history
            if step >= max_steps:
                break
    bar.close()
    model.eval()
    return history


def train_flops(n_parameters: int, n_tokens: int) -> float:
    """The usual 6 * parameters * tokens estimate of training FLOPs."""
    return 6.0 * n_parameters * n_tokens

