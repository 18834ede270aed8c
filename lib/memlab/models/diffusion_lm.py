"""A masked diffusion language model (LLaDA-style) and its masked-likelihood interface.

Three things live here:

* :class:`MaskedDiffusionLM`, a small bidirectional transformer with a mask
  token, the model the ``smoke`` and ``cpu`` profiles pre-train and fine-tune;
* :func:`llada_loss` and :func:`train_dlm`, the LLaDA training objective
  (t ~ U(0, 1), each eligible token masked with probability t, cross-entropy on
  masked tokens weighted by 1/t) and a plain AdamW loop around it;
* :func:`masked_nll`, the one masked-likelihood interface every membership score
  uses: per-token negative log-probabilities of the original tokens at masked
  positions, for given mask patterns, batched. :func:`load_pretrained` wraps
  LLaDA-8B / Dream-7B from ``transformers`` behind the same interface.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from memlab.core.config import autocast
from memlab.core.progress import progress
from memlab.models.train import optimizer_step

# Mask-token ids and logit conventions of the paper's models. Dream is adapted
# from an autoregressive model, so its logit at position i predicts token i+1;
# shifting right by one aligns it with the masked position.
FAMILIES: dict[str, dict] = {
    "llada": {"mask_id": 126336, "shift_logits": False,
              "base": "GSAI-ML/LLaDA-8B-Base", "instruct": "GSAI-ML/LLaDA-8B-Instruct"},
    "dream": {"mask_id": 151666, "shift_logits": True,
              "base": "Dream-org/Dream-v0-Base-7B", "instruct": "Dream-org/Dream-v0-Instruct-7B"},
}


@dataclass
class DLMConfig:
    """Size of a :class:`MaskedDiffusionLM` (nanoGPT-style)."""

    vocab_size: int
    mask_id: int
    block_size: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


class _Block(nn.Module):
    def __init__(self, cfg: DLMConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(),
                                 nn.Linear(4 * cfg.n_embd, cfg.n_embd))
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, attn_bias: torch.Tensor | None,
                select: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, C) -> (B, L, C); with ``select`` (B, L) bool only the selected rows, (n_selected, C).

        Every position still serves as a key and value; only the rows after the
        attention (projection, MLP) are restricted to the selection.
        """
        b, l, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (t.view(b, l, self.n_head, c // self.n_head).transpose(1, 2) for t in (q, k, v))
        # Bidirectional: no causal mask, only padded keys are hidden.
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias).transpose(1, 2)
        if select is not None:
            x, y = x[select], y[select]
        x = x + self.drop(self.proj(y.reshape(x.shape)))
        return x + self.drop(self.mlp(self.ln2(x)))


class MaskedDiffusionLM(nn.Module):
    """Bidirectional transformer denoiser p_theta(x0 | x_t) with a mask token.

    ``forward(ids, attention_mask)``: ids (B, L) int64 token ids (masked positions
    hold ``mask_id``), attention_mask (B, L) bool, True for real tokens (None: all
    real). Returns logits (B, L, V) float32 (float64 for a float64 model) for the original token at
    every position.
    """

    shift_logits = False

    def __init__(self, cfg: DLMConfig):
        super().__init__()
        if not 0 <= cfg.mask_id < cfg.vocab_size:
            raise ValueError(f"parameter 'mask_id': must be in [0, {cfg.vocab_size}) (got {cfg.mask_id})")
        self.cfg = cfg
        self.mask_id = cfg.mask_id
        self.vocab_size = cfg.vocab_size
        self.tok = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(_Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                select: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, L, V); with ``select`` (B, L) bool only the selected rows, (n_selected, V)."""
        b, l = ids.shape
        if l > self.cfg.block_size:
            raise ValueError(f"parameter 'ids': length {l} exceeds block_size {self.cfg.block_size}")
        x = self.tok(ids) + self.pos(torch.arange(l, device=ids.device))
        bias = None
        if attention_mask is not None:
            bias = torch.zeros(b, 1, 1, l, device=ids.device, dtype=x.dtype)
            bias = bias.masked_fill(~attention_mask.bool()[:, None, None, :], float("-inf"))
        # Only the selected rows reach the output, so the last block's projection and
        # MLP and the vocabulary head (a large share of the cost) skip the others.
        for i, blk in enumerate(self.blocks):
            x = blk(x, bias, select if i == len(self.blocks) - 1 else None)
        logits = self.head(self.ln_f(x))
        return logits.to(torch.promote_types(logits.dtype, torch.float32))  # float64 models stay exact


class HFDiffusionLM(nn.Module):
    """A ``transformers`` masked diffusion LM (LLaDA, Dream) behind the same forward.

    ``forward(ids (B, L), attention_mask (B, L) | None) -> logits (B, L, V)``, with
    Dream's autoregressive-style logits shifted right by one so that position i
    scores token i.
    """

    def __init__(self, hf_model: nn.Module, mask_id: int, shift_logits: bool):
        super().__init__()
        self.hf = hf_model
        self.mask_id = int(mask_id)
        self.shift_logits = bool(shift_logits)
        out = hf_model.get_output_embeddings() if hasattr(hf_model, "get_output_embeddings") else None
        self.vocab_size = int(out.weight.shape[0]) if out is not None else int(hf_model.config.vocab_size)

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        kwargs = {}
        if attention_mask is not None and not attention_mask.all():
            kwargs["attention_mask"] = attention_mask.long()
        out = self.hf(input_ids=ids, **kwargs)
        logits = out.logits if hasattr(out, "logits") else out[0]
        if self.shift_logits:
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        return logits.float()


def load_pretrained(name_or_path: str, family: str, *, auto_class: str = "AutoModel",
                    trust_remote_code: bool = False, dtype: torch.dtype | None = None,
                    device: torch.device | str | None = None, mask_id: int | None = None) -> HFDiffusionLM:
    """Load LLaDA / Dream (or any masked LM) through ``transformers``.

    family: ``"llada"`` (mask id 126336) or ``"dream"`` (mask id 151666, shifted logits).
    LLaDA and Dream ship their own modelling code: pass ``trust_remote_code=True``
    only when you mean to run it. ``mask_id`` overrides the family's id (tests
    use it with tiny local models).
    """
    import transformers

    if family not in FAMILIES:
        raise ValueError(f"parameter 'family': must be one of {', '.join(FAMILIES)} (got {family!r})")
    cls = getattr(transformers, auto_class, None)
    if cls is None or not hasattr(cls, "from_pretrained"):
        raise ValueError(f"parameter 'auto_class': {auto_class!r} is not a transformers Auto class")
    from memlab.models import hub

    # A pinned revision (the cached snapshot or NAME@<commit>), and remote code only for a model
    # the user named with --trust-remote-code (memlab.models.hub).
    src, kwargs = hub.pretrained_kwargs(name_or_path, "base_model", trust_remote_code)
    if dtype is not None:
        kwargs["dtype"] = dtype
    hf = cls.from_pretrained(src, **kwargs)
    if device is not None:
        hf = hf.to(device)
    fam = FAMILIES[family]
    return HFDiffusionLM(hf.eval(), fam["mask_id"] if mask_id is None else mask_id, fam["shift_logits"])


def check_same_vocab(target: nn.Module, reference: nn.Module) -> None:
    """Raise ValueError unless the two models share vocabulary size and mask id."""
    if (target.vocab_size, target.mask_id) != (reference.vocab_size, reference.mask_id):
        raise ValueError(
            "parameter 'reference': must share the target's vocabulary "
            f"(target vocab {target.vocab_size}, mask id {target.mask_id}; "
            f"reference vocab {reference.vocab_size}, mask id {reference.mask_id})")


def _device_of(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def llada_loss(model: nn.Module, ids: torch.Tensor, eligible: torch.Tensor | None = None,
               attention_mask: torch.Tensor | None = None, mask_ratio: float | None = None,
               generator: torch.Generator | None = None, eps: float = 1e-3) -> torch.Tensor:
    """The LLaDA objective on one batch (a scalar tensor).

    ids: (B, L) int64 clean tokens. eligible: (B, L) bool, positions that may be
    masked (False for prompt tokens of instruction data and for padding; None: all
    real tokens). A ratio t ~ U(0, 1) is drawn per sequence (or fixed to
    ``mask_ratio``), each eligible token is masked with probability
    p = (1 - eps) t + eps, and the cross-entropy on masked tokens is weighted by
    1/p and averaged over the eligible tokens of each sequence, then over the batch.
    """
    b, l = ids.shape
    if eligible is None:
        eligible = torch.ones_like(ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    if mask_ratio is None:
        t = torch.rand(b, 1, generator=generator, device="cpu").to(ids.device)
    else:
        t = torch.full((b, 1), float(mask_ratio), device=ids.device)
    p = (1 - eps) * t + eps
    draw = torch.rand(b, l, generator=generator, device="cpu").to(ids.device)
    masked = (draw < p) & eligible
    noisy = torch.where(masked, torch.full_like(ids, model.mask_id), ids)
    logits = model(noisy, attention_mask)
    ce = F.cross_entropy(logits.transpose(1, 2), ids, reduction="none")  # (B, L)
    per_seq = (ce * masked / p).sum(1) / eligible.sum(1).clamp(min=1)
    return per_seq.mean()


def train_dlm(model: nn.Module, ids: torch.Tensor, *, epochs: int, batch_size: int, lr: float,
              eligible: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
              mask_ratio: float | None = None, steps: int | None = None, seed: int = 0,
              weight_decay: float = 0.0, desc: str = "train dlm",
              on_epoch_end: Callable[[int, nn.Module], None] | None = None) -> nn.Module:
    """Train ``model`` in place with :func:`llada_loss` and AdamW.

    ids / eligible / attention_mask: (N, L) tensors of the whole training set.
    ``steps`` (if given) replaces epochs by a fixed number of sampled batches
    (used for pre-training). ``on_epoch_end(epoch, model)`` is called after each
    epoch (1-based), e.g. to snapshot weights for an epochs sweep.
    """
    dev = _device_of(model)
    n = ids.shape[0]
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.98))
    per_epoch = math.ceil(n / batch_size)
    total = steps if steps is not None else epochs * per_epoch
    warmup = max(1, total // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, total) / total))))
    model.train()
    bar = progress(total=total, desc=desc)
    step = 0
    n_epochs = math.ceil(total / per_epoch)
    for epoch in range(1, n_epochs + 1):
        order = torch.randperm(n, generator=g)
        for i in range(0, n, batch_size):
            if step >= total:
                break
            idx = order[i:i + batch_size]
            sel = lambda t: None if t is None else t[idx].to(dev)  # noqa: E731
            with autocast(dev):
                loss = llada_loss(model, sel(ids), sel(eligible), sel(attention_mask), mask_ratio, g)
            optimizer_step(loss, opt, sched, model.parameters(), 1.0)
            step += 1
            bar.update(1)
        if on_epoch_end is not None and steps is None:
            model.eval()
            on_epoch_end(epoch, model)
            model.train()
    bar.close()
    model.eval()
    return model


def log_prob_stats(log_probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard deviation of log p under p, per row.

    log_probs: (..., V) normalised log-probabilities. Returns mu, sigma (...,):
    mu = sum_v p_v log p_v, sigma^2 = sum_v p_v (log p_v)^2 - mu^2 (Min-K%++ statistics).
    """
    p = log_probs.exp()
    mu = (p * log_probs).sum(-1)
    var = (p * log_probs.square()).sum(-1) - mu.square()
    return mu, var.clamp(min=0).sqrt()


@torch.no_grad()
def masked_nll(model: nn.Module, ids: torch.Tensor, masks: torch.Tensor,
               attention_mask: torch.Tensor | None = None, batch_size: int = 64,
               with_stats: bool = False, with_brier: bool = False) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """Per-token NLL of the original tokens at masked positions, for given mask patterns.

    ids: (N, L) int64 clean tokens; masks: (N, L) bool, True where the token is
    replaced by the model's mask token (one pattern per row; repeat a sequence to
    score it under several patterns); attention_mask: (N, L) bool or None.
    Returns nll (N, L) in nats (float32; float64 for a float64 model), NaN where not masked. With ``with_stats``
    also returns mu, sigma (N, L) of :func:`log_prob_stats`; with ``with_brier`` also
    (last) the squared error ||p - e_x||^2 = sum_v p_v^2 - 2 p_x + 1 between the predicted
    distribution and the one-hot true token (SecMI's error in the masked setting), each
    NaN where not masked.
    """
    if ids.shape != masks.shape:
        raise ValueError(f"parameter 'masks': must have the shape of ids {tuple(ids.shape)} (got {tuple(masks.shape)})")
    dev = _device_of(model)
    was_training = model.training
    model.eval()
    outs: list[list[torch.Tensor]] = [[], [], [], []]
    for i in range(0, ids.shape[0], batch_size):
        x = ids[i:i + batch_size].to(dev)
        m = masks[i:i + batch_size].to(dev).bool()
        am = None if attention_mask is None else attention_mask[i:i + batch_size].to(dev).bool()
        noisy = torch.where(m, torch.full_like(x, model.mask_id), x)
        with autocast(dev):
            # Only masked rows are scored (about rho of them); models that can skip the
            # vocabulary head elsewhere (MaskedDiffusionLM) do.
            if isinstance(model, MaskedDiffusionLM):
                logits = model(noisy, am, select=m)
            else:
                logits = model(noisy, am)[m]
        # bf16/fp16 logits are scored in float32; a float64 model stays float64 (exact tests)
        logp = torch.log_softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)
        nll = torch.full(x.shape, float("nan"), device=dev, dtype=logp.dtype)  # (n, L)
        nll[m] = -logp.gather(-1, x[m].unsqueeze(-1)).squeeze(-1)
        outs[0].append(nll.cpu())
        if with_stats:
            mu_m, sigma_m = log_prob_stats(logp)
            mu, sigma = torch.full_like(nll, float("nan")), torch.full_like(nll, float("nan"))
            mu[m], sigma[m] = mu_m, sigma_m
            outs[1].append(mu.cpu())
            outs[2].append(sigma.cpu())
        if with_brier:
            p = logp.exp()
            err = torch.full_like(nll, float("nan"))
            err[m] = p.square().sum(-1) - 2 * p.gather(-1, x[m].unsqueeze(-1)).squeeze(-1) + 1
            outs[3].append(err.cpu())
    model.train(was_training)
    res = [torch.cat(outs[0])]
    if with_stats:
        res += [torch.cat(outs[1]), torch.cat(outs[2])]
    if with_brier:
        res.append(torch.cat(outs[3]))
    return res[0] if len(res) == 1 else tuple(res)


def unigram_nll(train_ids: torch.Tensor, eval_ids: torch.Tensor, vocab_size: int, exclude=()) -> float:
    """Mean NLL (nats/token) of ``eval_ids`` under a unigram model of ``train_ids``, add-one smoothed.

    train_ids, eval_ids: int tensors of any shape (flattened). ``exclude``: token ids
    (mask, padding) given no probability and not scored. The floor a masked LM reaches
    without reading any context: a base whose masked NLL is not clearly below it has
    learned token frequencies, not language.
    """
    keep = torch.ones(vocab_size, dtype=torch.bool)
    for t in exclude:
        keep[t] = False
    tr, ev = train_ids.flatten().long(), eval_ids.flatten().long()
    if ((tr < 0) | (tr >= vocab_size)).any() or ((ev < 0) | (ev >= vocab_size)).any():
        raise ValueError(f"parameter 'train_ids': token ids must lie in [0, {vocab_size})")
    counts = torch.bincount(tr[keep[tr]], minlength=vocab_size).double() + keep.double()
    logp = torch.log(counts / counts[keep].sum())
    ev = ev[keep[ev]]
    if ev.numel() == 0:
        raise ValueError("parameter 'eval_ids': no token left to score")
    return float(-logp[ev].mean())


@torch.no_grad()
def denoise(model: nn.Module, ids: torch.Tensor, masks: torch.Tensor, *, steps: int = 16,
            temperature: float = 1.0, generator: torch.Generator | None = None,
            attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Fill masked positions by iterative denoising (LLaDA low-confidence remasking).

    ids: (B, L) int64 with anything at masked positions; masks: (B, L) bool.
    Each of ``steps`` steps samples every still-masked token from the model's
    distribution at ``temperature`` (0: greedy) and keeps the most confident
    share so that all masks are filled after the last step. Returns (B, L) int64.
    """
    if steps < 1:
        raise ValueError(f"parameter 'steps': must be >= 1 (got {steps})")
    dev = _device_of(model)
    x = torch.where(masks.bool(), torch.full_like(ids, model.mask_id), ids).to(dev)
    still = masks.bool().to(dev).clone()
    am = None if attention_mask is None else attention_mask.to(dev)
    n_masked = still.sum(1)
    for s in range(steps):
        if not still.any():
            break
        logits = model(x, am).float()
        logits[..., model.mask_id] = float("-inf")  # never "predict" the mask itself
        if temperature > 0:
            probs = torch.softmax(logits / temperature, -1)
            flat = probs.view(-1, probs.shape[-1]).cpu()
            pred = torch.multinomial(flat, 1, generator=generator).view(x.shape).to(dev)
        else:
            probs = torch.softmax(logits, -1)
            pred = probs.argmax(-1)
        conf = probs.gather(-1, pred.unsqueeze(-1)).squeeze(-1)
        conf = torch.where(still, conf, torch.tensor(-1.0, device=dev))
        # Number of tokens to reveal so the schedule ends with nothing masked.
        target_left = (n_masked * (steps - s - 1)) // steps
        k = still.sum(1) - target_left
        order = conf.argsort(dim=1, descending=True)
        rank = order.argsort(dim=1)
        reveal = still & (rank < k.unsqueeze(1))
        x = torch.where(reveal, pred, x)
        still = still & ~reveal
    return x.cpu()


# ----------------------------------------------------------------------------- tokenizers and checkpoints

@dataclass
class Codec:
    """Text <-> token ids (``list[int]``) for one backbone, with the special ids a DLM needs.

    ``encode(str) -> list[int]``, ``decode(list[int]) -> str``; ``encode_batch`` (optional)
    encodes a list of texts at once, as :meth:`encode_many` does either way.
    """

    encode: Callable[[str], list[int]]
    decode: Callable[[list[int]], str]
    vocab_size: int
    mask_id: int
    pad_id: int
    eos_id: int
    encode_batch: Callable[[list[str]], list[list[int]]] | None = None

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        if self.encode_batch is not None:
            return self.encode_batch(texts)
        return [self.encode(t) for t in texts]


def bpe_codec(texts: list[str], vocab_size: int, name: str = "bpe") -> Codec:
    """A byte-level BPE :class:`Codec` of ``vocab_size`` ids trained on ``texts`` (cached by content).

    The specials ``<mask>``, ``<pad>``, ``<eos>`` take the first ids
    (:func:`memlab.data.text.train_bpe`); returns the codec (int ids).
    """
    from memlab.data.text import train_bpe

    tok = train_bpe(texts, vocab_size, special_tokens=("<mask>", "<pad>", "<eos>"), name=name)
    return Codec(lambda s: tok.encode(s).ids, lambda ids: tok.decode(list(ids)), tok.get_vocab_size(),
                 tok.token_to_id("<mask>"), tok.token_to_id("<pad>"), tok.token_to_id("<eos>"),
                 lambda texts: [e.ids for e in tok.encode_batch(texts)])


def hf_codec(name_or_path: str, mask_id: int, trust_remote_code: bool = False) -> Codec:
    """The :class:`Codec` of a ``transformers`` checkpoint's tokenizer (no special tokens added; int ids).

    ``mask_id``: the family's mask id (:data:`FAMILIES`); pad falls back to eos, eos to sep.
    The revision is pinned and remote code runs only by name (:mod:`memlab.models.hub`).
    """
    from transformers import AutoTokenizer

    from memlab.models import hub

    src, kwargs = hub.pretrained_kwargs(name_or_path, "base_model", trust_remote_code)
    tok = AutoTokenizer.from_pretrained(src, **kwargs)  # pinned revision, remote code only by name
    eos = tok.eos_token_id if tok.eos_token_id is not None else tok.sep_token_id
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos
    return Codec(lambda s: tok.encode(s, add_special_tokens=False), lambda ids: tok.decode(list(ids)),
                 len(tok), mask_id, pad, eos, lambda texts: tok(texts, add_special_tokens=False)["input_ids"])


class RecordTokenizer:
    """Adapter giving a :class:`Codec` the ``encode(text).ids`` shape (a list of int ids) that
    :func:`memlab.data.pii.encode_records` expects."""

    def __init__(self, codec: Codec):
        self.codec = codec

    def encode(self, text: str):
        return type("Enc", (), {"ids": self.codec.encode(text)})()


def auto_class(name_or_path: str, trust_remote_code: bool = False) -> str:
    """The ``transformers`` Auto class name for a checkpoint: ``"AutoModelForMaskedLM"`` or
    ``"AutoModelForCausalLM"`` by its config's architectures, else ``"AutoModel"`` (LLaDA/Dream:
    their remote code registers it). Returns a str for :func:`load_pretrained`."""
    from transformers import AutoConfig

    from memlab.models import hub

    src, kwargs = hub.pretrained_kwargs(name_or_path, "base_model", trust_remote_code)
    conf = AutoConfig.from_pretrained(src, **kwargs)
    archs = conf.architectures or []
    if any("MaskedLM" in a for a in archs):
        return "AutoModelForMaskedLM"
    if any("CausalLM" in a for a in archs):
        return "AutoModelForCausalLM"
    return "AutoModel"


def with_lora(model: nn.Module, rank: int) -> nn.Module:
    """Wrap an :class:`HFDiffusionLM` backbone in a LoRA adapter (peft) of ``rank`` (int), in place.

    ``rank <= 0`` or a non-HF model: returned unchanged. All linear layers get
    adapters (``lora_alpha = 2 * rank``), so 7-8B fine-tuning fits one GPU.
    """
    if rank <= 0 or not isinstance(model, HFDiffusionLM):
        return model
    from peft import LoraConfig, get_peft_model

    model.hf = get_peft_model(model.hf, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear"))
    return model


def train_snapshots(start: nn.Module, ids: torch.Tensor, *, keep, epochs: int, batch_size: int, lr: float,
                    seed: int, lora_rank: int = 0, eligible: torch.Tensor | None = None,
                    attention_mask: torch.Tensor | None = None, mask_ratio: float | None = None,
                    desc: str = "fine-tune") -> dict[str, torch.Tensor]:
    """Fine-tune a copy of ``start`` with :func:`train_dlm` and keep its state at the epochs in ``keep``.

    ids / eligible / attention_mask: (N, L) training set; ``lora_rank > 0`` trains a
    LoRA adapter (:func:`with_lora`) and keeps only the adapter tensors, which keeps
    8B snapshots small. Returns ``{"<epoch>/<parameter name>": tensor (on CPU)}``, the
    form :func:`load_snapshot` reads (and ``memlab.core.cache`` stores).
    """
    import copy

    model = with_lora(copy.deepcopy(start), lora_rank)
    states = {}

    def snap(epoch, m):
        if epoch in keep:
            for name, t in m.state_dict().items():
                if lora_rank <= 0 or "lora_" in name:
                    states[f"{epoch}/{name}"] = t.detach().cpu().clone()

    train_dlm(model, ids, eligible=eligible, attention_mask=attention_mask, epochs=epochs, batch_size=batch_size,
              lr=lr, mask_ratio=mask_ratio, seed=seed, desc=desc, on_epoch_end=snap)
    return states


def load_snapshot(start: nn.Module, states: dict[str, torch.Tensor], epoch: int, lora_rank: int = 0) -> nn.Module:
    """The model ``start`` with the epoch-``epoch`` snapshot of :func:`train_snapshots` loaded, in eval mode.

    states: ``{"<epoch>/<name>": tensor}``; with ``lora_rank > 0`` a fresh LoRA wrapper of
    a copy of ``start`` takes the adapter tensors (non-strict load). Returns a new module.
    """
    import copy

    m = with_lora(copy.deepcopy(start), lora_rank)
    m.load_state_dict({k.split("/", 1)[1]: v for k, v in states.items() if k.startswith(f"{epoch}/")},
                      strict=lora_rank <= 0)
    return m.eval()
