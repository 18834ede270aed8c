"""Synthetic records carrying personally identifiable information (PII).

The paper plants real e-mail addresses and phone numbers from the TREC corpus;
offline we generate look-alike records instead. Each record is a short
WikiText-style sentence about a fictional person followed by one PII string,
e.g. ``"Maria Lopez of the harbour survey , email : maria.lopez41@inbox.net"``. The PII always ends the record, so a model
fine-tuned on records padded with an end-of-text token learns where a PII
string stops, and reconstruction can insert a fixed number of mask tokens at the
PII position (the tokens after the PII become end-of-text padding).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

FIRST = ("maria", "james", "anna", "peter", "laura", "david", "sofia", "mark", "elena", "paul", "julia",
         "simon", "clara", "henry", "nora", "oscar", "alice", "victor", "irene", "felix", "helen", "martin",
         "lucy", "thomas", "emma", "george", "rosa", "daniel", "olga", "hugo")
LAST = ("lopez", "smith", "novak", "berg", "rossi", "meyer", "walsh", "kim", "silva", "dubois", "moreau",
        "fischer", "costa", "hughes", "larsen", "varga", "brandt", "reyes", "quinn", "ortiz", "foster",
        "weber", "nagy", "sato", "evans", "clarke", "russo", "haas", "lind", "marsh")
DOMAINS = ("inbox.net", "mail.com", "post.org", "corp.com", "web.net")
TOPICS = ("harbour survey", "railway budget", "museum archive", "river project", "school census",
          "bridge repair", "festival plan", "city council", "library fund", "county election",
          "mining report", "forest study", "naval history", "church records", "football season")
KINDS = ("email", "phone")


@dataclass(frozen=True)
class PIIRecord:
    """One record: ``text = prefix + " " + pii``; ``kind`` is ``"email"`` or ``"phone"``."""

    prefix: str
    pii: str
    kind: str

    @property
    def text(self) -> str:
        return f"{self.prefix} {self.pii}"


def _record(rng: np.random.Generator, kind: str) -> PIIRecord:
    first, last = rng.choice(FIRST), rng.choice(LAST)
    topic = rng.choice(TOPICS)
    if kind == "email":
        pii = f"{first}.{last}{rng.integers(10, 100)}@{rng.choice(DOMAINS)}"
    else:
        d = rng.integers(0, 10, 10)
        pii = f"{''.join(map(str, d[:3]))}-{''.join(map(str, d[3:6]))}-{''.join(map(str, d[6:]))}"
    name = f"{first.capitalize()} {last.capitalize()}"
    prefix = f"{name} of the {topic} , {kind} :"
    return PIIRecord(prefix, pii, kind)


def make_pii_records(n_per_kind: int, seed: int = 0) -> list[PIIRecord]:
    """``n_per_kind`` e-mail and ``n_per_kind`` phone records with distinct PII strings."""
    if n_per_kind < 1:
        raise ValueError(f"parameter 'n_per_kind': must be >= 1 (got {n_per_kind})")
    rng = np.random.default_rng(seed)
    out, seen = [], set()
    for kind in KINDS:
        made = 0
        while made < n_per_kind:
            r = _record(rng, kind)
            if r.pii not in seen:
                seen.add(r.pii)
                out.append(r)
                made += 1
    return out


@dataclass
class EncodedRecords:
    """Token ids of records padded with ``eos_id``.

    ids: (N, L) int64; prefix_len: (N,) tokens before the PII; pii_len: (N,) PII tokens.
    """

    ids: torch.Tensor
    prefix_len: torch.Tensor
    pii_len: torch.Tensor


def encode_records(tokenizer, records: list[PIIRecord], length: int, eos_id: int) -> EncodedRecords:
    """Tokenise ``prefix`` and ``" " + pii`` separately (so the PII span is exact) and pad to ``length``."""
    ids = torch.full((len(records), length), eos_id, dtype=torch.long)
    pre, pii = torch.empty(len(records), dtype=torch.long), torch.empty(len(records), dtype=torch.long)
    for i, r in enumerate(records):
        a, b = tokenizer.encode(r.prefix).ids, tokenizer.encode(" " + r.pii).ids
        if len(a) + len(b) >= length:
            raise ValueError(f"parameter 'length': record {i} needs {len(a) + len(b) + 1} tokens (got {length})")
        ids[i, :len(a) + len(b)] = torch.tensor(a + b)
        pre[i], pii[i] = len(a), len(b)
    return EncodedRecords(ids, pre, pii)
