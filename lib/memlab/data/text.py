"""Text corpora from a path and BPE tokenizers trained with ``tokenizers`` (cached)."""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Iterable, Sequence

from memlab.config import ConfigError, data_root

WIKITEXT_SPLITS = {"valid": "valid.txt", "test": "test.txt", "train": "train.txt"}


def load_wikitext2(split: str = "valid", root=None) -> str:
    """The raw text of a WikiText-2 split (tokenised, with ``<unk>``), as one string.

    root: a folder holding ``valid.txt``/``test.txt`` (default ``$MEMLAB_DATA_ROOT/wikitext-2``).
    """
    if split not in WIKITEXT_SPLITS:
        raise ConfigError(f"parameter 'split': must be one of {', '.join(WIKITEXT_SPLITS)} (got {split!r})")
    folder = Path(root).expanduser() if root is not None else (data_root() / "wikitext-2" if data_root() else None)
    path = folder / WIKITEXT_SPLITS[split] if folder is not None else None
    if path is None or not path.exists():
        raise ConfigError(
            f"parameter 'data_root': WikiText-2 file {str(path)!r} not found; set MEMLAB_DATA_ROOT (or data_root) "
            "to a folder holding wikitext-2/valid.txt and test.txt"
        )
    return path.read_text(encoding="utf-8")


def wikitext_articles(text: str) -> list[str]:
    """Split WikiText text into articles at top-level `` = Title = `` lines (sub-headings stay inside)."""
    articles, current = [], []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("= ") and s.endswith(" =") and not s.startswith("= ="):
            if current:
                articles.append("\n".join(current).strip())
            current = [s]
        elif s:
            current.append(s)
    if current:
        articles.append("\n".join(current).strip())
    return [a for a in articles if a]


def tokenizer_cache_dir() -> Path:
    from memlab.cache import sibling_dir

    return sibling_dir("tokenizers")


def train_bpe(
    texts: Sequence[str] | Iterable[str],
    vocab_size: int,
    special_tokens: Sequence[str] = (),
    name: str = "bpe",
    byte_level: bool = True,
):
    """A byte-level BPE ``tokenizers.Tokenizer`` trained on ``texts`` (cached by content hash).

    The cache key covers the texts, the vocabulary size and the special tokens,
    so a different corpus never reuses a stale tokenizer.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if not isinstance(vocab_size, int) or vocab_size < 2:
        raise ConfigError(f"parameter 'vocab_size': must be an integer >= 2 (got {vocab_size!r})")
    texts = list(texts)
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\x00")
    h.update(repr((vocab_size, tuple(special_tokens), byte_level)).encode())
    path = tokenizer_cache_dir() / f"{name}-{h.hexdigest()[:16]}.json"
    if path.exists():
        return Tokenizer.from_file(str(path))
    tok = Tokenizer(models.BPE(unk_token=None if byte_level else "<unk>"))
    if byte_level:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        alphabet = []
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(special_tokens), initial_alphabet=alphabet, show_progress=False
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".json.tmp")
    os.close(fd)
    try:
        tok.save(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tok
