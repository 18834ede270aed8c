"""The book's chapters: id, title, experiments module and notebook source."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Chapter:
    id: str
    title: str
    module: str
    paper: str  # summary file under shared/papers
    # True for a chapter that reproduces no paper and judges the book's own pre-registered
    # hypotheses (data/papers/<id>.yaml "hypotheses"): the scorecard counts them apart.
    hypotheses: bool = False
    # Shown on the Robustness page: why a chapter's seed sweep is not published (its measured cost)
    # and what a reader with more cores should run instead.
    sweep_note: str = ""
    # Chapters whose stages and default parameters this chapter runs (chapter 6 re-runs chapters 1
    # and 3 at their defaults): their code is part of this chapter's code fingerprint.
    uses: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        return f"notebooks/{self.id}.py"


CHAPTERS: dict[str, Chapter] = {
    c.id: c
    for c in (
        Chapter("01_bn_illusion", "The BatchNorm illusion in unlearning evaluation",
                "memlab.experiments.ch01_bn_illusion", "bn-illusion-unlearning.txt"),
        Chapter("02_sde", "Split-half dependence evaluation of unlearning",
                "memlab.experiments.ch02_sde", "sde-hsic-unlearning-evaluation.txt",
                uses=("01_bn_illusion",)),  # its Original is chapter 1's where they are the same training
        Chapter("03_canary_audit", "Auditing reasoning-trace memorization after unlearning",
                "memlab.experiments.ch03_canary_audit", "reasoning-trace-canary-audit.txt",
                sweep_note=(
                    "**No seed sweep published yet.** The chapter's `seed` sets the synthetic authors, "
                    "the tokenizer and the pre-training, so each new seed pre-trains its own base and "
                    "trains four LoRA adapters (two memorisation seeds, each memorised and unlearned) "
                    "before the rest of the page; what one cold seed costs is on [What a run "
                    "costs](cost.md). The page already repeats memorisation and unlearning over two "
                    "seeds (`seeds`, default [0, 1]) on one base. To sweep it: `memlab sweep "
                    "03_canary_audit --profile cpu -p seed 0..2 --workers 3` (3 or more cores).")),
        Chapter("04_qskew", "Q-Skew membership inference on diffusion language models",
                "memlab.experiments.ch04_qskew", "qskew-diffusion-lm-membership.txt",
                sweep_note=(
                    "**No current seed sweep published yet.** Each seed pre-trains its own base before "
                    "the page's three fine-tuning runs; what one cold seed costs is on [What a run "
                    "costs](cost.md). The page itself already averages three independent fine-tuning "
                    "runs (seeds s, s+1 and s+2) on one base. To sweep it: `memlab sweep 04_qskew "
                    "--profile cpu -p seed 0..2 --workers 3` (3 or more cores); on a GPU cluster, see "
                    "`--cluster slurm`.")),
        Chapter("05_capacity", "How much do language models memorize?",
                "memlab.experiments.ch05_capacity", "lm-memorization-capacity.txt"),
        Chapter("06_cross_lens", "One model, many lenses",
                "memlab.experiments.ch06_cross_lens", "", hypotheses=True,
                uses=("01_bn_illusion", "03_canary_audit")),
    )
}
