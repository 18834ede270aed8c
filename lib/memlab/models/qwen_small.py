"""A small Qwen2-architecture causal LM and the offline ``from_pretrained`` path (chapter 3).

At the ``cpu`` and ``smoke`` profiles the chapter builds a Qwen2 model from a
config (a few layers, hidden size 64-256) and pre-trains it itself; at the
``paper`` profile it loads a DeepSeek-R1 distillate with
``transformers.AutoModelForCausalLM.from_pretrained``. Both paths hand the
experiments a causal LM and a :class:`memlab.science.canaries.Codec`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from memlab.core.config import ConfigError

SPECIAL_TOKENS: tuple[str, ...] = ("<|pad|>", "<|user|>", "<|assistant|>", "<think>", "</think>", "<|end|>")


def small_config(vocab_size: int, hidden: int = 128, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                 max_len: int = 256, pad_id: int = 0, eos_id: int | None = None):
    """A ``Qwen2Config`` for a tiny model (input and output embeddings tied to save parameters)."""
    from transformers import Qwen2Config

    if hidden % heads or heads % kv_heads:
        raise ConfigError(f"parameter 'hidden': must be divisible by heads={heads} (and heads by kv_heads="
                          f"{kv_heads}); got hidden={hidden}")
    return Qwen2Config(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_len,
        tie_word_embeddings=True, pad_token_id=pad_id, eos_token_id=eos_id, bos_token_id=None,
        rope_theta=10000.0, use_cache=True, attn_implementation="sdpa",
    )


def build_small(config) -> torch.nn.Module:
    """A randomly initialised ``Qwen2ForCausalLM`` in fp32."""
    from transformers import Qwen2ForCausalLM

    return Qwen2ForCausalLM(config).float()


class TokenizerCodec:
    """A :class:`memlab.science.canaries.Codec` over a ``tokenizers.Tokenizer`` (special tokens kept on decode)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def token_id(self, token: str) -> int:
        idx = self.tokenizer.token_to_id(token)
        if idx is None:
            raise ValueError(f"token {token!r} is not in the vocabulary")
        return idx

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()


class HFCodec:
    """A :class:`memlab.science.canaries.Codec` over a transformers tokenizer."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def token_id(self, token: str) -> int:
        idx = self.tokenizer.convert_tokens_to_ids(token)
        if idx is None or idx == self.tokenizer.unk_token_id:
            raise ValueError(f"token {token!r} is not in the vocabulary")
        return idx

    @property
    def vocab_size(self) -> int:
        return len(self.tokenizer)


def save_pretrained(model, tokenizer, path: str | Path) -> Path:
    """Save a small model and its ``tokenizers.Tokenizer`` as a transformers folder."""
    from transformers import PreTrainedTokenizerFast

    path = Path(path)
    model.save_pretrained(path)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<|pad|>", eos_token="<|end|>")
    fast.save_pretrained(path)
    return path


def load_pretrained(name: str, *, allow_download: bool = False, dtype: torch.dtype | None = None,
                    device: str | torch.device | None = None):
    """``(model, HFCodec)`` from a hub name or a local folder, offline unless ``allow_download``.

    A name that cannot be resolved offline raises :class:`ConfigError` naming
    the ``model`` parameter, before any weights are read.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from memlab.models import hub

    # ``memlab run --allow-download`` reaches here through MEMLAB_ALLOW_DOWNLOAD; a hub name is
    # pinned to its cached snapshot or to the NAME@<commit> the user gave (memlab.models.hub).
    allow_download = allow_download or hub._download_allowed(None)
    local_only = not allow_download
    src, kwargs = hub.pretrained_kwargs(name, "model", False, allow_download)
    try:
        tok = AutoTokenizer.from_pretrained(src, **kwargs)
    except (OSError, ValueError) as err:
        where = "in the local Hugging Face cache or as a folder" if local_only else "on the hub"
        raise ConfigError(f"parameter 'model': {name!r} cannot be loaded {where} "
                          f"(download it first or set allow_download); {type(err).__name__}") from None
    model = AutoModelForCausalLM.from_pretrained(src, **kwargs, dtype=dtype or torch.float32)
    if device is not None:
        model = model.to(device)
    return model, HFCodec(tok)
