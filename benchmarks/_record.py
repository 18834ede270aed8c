"""Where benchmark scripts keep what they measured.

``record(name, measurements, wall_s)`` writes ``benchmarks/results/<name>.json``
(or under ``MEMLAB_BENCH_RESULTS``): the measurements beside the same provenance
block the chapters write (commit, versions, device, threads, date), so a ratio
can always be traced to the machine and code that produced it.
"""
from __future__ import annotations

import os
from pathlib import Path

from memlab.results import provenance, write_json_atomic


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
