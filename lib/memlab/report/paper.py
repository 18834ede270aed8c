"""The papers' reported numbers, paper-vs-rerun tables and claim verdicts.

Paper numbers live in ``data/papers/<chapter>.yaml`` with their source (table,
figure, section). They are shown beside our results, never copied into them.
A claim is a predicate over a chapter's metrics; its verdict is one of
``reproduced``, ``not reproduced``, ``not judged`` (this run cannot decide it: a precondition
failed, or the margin lies inside the measurement's noise band) or ``not run at this profile``;
a claim gated on the paper's regime (``regimes:`` in the yaml, :func:`regimes`) whose gate fails
on our run is ``outside the paper's regime``, and a pooled verdict whose seeds disagree is
``seed-dependent``.
A claim marked ``sanity`` is true by construction or arithmetic (a check of our code, not a
reproduction of the paper) and is counted apart on the scorecard.
"""
from __future__ import annotations

import contextvars
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import pandas as pd
import yaml

from memlab.core.config import PROFILES, repo_root
from memlab.report.tables import install as _install_table_format

_install_table_format()  # in a notebook, DataFrames render as the book's tables (memlab.report.tables)

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_JUDGED = "not judged"
NOT_RUN = "not run at this profile"
# A claim whose regime gate (``regimes:`` in the chapter's yaml) fails on this run: our models
# are not in the regime the paper tested, so neither "reproduced" nor "not reproduced" applies.
OUTSIDE_REGIME = "outside the paper's regime"
# A pooled verdict (over seeds) whose seeds disagree outside their bands.
SEED_DEPENDENT = "seed-dependent"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, OUTSIDE_REGIME, NOT_JUDGED, SEED_DEPENDENT, NOT_RUN)
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
    example :func:`memlab.science.metrics.diff_band`). ``what`` names the quantity in the evidence.

    Inside :func:`evaluate` every call is also recorded on the claim's row (:func:`margin_fields`),
    inside the band or not, so that :mod:`memlab.report.pooling` can pool the margin over seeds.
    """
    import math

    if not (math.isfinite(margin) and math.isfinite(band)) or band < 0:
        raise ValueError(f"outside_noise: {what}: margin and band must be finite, band >= 0 "
                         f"(got {margin}, {band})")
    recorded = _MARGINS.get()
    if recorded is not None:  # inside evaluate: the check's statistic goes on its row
        recorded.append({"margin": float(margin), "band": float(band), "what": str(what)})
    if abs(margin) <= band:
        raise NotJudged(f"{what}: margin {margin:+.3g} inside the noise band \u00b1{band:.3g}")


# The outside_noise calls of the claim check now running (a list set by evaluate; None outside it).
# A context variable, not a global: checks evaluated in threads or tasks keep their own lists.
_MARGINS: contextvars.ContextVar[list | None] = contextvars.ContextVar("memlab_margins", default=None)


@contextmanager
def recording_margins() -> Iterator[list[dict]]:
    """Collect the :func:`outside_noise` calls made inside the block: ``[{margin, band, what}]`` in call order."""
    recorded: list[dict] = []
    token = _MARGINS.set(recorded)
    try:
        yield recorded
    finally:
        _MARGINS.reset(token)


def margin_fields(recorded: Sequence[dict]) -> dict:
    """A verdict row's statistic from its check's :func:`outside_noise` calls.

    One call: ``{"margin": m, "band": b, "what": text}`` (signed margin past the claim's threshold and
    the half-width of its noise band, in the quantity's units; *holds* means ``margin > band``).
    Several calls: ``{"margins": [{margin, band, what}, ...]}`` in call order; every check that calls
    it more than once requires each condition (the claim holds only if every margin is past its
    band, and one margin below ``-band`` fails it), so they pool as an AND (:mod:`memlab.report.pooling`).
    No call (a boolean check, or one stopped before its margin): ``{}``.
    """
    if not recorded:
        return {}
    if len(recorded) == 1:
        return dict(recorded[0])
    return {"margins": [dict(r) for r in recorded]}


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


def short_titles(chapter: str) -> dict[str, str]:
    """Claim key -> its short title (``short:`` in ``data/papers/<chapter>.yaml``), what summaries show.

    A title for a key no claim of the yaml has is caught by the tests; an empty or non-string
    title raises ValueError naming the file. Claims without a title are absent from the dict.
    """
    out = load(chapter).get("short") or {}
    if not isinstance(out, dict) or not all(isinstance(v, str) and v.strip() for v in out.values()):
        raise ValueError(f"data/papers/{chapter}.yaml: every entry of 'short' must be a non-empty title")
    return dict(out)


#: Keys of one ``scale_changes:`` entry; ``bought`` is filled in once the re-run has measured it.
SCALE_KEYS = ("change", "why", "cost", "bought")
SCALE_NEEDS = ("change", "why", "cost")


def scale_changes(chapter: str) -> list[dict[str, str]]:
    """The chapter's changes of scale toward its paper's regime (``scale_changes:`` in its yaml, issue 29).

    Each entry says in sentences what changed (``change``), why, from the paper's text (``why``),
    what it cost in time (``cost``) and, once measured, what it bought in verdicts (``bought``).
    [] when the chapter lists none; an entry with an unknown or missing key, or an empty one,
    raises ValueError naming the file.
    """
    out = load(chapter).get("scale_changes") or []
    where = f"data/papers/{chapter}.yaml: scale_changes"
    if not isinstance(out, list):
        raise ValueError(f"{where}: must be a list of entries with keys {', '.join(SCALE_KEYS)}")
    for i, entry in enumerate(out):
        if not isinstance(entry, dict):
            raise ValueError(f"{where}[{i}]: must be a mapping with keys {', '.join(SCALE_KEYS)} (got {entry!r})")
        empty = [k for k, v in entry.items() if not (isinstance(v, str) and v.strip())]
        _require_keys(entry, SCALE_KEYS, SCALE_NEEDS, f"{where}[{i}]", [f"empty {empty}"] if empty else [])
    return [dict(e) for e in out]


def _require_keys(entry: dict, allowed: Sequence[str], required: Sequence[str], at: str,
                  more: Sequence[str] = ()) -> None:
    """One ValueError at ``at`` naming ``entry``'s unknown and missing keys (and ``more`` problems),
    with the keys allowed and required; nothing when there is no problem."""
    unknown, missing = sorted(set(entry) - set(allowed)), [k for k in required if k not in entry]
    problems = ([f"unknown keys {unknown}"] if unknown else []) + ([f"missing {missing}"] if missing else []) + list(more)
    if problems:
        raise ValueError(f"{at}: " + "; ".join(problems)
                         + f" (allowed: {', '.join(allowed)}; required: {', '.join(required)})")


# ----------------------------------------------------------------------------- regime gates
# A gate is the paper's regime as a measurable precondition over our run (``regimes:`` in the
# chapter's yaml, issue 29). A claim whose gate fails is "outside the paper's regime": our
# models are not those the paper made the claim about, so its own verdict is kept aside
# (``ungated`` in the JSON row) and never shown as a verdict on the paper.
REGIME_KEYS = ("text", "why", "requires", "claims", "decide", "decide_cost")
REGIME_NEEDS = ("text", "why", "requires", "claims")
REQUIREMENT_KEYS = ("metric", "at_least", "at_most", "label")
COST_KEYS = ("cpu_2core_min", "gpu_min")
_SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")


def _is_number(x) -> bool:
    import numbers

    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def validate_regimes(data, where: str) -> dict[str, dict]:
    """``data`` (the ``regimes:`` section) checked against the schema; ``where`` names the yaml in errors.

    Each regime: ``text`` and ``why`` (sentences), ``requires`` (a non-empty list of
    ``{metric, at_least | at_most, label}``: exactly one bound, a number), ``claims`` (claim keys),
    optional ``decide`` (a sentence) and ``decide_cost`` (``{cpu_2core_min, gpu_min}``, minutes).
    A claim may be gated by one regime only. Returns the regimes as plain dicts (name -> regime).
    """
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{where}: 'regimes' must map regime names to regimes (got {type(data).__name__})")
    out, owner = {}, {}
    for name, reg in data.items():
        at = f"{where}: regime {name!r}"
        if not isinstance(name, str) or not _SNAKE.match(name):
            raise ValueError(f"{at}: a regime name must be snake_case (lower-case letters, digits, _)")
        if not isinstance(reg, dict):
            raise ValueError(f"{at}: must be a mapping with keys {', '.join(REGIME_NEEDS)}")
        _require_keys(reg, REGIME_KEYS, REGIME_NEEDS, at)
        for key in ("text", "why") + (("decide",) if "decide" in reg else ()):
            if not isinstance(reg[key], str) or not reg[key].strip():
                raise ValueError(f"{at}: {key!r} must be a non-empty sentence (got {reg[key]!r})")
        reqs = reg["requires"]
        if not isinstance(reqs, list) or not reqs:
            raise ValueError(f"{at}: 'requires' must be a non-empty list of "
                             f"{{metric, at_least or at_most, label}} (got {reqs!r})")
        for i, req in enumerate(reqs, 1):
            rat = f"{at}: requirement {i}"
            if not isinstance(req, dict):
                raise ValueError(f"{rat}: must be a mapping with keys metric, at_least or at_most, label")
            unknown = sorted(set(req) - set(REQUIREMENT_KEYS))
            if unknown:
                raise ValueError(f"{rat}: unknown keys {unknown} (allowed: {', '.join(REQUIREMENT_KEYS)})")
            for key in ("metric", "label"):
                if not isinstance(req.get(key), str) or not req[key].strip():
                    raise ValueError(f"{rat}: {key!r} must be a non-empty string (got {req.get(key)!r})")
            bounds = [k for k in ("at_least", "at_most") if k in req]
            if len(bounds) != 1:
                raise ValueError(f"{rat}: needs exactly one of at_least / at_most (got "
                                 f"{' and '.join(bounds) if bounds else 'neither'})")
            if not _is_number(req[bounds[0]]) or req[bounds[0]] != req[bounds[0]]:
                raise ValueError(f"{rat}: {bounds[0]} must be a number (got {req[bounds[0]]!r})")
        claims = reg["claims"]
        if not isinstance(claims, list) or not claims or not all(isinstance(k, str) for k in claims):
            raise ValueError(f"{at}: 'claims' must be a non-empty list of claim keys (got {claims!r})")
        for k in claims:
            if k in owner:
                raise ValueError(f"{where}: claim {k!r} is gated by regimes {owner[k]!r} and {name!r}; "
                                 "a claim may be in one regime only")
            owner[k] = name
        cost = reg.get("decide_cost")
        if cost is not None and (not isinstance(cost, dict) or set(cost) - set(COST_KEYS)
                                 or not all(_is_number(v) and v >= 0 for v in cost.values())):
            raise ValueError(f"{at}: 'decide_cost' must map {' and/or '.join(COST_KEYS)} to minutes >= 0 "
                             f"(got {cost!r})")
        out[name] = {k: (list(v) if isinstance(v, list) else v) for k, v in reg.items()}
    return out


def regimes(chapter: str) -> dict[str, dict]:
    """The regime gates of ``data/papers/<chapter>.yaml`` (validated by :func:`validate_regimes`)."""
    return validate_regimes(load(chapter).get("regimes"), f"data/papers/{chapter}.yaml")


def _number_words(x: float, digits: int = 4) -> str:
    """``x`` with at most ``digits`` significant digits, never in exponent notation (65.63, 90, 0.0521)."""
    import numpy as np

    if float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    return np.format_float_positional(float(x), precision=digits, unique=False, fractional=False, trim="-")


def _label_unit(label: str) -> tuple[str, str]:
    """A requirement's label split into its name and its unit: "Original accuracy (%)" -> ("Original accuracy", "%")."""
    m = re.match(r"^(.*\S)\s*\(([^()]+)\)$", label.strip())
    return (m.group(1), m.group(2)) if m else (label.strip(), "")


def _with_unit(x: float, unit: str, digits: int = 4) -> str:
    return _number_words(x, digits) + ("" if not unit else unit if unit == "%" else f" {unit}")


def measured_words(m: dict) -> str:
    """One measured requirement (a row of ``regime['measured']``) in words: "Original accuracy 65.6%"."""
    name, unit = _label_unit(m["label"])
    return f"{name} {'not measured' if m.get('value') is None else _with_unit(m['value'], unit)}"


def _read_path(metrics: dict, path: str):
    """The value at ``path`` ('/'-separated dict keys) in ``metrics``; raises MetricMissing where absent."""
    node = metrics
    for part in path.split("/"):
        if not isinstance(node, dict) or part not in node:
            raise MetricMissing(path)
        node = node[part]
    return node


def check_regime(name: str, regime: dict, metrics: dict) -> tuple[bool | None, list[dict], str]:
    """Does this run lie inside ``regime``? Returns ``(holds, measured, words)``.

    ``holds`` is None when a required metric was not produced (the gate cannot be read: the
    claim is "not run at this profile"). ``measured``: one ``{label, metric, value, at_least |
    at_most}`` per requirement (value None where absent or NaN). ``words``: the gap in words for
    the failing requirements ("Original forget-class accuracy 65.6%, the paper's regime needs at
    least 90% (24.4% below)"), or the values where it holds. A NaN value *fails* its requirement:
    a measurement that came out undefined does not show the run is in the paper's regime. A value
    that is not a number is a bug of the yaml's metric path and raises ValueError.
    """
    import math

    measured, gaps, values, missing = [], [], [], []
    for req in regime["requires"]:
        bound = "at_least" if "at_least" in req else "at_most"
        limit = float(req[bound])
        name_words, unit = _label_unit(req["label"])
        try:
            value = _read_path(metrics, req["metric"])
        except MetricMissing:
            measured.append({"label": req["label"], "metric": req["metric"], "value": None, bound: req[bound]})
            missing.append(name_words)
            continue
        if value is None:  # NaN written to JSON comes back as null
            value = float("nan")
        if not _is_number(value):
            raise ValueError(f"regime {name!r}: metric {req['metric']!r} is not a number "
                             f"(got {type(value).__name__}); a gate needs a number")
        value = float(value)
        measured.append({"label": req["label"], "metric": req["metric"],
                         "value": value if math.isfinite(value) else None, bound: req[bound]})
        need = f"the paper's regime needs {bound.replace('_', ' ')} {_with_unit(limit, unit)}"
        if math.isnan(value):
            gaps.append(f"{name_words} undefined on this run (not a number), {need}")
        elif (value >= limit) if bound == "at_least" else (value <= limit):
            values.append(measured_words(measured[-1]))
        else:
            side = "below" if bound == "at_least" else "above"
            # enough digits that a value just past its bound never prints as the bound itself
            digits = next((d for d in range(4, 17) if _number_words(value, d) != _number_words(limit, d)), 17)
            # a gap between two percentages is in percentage points
            gap = (f"{_number_words(abs(value - limit))} points" if unit == "%"
                   else _with_unit(abs(value - limit), unit))
            gaps.append(f"{name_words} {_with_unit(value, unit, digits)}, {need} ({gap} {side})")
    if missing:
        return None, measured, f"{', '.join(missing)} not produced at this profile (the regime gate needs it)"
    if gaps:
        return False, measured, "; ".join(gaps)
    return True, measured, "; ".join(values)


def _gate_map(regimes: dict[str, dict] | None, claims: Sequence["Claim"]) -> dict[str, tuple[str, dict]]:
    """claim key -> (regime name, regime); a key no claim has, or a gated sanity check, is an error."""
    regimes = validate_regimes(regimes, "evaluate: regimes")
    by_key = {c.key: c for c in claims}
    gated = {}
    for name, reg in regimes.items():
        unknown = [k for k in reg["claims"] if k not in by_key]
        if unknown:
            raise ValueError(f"regime {name!r} gates unknown claim keys {unknown}; claims: {', '.join(by_key)}")
        sanity = [k for k in reg["claims"] if by_key[k].sanity]
        if sanity:
            raise ValueError(f"regime {name!r} gates sanity checks {sanity}: a check of our code has no paper regime")
        gated.update({k: (name, reg) for k in reg["claims"]})
    return gated


def _apply_gate(row: dict, gate: tuple[str, dict] | None, metrics: dict) -> None:
    """Gate one evaluated row in place (see :func:`evaluate`)."""
    if gate is None or row["verdict"] not in (REPRODUCED, NOT_REPRODUCED, NOT_JUDGED):
        return
    name, reg = gate
    holds, measured, words = check_regime(name, reg, metrics)
    row["regime"] = {"name": name, "text": reg["text"], "why": reg["why"], "holds": holds, "measured": measured}
    if holds is True:
        return
    row["ungated"] = {"verdict": row["verdict"], "evidence": row["evidence"]}
    row["verdict"], row["evidence"] = (NOT_RUN, words) if holds is None else (OUTSIDE_REGIME, words)


def evaluate(claims: Sequence[Claim], metrics: dict, profile: str,
             reasons: dict[str, str] | None = None, regimes: dict[str, dict] | None = None) -> list[dict]:
    """Verdict and evidence of every claim, as JSON-able dicts.

    ``reasons`` (claim key -> sentence, see :func:`reasons`) gives a *not reproduced*
    claim its ``reason``; a reason for a key no claim has is an error (a typo).

    A claim sees ``metrics`` through a view: a metric (or row) the run did not produce is
    "not run" (:class:`MetricMissing`); a key outside the claim's declared ``metrics``
    raises :class:`UndeclaredMetric`; any other exception in a check propagates.

    ``regimes`` (see :func:`regimes`) gates claims on the paper's regime. The check runs first,
    as for any claim; then a gated claim judged reproduced, not reproduced or not judged has its
    gate read on ``metrics`` (:func:`check_regime`): every such row gets ``regime`` (name, text,
    why, holds, measured); a failed gate makes it "outside the paper's regime" and a gate metric
    the run did not produce makes it "not run at this profile", with the gap (or what is missing)
    as evidence and the claim's own verdict and evidence kept as ``ungated`` (JSON only, never
    shown). Claims not run at this profile are not gated. A regime naming an unknown claim key,
    or a sanity check, is an error.
    """
    keys = [c.key for c in claims]
    if len(set(keys)) != len(keys):
        raise ValueError("evaluate: claim keys must be unique")
    reasons = dict(reasons or {})
    unknown = sorted(set(reasons) - set(keys))
    if unknown:
        raise ValueError(f"evaluate: reasons given for unknown claim keys {unknown}; "
                         f"claims: {', '.join(keys)}")
    gates = _gate_map(regimes, claims)
    out = []
    for c in claims:
        if profile not in c.profiles:
            verdict, evidence = NOT_RUN, f"needs profile {' or '.join(c.profiles)}"
        else:
            with recording_margins() as recorded:
                try:
                    holds, evidence = c.check(_Metrics(metrics, c.metrics))
                    verdict = REPRODUCED if bool(holds) else NOT_REPRODUCED
                except MetricMissing as e:
                    verdict, evidence = NOT_RUN, f"metric {e} not produced at this profile"
                except NotJudged as e:
                    verdict, evidence = NOT_JUDGED, str(e)
        row = {"key": c.key, "claim": c.text, "source": c.source, "verdict": verdict, "evidence": evidence,
               "kind": SANITY if c.sanity else CLAIM}
        if verdict != NOT_RUN:  # the check's statistic, for pooling over seeds (margin_fields)
            row.update(margin_fields(recorded))
        _apply_gate(row, gates.get(c.key), metrics)  # after the check, so its bugs still surface
        if row["verdict"] == NOT_REPRODUCED:
            row["reason"] = reasons.get(c.key) or (SMOKE_REASON if profile == "smoke" else "")
        out.append(row)
    return out


VERDICT_MARKS = {REPRODUCED: "\u2713", NOT_REPRODUCED: "\u2717", OUTSIDE_REGIME: "\u2298",
                 NOT_JUDGED: "\u2248", SEED_DEPENDENT: "\u00b1", NOT_RUN: "\u25cb"}
# check, cross, circled slash, approx, plus-minus, circle
# The CSS class (``verdict-<slug>``) and glue name (``<chapter>-n-<slug>``) of each verdict.
VERDICT_SLUGS = {REPRODUCED: "reproduced", NOT_REPRODUCED: "not-reproduced", OUTSIDE_REGIME: "outside-regime",
                 NOT_JUDGED: "not-judged", SEED_DEPENDENT: "seed-dependent", NOT_RUN: "not-run"}
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
        regime = cls._regime(v)
        text = cls._evidence(v) + (f". Paper's regime: {regime}" if regime else "")
        return f"{text}. Why: {reason}" if reason else text

    @staticmethod
    def _regime(v: dict) -> str:
        """A gated row's regime in words: its sentence, and where it holds, our values ('' if ungated).

        Where the gate fails the evidence already gives the gap, so only the sentence is added.
        """
        reg = v.get("regime")
        if not reg:
            return ""
        text = str(reg["text"]).rstrip(".")
        if reg.get("holds") is True:
            ours = "; ".join(measured_words(m) for m in reg.get("measured", []))
            return f"{text} (holds here: {ours})"
        return text

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
            slug = VERDICT_SLUGS[v["verdict"]]
            kind = f'<span class="claim-kind">{SANITY}</span>' if self._is_sanity(v) else ""
            regime = self._regime(v)
            regime = (f'<span class="claim-regime"><strong>Paper\'s regime:</strong> {escape(regime)}</span>'
                      if regime else "")
            why = (f'<span class="claim-reason"><strong>Why:</strong> {escape(v["reason"])}</span>'
                   if v.get("reason") else "")
            body.append(
                f'<tr class="claim verdict-{slug}">'
                f'<td class="claim-verdict" data-label="Verdict"><span class="verdict-badge">'
                f'{VERDICT_MARKS[v["verdict"]]} {escape(v["verdict"])}</span></td>'
                f'<td class="claim-text" data-label="Claim">{kind}{escape(str(v["claim"]))}</td>'
                f'<td class="claim-source" data-label="Paper source">{escape(str(v["source"]))}</td>'
                f'<td class="claim-evidence" data-label="Our numbers">'
                f'<span class="claim-numbers">{escape(self._evidence(v))}</span>{regime}{why}</td>'
                + "".join(f'<td class="claim-across" data-label="Across seeds">{escape(t)}</td>'
                          for t in self._across(v))
                + "</tr>"
            )
        return (f'<div class="memlab-claims-wrap"><table class="memlab-claims">'
                f'<thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>')


def claims_table(verdicts: Sequence[dict], across: dict[str, str] | None = None) -> ClaimsTable:
    """The claims of one chapter as a table: verdict, claim, paper source, our evidence (and reason).

    ``across``: claim key -> how often it held across seeds (:mod:`memlab.report.robustness`), as a column.
    """
    return ClaimsTable(verdicts, across)


def tally(verdicts: Sequence[dict], kind: str | None = None) -> dict[str, int]:
    """Counts of each verdict; ``kind`` (:data:`CLAIM` or :data:`SANITY`) counts only those rows.

    Rows written before sanity checks existed carry no ``kind`` and count as claims.
    """
    rows = [d for d in verdicts if kind is None or d.get("kind", CLAIM) == kind]
    return {v: sum(1 for d in rows if d["verdict"] == v) for v in VERDICTS}
