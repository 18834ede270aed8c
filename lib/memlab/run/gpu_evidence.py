"""The prepared paper-scale GPU run (``scripts/gpu-evidence.sh``) and its section in each chapter.

Some claims can only be decided at the papers' scale: the capacity law needs models of ~1M
parameters on V = 2048, S = 64 data (chapter 5), and the unlearning claims need a ResNet-18 of
width 64 that knows its forget class as the papers' does (chapters 1 and 2). Each part below is
one ``memlab run`` at the ``paper`` profile with the sizes declared in :data:`memlab.report.gpu_section.PARTS`, under a hard
time limit; a part that runs out of time publishes nothing (a run publishes only when it
finishes) and the record says so. ``--set CHAPTER.NAME=VALUE`` changes one size for one run (the
section then shows the sizes that ran). ``--toy`` runs the same parts through the same commands
at the ``smoke`` sizes on a CPU, which is how the tests exercise it.

Each part's minutes are estimated from step rates measured one loop at a time on one H200
(``benchmarks/bench_gpu.py``, ``benchmarks/results/gpu.json``). Run the parts one after another:
the first lease ran all three at once (``--parallel``) and time-sharing the GPU slowed every
training loop to about 28 steps/s (62-77 alone), so all three reached their 530-s limit.

The results land in ``<out>/book/results/<chapter>.json`` (default ``book/gpu``), with a record
``<out>/gpu-evidence.json`` of every part's command, status, wall time and the last line its
log reached; ``memlab render`` shows them as an "At paper scale (GPU)" section at the end of each
chapter (:func:`memlab.report.gpu_section.section_markdown`).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from memlab.core.config import repo_root
from memlab.core.results import write_json_atomic
from memlab.report.gpu_section import PARTS, RECORD, Part


def parts(only: list[str] | None = None) -> list[Part]:
    """The parts to run, in order; ``only`` names chapters (one clear error for an unknown one)."""
    known = [p.chapter for p in PARTS]
    unknown = sorted(set(only or []) - set(known))
    if unknown:
        raise ValueError(f"gpu-evidence: unknown part {', '.join(unknown)}; the parts are {', '.join(known)}")
    return [p for p in PARTS if not only or p.chapter in only]


def overrides(items: list[str] | None) -> dict[str, dict]:
    """``--set CHAPTER.NAME=VALUE`` items as {chapter: {name: value}}, each value read by its
    parameter's kind and the part's paper settings with them checked, before any work; one
    clear error (naming what was typed) for a malformed item, an unknown part or parameter, or a
    value the chapter refuses."""
    from memlab.core import config
    from memlab.run.runner import parse_params

    pairs: dict[str, list[tuple[str, str]]] = {}
    for item in items or []:
        target, eq, text = item.partition("=")
        chapter, dot, name = target.partition(".")
        if not eq or not dot or not name:
            raise ValueError(f"gpu-evidence: --set {item!r} must look like CHAPTER.NAME=VALUE "
                             f"(e.g. 02_sde.epochs=12)")
        parts([chapter])
        pairs.setdefault(chapter, []).append((name, text))
    out = {}
    for chapter, given in pairs.items():
        try:
            out[chapter] = parse_params(chapter, given)
            part = parts([chapter])[0]
            config.resolve(chapter, "paper", **{**part.params, **out[chapter]})
        except config.ConfigError as err:
            raise ValueError(f"gpu-evidence: --set for {chapter}: {err}") from None
    return out


def command(part: Part, out: Path, toy: bool, threads: int | None = None, extra: dict | None = None) -> list[str]:
    """The ``memlab run`` command line of one part (paper profile, or smoke sizes with ``toy``);
    ``extra``: parameters set on top of the part's (``--set``)."""
    profile, params = ("smoke", part.toy) if toy else ("paper", part.params)
    params = {**params, **(extra or {})}
    exe = Path(sys.executable).parent / "memlab"  # the console script of this environment
    cmd = [str(exe) if exe.exists() else "memlab", "run", part.chapter, "--profile", profile,
           "--book-dir", str(out / "book")]
    if toy:  # toy models stay out of the shared model cache
        cmd += ["--cache-dir", str(out / "cache")]
    for k, v in params.items():
        cmd += ["-p", k, json.dumps(v)]
    if threads:
        cmd += ["--threads", str(threads)]
    return cmd


def run_part(part: Part, out: Path, toy: bool, limit_s: int | None = None, extra: dict | None = None) -> dict:
    """Run one part under its hard time limit; its record entry (status, wall seconds, command, and
    the last line it reached). Its output goes to the terminal and to ``<out>/logs/<chapter>.log``,
    so a part stopped at its limit still says where it had got to."""
    cmd = command(part, out, toy, extra=extra)
    limit = limit_s or part.limit_s
    (out / "logs").mkdir(parents=True, exist_ok=True)
    log_path = out / "logs" / f"{part.chapter}.log"
    start = time.perf_counter()
    # its own process group, so that the limit stops the run's kernel too, not only memlab
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ, MEMLAB_RUN_PROGRESS="1"))
    with open(log_path, "wb") as log:
        copier = threading.Thread(target=_tee, args=(proc.stdout, log), daemon=True)
        copier.start()
        try:
            rc = proc.wait(timeout=limit)
            status = _status(rc)
        except subprocess.TimeoutExpired:
            _stop(proc)
            status = f"stopped at its {limit} s limit"
        except BaseException:  # Ctrl-C: the run (in its own group) must not outlive the script
            _stop(proc)
            raise
        finally:
            copier.join(timeout=10)
    return _entry(part, status, time.perf_counter() - start, limit, toy, cmd, reached=_last_line(log_path))


def _tee(stream, log) -> None:
    """Copy a part's output, as it comes, to this terminal and to its log."""
    out = getattr(sys.stdout, "buffer", None)
    for chunk in iter(lambda: os.read(stream.fileno(), 4096), b""):
        log.write(chunk)
        log.flush()
        if out is not None:
            out.write(chunk)
            out.flush()
        else:  # a text-only stdout (pytest's capture)
            sys.stdout.write(chunk.decode(errors="replace"))
            sys.stdout.flush()


def _status(rc: int) -> str:
    return "finished" if rc == 0 else f"failed (exit {rc})"


def _entry(part: Part, status: str, wall_s: float, limit: int, toy: bool, cmd: list[str],
           parallel: bool = False, reached: str = "") -> dict:
    """A part's record: status, wall time, limit, estimate, command, the last line its log reached
    (where a stopped run was); with ``parallel`` also that it shared the GPU."""
    entry = {"chapter": part.chapter, "status": status, "wall_s": round(wall_s, 1), "limit_s": limit,
             "estimate_min": part.minutes, "toy": toy, "command": ["memlab", *cmd[1:]], "reached": reached}
    if parallel:
        entry["parallel"] = True
    return entry


def _stop(proc: subprocess.Popen) -> None:
    """Stop a part's process group: SIGTERM (memlab run cleans up its staging), SIGKILL after 30 s."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _header(i: int, n: int, part: Part, limit: int, toy: bool) -> str:
    return (f"gpu-evidence [{i}/{n}] {part.chapter}: about {part.minutes:g} min on one H200 "
            f"(hard limit {limit} s){' at toy size' if toy else ''}")


def _save(path: Path, record: dict, entry: dict) -> None:
    record["parts"][entry["chapter"]] = entry
    write_json_atomic(path, record)


def run(out: Path, toy: bool = False, only: list[str] | None = None, limit_s: int | None = None,
        parallel: bool = False, extra: dict[str, dict] | None = None) -> dict:
    """Run every part, printing a line before and after each; writes and returns the record.

    ``parallel``: all parts at once on the one GPU, each with ``cores // parts`` CPU threads and its
    output in ``<out>/logs/<chapter>.log``, a status line every 30 s; a part that reaches its limit
    is stopped while the others go on. Measured on one H200: time-sharing slowed every training
    loop to about 28 steps/s against 62-77 alone, so one after another is the faster way.
    ``extra``: {chapter: parameters} set on top of the parts' (:func:`overrides`).
    """
    todo = parts(only)
    out.mkdir(parents=True, exist_ok=True)
    path = out / RECORD
    record = json.loads(path.read_text()) if path.exists() else {}
    record.setdefault("parts", {})
    if parallel:
        return _run_parallel(todo, out, toy, limit_s, path, record, extra or {})
    for i, part in enumerate(todo, 1):
        print(_header(i, len(todo), part, limit_s or part.limit_s, toy), flush=True)
        entry = run_part(part, out, toy, limit_s, (extra or {}).get(part.chapter))
        _save(path, record, entry)
        print(f"gpu-evidence [{i}/{len(todo)}] {part.chapter}: {entry['status']} in {entry['wall_s']:.0f} s",
              flush=True)
    return record


def _run_parallel(todo: list[Part], out: Path, toy: bool, limit_s: int | None, path: Path, record: dict,
                  extra: dict[str, dict]) -> dict:
    threads = max(1, (os.cpu_count() or 1) // len(todo))
    (out / "logs").mkdir(exist_ok=True)
    running = {}  # chapter -> (index, part, process, command, start, limit, log file)
    try:
        for i, part in enumerate(todo, 1):
            limit = limit_s or part.limit_s
            cmd = command(part, out, toy, threads=threads, extra=extra.get(part.chapter))
            log = open(out / "logs" / f"{part.chapter}.log", "w")  # noqa: SIM115 - closed when it ends
            print(_header(i, len(todo), part, limit, toy) + f", {threads} CPU threads, log logs/{part.chapter}.log",
                  flush=True)
            # stage lines and progress in the log too (memlab run relays them only to a terminal by default)
            proc = subprocess.Popen(cmd, start_new_session=True, stdout=log, stderr=subprocess.STDOUT,
                                    env=dict(os.environ, MEMLAB_RUN_PROGRESS="1"))
            running[part.chapter] = (i, part, proc, cmd, time.perf_counter(), limit, log)
        last_status = time.perf_counter()
        while running:
            time.sleep(1)
            for chapter, (i, part, proc, cmd, start, limit, log) in list(running.items()):
                wall = time.perf_counter() - start
                rc = proc.poll()
                if rc is None and wall < limit:
                    continue
                if rc is None:
                    _stop(proc)
                    status = f"stopped at its {limit} s limit"
                else:
                    status = _status(rc)
                log.close()
                del running[chapter]
                entry = _entry(part, status, wall, limit, toy, cmd, parallel=True,
                               reached=_last_line(out / "logs" / f"{chapter}.log"))
                _save(path, record, entry)
                print(f"gpu-evidence [{i}/{len(todo)}] {chapter}: {status} in {wall:.0f} s", flush=True)
            if running and time.perf_counter() - last_status >= 30:
                last_status = time.perf_counter()
                for chapter, (_, _, _, _, start, _, _) in running.items():
                    print(f"gpu-evidence: {chapter} running for {time.perf_counter() - start:.0f} s: "
                          f"{_last_line(out / 'logs' / f'{chapter}.log')}", flush=True)
    finally:  # Ctrl-C or an error here: no part outlives the script
        for _, _, proc, *_rest in running.values():
            _stop(proc)
    return record


def _last_line(log: Path, width: int = 160) -> str:
    """The last non-empty line of a part's log (progress bars rewrite lines with carriage returns)."""
    try:
        tail = log.read_bytes()[-4000:].decode(errors="replace")
    except OSError:
        return ""
    lines = [seg.strip() for seg in tail.replace("\r", "\n").split("\n") if seg.strip()]
    return lines[-1][:width] if lines else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu-evidence", description=__doc__.split("\n\n")[0])
    ap.add_argument("--toy", action="store_true", help="smoke sizes on any machine (what the tests run)")
    ap.add_argument("--out", default=str(repo_root() / "book" / "gpu"), help="results folder (default book/gpu)")
    ap.add_argument("--only", action="append", help="run only this chapter's part (repeatable)")
    ap.add_argument("--limit-s", type=int, help="hard limit per part in seconds (default each part's own)")
    ap.add_argument("--parallel", action="store_true",
                    help="run the parts at once on the one GPU, each with its share of the CPU cores")
    ap.add_argument("--set", action="append", metavar="CHAPTER.NAME=VALUE",
                    help="change one of a part's settings for this run (repeatable), e.g. 02_sde.epochs=12")
    args = ap.parse_args(argv)
    try:
        parts(args.only)
        if args.set and args.toy:
            raise ValueError("--set changes the paper-scale sizes; --toy runs the smoke sizes (use one of them)")
        extra = overrides(args.set)
    except ValueError as e:
        print(f"gpu-evidence: error: {str(e).removeprefix('gpu-evidence: ')}", file=sys.stderr)
        return 2
    record = run(Path(args.out), toy=args.toy, only=args.only, limit_s=args.limit_s, parallel=args.parallel,
                 extra=extra)
    return 0 if all(e["status"] == "finished" for e in record["parts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
