"""The "At paper scale (GPU)" section of a chapter, and the parts of the GPU evidence run it reports.

:data:`PARTS` declares each part of ``scripts/gpu-evidence.sh`` (:mod:`memlab.run.gpu_evidence` runs
them): the chapter, what it decides, its estimated minutes and the sizes it runs at. The run's record
``<out>/gpu-evidence.json`` and results ``<out>/book/results/<chapter>.json`` (default ``book/gpu``)
become each chapter's section at render time (:func:`section_markdown`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

RECORD = "gpu-evidence.json"


@dataclass(frozen=True)
class Part:
    """One chapter run of the GPU evidence: what it decides and the settings that size it."""

    chapter: str
    decides: str  # what this run can decide that the cpu book cannot (reader sentence)
    minutes: float  # estimated wall minutes on one H200, from benchmarks/results/gpu.json (see PARTS)
    params: dict = field(default_factory=dict)  # paper-profile overrides that size the run
    toy: dict = field(default_factory=dict)  # smoke-profile overrides that keep its shape
    limit_s: int = 900  # hard limit on the run's wall time (above the estimate, not a target)


# Minutes from the step rates measured alone on one H200 (benchmarks/results/gpu.json: ResNet-18
# width 64 at 62 steps/s (batch 256) and 66 (batch 128), inference 74,000 images/s; stacked GPT-2
# 1x32 / 2x64 / 4x128 at 77 / 60 / 38 steps/s, 2x64 fp32 at 35, one 4x128 at 53), plus the CPU
# work timed here (chapter 2's exact Wasserstein baseline), plus about 30 s of kernel start and
# data decoding. The arithmetic is in each comment.
PARTS: tuple[Part, ...] = (
    Part("05_capacity",
         "whether memorisation plateaus near 3.6 bits per parameter (the capacity law, its alpha, bf16 "
         "against fp32) for GPT-2 models up to about 1M parameters on the paper's V = 2048, S = 64 data",
         # sweep 8000 steps x (1/77 + 1/60 + 1/38 s) = 7.6 min; fp32 1x32 and 2x64 on two ratios
         # ~6 min; A.1's ten 2x128 runs of 3000 steps at ~50/s ~10 min; the oracle ~0.5 min; the
         # fifteen text runs at a fixed 2000 steps each (the paper's design, every N the same
         # steps) at ~50 steps/s one model at a time ~10 min: about 34 min in all.
         # The stacked step is launch-bound on a GPU (one 4x128 takes 19 ms): the lever is there.
         minutes=34,
         # batch 512 (the paper's 2048 would cost four times the compute a step) and 8000 steps:
         # several hundred passes over the largest data set; the convergence gates say if it sufficed
         params={"vocab_size": 2048, "seq_len": 64, "model_sizes": ["1x32", "2x64", "4x128"],
                 "precision": "bf16", "precision_models": ["1x32", "2x64"],
                 "precision_ratios": [2.0, 3.0], "steps": 8000, "warmup": 400, "batch_size": 512,
                 "stack_size": 16, "a1_steps": 3000, "a1_n_samples": 1024,
                 # WikiText-2's valid and test splits (what is offline) hold about 8000 sequences
                 "text_dataset_sizes": [250, 500, 1000, 2000, 4000],
                 # the paper profile's 10^6 text steps cut to fit the run; 2000 steps are 2000
                 # epochs of the smallest set, 256 of the largest (the double-descent gate,
                 # small sets memorised, says if it sufficed)
                 "text_steps": 2000},
         toy={"precision": "bf16"}, limit_s=2400),
    Part("01_bn_illusion",
         "the BN-illusion claims on a ResNet-18 of the paper's width 64 trained on all of CIFAR-10's "
         "training images, with the nine unlearning methods and 50 relearning epochs",
         # Original and Retrain 5550 steps / 62 = 1.5 min; the nine methods and Appendix H and Q's
         # sweeps about 8600 steps at batch 128 / 66 = 2.2 min; the evaluation of about 21 models
         # (recalibration, probes, relearning) ~4 min: a Table 1 row took 24 s on the first lease,
         # sharing the GPU, against ~12 s alone by the training loops' ratio. The GroupNorm control
         # (--set 01_bn_illusion.gn_control=true) adds about 4 min: two ResNets of 15 epochs at
         # 50 steps/s and its eight methods.
         minutes=8,
         params={"width": 64, "train_per_class": 5000, "test_per_class": 1000, "eval_retain": 5000,
                 "epochs": 15, "gn_control": False, "relearn_epochs": 50, "vit_control": False,
                 "ood_source": "patch_shuffle", "n_seeds": 1}),
    Part("02_sde",
         "the SDE claims with original and Retrain models of width 64 on all of CIFAR-10 and 50 targets "
         "per setting, on subsets a quarter of the paper's size",
         # five trainings of 15 epochs (the Original twice: the regime table asks for R = 0.0 and
         # the unlearning table for R = 0, two cache keys) 27,000 steps / 66 = 6.8 min; the exact
         # Wasserstein baseline for 3 output choices under a minute of CPU (0.019 s an assignment
         # of 500 points, timed here on an idle machine); outputs and SDE ~1 min.
         minutes=9,
         # the paper's subsets (400, 1000, 2000) make the exact Wasserstein baseline (a CPU assignment
         # problem per target, 0.66 s at 2000 points, for three output choices) alone take about
         # 16 minutes; a quarter of the size takes under one
         params={"width": 64, "n_per_class": 5000, "n_test_per_class": 1000, "epochs": 15,
                 "n_targets": 50, "subset_sizes": [100, 250, 500], "size_sweep": [50, 100, 250, 500]}),
)


def _entry_of(chapter: str, folder: Path) -> dict | None:
    """The record's entry of ``chapter``'s part in ``folder`` (``book/gpu``); None without one."""
    path = folder / RECORD
    return json.loads(path.read_text()).get("parts", {}).get(chapter) if path.exists() else None


def finished_result(chapter: str, folder: Path) -> dict | None:
    """The results of ``chapter``'s finished paper-scale run in ``folder`` (``book/gpu``), or None:
    no run has finished there, or the one there ran at toy size (never shown as paper-scale evidence)."""
    path = folder / "book" / "results" / f"{chapter}.json"
    if not path.exists() or (_entry_of(chapter, folder) or {}).get("toy"):
        return None
    return json.loads(path.read_text())


def section_markdown(chapter: str, folder: Path) -> str | None:
    """The "At paper scale (GPU)" section of ``chapter`` from ``folder`` (``book/gpu``); None if it has no part.

    With a finished run: the device, the settings that ran beside the cpu book's, and every
    claim's verdict at that scale (judged by the same predicates and regime gates). Without one:
    what the run would decide, its estimated cost, the command that runs it, and how the last
    attempt ended.
    """
    from memlab.core import config
    from memlab.report.pagekit import md_escape, verdict_line

    part = next((p for p in PARTS if p.chapter == chapter), None)
    if part is None:
        return None
    lines = ["## At paper scale (GPU)", ""]
    entry = _entry_of(chapter, folder)
    res = finished_result(chapter, folder)
    if res is None:
        lines += [f"This run decides {part.decides}. No run of it has finished on a GPU yet: "
                  f"`bash scripts/gpu-evidence.sh --only {chapter}` takes about {part.minutes:g} minutes on one "
                  f"H200 (estimated from step rates measured there; hard limit {part.limit_s // 60} minutes), "
                  "and `memlab render` then shows its verdicts here."]
        if entry and entry.get("toy") is False:
            shared = " while sharing the GPU with the other parts" if entry.get("parallel") else ""
            where = f"; it had reached {md_escape(_stage_words(chapter, entry['reached']))}" if entry.get("reached") else ""
            lines += ["", f"The last attempt {entry['status']} after {entry['wall_s']:.0f} s{shared}{where}."]
        return "\n".join(lines) + "\n"
    prov, ran = res.get("provenance", {}), res.get("params", {})
    cpu, paper = config.resolve(chapter, "cpu"), config.resolve(chapter, "paper")
    shown = [k for k in paper.keys() if k in part.params or (k in ran and ran[k] != paper[k])]
    lines += [f"This run decides {part.decides}. It ran on {md_escape(str(prov.get('device', 'a GPU')))} in "
              f"{float(prov.get('wall_time_s', 0)) / 60:.1f} minutes at the `paper` profile with these sizes:", "",
              "| Setting | This book (cpu) | At paper scale |", "|---|---|---|"]
    for k in shown:
        lines.append(f"| {k.replace('_', ' ')} | {_cell(cpu[k])} | {_cell(ran.get(k, part.params.get(k)))} |")
    lines += ["", "Verdicts at this scale, by the same predicates and regime gates as above:", ""]
    for v in res.get("claims", []):
        lines.append(verdict_line(v))
    return "\n".join(lines) + "\n"


def _stage_words(chapter: str, line: str) -> str:
    """A relayed progress line in words: "02_sde: train R=0: 64% 3759/5850 [02:01<01:02, 33.44it/s]"
    -> "train R=0, step 3759 of 5850"; "...: SalUn: done, 400 in 00:09" -> "SalUn (done)"."""
    import re

    line = line.removeprefix(f"{chapter}: ")
    if m := re.match(r"(?P<label>.*?): +\d+% (?P<n>\d+)/(?P<total>\d+)", line):
        return f"{m['label']}, step {m['n']} of {m['total']}"
    if m := re.match(r"(?P<label>.*?): done\b", line):
        return f"{m['label']} (done)"
    return line


def _cell(value) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(str(x) for x in value)
    return str(value)
