"""Text corpora from a path (or fetched once from a pinned URL) and BPE tokenizers (``tokenizers``).

WikiText-2 is looked for, in order, in ``root``, ``$MEMLAB_DATA_ROOT/wikitext-2``
and ``<repo>/data/wikitext-2`` (where a download goes). When none holds the
split and downloads are allowed (``MEMLAB_ALLOW_DOWNLOAD=1``, set by ``memlab
run --allow-download``), it is fetched from the copy shipped with PyTorch's
word-language-model example, pinned to a commit and checked against its
SHA-256, with a progress bar and one line saying where it went.
"""
from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path
from typing import Callable, Iterable, Sequence

from memlab.core.config import ConfigError, data_root

WIKITEXT_SPLITS = {"valid": "valid.txt", "test": "test.txt", "train": "train.txt"}
_EXAMPLES = ("https://raw.githubusercontent.com/pytorch/examples/{commit}/"
             "word_language_model/data/wikitext-2/{name}")
# (url, sha256, bytes) of the raw, tokenised WikiText-2 splits the chapters read (Merity et al., 2016).
WIKITEXT_SOURCES = {
    "valid": (_EXAMPLES.format(commit="37ce9402ff0cae48d764d7788810fd2ed8238b25", name="valid.txt"),
              "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8", 1121681),
    "test": (_EXAMPLES.format(commit="cada773327ba94a5970e0d57c17c847d69dbbb8f", name="test.txt"),
             "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0", 1256449),
}
MIN_WORDS = 1000  # the preflight's floor; the real valid and test splits hold ~217k and ~245k words


def _candidates(root) -> list[Path]:
    from memlab.data.download import download_dir

    if root is not None:
        return [Path(root).expanduser()]
    base = data_root()
    return ([base / "wikitext-2"] if base is not None else []) + [download_dir() / "wikitext-2"]


def find_wikitext2(split: str, root=None) -> Path | None:
    """The file of a WikiText-2 split in the first place that holds it (see the module doc), or None."""
    for folder in _candidates(root):
        path = folder / WIKITEXT_SPLITS[split]
        if path.exists():
            return path
    return None


def _urlopen(url: str):
    """The network fetch (a seam for tests, which replace it)."""
    import urllib.request

    return urllib.request.urlopen(url, timeout=60)


def fetch_wikitext2(split: str, dest: Path | None = None, opener: Callable | None = None) -> Path:
    """Download a WikiText-2 split into ``dest`` (default ``<repo>/data/wikitext-2``), checksum-verified.

    The file is written under a temporary name and renamed only after its
    SHA-256 matched, so a failed or tampered download leaves nothing behind.
    """
    from memlab.core.fsutil import tmp_path
    from memlab.core.progress import progress
    from memlab.data.download import download_dir

    if split not in WIKITEXT_SOURCES:
        raise ConfigError(f"parameter 'split': WikiText-2 {split!r} has no pinned download "
                          f"(available: {', '.join(WIKITEXT_SOURCES)})")
    url, sha, size = WIKITEXT_SOURCES[split]
    dest = Path(dest) if dest is not None else download_dir() / "wikitext-2"
    dest.mkdir(parents=True, exist_ok=True)
    final, tmp = dest / WIKITEXT_SPLITS[split], tmp_path(dest, WIKITEXT_SPLITS[split])
    h = hashlib.sha256()
    try:
        with (opener or _urlopen)(url) as resp, open(tmp, "xb") as out, \
                progress(total=size, desc=f"download wikitext-2/{split}", unit="B", unit_scale=True) as bar:
            while block := resp.read(1 << 16):
                h.update(block)
                out.write(block)
                bar.update(len(block))
        if h.hexdigest() != sha:
            raise ConfigError(f"parameter 'data_root': the download of {url} does not match its pinned "
                              f"SHA-256 (got {h.hexdigest()[:16]}..., expected {sha[:16]}...); "
                              "nothing was kept")
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    print(f"memlab: downloaded WikiText-2 {split} into {final} (reused by later runs)", file=sys.stderr)
    return final


def _download_allowed(download: bool | None) -> bool:
    from memlab.data.download import allow_download

    return allow_download(download)


def _missing_message(split: str, root) -> str:
    looked = ", ".join(str(c / WIKITEXT_SPLITS[split]) for c in _candidates(root))
    return (f"parameter 'data_root': WikiText-2 {split} split not found (looked at {looked}); "
            "set MEMLAB_DATA_ROOT to a folder holding wikitext-2/valid.txt and test.txt, "
            "or pass --allow-download to fetch it")


def check_wikitext(splits: Sequence[str] = ("valid", "test"), root=None, download: bool | None = None,
                   min_words: int = MIN_WORDS) -> str:
    """Preflight of the WikiText-2 splits a run reads; returns a one-line description of the source.

    Refuses (ConfigError naming the file) a missing split when downloads are
    not allowed, and a file that is not UTF-8, or empty, or shorter than
    ``min_words`` words.
    """
    found = []
    for split in splits:
        path = find_wikitext2(split, root)
        if path is None:
            if _download_allowed(download) and split in WIKITEXT_SOURCES:
                found.append(f"{split}: to be downloaded")
                continue
            raise ConfigError(_missing_message(split, root))
        _check_text_file(path, min_words)
        found.append(f"{split}: {path}")
    return "WikiText-2 " + "; ".join(found)


def _check_text_file(path: Path, min_words: int) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"parameter 'data_root': WikiText-2 file {str(path)!r} is not UTF-8 text "
                          f"(byte {err.start})") from None
    except OSError as err:
        raise ConfigError(f"parameter 'data_root': WikiText-2 file {str(path)!r} cannot be read "
                          f"({type(err).__name__})") from None
    words = len(text.split())
    if words < min_words:
        what = "is empty" if words == 0 else f"is too short ({words} words, at least {min_words} needed)"
        raise ConfigError(f"parameter 'data_root': WikiText-2 file {str(path)!r} {what}; "
                          "the real valid/test splits hold ~217k/~245k words")
    return text


def load_wikitext2(split: str = "valid", root=None, download: bool | None = None) -> str:
    """The raw text of a WikiText-2 split (tokenised, with ``<unk>``), as one string.

    root: a folder holding ``valid.txt``/``test.txt`` (default: see the module
    doc). ``download`` (default ``MEMLAB_ALLOW_DOWNLOAD``) fetches a missing
    split once. An empty file is refused naming it.
    """
    if split not in WIKITEXT_SPLITS:
        raise ConfigError(f"parameter 'split': must be one of {', '.join(WIKITEXT_SPLITS)} (got {split!r})")
    path = find_wikitext2(split, root)
    if path is None:
        if not (_download_allowed(download) and split in WIKITEXT_SOURCES):
            raise ConfigError(_missing_message(split, root))
        path = fetch_wikitext2(split)
    return _check_text_file(path, 1)


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



def _body_lines(text: str):
    """The stripped lines of WikiText text that carry prose: no blank lines, no ``= Heading =`` lines."""
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("="):
            yield line


def wikitext_paragraphs(text: str, min_words: int = 5, min_sentences: int = 2) -> list[list[str]]:
    """Paragraphs of (tokenised) WikiText as lists of sentences, split at `` . ``.

    One paragraph per prose line (:func:`_body_lines`); each sentence keeps the
    tokenised spacing and gets `` .`` appended (a line's last sentence, which kept its own
    `` .``, ends in `` . .``); sentences of fewer than ``min_words`` words are dropped, and
    paragraphs with fewer than ``min_sentences`` sentences left.
    Returns a list (paragraphs) of lists (sentences) of str.
    """
    if min_words < 0 or min_sentences < 1:
        raise ValueError(f"wikitext_paragraphs: need min_words >= 0 and min_sentences >= 1 "
                         f"(got {min_words}, {min_sentences})")
    paras = []
    for line in _body_lines(text):
        sents = [s.strip() + " ." for s in line.split(" . ") if len(s.split()) >= min_words]
        if len(sents) >= min_sentences:
            paras.append(sents)
    return paras


def wikitext_sentences(text: str, n: int, seed: int = 0, min_words: int = 8, max_words: int = 24) -> list[str]:
    """``n`` clean sentences (a list of str) from WikiText: de-tokenised spacing, no ``<unk>``, no headings.

    Sentences of ``min_words`` to ``max_words`` words that start upper-case, end in
    ``.`` and hold no ``<unk>`` or ``"``, shuffled with ``numpy.random.default_rng(seed)``;
    the first ``n`` (fewer if the text has fewer).
    """
    import numpy as np

    if n < 0:
        raise ValueError(f"wikitext_sentences: n must be >= 0 (got {n})")
    if min_words > max_words:
        raise ValueError(f"wikitext_sentences: min_words must be <= max_words (got {min_words} > {max_words})")
    out = []
    for line in _body_lines(text):
        line = line.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
        line = re.sub(r" ([.,;:!?')])", r"\1", line).replace("( ", "(").replace(" 's", "'s")
        for sent in re.split(r"(?<=[.!?]) ", line):
            words = sent.split()
            if "<unk>" in sent or '"' in sent or not min_words <= len(words) <= max_words:
                continue
            if sent[0].isupper() and sent.endswith("."):
                out.append(sent)
    rng = np.random.default_rng(seed)
    rng.shuffle(out)
    return out[:n]

def _report_damaged(path: Path, err: BaseException) -> None:
    """Warn once that a cached file is unreadable and remove it, so it is rebuilt."""
    from memlab.core import notices
    from memlab.core.cache import CacheWarning

    notices.warn(f"cache: {path} is damaged ({type(err).__name__}); rebuilding it", CacheWarning, stacklevel=3)
    path.unlink(missing_ok=True)


def tokenizer_cache_dir() -> Path:
    from memlab.core.cache import sibling_dir

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
        try:
            return Tokenizer.from_file(str(path))
        except Exception as err:  # noqa: BLE001 - a damaged file is rebuilt, like a cache entry
            _report_damaged(path, err)
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
    from memlab.core.fsutil import tmp_path

    tmp = tmp_path(path.parent, path.name)
    try:
        tok.save(str(tmp))  # umask permissions (mkstemp would make it 0600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tok


# ----------------------------------------------------------------------------- token blocks and pairs (chapter 4)

INSTRUCTION_PROMPT = "Instruction : continue the article . Input : {x} Response :"


def stream_blocks(ids: list[int], length: int) -> "torch.Tensor":
    """Cut a token stream (a list of N int ids) into consecutive (N // length, length) int64 blocks.

    The tail that does not fill a block is dropped.
    """
    import torch

    if length < 1:
        raise ValueError(f"stream_blocks: length must be >= 1 (got {length})")
    n = len(ids) // length
    return torch.tensor(ids[: n * length], dtype=torch.long).view(n, length)


def instruction_pairs(text: str, codec, length: int, prompt: str = INSTRUCTION_PROMPT):
    """Variable-length prompt/response pairs from consecutive sentences of one WikiText paragraph.

    Prompt = ``prompt`` around sentence i (at most length/2 tokens, cut from the
    left), response = sentence i+1 (cut to fit; pairs with fewer than 4 response tokens
    are dropped); sentences from :func:`wikitext_paragraphs`. ``codec`` needs
    ``encode_many(list[str]) -> list[list[int]]`` and ``pad_id``. Returns ids (N, length)
    int64 padded with ``pad_id``, eligible (N, length) bool True on response tokens,
    attention (N, length) bool True on prompt and response.
    """
    import torch

    if length < 2:
        raise ValueError(f"instruction_pairs: length must be >= 2 (got {length})")
    rows, elig, attn = [], [], []
    pairs = [(a, b) for sents in wikitext_paragraphs(text) for a, b in zip(sents[:-1], sents[1:])]
    prompts = codec.encode_many([prompt.format(x=a) for a, _ in pairs])
    responses = codec.encode_many([" " + b for _, b in pairs])
    for p, r in zip(prompts, responses):
        p = p[-(length // 2):]
        r = r[: length - len(p)]
        if len(r) < 4:
            continue
        ids = p + r + [codec.pad_id] * (length - len(p) - len(r))
        rows.append(ids)
        e = [False] * len(p) + [True] * len(r) + [False] * (length - len(p) - len(r))
        elig.append(e)
        attn.append([True] * (len(p) + len(r)) + [False] * (length - len(p) - len(r)))
    return torch.tensor(rows), torch.tensor(elig), torch.tensor(attn)


def perturb(ids, eligible, frac: float, vocab: int, specials, seed: int):
    """Replace a ``frac`` share (a probability per token) of eligible tokens by random non-special ids.

    ids: (N, L) int64; eligible: (N, L) bool; random ids are drawn in [0, vocab) and a
    special id is moved to the next id. Deterministic in ``seed`` (its own generator).
    Returns the (N, L) perturbed ids (Table 4's para-modification data).
    """
    import torch

    if not 0.0 <= frac <= 1.0:
        raise ValueError(f"perturb: frac must be a fraction in [0, 1] (got {frac})")
    g = torch.Generator().manual_seed(seed)
    hit = (torch.rand(ids.shape, generator=g) < frac) & eligible
    rnd = torch.randint(0, vocab, ids.shape, generator=g)
    for s in specials:
        rnd = torch.where(rnd == s, (rnd + 1) % vocab, rnd)
    return torch.where(hit, rnd, ids)
