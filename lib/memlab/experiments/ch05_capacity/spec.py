"""Chapter 5's parameters: the chapter id, its code version, SPEC and the checks that run before any work.

Profile values are the dict literals inside each :class:`memlab.core.config.Param`. The checks
(:data:`CHECKS`) refuse, with a :class:`memlab.core.config.ConfigError` naming the parameter, model
sizes that do not parse, runs that would not fit ``memory_gib`` and text sets WikiText-2 cannot
fill. :func:`dataset_sizes_for` (each model's grid of N, which the memory check needs) lives here
too; :func:`paper_setting` reads the paper's V and S from ``data/papers/05_capacity.yaml``.
"""

from __future__ import annotations

from memlab.core.config import SEED_HIGH, ConfigError, Param, require_memory
from memlab.models import gpt2_small as g2
from memlab.report import paper
from memlab.science import capacity as cap

CHAPTER = "05_capacity"
CODE_VERSION = "2"  # 2: fixed cosine schedules, per-model data grids, stacked training, oracle on unused text
GPT2_VOCAB = 50257  # the GPT-2 tokenizer's vocabulary: the setting of the paper's membership law (checked only)


def paper_setting() -> tuple[int, int]:
    """The paper's uniform-token setting (V symbols, S tokens a sequence) of Section 3.2, from its yaml."""
    return int(paper.number(CHAPTER, "vocab_size")), int(paper.number(CHAPTER, "seq_len"))


SPEC: dict[str, Param] = {
    "seed": Param(int, 0, low=0, high=SEED_HIGH, doc="seed of data sampling, initialisation and batch order"),
    "vocab_size": Param(
        int,
        {"smoke": 8, "cpu": 32, "paper": 2048},
        low=2,
        doc="V: symbols of the uniform-token data (paper 2048)",
    ),
    "seq_len": Param(
        int, {"smoke": 8, "cpu": 16, "paper": 64}, low=2, doc="S: tokens per uniform sequence (paper 64)"
    ),
    "model_sizes": Param(
        list,
        {
            "smoke": ["1x4", "1x8"],
            "cpu": ["1x8", "1x12", "1x16", "2x16"],
            "paper": ["1x32", "2x64", "4x128", "4x256", "8x256", "8x512"],
        },
        item=str,
        doc="GPT-2 models of the capacity sweep, 'LxD' = L layers of width D",
    ),
    "expected_bpp": Param(
        float, 3.6, low=0.01, high=64.0, doc="bits/parameter the data grid is sized for (the paper's alpha)"
    ),
    "data_ratios": Param(
        list,
        {"smoke": [0.5, 3.0], "cpu": [0.5, 1.0, 1.5, 3.0], "paper": [0.25, 0.5, 1.0, 2.0, 3.0]},
        item=float,
        low=0.001,
        high=1000.0,
        doc="H(X) / (expected_bpp * params) of each model's data sets; N follows per model",
    ),
    "dataset_sizes": Param(
        list,
        None,
        item=int,
        low=1,
        allow_none=True,
        doc="N for every model instead of data_ratios (none = the per-model grid)",
    ),
    "precision": Param(
        str,
        {"smoke": "fp32", "cpu": "fp32", "paper": "bf16"},
        choices=g2.PRECISIONS,
        doc="parameter precision of the main sweep (paper: bf16)",
    ),
    "precision_models": Param(
        list,
        {"smoke": ["1x4", "1x8"], "cpu": ["1x8", "1x16"], "paper": None},
        item=str,
        allow_none=True,
        doc="models re-run at the other precision (none = all of model_sizes)",
    ),
    "precision_ratios": Param(
        list,
        {"smoke": [3.0], "cpu": [1.5, 3.0], "paper": [2.0, 3.0]},
        item=float,
        low=0.001,
        high=1000.0,
        doc="data_ratios re-run at the other precision for the fp32-vs-bf16 alpha",
    ),
    "steps": Param(
        int,
        {"smoke": 60, "cpu": 3000, "paper": 1_000_000},
        low=1,
        doc="training steps of every uniform run: warm-up, then cosine to 0 (no early stop)",
    ),
    "warmup": Param(
        int, {"smoke": 5, "cpu": 100, "paper": 5000}, low=0, doc="linear warm-up steps of the schedule"
    ),
    "checkpoints": Param(
        int,
        {"smoke": 4, "cpu": 8, "paper": 20},
        low=2,
        high=1000,
        doc="memorisation evaluations along the schedule (evenly spaced, plus step 0)",
    ),
    "converge_tol": Param(
        float,
        0.05,
        low=0.0,
        high=1.0,
        doc="converged: the second half of the schedule added < this share of memorisation",
    ),
    "stack_size": Param(
        int,
        {"smoke": 8, "cpu": 8, "paper": 1},
        low=1,
        high=64,
        doc="most same-shape models trained at once in one stack (memory grows with it)",
    ),
    "lr": Param(
        float, {"smoke": 1e-2, "cpu": 1e-2, "paper": 1e-3}, low=1e-6, high=1.0, doc="Adam peak learning rate"
    ),
    "batch_size": Param(int, {"smoke": 64, "cpu": 128, "paper": 2048}, low=1, doc="sequences per step"),
    "convergence_model": Param(str, "", doc="model of Figure 5 ('' = the largest of model_sizes)"),
    "paperlike_model": Param(
        str,
        {"smoke": "1x4", "cpu": "1x32", "paper": ""},
        doc="one run at the paper's V = 2048, S = 64 as a reference point ('' = none)",
    ),
    "paperlike_steps": Param(
        int, {"smoke": 10, "cpu": 1500, "paper": 100_000}, low=1, doc="steps of the paper-like reference run"
    ),
    "paperlike_ratio": Param(float, 3.0, low=0.001, high=1000.0, doc="data ratio of the paper-like run"),
    "a1_model": Param(
        str, {"smoke": "1x4", "cpu": "1x12", "paper": "2x128"}, doc="model of the Appendix A.1 S/V sweep"
    ),
    "a1_n_samples": Param(
        int,
        {"smoke": 16, "cpu": 64, "paper": 4096},
        low=1,
        doc="fixed N of the Appendix A.1 sweep (paper 4096)",
    ),
    "a1_steps": Param(
        int,
        {"smoke": 30, "cpu": 1500, "paper": 1_000_000},
        low=1,
        doc="training steps of each Appendix A.1 run",
    ),
    "a1_seq_lens": Param(
        list,
        {"smoke": [4, 8], "cpu": [4, 8, 16, 32], "paper": [16, 32, 64, 128, 256]},
        item=int,
        low=2,
        doc="S values of Appendix A.1 (at V = vocab_size)",
    ),
    "a1_vocab_sizes": Param(
        list,
        {"smoke": [4, 8], "cpu": [4, 16, 64, 256], "paper": [256, 512, 1024, 2048, 4096]},
        item=int,
        low=2,
        doc="V values of Appendix A.1 (at S = a1_fixed_seq_len)",
    ),
    "a1_fixed_seq_len": Param(
        int, {"smoke": 4, "cpu": 8, "paper": 64}, low=2, doc="S while V varies in Appendix A.1"
    ),
    "text_vocab_size": Param(
        int, {"smoke": 160, "cpu": 160, "paper": 8192}, low=140, doc="BPE vocabulary of the WikiText-2 runs"
    ),
    "text_seq_len": Param(
        int, {"smoke": 40, "cpu": 64, "paper": 64}, low=3, doc="tokens per text sequence (paper 64)"
    ),
    "text_model_sizes": Param(
        list,
        {"smoke": ["1x8"], "cpu": ["1x16", "1x32"], "paper": ["2x64", "4x128", "4x256"]},
        item=str,
        doc="models trained on text",
    ),
    "text_dataset_sizes": Param(
        list,
        {
            "smoke": [8, 16, 32, 64],
            "cpu": [16, 24, 32, 48, 64, 96, 128, 192, 256, 512],
            "paper": [500, 1000, 2000, 4000, 8000, 16000],
        },
        item=int,
        low=1,
        doc="N: text sequences per training set (dense around ratio 1)",
    ),
    "text_test_size": Param(
        int,
        {"smoke": 32, "cpu": 256, "paper": 1000},
        low=2,
        doc="held-out text sequences (members' counterpart)",
    ),
    # The paper trains every data set size for the same 10^6 steps (Section 3.2, repeated for
    # text in Section 4), so a small set is seen for many more epochs than a large one and is
    # memorised whole below capacity; a fixed number of epochs gave N = 16 only 100 steps.
    # cpu value: the smallest count of a doubling grid at which the double-descent gate's own
    # measure held (share of the oracle's bits memorised, >= 90 %, of the sets below ratio 1),
    # measured at seed 0 on N = 16 and on the largest N below ratio 1 of each model (ratio
    # with the published alpha 1.96), never on the test loss. Share % at 1000/2000/4000 steps:
    #   1x16 N=16 (ratio 0.30): 98.4 / 98.4 / 98.5    1x32 N=16  (0.11): 98.4 / 98.5 / 98.5
    #   1x16 N=48 (ratio 0.90): 66.9 / 75.5 / 81.3, then 87.0 at 8000 and 90.9 at 16000
    #   1x32 N=128 (ratio 0.82): 80.7 / 92.9 / 96.4
    # The margin of 1x16 N=48 at 16000 is thin (under a point); a seed below it, or a larger
    # measured alpha that pulls a set nearer ratio 1 below it, wants the next doubling.
    "text_steps": Param(
        int,
        {"smoke": 40, "cpu": 16000, "paper": 1_000_000},
        low=1,
        doc="optimiser steps of every text model, whatever its N (paper 10^6): warm-up, then cosine",
    ),
    "text_batch_size": Param(
        int, {"smoke": 16, "cpu": 64, "paper": 512}, low=1, doc="text sequences per step (at most N)"
    ),
    "reference_model": Param(
        str,
        {"smoke": "1x8", "cpu": "2x32", "paper": "8x512"},
        doc="oracle reference, trained on the unused text",
    ),
    "reference_size": Param(
        int,
        {"smoke": 256, "cpu": 0, "paper": 0},
        low=0,
        doc="unused sequences the oracle trains on (0 = all that are left)",
    ),
    "reference_epochs": Param(
        int, {"smoke": 2, "cpu": 6, "paper": 20}, low=1, doc="passes of the oracle over its sequences"
    ),
    "prefix_len": Param(int, 32, low=1, doc="prompt tokens of greedy extraction (paper 32)"),
    "memory_gib": Param(
        float,
        {"smoke": 4.0, "cpu": 8.0, "paper": 140.0},
        low=0.01,
        finite=False,
        doc="memory one training run may use (.inf: no limit)",
    ),
}


def _check_sizes(cfg) -> None:
    for name in ("model_sizes", "text_model_sizes", "precision_models"):
        for s in cfg[name] or []:
            try:
                g2.parse_size(s)
            except ConfigError:
                raise ConfigError(
                    f"parameter {name!r}: each must look like 'LxD' with L >= 1, D >= 4 " f"(got {s!r})"
                ) from None
    for name in ("reference_model", "a1_model") + (("paperlike_model",) if cfg.paperlike_model else ()):
        try:
            g2.parse_size(cfg[name])
        except ConfigError:
            raise ConfigError(
                f"parameter {name!r}: must look like 'LxD' with L >= 1, D >= 4 " f"(got {cfg[name]!r})"
            ) from None
    if cfg.convergence_model and cfg.convergence_model not in cfg.model_sizes:
        raise ConfigError(
            f"parameter 'convergence_model': must be '' or one of {cfg.model_sizes} "
            f"(got {cfg.convergence_model!r})"
        )
    extra = [m for m in cfg.precision_models or [] if m not in cfg.model_sizes]
    if extra:
        raise ConfigError(
            f"parameter 'precision_models': each must be one of model_sizes {cfg.model_sizes} "
            f"(got {extra[0]!r})"
        )
    if cfg.warmup > cfg.steps:
        raise ConfigError(f"parameter 'warmup': must be at most steps = {cfg.steps} (got {cfg.warmup})")


def _check_memory(cfg) -> None:
    limit = cfg.memory_gib * 2**30
    runs = [(s, cfg.vocab_size, cfg.seq_len, "model_sizes", cfg.batch_size) for s in cfg.model_sizes]
    runs += [
        (s, cfg.text_vocab_size, cfg.text_seq_len, "text_model_sizes", cfg.text_batch_size)
        for s in cfg.text_model_sizes
    ]
    runs += [
        (cfg.reference_model, cfg.text_vocab_size, cfg.text_seq_len, "reference_model", cfg.text_batch_size)
    ]
    runs += [
        (
            cfg.a1_model,
            max(cfg.a1_vocab_sizes + [cfg.vocab_size]),
            max(cfg.a1_seq_lens),
            "a1_model",
            cfg.batch_size,
        )
    ]
    if cfg.paperlike_model:
        paper_v, paper_s = paper_setting()
        runs += [(cfg.paperlike_model, paper_v, paper_s, "paperlike_model", cfg.batch_size)]
    for size, v, s, name, batch in runs:
        # the stacked trainer holds every data set size of a model at once
        group = 1 if name != "model_sizes" else min(cfg.stack_size, len(cfg.dataset_sizes or cfg.data_ratios))
        need = group * g2.train_memory_bytes(size, v, s, batch)
        if need > limit:
            raise ConfigError(
                f"parameter {name!r}: model {size} needs about {need / 2**30:.1f} GiB to train "
                f"({group} at once at batch {batch}), more than memory_gib = {cfg.memory_gib:g} of profile "
                f"{cfg.profile!r}"
            )
    # A data set of N sequences of S tokens lives as int64 tokens, one shuffled copy and two
    # float32 per-token loss arrays while it is scored: 32 bytes a token.
    largest = max((n for size in cfg.model_sizes for n in dataset_sizes_for(cfg, size)), default=1)
    for name, n, seq in (
        ("dataset_sizes" if cfg.dataset_sizes else "data_ratios", largest, cfg.seq_len),
        ("text_dataset_sizes", max(cfg.text_dataset_sizes), cfg.text_seq_len),
    ):
        need = 32 * n * seq
        if need > limit:
            raise ConfigError(
                f"parameter {name!r}: N = {n} sequences of {seq} tokens need about "
                f"{need / 2**30:.1f} GiB, more than memory_gib = {cfg.memory_gib:g} of profile "
                f"{cfg.profile!r}"
            )
        require_memory(name, need, f"N = {n} sequences of {seq} tokens")


def _check_text(cfg) -> None:
    if cfg.prefix_len >= cfg.text_seq_len:
        raise ConfigError(
            f"parameter 'prefix_len': must be below text_seq_len = {cfg.text_seq_len} "
            f"(got {cfg.prefix_len})"
        )
    # Every BPE token covers at least one byte of WikiText-2 valid + test, so the text gives at
    # most bytes / text_seq_len sequences: a sound bound before any tokenizer is trained (the
    # exact count of distinct sequences is checked again in text_corpus).
    from memlab.core.config import data_root

    files = [data_root() / "wikitext-2" / f"{s}.txt" for s in ("valid", "test")] if data_root() else []
    if files and all(f.is_file() for f in files):
        most = sum(f.stat().st_size for f in files) // cfg.text_seq_len
        need = cfg.text_test_size + max(cfg.text_dataset_sizes) + max(1, cfg.reference_size)
        if need > most:
            raise ConfigError(
                f"parameter 'text_dataset_sizes': the largest set, text_test_size and "
                f"reference_size need {need} sequences of {cfg.text_seq_len} tokens; "
                f"WikiText-2 valid + test hold at most {most}"
            )


CHECKS = [_check_sizes, _check_memory, _check_text]


def dataset_sizes_for(
    cfg, size: str, seq_len: int | None = None, vocab_size: int | None = None, ratios=None
) -> list[int]:
    """N of each data set of ``size``: ``dataset_sizes`` if given, else one per ratio r.

    N = ceil(r * expected_bpp * params / (S log2 V)), so H(X) = r times the
    capacity the paper's alpha predicts for this model (distinct N, sorted).
    """
    if cfg.dataset_sizes and ratios is None:
        return sorted(set(int(n) for n in cfg.dataset_sizes))
    S, V = seq_len or cfg.seq_len, vocab_size or cfg.vocab_size
    sz = g2.parse_size(size)
    params = g2.count_params(sz.n_layer, sz.n_embd, V + 1, S)
    return sorted({cap.samples_for_bits(r * cfg.expected_bpp * params, S, V) for r in ratios or cfg.data_ratios})
