"""The prepared paper-scale GPU run (``scripts/gpu-evidence.sh``) and its section in each chapter.

Some claims can only be decided at the papers' scale: the capacity law needs models of ~1M
parameters on V = 2048, S = 64 data (chapter 5), and the unlearning claims need a ResNet-18 of
width 64 that knows its forget class as the papers' does (chapters 1 and 2). Each part below is
one ``memlab run`` at the ``paper`` profile with the sizes that fit about 8 minutes on one
H200-class GPU, under a hard time limit; a part that runs out of time publishes nothing (a run
publishes only when it finishes) and the record says so. ``--toy`` runs the same parts through
the same commands at the ``smoke`` sizes on a CPU, which is how the tests exercise it.

The results land in ``<out>/book/results/<chapter>.json`` (default ``book/gpu``), with a record
``<out>/gpu-evidence.json`` of every part's command, status and wall time; ``memlab render``
shows them as an "At paper scale (GPU)" section at the end of each chapter (:func:`section_markdown`).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from memlab.config import repo_root
from memlab.results import write_json_atomic

RECORD = "gpu-evidence.json"


@dataclass(frozen=True)
class Part:
    """One chapter run of the GPU evidence: what it decides and the settings that size it."""

    chapter: str
    decides: str  # what this run can decide that the cpu book cannot (reader sentence)
    minutes: float  # estimated wall minutes on one H200 (not measured: no GPU was lent yet)
    params: dict = field(default_factory=dict)  # paper-profile overrides that size the run
    toy: dict = field(default_factory=dict)  # smoke-profile overrides that keep its shape
    limit_s: int = 600  # hard limit on the run's wall time


PARTS: tuple[Part, ...] = (
    Part("05_capacity",
         "whether memorisation plateaus near 3.6 bits per parameter (the capacity law, its alpha, bf16 "
         "against fp32) for GPT-2 models up to about 1M parameters on the paper's V = 2048, S = 64 data",
         minutes=8,
         # batch 512 (the paper's 2048 would cost four times the compute a step) and 8000 steps:
         # several hundred passes over the largest data set; the convergence gates say if it sufficed
         params={"vocab_size": 2048, "seq_len": 64, "model_sizes": ["1x32", "2x64", "4x128"],
                 "precision": "bf16", "precision_models": ["1x32", "2x64"],
                 "precision_ratios": [2.0, 3.0], "steps": 8000, "warmup": 400, "batch_size": 512,
                 "stack_size": 16, "a1_steps": 3000, "a1_n_samples": 1024,
                 # WikiText-2's valid and test splits (what is offline) hold about 8000 sequences
                 "text_dataset_sizes": [250, 500, 1000, 2000, 4000]},
         toy={"precision": "bf16"}),
    Part("01_bn_illusion",
         "the BN-illusion claims on a ResNet-18 of the paper's width 64 trained on all of CIFAR-10's "
         "training images, with the nine unlearning methods and 50 relearning epochs",
         minutes=7,
         params={"width": 64, "train_per_class": 5000, "test_per_class": 1000, "eval_retain": 5000,
                 "epochs": 15, "gn_epochs": 15, "relearn_epochs": 50, "vit_control": False,
                 "ood_source": "patch_shuffle", "n_seeds": 1}),
    Part("02_sde",
         "the SDE claims with original and Retrain models of width 64 on all of CIFAR-10 and 50 targets "
         "per setting, on subsets a quarter of the paper's size",
         minutes=7,
         # the paper's subsets (400, 1000, 2000) make the exact Wasserstein baseline (a CPU assignment
         # problem per target, for three output choices) alone outlast the limit; a quarter fits
         params={"width": 64, "n_per_class": 5000, "n_test_per_class": 1000, "epochs": 15,
                 "n_targets": 50, "subset_sizes": [100, 250, 500], "size_sweep": [50, 100, 250, 500]}),
)


def parts(only: list[str] | None = None) -> list[Part]:
    """The parts to run, in order; ``only`` names chapters (one clear error for an unknown one)."""
    known = [p.chapter for p in PARTS]
    unknown = sorted(set(only or []) - set(known))
    if unknown:
        raise ValueError(f"gpu-evidence: unknown part {', '.join(unknown)}; the parts are {', '.join(known)}")
    return [p for p in PARTS if not only or p.chapter in only]


def command(part: Part, out: Path, toy: bool, threads: int | None = None) -> list[str]:
    """The ``memlab run`` command line of one part (paper profile, or smoke sizes with ``toy``)."""
    profile, params = ("smoke", part.toy) if toy else ("paper", part.params)
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


def run_part(part: Part, out: Path, toy: bool, limit_s: int | None = None) -> dict:
    """Run one part under its hard time limit; its record entry (status, wall seconds, command)."""
    cmd = command(part, out, toy)
    limit = limit_s or part.limit_s
    start = time.perf_counter()
    # its own process group, so that the limit stops the run's kernel too, not only memlab
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        rc = proc.wait(timeout=limit)
        status = _status(rc)
    except subprocess.TimeoutExpired:
        _stop(proc)
        status = f"stopped at its {limit} s limit"
    except BaseException:  # Ctrl-C: the run (in its own group) must not outlive the script
        _stop(proc)
        raise
    return _entry(part, status, time.perf_counter() - start, limit, toy, cmd)


def _status(rc: int) -> str:
    return "finished" if rc == 0 else f"failed (exit {rc})"


def _entry(part: Part, status: str, wall_s: float, limit: int, toy: bool, cmd: list[str]) -> dict:
    return {"chapter": part.chapter, "status": status, "wall_s": round(wall_s, 1), "limit_s": limit,
            "estimate_min": part.minutes, "toy": toy, "command": ["memlab", *cmd[1:]]}


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
        parallel: bool = False) -> dict:
    """Run every part, printing a line before and after each; writes and returns the record.

    ``parallel``: all parts at once on the one GPU, each with ``cores // parts`` CPU threads and its
    output in ``<out>/logs/<chapter>.log``, a status line every 30 s; a part that reaches its limit
    is stopped while the others go on (the chapters' small models leave one H200 mostly idle).
    """
    todo = parts(only)
    out.mkdir(parents=True, exist_ok=True)
    path = out / RECORD
    record = json.loads(path.read_text()) if path.exists() else {}
    record.setdefault("parts", {})
    if parallel:
        return _run_parallel(todo, out, toy, limit_s, path, record)
    for i, part in enumerate(todo, 1):
        print(_header(i, len(todo), part, limit_s or part.limit_s, toy), flush=True)
        entry = run_part(part, out, toy, limit_s)
        _save(path, record, entry)
        print(f"gpu-evidence [{i}/{len(todo)}] {part.chapter}: {entry['status']} in {entry['wall_s']:.0f} s",
              flush=True)
    return record


def _run_parallel(todo: list[Part], out: Path, toy: bool, limit_s: int | None, path: Path, record: dict) -> dict:
    threads = max(1, (os.cpu_count() or 1) // len(todo))
    (out / "logs").mkdir(exist_ok=True)
    running = {}  # chapter -> (index, part, process, command, start, limit, log file)
    try:
        for i, part in enumerate(todo, 1):
            limit = limit_s or part.limit_s
            cmd = command(part, out, toy, threads=threads)
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
                entry = _entry(part, status, wall, limit, toy, cmd)
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


# ----------------------------------------------------------------------------- the chapter section

def section_markdown(chapter: str, folder: Path) -> str | None:
    """The "At paper scale (GPU)" section of ``chapter`` from ``folder`` (``book/gpu``); None if it has no part.

    With a finished run: the device, the settings beside the cpu book's, and every claim's verdict
    at that scale (judged by the same predicates and regime gates). Without one: what the run
    would decide, how long it takes and the command that runs it.
    """
    from memlab import config
    from memlab.pagekit import md_escape, verdict_line

    part = next((p for p in PARTS if p.chapter == chapter), None)
    if part is None:
        return None
    lines = ["## At paper scale (GPU)", ""]
    res_path = folder / "book" / "results" / f"{chapter}.json"
    entry = (json.loads((folder / RECORD).read_text()).get("parts", {}).get(chapter)
             if (folder / RECORD).exists() else None)
    if not res_path.exists() or (entry or {}).get("toy"):
        lines += [f"This run decides {part.decides}. It has not run on a GPU yet: `bash scripts/gpu-evidence.sh` "
                  f"runs it in about {part.minutes:g} minutes on one H200-class GPU (an estimate; hard limit "
                  f"{part.limit_s // 60} minutes) and `memlab render` then shows its verdicts here."]
        if entry and entry.get("toy") is False:
            lines += ["", f"The last attempt {entry['status']} after {entry['wall_s']:.0f} s."]
        return "\n".join(lines) + "\n"
    res = json.loads(res_path.read_text())
    prov = res.get("provenance", {})
    cpu = config.resolve(chapter, "cpu")
    lines += [f"This run decides {part.decides}. It ran on {md_escape(str(prov.get('device', 'a GPU')))} in "
              f"{float(prov.get('wall_time_s', 0)) / 60:.1f} minutes at the `paper` profile with these sizes:", "",
              "| Setting | This book (cpu) | At paper scale |", "|---|---|---|"]
    for k, v in part.params.items():
        lines.append(f"| {k.replace('_', ' ')} | {_cell(cpu[k])} | {_cell(v)} |")
    lines += ["", "Verdicts at this scale, by the same predicates and regime gates as above:", ""]
    for v in res.get("claims", []):
        lines.append(verdict_line(v))
    return "\n".join(lines) + "\n"


def _cell(value) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(str(x) for x in value)
    return str(value)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu-evidence", description=__doc__.split("\n\n")[0])
    ap.add_argument("--toy", action="store_true", help="smoke sizes on any machine (what the tests run)")
    ap.add_argument("--out", default=str(repo_root() / "book" / "gpu"), help="results folder (default book/gpu)")
    ap.add_argument("--only", action="append", help="run only this chapter's part (repeatable)")
    ap.add_argument("--limit-s", type=int, help="hard limit per part in seconds (default each part's own)")
    ap.add_argument("--parallel", action="store_true",
                    help="run the parts at once on the one GPU, each with its share of the CPU cores")
    args = ap.parse_args(argv)
    try:
        parts(args.only)
    except ValueError as e:
        print(f"gpu-evidence: error: {e}", file=sys.stderr)
        return 2
    record = run(Path(args.out), toy=args.toy, only=args.only, limit_s=args.limit_s, parallel=args.parallel)
    return 0 if all(e["status"] == "finished" for e in record["parts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
