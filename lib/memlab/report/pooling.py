"""Pooled verdicts over seeds: one verdict per claim from the verdict rows of several seeds.

A run judges each claim on its own margin (:func:`memlab.report.paper.outside_noise`: how far the measured
quantity lies past the claim's threshold, signed, with the half-width of its noise band;
:func:`memlab.report.paper.evaluate` records both on the row, see :func:`memlab.report.paper.margin_fields`). A
verdict from one seed can be a coin flip of the kernels, so the published verdict pools the seeds:

- **Margin claims.** The pooled margin is the mean of the n seeds' margins. Its band (95%) is the
  larger of two half-widths: the Student-t interval of that mean over the seeds,
  ``t(0.975, n-1) * s / sqrt(n)`` (``s`` the seeds' sample standard deviation, so the between-seed
  spread, within-run noise included, is in it), and the within-run band of a mean of n independent
  runs, ``sqrt(sum b_i^2) / n`` (the runs' own bands ``b_i``), which keeps a few seeds that happen to
  agree closely from claiming more precision than each run's noise allows. With one seed the pooled
  row is that seed's (its band ``b_1``). The verdict is judged on the pooled margin: past ``+band``
  reproduced, below ``-band`` not reproduced, inside it not judged. A check that records several
  margins requires each of them (:func:`memlab.report.paper.margin_fields`): each is pooled over the seeds
  by position, and the claim holds only if every pooled margin is past its band (one below ``-band``
  fails it). ``tests/test_pooling.py`` measures the band's coverage by simulation.
- **Seed-dependent.** When one seed's margins lie clearly on the holding side (every margin past
  ``+band``) and another's clearly on the failing side (a margin below ``-band``), the pooled verdict
  is :data:`memlab.report.paper.SEED_DEPENDENT`, whatever the mean says: never resolved by seed 0.
- **Verdict claims** (boolean checks with no margin, sanity checks, or margin claims whose verdict
  also rests on a condition the margins do not carry, e.g. a p-value): unanimous seeds give their
  verdict; seeds that include both reproduced and not reproduced give seed-dependent; any other mix
  (some not judged) gives not judged.
- **Regime gates.** A gated claim's gate is read on the mean over the seeds of each requirement's
  measured value (a value missing in a seed is left out of its mean; missing in all: not run); a
  failed pooled gate makes the claim outside the paper's regime. The claim's own verdict is pooled
  from its seeds' ungated verdicts.

The per-seed verdicts and "reproduced in k of n runs" stay beside the pooled verdict on the row.
"""
from __future__ import annotations

from typing import Sequence

from memlab.report import paper

LEVEL = 0.95  # the pooled band's nominal coverage
# Verdicts from which a claim's own (pre-gate) verdict can be read.
_JUDGED = (paper.REPRODUCED, paper.NOT_REPRODUCED, paper.NOT_JUDGED)


def row_margins(row: dict) -> list[dict]:
    """The ``{margin, band, what}`` records of a verdict row (one, several, or ``[]`` for none)."""
    if "margins" in row:
        return [dict(m) for m in row["margins"]]
    if "margin" in row and "band" in row:
        return [{"margin": row["margin"], "band": row["band"], "what": row.get("what", "")}]
    return []


def pooled_margin(margins: Sequence[float], bands: Sequence[float]) -> tuple[float, float]:
    """(mean margin, 95% half-width) of n seeds' margins and their within-run half-widths.

    ``margins``, ``bands``: shape (n,), in the claim quantity's units, ``bands >= 0``. The half-width
    is ``max(t(0.975, n-1) s / sqrt(n), sqrt(sum b^2) / n)`` (see the module docstring); one seed
    gives ``(margin, band)``.
    """
    import numpy as np

    from memlab.science.metrics import t_half_width

    m, b = np.asarray(margins, dtype=float), np.asarray(bands, dtype=float)
    if m.ndim != 1 or m.shape != b.shape or len(m) == 0:
        raise ValueError(f"pooled_margin: margins and bands must be two 1-d sequences of one length >= 1 "
                         f"(got shapes {m.shape} and {b.shape})")
    if not (np.all(np.isfinite(m)) and np.all(np.isfinite(b)) and np.all(b >= 0)):
        raise ValueError(f"pooled_margin: margins must be finite and bands finite and >= 0 "
                         f"(got margins {m.tolist()}, bands {b.tolist()})")
    n = len(m)
    within = float(np.sqrt(np.sum(b ** 2)) / n)
    if n == 1:
        return float(m[0]), within
    # seeds that agree to rounding (the same margin, summed in another order) have no spread: the
    # t interval of their last-bit differences would print as a band of 1e-17
    same = np.ptp(m) <= 1e-12 * max(1.0, float(np.abs(m).max()))
    between = 0.0 if same else t_half_width(m, LEVEL)
    return float(m.mean()), max(between, within)


def _side(records: Sequence[dict]) -> int:
    """+1: every margin past its band (holds); -1: some margin below minus its band (fails); 0: neither."""
    if any(r["margin"] < -r["band"] for r in records):
        return -1
    return 1 if records and all(r["margin"] > r["band"] for r in records) else 0


def _own_verdict(row: dict) -> str:
    """The claim's verdict before its regime gate (``ungated``), else its verdict."""
    ungated = row.get("ungated")
    return ungated["verdict"] if isinstance(ungated, dict) and "verdict" in ungated else row["verdict"]


def margins_decide(row: dict) -> bool:
    """Whether a row's verdict follows from its margins alone (reproduced: every margin past its band;
    not reproduced: one below minus its band; not judged: neither). False for a row without margins."""
    records = row_margins(row)
    if not records:
        return False
    want = {paper.REPRODUCED: 1, paper.NOT_REPRODUCED: -1, paper.NOT_JUDGED: 0}.get(_own_verdict(row))
    return want is not None and _side(records) == want


def _by_verdicts(verdicts: Sequence[str]) -> str:
    """Unanimous -> that verdict; reproduced and not reproduced both present -> seed-dependent;
    else (judged seeds mixed with not judged, not run, or outside the regime) not judged."""
    kinds = set(verdicts)
    if len(kinds) == 1:
        return verdicts[0]
    if {paper.REPRODUCED, paper.NOT_REPRODUCED} <= kinds:
        return paper.SEED_DEPENDENT
    return paper.NOT_JUDGED


def k_of_n(verdicts: Sequence[str], extra: Sequence[str] = ()) -> str:
    """``"reproduced in k of n runs"`` (n: the runs that judged the claim), the other verdicts' counts
    beside it (then ``extra`` phrases, such as "1 without this claim"). Where no run judged the
    claim, what the runs said instead: ``"outside the paper's regime in all 3 runs"``, or
    ``"judged in no run (2 not judged; 1 not run at this profile)"``, never "0 of 0"."""
    k = sum(v == paper.REPRODUCED for v in verdicts)
    n = sum(v in (paper.REPRODUCED, paper.NOT_REPRODUCED) for v in verdicts)
    other = [f"{sum(v == name for v in verdicts)} {name}" for name in sorted(set(verdicts))
             if name not in (paper.REPRODUCED, paper.NOT_REPRODUCED)] + list(extra)
    if n == 0 and verdicts and len(set(verdicts)) == 1 and not extra:
        return f"{verdicts[0]} in {'all ' if len(verdicts) > 1 else ''}{_runs(len(verdicts))}"
    if n == 0:
        return "judged in no run" + (f" ({'; '.join(other)})" if other else "")
    return f"reproduced in {k} of {_runs(n)}" + (f" ({'; '.join(other)})" if other else "")


def _runs(n: int) -> str:
    return f"{n} run" + ("" if n == 1 else "s")


def pooled_regime(rows: Sequence[dict]) -> tuple[dict, str] | None:
    """The regime gate read on the seeds' mean measured values, and its words.

    Returns ``({name, text, why, holds, measured}, words)`` as :func:`memlab.report.paper.check_regime`
    reads them (``holds`` None where a requirement was measured in no seed; a value missing in a seed
    is left out of its mean), or None when no row has a gate.
    """
    gated = [r["regime"] for r in rows if isinstance(r.get("regime"), dict)]
    if not gated:
        return None
    first = gated[0]
    metrics: dict = {}
    requires = []
    for i, req in enumerate(first["measured"]):
        values = [g["measured"][i]["value"] for g in gated
                  if i < len(g["measured"]) and g["measured"][i].get("value") is not None]
        requires.append({k: v for k, v in req.items() if k != "value"})
        if values:  # the mean at the requirement's metric path, where paper.check_regime reads it
            *parents, leaf = req["metric"].split("/")
            node = metrics
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = sum(values) / len(values)
    holds, measured, words = paper.check_regime(first.get("name", ""), {"requires": requires}, metrics)
    head = {k: first[k] for k in ("name", "text", "why") if k in first}
    return {**head, "holds": holds, "measured": measured}, words


def _margin_words(pooled: Sequence[dict], n: int) -> str:
    parts = [f"{p['margin']:+.3g} \u00b1 {p['band']:.3g}" for p in pooled]
    what = "mean margin" if len(parts) == 1 else "mean margins of its conditions"
    return f"{what} over {n} seed{'s' if n != 1 else ''} {', '.join(parts)} (95% band of the mean)"


def pool_rows(rows: Sequence[dict]) -> dict:
    """The pooled verdict row of one claim from its per-seed rows (one per seed, same ``key``).

    Returns ``{key, claim, source, kind, verdict, evidence, n_seeds, per_seed, across, basis}`` (and
    ``reason`` when not reproduced, from the seeds' rows) plus, for a
    margin pooling, ``margin``/``band`` (one condition) or ``margins`` (several: ``[{margin, band}]``),
    and ``regime`` for a gated claim. ``basis`` is ``"margins"`` or ``"verdicts"`` (module docstring).
    Raises ValueError for no rows or rows of different claims.
    """
    rows = list(rows)
    if not rows:
        raise ValueError("pool_rows: needs the verdict rows of at least one seed (got none)")
    keys = sorted({r.get("key") for r in rows}, key=str)
    if len(keys) != 1:
        raise ValueError(f"pool_rows: rows must be of one claim (got keys {', '.join(map(str, keys))})")
    for r in rows:
        if r.get("verdict") not in paper.VERDICTS:
            raise ValueError(f"pool_rows: verdict {r.get('verdict')!r} is not one of {', '.join(paper.VERDICTS)}")
    n = len(rows)
    per_seed = [r["verdict"] for r in rows]
    out = {"key": keys[0], "claim": rows[0].get("claim", keys[0]), "source": rows[0].get("source", ""),
           "kind": rows[0].get("kind", paper.CLAIM), "n_seeds": n, "per_seed": per_seed, "across": k_of_n(per_seed), "basis": "verdicts"}
    own = [_own_verdict(r) for r in rows]
    records = [row_margins(r) for r in rows]
    sides = [_side(rec) for rec in records if rec]
    sanity = out["kind"] == paper.SANITY
    if not sanity and 1 in sides and -1 in sides:
        verdict = paper.SEED_DEPENDENT
        evidence = (f"the seeds disagree outside their noise bands ({k_of_n(own)}): one seed's margin is past "
                    "its band on the holding side, another's past it on the failing side")
    elif (not sanity and all(o in _JUDGED for o in own) and all(margins_decide(r) for r in rows)
          and len({len(rec) for rec in records}) == 1):
        pooled = []
        for j in range(len(records[0])):
            mean, band = pooled_margin([rec[j]["margin"] for rec in records], [rec[j]["band"] for rec in records])
            pooled.append({"margin": mean, "band": band, "what": records[0][j].get("what", "")})
        side = _side(pooled)
        verdict = {1: paper.REPRODUCED, -1: paper.NOT_REPRODUCED, 0: paper.NOT_JUDGED}[side]
        evidence = _margin_words(pooled, n)
        out["basis"] = "margins"
        out.update(paper.margin_fields(pooled))
    else:
        verdict = _by_verdicts(own)
        evidence = f"{k_of_n(own)}; pooled as a vote of the seeds (no margin decides this claim's verdict alone)"
    gate = pooled_regime(rows)
    if gate is not None:
        out["regime"], words = gate
        if out["regime"]["holds"] is not True and verdict in _JUDGED + (paper.SEED_DEPENDENT,):
            out["ungated"] = {"verdict": verdict, "evidence": evidence}
            verdict = paper.NOT_RUN if out["regime"]["holds"] is None else paper.OUTSIDE_REGIME
            evidence = f"mean over the {n} seeds: {words}"
    if n == 1:
        evidence += "; a single seed"
    out.update(verdict=verdict, evidence=evidence)
    reason = next((r.get("reason") for r in rows if r["verdict"] == paper.NOT_REPRODUCED and r.get("reason")), "")
    if verdict == paper.NOT_REPRODUCED:  # the chapter's reason, as on the seeds' own rows
        out["reason"] = reason
    return out


def pool_claims(runs: Sequence[Sequence[dict]]) -> list[dict]:
    """Pooled rows (:func:`pool_rows`) of every claim in ``runs`` (one list of verdict rows per seed),
    in the order the claims first appear; a seed without a claim is left out of that claim's pool."""
    by_key: dict[str, list[dict]] = {}
    for rows in runs:
        for r in rows:
            by_key.setdefault(r["key"], []).append(r)
    return [pool_rows(rs) for rs in by_key.values()]


def basis_words(n_seeds: int | None) -> str:
    """How the page's verdicts were reached, for the findings box: "pooled over N seeds" or single-seed."""
    if n_seeds and n_seeds > 1:
        return (f"Verdicts pooled over {n_seeds} seeds (their mean margin, with a band that includes the "
                "spread between seeds).")
    return "These verdicts are single-seed (one run); a seed sweep pools them over seeds."
