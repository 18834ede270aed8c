"""Where benchmark scripts keep what they measured.

``record(name, measurements, wall_s)`` writes ``benchmarks/results/<name>.json``
(or under ``MEMLAB_BENCH_RESULTS``): the measurements beside the same provenance
block the chapters write (commit, versions, device, threads, date), so a ratio
can always be traced to the machine and code that produced it.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

from memlab.core.results import provenance, write_json_atomic


def results_dir() -> Path:
    env = os.environ.get("MEMLAB_BENCH_RESULTS")
    return Path(env) if env else Path(__file__).resolve().parent / "results"


def record(name: str, measurements: dict, wall_s: float) -> Path:
    """Write measurements plus provenance to ``<results_dir>/<name>.json``; returns the path."""
    prov = provenance("benchmark", wall_s)
    prov["load_average_1min"] = round(os.getloadavg()[0], 2)  # a shared machine inflates every time
    path = results_dir() / f"{name}.json"
    write_json_atomic(path, {"benchmark": name, "measurements": measurements, "provenance": prov})
    print(f"wrote {path}")
    return path


def best_of_interleaved(runs: dict[str, Callable[[], Any]], repeats: int) -> tuple[dict[str, float], dict[str, Any]]:
    """Call every function of ``runs`` once per round for ``repeats`` rounds, so that all of them see
    the same machine load; returns each one's least CPU seconds and its last result, by name."""
    best, got = {name: float("inf") for name in runs}, {}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.process_time()
            got[name] = run()
            best[name] = min(best[name], time.process_time() - start)
    return best, got


def record_same_results(name: str, config: dict, best: dict[str, float], same: bool, what: str,
                        wall_s: float, **extra: Any) -> int:
    """Record a reference ``loop`` and a ``fast`` path that must give identical results: their least
    CPU seconds, the ratio, ``same`` and ``extra``; print one line naming ``what`` was computed.
    Returns the exit status: 0 when the results are identical, 1 when they differ."""
    ratio = best["loop"] / best["fast"]
    m = {"config": config, "loop_cpu_s": round(best["loop"], 4), "fast_cpu_s": round(best["fast"], 4), **extra,
         "speedup": round(ratio, 2), "results_identical": bool(same)}
    print(f"{what}: loop {best['loop']:.3f} CPU-s, at once {best['fast']:.3f} CPU-s ({ratio:.1f}x); "
          f"results {'identical' if same else 'DIFFER'}")
    record(name, m, wall_s)
    return 0 if same else 1
