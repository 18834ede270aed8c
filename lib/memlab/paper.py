"""The papers' reported numbers, paper-vs-rerun tables and claim verdicts.

Paper numbers live in ``data/papers/<chapter>.yaml`` with their source (table,
figure, section). They are shown beside our results, never copied into them.
A claim is a predicate over a chapter's metrics; its verdict is one of
``reproduced``, ``not reproduced`` or ``not run at this profile``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd
import yaml

from memlab.config import PROFILES, repo_root

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_RUN = "not run at this profile"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, NOT_RUN)


class NotJudged(Exception):
    """Raised by a claim's check when this run's metrics cannot decide it.

    For example a trend over data set sizes when the run used only one size.
    :func:`evaluate` reports such a claim as not run, with the message as evidence.
    """


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
    verdict is "not run at this profile". A check that raises KeyError (a
    metric that was not produced) also yields "not run at this profile".
    """

    key: str
    text: str
    source: str
    check: Callable[[dict], tuple[bool, str]]
    profiles: Sequence[str] = field(default=PROFILES)


def evaluate(claims: Sequence[Claim], metrics: dict, profile: str) -> list[dict]:
    """Verdict and evidence of every claim, as JSON-able dicts."""
    keys = [c.key for c in claims]
    if len(set(keys)) != len(keys):
        raise ValueError("evaluate: claim keys must be unique")
    out = []
    for c in claims:
        if profile not in c.profiles:
            verdict, evidence = NOT_RUN, f"needs profile {' or '.join(c.profiles)}"
        else:
            try:
                holds, evidence = c.check(metrics)
                verdict = REPRODUCED if bool(holds) else NOT_REPRODUCED
            except KeyError as e:
                verdict, evidence = NOT_RUN, f"metric {e} not produced at this profile"
            except NotJudged as e:
                verdict, evidence = NOT_RUN, str(e)
        out.append({"key": c.key, "claim": c.text, "source": c.source, "verdict": verdict, "evidence": evidence})
    return out


def claims_table(verdicts: Sequence[dict]) -> pd.DataFrame:
    """The claims of one chapter as a table: claim, paper source, verdict, our evidence."""
    df = pd.DataFrame(verdicts, columns=["key", "claim", "source", "verdict", "evidence"]).set_index("key")
    return df.rename(columns={"claim": "Claim", "source": "Paper source", "verdict": "Verdict", "evidence": "Our numbers"})


def tally(verdicts: Sequence[dict]) -> dict[str, int]:
    """Counts of each verdict."""
    return {v: sum(1 for d in verdicts if d["verdict"] == v) for v in VERDICTS}
