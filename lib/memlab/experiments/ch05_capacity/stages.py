"""Chapter 5 orchestration: capacity of GPT-2 models in bits per parameter.

The notebook ``notebooks/05_capacity.py`` calls these functions; the
measurements live in :mod:`memlab.capacity`, the models in
:mod:`memlab.models.gpt2_small`, the batched trainer in
:mod:`memlab.models.gpt2_stacked`, the random data in
:mod:`memlab.data.synthetic`. Every function takes the chapter's resolved
:class:`memlab.config.Config`, so the three profiles run one code path.

Protocol
  * Uniform tokens: a data set of N sequences of S tokens from V symbols holds
    H(X) = N S log2 V bits. Each model is trained on a grid of N chosen *for that
    model*: H(X) = r * expected_bpp * params for r in ``data_ratios`` (the largest
    r about 3), so the grid reaches well past the capacity the paper would
    predict. All N of one model train together as one stack
    (:func:`memlab.models.gpt2_stacked.train_stacked`), each with its own data,
    batches and optimizer state, for a fixed warm-up + cosine schedule of
    ``steps`` steps: no rule can stop a run early. Memorisation is
    sum_i max(0, S log2 V - codelen_i); capacity is its largest total over N.
    Convergence evidence per run: memorisation at the last two checkpoints and
    at half the schedule (the doubling window); a run is *converged* when the
    second half of its schedule added less than ``converge_tol`` of its total.
  * Text: WikiText-2 (valid + test), a BPE tokenizer trained on it, 64-token
    chunks, exact duplicates removed, shuffled, split three ways and disjoint:
    a test set, a pool whose prefixes are the training sets, and the unused rest,
    on which the (larger) oracle reference model is trained. Every text model
    trains for ``text_epochs`` passes over its own set; unintended memorisation
    of a sample is max(0, codelen_ref - codelen_model).
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import torch

from memlab import cache, lm, metrics, paper
from memlab import capacity as cap
from memlab.config import SEED_HIGH, ConfigError, Param, device, require_memory, seed_everything
from memlab.data.synthetic import uniform_tokens
from memlab.models import gpt2_small as g2
from memlab.models import gpt2_stacked as st

CHAPTER = "05_capacity"
CODE_VERSION = "2"  # 2: fixed cosine schedules, per-model data grids, stacked training, oracle on unused text

PAPER_V, PAPER_S = 2048, 64  # the paper's uniform-token setting (Section 3.2)


def _p(smoke, cpu, paper):
    return {"smoke": smoke, "cpu": cpu, "paper": paper}


SPEC: dict[str, Param] = {
    "seed": Param(int, 0, low=0, high=SEED_HIGH, doc="seed of data sampling, initialisation and batch order"),
    "vocab_size": Param(int, _p(8, 32, 2048), low=2, doc="V: symbols of the uniform-token data (paper 2048)"),
    "seq_len": Param(int, _p(8, 16, 64), low=2, doc="S: tokens per uniform sequence (paper 64)"),
    "model_sizes": Param(
        list,
        _p(
            ["1x4", "1x8"],
            ["1x8", "1x12", "1x16", "2x16"],
            ["1x32", "2x64", "4x128", "4x256", "8x256", "8x512"],
        ),
        item=str,
        doc="GPT-2 models of the capacity sweep, 'LxD' = L layers of width D",
    ),
    "expected_bpp": Param(
        float, 3.6, low=0.01, high=64.0, doc="bits/parameter the data grid is sized for (the paper's alpha)"
    ),
    "data_ratios": Param(
        list,
        _p([0.5, 3.0], [0.5, 1.0, 1.5, 3.0], [0.25, 0.5, 1.0, 2.0, 3.0]),
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
        _p("fp32", "fp32", "bf16"),
        choices=g2.PRECISIONS,
        doc="parameter precision of the main sweep (paper: bf16)",
    ),
    "precision_models": Param(
        list,
        _p(["1x4", "1x8"], ["1x8", "1x16"], None),
        item=str,
        allow_none=True,
        doc="models re-run at the other precision (none = all of model_sizes)",
    ),
    "precision_ratios": Param(
        list,
        _p([3.0], [1.5, 3.0], [2.0, 3.0]),
        item=float,
        low=0.001,
        high=1000.0,
        doc="data_ratios re-run at the other precision for the fp32-vs-bf16 alpha",
    ),
    "steps": Param(
        int,
        _p(60, 3000, 1_000_000),
        low=1,
        doc="training steps of every uniform run: warm-up, then cosine to 0 (no early stop)",
    ),
    "warmup": Param(int, _p(5, 100, 5000), low=0, doc="linear warm-up steps of the schedule"),
    "checkpoints": Param(
        int,
        _p(4, 8, 20),
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
        _p(8, 8, 1),
        low=1,
        high=64,
        doc="most same-shape models trained at once in one stack (memory grows with it)",
    ),
    "lr": Param(float, _p(1e-2, 1e-2, 1e-3), low=1e-6, high=1.0, doc="Adam peak learning rate"),
    "batch_size": Param(int, _p(64, 128, 2048), low=1, doc="sequences per step"),
    "convergence_model": Param(str, "", doc="model of Figure 5 ('' = the largest of model_sizes)"),
    "paperlike_model": Param(
        str,
        _p("1x4", "1x32", ""),
        doc="one run at the paper's V = 2048, S = 64 as a reference point ('' = none)",
    ),
    "paperlike_steps": Param(int, _p(10, 1500, 100_000), low=1, doc="steps of the paper-like reference run"),
    "paperlike_ratio": Param(float, 3.0, low=0.001, high=1000.0, doc="data ratio of the paper-like run"),
    "a1_model": Param(str, _p("1x4", "1x12", "2x128"), doc="model of the Appendix A.1 S/V sweep"),
    "a1_n_samples": Param(int, _p(16, 64, 4096), low=1, doc="fixed N of the Appendix A.1 sweep (paper 4096)"),
    "a1_steps": Param(int, _p(30, 1500, 1_000_000), low=1, doc="training steps of each Appendix A.1 run"),
    "a1_seq_lens": Param(
        list,
        _p([4, 8], [4, 8, 16, 32], [16, 32, 64, 128, 256]),
        item=int,
        low=2,
        doc="S values of Appendix A.1 (at V = vocab_size)",
    ),
    "a1_vocab_sizes": Param(
        list,
        _p([4, 8], [4, 16, 64, 256], [256, 512, 1024, 2048, 4096]),
        item=int,
        low=2,
        doc="V values of Appendix A.1 (at S = a1_fixed_seq_len)",
    ),
    "a1_fixed_seq_len": Param(int, _p(4, 8, 64), low=2, doc="S while V varies in Appendix A.1"),
    "text_vocab_size": Param(int, _p(160, 160, 8192), low=140, doc="BPE vocabulary of the WikiText-2 runs"),
    "text_seq_len": Param(int, _p(40, 64, 64), low=3, doc="tokens per text sequence (paper 64)"),
    "text_model_sizes": Param(
        list,
        _p(["1x8"], ["1x16", "1x32"], ["2x64", "4x128", "4x256"]),
        item=str,
        doc="models trained on text",
    ),
    "text_dataset_sizes": Param(
        list,
        _p(
            [8, 16, 32, 64],
            [16, 24, 32, 48, 64, 96, 128, 192, 256, 512],
            [500, 1000, 2000, 4000, 8000, 16000],
        ),
        item=int,
        low=1,
        doc="N: text sequences per training set (dense around ratio 1)",
    ),
    "text_test_size": Param(
        int, _p(32, 256, 1000), low=2, doc="held-out text sequences (members' counterpart)"
    ),
    "text_epochs": Param(
        int, _p(20, 100, 100), low=1, doc="passes over its training set of every text model"
    ),
    "text_batch_size": Param(int, _p(16, 64, 512), low=1, doc="text sequences per step (at most N)"),
    "reference_model": Param(
        str, _p("1x8", "2x32", "8x512"), doc="oracle reference, trained on the unused text"
    ),
    "reference_size": Param(
        int, _p(256, 0, 0), low=0, doc="unused sequences the oracle trains on (0 = all that are left)"
    ),
    "reference_epochs": Param(int, _p(2, 6, 20), low=1, doc="passes of the oracle over its sequences"),
    "prefix_len": Param(int, 32, low=1, doc="prompt tokens of greedy extraction (paper 32)"),
    "memory_gib": Param(
        float,
        _p(4.0, 8.0, 140.0),
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
        runs += [(cfg.paperlike_model, PAPER_V, PAPER_S, "paperlike_model", cfg.batch_size)]
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
    from memlab.config import data_root

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


# ----------------------------------------------------------------------------- uniform tokens


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
    h = cap.uniform_entropy_bits(S, V)
    return sorted({max(1, math.ceil(r * cfg.expected_bpp * params / h)) for r in (ratios or cfg.data_ratios)})


def _rel_half_width(per_sample: np.ndarray) -> float:
    """Half the 95% bootstrap interval of a total over samples, relative to the total."""
    total = float(per_sample.sum())
    if total <= 0 or len(per_sample) < 2:
        return float("nan")
    lo, hi = metrics.bootstrap_ci(per_sample, stat=np.sum, n_boot=1000, seed=0)
    return float((hi - lo) / 2 / total)


def synthetic_group(
    cfg,
    size: str,
    ns: list[int],
    *,
    precision: str | None = None,
    seq_len: int | None = None,
    vocab_size: int | None = None,
    steps: int | None = None,
) -> list[dict]:
    """Train one GPT-2 of ``size`` on each N of ``ns`` (one stack, one schedule); measure each.

    Returns one dict per N: params, H(X), total memorisation (clipped and not)
    with its bootstrap noise, membership F1 against N fresh sequences, the
    memorisation at every checkpoint, the convergence evidence, steps, tokens
    and wall time (the stack's, shared by its runs). Cached by everything that
    produced it.
    """
    precision = precision or cfg.precision
    S, V = seq_len or cfg.seq_len, vocab_size or cfg.vocab_size
    steps = steps or cfg.steps
    if precision not in g2.PRECISIONS:
        raise ConfigError(
            f"parameter 'precision': must be one of {', '.join(g2.PRECISIONS)} (got {precision!r})"
        )
    if not ns or min(ns) < 1:
        raise ConfigError(f"parameter 'dataset_sizes': each N must be >= 1 (got {ns})")
    ns = [int(n) for n in ns]
    warmup = min(cfg.warmup, steps)
    key = {
        "size": size,
        "ns": ns,
        "S": S,
        "V": V,
        "precision": precision,
        "seed": cfg.seed,
        "steps": steps,
        "warmup": warmup,
        **{k: cfg[k] for k in ("checkpoints", "lr", "batch_size")},
    }
    H = cap.uniform_entropy_bits(S, V)
    n_head = g2.parse_size(size).n_head
    at = st.checkpoints(steps, cfg.checkpoints)
    if steps // 2 not in at:
        at = sorted(set(at) | {steps // 2})

    def compute() -> dict[str, torch.Tensor]:
        seed_everything(cfg.seed)
        dev = device()
        trains = [uniform_tokens(n, S, V, seed=cfg.seed) for n in ns]
        heldouts = [uniform_tokens(n, S, V, seed=cfg.seed + 10_000) for n in ns]
        models = [g2.build(size, V, S, precision, seed=cfg.seed, device=dev) for _ in ns]

        def evaluate(params):
            return [
                float(
                    cap.memorization_bits(H, st.code_lengths(params, g, trains[g].to(dev), V, n_head)).sum()
                )
                for g in range(len(ns))
            ]

        t0 = time.perf_counter()
        hist = st.train_stacked(
            models,
            trains,
            V,
            n_head=n_head,
            steps=steps,
            batch_size=cfg.batch_size,
            lr=cfg.lr,
            warmup=warmup,
            seeds=[cfg.seed] * len(ns),
            evaluate_at=at,
            evaluate=evaluate,
            desc=f"{size} x{len(ns)} N={ns[0]}..{ns[-1]} {precision}",
        )
        wall = time.perf_counter() - t0
        out = {
            "hist_step": torch.tensor(hist["step"]),
            "hist_value": torch.tensor(hist["value"], dtype=torch.float64),  # (checkpoints, G)
            "n_params": torch.tensor(g2.n_params(models[0])),
            "wall_s": torch.tensor(wall),
            "tokens_seen": torch.tensor(hist["tokens"]),
        }
        for g, m in enumerate(models):  # the final code lengths through the Hugging Face forward
            out[f"train_bits_{g}"] = torch.as_tensor(cap.sequence_code_lengths(m, trains[g], V))
            out[f"heldout_bits_{g}"] = torch.as_tensor(cap.sequence_code_lengths(m, heldouts[g], V))
        return out

    t = cache.load_or_compute(CHAPTER, "uniform-stack", key, compute, CODE_VERSION)
    step = t["hist_step"].tolist()
    values = t["hist_value"].numpy()
    half = step.index(steps // 2)
    rows = []
    for g, n in enumerate(ns):
        train_bits, heldout_bits = t[f"train_bits_{g}"].numpy(), t[f"heldout_bits_{g}"].numpy()
        per = cap.memorization_bits(H, train_bits)
        mem = float(per.sum())
        curve = values[:, g]
        last, prev, mid = float(curve[-1]), float(curve[-2]), float(curve[half])
        rows.append(
            {
                "model": size,
                "precision": precision,
                "S": S,
                "V": V,
                "n_samples": n,
                "params": int(t["n_params"]),
                "data_bits": n * H,
                "mem_bits": mem,
                "mem_bits_unclipped": float(cap.memorization_bits(H, train_bits, clip=False).sum()),
                "mem_noise_rel": _rel_half_width(per),
                "membership_f1": cap.membership_f1(train_bits, heldout_bits),
                "steps": steps,
                "stopped": "schedule",
                "mem_prev_ckpt": prev,
                "mem_last_ckpt": last,
                "prev_ckpt_step": step[-2],
                "mem_half": mid,
                "gain_last": (last - prev) / max(last, 1.0),
                "gain_half": (last - mid) / max(last, 1.0),
                "converged": bool((last - mid) < cfg.converge_tol * max(last, 1.0)),
                "history": {"step": step, "value": curve.tolist()},
                "wall_s": float(t["wall_s"]) / len(ns),
                "stack_wall_s": float(t["wall_s"]),
                "stack": len(ns),
                "tokens_seen": int(t["tokens_seen"]),
            }
        )
    return rows


def capacity_sweep(cfg, precision: str | None = None, ratios=None, models=None) -> pd.DataFrame:
    """Figure 1: every model of ``models`` (default ``model_sizes``) on its own N grid; one row per run."""
    rows = []
    for m in models or cfg.model_sizes:
        ns = dataset_sizes_for(cfg, m, ratios=ratios)
        for i in range(0, len(ns), cfg.stack_size):  # stacks of at most stack_size models
            rows += synthetic_group(cfg, m, ns[i : i + cfg.stack_size], precision=precision)
    return pd.DataFrame(rows)


def capacities(sweep: pd.DataFrame) -> pd.DataFrame:
    """Per model: parameters, capacity (max memorisation over N), bits per parameter, convergence.

    ``capacity_converged`` says whether the run that sets the capacity (its N
    is ``capacity_n``) passed the doubling-window test.
    """
    rows = {}
    for (model, prec), grp in sweep.groupby(["model", "precision"], sort=False):
        best = grp.loc[grp["mem_bits"].idxmax()]
        rows[model] = {
            "precision": prec,
            "params": int(best["params"]),
            "capacity_bits": float(best["mem_bits"]),
            "capacity_n": int(best["n_samples"]),
            "capacity_converged": bool(best["converged"]),
            "capacity_noise_rel": float(best["mem_noise_rel"]),
            "converged_runs": int(grp["converged"].sum()),
            "runs": len(grp),
        }
    out = pd.DataFrame.from_dict(rows, orient="index")
    out["bits_per_param"] = out["capacity_bits"] / out["params"]
    out.index.name = "model"
    return out


def convergence_table(sweep: pd.DataFrame) -> pd.DataFrame:
    """Per run: memorisation at the last two checkpoints and at half the schedule, and the verdict."""
    t = sweep[
        [
            "model",
            "precision",
            "n_samples",
            "data_bits",
            "mem_half",
            "mem_prev_ckpt",
            "mem_last_ckpt",
            "gain_last",
            "gain_half",
            "converged",
        ]
    ].copy()
    return t.rename(
        columns={
            "n_samples": "N",
            "data_bits": "H(X) bits",
            "mem_half": "mem @ T/2",
            "mem_prev_ckpt": "mem @ 2nd-last ckpt",
            "mem_last_ckpt": "mem @ T",
            "gain_last": "gain last ckpt",
            "gain_half": "gain 2nd half",
        }
    )


def alpha_fit(caps: pd.DataFrame) -> dict[str, float]:
    """alpha (bits/parameter) and R^2 of capacity ~ alpha * params."""
    return cap.fit_alpha(caps["params"].to_numpy(), caps["capacity_bits"].to_numpy())


def convergence_model(cfg) -> str:
    return cfg.convergence_model or max(
        cfg.model_sizes,
        key=lambda s: g2.count_params(
            g2.parse_size(s).n_layer, g2.parse_size(s).n_embd, cfg.vocab_size + 1, cfg.seq_len
        ),
    )


def paperlike_run(cfg) -> dict | None:
    """One run at the paper's V = 2048, S = 64 (``paperlike_model``), or None when it is off."""
    if not cfg.paperlike_model:
        return None
    n = dataset_sizes_for(cfg, cfg.paperlike_model, PAPER_S, PAPER_V, ratios=[cfg.paperlike_ratio])
    r = synthetic_group(
        cfg, cfg.paperlike_model, n, seq_len=PAPER_S, vocab_size=PAPER_V, steps=cfg.paperlike_steps
    )[0]
    r["bits_per_param"] = r["mem_bits"] / r["params"]
    return r


def a1_sweep(cfg, alpha: float) -> pd.DataFrame:
    """Appendix A.1: vary S (at V = vocab_size) and V (at S = a1_fixed_seq_len) at fixed N.

    Predicted memorisation is min(alpha * params, H(X)) with the model's own
    parameter count (embeddings change with V and S). Each (S, V) has its own
    shapes, so each is a stack of one, trained for ``a1_steps``.
    """
    settings = [("S", s, cfg.vocab_size) for s in cfg.a1_seq_lens]
    settings += [("V", cfg.a1_fixed_seq_len, v) for v in cfg.a1_vocab_sizes]
    rows = []
    for varied, S, V in settings:
        r = synthetic_group(
            cfg, cfg.a1_model, [cfg.a1_n_samples], seq_len=S, vocab_size=V, steps=cfg.a1_steps
        )[0]
        predicted = cap.expected_memorization(alpha * r["params"], r["data_bits"])
        rows.append(
            {
                "varied": varied,
                "S": S,
                "V": V,
                "params": r["params"],
                "data_bits": r["data_bits"],
                "predicted_bits": predicted,
                "measured_bits": r["mem_bits"],
                "error_pct": 100.0 * abs(r["mem_bits"] - predicted) / predicted,
                "noise_pct": 100.0 * r["mem_noise_rel"],
                "converged": r["converged"],
                "wall_s": r["stack_wall_s"],
            }
        )
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- text


def text_corpus(cfg) -> dict:
    """WikiText-2 as de-duplicated sequences, split three ways (disjoint).

    ``test``: held-out sequences (non-members); ``pool``: training sets are its
    prefixes; ``unused``: everything left (or its first ``reference_size``),
    the oracle's training data, larger than any training set and disjoint from it.
    """
    from memlab.data.text import load_wikitext2, train_bpe

    text = load_wikitext2("valid") + "\n" + load_wikitext2("test")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    tok = train_bpe(
        lines, cfg.text_vocab_size, special_tokens=["<unk>"], name="wikitext2-capacity", byte_level=False
    )
    ids = [i for enc in tok.encode_batch(lines) for i in enc.ids]
    seqs = lm.text_sequences(ids, cfg.text_seq_len)
    gen = torch.Generator().manual_seed(cfg.seed)
    seqs = seqs[torch.randperm(len(seqs), generator=gen)]
    used = cfg.text_test_size + max(cfg.text_dataset_sizes)
    need = used + max(1, cfg.reference_size)
    if len(seqs) < need:
        raise ConfigError(
            f"parameter 'text_dataset_sizes': WikiText-2 gives {len(seqs)} distinct sequences; "
            f"the largest set, text_test_size and reference_size need {need}"
        )
    unused = seqs[used:] if cfg.reference_size == 0 else seqs[used : used + cfg.reference_size]
    return {
        "test": seqs[: cfg.text_test_size],
        "pool": seqs[cfg.text_test_size : used],
        "unused": unused,
        "vocab_size": tok.get_vocab_size(),
        "tokenizer": tok,
        "n_distinct": len(seqs),
    }


def text_steps(n: int, epochs: int, batch_size: int) -> tuple[int, int]:
    """(steps, batch) of ``epochs`` passes over n sequences with batches of min(batch_size, n)."""
    batch = min(batch_size, n)
    return max(1, math.ceil(epochs * n / batch)), batch


def _text_train(cfg, size: str, train: torch.Tensor, V: int, epochs: int, desc: str):
    """A GPT-2 model trained for ``epochs`` passes over text sequences (warm-up + cosine)."""
    model = g2.build(size, V, cfg.text_seq_len, cfg.precision, seed=cfg.seed, device=device())
    steps, batch = text_steps(len(train), epochs, cfg.text_batch_size)
    st.train_stacked(
        [model],
        [train],
        V,
        n_head=g2.parse_size(size).n_head,
        steps=steps,
        batch_size=batch,
        lr=cfg.lr,
        warmup=min(cfg.warmup, steps // 10),
        seeds=[cfg.seed],
        desc=desc,
    )
    return model, steps


def reference_code_lengths(cfg, corpus: dict) -> dict[str, np.ndarray]:
    """Code lengths (bits) of pool and test sequences under the oracle, trained on the unused text."""
    V = corpus["vocab_size"]
    key = {
        "size": cfg.reference_model,
        "V": V,
        "S": cfg.text_seq_len,
        "n_ref": len(corpus["unused"]),
        "n_pool": len(corpus["pool"]),
        "n_test": len(corpus["test"]),
        "seed": cfg.seed,
        "precision": cfg.precision,
        **{k: cfg[k] for k in ("reference_epochs", "warmup", "lr", "text_batch_size")},
    }

    def compute():
        seed_everything(cfg.seed)
        t0 = time.perf_counter()
        model, steps = _text_train(
            cfg, cfg.reference_model, corpus["unused"], V, cfg.reference_epochs, "oracle"
        )
        return {
            "pool": torch.as_tensor(cap.sequence_code_lengths(model, corpus["pool"], V)),
            "test": torch.as_tensor(cap.sequence_code_lengths(model, corpus["test"], V)),
            "own": torch.as_tensor(cap.sequence_code_lengths(model, corpus["unused"][:1024], V)),
            "n_params": torch.tensor(g2.n_params(model)),
            "steps": torch.tensor(steps),
            "wall_s": torch.tensor(time.perf_counter() - t0),
        }

    t = cache.load_or_compute(CHAPTER, "text-oracle", key, compute, CODE_VERSION)
    return {
        "pool": t["pool"].numpy(),
        "test": t["test"].numpy(),
        "own": t["own"].numpy(),
        "params": int(t["n_params"]),
        "steps": int(t["steps"]),
        "n_train": len(corpus["unused"]),
        "wall_s": float(t["wall_s"]),
    }


def text_run(cfg, corpus: dict, ref: dict, size: str, n_samples: int, alpha: float) -> dict:
    """Train one model on the first N pool sequences; memorisation, losses, MIA, extraction.

    Extraction is measured on the test set and on as many training sequences
    (the first ``text_test_size``), so both rates have the same precision.
    """
    V, S = corpus["vocab_size"], cfg.text_seq_len
    key = {
        "size": size,
        "n": n_samples,
        "V": V,
        "S": S,
        "seed": cfg.seed,
        "precision": cfg.precision,
        "prefix": cfg.prefix_len,
        "n_test": cfg.text_test_size,
        **{k: cfg[k] for k in ("text_epochs", "warmup", "lr", "text_batch_size")},
    }
    train = corpus["pool"][:n_samples]
    test = corpus["test"]

    def compute():
        seed_everything(cfg.seed)
        t0 = time.perf_counter()
        model, steps = _text_train(cfg, size, train, V, cfg.text_epochs, f"text {size} N={n_samples}")
        probe = train[: len(test)]
        return {
            "train_bits": torch.as_tensor(cap.sequence_code_lengths(model, train, V)),
            "test_bits": torch.as_tensor(cap.sequence_code_lengths(model, test, V)),
            "extract_train": torch.tensor(cap.greedy_extraction_rate(model, probe, V, cfg.prefix_len)),
            "extract_test": torch.tensor(cap.greedy_extraction_rate(model, test, V, cfg.prefix_len)),
            "n_params": torch.tensor(g2.n_params(model)),
            "steps": torch.tensor(steps),
            "wall_s": torch.tensor(time.perf_counter() - t0),
        }

    t = cache.load_or_compute(CHAPTER, "text", key, compute, CODE_VERSION)
    train_bits, test_bits = t["train_bits"].numpy(), t["test_bits"].numpy()
    ref_bits = ref["pool"][:n_samples]
    umem = cap.unintended_memorization(ref_bits, train_bits)
    params = int(t["n_params"])
    k = min(n_samples, len(test))  # equal members and non-members keep chance at 0.5
    n_probe = min(n_samples, len(test))
    return {
        "model": size,
        "params": params,
        "n_samples": n_samples,
        "train_loss": float(train_bits.mean() / S),
        "test_loss": float(test_bits.mean() / S),
        "test_loss_se": float(test_bits.std(ddof=1) / S / math.sqrt(len(test_bits))),
        "ref_data_bits": float(ref_bits.sum()),
        "data_to_capacity": float(ref_bits.sum() / (alpha * params)),
        "unintended_bits": float(umem.sum()),
        "unintended_per_sample": float(umem.mean()),
        "membership_f1": cap.membership_f1(train_bits[:k], test_bits[:k]),
        "membership_n": k,
        "extract_train": float(t["extract_train"]),
        "extract_test": float(t["extract_test"]),
        "extract_n_train": n_probe,
        "extract_n_test": len(test),
        "steps": int(t["steps"]),
        "epochs": cfg.text_epochs,
        "stopped": "schedule",
        "wall_s": float(t["wall_s"]),
        "per_sample_unintended": umem,
    }


def text_sweep(cfg, corpus: dict, ref: dict, alpha: float) -> pd.DataFrame:
    """Figures 2, 3, 9 and 17 data: every text model on every N."""
    rows = [
        text_run(cfg, corpus, ref, m, n, alpha) for m in cfg.text_model_sizes for n in cfg.text_dataset_sizes
    ]
    return pd.DataFrame(rows)


def tfidf_run(text: pd.DataFrame, model: str, min_positive: int = 20) -> pd.Series:
    """The run of ``model`` for Figure 16: its largest N with >= ``min_positive`` memorised samples.

    Falls back to its smallest N, so a model that memorised little still gets a plot.
    """
    runs = text[text["model"] == model].sort_values("n_samples")
    if runs.empty:
        raise ValueError(f"parameter 'model': no text run of {model!r}")
    enough = runs[[int((r > 0).sum()) >= min_positive for r in runs["per_sample_unintended"]]]
    return (enough if len(enough) else runs).iloc[-1 if len(enough) else 0]


def tfidf_vs_memorization(corpus: dict, row: pd.Series) -> pd.DataFrame:
    """Figure 16: TF-IDF of each training sequence of one run beside its unintended memorisation."""
    n = int(row["n_samples"])
    scores = cap.tfidf([s.tolist() for s in corpus["pool"][:n]])
    return pd.DataFrame({"tfidf": scores, "unintended_bits": row["per_sample_unintended"]})


def double_descent_onsets(text: pd.DataFrame) -> dict[str, float | None]:
    """Per text model: the data-to-capacity ratio where test loss first rises beyond noise (None if never).

    A rise counts only when it exceeds 1.96 standard errors of the difference of
    the two mean test losses (``test_loss_se``), so jitter is not an onset.
    """
    out = {}
    for model, grp in text.groupby("model", sort=False):
        grp = grp.sort_values("data_to_capacity")
        out[model] = cap.first_increase(grp["data_to_capacity"], grp["test_loss"], se=grp["test_loss_se"])
    return out


# ----------------------------------------------------------------------------- membership law


def table2_law() -> pd.DataFrame:
    """The paper's Table 2 beside the law's F1 at its |D| and the |D| the law gives for its F1."""
    t2 = paper.table(CHAPTER, "table2")
    law = [cap.membership_f1_law(r.params, r.n_samples, 64, 50257) for r in t2.itertuples()]
    d_law = [cap.law_dataset_size(r.params, r.predicted_f1) for r in t2.itertuples()]
    return pd.DataFrame(
        {
            "params": t2["params"],
            "|D| (paper)": t2["n_samples"],
            "|D| (law, ours)": np.round(d_law).astype(int),
            "predicted F1 (paper)": t2["predicted_f1"],
            "law F1 at paper |D| (ours)": np.round(law, 4),
            "observed F1 (paper)": t2["observed_f1"] / 100.0,
        }
    )


def law_fit(points: pd.DataFrame) -> dict:
    """The law's constants fitted to our (N / params, F1) points; ``{"error": ...}`` if it cannot."""
    x = (points["n_samples"] / points["params"]).to_numpy()
    y = points["membership_f1"].to_numpy()
    try:
        return cap.fit_membership_law(x, y)
    except (RuntimeError, ValueError) as e:  # too few or degenerate points at toy sizes
        return {"error": str(e).splitlines()[0]}


def training_cost(sweeps: list[pd.DataFrame], singles: list[float]) -> float:
    """Seconds the cached training took when it was computed: each stack once, plus single runs."""
    total = sum(
        float(df.drop_duplicates(["model", "precision", "stack_wall_s"])["stack_wall_s"].sum())
        for df in sweeps
        if len(df) and "stack_wall_s" in df
    )
    return total + float(sum(singles))


def benchmark_throughput(sweep: pd.DataFrame) -> dict[str, float]:
    """Achieved training FLOP/s of the sweep: 6 * params * tokens / wall time, summed."""
    flops = sum(g2.train_flops(r.params, r.tokens_seen) for r in sweep.itertuples())
    wall = float(sweep["wall_s"].sum())
    return {
        "train_flops": flops,
        "train_wall_s": wall,
        "achieved_flops_per_s": flops / wall if wall > 0 else float("nan"),
    }


def fit_noise(caps: pd.DataFrame, n_draws: int = 2000, seed: int = 0) -> dict[str, float]:
    """Half-widths of 95% bands on alpha and R^2 from each capacity's own bootstrap noise.

    Each capacity is redrawn as normal with sd = capacity * noise_rel / 1.96 (its
    95% half-width), the fit repeated; returns half the 2.5-97.5% range of each.
    """
    rng = np.random.default_rng(seed)
    p = caps["params"].to_numpy(float)
    c = caps["capacity_bits"].to_numpy(float)
    sd = c * np.nan_to_num(caps["capacity_noise_rel"].to_numpy(float)) / 1.96
    draws = c + rng.standard_normal((n_draws, len(c))) * sd
    alpha = draws @ p / (p @ p)
    ss_res = ((draws - alpha[:, None] * p) ** 2).sum(1)
    ss_tot = ((draws - draws.mean(1, keepdims=True)) ** 2).sum(1)
    r2 = 1.0 - ss_res / np.where(ss_tot > 0, ss_tot, np.nan)
    half = lambda v: float(np.subtract(*np.nanquantile(v, [0.975, 0.025])) / 2)  # noqa: E731
    return {"alpha_band": half(alpha), "r2_band": half(r2)}


# ----------------------------------------------------------------------------- claims
# Thresholds of the predicates, one constant each (tests mutate them and see the verdict flip).
LINEAR_R2 = 0.95  # capacity ~ alpha * params: R^2 at least this (the paper: > 0.99)
ALPHA_TOL = 0.5  # |alpha - 3.64| at most this many bits/parameter
PLATEAU_TOL = 0.10  # memorisation over the two largest N changes by at most 10%, either way
PLATEAU_SHARE = 0.5  # ... and stays below this share of H(X) at the largest N
PRECISION_MAX = 1.25  # alpha fp32 / bf16 in (1, 1.25] (the paper: 1.091)
A1_ERROR_PCT = 5.0  # min(capacity, H(X)) within 5% mean error (the paper: 1.7%, 1.8%)
DD_RANGE = (0.25, 4.0)  # double descent's onset ratio within this range
EXTRACT_TOL = 0.05  # training extraction within 0.05 of test extraction at the largest N
TFIDF_P = 0.05  # Spearman p-value below this
LAW_RMSE = 0.02  # the law fitted on text within 2 points of F1 (the paper: 1-2%)
TABLE2_TOL = 0.01  # the law's arithmetic against Table 2's printed F1


def _unconverged(m, what: str) -> None:
    """NotJudged when a capacity that ``what`` rests on is only a lower bound (its run still rose)."""
    bad = [k for k, v in m["capacity"].items() if not v["converged"]]
    if bad:
        bpp = ", ".join(f"{k}: {v['bpp']:.2f}" for k, v in m["capacity"].items())
        raise paper.NotJudged(
            f"{what} rests on capacities that are lower bounds: the run setting the capacity of "
            f"{', '.join(bad)} still gained over the second half of its schedule (bits/param {bpp}; "
            f"alpha = {m['alpha']:.2f}, R² = {m['alpha_r2']:.3f})"
        )


def _linear(m):
    """Capacity ~ alpha * params fits with R^2 >= LINEAR_R2 (capacities of converged runs)."""
    _unconverged(m, "linearity")
    margin, band = m["alpha_r2"] - LINEAR_R2, m["alpha_r2_band"]
    paper.outside_noise(margin, band, f"R² - {LINEAR_R2}")
    return margin > 0, f"R² = {m['alpha_r2']:.3f} ± {band:.3f} vs ≥ {LINEAR_R2} (paper > 0.99)"


def _alpha(m):
    """Fitted alpha within ALPHA_TOL bits/parameter of the paper's mean alpha (converged runs only)."""
    ref = paper.number(CHAPTER, "alpha_mean")
    trend = ""
    if m.get("paperlike"):
        pl = m["paperlike"]
        trend = (
            f"; paper-like {pl['model']} (V = {pl['V']}, S = {pl['S']}): {pl['bits_per_param']:.2f} "
            f"bits/param after {pl['steps']} steps, {'converged' if pl['converged'] else 'still rising'}"
        )
    try:
        _unconverged(m, f"alpha = 3.6 ({m['alpha_precision']})")
    except paper.NotJudged as e:
        raise paper.NotJudged(f"not testable at this training length: {e}{trend}") from None
    margin, band = ALPHA_TOL - abs(m["alpha"] - ref), m["alpha_band"]
    paper.outside_noise(margin, band, f"{ALPHA_TOL} - |alpha - {ref}|")
    return margin > 0, (
        f"alpha = {m['alpha']:.2f} ± {band:.2f} ({m['alpha_precision']}) vs {ref} ± {ALPHA_TOL}" f"{trend}"
    )


def _plateau_one(pts) -> tuple[bool | None, str]:
    """pts: sorted (N, mem, H, noise_rel, converged) of one model. (verdict or None = inside noise, text)."""
    (n0, m0, _, e0, c0), (n1, m1, h1, e1, c1) = pts[-2], pts[-1]
    growth = m1 / max(m0, 1e-9)
    band = growth * math.hypot(np.nan_to_num(e0), np.nan_to_num(e1))
    text = f"x{growth:.2f} ± {band:.2f} from N={n0} to {n1} (H x{n1 / n0:.1f}), {m1 / h1:.2f} of H(X)"
    if growth < 1 - PLATEAU_TOL - band:
        return False, text + " (falls: under-trained at the larger N)"
    if growth > 1 + PLATEAU_TOL + band or m1 >= PLATEAU_SHARE * h1:
        return False, text + " (still growing)"
    if abs(growth - 1) > PLATEAU_TOL - band:  # the nearer edge is within the noise
        return None, text + " (edge inside the noise)"
    if not (c0 and c1):
        return None, text + " (flat, but a run still rose over its second half)"
    return True, text


def _plateau(m):
    """Per model at alpha's precision: memorisation over its two largest N changes by <= PLATEAU_TOL.

    A fall counts against the plateau (it is the signature of under-training at
    the larger N), as does growth; flat runs that were still rising, or an edge
    inside the noise, leave the claim not judged.
    """
    last = {}
    for r in m["sweep"]:
        if r["precision"] == m["alpha_precision"]:
            last.setdefault(r["model"], []).append(
                (r["n_samples"], r["mem_bits"], r["data_bits"], r["mem_noise_rel"], r["converged"])
            )
    results, ev = [], []
    for model, pts in last.items():
        if len(pts) < 2:
            raise paper.NotJudged(
                f"{model}: one data set size at {m['alpha_precision']}; a plateau needs two"
            )
        ok, text = _plateau_one(sorted(pts))
        results.append(ok)
        ev.append(f"{model}: {text}")
    if False in results:
        return False, "; ".join(ev)
    if None in results:
        raise paper.NotJudged("; ".join(ev))
    return True, "; ".join(ev)


def _precision(m):
    """alpha in fp32 above alpha in bf16 by at most PRECISION_MAX (converged runs only)."""
    r = m["alpha_fp32"] / m["alpha_bf16"]
    text = f"alpha fp32 / bf16 = {m['alpha_fp32']:.3f} / {m['alpha_bf16']:.3f} = {r:.3f}"
    if not m["precision_converged"]:
        raise paper.NotJudged(f"{text}, but a capacity run of the comparison still rose over its second half")
    band = r * m["precision_noise_rel"]
    paper.outside_noise(min(r - 1.0, PRECISION_MAX - r), band, "alpha ratio's distance to (1, 1.25]")
    return 1.0 < r <= PRECISION_MAX, f"{text} ± {band:.3f} (paper 1.091)"


def _a1(m):
    """min(capacity, H(X)) predicts memorisation within A1_ERROR_PCT mean error for the S and V sweeps."""
    e = m["a1_error_pct"]
    text = "mean error " + ", ".join(f"{k}: {v:.1f}%" for k, v in e.items()) + " (paper 1.7%, 1.8%)"
    if not m["a1_converged"]:
        raise paper.NotJudged(text + "; some A.1 runs still rose over their second half")
    _unconverged(m, "the prediction's alpha")
    margin, band = A1_ERROR_PCT - max(e.values()), m["a1_noise_pct"]
    paper.outside_noise(margin, band, f"{A1_ERROR_PCT}% - error")
    return margin > 0, text + f", noise ± {band:.1f}%"


def _double_descent(m):
    """Every text model's test loss first rises (beyond noise) at a data-to-capacity ratio in DD_RANGE."""
    on = m["double_descent_onset"]
    lo, hi = DD_RANGE
    ok = all(v is not None and lo <= v <= hi for v in on.values())
    return ok, (
        "test loss first rises beyond 1.96 SE at ratio "
        + ", ".join(f"{k}: {v if v is None else round(v, 2)}" for k, v in on.items())
        + f" (claim: in [{lo}, {hi}])"
    )


def _mia_falls(runs, n_key):
    """Per model: F1 at the smallest N minus F1 at the largest, against the band of a difference."""
    by = {}
    for r in runs:
        by.setdefault(r["model"], []).append(
            (r["n_samples"], r["membership_f1"], r[n_key] if n_key else r["n_samples"])
        )
    results, ev = [], []
    for model, pts in by.items():
        pts.sort()
        (_, f0, k0), (_, f1, k1) = pts[0], pts[-1]
        margin, band = f0 - f1, metrics.diff_band(f0, k0, f1, k1)
        results.append(None if abs(margin) <= band else margin > 0)
        ev.append(f"{model}: F1 {f0:.2f} -> {f1:.2f} (fall {margin:+.2f} ± {band:.2f})")
    if False in results:
        return False, "; ".join(ev)
    if None in results:
        raise paper.NotJudged("; ".join(ev) + ": a fall inside the noise band")
    return True, "; ".join(ev)


def _mia(m):
    """Membership F1 on uniform tokens falls from the smallest to the largest N, for every model."""
    return _mia_falls([r for r in m["sweep"] if r["precision"] == m["alpha_precision"]], None)


def _mia_text(m):
    """Membership F1 on text falls from the smallest to the largest N, for every model."""
    return _mia_falls(m["text"], "membership_n")


def _extraction(m):
    """Per text model: train extraction above test at the smallest N, within EXTRACT_TOL of test at
    the largest."""
    rows = {}
    for r in m["text"]:
        rows.setdefault(r["model"], []).append(r)
    results, ev = [], []
    for model, pts in rows.items():
        pts.sort(key=lambda r: r["n_samples"])
        a, b = pts[0], pts[-1]
        m0 = a["extract_train"] - a["extract_test"]
        b0 = metrics.diff_band(
            a["extract_train"], a["extract_n_train"], a["extract_test"], a["extract_n_test"]
        )
        m1 = EXTRACT_TOL - abs(b["extract_train"] - b["extract_test"])
        b1 = metrics.diff_band(
            b["extract_train"], b["extract_n_train"], b["extract_test"], b["extract_n_test"]
        )
        if m0 < -b0 or m1 < -b1:
            results.append(False)
        elif abs(m0) <= b0 or abs(m1) <= b1:
            results.append(None)
        else:
            results.append(True)
        ev.append(
            f"{model}: train {a['extract_train']:.2f} vs test {a['extract_test']:.2f} (± {b0:.2f}) at "
            f"N = {a['n_samples']}; {b['extract_train']:.2f} vs {b['extract_test']:.2f} (± {b1:.2f}) at "
            f"N = {b['n_samples']}"
        )
    if False in results:
        return False, "; ".join(ev)
    if None in results:
        raise paper.NotJudged("; ".join(ev) + ": a margin inside the noise band")
    return True, "; ".join(ev)


def _tfidf(m):
    """Spearman rho of TF-IDF against unintended memorisation is positive with p < TFIDF_P."""
    rho, p = m["tfidf_spearman"], m["tfidf_pvalue"]
    if rho is None or not np.isfinite(rho):
        raise paper.NotJudged(
            f"{m['tfidf_positive_samples']} samples with positive memorisation: too few for a " "correlation"
        )
    return rho > 0 and p < TFIDF_P, (
        f"Spearman rho = {rho:.3f}, p = {p:.3g} over "
        f"{m['tfidf_positive_samples']} samples (claim: rho > 0, p < {TFIDF_P})"
    )


def _law_text(m):
    """The sigmoid law, fitted to our text points only, has RMSE <= LAW_RMSE in F1."""
    f = m["law_fit"]["text"]
    if "error" in f:
        raise paper.NotJudged(f"the law could not be fitted to the text points: {f['error']}")
    return f["rmse"] <= LAW_RMSE, (
        f"RMSE {f['rmse']:.3f} over the text runs (c1 = {f['c1']:.2f}, c2 = "
        f"{f['c2']:.3g}, c3 = {f['c3']:.3g}); claim ≤ {LAW_RMSE}"
    )


def _table2(m):
    """The law's arithmetic: its F1 at Table 2's |D| equals Table 2's predicted F1 within TABLE2_TOL."""
    return m["table2_max_abs_error"] <= TABLE2_TOL, f"max |law - Table 2| = {m['table2_max_abs_error']:.4f}"


# Every metric key the chapter records (run.record); a claim reading another key is a typo
# and fails loudly (memlab.paper.evaluate), one reading a key this run lacks is 'not run'.
METRIC_KEYS: tuple[str, ...] = (
    "sweep",
    "runs",
    "converged_runs",
    "capacity",
    "alpha",
    "alpha_r2",
    "alpha_band",
    "alpha_r2_band",
    "convergence_model",
    "alpha_fp32",
    "alpha_bf16",
    "alpha_precision",
    "precision_converged",
    "precision_noise_rel",
    "paperlike",
    "a1",
    "a1_error_pct",
    "a1_converged",
    "a1_noise_pct",
    "text",
    "double_descent_onset",
    "reference",
    "table2_max_abs_error",
    "table2_law_f1",
    "law_fit",
    "paper_law_rmse",
    "tfidf_spearman",
    "tfidf_pvalue",
    "tfidf_positive_samples",
    "tfidf_n_samples",
    "cost",
)


def claims():
    """The paper's claims as predicates over this chapter's metrics (see memlab.paper.Claim).

    Judged at every profile: the smoke run still exercises each predicate.
    """
    from memlab.paper import Claim

    return paper.declare(
        METRIC_KEYS,
        [
            Claim("linear", "Capacity is linear in parameter count", "Section 3.2, Figure 6", _linear),
            Claim("alpha", "GPT-style models store about 3.6 bits per parameter", "Section 3.2", _alpha),
            Claim(
                "plateau",
                "Total memorisation plateaus at capacity as data grows",
                "Section 3.2, Figure 1",
                _plateau,
            ),
            Claim(
                "precision",
                "fp32 stores slightly more than bf16 (3.83 vs 3.51 bits/param)",
                "Section 3.2",
                _precision,
            ),
            Claim(
                "a1",
                "min(capacity, H(X)) predicts memorisation when S or V change (< 2% error)",
                "Appendix A.1",
                _a1,
            ),
            Claim(
                "double_descent",
                "Double descent starts where data information reaches capacity",
                "Section 4, Figure 3",
                _double_descent,
            ),
            Claim(
                "mia_decreases",
                "Membership inference on uniform tokens gets harder as the data set grows",
                "Section 5.1, Figure 14",
                _mia,
            ),
            Claim(
                "mia_text",
                "Membership inference on text gets harder as the data set grows",
                "Section 5.1, Figure 9",
                _mia_text,
            ),
            Claim(
                "extraction",
                "Small training sets are extractable; with enough data, training extraction falls to "
                "the test rate",
                "Section 4, Figure 17",
                _extraction,
            ),
            Claim(
                "tfidf",
                "Rare-token (high TF-IDF) sequences are memorised most",
                "Appendix A.3, Figure 16",
                _tfidf,
            ),
            Claim(
                "law_text",
                "A sigmoid in data per parameter fits loss-based membership F1 on text (1-2% error)",
                "Section 5.2.1, Figure 7",
                _law_text,
            ),
            Claim(
                "table2",
                "The law's arithmetic: its F1 at Table 2's |D| is Table 2's predicted F1",
                "Table 2",
                _table2,
                sanity=True,
            ),
        ],
    )
