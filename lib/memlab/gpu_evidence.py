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
         params={"vocab_size": 2048, "seq_len": 64, "model_sizes": ["1x32", "2x64", "4x128"],
                 "precision": "bf16", "precision_models": ["1x32", "2x64", "4x128"],
                 "precision_ratios": [2.0, 3.0], "steps": 20000, "warmup": 500, "stack_size": 16,
                 "paperlike_steps": 20000, "a1_steps": 20000, "a1_n_samples": 1024},
         toy={"precision": "bf16"}),
    Part("01_bn_illusion",
         "the BN-illusion claims on a ResNet-18 of the paper's width 64 trained on all of CIFAR-10's "
         "training images, with the nine unlearning methods and 50 relearning epochs",
         minutes=8,
         params={"width": 64, "train_per_class": 5000, "test_per_class": 1000, "eval_retain": 5000,
                 "epochs": 15, "gn_epochs": 15, "relearn_epochs": 50, "vit_control": False,
                 "ood_source": "patch_shuffle", "n_seeds": 1}),
    Part("02_sde",
         "the SDE claims with original and Retrain models of width 64 on all of CIFAR-10 and 50 targets "
         "per method",
         minutes=8,
         params={"width": 64, "n_per_class": 5000, "n_test_per_class": 1000, "epochs": 15,
                 "n_targets": 50}),
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
        status = "finished" if rc == 0 else f"failed (exit {rc})"
    except subprocess.TimeoutExpired:
        _stop(proc)
        status = f"stopped at its {limit} s limit"
    except BaseException:  # Ctrl-C: the run (in its own group) must not outlive the script
        _stop(proc)
        raise
    return {"chapter": part.chapter, "status": status, "wall_s": round(time.perf_counter() - start, 1),
            "limit_s": limit, "estimate_min": part.minutes, "toy": toy, "command": ["memlab", *cmd[1:]]}


def _stop(proc: subprocess.Popen) -> None:
    """Stop a part's process group: SIGTERM (memlab run cleans up its staging), SIGKILL after 30 s."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run(out: Path, toy: bool = False, only: list[str] | None = None, limit_s: int | None = None) -> dict:
    """Run every part in turn, printing a line before and after each; writes and returns the record."""
    todo = parts(only)
    out.mkdir(parents=True, exist_ok=True)
    path = out / RECORD
    record = json.loads(path.read_text()) if path.exists() else {}
    record.setdefault("parts", {})
    for i, part in enumerate(todo, 1):
        print(f"gpu-evidence [{i}/{len(todo)}] {part.chapter}: about {part.minutes:g} min on one H200 "
              f"(hard limit {limit_s or part.limit_s} s){' at toy size' if toy else ''}", flush=True)
        entry = run_part(part, out, toy, limit_s)
        record["parts"][part.chapter] = entry
        write_json_atomic(path, record)
        print(f"gpu-evidence [{i}/{len(todo)}] {part.chapter}: {entry['status']} in {entry['wall_s']:.0f} s",
              flush=True)
    return record


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
    args = ap.parse_args(argv)
    try:
        parts(args.only)
    except ValueError as e:
        print(f"gpu-evidence: error: {e}", file=sys.stderr)
        return 2
    record = run(Path(args.out), toy=args.toy, only=args.only, limit_s=args.limit_s)
    return 0 if all(e["status"] == "finished" for e in record["parts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
