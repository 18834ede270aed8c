"""The papers' reported numbers, paper-vs-rerun tables and claim verdicts.

Paper numbers live in ``data/papers/<chapter>.yaml`` with their source (table,
figure, section). They are shown beside our results, never copied into them.
A claim is a predicate over a chapter's metrics; its verdict is one of
``reproduced``, ``not reproduced``, ``not judged`` (this run cannot decide it: a precondition
failed, or the margin lies inside the measurement's noise band) or ``not run at this profile``.
A claim marked ``sanity`` is true by construction or arithmetic (a check of our code, not a
reproduction of the paper) and is counted apart on the scorecard.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd
import yaml

from memlab.config import PROFILES, repo_root
from memlab.tables import install as _install_table_format

_install_table_format()  # in a notebook, DataFrames render as the book's tables (memlab.tables)

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_JUDGED = "not judged"
NOT_RUN = "not run at this profile"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, NOT_JUDGED, NOT_RUN)
SMOKE_REASON = ("At the smoke profile the models are toys that only exercise the code; "
                "this verdict says nothing about the paper.")


class MetricMissing(KeyError):
    """A claim read a metric (or a row of one) that this run did not produce: the claim is not run."""


class UndeclaredMetric(LookupError):
    """A claim read a metric key its chapter does not declare (``METRIC_KEYS``): a typo, never "not run"."""


class _Metrics(dict):
    """A run's metrics as a claim sees them (a dict, so pandas and ``json`` take it as one).

    At the top level only ``declared`` keys may be read (others raise :class:`UndeclaredMetric`);
    a missing key at any depth raises :class:`MetricMissing`. Nested dicts (and dicts inside
    lists) are wrapped the same way when read.
    """

    def __init__(self, data: dict, declared: frozenset | None, path: tuple = ()):
        super().__init__(data)
        self._declared, self._path = declared, path

    def _allowed(self, key) -> None:
        if not self._path and self._declared is not None and key not in self._declared:
            raise UndeclaredMetric(f"claim reads metric {key!r}, which the chapter does not declare "
                                   f"(METRIC_KEYS: {', '.join(sorted(self._declared))})")

    def _wrap(self, key, value):
        path = self._path + (key,)
        if isinstance(value, dict):
            return _Metrics(value, None, path)
        if isinstance(value, list):
            return [_Metrics(v, None, path) if isinstance(v, dict) else v for v in value]
        return value

    def __getitem__(self, key):
        self._allowed(key)
        if not dict.__contains__(self, key):
            raise MetricMissing("/".join(map(str, self._path + (key,))))
        return self._wrap(key, dict.__getitem__(self, key))

    def get(self, key, default=None):
        self._allowed(key)
        return self[key] if dict.__contains__(self, key) else default

    def __contains__(self, key) -> bool:
        self._allowed(key)
        return dict.__contains__(self, key)

    def values(self):
        return [self._wrap(k, v) for k, v in dict.items(self)]

    def items(self):
        return [(k, self._wrap(k, v)) for k, v in dict.items(self)]


def declare(metric_keys: Sequence[str], claims: Sequence["Claim"]) -> list["Claim"]:
    """``claims`` bound to their chapter's declared metric keys (see :func:`evaluate`)."""
    import dataclasses

    keys = frozenset(metric_keys)
    return [dataclasses.replace(c, metrics=keys) for c in claims]


class NotJudged(Exception):
    """Raised by a claim's check when this run's metrics cannot decide it.

    For example a trend over data set sizes when the run used only one size, a precondition
    that failed, or a margin inside the noise band (:func:`outside_noise`). :func:`evaluate`
    reports such a claim as "not judged", with the message as evidence.
    """


def outside_noise(margin: float, band: float, what: str) -> None:
    """Raise :class:`NotJudged` when ``|margin| <= band``: the claim's margin is inside its noise.

    ``margin`` is how far the measured quantity is past the claim's threshold (signed, in the
    quantity's units); ``band`` is the half-width of its noise interval in the same units (for
    example :func:`memlab.metrics.diff_band`). ``what`` names the quantity in the evidence.
    """
    import math

    if not (math.isfinite(margin) and math.isfinite(band)) or band < 0:
        raise ValueError(f"outside_noise: {what}: margin and band must be finite, band >= 0 "
                         f"(got {margin}, {band})")
    if abs(margin) <= band:
        raise NotJudged(f"{what}: margin {margin:+.3g} inside the noise band \u00b1{band:.3g}")


def papers_dir() -> Path:
    return repo_root() / "data" / "papers"


@lru_cache(maxsize=None)
def _load_cached(path: str, mtime: float) -> dict:
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: must hold a mapping with 'paper', 'tables' and/or 'numbers'")
    for key, tab in (data.get("tables") or {}).items():
        if "source" not in tab or "rows" not in tab:
            raise ValueError(f"{path}: table {key!r} needs 'source' and 'rows'")
    for key, num in (data.get("numbers") or {}).items():
        if not isinstance(num, dict) or "value" not in num or "source" not in num:
            raise ValueError(f"{path}: number {key!r} needs 'value' and 'source'")
    return data


def load(chapter: str) -> dict:
    """The parsed ``data/papers/<chapter>.yaml`` (validated: every table/number names its source)."""
    path = papers_dir() / f"{chapter}.yaml"
    if not path.exists():
        raise FileNotFoundError(f"no paper numbers for chapter {chapter!r} at {path}")
    return _load_cached(str(path), path.stat().st_mtime)


def table(chapter: str, key: str) -> pd.DataFrame:
    """One paper table as a DataFrame (index = row names); ``.attrs`` holds source and caption."""
    tabs = load(chapter).get("tables") or {}
    if key not in tabs:
        raise KeyError(f"chapter {chapter!r} has no paper table {key!r}; has: {', '.join(tabs)}")
    tab = tabs[key]
    df = pd.DataFrame.from_dict(tab["rows"], orient="index")
    df.attrs.update(source=tab["source"], caption=tab.get("caption", ""), units=tab.get("units", ""))
    return df


def number(chapter: str, key: str) -> Any:
    """One scalar the paper reports (its value); the source is in ``load(chapter)['numbers'][key]``."""
    nums = load(chapter).get("numbers") or {}
    if key not in nums:
        raise KeyError(f"chapter {chapter!r} has no paper number {key!r}; has: {', '.join(nums)}")
    return nums[key]["value"]


def source(chapter: str, key: str) -> str:
    """Where in the paper a table or number comes from."""
    data = load(chapter)
    for group in ("tables", "numbers"):
        if key in (data.get(group) or {}):
            return data[group][key]["source"]
    raise KeyError(f"chapter {chapter!r} has no paper table or number {key!r}")


def side_by_side(ours: pd.DataFrame, theirs: pd.DataFrame, metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """Columns ``(metric, "paper")`` and ``(metric, "ours")`` for each shared metric.

    Rows are the union of both indexes (ours first); a missing value shows as NaN
    (e.g. a method the paper does not report, or one we did not run).
    """
    metrics = list(metrics) if metrics is not None else [c for c in ours.columns if c in theirs.columns]
    if not metrics:
        raise ValueError("side_by_side: the two tables share no metric column")
    index = list(ours.index) + [r for r in theirs.index if r not in ours.index]
    cols = {}
    for m in metrics:
        cols[(m, "paper")] = theirs[m].reindex(index) if m in theirs.columns else pd.Series(index=index, dtype=float)
        cols[(m, "ours")] = ours[m].reindex(index) if m in ours.columns else pd.Series(index=index, dtype=float)
    out = pd.DataFrame(cols, index=index)
    out.columns = pd.MultiIndex.from_tuples(out.columns, names=["metric", "source"])
    return out


@dataclass(frozen=True)
class Claim:
    """A paper claim as a predicate over our metrics.

    check(metrics) -> (holds: bool, evidence: str). ``profiles`` lists the
    profiles at which the chapter runs what the claim needs; elsewhere the
    verdict is "not run at this profile". ``sanity`` marks a check that holds by construction
    or arithmetic (shown as a sanity check, counted apart from the paper's claims). ``metrics`` are the chapter's declared metric
    keys (set by :func:`declare`): reading a declared metric the run did not produce
    yields "not run at this profile"; reading an undeclared key, or any other exception
    inside ``check``, propagates (a bug, not a verdict).
    """

    key: str
    text: str
    source: str
    check: Callable[[dict], tuple[bool, str]]
    profiles: Sequence[str] = field(default=PROFILES)
    metrics: frozenset | None = None
    sanity: bool = False


def reasons(chapter: str) -> dict[str, str]:
    """One-sentence reasons, by claim key, why a claim may not reproduce at the chapter's scale.

    They live in ``data/papers/<chapter>.yaml`` under ``reasons:`` and are written from
    what the chapter measured (scale, missing data, or the effect being absent here).
    """
    out = load(chapter).get("reasons") or {}
    if not all(isinstance(v, str) and v.strip() for v in out.values()):
        raise ValueError(f"data/papers/{chapter}.yaml: every entry of 'reasons' must be a non-empty sentence")
    return dict(out)


def evaluate(claims: Sequence[Claim], metrics: dict, profile: str,
             reasons: dict[str, str] | None = None) -> list[dict]:
    """Verdict and evidence of every claim, as JSON-able dicts.

    ``reasons`` (claim key -> sentence, see :func:`reasons`) gives a *not reproduced*
    claim its ``reason``; a reason for a key no claim has is an error (a typo).

    A claim sees ``metrics`` through a view: a metric (or row) the run did not produce is
    "not run" (:class:`MetricMissing`); a key outside the claim's declared ``metrics``
    raises :class:`UndeclaredMetric`; any other exception in a check propagates.
    """
    keys = [c.key for c in claims]
    if len(set(keys)) != len(keys):
        raise ValueError("evaluate: claim keys must be unique")
    reasons = dict(reasons or {})
    unknown = sorted(set(reasons) - set(keys))
    if unknown:
        raise ValueError(f"evaluate: reasons given for unknown claim keys {unknown}; "
                         f"claims: {', '.join(keys)}")
    out = []
    for c in claims:
        if profile not in c.profiles:
            verdict, evidence = NOT_RUN, f"needs profile {' or '.join(c.profiles)}"
        else:
            try:
                holds, evidence = c.check(_Metrics(metrics, c.metrics))
                verdict = REPRODUCED if bool(holds) else NOT_REPRODUCED
            except MetricMissing as e:
                verdict, evidence = NOT_RUN, f"metric {e} not produced at this profile"
            except NotJudged as e:
                verdict, evidence = NOT_JUDGED, str(e)
        row = {"key": c.key, "claim": c.text, "source": c.source, "verdict": verdict, "evidence": evidence,
               "kind": SANITY if c.sanity else CLAIM}
        if verdict == NOT_REPRODUCED:
            row["reason"] = reasons.get(c.key) or (SMOKE_REASON if profile == "smoke" else "")
        out.append(row)
    return out


VERDICT_MARKS = {REPRODUCED: "\u2713", NOT_REPRODUCED: "\u2717", NOT_JUDGED: "\u2248",
                 NOT_RUN: "\u25cb"}  # check, cross, approx, circle
CLAIM, SANITY = "claim", "sanity check"  # a row's "kind"


class ClaimsTable:
    """The claims of one chapter as readers see them: verdict first, full text, no key column.

    In a notebook it renders as an HTML table (classes styled by ``book/_static/memlab.css``:
    the verdict carries a colour *and* its text; on a narrow screen each claim stacks into a
    card). ``.frame`` is the same content as a DataFrame (columns ``columns``). ``across``
    (claim key -> text such as "reproduced in 3 of 3 runs") adds an "Across seeds" column.
    """

    COLUMNS = ["Verdict", "Claim", "Paper source", "Our numbers"]

    def __init__(self, verdicts: Sequence[dict], across: dict[str, str] | None = None):
        self.across = across
        self.rows = [dict(v) for v in verdicts]
        for v in self.rows:
            if v.get("verdict") not in VERDICTS:
                raise ValueError(f"claims_table: verdict {v.get('verdict')!r} is not one of "
                                 f"{', '.join(VERDICTS)}")

    @staticmethod
    def _evidence(v: dict) -> str:
        # A statistic of degenerate inputs (e.g. a correlation of constants) prints as "nan".
        return re.sub(r"\bnan\b", "\u2013", str(v["evidence"]))

    @classmethod
    def _numbers(cls, v: dict) -> str:
        reason = v.get("reason") or ""
        return f"{cls._evidence(v)}. Why: {reason}" if reason else cls._evidence(v)

    @staticmethod
    def _is_sanity(v: dict) -> bool:
        return v.get("kind") == SANITY

    @classmethod
    def _claim(cls, v: dict) -> str:
        return f"[{SANITY}] {v['claim']}" if cls._is_sanity(v) else str(v["claim"])

    @property
    def frame(self) -> pd.DataFrame:
        data = [[v["verdict"], self._claim(v), v["source"], self._numbers(v)] + self._across(v) for v in self.rows]
        return pd.DataFrame(data, columns=self.columns, index=pd.RangeIndex(1, len(data) + 1, name="#"))

    @property
    def columns(self) -> list[str]:
        return list(self.COLUMNS) + (["Across seeds"] if self.across is not None else [])

    def _across(self, v: dict) -> list[str]:
        return [] if self.across is None else [self.across.get(v.get("key"), "\u2013")]

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        return "\n".join(f"[{VERDICT_MARKS[v['verdict']]} {v['verdict']}] {self._claim(v)} ({v['source']}): "
                         f"{self._numbers(v)}" for v in self.rows)

    def _repr_html_(self) -> str:
        from html import escape

        head = "".join(f"<th>{escape(c)}</th>" for c in self.columns)
        body = []
        for v in self.rows:
            slug = v["verdict"].split(" at ")[0].replace(" ", "-")
            kind = f'<span class="claim-kind">{SANITY}</span>' if self._is_sanity(v) else ""
            why = (f'<span class="claim-reason"><strong>Why:</strong> {escape(v["reason"])}</span>'
                   if v.get("reason") else "")
            body.append(
                f'<tr class="claim verdict-{slug}">'
                f'<td class="claim-verdict" data-label="Verdict"><span class="verdict-badge">'
                f'{VERDICT_MARKS[v["verdict"]]} {escape(v["verdict"])}</span></td>'
                f'<td class="claim-text" data-label="Claim">{kind}{escape(str(v["claim"]))}</td>'
                f'<td class="claim-source" data-label="Paper source">{escape(str(v["source"]))}</td>'
                f'<td class="claim-evidence" data-label="Our numbers">'
                f'<span class="claim-numbers">{escape(self._evidence(v))}</span>{why}</td>'
                + "".join(f'<td class="claim-across" data-label="Across seeds">{escape(t)}</td>'
                          for t in self._across(v))
                + "</tr>"
            )
        return (f'<div class="memlab-claims-wrap"><table class="memlab-claims">'
                f'<thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>')


def claims_table(verdicts: Sequence[dict], across: dict[str, str] | None = None) -> ClaimsTable:
    """The claims of one chapter as a table: verdict, claim, paper source, our evidence (and reason).

    ``across``: claim key -> how often it held across seeds (:mod:`memlab.robustness`), as a column.
    """
    return ClaimsTable(verdicts, across)


def tally(verdicts: Sequence[dict], kind: str | None = None) -> dict[str, int]:
    """Counts of each verdict; ``kind`` (:data:`CLAIM` or :data:`SANITY`) counts only those rows.

    Rows written before sanity checks existed carry no ``kind`` and count as claims.
    """
    rows = [d for d in verdicts if kind is None or d.get("kind", CLAIM) == kind]
    return {v: sum(1 for d in rows if d["verdict"] == v) for v in VERDICTS}
