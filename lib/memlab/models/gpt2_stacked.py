"""G same-shape GPT-2 models trained together: stacked weights, batched matmuls.

A tiny GPT-2 (D = 8-32) on one CPU core spends most of a step in elementwise
kernels and per-op overhead, not in its matmuls (``benchmarks/bench_capacity.py``
measures the split). Stacking the weights of G models that share a shape
(``{name: (G, *shape)}`` under the Hugging Face parameter names) and running one
``torch.bmm`` per layer for all of them amortises that overhead over G models.

Each model keeps its own data set, batch order, gradient clipping and optimizer
state: the loss is the sum of the G per-model mean losses, so model g's
gradient is exactly its own; AdamW is elementwise, so one AdamW over the stacked
tensors is G independent AdamWs; clipping uses each model's own gradient norm.
``tests/test_capacity.py`` checks that this equals training the G Hugging Face
models one at a time (:func:`train_one`) to 1e-5.

Shapes: ``G`` models, ``B`` sequences a batch, ``T`` positions, ``D`` width,
``V`` data tokens (the embedding has V + 1 rows: BOS = V).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from memlab.core.progress import progress
from memlab.models.train import optimizer_step

LN2 = math.log(2.0)
_EPS = 1e-5  # GPT2Config.layer_norm_epsilon


def stack(models: Sequence[torch.nn.Module]) -> dict[str, torch.Tensor]:
    """``{HF parameter name: (G, *shape)}`` leaf tensors copied from G same-shape models."""
    if not models:
        raise ValueError("parameter 'models': need at least one model to stack (got none)")
    names = [n for n, _ in models[0].named_parameters()]
    out = {}
    for name in names:
        ps = [dict(m.named_parameters())[name] for m in models]
        if any(p.shape != ps[0].shape for p in ps):
            raise ValueError(
                f"parameter 'models': {name} differs in shape across models "
                f"({sorted({tuple(p.shape) for p in ps})}); stack only same-shape models"
            )
        out[name] = torch.stack([p.detach() for p in ps]).clone().requires_grad_(True)
    return out


@torch.no_grad()
def unstack_into(params: dict[str, torch.Tensor], models: Sequence[torch.nn.Module]) -> None:
    """Copy stacked weights back into the G Hugging Face models (tied lm_head follows wte)."""
    for g, model in enumerate(models):
        own = dict(model.named_parameters())
        for name, t in params.items():
            own[name].copy_(t[g])


def n_layers(params: dict[str, torch.Tensor]) -> int:
    return sum(1 for n in params if n.endswith(".ln_1.weight"))


def _ln(x, w, b):
    """LayerNorm over the last dim with per-model affine: x (G, M, D), w and b (G, D)."""
    return torch.addcmul(b[:, None, :], F.layer_norm(x, x.shape[-1:], eps=_EPS), w[:, None, :])


def _lin(x, w, b):
    """x (G, M, Din) @ w (G, Din, Dout) + b (G, Dout), GPT-2's Conv1D layout."""
    return torch.baddbmm(b[:, None, :], x, w)


def _gelu_new(x):
    # GPT-2's "gelu_new" is the tanh approximation; one fused kernel instead of six elementwise ones
    return F.gelu(x, approximate="tanh")


def logits(params: dict[str, torch.Tensor], input_ids: torch.Tensor, n_head: int) -> torch.Tensor:
    """(G, B, T, V + 1) logits of G GPT-2 models, each on its own batch.

    params: stacked weights (:func:`stack`); input_ids: (G, B, T) int64; n_head:
    attention heads (:attr:`memlab.models.gpt2_small.Size.n_head`). Same maths
    as ``GPT2LMHeadModel`` with dropout off and tied embeddings.
    """
    p = params
    G, B, T = input_ids.shape
    wte = p["transformer.wte.weight"]  # (G, V+1, D)
    D = wte.shape[-1]
    hd = D // n_head
    rows = wte.shape[1]
    # one flat table of G * (V + 1) rows: F.embedding's backward is a dense scatter-add, far
    # cheaper than advanced indexing's index_put
    offset = (torch.arange(G, device=input_ids.device) * rows)[:, None, None]
    h = F.embedding(input_ids + offset, wte.reshape(G * rows, D)).reshape(G, B, T, D)
    h = (h + p["transformer.wpe.weight"][:, None, :T, :]).reshape(G, B * T, D)
    for i in range(n_layers(p)):
        pre = f"transformer.h.{i}."
        a = _ln(h, p[pre + "ln_1.weight"], p[pre + "ln_1.bias"])
        qkv = _lin(a, p[pre + "attn.c_attn.weight"], p[pre + "attn.c_attn.bias"])  # (G, BT, 3D)
        q, k, v = (t.reshape(G * B, T, n_head, hd).transpose(1, 2) for t in qkv.split(D, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (GB, H, T, hd)
        y = y.transpose(1, 2).reshape(G, B * T, D)
        h = h + _lin(y, p[pre + "attn.c_proj.weight"], p[pre + "attn.c_proj.bias"])
        m = _ln(h, p[pre + "ln_2.weight"], p[pre + "ln_2.bias"])
        m = _gelu_new(_lin(m, p[pre + "mlp.c_fc.weight"], p[pre + "mlp.c_fc.bias"]))
        h = h + _lin(m, p[pre + "mlp.c_proj.weight"], p[pre + "mlp.c_proj.bias"])
    h = _ln(h, p["transformer.ln_f.weight"], p["transformer.ln_f.bias"])
    return torch.bmm(h, wte.transpose(1, 2)).reshape(G, B, T, -1)


def token_log_probs(params, tokens: torch.Tensor, vocab_size: int, n_head: int) -> torch.Tensor:
    """(G, B, S, V) log-probabilities of each token given the earlier ones, after a BOS token.

    tokens: (G, B, S) int64 in [0, V); the logits' BOS column is dropped and the
    rest renormalised, as :func:`memlab.models.gpt2_small.token_log_probs` does for one model.
    """
    bos = torch.full(tokens.shape[:2] + (1,), vocab_size, dtype=tokens.dtype, device=tokens.device)
    inputs = torch.cat([bos, tokens[..., :-1]], dim=-1)
    out = logits(params, inputs, n_head)[..., :vocab_size]
    return F.log_softmax(out.to(torch.promote_types(out.dtype, torch.float32)), dim=-1)  # float64 stays


@torch.no_grad()
def code_lengths(
    params, g: int, tokens: torch.Tensor, vocab_size: int, n_head: int, batch_size: int = 512
) -> np.ndarray:
    """(N,) float64 code lengths in bits of model g's sequences ``tokens`` (N, S)."""
    one = {k: v[g : g + 1] for k, v in params.items()}
    out = []
    for start in range(0, len(tokens), batch_size):
        x = tokens[start : start + batch_size][None]
        logp = token_log_probs(one, x, vocab_size, n_head)[0]
        out.append((-logp.gather(-1, x[0][..., None]).squeeze(-1).sum(-1).double() / LN2).cpu())
    return torch.cat(out).numpy() if out else np.zeros(0)


class BatchStream:
    """Batches of ``batch_size`` indices into N sequences: successive random permutations, cut.

    The permutations come from a ``torch.Generator`` seeded with ``seed``; a batch
    may straddle two epochs, and when N < batch_size it holds repeats. Every
    sequence is seen once per epoch, so epochs = steps * batch_size / N.
    """

    def __init__(self, n: int, batch_size: int, seed: int):
        if n < 1 or batch_size < 1:
            raise ValueError(
                f"parameter 'batch_size': needs n >= 1 and batch_size >= 1 (got {n}, {batch_size})"
            )
        self.n, self.b = n, batch_size
        self.gen = torch.Generator().manual_seed(seed)
        self.buf = torch.empty(0, dtype=torch.long)

    def next(self) -> torch.Tensor:
        while len(self.buf) < self.b:
            self.buf = torch.cat([self.buf, torch.randperm(self.n, generator=self.gen)])
        out, self.buf = self.buf[: self.b], self.buf[self.b :]
        return out


def cosine_lambda(steps: int, warmup: int) -> Callable[[int], float]:
    """LR multiplier: linear warm-up over ``warmup`` steps, then a cosine from 1 to 0 at ``steps``."""
    if steps < 1 or warmup < 0:
        raise ValueError(f"parameter 'steps': needs steps >= 1 and warmup >= 0 (got {steps}, {warmup})")
    warm = max(1, min(warmup, steps))

    def f(s: int) -> float:
        if s < warm:
            return (s + 1) / warm
        return 0.5 * (1.0 + math.cos(math.pi * min(s - warm, steps - warm) / max(1, steps - warm)))

    return f


def checkpoints(steps: int, n: int) -> list[int]:
    """n + 1 evaluation steps 0, steps/n, ..., steps (rounded, distinct, sorted)."""
    return sorted({round(steps * i / n) for i in range(n + 1)})


def _optimizer(tensors, lr, dtype):
    eps = 1e-6 if dtype == torch.bfloat16 else 1e-8
    return torch.optim.AdamW(tensors, lr=lr, betas=(0.9, 0.98), weight_decay=0.0, eps=eps, foreach=True)


def train_stacked(
    models: Sequence[torch.nn.Module],
    datasets: Sequence[torch.Tensor],
    vocab_size: int,
    *,
    n_head: int,
    steps: int,
    batch_size: int,
    lr: float,
    warmup: int,
    seeds: Sequence[int],
    evaluate_at: Sequence[int] = (),
    evaluate: Callable[[dict], list[float]] | None = None,
    max_grad_norm: float = 1.0,
    desc: str = "train",
) -> dict:
    """Train G same-shape models together for exactly ``steps`` steps (warm-up + cosine to 0).

    models: G Hugging Face GPT-2 models (updated in place at the end);
    datasets: G tensors (N_g, S) int64, model g's training set; seeds: G batch-order
    seeds (:class:`BatchStream`). ``evaluate(params) -> G floats`` is called at the
    steps of ``evaluate_at`` (0 and ``steps`` included if listed). There is no
    early stop: the schedule fixes the length, so a run cannot end before it.
    Returns ``{"step": [...], "value": [[G floats], ...], "tokens": per model}``.
    """
    G = len(models)
    if G < 1 or len(datasets) != G or len(seeds) != G:
        raise ValueError(
            f"parameter 'datasets': need one data set and one seed per model "
            f"(got {G} models, {len(datasets)} data sets, {len(seeds)} seeds)"
        )
    dev = next(models[0].parameters()).device
    params = {k: v.to(dev).detach().requires_grad_(True) for k, v in stack(models).items()}
    tensors = list(params.values())
    dtype = tensors[0].dtype
    opt = _optimizer(tensors, lr, dtype)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, cosine_lambda(steps, warmup))
    streams = [BatchStream(len(d), batch_size, s) for d, s in zip(datasets, seeds)]
    data = [d.to(dev) for d in datasets]
    at = set(evaluate_at)
    hist = {"step": [], "value": [], "tokens": 0}

    def record(step):
        if evaluate is not None and step in at:
            hist["step"].append(step)
            hist["value"].append([float(v) for v in evaluate(params)])

    record(0)
    for step in progress(range(1, steps + 1), desc=desc):
        batch = torch.stack([d[s.next().to(dev)] for d, s in zip(data, streams)])  # (G, B, S)
        logp = token_log_probs(params, batch, vocab_size, n_head)
        nll = -logp.gather(-1, batch[..., None]).squeeze(-1)  # (G, B, S)
        loss = nll.mean(dim=(1, 2)).sum()  # each model's own mean: gradients stay per model
        optimizer_step(loss, opt, sched, tensors, max_grad_norm, clip=_clip_per_model)
        hist["tokens"] += batch[0].numel()
        record(step)
    unstack_into(params, models)
    for m in models:
        m.eval()
    return hist


@torch.no_grad()
def _clip_per_model(tensors: list[torch.Tensor], max_norm: float) -> None:
    """torch.nn.utils.clip_grad_norm_ applied to each model's slice of the stacked gradients."""
    sq = torch.stack([t.grad.reshape(t.shape[0], -1).float().pow(2).sum(1) for t in tensors]).sum(0)  # (G,)
    coef = (max_norm / (sq.sqrt() + 1e-6)).clamp(max=1.0)
    for t in tensors:
        t.grad.mul_(coef.view(-1, *([1] * (t.ndim - 1))).to(t.grad.dtype))


def train_one(
    model: torch.nn.Module,
    data: torch.Tensor,
    vocab_size: int,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    warmup: int,
    seed: int,
    max_grad_norm: float = 1.0,
    desc: str = "train",
) -> dict:
    """The one-model-at-a-time reference of :func:`train_stacked`: the HF forward, same schedule and batches.

    data: (N, S) int64. Returns ``{"tokens": tokens trained on}``.
    """
    from memlab.models.gpt2_small import lm_loss

    dev = next(model.parameters()).device
    tensors = [p for p in model.parameters()]
    opt = _optimizer(tensors, lr, tensors[0].dtype)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, cosine_lambda(steps, warmup))
    stream = BatchStream(len(data), batch_size, seed)
    data = data.to(dev)
    model.train()
    tokens = 0
    for _ in progress(range(steps), desc=desc):
        batch = data[stream.next().to(dev)]
        optimizer_step(lm_loss(model, batch, vocab_size), opt, sched, tensors, max_grad_norm)
        tokens += batch.numel()
    model.eval()
    return {"tokens": tokens}
