"""Chapter 4 (Q-Skew) stages: the glue from data and cache to the science calls.

The notebook calls, in order: :func:`prepare` (tokenizer, base model pre-trained here at ``smoke``/``cpu`` or
LLaDA/Dream at ``paper``, its "instruct" variant, the tokenised WikiText-2 and standard-library docstring blocks,
and the regime: the base's masked NLL against a unigram model's, :func:`regime`), :func:`domain_experiment`
(Tables 1, 4 base side, 5 and Figure 2, in the "same" or the "gap" domain setting),
:func:`instruction_experiment` (Tables 2 and 4 instruct side), :func:`asymmetry_experiment` (Figure 1) and
:func:`pii_experiment` (Table 6). Every model is cached (``memlab.core.cache``) under the hash of what
produced it. Each stage returns plain data (tensors, per-run metric dicts, DataFrames); the tables are built
in ``tables.py``.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from memlab.core import cache
from memlab.science import metrics, mia
from memlab.core.config import ConfigError, device, seed_everything
from memlab.data import docstrings
from memlab.data import pii as pii_data
from memlab.data.text import instruction_pairs, perturb, stream_blocks
from memlab.models import diffusion_lm as dlm
from memlab.models.diffusion_lm import Codec
from memlab.core.progress import progress

from .spec import CHAPTER, CODE_VERSION, FPRS, check_context

def _codec(cfg, texts: list[str]) -> Codec:
    """The backbone's codec: a BPE trained on ``texts`` (tiny) or the checkpoint's tokenizer."""
    if cfg.backbone == "tiny":
        return dlm.bpe_codec(texts, cfg.vocab_size, name="qskew")
    mask_id = dlm.FAMILIES[cfg.backbone]["mask_id"] if cfg.mask_id < 0 else cfg.mask_id
    return dlm.hf_codec(model_paths(cfg)[0], mask_id, cfg.trust_remote_code)


def _digest(*tensors: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


# ----------------------------------------------------------------------------- models

@dataclass
class Setup:
    cfg: object
    codec: Codec
    base: torch.nn.Module
    instruct: torch.nn.Module
    dft: torch.Tensor            # (N, block_len) WikiText-2 valid blocks
    ift: tuple                   # ids, eligible, attention (N, ift_len), valid split
    info: dict = field(default_factory=dict)
    gap: torch.Tensor | None = None  # (M, block_len) standard-library docstring blocks (the domain gap)
    regime: dict = field(default_factory=dict)  # base vs unigram NLL per corpus (regime_table)

    def blocks(self, domain: str) -> torch.Tensor:
        """The fine-tuning blocks of a domain setting: "same" (WikiText-2 valid) or "gap" (docstrings)."""
        if domain == "same":
            return self.dft
        if domain == "gap" and self.gap is not None:
            return self.gap
        raise ConfigError(f"parameter 'domains': {domain!r} is not prepared (allowed: same, gap)")


def _arch(cfg, codec: Codec) -> dict:
    return {"vocab_size": codec.vocab_size, "mask_id": codec.mask_id, "n_layer": cfg.n_layer,
            "n_embd": cfg.n_embd, "n_head": cfg.n_head, "block_size": max(cfg.block_len, cfg.ift_len, cfg.pii_len)}


def model_paths(cfg) -> tuple[str, str]:
    """(base, instruct) checkpoints of a llada/dream backbone: the overrides, else the family's hub ids."""
    fam = dlm.FAMILIES[cfg.backbone]
    return cfg.base_model or fam["base"], cfg.instruct_model or fam["instruct"]


def _build_tiny(arch: dict) -> torch.nn.Module:
    return dlm.MaskedDiffusionLM(dlm.DLMConfig(**arch)).to(device())


def _load_hf(cfg, path: str) -> torch.nn.Module:
    return dlm.load_pretrained(path, cfg.backbone, trust_remote_code=cfg.trust_remote_code,
                               dtype=torch.bfloat16 if device().type == "cuda" else None, device=device(),
                               mask_id=None if cfg.mask_id < 0 else cfg.mask_id,
                               auto_class=dlm.auto_class(path, cfg.trust_remote_code))


def prepare(cfg) -> Setup:
    """Tokenizer, base and instruct models (cached) and the tokenised WikiText-2 splits."""
    from memlab.data.text import load_wikitext2

    seed_everything(cfg.seed)
    wiki_text, eval_text = load_wikitext2("test"), load_wikitext2("valid")
    # The tiny base pre-trains on WikiText-2 test and one half of the docstring domain; the gap
    # setting fine-tunes on the other half (memlab.data.docstrings.split_corpus).
    doc_pre, doc_gap = docstrings.split_corpus()
    pre_text = wiki_text + "\n\n" + doc_pre
    codec = _codec(cfg, [pre_text, eval_text])
    dft = stream_blocks(codec.encode(eval_text), cfg.block_len)
    ift = instruction_pairs(eval_text, codec, cfg.ift_len)
    info = {"dft_blocks": int(dft.shape[0]), "ift_pairs": int(ift[0].shape[0]), "n_members": cfg.n_members,
            "n_nonmembers": cfg.n_nonmembers, "runs": cfg.runs}
    gap = None
    if "gap" in cfg.domains:
        gap = stream_blocks(codec.encode(doc_gap), cfg.block_len)
        info["gap_blocks"] = int(gap.shape[0])
        info["gap_corpus"] = docstrings.corpus_info(doc_gap, docstrings.GAP_MODULES)
    if cfg.backbone == "tiny":
        arch = _arch(cfg, codec)
        pre = stream_blocks(codec.encode(pre_text), max(cfg.block_len, cfg.ift_len))
        pre_ift = instruction_pairs(wiki_text, codec, cfg.ift_len)
        key = {"arch": arch, "steps": cfg.pretrain_steps, "lr": cfg.pretrain_lr, "seed": cfg.seed,
               "data": _digest(pre)}
        base = cache.load_or_train(
            CHAPTER, "base", key, lambda: _build_tiny(arch),
            lambda m: dlm.train_dlm(m, pre, epochs=1, steps=cfg.pretrain_steps, batch_size=32,
                                    lr=cfg.pretrain_lr, weight_decay=0.01, seed=cfg.seed, desc="pre-train base"),
            CODE_VERSION)

        def make_instruct(m):
            m.load_state_dict(base.state_dict())
            dlm.train_dlm(m, pre_ift[0], eligible=pre_ift[1], attention_mask=pre_ift[2], epochs=1,
                          steps=cfg.instruct_steps, batch_size=32, lr=cfg.pretrain_lr / 2, seed=cfg.seed + 1,
                          desc="instruct variant")

        instruct = cache.load_or_train(CHAPTER, "instruct", {**key, "instruct_steps": cfg.instruct_steps,
                                                             "ift": _digest(pre_ift[0])},
                                       lambda: _build_tiny(arch), make_instruct, CODE_VERSION)
        info["pretrain_blocks"] = int(pre.shape[0])
        info["pretrain_corpus"] = docstrings.corpus_info(doc_pre, docstrings.PRETRAIN_MODULES)
        info["params"] = sum(p.numel() for p in base.parameters())
    else:
        base_path, instruct_path = model_paths(cfg)
        base, instruct = _load_hf(cfg, base_path), _load_hf(cfg, instruct_path)
        dlm.check_same_vocab(base, instruct)
    setup = Setup(cfg, codec, base, instruct, dft, ift, info, gap)
    setup.regime = regime(setup, torch.tensor(codec.encode(pre_text)))
    check_context(cfg, setup.regime)
    return setup


REGIME_BLOCKS = 256  # blocks per corpus for the regime table: a standard error of ~0.01 nats


def regime(setup: Setup, pre_ids: torch.Tensor) -> dict:
    """Does the base read context? Its masked NLL at rho vs a unigram model's, per corpus (nats/token).

    pre_ids: the pre-training token stream. For each prepared corpus ("same",
    "gap"), on REGIME_BLOCKS fixed random blocks: :func:`memlab.science.metrics.context_regime`
    (the base's mean NLL over one round of cyclic masks at ``rho``, every token scored
    once, and the NLL of an add-one unigram model of the pre-training tokens, specials
    excluded). A base that only learned token frequencies scores about the unigram NLL.
    """
    cfg, codec = setup.cfg, setup.codec
    specials = (codec.mask_id, codec.pad_id, codec.eos_id)
    out = {}
    for name in [d for d in ("same", "gap") if d == "same" or setup.gap is not None]:
        data = setup.blocks(name)
        idx = torch.randperm(data.shape[0], generator=torch.Generator().manual_seed(7))[:REGIME_BLOCKS]
        out[name] = metrics.context_regime(setup.base, data[idx], pre_ids, codec.vocab_size, rho=cfg.rho,
                                           exclude=specials, batch_size=cfg.eval_batch, seed=7)
    return out


def finetune(setup: Setup, start: torch.nn.Module, stage: str, ids, eligible=None, attention=None, *,
             epochs: int, seed: int, mask_ratio: float | None = None, snapshots=()) -> dict[int, torch.nn.Module]:
    """Fine-tune a copy of ``start`` (cached); returns {epoch: model} for ``snapshots`` and the last epoch.

    ids / eligible / attention: (N, L) training set. All snapshots of one run
    share a cache entry (:func:`memlab.models.diffusion_lm.train_snapshots`).
    """
    cfg = setup.cfg
    keep = sorted(set(snapshots) | {epochs})
    key = {"stage": stage, "start": _digest(*[p.detach().float().cpu().flatten()[:4096] for p in start.parameters()]),
           "data": _digest(ids, *(t for t in (eligible, attention) if t is not None)), "epochs": epochs,
           "bs": cfg.batch_size, "lr": cfg.lr, "seed": seed, "ratio": mask_ratio, "keep": keep,
           "lora": cfg.lora_rank}

    def compute():
        return dlm.train_snapshots(start, ids, keep=keep, epochs=epochs, batch_size=cfg.batch_size, lr=cfg.lr,
                                   seed=seed, lora_rank=cfg.lora_rank, eligible=eligible, attention_mask=attention,
                                   mask_ratio=mask_ratio, desc=f"fine-tune {stage}")

    states = cache.load_or_compute(CHAPTER, "finetune", key, compute, CODE_VERSION)
    return {e: dlm.load_snapshot(start, states, e, cfg.lora_rank) for e in keep}


# ----------------------------------------------------------------------------- scoring helpers

def _probe(cfg, eligible: torch.Tensor, seed: int, with_random: bool = False) -> mia.Probe:
    return mia.make_probe(eligible, rho=cfg.rho, rounds=cfg.rounds, secmi_ratios=tuple(cfg.secmi_ratios),
                          secmi_step=cfg.secmi_step, sama_steps=cfg.sama_steps, with_random=with_random,
                          mc_steps=cfg.mc_steps, seed=seed)


def _view(cfg, model, ids, probe, attention, scores):
    return mia.model_view(model, ids, probe, attention, cfg.eval_batch, groups={mia.NEEDS[s] for s in scores},
                          stats="min_k_pp" in scores)


def _metrics(score_dict: dict, labels: np.ndarray, min_fp: int = 1) -> dict[str, dict[str, float]]:
    """{score: {"AUC": %, "TPR@10%FPR": %, "TPR@1%FPR": %}}; an unsupported TPR is NaN (metrics.roc_row)."""
    return {name: metrics.roc_row(s, labels, min_fp, FPRS) for name, s in score_dict.items()}


def _split(n_total: int, sizes, seed: int) -> list[torch.Tensor]:
    perm = torch.randperm(n_total, generator=torch.Generator().manual_seed(seed))
    if sum(sizes) > n_total:
        raise ConfigError(f"parameter 'n_members': needs {sum(sizes)} sequences, the data has {n_total}")
    return list(torch.split(perm[:sum(sizes)], list(sizes)))


# ----------------------------------------------------------------------------- experiments

RunMetrics = dict[str, dict[str, float]]  # one run: {score name: {"AUC"|"TPR@10%FPR"|"TPR@1%FPR": %}}


@dataclass
class DomainRuns:
    """Per-run metrics of the domain fine-tuning experiment (feeds Tables 1, 4, 5 and Figure 2)."""

    main: list[RunMetrics] = field(default_factory=list)          # every score, golden reference (Table 1)
    sweep: dict[int, list[RunMetrics]] = field(default_factory=dict)  # epochs -> runs (Figure 2)
    ref_instruct: list[RunMetrics] = field(default_factory=list)  # Q-Skew, instruct model as reference
    ref_para: list[RunMetrics] = field(default_factory=list)      # Q-Skew, para-modification reference
    ablation: list[RunMetrics] = field(default_factory=list)      # Q-Skew and its ablations (Table 5)
    examples: dict | None = None  # run 0: deltas (list of (n_i,) arrays), labels, qskew, calibration


@dataclass
class InstructionRuns:
    """Per-run metrics of the instruction fine-tuning experiment (feeds Tables 2 and 4)."""

    main: list[RunMetrics] = field(default_factory=list)
    ref_base: list[RunMetrics] = field(default_factory=list)
    ref_para: list[RunMetrics] = field(default_factory=list)


def domain_experiment(setup: Setup, domain: str = "same") -> DomainRuns:
    """Domain fine-tuning: the runs behind Tables 1, 4 (base side), 5 and Figure 2, for one domain setting.

    ``domain``: "same" fine-tunes on WikiText-2 valid blocks (the pre-training
    domain), "gap" on standard-library docstring blocks (another domain, as LLaDA
    fine-tuned on WikiText). Per run r: members / non-members / a perturbation pool
    are disjoint random blocks; the base is fine-tuned on the members for ``epochs``
    epochs (snapshots at ``epochs_sweep``). Returns per-run metrics and the run-0 deltas.
    """
    cfg = setup.cfg
    data = setup.blocks(domain)
    stage = "dft" if domain == "same" else "dft-gap"
    scores = list(cfg.scores)
    ablate = "qskew" in scores
    res = DomainRuns(sweep={e: [] for e in cfg.epochs_sweep})
    for r in progress(range(cfg.runs), desc=f"domain runs ({domain})"):
        seed = cfg.seed + r
        mem, non, pool = _split(data.shape[0], (cfg.n_members, cfg.n_nonmembers, cfg.n_members), 1000 + seed)
        train = data[mem]
        snaps = finetune(setup, setup.base, stage, train, epochs=cfg.epochs, seed=seed,
                         snapshots=cfg.epochs_sweep)
        para = perturb(data[pool], torch.ones_like(data[pool], dtype=torch.bool), 0.2,
                       setup.codec.vocab_size, (setup.codec.mask_id,), seed)
        para_ref = finetune(setup, setup.base, f"{stage}-para", para, epochs=cfg.epochs,
                            seed=seed)[cfg.epochs]
        ids = torch.cat([data[mem], data[non]])
        labels = np.r_[np.ones(len(mem)), np.zeros(len(non))]
        elig = torch.ones_like(ids, dtype=torch.bool)
        probe = _probe(cfg, elig, seed, with_random=ablate)
        all_scores = scores + (list(mia.ABLATIONS) if ablate else [])
        ref_view = _view(cfg, setup.base, ids, probe, None, all_scores)
        target = snaps[cfg.epochs]
        tv = _view(cfg, target, ids, probe, None, all_scores)
        sc = mia.compute_scores(tv, ref_view, probe, all_scores, h=cfg.h, k=cfg.k, seed=seed, eligible=elig)
        res.main.append(_metrics({s: sc[s] for s in scores}, labels, cfg.tpr_min_fp))
        if ablate:
            res.ablation.append(_metrics({s: sc[s] for s in ("qskew", *mia.ABLATIONS)}, labels,
                                         cfg.tpr_min_fp))
            for runs, ref in ((res.ref_instruct, setup.instruct), (res.ref_para, para_ref)):
                rv = _view(cfg, ref, ids, probe, None, ["qskew"])
                runs.append(_metrics(mia.compute_scores(tv, rv, probe, ["qskew"], h=cfg.h), labels,
                                     cfg.tpr_min_fp))
        for e in cfg.epochs_sweep:
            v = tv if e == cfg.epochs else _view(cfg, snaps[e], ids, probe, None, scores)
            res.sweep[e].append(_metrics(mia.compute_scores(v, ref_view, probe, scores, h=cfg.h, k=cfg.k,
                                                               seed=seed, eligible=elig), labels, cfg.tpr_min_fp))
        if r == 0:
            res.examples = {"deltas": mia.deltas_of(tv, ref_view), "labels": labels,
                               "qskew": sc.get("qskew"), "calibration": sc.get("calibration")}
    return res


def instruction_experiment(setup: Setup) -> InstructionRuns:
    """Instruction fine-tuning of the instruct variant on prompt/response pairs (the runs behind Tables 2, 4).

    Prompt tokens are never masked, in training or in scoring; scores use the response tokens only.
    """
    cfg = setup.cfg
    scores = list(cfg.scores)
    ids_all, elig_all, attn_all = setup.ift
    res = InstructionRuns()
    for r in progress(range(cfg.runs), desc="instruction runs"):
        seed = cfg.seed + r
        mem, non, pool = _split(ids_all.shape[0], (cfg.n_members, cfg.n_nonmembers, cfg.n_members), 2000 + seed)
        target = finetune(setup, setup.instruct, "ift", ids_all[mem], elig_all[mem], attn_all[mem],
                          epochs=cfg.epochs, seed=seed)[cfg.epochs]
        para = perturb(ids_all[pool], elig_all[pool], 0.2, setup.codec.vocab_size,
                       (setup.codec.mask_id, setup.codec.pad_id), seed)
        para_ref = finetune(setup, setup.instruct, "ift-para", para, elig_all[pool], attn_all[pool],
                            epochs=cfg.epochs, seed=seed)[cfg.epochs]
        idx = torch.cat([mem, non])
        ids, elig, attn = ids_all[idx], elig_all[idx], attn_all[idx]
        labels = np.r_[np.ones(len(mem)), np.zeros(len(non))]
        probe = _probe(cfg, elig, seed)
        tv = _view(cfg, target, ids, probe, attn, scores)
        rv = _view(cfg, setup.instruct, ids, probe, attn, scores)
        sc = mia.compute_scores(tv, rv, probe, scores, h=cfg.h, k=cfg.k, seed=seed, eligible=elig)
        res.main.append(_metrics(sc, labels, cfg.tpr_min_fp))
        if "qskew" in scores:
            for runs, ref in ((res.ref_base, setup.base), (res.ref_para, para_ref)):
                v = _view(cfg, ref, ids, probe, attn, ["qskew"])
                runs.append(_metrics(mia.compute_scores(tv, v, probe, ["qskew"], h=cfg.h), labels,
                                     cfg.tpr_min_fp))
    return res


def asymmetry_experiment(setup: Setup) -> dict:
    """Figure 1: fine-tune at fixed mask ratios and measure per-token gains on members, ``runs`` seeds.

    Run r draws its own members (``n_members`` WikiText-2 valid blocks) and fine-tunes the base on them
    at every ratio with seed ``seed + r``. Gain of a member token = NLL_base - NLL_finetuned (nats) under
    one cyclic round of masks at ``rho`` (the same masks for every model of the run). Deviation from the
    paper: it plots the difference of the true token's confidence logit after training; we take the
    difference of its log-probability, the logit normalised by the log-partition, because raw logits
    are defined only up to a shift per position and are not comparable between two models. "Gain per
    masked step" divides the mean by the expected number of epochs in which the token was masked
    (ratio * epochs).

    Returns ``{"gains": {ratio: (tokens,) gains pooled over runs}, "sequence_gains": {ratio:
    (runs * n_members,) each member's mean gain, sequences in the same order at every ratio}, "table":
    summary rows}``: the tokens of one sequence share its fine-tuning, so the bands resample sequences
    (:func:`tables.asymmetry_metrics`).
    """
    cfg = setup.cfg
    tokens: dict[float, list] = {r: [] for r in cfg.fixed_ratios}
    per_seq: dict[float, list] = {r: [] for r in cfg.fixed_ratios}
    for run in progress(range(cfg.runs), desc="fixed-ratio runs"):
        seed = cfg.seed + run
        mem, = _split(setup.dft.shape[0], (cfg.n_members,), 3000 + seed)
        ids = setup.dft[mem]
        masks = mia.make_probe(torch.ones_like(ids, dtype=torch.bool), rho=cfg.rho, rounds=1, sama_steps=1,
                               mc_steps=0, seed=seed).cyclic
        n, p, l = masks.shape
        flat_ids, flat_masks = ids.repeat_interleave(p, 0), masks.reshape(n * p, l)
        base = dlm.masked_nll(setup.base, flat_ids, flat_masks, batch_size=cfg.eval_batch)
        for ratio in cfg.fixed_ratios:
            m = finetune(setup, setup.base, f"fixed-{ratio}", ids, epochs=cfg.fixed_ratio_epochs, seed=seed,
                         mask_ratio=ratio)[cfg.fixed_ratio_epochs]
            g = (base - dlm.masked_nll(m, flat_ids, flat_masks, batch_size=cfg.eval_batch)).numpy()
            by_seq = g.reshape(n, p * l)
            per_seq[ratio].append(np.nanmean(by_seq, axis=1))
            tokens[ratio].append(g[np.isfinite(g)])
    gains = {r: np.concatenate(v) for r, v in tokens.items()}
    rows = [{"mask ratio": r, **metrics.gain_summary(gains[r], r, cfg.fixed_ratio_epochs)} for r in cfg.fixed_ratios]
    return {"gains": gains, "sequence_gains": {r: np.concatenate(v) for r, v in per_seq.items()},
            "runs": cfg.runs, "table": pd.DataFrame(rows).set_index("mask ratio")}


def pii_experiment(setup: Setup) -> dict:
    """Table 6: reconstruct masked e-mail addresses and phone numbers seen in fine-tuning.

    The base is fine-tuned on ``pii_targets`` records per kind; each record's PII is
    reconstructed and its candidates ranked by :func:`memlab.science.mia.reconstruct_pii` (CE, Q-Skew
    over the PII or the context, and their combination with ``alpha``). Success = the top
    candidate equals the true PII string. Returns hit and oracle counts per ranking and kind,
    ``top1`` (each ranking's 0/1 success per target, in record order: the paired comparisons of
    the claims need which targets each got), the targets per kind ``n``, example rows and the
    memorisation DataFrame.
    """
    cfg, codec = setup.cfg, setup.codec
    records = pii_data.make_pii_records(cfg.pii_targets, seed=cfg.seed)
    enc = pii_data.encode_records(dlm.RecordTokenizer(codec), records, cfg.pii_len, codec.eos_id)
    if int((enc.prefix_len + cfg.pii_slots).max()) > cfg.pii_len:
        raise ConfigError(f"parameter 'pii_len': records need {int((enc.prefix_len + cfg.pii_slots).max())} tokens")
    target = finetune(setup, setup.base, "pii", enc.ids, epochs=cfg.pii_epochs, seed=cfg.seed)[cfg.pii_epochs]
    memo = pd.DataFrame(mia.pii_memorisation(setup.base, target, enc.ids, enc.prefix_len, enc.pii_len,
                                             cfg.eval_batch)).T
    g = torch.Generator().manual_seed(cfg.seed)
    methods = ("CE", "Q-Skew (PII mask)", "Q-Skew (context mask)", f"Combine-{cfg.alpha:g}")
    hits = {m: {"email": 0, "phone": 0} for m in methods}
    top1 = {m: [0] * len(records) for m in methods}  # a target whose reconstruction fails stays 0
    oracle = {"email": 0, "phone": 0}
    examples = []
    for i in progress(range(len(records)), desc="PII targets"):
        rec, pre = records[i], int(enc.prefix_len[i])
        got = mia.reconstruct_pii(target, setup.base, enc.ids[i], pre, slots=cfg.pii_slots, eos_id=codec.eos_id,
                                  candidates=cfg.pii_candidates, steps=cfg.pii_steps, repeats=cfg.pii_repeats,
                                  ce_share=cfg.pii_ce_share, span=cfg.pii_span, rho=cfg.rho,
                                  rounds=max(1, cfg.rounds // 2), h=cfg.h, alpha=cfg.alpha, generator=g,
                                  batch_size=cfg.eval_batch)
        if got is None:
            continue
        ce = got["ce"]
        texts = [codec.decode(list(c)).strip() for c in got["candidates"]]
        truth = rec.pii
        ranks = {"CE": -ce, "Q-Skew (PII mask)": got["qskew_pii"], "Q-Skew (context mask)": got["qskew_context"],
                 methods[3]: got["combined"]}
        oracle[rec.kind] += int(truth in texts)
        for m, s in ranks.items():
            top1[m][i] = int(texts[int(np.argmax(s))] == truth)
            hits[m][rec.kind] += top1[m][i]
        if len(examples) < 6:
            examples.append({"kind": rec.kind, "truth": truth, "CE top-1": texts[int(np.argmax(-ce))],
                             "combined top-1": texts[int(np.argmax(ranks[methods[3]]))],
                             "unique candidates": len(texts), "truth among candidates": truth in texts})
    return {"hits": hits, "top1": top1, "oracle": oracle, "n": cfg.pii_targets, "examples": pd.DataFrame(examples),
            "memorisation": memo}
