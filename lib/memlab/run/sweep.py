"""Parameter sweeps on Dask: the Cartesian product of ``-p`` values as independent chapter runs.

    memlab sweep CHAPTER [--profile P] -p NAME VALUES ... [--out DIR] [--workers N | --scheduler ADDR
                 | --cluster slurm|print [--cluster-config FILE]]
    memlab sweep --summary DIR

VALUES is one value, a comma list ``0,1,2`` or an inclusive integer range ``0..4``; a list-valued
parameter is one value in brackets (``[10, 30]``), several are ``[10, 30],[5]``. Every item is read
by the chapter's SPEC (:func:`memlab.run.runner.parse_params`) and every combination is validated
(:func:`memlab.run.runner.validate`) before any run starts.

Each run is :func:`memlab.run.runner.run_chapter` with ``book_dir`` a temporary folder beside its final
one, ``<sweep>/<run-id>/``, renamed there only when the run is complete: a run folder is whole or
absent. A run folder whose ``run.json`` matches its parameters is skipped on the next invocation.
Runs are Dask tasks (worker processes, one run at a time each): a task that raises is retried once
(``retries=1``) and then recorded under ``<sweep>/failed/``; a task whose worker dies is rescheduled
by the scheduler (``distributed.scheduler.allowed-failures``, 3 by default).

Each sweep ends with its ``summary.json`` and ``summary.png`` (:mod:`memlab.report.sweep_summary`).
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import re
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from memlab.core.config import ConfigError, path_kind
from memlab.report.sweep_summary import RUN_FILE, TIMING_FILE, params_key, write_summary
from memlab.run import runner

_RUN_LOCK = threading.Lock()
SLURM_DEFAULTS = {"cores": 4, "memory": "16GB", "walltime": "04:00:00", "gpus": 0, "queue": None,
                  "account": None, "jobs": 1, "threads": 1, "job_extra": []}


# ----------------------------------------------------------------------------- the grid

def split_values(text: str) -> list[str]:
    """``'0,1'`` -> ``['0', '1']``; commas inside brackets do not split (``'[1, 2],[3]'`` -> 2 items)."""
    items, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            items.append(cur.strip())
            cur = ""
        else:
            cur += ch
    items.append(cur.strip())
    if any(not i for i in items):
        raise ConfigError(f"sweep values {text!r}: an empty item (write V1,V2,... or A..B)")
    return items


MAX_RUNS = 1000  # a cpu run takes minutes to an hour: 1,000 runs is weeks of a laptop's time


def _refuse_size(what: str, count: int) -> None:
    if count > MAX_RUNS:
        raise ConfigError(f"{what} makes {count:,} runs; a sweep is limited to {MAX_RUNS:,} (split it into "
                          "smaller sweeps)")


def parse_axes(chapter: str, pairs: Sequence[tuple[str, str]]) -> dict[str, list[Any]]:
    """``-p NAME VALUES`` pairs as ``{name: [typed values]}``, each item read by the chapter's SPEC.

    The sweep's size is known before any axis is expanded: a range, or a product of axes, of more
    than :data:`MAX_RUNS` runs is refused with its count.
    """
    names = [n for n, _ in pairs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"parameter {dup[0]!r}: given more than once")
    axes = {}
    for name, text in pairs:
        m = re.fullmatch(r"\s*(-?\d+)\s*\.\.\s*(-?\d+)\s*", text)
        if m:
            a, b = int(m.group(1)), int(m.group(2))
            if b < a:
                raise ConfigError(f"parameter {name!r}: range {text!r} is empty (write A..B with A <= B)")
            _refuse_size(f"parameter {name!r}: range {text!r}", b - a + 1)
            items = [str(v) for v in range(a, b + 1)]
        else:
            items = split_values(text)
        _refuse_size("the sweep " + " x ".join(f"{n} ({len(v)})" for n, v in [*axes.items(), (name, items)]),
                     math.prod([len(v) for v in axes.values()] + [len(items)]))
        values = [runner.parse_params(chapter, [(name, item)])[name] for item in items]
        if m and not all(isinstance(v, int) for v in values):
            raise ConfigError(f"parameter {name!r}: the range {text!r} needs an integer parameter")
        if len({json.dumps(v, sort_keys=True) for v in values}) < len(values):
            raise ConfigError(f"parameter {name!r}: a value is repeated in {text!r}")
        axes[name] = values
    return axes


def combinations(axes: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The Cartesian product as a list of ``{name: value}`` (names in the order given)."""
    names = list(axes)
    return [dict(zip(names, vals)) for vals in itertools.product(*(axes[n] for n in names))]


def sweep_id(chapter: str, profile: str, axes: dict[str, list[Any]]) -> str:
    """``<chapter>-<8 hex>``: the same chapter, profile and axes give the same folder (so re-runs resume)."""
    return f"{chapter}-{hashlib.sha256(params_key([chapter, profile, axes]).encode()).hexdigest()[:8]}"


def run_id(params: dict[str, Any]) -> str:
    """A readable folder name for one combination (``lr-0.01_seed-1``), hashed when long or odd."""
    # a name has one kind, so dropping the quotes of strings cannot make two ids equal
    text = "_".join(f"{k}-{params_key(v)}" for k, v in sorted(params.items())).replace('"', "") or "default"
    safe = re.sub(r"[^A-Za-z0-9.+-]+", "_", text).strip("_")
    if len(safe) > 80 or safe != text:  # a hash keeps ids distinct where characters were replaced
        safe = safe[:60] + "-" + hashlib.sha256(params_key(params).encode()).hexdigest()[:10]
    return safe


def is_complete(folder: Path, chapter: str, profile: str, params: dict[str, Any]) -> bool:
    """Whether ``folder`` holds a finished run of exactly these parameters (results JSON included)
    by the chapter's current code (a run of earlier code is run again: its verdicts may differ)."""
    from memlab.core.results import chapter_code, same_code

    try:
        meta = json.loads((folder / RUN_FILE).read_text())
        res = json.loads((folder / "results" / f"{chapter}.json").read_text())
    except (OSError, ValueError):
        return False
    return (meta.get("chapter") == chapter and meta.get("profile") == profile == res.get("profile")
            and params_key(meta.get("params")) == params_key(params)
            and same_code(chapter, res.get("provenance", {}).get("chapter_code"), chapter_code(chapter)))


# ----------------------------------------------------------------------------- one run (a Dask task)

def run_one(chapter: str, profile: str, params: dict[str, Any], folder: str, threads: int = 1,
            flags: dict | None = None, local_gpu: bool = False) -> dict:
    """Execute one combination into ``folder`` (via a temporary sibling, renamed when complete).

    Runs inside a Dask worker process. ``threads`` becomes the kernel's ``OMP_NUM_THREADS``;
    ``local_gpu`` pins the run to the GPU numbered like its LocalCluster worker. Raises
    :class:`memlab.run.runner.RunError` on failure (Dask retries it once).
    """
    from memlab.core.fsutil import make_tmp_dir

    final = Path(folder)
    if is_complete(final, chapter, profile, params):
        return {"run": final.name, "status": "skipped"}
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    # Dask's nanny gives its workers MALLOC_TRIM_THRESHOLD_=65536; inherited by the kernel, it makes
    # glibc hand torch's freed tensors back to the OS at once, and each new one page-faults in again:
    # a cpu run then spent more time in the kernel than in torch (2.7x the wall time of memlab run)
    os.environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    if local_gpu:
        from distributed import get_worker

        os.environ["CUDA_VISIBLE_DEVICES"] = str(get_worker().name)
    tmp = make_tmp_dir(final.parent, final.name)
    progress_file = progress_path(final.parent, final.name)
    try:
        start = time.perf_counter()
        progress_file.parent.mkdir(exist_ok=True)
        progress_file.write_text("")  # a retry's bar starts afresh
        # run_chapter sets the process's environment for its kernel: one run at a time per process,
        # even on a worker started with several threads
        with _RUN_LOCK:
            runner.run_chapter(chapter, profile, params, book_dir=tmp, progress_file=progress_file,
                               **(flags or {}))
        meta = {"chapter": chapter, "profile": profile, "params": params,
                "wall_time_s": round(time.perf_counter() - start, 1), "threads": threads}
        (tmp / RUN_FILE).write_text(json.dumps(meta, indent=1) + "\n")
        if final.exists():  # an incomplete or mismatched leftover of the same id
            shutil.rmtree(final)
        os.rename(tmp, final)
    finally:
        progress_file.unlink(missing_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return {"run": final.name, "status": "done", "wall_time_s": meta["wall_time_s"]}


def progress_path(sweep_dir: Path, rid: str) -> Path:
    """Where run ``rid`` of a sweep relays its kernel's progress while it runs (removed when it ends)."""
    return Path(sweep_dir) / ".progress" / f"{rid}.log"


def running_lines(sweep_dir: Path, rids: list[str], width: int = 70) -> str:
    """Each running run's latest progress line, ``<run>: <line>``, cut to ``width`` characters, joined by ``; ``."""
    from memlab.core.relay import latest_lines

    return latest_lines({rid: progress_path(sweep_dir, rid) for rid in rids}, width)


# ----------------------------------------------------------------------------- clusters

def estimate_line(estimates: list[dict], threads: int, workers: int | None) -> str:
    """The sweep's one estimate line: the runs' :func:`memlab.core.costs.estimate` summed, in CPU-minutes, and
    in wall minutes on ``workers`` LocalCluster workers (None: a cluster of unknown size, no wall).

    A run of a seed never recorded is charged cold, and models the runs share are charged to each,
    so the figure is at most what the sweep costs.
    """
    from memlab.core.costs import minutes

    known = [e for e in estimates if e.get("known")]
    if not known:
        n = len(estimates)
        who = f"none of the {n} runs has a" if n != 1 else "the run has no"
        return f"sweep estimate: {who} recorded run of its settings to estimate from"
    cpu = sum(e["this_cpu_s"] for e in known)
    walls = [e["this_wall_s"] for e in known]
    wall = ("" if workers is None or None in walls else
            f" (~{minutes(sum(walls) / workers):g} min wall on {workers} worker{'s' if workers != 1 else ''}"
            f" x {threads} thread{'s' if threads != 1 else ''})")
    unknown = len(estimates) - len(known)
    return (f"sweep estimate: at most ~{minutes(cpu):g} CPU-min for {len(known)} run{'s' if len(known) != 1 else ''}"
            f"{wall}" + (f", and {unknown} run(s) with no record to estimate from" if unknown else "")
            + "; each run prints its own estimate as it starts")


def local_size(n_runs: int, threads: int, workers: int | None = None, cores: int | None = None) -> int:
    """Workers for a LocalCluster: ``workers`` if given, else cores // threads, at most ``n_runs``."""
    n = workers if workers else max(1, (cores or _cores()) // max(1, threads))
    return max(1, min(n, n_runs))


def _cores() -> int:
    """Cores this process may use (:func:`memlab.core.config.available_cores`)."""
    from memlab.core.config import available_cores

    return available_cores()


def load_slurm_config(path: str | None) -> dict:
    """The SLURM job settings: :data:`SLURM_DEFAULTS` updated from a YAML file (unknown keys refused)."""
    import yaml

    conf = dict(SLURM_DEFAULTS)
    if path:
        p = Path(path).expanduser()
        if not p.is_file():
            raise ConfigError(f"parameter 'cluster-config': {path!r} is not a file")
        given = yaml.safe_load(p.read_text()) or {}
        if not isinstance(given, dict):
            raise ConfigError(f"parameter 'cluster-config': {path!r} must hold a mapping of settings")
        bad = sorted(set(given) - set(conf))
        if bad:
            raise ConfigError(f"parameter 'cluster-config': unknown key {bad[0]!r} in {path!r} "
                              f"(allowed: {', '.join(conf)})")
        conf.update(given)
    for k in ("cores", "jobs", "threads"):
        if not isinstance(conf[k], int) or conf[k] < 1:
            raise ConfigError(f"parameter 'cluster-config': {k} must be a positive integer (got {conf[k]!r})")
    if not isinstance(conf["gpus"], int) or conf["gpus"] < 0:
        raise ConfigError(f"parameter 'cluster-config': gpus must be an integer >= 0 (got {conf['gpus']!r})")
    return conf


def slurm_cluster(conf: dict, host: str | None = None):
    """A ``dask_jobqueue.SLURMCluster``: one worker per job running one run at a time (1 Dask thread),
    the job holding ``cores`` CPUs (``job_cpu``), ``memory``, ``gpus`` GPUs (``--gres`` and the Dask
    resource ``GPU``); each run's kernel gets ``threads`` OMP threads. ``host``: the scheduler's address."""
    from dask_jobqueue import SLURMCluster

    extra = [f"--gres=gpu:{conf['gpus']}"] if conf["gpus"] else []
    threads = conf["threads"]
    return SLURMCluster(
        cores=1, processes=1, job_cpu=conf["cores"], memory=str(conf["memory"]),
        walltime=str(conf["walltime"]),
        queue=conf["queue"], account=conf["account"], job_extra_directives=extra + list(conf["job_extra"]),
        worker_extra_args=["--resources", f"GPU={conf['gpus']}"] if conf["gpus"] else [],
        job_script_prologue=[f"export OMP_NUM_THREADS={threads}", f"export MKL_NUM_THREADS={threads}"],
        scheduler_options={"dashboard_address": ":0", **({"host": host} if host else {})},
    )


def _dashboard(client) -> str:
    try:
        import bokeh  # noqa: F401 - the dashboard needs it
    except ImportError:
        return "off (pip install bokeh to serve it)"
    return client.dashboard_link


# ----------------------------------------------------------------------------- the sweep

def run_sweep(chapter: str, profile: str, axes: dict[str, list[Any]], out: Path | None = None,
              workers: int | None = None, threads: int = 1, scheduler: str | None = None,
              cluster: str | None = None, cluster_config: str | None = None, gpus_per_run: int = 0,
              flags: dict | None = None) -> dict:
    """Validate every combination, run those not yet complete on Dask, write and return the summary."""
    flags = dict(flags or {})
    if out is not None and path_kind(out) not in (None, "folder"):
        raise ConfigError(f"parameter 'out': {str(out)!r} is a file, not a folder")
    _refuse_size("the sweep", math.prod(len(v) for v in axes.values()))
    combos = combinations(axes)
    # Runs on other machines (a scheduler, SLURM) check their GPU there: the login node may have none.
    remote = bool(scheduler) or cluster in ("slurm", "print")
    with runner.flag_env(flags.get("allow_download", False), flags.get("allow_cpu", False) or remote,
                      flags.get("trust_remote_code", ())):
        cfgs = {run_id(p): runner.validate(chapter, profile, p, runner.repo_root())[1]
                for p in combos}  # every combination checked before any work
    conf = load_slurm_config(cluster_config) if cluster in ("slurm", "print") else None
    if cluster == "print":
        c = slurm_cluster(conf, host="127.0.0.1")  # nothing connects: the address is a placeholder
        print("# the job script --cluster slurm submits (its scheduler address is a placeholder)",
              file=sys.stderr)
        print(c.job_script())
        c.close()
        return {}
    base = Path(out).expanduser() if out else runner.repo_root() / "data" / "sweeps"
    sweep_dir = base / sweep_id(chapter, profile, axes)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / "sweep.json").write_text(json.dumps(
        {"chapter": chapter, "profile": profile, "axes": axes, "runs": [run_id(p) for p in combos]},
        indent=1) + "\n")
    todo = [p for p in combos if not is_complete(sweep_dir / run_id(p), chapter, profile, p)]
    print(f"sweep {sweep_dir}: {len(combos)} runs, {len(combos) - len(todo)} already complete, "
          f"{len(todo)} to run")
    if todo:
        local = None if scheduler or cluster == "slurm" else local_size(len(todo), threads, workers)
        print(estimate_line([runner.estimate(chapter, profile, cfgs[run_id(p)], threads, runner.repo_root() / "book",
                                             runner.repo_root()) for p in todo], threads, local), flush=True)
    if todo:
        start = time.perf_counter()
        n_workers = _execute(chapter, profile, todo, sweep_dir, workers, threads, scheduler, cluster, conf,
                             gpus_per_run, flags)
        _record_timing(sweep_dir, {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                   "wall_s": round(time.perf_counter() - start, 1), "executed": len(todo),
                                   "workers": n_workers, "threads": threads, "cores": _cores(),
                                   "cluster": "scheduler" if scheduler else (cluster or "local")})
    summary = write_summary(sweep_dir)
    print(f"summary: {sweep_dir / 'summary.json'}")
    return summary


def _record_timing(sweep_dir: Path, entry: dict) -> None:
    """Append one invocation's wall time (seconds, the whole Dask execution) to ``timing.json``.

    A resumed sweep has several entries; ``benchmarks/bench_sweep.py --from-sweep`` reads them.
    """
    from memlab.core.results import write_json_atomic

    path = sweep_dir / TIMING_FILE
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        entries = []
    write_json_atomic(path, [*entries, entry])


def _execute(chapter, profile, todo, sweep_dir, workers, threads, scheduler, cluster, conf, gpus_per_run,
             flags) -> int | None:
    """Run ``todo`` on Dask; returns the number of local workers (None on a scheduler or SLURM)."""
    from distributed import Client, LocalCluster

    local_gpu = False
    if scheduler:
        own, client, n = None, Client(scheduler), None
        print(f"dask: scheduler {scheduler}")
    elif cluster == "slurm":
        own = slurm_cluster(conf)
        own.scale(jobs=conf["jobs"])
        client, threads, gpus_per_run = Client(own), conf["threads"], conf["gpus"] and 1
        n = None
        print(f"dask: SLURMCluster, {conf['jobs']} job(s) of {conf['cores']} cores, {conf['memory']}, "
              f"{conf['walltime']}, {conf['gpus']} GPU(s)")
    else:
        n = local_size(len(todo), threads, workers)
        if gpus_per_run:
            import torch

            n = min(n, max(1, torch.cuda.device_count() // gpus_per_run))
            local_gpu = gpus_per_run == 1
        res = {"GPU": gpus_per_run} if gpus_per_run else None
        # memory_limit=0: the run's memory is its kernel's (a child process), which the nanny does not see
        own = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, memory_limit=0,
                           dashboard_address=":0", scheduler_port=0, resources=res,
                           env={"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)})
        client = Client(own)
        print(f"dask: LocalCluster of {n} worker process(es) x 1 run, OMP_NUM_THREADS={threads} "
              f"({n * threads} thread{'s' * (n * threads != 1)} on {_cores()} cores)")
    print(f"dask: dashboard {_dashboard(client)}")
    if gpus_per_run and scheduler:
        print(f"dask: each run requests the resource GPU={gpus_per_run}: start the workers with "
              f"--resources GPU=N (else the runs wait)")
    try:
        shutil.rmtree(sweep_dir / ".progress", ignore_errors=True)  # a killed sweep's runs' lines
        futures = {}
        for p in todo:
            rid = run_id(p)
            futures[client.submit(run_one, chapter, profile, p, str(sweep_dir / rid), threads, flags,
                                  local_gpu,
                                  key=f"memlab-run-{sweep_dir.name}-{rid}", pure=False, retries=1,
                                  resources={"GPU": gpus_per_run} if gpus_per_run else None)] = (rid, p)
        _follow(client, futures, sweep_dir)
        from memlab.core.fsutil import clean_orphans

        clean_orphans(sweep_dir)  # every run is over: temp folders left are those of killed workers
        shutil.rmtree(sweep_dir / ".progress", ignore_errors=True)
    finally:
        client.close()
        if own is not None:
            own.close()
    return n


def _follow(client, futures: dict, sweep_dir: Path) -> None:
    """One progress bar until every run finished (done / running / failed, and each running run's
    latest progress line: its stage, step and ETA); failures recorded."""
    from distributed import wait

    from memlab.core.progress import progress

    bar = progress(total=len(futures), desc="sweep", mininterval=0.5)
    pending, done, failed = set(futures), 0, []
    while pending:
        try:
            finished, pending = wait(list(pending), timeout=2, return_when="FIRST_COMPLETED")
        except TimeoutError:  # nothing finished: refresh the running count
            finished = set()
        for f in finished:
            rid, params = futures[f]
            record = sweep_dir / "failed" / f"{rid}.json"
            if f.status == "finished":
                done += 1
                record.unlink(missing_ok=True)
            else:
                try:
                    err = f.exception()
                except Exception as e:  # noqa: BLE001 - a cancelled task (scheduler lost) is a failure too
                    err = e
                msg = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
                cell = re.search(r"in (cell \d+[^:]*|a cell)", msg)
                record.parent.mkdir(exist_ok=True)
                record.write_text(json.dumps({"run": rid, "params": params, "cell": cell and cell.group(1),
                                              "error": msg}, indent=1) + "\n")
                failed.append(rid)
                print(f"sweep: run {rid} failed twice: {msg}", file=sys.stderr)
        try:
            # a worker may hold more tasks than it executes (queued ahead): count at most its threads
            threads = {w: i["nthreads"] for w, i in client.scheduler_info()["workers"].items()}
            running = sum(min(len(v), threads.get(w, 1)) for w, v in client.processing().items())
        except Exception:  # noqa: BLE001 - the count is cosmetic
            running = 0
        inside = running_lines(sweep_dir, sorted(futures[f][0] for f in pending))
        bar.set_postfix_str(f"done {done}, running {running}, failed {len(failed)}"
                            + (f" | {inside}" if inside else ""), refresh=False)
        bar.update(len(finished))
        if not finished:  # tqdm draws on update only when a count moves: a log's heartbeat needs a nudge
            bar.refresh()
    bar.close()
    print(f"sweep: {done} done, {len(failed)} failed" + (f" ({', '.join(failed)})" if failed else ""))
