"""Benchmark: each chapter's cold run (empty model cache) at several thread counts, back to back.

For every chapter of ``--chapters`` and every count of ``--threads`` (interleaved: chapter by
chapter, the thread counts one after another, so a load change hits them alike) it runs

    memlab run CHAPTER --profile P --threads N --cache-dir <new empty folder> --book-dir <scratch>

and reads what the run recorded in its book's cost log (``costs.json``: wall, CPU, threads, peak
memory, models trained) and its verdicts. It reports the wall-time ratio of each variant (thread
count, and with ``--compile on off`` compiled and eager training) to the first, and which verdicts
moved with it (other kernels, other sums: they may).
The record goes to ``benchmarks/results/book_cost.json``; say whether the machine was idle
(the record keeps the load average at the start and end).

    MEMLAB_DATA_ROOT=../shared/data python benchmarks/bench_book.py --chapters 02_sde --threads 1 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import record  # noqa: E402

from memlab.core.chapters import CHAPTERS  # noqa: E402


def cold_run(chapter: str, profile: str, threads: int, params: list[str], scratch: Path,
             compiled: bool = True) -> dict:
    """One cold run into its own book and cache folders; what its cost log and results say."""
    label = f"{threads}{'' if compiled else '-eager'}"
    # its own cache root: models, the arrays and tokenizers beside them, and inductor's compiled kernels
    book, cache = scratch / f"{chapter}-{label}" / "book", scratch / f"{chapter}-{label}" / "cache" / "models"
    cmd = [sys.executable, "-m", "memlab.cli", "run", chapter, "--profile", profile, "--threads", str(threads),
           "--cache-dir", str(cache), "--book-dir", str(book)] + (["--compile"] if compiled else [])
    for pair in params:
        cmd += ["-p", *pair.split("=", 1)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"bench_book: {' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    log = json.loads((book / "costs.json").read_text())["runs"][-1]
    res = json.loads((book / "results" / f"{chapter}.json").read_text())
    return {"threads": threads, "compiled": compiled, "label": label, "command_wall_s": round(wall, 1),
            "wall_s": log["wall_s"], "cpu_s": log["cpu_s"],
            "peak_memory_mb": log["peak_memory_mb"], "trained": log["trained"], "loaded": log["loaded"],
            "kind": log["kind"], "estimate_line": proc.stdout.splitlines()[0] if proc.stdout else "",
            "verdicts": {c["key"]: c["verdict"] for c in res.get("claims", [])}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chapters", nargs="+", default=list(CHAPTERS), choices=list(CHAPTERS))
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--compile", nargs="+", choices=("on", "off"), default=["on"],
                    help="torch.compile of the long training loops, per variant (on off: both, back to back)")
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("-p", dest="params", action="append", default=[], metavar="NAME=VALUE",
                    help="a parameter for every run (e.g. -p epochs=1, for a quick check)")
    ap.add_argument("--name", default="book_cost", help="record name under benchmarks/results")
    args = ap.parse_args(argv)
    if any(t < 1 for t in args.threads):
        ap.error(f"--threads: every count must be >= 1 (got {args.threads})")
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    out: dict = {"profile": args.profile, "params": args.params, "load_average_start": round(load0, 2),
                 "chapters": {}}
    with tempfile.TemporaryDirectory(prefix="bench-book-") as tmp:
        for chapter in args.chapters:
            runs = []
            for t, mode in [(t, m) for t in args.threads for m in args.compile]:
                print(f"bench_book: {chapter} cold at {t} thread(s), compile {mode} ...", flush=True)
                runs.append(cold_run(chapter, args.profile, t, args.params, Path(tmp), mode == "on"))
                print(f"  wall {runs[-1]['wall_s']:.0f} s, CPU {runs[-1]['cpu_s']:.0f} s", flush=True)
            base = runs[0]
            moved = sorted(k for r in runs[1:] for k, v in r["verdicts"].items() if base["verdicts"].get(k) != v)
            out["chapters"][chapter] = {
                "runs": runs,
                "wall_ratio_to_first": {r["label"]: round(base["wall_s"] / r["wall_s"], 2) for r in runs},
                "verdicts_moved": moved}
    out["load_average_end"] = round(os.getloadavg()[0], 2)
    labels = [r["label"] for r in next(iter(out["chapters"].values()))["runs"]] if out["chapters"] else []
    out["book_wall_s"] = {label: round(sum(c["runs"][i]["wall_s"] for c in out["chapters"].values()), 1)
                          for i, label in enumerate(labels)}
    record(args.name, out, time.perf_counter() - t0)
    for chapter, c in out["chapters"].items():
        print(f"{chapter}: speed-up over the first variant: {c['wall_ratio_to_first']}; "
              f"verdicts moved: {', '.join(c['verdicts_moved']) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
