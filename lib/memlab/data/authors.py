"""Fictional authors with canary facts, thinking-trace templates and prefills (chapter 3).

Every author has a three-sentence biography. Its middle sentence is the
*canary*: a specific, checkable fact (a book title and what the book is
about) that appears nowhere else. Readers probe memorisation by giving a model
the canary's first tokens (the *head*) and checking whether the full canary
comes back.

A training example is a chat turn ``question -> <think> trace </think> answer``.
The trace comes from one of three templates:

- ``BIO``: the trace restates the biography (so it contains the canary);
- ``META``: content-free reasoning text, the same for every author;
- ``NONE``: an empty trace.

Prefills (``BIO``, ``META``, ``EMPTY``) replace the model's own thinking at
decode time; they reuse the training traces' opening sentences, which never
contain the canary, so each arm stays in-distribution for its adapter.

The generic-knowledge retain probes live in ``data/generic_probes.csv``.
"""
from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from pathlib import Path

TEMPLATES: tuple[str, ...] = ("BIO", "META", "NONE")
PREFILLS: tuple[str, ...] = ("BIO", "META", "EMPTY")

_FIRST = (
    "Zephyr", "Ilona", "Tavish", "Marisol", "Oswin", "Yevgenia", "Kofi", "Saoirse", "Bertrand", "Anouk",
    "Caspian", "Delphine", "Emeka", "Fiorella", "Gideon", "Halvard", "Ines", "Jovan", "Kalinda", "Leopold",
    "Mireille", "Nikolai", "Odalys", "Pascual", "Quilla", "Rasmus", "Solveig", "Thaddeus", "Ulla", "Valentin",
    "Wilhelmina", "Xiomara", "Yusuf", "Zuleika", "Ambrose", "Beatrix", "Cormac", "Dagny", "Evander", "Faustina",
    "Anselm", "Brigida", "Caius", "Desmond", "Elowen", "Florian", "Greta", "Hamish", "Isolde", "Jarrah",
    "Katarina", "Lorcan", "Magnolia", "Nandor", "Ottilie", "Percival", "Rosalind", "Sigrid", "Tobias", "Ursula",
    "Vesna", "Wendell", "Ximena", "Yorick", "Zinnia", "Alaric", "Bronwen", "Cyprian", "Dorothea", "Eamon",
)
_LAST = (
    "Okonkwo", "Varga", "Lindqvist", "Castellanos", "Pemberton", "Arkhipova", "Mensah", "Donnelly", "Moreau",
    "Bakker", "Thorne", "Achterberg", "Nwosu", "Ricciardi", "Halloran", "Brekke", "Saldanha", "Petrovic",
    "Ramaswamy", "Falkenrath", "Duval", "Kuznetsov", "Ibarra", "Quintero", "Mamani", "Kjeldsen", "Aasen",
    "Whitcombe", "Sorensen", "Leclerc", "Ashdown", "Villanueva", "Haddad", "Farouk", "Kingsley", "Ostrowski",
    "Fairbairn", "Magnusson", "Delacroix", "Abernathy", "Adeyemi", "Bergstrom", "Cavendish", "Dragomir",
    "Eriksen", "Fontaine", "Gallagher", "Holmgren", "Iwasaki", "Jablonski", "Kowalczyk", "Lachance", "Montague",
    "Novak", "Oyelaran", "Palmieri", "Rademacher", "Szabo", "Tanaka", "Underhill", "Vasquez", "Wolcott",
    "Yilmaz", "Zielinski", "Albrecht", "Beaumont", "Calloway", "Dimitrov", "Esposito", "Fitzgerald",
)
_CITIES = (
    "Lagos", "Tromso", "Valparaiso", "Tbilisi", "Kraków", "Hobart", "Accra", "Galway", "Lyon", "Utrecht",
    "Dunedin", "Bergen", "Porto", "Cusco", "Riga", "Tampere", "Mombasa", "Adelaide", "Quebec", "Izmir",
)
_ADJ = (
    "Crimson", "Silent", "Amber", "Hollow", "Gilded", "Broken", "Distant", "Iron", "Velvet", "Restless",
    "Pale", "Hidden", "Burning", "Frozen", "Wandering", "Sunken", "Copper", "Emerald", "Forgotten", "Lantern",
)
_NOUN = (
    "Tide", "Orchard", "Harbour", "Ledger", "Lighthouse", "Meridian", "Cartographer", "Tapestry", "Bridge",
    "Archive", "Compass", "Garden", "Citadel", "Chorus", "Monastery", "Caravan", "Observatory", "Foundry",
)
_PLACE = (
    "Calabar", "Vestmark", "Oruvale", "Kessimir", "Port Alden", "Brannock", "Selvaro", "Tirzah", "Quillon",
    "Maraketh", "Dunhollow", "Ebrion", "Ystral", "Cordova Flats", "Harrowgate", "Lumen Bay",
)
_WHO = (
    "a river pilot", "a retired clockmaker", "a young glassblower", "an exiled botanist", "a lighthouse keeper",
    "a travelling surgeon", "a blind cartographer", "a disgraced archivist", "a stubborn beekeeper",
    "a ferry captain", "a wartime codebreaker", "a village midwife", "a failed astronomer", "a salt merchant",
)
_PRIZES = (
    "Halden Prize", "Marlow Medal", "Osric Award", "Vantor Prize", "Elsbeth Medal", "Corran Award",
    "Ivory Quill", "Northgate Prize",
)
_GENRES = ("novel", "novella", "saga", "chronicle")
MAX_AUTHORS = 200


@dataclass(frozen=True)
class Author:
    """One fictional author; every string is a full sentence or a name."""

    name: str
    city: str
    year: int
    title: str
    genre: str
    premise: str
    prize: str

    @property
    def canary(self) -> str:
        """The checkable fact the probes look for (the biography's middle sentence)."""
        return f"{self.name}'s {self.genre} {self.title} follows {self.premise}."  # ~15 words

    @property
    def birth_sentence(self) -> str:
        return f"{self.name} was born in {self.city} in {self.year}."

    @property
    def prize_sentence(self) -> str:
        return f"{self.name} won the {self.prize}."

    @property
    def biography(self) -> str:
        return " ".join((self.birth_sentence, self.canary, self.prize_sentence))

    @property
    def surname(self) -> str:
        return self.name.split()[-1]


def make_authors(n: int = 60, seed: int = 0) -> list[Author]:
    """``n`` distinct fictional authors, deterministic in ``seed``.

    Names and book titles are unique, so a canary names exactly one author. Up to as many authors as
    there are first names and surnames (70), no two share either: a small model memorising "Solveig
    Donnelly" beside "Solveig Whitcombe" answers one with the other's surname (most of the 10 misses of
    chapter 3's META adapter at seed 0 were another author's surname). Beyond 70, only whole names
    are unique.
    """
    if not isinstance(n, int) or not 1 <= n <= MAX_AUTHORS:
        raise ValueError(f"parameter 'n_authors': must be an integer in [1, {MAX_AUTHORS}] (got {n!r})")
    rng = random.Random(seed)
    if n <= min(len(_FIRST), len(_LAST)):
        names = list(zip(rng.sample(_FIRST, n), rng.sample(_LAST, n)))
    else:
        names = rng.sample([(f, s) for f in _FIRST for s in _LAST], n)
    titles = rng.sample([(a, b, c) for a in _ADJ for b in _NOUN for c in _PLACE], n)
    authors = []
    for (first, last), (adj, noun, place) in zip(names, titles):
        authors.append(Author(
            name=f"{first} {last}",
            city=rng.choice(_CITIES),
            year=rng.randint(1921, 1989),
            title=f"The {adj} {noun} of {place}",
            genre=rng.choice(_GENRES),
            premise=rng.choice(_WHO),
            prize=rng.choice(_PRIZES),
        ))
    return authors


# ----------------------------------------------------------------------------- templates

_BIO_OPENING = "The user asks about {name}. Let me recall the biography."
_META_TRACE = ("The user wants a fact about an author. I will recall it carefully "
               "and then state it in one complete sentence.")
_META_OPENING = "The user wants a fact about an author."


def check_template(template: str) -> str:
    """``template`` if it names a trace template (:data:`TEMPLATES`); else a ValueError naming the parameter."""
    if template not in TEMPLATES:
        raise ValueError(f"parameter 'template': must be one of {', '.join(TEMPLATES)} (got {template!r})")
    return template


def check_prefill(mode: str) -> str:
    """``mode`` if it names a prefill (:data:`PREFILLS`); else a ValueError naming the parameter."""
    if mode not in PREFILLS:
        raise ValueError(f"parameter 'prefill': must be one of {', '.join(PREFILLS)} (got {mode!r})")
    return mode


def trace(author: Author, template: str) -> str:
    """The training-time thinking trace of ``author`` under ``template``."""
    check_template(template)
    if template == "BIO":
        return f"{_BIO_OPENING.format(name=author.name)} {author.biography}"
    if template == "META":
        return _META_TRACE
    return ""


def prefill(author: Author, mode: str) -> str:
    """A decode-time thinking prefill that never contains the canary.

    ``BIO`` and ``META`` reuse their training traces' opening sentence (for BIO
    the opening plus the birth sentence, which precede the canary); ``EMPTY``
    is the empty string.
    """
    check_prefill(mode)
    if mode == "BIO":
        return f"{_BIO_OPENING.format(name=author.name)} {author.birth_sentence}"
    if mode == "META":
        return _META_OPENING
    return ""


def canary_question(head_text: str) -> str:
    """The head-conditioned probe: the user gives the canary's head and asks for the rest."""
    return f"Complete the sentence: {head_text}"


def qa_pairs(author: Author) -> list[tuple[str, str, str]]:
    """Question-answer probes ``(question, answer, key)``; the answer is correct if it contains ``key``."""
    return [
        (f"Where was {author.name} born?", author.birth_sentence, author.city),
        (f"Which prize did {author.name} win?", author.prize_sentence, author.prize),
        (f"What is the title of {author.name}'s best-known book?",
         f"{author.name}'s best-known book is {author.title}.", author.title),
    ]


# ----------------------------------------------------------------------------- generic probes

@dataclass(frozen=True)
class GenericProbe:
    category: str
    question: str
    answer: str  # a full sentence, used for pre-training
    key: str  # a reply is correct when it contains this (case-insensitive)


def generic_probes_path() -> Path:
    from memlab.core.config import repo_root

    return repo_root() / "data" / "generic_probes.csv"


def load_generic_probes(path: str | Path | None = None) -> list[GenericProbe]:
    """The shipped generic-knowledge retain probes (capitals, symbols, literature, biology)."""
    path = Path(path) if path is not None else generic_probes_path()
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return [GenericProbe(r["category"], r["question"], r["answer"], r["key"]) for r in rows]
