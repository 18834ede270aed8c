"""Chapter 5's stages: from random tokens, WikiText-2 and the model cache to the measured runs.

Every function takes the chapter's resolved :class:`memlab.core.config.Config`, so the three
profiles run one code path, and returns plain data (dicts, DataFrames, arrays); the
measurements live in :mod:`memlab.science.capacity`, the models in :mod:`memlab.models.gpt2_small`, the
batched trainer in :mod:`memlab.models.gpt2_stacked`, the random data in
:mod:`memlab.data.synthetic`. No figures and no tables here (:mod:`.tables`).

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
    on which the (larger) oracle reference model is trained (``reference_epochs``
    passes). Every text model trains for the same ``text_steps`` steps whatever its
    N, as the paper trains every data set size for 10^6 steps (Sections 3.2 and 4),
    so small sets are seen for many epochs and memorised; unintended memorisation
    of a sample is max(0, codelen_ref - codelen_model).
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import torch

from memlab.core import cache
from memlab.core.config import ConfigError, device, seed_everything
from memlab.data.synthetic import uniform_tokens
from memlab.models import gpt2_small as g2
from memlab.models import gpt2_stacked as st
from memlab.models import lm
from memlab.report import paper
from memlab.science import capacity as cap

from .spec import CHAPTER, CODE_VERSION, dataset_sizes_for, paper_setting

# ----------------------------------------------------------------------------- uniform tokens


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
    key = {"size": size, "ns": ns, "S": S, "V": V, "precision": precision, "seed": cfg.seed, "steps": steps,
           "warmup": warmup, **{k: cfg[k] for k in ("checkpoints", "lr", "batch_size")}}
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
            models, trains, V, n_head=n_head, steps=steps, batch_size=cfg.batch_size, lr=cfg.lr, warmup=warmup,
            seeds=[cfg.seed] * len(ns), evaluate_at=at, evaluate=evaluate,
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
                "mem_noise_rel": cap.relative_half_width(per),
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


def precision_sweep(cfg, sweep: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The fp32-vs-bf16 comparison: ``precision_models`` on the N of ``precision_ratios``, both precisions.

    The main ``sweep``'s runs at those N are reused (nothing is trained twice); the other
    precision is trained. Returns (both precisions' runs, the newly trained runs) as DataFrames.
    """
    other = "bf16" if cfg.precision == "fp32" else "fp32"
    models = cfg.precision_models or cfg.model_sizes
    ratios = list(cfg.precision_ratios)
    n_p = {m: dataset_sizes_for(cfg, m, ratios=ratios) for m in models}
    same = sweep[[r.model in n_p and r.n_samples in n_p[r.model] for r in sweep.itertuples()]]
    other_sweep = capacity_sweep(cfg, precision=other, ratios=ratios, models=models)
    return pd.concat([same, other_sweep]), other_sweep


def paperlike_run(cfg) -> dict | None:
    """One run at the paper's V and S (:func:`.spec.paper_setting`) of ``paperlike_model``, or None when off.

    Returns the run's dict (:func:`synthetic_group`) with ``bits_per_param`` added.
    """
    if not cfg.paperlike_model:
        return None
    paper_v, paper_s = paper_setting()
    n = dataset_sizes_for(cfg, cfg.paperlike_model, paper_s, paper_v, ratios=[cfg.paperlike_ratio])
    r = synthetic_group(
        cfg, cfg.paperlike_model, n, seq_len=paper_s, vocab_size=paper_v, steps=cfg.paperlike_steps
    )[0]
    r["bits_per_param"] = r["mem_bits"] / r["params"]
    return r


def a1_runs(cfg) -> list[tuple[str, dict]]:
    """Appendix A.1's runs: S varied (at V = vocab_size), then V varied (at S = a1_fixed_seq_len), at fixed N.

    Each (S, V) has its own shapes, so each is a stack of one, trained for ``a1_steps``.
    Returns ``(varied, run)`` pairs, ``varied`` "S" or "V", ``run`` a dict of :func:`synthetic_group`.
    """
    settings = [("S", s, cfg.vocab_size) for s in cfg.a1_seq_lens]
    settings += [("V", cfg.a1_fixed_seq_len, v) for v in cfg.a1_vocab_sizes]
    run = lambda S, V: synthetic_group(  # noqa: E731
        cfg, cfg.a1_model, [cfg.a1_n_samples], seq_len=S, vocab_size=V, steps=cfg.a1_steps
    )[0]
    return [(varied, run(S, V)) for varied, S, V in settings]


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


def epoch_steps(n: int, epochs: int, batch_size: int) -> tuple[int, int]:
    """(steps, batch) of ``epochs`` passes over n sequences with batches of min(batch_size, n): the oracle's."""
    batch = min(batch_size, n)
    return max(1, math.ceil(epochs * n / batch)), batch


def text_schedule(cfg, n: int) -> tuple[int, int]:
    """(steps, batch) of a text model on n sequences: ``text_steps`` whatever n, batches of
    min(``text_batch_size``, n), as the paper trains every data set size for the same steps.

    A set of n sequences is then seen steps * batch / n times (epochs fall as n grows).
    """
    return cfg.text_steps, min(cfg.text_batch_size, n)


def _text_train(cfg, size: str, train: torch.Tensor, V: int, steps: int, batch: int, desc: str):
    """A GPT-2 model trained on text sequences (N, S) for ``steps`` steps of ``batch`` (warm-up + cosine)."""
    model = g2.build(size, V, cfg.text_seq_len, cfg.precision, seed=cfg.seed, device=device())
    st.train_stacked([model], [train], V, n_head=g2.parse_size(size).n_head, steps=steps, batch_size=batch,
                     lr=cfg.lr, warmup=min(cfg.warmup, steps // 10), seeds=[cfg.seed], desc=desc)
    return model


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
        steps, batch = epoch_steps(len(corpus["unused"]), cfg.reference_epochs, cfg.text_batch_size)
        model = _text_train(cfg, cfg.reference_model, corpus["unused"], V, steps, batch, "oracle")
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
        **{k: cfg[k] for k in ("text_steps", "warmup", "lr", "text_batch_size")},
    }
    train = corpus["pool"][:n_samples]
    test = corpus["test"]

    def compute():
        seed_everything(cfg.seed)
        t0 = time.perf_counter()
        steps, batch = text_schedule(cfg, n_samples)
        model = _text_train(cfg, size, train, V, steps, batch, f"text {size} N={n_samples}")
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
        # the share of the oracle's code length of the set this model memorised (1 = the whole
        # set coded in no bits): the double-descent gate reads it below capacity ratio 1
        "oracle_share": float(umem.sum() / max(float(ref_bits.sum()), 1e-12)),
        "membership_f1": cap.membership_f1(train_bits[:k], test_bits[:k]),
        "membership_n": k,
        "extract_train": float(t["extract_train"]),
        "extract_test": float(t["extract_test"]),
        "extract_n_train": n_probe,
        "extract_n_test": len(test),
        "steps": int(t["steps"]),
        "batch": text_schedule(cfg, n_samples)[1],
        "epochs": int(t["steps"]) * text_schedule(cfg, n_samples)[1] / n_samples,
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


def tfidf_vs_memorization(corpus: dict, row: pd.Series) -> pd.DataFrame:
    """Figure 16: TF-IDF of each training sequence of one run beside its unintended memorisation."""
    n = int(row["n_samples"])
    scores = cap.tfidf([s.tolist() for s in corpus["pool"][:n]])
    return pd.DataFrame({"tfidf": scores, "unintended_bits": row["per_sample_unintended"]})


# ----------------------------------------------------------------------------- membership law


def law_constants() -> dict[str, float]:
    """The membership law's constants c1, c2, c3 as printed in Section 5.2.1 (from the chapter's yaml)."""
    return {c: float(paper.number(CHAPTER, f"law_{c}")) for c in ("c1", "c2", "c3")}
