"""Synthetic data sets: uniformly random token sequences (chapter 5).

Every token is drawn uniformly from V symbols, independently of the others, so
a data set of N sequences of S tokens holds exactly N * S * log2(V) bits and
nothing in it can be generalised -- whatever a model learns of it is
memorisation.
"""
from __future__ import annotations

import torch

from memlab.core.config import ConfigError


def check_token_setting(n_samples: int, seq_len: int, vocab_size: int) -> None:
    """Raise ConfigError naming the parameter if N < 1, S < 2 or V < 2."""
    for name, value, low in (("n_samples", n_samples, 1), ("seq_len", seq_len, 2), ("vocab_size", vocab_size, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"parameter {name!r}: must be an integer >= {low} (got {value!r})")


def uniform_tokens(n_samples: int, seq_len: int, vocab_size: int, seed: int = 0) -> torch.Tensor:
    """(N, S) int64 tokens drawn i.i.d. uniformly from [0, V).

    The same seed gives the same set, and the first rows of a larger set equal a
    smaller set with that seed, so a sweep over N nests its data sets.
    """
    check_token_setting(n_samples, seq_len, vocab_size)
    gen = torch.Generator().manual_seed(int(seed))
    return torch.randint(0, vocab_size, (n_samples, seq_len), generator=gen, dtype=torch.int64)
