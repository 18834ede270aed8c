"""What a chapter run costs: the ledger a run keeps, the record it leaves, the estimate before the next run.

Three parts, one per moment of a run:

1. **During the run** (in the chapter's kernel) the model cache calls :func:`begin` and :func:`end`
   around every model it trains or tensor set it computes, and :func:`loaded` for every entry it
   loads. The ledger keeps each cache key's stage and its own training CPU and wall seconds
   (exclusive: a stage that trains another inside it is charged only its own part).
2. **When the run saves** its results, :func:`run_cost` summarises the ledger with the run's CPU
   time, wall time, threads and peak memory; it goes into the results' provenance (``cost``).
   After publishing, the runner appends it to the book's cost log (:func:`record`,
   ``<book>/costs.json``), the source of the cost page.
3. **Before the next run** :func:`estimate` reads the cost log: for a run with the same chapter,
   profile and parameters it knows every model the run needs (the cache keys of the last such
   run), which of them are cached now, what each costs to train, and the rest of the run's CPU
   time, from the records most like the run (same CPU, same thread count; others converted by
   the ratio of the runs recorded on both CPUs or thread counts); wall time at the chosen threads comes from
   recorded runs at that thread count. A run with a seed never run before is estimated from a
   run that differed only in its seed. :func:`backtest` checks the estimate against the log.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterable

LOG_NAME = "costs.json"
KEEP_PER_CHAPTER = 12  # records kept per chapter and profile in the cost log
TARGET_COLD_MIN = 8  # wall minutes a chapter should take from an empty cache on an idle 2-core machine

# Per process: the cache keys this run touched, and the stack of trainings in progress.
_ENTRIES: dict[str, dict] = {}
_STACK: list[dict] = []


def reset() -> None:
    """Forget the ledger (a new run in the same process; tests)."""
    _ENTRIES.clear()
    _STACK.clear()


def begin(key: str, stage: str) -> None:
    """A cache miss: training (or computing) ``key`` of ``stage`` starts now."""
    _STACK.append({"key": key, "stage": stage, "cpu0": time.process_time(), "wall0": time.perf_counter(),
                   "child_cpu": 0.0, "child_wall": 0.0})


def end(key: str) -> None:
    """The training begun by :func:`begin` for ``key`` has finished: charge its own seconds to it."""
    if not _STACK or _STACK[-1]["key"] != key:
        return  # an exception unwound a nested training; nothing sound to record
    top = _STACK.pop()
    cpu = time.process_time() - top["cpu0"]
    wall = time.perf_counter() - top["wall0"]
    _ENTRIES[key] = {"stage": top["stage"], "trained": True,
                     "train_cpu_s": round(max(0.0, cpu - top["child_cpu"]), 2),
                     "train_wall_s": round(max(0.0, wall - top["child_wall"]), 2)}
    if _STACK:  # the enclosing training is charged only its own part
        _STACK[-1]["child_cpu"] += cpu
        _STACK[-1]["child_wall"] += wall


def loaded(key: str, stage: str) -> None:
    """A cache hit: ``key`` of ``stage`` was loaded, not trained."""
    _ENTRIES.setdefault(key, {"stage": stage, "trained": False})


def trained_keys() -> set[str]:
    """The cache keys this process has trained (not loaded) so far: how a stage that calls another
    chapter's cached function tells whether that call trained its model or read it."""
    return {k for k, e in _ENTRIES.items() if e["trained"]}


def peak_memory_mb() -> float:
    """This process's peak resident memory in MiB (Linux ``ru_maxrss`` is in KiB)."""
    import resource
    import sys

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(rss / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


def run_cost(cpu_s: float, wall_s: float, threads: int) -> dict[str, Any]:
    """The run's cost so far: CPU and wall seconds, threads, peak memory, models trained and loaded, per key."""
    trained = [k for k, e in _ENTRIES.items() if e["trained"]]
    return {"cpu_s": round(float(cpu_s), 1), "wall_s": round(float(wall_s), 1), "threads": int(threads),
            "peak_memory_mb": peak_memory_mb(), "trained": len(trained),
            "loaded": len(_ENTRIES) - len(trained),
            "train_cpu_s": round(sum(_ENTRIES[k]["train_cpu_s"] for k in trained), 1),
            "keys": {k: dict(e) for k, e in _ENTRIES.items()}}


def params_hash(params: dict) -> str:
    """A short fingerprint of a run's resolved parameters (which models it needs depends on them)."""
    text = json.dumps(params, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def schedule_hash(params: dict) -> str:
    """:func:`params_hash` without the seed: runs that differ only in their seed train models of the
    same sizes for the same steps, so one's cost estimates the other's (a seed sweep's new seeds)."""
    return params_hash({k: v for k, v in params.items() if k != "seed"})


def code_version(chapter: str) -> str | None:
    """The chapter package's ``CODE_VERSION`` (part of every cache key it writes), if it declares one."""
    from memlab.core.config import chapter_module

    version = getattr(chapter_module(chapter), "CODE_VERSION", None)
    return None if version is None else str(version)


def kind(cost: dict) -> str:
    """``cold`` (trained everything), ``warm`` (loaded everything) or ``partial``."""
    if not cost.get("trained"):
        return "warm"
    return "cold" if not cost.get("loaded") else "partial"


def log_path(book: Path) -> Path:
    return Path(book) / LOG_NAME


def read_log(book: Path) -> list[dict]:
    """The cost log's records (oldest first); a missing or unreadable log is empty."""
    try:
        data = json.loads(log_path(book).read_text())
    except (OSError, ValueError):
        return []
    return [r for r in data.get("runs", []) if isinstance(r, dict)] if isinstance(data, dict) else []


#: set by ``memlab book --jobs N`` in each chapter's process: how many other chapters may run beside it
ALONGSIDE_ENV = "MEMLAB_BOOK_ALONGSIDE"


def record(book: Path, payload: dict, wall_s: float, estimate_cpu_s: float | None = None,
           code: str | None = None, alongside: int | None = None) -> dict | None:
    """Append the cost of the published run ``payload`` (a results JSON) to ``<book>/costs.json``.

    ``wall_s`` is the runner's own measure (kernel start included). A run of ``memlab book --jobs
    N`` records ``alongside`` (the other chapters that may share its cores, from :data:`ALONGSIDE_ENV`;
    a sweep's run passes the other runs of its sweep). ``estimate_cpu_s`` is what
    :func:`estimate` predicted before the run, kept beside the measurement to show how close it
    was. ``code`` is the chapter's ``CODE_VERSION``. Returns the record, or None when the results
    carry no cost (an older kernel).
    """
    prov = payload.get("provenance") or {}
    cost = prov.get("cost")
    if not isinstance(cost, dict):
        return None
    rec = {"chapter": payload.get("chapter"), "profile": payload.get("profile"),
           "params": params_hash(payload.get("params") or {}),
           "schedule": schedule_hash(payload.get("params") or {}), "date": prov.get("date"),
           "device": prov.get("device"), "commit": prov.get("git_commit"), "kind": kind(cost),
           **{k: cost[k] for k in ("cpu_s", "threads", "peak_memory_mb", "trained", "loaded", "train_cpu_s")},
           "wall_s": round(float(wall_s), 1), "kernel_wall_s": cost.get("wall_s"),
           "estimate_cpu_s": None if estimate_cpu_s is None else round(float(estimate_cpu_s), 1),
           "code": code, "keys": cost.get("keys", {})}
    if alongside is None:
        alongside = int(os.environ.get(ALONGSIDE_ENV, "0") or 0)
    if alongside:
        rec["alongside"] = alongside
    if _run_id(rec) in {_run_id(r) for r in read_log(book)}:  # one run published twice: one record
        return rec
    return _append(book, rec)


def _append(book: Path, rec: dict) -> dict:
    """Append ``rec`` to the cost log, keeping the latest :data:`KEEP_PER_CHAPTER` records of its
    chapter and profile (book runs, chapter None, are kept apart per profile); returns ``rec``."""
    from memlab.core.fsutil import write_atomic
    from memlab.core.publish import locked

    with locked(book):  # chapters of one `memlab book --jobs N` end at any time: none loses another's record
        runs = read_log(book) + [rec]
        same = [r for r in runs if (r.get("chapter"), r.get("profile")) == (rec["chapter"], rec["profile"])]
        drop = {id(r) for r in same[:-KEEP_PER_CHAPTER]}
        text = (json.dumps({"runs": [r for r in runs if id(r) not in drop]}, indent=1) + "\n").encode()
        write_atomic(log_path(book), lambda f: f.write(text))
    return rec


def _run_id(rec: dict) -> tuple:
    """What names one run in the log: a record with all of these equal is that run's record again."""
    return tuple(rec.get(k) for k in ("chapter", "profile", "params", "date", "commit", "kind", "cpu_s"))


def _key_costs(runs: Iterable[dict], rank: Callable[[dict], tuple],
               scale: Callable[[dict], float]) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Each key's training CPU seconds, and each stage's list of them, from the records that best predict this run.

    ``rank(r)`` says how well record ``r`` predicts the run about to start (higher is better; among
    equals the later record wins); a key's cost is that of the best-ranked record that trained it,
    and a stage's list holds only its best-ranked records' costs. ``scale(r)`` converts ``r``'s CPU
    seconds to this run's CPU and thread count (:func:`_setup_ratio`).
    """
    by_key: dict[str, tuple[tuple, float]] = {}
    by_stage: dict[str, tuple[tuple, list[float]]] = {}
    for r in runs:
        rk = rank(r)
        for k, e in (r.get("keys") or {}).items():
            if not (e.get("trained") and isinstance(e.get("train_cpu_s"), (int, float))):
                continue
            cost = float(e["train_cpu_s"]) * scale(r)
            if k not in by_key or rk >= by_key[k][0]:
                by_key[k] = (rk, cost)
            stage = e.get("stage", "?")
            if stage not in by_stage or rk > by_stage[stage][0]:
                by_stage[stage] = (rk, [cost])
            elif rk == by_stage[stage][0]:
                by_stage[stage][1].append(cost)
    return {k: c for k, (_, c) in by_key.items()}, {s: c for s, (_, c) in by_stage.items()}


Setup = tuple  # (device, threads): what a run's CPU seconds depend on besides the run itself


def _pair_ratio(runs: Iterable[dict], to: Setup, frm: Setup) -> float | None:
    """CPU seconds of a cold run on setup ``to`` per CPU second of the same run on ``frm``; None if no pair.

    Fitted to pairs of cold records of one chapter and parameters on both setups (the latest of
    each), as the ratio of their sums. None in a setup stands for any one device (or thread
    count): the two records of a pair then share it, and only the other part differs.
    """
    pairs: dict[tuple, dict[Setup, float]] = {}
    for r in runs:
        if r.get("kind") != "cold" or not r.get("cpu_s"):
            continue
        setup = (r.get("device"), r.get("threads"))
        for side in (to, frm):
            if all(want in (None, got) for want, got in zip(side, setup)):
                shared = tuple(got if want is None else None for want, got in zip(side, setup))
                pairs.setdefault((shared, r.get("chapter"), r.get("profile"), r.get("params")), {})[side] = float(r["cpu_s"])
    use = [v for v in pairs.values() if len(v) == 2]
    return sum(v[to] for v in use) / sum(v[frm] for v in use) if use else None


def _setup_ratio(runs: Iterable[dict], to: Setup, frm: Setup) -> float:
    """CPU seconds a run burns on setup ``to`` (device, threads) per CPU second of the same run on ``frm``.

    A second thread never halves the wall time, so a run at 2 threads burns more CPU seconds than
    at 1 (on a 2-core AMD EPYC, 1.10-1.26x by chapter), and CPUs differ (up to 2x in this book's
    log): costs recorded on one setup over- or under-charge a run on another. From the runs
    recorded on both setups when there are any (:func:`_pair_ratio`); else as two steps, the
    CPUs' ratio (at ``frm``'s thread count, else at any one), then the thread counts' (on ``to``'s
    CPU, else on any one); a step with no pair recorded counts as 1.
    """
    runs = list(runs)
    if to == frm:
        return 1.0
    direct = _pair_ratio(runs, to, frm)
    if direct is not None:
        return direct
    cpu = 1.0 if to[0] == frm[0] else (_pair_ratio(runs, (to[0], frm[1]), frm)
                                       or _pair_ratio(runs, (to[0], None), (frm[0], None)))
    threads = 1.0 if to[1] == frm[1] else (_pair_ratio(runs, to, (to[0], frm[1]))
                                           or _pair_ratio(runs, (None, to[1]), (None, frm[1])))
    return (cpu or 1.0) * (threads or 1.0)


def _speedup(runs: list[dict], threads: int, device: str | None = None) -> float | None:
    """CPU seconds per wall second of the recorded runs at ``threads`` threads (None if none recorded).

    Only the runs on ``device`` count when there are any (a run's thread efficiency depends on the
    CPU), and the ratio is of their sums: a warm run of seconds, mostly start-up at one busy
    thread, must not weigh as much as a cold run of minutes.
    """
    at = [r for r in runs if r.get("threads") == threads and r.get("kernel_wall_s") and r.get("cpu_s")]
    here = [r for r in at if device is not None and r.get("device") == device]
    use = here or at
    return sum(r["cpu_s"] for r in use) / sum(r["kernel_wall_s"] for r in use) if use else None


def estimate(chapter: str, profile: str, params: dict, threads: int, books: Iterable[Path],
             is_cached: Callable[[str], bool], code: str | None = None, device: str | None = None) -> dict:
    """What the run about to start will cost, from the cost logs of ``books`` (:func:`estimate_from`)."""
    runs = [r for book in books for r in read_log(book)]
    return estimate_from(runs, chapter, profile, (params_hash(params), schedule_hash(params)), threads, is_cached,
                         code=code, device=device)


def estimate_from(log: list[dict], chapter: str, profile: str, hashes: tuple[str, str], threads: int,
                  is_cached: Callable[[str], bool], code: str | None = None, device: str | None = None) -> dict:
    """What the run about to start will cost, from the cost-log records ``log`` (oldest first).

    ``hashes``: the run's :func:`params_hash` and :func:`schedule_hash`.
    ``is_cached(key)`` says whether a cache entry is there now (:func:`memlab.core.cache.has`).
    ``code``: the chapter's ``CODE_VERSION`` now; when the last recorded run was made at
    another one, its cache keys are not this run's (they hash the code version), so none of
    its models counts as cached and ``stale_code`` gives the recorded version. ``device`` (this
    machine's, as the records name it): wall time comes from the CPU/wall ratio of the runs on it
    when there are any (:func:`_speedup`).
    Each model's training CPU seconds, and the run's own (its CPU time less its training), come
    from the records most like this run: on this device first, then at this thread count, then
    the latest. A record made on another CPU or thread count is converted to this run's by the
    ratio fitted to the log's runs recorded on both (:func:`_setup_ratio`). A model that only a
    cold run trains (needed only to train another) counts in the cold cost, and in this run's
    only when some model of the run is missing.
    Returns a dict: ``known`` (a recorded run with these parameters exists), ``models`` (m),
    ``cached`` (k of m in the cache now), ``cold_cpu_s``, ``this_cpu_s``, ``keys`` (the m cache keys),
    ``to_train`` (key -> CPU seconds of each one charged), ``speed`` (CPU per wall second), and the wall seconds of
    each at ``threads`` threads when a recorded run at that thread count gives the ratio, or
    at one thread its CPU time (``cold_wall_s``, ``this_wall_s``; else None), ``runs`` (how many records it used).
    With no run of these parameters but one that differed only in its seed, the estimate is that
    run's (``other_seed`` True): its cold cost is this one's, but its models are not this run's, so
    ``cached`` is None and this run is charged as cold (at most that).
    """
    runs = [r for r in log if (r.get("chapter"), r.get("profile")) == (chapter, profile)]
    out: dict[str, Any] = {"known": False, "runs": len(runs), "threads": threads}
    same = [r for r in runs if r.get("params") == hashes[0]]
    other_seed = not same
    if other_seed:
        same = [r for r in runs if r.get("schedule") == hashes[1]]
    if not same:
        return out
    last = same[-1]

    def rank(r: dict) -> tuple[bool, bool]:
        return (device is not None and r.get("device") == device, r.get("threads") == threads)

    ratios: dict[Setup, float] = {}

    def scale(r: dict) -> float:
        frm = (r.get("device"), r.get("threads"))
        if frm not in ratios:
            ratios[frm] = _setup_ratio(log, (device, threads), frm)
        return ratios[frm]

    by_key, by_stage = _key_costs(runs, rank, scale)
    keys = last.get("keys") or {}
    # Models the last cold run trained that the last run did not touch (it loaded the models they
    # serve), when the last run's models are all among the cold run's (same keys, same code).
    colds = [r for r in same if r.get("kind") == "cold"]
    cold_keys = (colds[-1].get("keys") or {}) if colds else {}
    nested = {k: e for k, e in cold_keys.items() if k not in keys} if set(keys) <= set(cold_keys) else {}
    stale = other_seed or (code is not None and last.get("code") not in (None, code))
    like = sorted(same, key=rank)[-1]  # the latest of the records most like this run (the sort is stable)
    rest = max(0.0, float(like["cpu_s"]) - float(like.get("train_cpu_s") or 0.0)) * scale(like)  # the run minus its training
    cold = this = rest
    cached = 0
    to_train: dict[str, float] = {}

    def model_cost(k: str, e: dict) -> float:
        if k in by_key:
            return by_key[k]
        stage = by_stage.get(e.get("stage", "?"))  # never seen trained: the stage's mean
        return sum(stage) / len(stage) if stage else 0.0

    for k, e in keys.items():
        cost = model_cost(k, e)
        cold += cost
        if not stale and is_cached(k):
            cached += 1
        else:
            this += cost
            to_train[k] = round(cost, 1)
    for k, e in nested.items():
        cost = model_cost(k, e)
        cold += cost
        if to_train and (stale or not is_cached(k)):
            this += cost
            to_train[k] = round(cost, 1)
    speed = _speedup(runs, threads, device)
    if speed is None and threads == 1:  # one thread keeps at most one core busy: its wall is about its CPU time
        speed = 1.0
    out.update(known=True, models=len(keys), cached=None if other_seed else cached, cold_cpu_s=round(cold, 1),
               to_train=to_train, keys=sorted(keys), speed=speed,
               this_cpu_s=round(this, 1), cold_wall_s=None if speed is None else round(cold / speed, 1),
               this_wall_s=None if speed is None else round(this / speed, 1), date=last.get("date"),
               other_seed=other_seed)
    if stale and not other_seed:
        out["stale_code"] = last["code"]
    return out


def backtest(log: list[dict]) -> list[dict]:
    """The estimate checked against the log: each cold run as estimated from the records before it.

    For every cold record whose chapter, profile and parameters (or schedule) had been recorded
    before, what :func:`estimate_from` would have predicted from the earlier records, at its thread
    count on its CPU, beside what it measured. Returns one dict per such run, oldest first:
    ``chapter``, ``profile``, ``threads``, ``device``, ``date``, ``same_cpu`` (an earlier cold run of
    its chapter was recorded on its CPU), ``cpu_s`` (measured), ``estimate_cpu_s`` and ``error`` (estimate / measured - 1).
    """
    out = []
    for i, r in enumerate(log):
        if r.get("kind") != "cold" or not r.get("params") or not r.get("cpu_s"):
            continue
        est = estimate_from(log[:i], r["chapter"], r["profile"], (r["params"], r.get("schedule")), r["threads"],
                            lambda k: False, device=r.get("device"))
        if not est["known"]:
            continue
        before = [p for p in log[:i] if (p.get("chapter"), p.get("profile")) == (r["chapter"], r["profile"])]
        out.append({"chapter": r["chapter"], "profile": r["profile"], "threads": r["threads"],
                    "device": r.get("device"), "date": r.get("date"),
                    "same_cpu": any(p.get("device") == r.get("device") and p.get("kind") == "cold" for p in before),
                    "cpu_s": r["cpu_s"], "estimate_cpu_s": est["cold_cpu_s"],
                    "error": round(est["cold_cpu_s"] / r["cpu_s"] - 1, 3)})
    return out


def backtest_sentence(runs: list[dict], profile: str) -> str:
    """How close the estimate came on the log's cold runs at ``profile`` (:func:`backtest`), for the cost page."""
    checks = [c for c in backtest(runs) if c["profile"] == profile]
    here = sorted(abs(c["error"]) for c in checks if c["same_cpu"])
    if not here:
        return ""
    far = [abs(c["error"]) for c in checks if not c["same_cpu"]]
    elsewhere = (f" Estimated from another CPU's records only, {len(far)} cold run{'s' if len(far) != 1 else ''} "
                 f"came out up to {100 * max(far):.0f} % off." if far else "")
    return (f"**How close the estimate is.** Each cold run at `{profile}` estimated from the records before it, "
            f"as `memlab run` would have: of the {len(here)} whose chapter had an earlier cold run on the same "
            f"CPU, the estimate was within {100 * here[-1]:.0f} % of the CPU time measured (median "
            f"{100 * here[len(here) // 2]:.0f} %).{elsewhere}")


def minutes(seconds: float) -> float:
    """Seconds as minutes for a page: whole minutes from 10 on, one decimal below."""
    m = float(seconds) / 60
    return float(round(m)) if m >= 10 else round(m, 1)


def _minutes(seconds: float) -> str:
    m = minutes(seconds)
    return f"{m:.0f}" if m >= 10 else f"{m:.1f}"


def estimate_line(chapter: str, profile: str, est: dict) -> str:
    """The one line ``memlab run`` prints before any work (see :func:`estimate`)."""
    t = f"{est['threads']} thread{'s' if est['threads'] != 1 else ''}"
    if not est["known"]:
        seen = f" ({est['runs']} recorded with other parameters)" if est["runs"] else ""
        return f"estimate: no recorded run of {chapter} at {profile} with these parameters{seen}; running at {t}"

    def wall(key: str) -> str:
        s = est[f"{key}_wall_s"]
        return f"~{_minutes(s)} min wall at {t}" if s is not None else f"wall at {t} not yet measured"

    if est.get("other_seed"):
        return (f"estimate: {chapter} at {profile}: a cold run ~{_minutes(est['cold_cpu_s'])} CPU-min "
                f"({wall('cold')}), from the recorded run with another seed; which of this seed's "
                f"{est['models']} models are cached is known only once one has run, so at most that")
    cached = (f"{est['cached']} of {est['models']} models cached" if "stale_code" not in est else
              f"the chapter's code changed since the recorded run (version {est['stale_code']}): "
              "none of its models is reused")
    return (f"estimate: {chapter} at {profile}: a cold run ~{_minutes(est['cold_cpu_s'])} CPU-min "
            f"({wall('cold')}); {cached}, so this run "
            f"~{_minutes(est['this_cpu_s'])} CPU-min ({wall('this')})")


def makespan_s(todo: list[float], running_left: list[float], jobs: int) -> float:
    """Wall seconds until every chapter is done when ``jobs`` run at once.

    ``running_left``: seconds still to go of the chapters running now (each holds a slot);
    ``todo``: the wall seconds of those not started, given to the first free slot longest first.
    """
    slots = sorted(list(running_left) + [0.0] * max(0, jobs - len(running_left)))[:max(jobs, len(running_left))]
    for w in sorted(todo, reverse=True):
        slots.sort()
        slots[0] += w
    return max(slots, default=0.0)


def book_estimate(ests: dict[str, dict], jobs: int = 1) -> dict:
    """What ``memlab book`` will cost, from each chapter's :func:`estimate` (chapter id -> estimate, in book order).

    A model two chapters need (chapter 6 reads chapters 1 and 3's) is trained once, by the first:
    a later chapter is charged only the models no earlier chapter trains. Returns ``chapters``
    (chapter -> ``cpu_s`` and ``wall_s``, None where that chapter's wall is not known), ``cpu_s``,
    ``wall_s`` (None unless every chapter's is known), ``models`` and ``cached`` (distinct keys), and
    ``unknown`` (chapters with no recorded run at these parameters) and ``jobs``. With ``jobs``
    chapters at once the book's wall is their :func:`makespan_s` (waits for a shared model not counted).
    """
    counted: set[str] = set()
    every: set[str] = set()
    charged: set[str] = set()
    per: dict[str, dict] = {}
    for chapter, est in ests.items():
        if not est.get("known"):
            per[chapter] = {"cpu_s": None, "wall_s": None}
            continue
        again = sum(c for k, c in est["to_train"].items() if k in counted)
        counted |= set(est["to_train"])
        every |= set(est["keys"])
        charged |= set(est["to_train"])
        cpu = est["this_cpu_s"] - again
        per[chapter] = {"cpu_s": cpu, "wall_s": None if not est.get("speed") else cpu / est["speed"]}
    known = [v for v in per.values() if v["cpu_s"] is not None]
    walls = [v["wall_s"] for v in per.values()]
    return {"chapters": per, "cpu_s": sum(v["cpu_s"] for v in known), "jobs": jobs,
            "wall_s": None if any(w is None for w in walls) else makespan_s(walls, [], jobs),
            "models": len(every), "cached": len(every - charged),
            "unknown": [c for c, v in per.items() if v["cpu_s"] is None]}


def book_estimate_line(profile: str, threads: int, est: dict) -> str:
    """The line ``memlab book`` prints before its first chapter (see :func:`book_estimate`)."""
    n = len(est["chapters"])
    t = f"{threads} thread{'s' if threads != 1 else ''}"
    if est.get("jobs", 1) > 1:
        t = f"{t} each, {est['jobs']} chapters at a time"
    them = f"{n} chapter{'s' if n != 1 else ''}"
    if est["unknown"] and len(est["unknown"]) == n:
        return f"book estimate: no recorded run of its {them} at {profile}; running at {t}"
    wall = (f"~{_minutes(est['wall_s'])} min wall at {t}" if est["wall_s"] is not None
            else f"wall at {t} not yet measured for every chapter")
    unknown = (f"; not counted: {', '.join(est['unknown'])} (no recorded run at these parameters)"
               if est["unknown"] else "")
    return (f"book estimate: {them} at {profile}, ~{_minutes(est['cpu_s'])} CPU-min ({wall}); "
            f"{est['cached']} of {est['models']} models cached, each shared model trained once{unknown}")


def book_left_s(est: dict, chapters: list[str], done: dict[str, float] | None = None,
                running: dict[str, float] | None = None) -> float | None:
    """Estimated wall seconds until the book ends, None if any chapter's wall is not known.

    ``chapters``: those not started yet; ``running``: chapter -> seconds it has been running;
    ``done``: chapter -> measured wall seconds of the chapters already run in this book. The
    estimates are scaled by how the done chapters compared with their own (a machine faster or
    slower than the recorded one shows in the first chapter), and laid out on ``est["jobs"]``
    slots (:func:`makespan_s`).
    """
    running = running or {}
    walls = {c: est["chapters"][c]["wall_s"] for c in [*chapters, *running]}
    if any(w is None for w in walls.values()):
        return None
    pairs = [(est["chapters"][c]["wall_s"], s) for c, s in (done or {}).items() if est["chapters"][c]["wall_s"]]
    scale = sum(s for _, s in pairs) / sum(e for e, _ in pairs) if pairs else 1.0
    return makespan_s([scale * walls[c] for c in chapters],
                      [max(0.0, scale * walls[c] - s) for c, s in running.items()], est.get("jobs", 1))


def record_book(book: Path, profile: str, wall_s: float, chapters: list[dict], jobs: int = 1) -> dict | None:
    """Append one ``memlab book`` run to the cost log: its own wall time and its chapters' records.

    ``wall_s``: from the book's start (its checks and estimate included) to its last chapter's
    end, the render excluded. ``chapters`` are the records :func:`record` appended during this book
    run, in the order they ended; ``jobs``, how many ran at once.
    ``from_empty_cache`` holds when no chapter loaded a model that an earlier chapter of this run
    did not train: the book started from an empty model cache. Returns the record (None when no
    chapter recorded a cost).
    """
    if not chapters:
        return None
    trained: set[str] = set()
    empty = True
    for r in chapters:
        keys = r.get("keys") or {}
        empty = empty and all(v.get("trained") or k in trained for k, v in keys.items())
        trained |= {k for k, v in keys.items() if v.get("trained")}
    first = chapters[0]
    rec = {"chapter": None, "profile": profile, "kind": "book", "date": first.get("date"),
           "device": first.get("device"), "commit": first.get("commit"), "threads": first.get("threads"),
           "wall_s": round(float(wall_s), 1), "cpu_s": round(sum(float(r.get("cpu_s") or 0) for r in chapters), 1),
           "from_empty_cache": empty, "jobs": int(jobs),
           "peak_memory_mb": max(float(r.get("peak_memory_mb") or 0) for r in chapters),
           "chapters": [{k: r.get(k) for k in ("chapter", "kind", "wall_s", "cpu_s", "trained", "loaded")}
                        for r in chapters]}
    return _append(book, rec)


# ----------------------------------------------------------------------------- the cost page

def _latest(runs: list[dict], chapter: str, profile: str, kinds: tuple[str, ...]) -> dict | None:
    """The last run of ``chapter`` of one of ``kinds`` that had the machine to itself: a chapter of
    ``memlab book --jobs N`` shared the cores with others (``alongside``), so its wall is no cost
    of its own (the book's record gives the whole run's)."""
    same = [r for r in runs if r.get("chapter") == chapter and r.get("profile") == profile
            and r.get("kind") in kinds and not r.get("alongside")]
    return same[-1] if same else None


def _cell_min(seconds) -> str:
    return "\u2013" if not isinstance(seconds, (int, float)) else _minutes(float(seconds))


def _pair(r: dict | None) -> str:
    """``wall / CPU`` minutes of a record, or a dash."""
    return "\u2013" if r is None else f"{_cell_min(r.get('wall_s'))} / {_cell_min(r.get('cpu_s'))}"


def _device(r: dict) -> str:
    """A record's CPU as the cost page names it: "AMD EPYC, AVX2" (its ``device`` without "cpu (...)")."""
    return str(r.get("device") or "?").removeprefix("cpu (").removesuffix(")")


def _machine(r: dict) -> str:
    device = _device(r)
    jobs = r.get("jobs") or 1  # a book run with several chapters at once
    at_once = f" each, {jobs} chapters at a time" if jobs > 1 else ""
    return (f"{device}, {r.get('threads')} thread{'s' if r.get('threads') != 1 else ''}{at_once}, "
            f"{str(r.get('date'))[:10]}")


PROFILE_ORDER = ("cpu", "paper", "smoke")


def page_markdown(runs: list[dict], chapters: dict[str, str]) -> str:
    """The book's cost page: per profile and chapter, the last cold and warm run as the runs recorded them.

    ``chapters``: chapter id -> title, in book order. Every number comes from ``costs.json``.
    """
    lines = [
        "# What a run costs",
        "",
        "Measured by the runs themselves: every `memlab run` appends its cost to `book/costs.json` "
        "after it publishes. For each chapter this page shows the last **cold** run (every model "
        "trained, empty cache) and the last **warm** run (every model loaded from the cache), as "
        "wall / CPU minutes. Before a run starts, `memlab run` prints its estimate from the same "
        "records: how many of the run's models are cached and what the rest costs.",
        "",
    ]
    profiles = [p for p in PROFILE_ORDER if any(r.get("profile") == p for r in runs)]
    profiles += sorted({r.get("profile") for r in runs} - set(profiles) - {None})
    if not profiles:
        lines.append("No run has recorded its cost in this book yet.")
    for profile in profiles:
        whole = _latest_book(runs, profile)
        lines += [f"## Profile `{profile}`", "", *([_book_paragraph(whole, chapters, runs), ""] if whole else [])]
        rows, measured = [], []
        for i, (cid, title) in enumerate(chapters.items(), 1):
            cold = _latest(runs, cid, profile, ("cold",))
            warm = _latest(runs, cid, profile, ("warm",))
            measured += [(i, r) for r in (cold, warm) if r is not None]
            rows.append(_cost_row(i, title, cold, warm))
        lines += [_cost_table(rows), "", *_machines_list(measured), ""]
        check = backtest_sentence(runs, profile)
        lines += [check, ""] if check else []
    lines += ["\u2013 marks a kind of run not yet recorded. Wall time depends on the machine and on what else it runs; CPU time is the kernel's own "
              "(training and evaluation), which a loaded machine changes much less. The estimate is what "
              "`memlab run` predicted before the last run, beside what that run measured. A run that "
              "trained some models and loaded others is kept in the log but not shown here."]
    return "\n".join(lines) + "\n"


COST_COLUMNS = ("Cold: wall / CPU (min)", "Models trained", "Warm: wall / CPU (min)", "Peak memory (GB)",
                "Estimate vs CPU (min)")


def _cost_row(i: int, title: str, cold: dict | None, warm: dict | None) -> str:
    """One chapter's row of the cost table (HTML): the last cold and warm run, each cell labelled by
    its column, so that on a phone the row reads as a card (``table.memlab-cards``, memlab.css)."""
    from html import escape

    head = f'<td class="card-title" data-label="Chapter"><strong>{i}. {escape(title)}</strong></td>'
    if cold is None and warm is None:
        return f'<tr>{head}<td class="card-direction" colspan="{len(COST_COLUMNS)}">no recorded run yet</td></tr>'
    peak = max((r.get("peak_memory_mb") or 0) for r in (cold, warm) if r is not None)
    last = warm or cold
    est = last.get("estimate_cpu_s")
    cells = [_pair(cold), "\u2013" if cold is None else str(cold.get("trained")), _pair(warm), f"{peak / 1024:.1f}",
             "\u2013" if est is None else f"{_cell_min(est)} vs {_cell_min(last['cpu_s'])}"]
    return "<tr>" + head + "".join(f'<td class="card-short" data-label="{escape(c)}">{escape(v)}</td>'
                                   for c, v in zip(COST_COLUMNS, cells)) + "</tr>"


def _cost_table(rows: list[str]) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("Chapter", *COST_COLUMNS))
    return (f'<div class="memlab-cards-wrap"><table class="memlab-cards memlab-costs"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def _machines_list(measured: list[tuple[int, dict]]) -> list[str]:
    """Where the table's runs were measured, one bullet per machine and thread count (markdown lines).

    ``measured``: (chapter number, cold or warm record). Each bullet names the CPU and threads once,
    then which chapters' cold and warm runs ran there and when.
    """
    if not measured:
        return []
    by: dict[str, dict[str, list]] = {}
    for i, r in measured:
        t = r.get("threads")
        where = by.setdefault(f"{_device(r)}, {t} thread{'s' if t != 1 else ''}", {"cold": [], "warm": [], "dates": []})
        where[r["kind"]].append(str(i))
        where["dates"].append(str(r.get("date"))[:10])
    out = ["Measured on:", ""]
    for machine, w in by.items():
        runs = "; ".join(f"{kind} runs of chapters {', '.join(w[kind])}" if len(w[kind]) > 1
                         else f"the {kind} run of chapter {w[kind][0]}" for kind in ("cold", "warm") if w[kind])
        first, last = min(w["dates"]), max(w["dates"])
        out.append(f"- {machine}: {runs} ({first if first == last else f'{first} to {last}'})")
    return out


def _trained_stages(r: dict) -> list[tuple[str, int, float]]:
    """(stage, models, training wall seconds) of the models a record trained, the costliest first."""
    out: dict[str, list[float]] = {}
    for v in (r.get("keys") or {}).values():
        if v.get("trained"):
            out.setdefault(str(v.get("stage")), []).append(float(v.get("train_wall_s") or 0.0))
    return sorted(((s, len(w), sum(w)) for s, w in out.items()), key=lambda t: -t[2])


def _models(n: int) -> str:
    return f"{n} model{'s' if n != 1 else ''}"


def chapter_markdown(runs: list[dict], chapter: str, profile: str) -> str:
    """A chapter page's cost section: its last cold and warm run at ``profile``, where the cold time went.

    Every number comes from the cost log (``runs``, :func:`read_log`). A later run that trained
    some models and loaded others is shown too (its machine or thread count may differ). A cold run longer than
    :data:`TARGET_COLD_MIN` says so and how its time splits between training (by stage, the
    costliest first) and the page's own evaluation.
    """
    cold = _latest(runs, chapter, profile, ("cold",))
    warm = _latest(runs, chapter, profile, ("warm",))
    dry = f"`memlab run {chapter} --dry-run`"
    lines = ["## What a run of this chapter costs", ""]
    if cold is None and warm is None:
        return "\n".join(lines + [
            f"No run of this chapter at `{profile}` has recorded its cost in this book yet. Before a run, "
            f"{dry} prints its estimate and how many of its models are cached."]) + "\n"
    train_s = 0.0  # the cold run's training, wall seconds
    if cold is not None:
        stages = _trained_stages(cold)
        train_s = sum(t for _, _, t in stages)
        parts = "; ".join(f"\u201c{s}\u201d: {_models(n)}, {_minutes(t)} min" for s, n, t in stages[:4])
        lines.append(f"- **From an empty model cache**: {_minutes(cold['wall_s'])} min wall and "
                     f"{_minutes(cold['cpu_s'])} CPU-minutes ({_machine(cold)}). Training its "
                     f"{_models(cold.get('trained') or 0)} took {_minutes(train_s)} min by stage ({parts}); the rest, "
                     f"{_minutes(max(cold['wall_s'] - train_s, 0.0))} min, is the page's own evaluation.")
    if warm is not None:
        lines.append(f"- **With every model cached**: {_minutes(warm['wall_s'])} min wall and "
                     f"{_minutes(warm['cpu_s'])} CPU-minutes ({_machine(warm)}).")
    else:
        lines.append(f"- **With every model cached**: not recorded yet; about "
                     f"{_minutes(max(cold['cpu_s'] - (cold.get('train_cpu_s') or 0.0), 0.0))} CPU-minutes, "
                     "the cold run's CPU time less its training.")
    last = _latest(runs, chapter, profile, ("partial",))  # shown when newer than both records above
    order = {id(r): i for i, r in enumerate(runs)}
    if last is not None and all(order[id(last)] > order[id(r)] for r in (cold, warm) if r is not None):
        n = (last.get("trained") or 0) + (last.get("loaded") or 0)
        lines.append(f"- **The last run** trained {last.get('trained')} of its {_models(n)} and loaded the rest: "
                     f"{_minutes(last['wall_s'])} min wall and {_minutes(last['cpu_s'])} CPU-minutes "
                     f"({_machine(last)}).")
    lines.append("")
    if cold is not None and cold["wall_s"] > TARGET_COLD_MIN * 60:
        share = 100 * train_s / cold["wall_s"]
        lines.append(f"A cold run takes longer than the {TARGET_COLD_MIN} minutes this book aims for on two "
                     f"cores: {share:.0f} % of its wall time is training the models above, which a run with "
                     "every model cached skips.")
        lines.append("")
    lines.append(f"Measured by the runs themselves (`book/costs.json`; every chapter on "
                 f"[What a run costs](../cost.md)). Before a run, {dry} prints the estimate for the parameters "
                 "given and how many of their models are cached on your machine.")
    return "\n".join(lines) + "\n"


def book_cold_s(cold: list[dict]) -> tuple[float, float]:
    """Wall and CPU seconds of a cold book run, from the chapters' own cold runs (in book order).

    A chapter's cold run also trains the models it shares with earlier chapters (chapter 6 reads
    chapters 1 and 3's); a book run from an empty cache trains each once, so a model already
    trained by an earlier chapter's run counts with that run only (its recorded training time is
    taken off the later run's wall and CPU seconds).
    """
    seen: set[str] = set()
    wall = cpu = 0.0
    for r in cold:
        keys = r.get("keys") or {}
        again = [v for k, v in keys.items() if v.get("trained") and k in seen]
        wall += r["wall_s"] - sum(v.get("train_wall_s", 0.0) for v in again)
        cpu += r["cpu_s"] - sum(v.get("train_cpu_s", 0.0) for v in again)
        seen |= {k for k, v in keys.items() if v.get("trained")}
    return wall, cpu


def _cold_books(runs: list[dict], profile: str) -> list[dict]:
    """The ``memlab book`` runs at ``profile`` that started from an empty model cache, oldest first."""
    return [r for r in runs if r.get("kind") == "book" and r.get("profile") == profile and r.get("from_empty_cache")]


def _latest_book(runs: list[dict], profile: str) -> dict | None:
    """The last ``memlab book`` run at ``profile`` that started from an empty model cache."""
    books = _cold_books(runs, profile)
    return books[-1] if books else None


def _book_paragraph(rec: dict, chapters: dict[str, str], runs: list[dict] | None = None) -> str:
    """The cost page's account of a whole ``memlab book`` run (:func:`record_book`), and of the
    last cold book on the same CPU run in another layout (one chapter at a time, or several), if any."""
    parts = []
    for c in sorted(rec["chapters"], key=lambda c: list(chapters).index(c["chapter"]) if c["chapter"] in chapters else 99):
        n = list(chapters).index(c["chapter"]) + 1 if c["chapter"] in chapters else "?"
        shared = (f", {c['loaded']} of its models loaded from earlier chapters" if c.get("loaded") else "")
        parts.append(f"{n}. {_cell_min(c.get('wall_s'))} min{shared}")
    jobs = rec.get("jobs") or 1
    beside = (f" ({jobs} at a time: each shared the cores with another, so the table below gives the "
              "chapters' cold runs alone)" if jobs > 1 else "")
    books = _cold_books(runs or [], rec.get("profile"))
    other = [r for r in books if r.get("device") == rec.get("device")
             and ((r.get("jobs") or 1), r.get("threads")) != (jobs, rec.get("threads"))]
    then = ""
    if other:
        o = other[-1]
        how = (f"{o['jobs']} chapters at a time" if (o.get("jobs") or 1) > 1 else "one chapter at a time")
        then = (f" The same book {how} at {o.get('threads')} thread{'s' if o.get('threads') != 1 else ''} "
                f"each took {_minutes(o['wall_s'])} min wall and {_minutes(o['cpu_s'])} CPU-minutes "
                f"({str(o.get('date'))[:10]}, same CPU).")
    elsewhere = [r for r in books if r.get("device") != rec.get("device")]
    if elsewhere:
        e = elsewhere[-1]
        then += (f" On another CPU the last cold book took {_minutes(e['wall_s'])} min wall and "
                 f"{_minutes(e['cpu_s'])} CPU-minutes ({_machine(e)}, commit {str(e.get('commit') or '?')[:7]}).")
    return (f"**The whole book from an empty model cache**, in one `memlab book`: {_minutes(rec['wall_s'])} min "
            f"wall and {_minutes(rec['cpu_s'])} CPU-minutes for its {len(rec['chapters'])} "
            f"chapter{'s' if len(rec['chapters']) != 1 else ''} "
            f"({_machine(rec)}; the render after them not counted).{then} Per chapter, wall{beside}: "
            f"{'; '.join(parts)}. Each model is trained once, by the first chapter that needs it; the "
            "table's cold runs each started from an empty cache.")


def summary_markdown(runs: list[dict], chapters: dict[str, str], profile: str = "cpu") -> str:
    """One paragraph for the front page: the whole book's measured cold cost, or that none is recorded.

    The last ``memlab book`` run from an empty cache when there is one (measured in one go);
    else the chapters' own cold runs added up (each shared model counted once).
    """
    whole = _latest_book(runs, profile)
    if whole is not None:
        longest = max(whole["chapters"], key=lambda c: c.get("wall_s") or 0)
        alone = ("" if (whole.get("jobs") or 1) > 1 else  # beside another chapter, a wall is not its own
                 f"; the longest, {chapters.get(longest['chapter'], longest['chapter'])}, "
                 f"{_minutes(longest['wall_s'])} minutes")
        return (f"Measured at `{profile}` in one `memlab book` from an empty model cache: the "
                f"{len(whole['chapters'])} chapters took {_minutes(whole['wall_s'])} minutes wall and "
                f"{_minutes(whole['cpu_s'])} CPU-minutes ({_machine(whole)}){alone}. "
                "Per chapter, warm runs and the machine: [What a run costs](cost.md).")
    cold = [_latest(runs, cid, profile, ("cold",)) for cid in chapters]
    have = [r for r in cold if r is not None]
    if not have:
        return (f"No cold run of the chapters at `{profile}` has been recorded in this book yet; "
                "[What a run costs](cost.md) fills in as runs record themselves.")
    wall, cpu = book_cold_s(have)
    shared = sum(r["wall_s"] for r in have) - wall
    longest = max(have, key=lambda r: r["wall_s"])
    threads = sorted({r["threads"] for r in have})
    part = "" if len(have) == len(chapters) else f" ({len(have)} of {len(chapters)} chapters recorded)"
    again = (f" (each model trained once: the chapters' own cold runs add up to {_minutes(wall + shared)} "
             f"minutes, as a later chapter's run trains again the models it reads from an earlier one)"
             if shared >= 30 else "")
    return (f"Measured cold (empty model cache) at `{profile}`: the chapters took {_minutes(wall)} minutes wall "
            f"and {_minutes(cpu)} CPU-minutes in all{part}{again}, at {'/'.join(map(str, threads))} thread(s); "
            f"the longest, {chapters[longest['chapter']]}, {_minutes(longest['wall_s'])} minutes. Per chapter, "
            "warm runs and the machine: [What a run costs](cost.md).")
