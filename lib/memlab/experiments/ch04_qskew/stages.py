"""Chapter 4 (Q-Skew): membership inference and PII reconstruction on fine-tuned diffusion LMs.

The notebook ``notebooks/04_qskew.py`` calls, in order:

* :func:`prepare`: tokenizer, base model (pre-trained here at ``smoke``/``cpu``,
  LLaDA/Dream at ``paper``), its "instruct" variant, the tokenised data (WikiText-2 and
  the standard-library docstrings of the domain-gap setting) and the regime: the base's
  masked NLL against a unigram model's (:func:`regime`, guarded by :func:`check_context`);
* :func:`domain_experiment`: domain fine-tuning (Table 1 shape) in the "same" or the
  "gap" domain setting, the epochs sweep (Figure 2), mismatched references (Table 4,
  base side), the ablation (Table 5);
* :func:`instruction_experiment`: instruction fine-tuning (Table 2 shape) and
  Table 4's instruct side;
* :func:`asymmetry_experiment`: fine-tuning at fixed mask ratios (Figure 1);
* :func:`pii_experiment`: PII reconstruction (Table 6).

Every model is cached (``memlab.cache``) under the hash of what produced it.
"""
from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd
import torch

from memlab import cache, mia, paper
from memlab.config import SEED_HIGH, ConfigError, Param, device, seed_everything
from memlab.data import pii as pii_data
from memlab.metrics import diff_band, roc_metrics
from memlab.models import diffusion_lm as dlm
from memlab.progress import progress

CHAPTER = "04_qskew"
CODE_VERSION = "2"  # 2: 4000-step base at block 48, rho-true cyclic masks, SecMI t-error
P = lambda smoke, cpu, paper: {"smoke": smoke, "cpu": cpu, "paper": paper}  # noqa: E731

SPEC: dict[str, Param] = {
    "seed": Param(int, 0, low=0, high=SEED_HIGH, doc="base seed; run r uses seed + r"),
    "runs": Param(int, P(2, 3, 3), low=1, high=10, doc="independent fine-tuning runs averaged"),
    "backbone": Param(str, P("tiny", "tiny", "llada"), choices=("tiny", "llada", "dream"),
                      doc="tiny: a small DLM pre-trained here; llada/dream: transformers checkpoints"),
    "base_model": Param(str, "", doc="HF id or local path of the base DLM; '': the backbone family's (llada/dream)"),
    "instruct_model": Param(str, "", doc="HF id or local path of the instruct DLM; '': the family's"),
    "mask_id": Param(int, -1, low=-1, doc="-1: the family's mask id (LLaDA 126336, Dream 151666)"),
    "trust_remote_code": Param(bool, P(False, False, True), doc="run the checkpoints' own modelling code"),
    "lora_rank": Param(int, P(0, 0, 16), low=0, doc="0: full fine-tuning; >0: LoRA (peft) of this rank"),
    "vocab_size": Param(int, P(512, 1024, 1024), low=64, high=65536, doc="BPE vocabulary (tiny backbone)"),
    "n_layer": Param(int, P(1, 2, 2), low=1, high=48),
    "n_embd": Param(int, P(32, 128, 128), low=16, high=4096),
    "n_head": Param(int, P(2, 4, 4), low=1, high=64),
    "pretrain_steps": Param(int, P(30, 4000, 4000), low=1,
                            doc="pre-training batches (32 blocks each) of the tiny base"),
    "instruct_steps": Param(int, P(10, 150, 150), low=1, doc="batches turning the tiny base into 'instruct'"),
    "block_len": Param(int, P(16, 48, 128), low=4, high=4096, doc="domain fine-tuning block length (tokens)"),
    "ift_len": Param(int, P(24, 48, 256), low=8, high=4096, doc="instruction pair max length (tokens)"),
    "n_members": Param(int, P(12, 250, 500), low=4, doc="members (= fine-tuning set) per run"),
    "n_nonmembers": Param(int, P(12, 250, 500), low=4, doc="non-members per run"),
    "domains": Param(list, ["same", "gap"], item=str, choices=("same", "gap"),
                     doc="domain fine-tuning data: same (WikiText-2 valid, the pre-training domain) and/or "
                         "gap (Python standard-library docstrings)"),
    "require_context": Param(bool, P(False, True, True),
                             doc="fail the run unless the base's masked NLL is context_margin "
                                 "below a unigram's"),
    "context_margin": Param(float, 0.5, low=0.0, doc="nats the base must beat the unigram NLL by"),
    "tpr_min_fp": Param(int, 5, low=1, doc="TPR at FPR f is reported only if f x non-members >= this"),
    "epochs": Param(int, P(2, 6, 6), low=1, high=100, doc="fine-tuning epochs (paper: 6)"),
    "epochs_sweep": Param(list, P([1, 2], [1, 2, 4, 6], [1, 2, 3, 4, 5, 6]), item=int, low=1, high=100,
                          doc="epochs at which Figure 2 scores the fine-tuning run (<= epochs)"),
    "batch_size": Param(int, P(8, 16, 16), low=1, doc="fine-tuning batch size (paper: 16)"),
    "lr": Param(float, P(1e-3, 1e-3, 2e-5), low=1e-7, high=1.0, doc="fine-tuning learning rate"),
    "pretrain_lr": Param(float, 2e-3, low=1e-6, high=1.0),
    "rho": Param(float, 0.35, low=0.0, high=1.0, closed="neither", doc="cyclic mask ratio"),
    "rounds": Param(int, P(2, 4, 5), low=1, high=64, doc="cyclic sampling rounds R"),
    "h": Param(float, 0.1, low=0.0, closed="neither", doc="quantile bump bandwidth"),
    "k": Param(float, 0.2, low=0.01, high=1.0, doc="Min-K% / Min-K%++ fraction"),
    "secmi_ratios": Param(list, [0.1, 0.3, 0.5, 0.7], item=float, low=0.01, high=0.99,
                          doc="SecMI's deterministic states t (mask ratios)"),
    "secmi_step": Param(float, 0.2, low=0.01, high=0.99, doc="SecMI's forward/reverse step k (mask ratio)"),
    "sama_steps": Param(int, P(3, 6, 16), low=1, high=64),
    "scores": Param(list, list(mia.SCORES), item=str, choices=mia.SCORES, doc="membership scores to run"),
    "fixed_ratios": Param(list, [0.25, 0.5, 0.75], item=float, low=0.01, high=1.0, doc="Figure 1 mask ratios"),
    "fixed_ratio_epochs": Param(int, P(1, 4, 4), low=1, high=100),
    "pii_targets": Param(int, P(3, 20, 50), low=1, doc="PII targets per kind (e-mail, phone)"),
    "pii_len": Param(int, P(48, 48, 64), low=24, high=4096, doc="PII record length (tokens)"),
    "pii_epochs": Param(int, P(3, 1000, 6), low=1, high=5000, doc="fine-tuning epochs on the PII records"),
    "pii_slots": Param(int, 20, low=1, high=256, doc="mask tokens inserted at the PII position"),
    "pii_candidates": Param(int, P(4, 16, 64), low=1, high=1024, doc="N candidates by denoising"),
    "pii_steps": Param(int, P(4, 16, 16), low=1, high=256, doc="denoising steps per candidate"),
    "pii_repeats": Param(int, P(2, 8, 16), low=1, high=64,
                         doc="random masks per candidate for the CE ranking"),
    "pii_ce_share": Param(float, 0.35, low=0.0, high=1.0, closed="neither",
                          doc="share of a record's non-padding tokens each CE mask hides (paper: 35%)"),
    "pii_span": Param(int, 20, low=4, high=256, doc="context span X around the PII for the skewness"),
    "alpha": Param(float, 0.1, low=0.0, high=1.0, doc="weight of the skewness in the combined PII rank"),
    "eval_batch": Param(int, P(64, 256, 32), low=1, doc="sequences per forward when scoring"),
}


def _check(cfg) -> None:
    if max(cfg.secmi_ratios) + cfg.secmi_step > 1:
        raise ConfigError(f"parameter 'secmi_step': max(secmi_ratios) + secmi_step must be <= 1 "
                          f"(got {max(cfg.secmi_ratios)} + {cfg.secmi_step})")
    if not cfg.domains:
        raise ConfigError("parameter 'domains': name at least one of same, gap (got [])")
    if max(cfg.epochs_sweep) > cfg.epochs:
        raise ConfigError(f"parameter 'epochs_sweep': values must be <= epochs={cfg.epochs} (got {cfg.epochs_sweep})")
    if cfg.backbone == "tiny" and cfg.n_embd % cfg.n_head:
        raise ConfigError(f"parameter 'n_head': must divide n_embd={cfg.n_embd} (got {cfg.n_head})")
    if cfg.pii_slots + 8 >= cfg.pii_len:
        raise ConfigError(f"parameter 'pii_slots': must leave room for the record prefix in pii_len={cfg.pii_len}")


def _check_data_size(cfg) -> None:
    """Members, non-members and the paraphrase pool are WikiText-2 valid blocks of block_len tokens.

    Every token covers at least one byte of the file, so the file holds at most
    bytes / block_len blocks: a sound bound that needs no tokenizer (the exact count is
    checked again once the text is tokenised).
    """
    from memlab.config import data_root

    root = data_root()
    path = root / "wikitext-2" / "valid.txt" if root else None
    if path is None or not path.is_file():
        return  # the data check before the run reports a missing file
    most = path.stat().st_size // cfg.block_len
    need = 2 * cfg.n_members + cfg.n_nonmembers
    if need > most:
        name = "n_members" if 2 * cfg.n_members > most else "n_nonmembers"
        raise ConfigError(f"parameter {name!r}: 2 x n_members + n_nonmembers = {need} blocks of "
                          f"{cfg.block_len} tokens, but {path} holds at most {most}")


CHECKS = [_check, _check_data_size]
METRICS = ("AUC", "TPR@10%FPR", "TPR@1%FPR")


# ----------------------------------------------------------------------------- tokenizer and data

@dataclass
class Codec:
    """Text <-> ids for one backbone, with the special ids the chapter needs."""

    encode: Callable[[str], list[int]]
    decode: Callable[[list[int]], str]
    vocab_size: int
    mask_id: int
    pad_id: int
    eos_id: int
    encode_batch: Callable[[list[str]], list[list[int]]] | None = None

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        if self.encode_batch is not None:
            return self.encode_batch(texts)
        return [self.encode(t) for t in texts]


def _bpe_codec(cfg, texts: list[str]) -> Codec:
    from memlab.data.text import train_bpe

    tok = train_bpe(texts, cfg.vocab_size, special_tokens=("<mask>", "<pad>", "<eos>"), name="qskew")
    return Codec(lambda s: tok.encode(s).ids, lambda ids: tok.decode(list(ids)), tok.get_vocab_size(),
                 tok.token_to_id("<mask>"), tok.token_to_id("<pad>"), tok.token_to_id("<eos>"),
                 lambda texts: [e.ids for e in tok.encode_batch(texts)])


def _hf_codec(cfg, mask_id: int) -> Codec:
    from transformers import AutoTokenizer

    from memlab.models import hub

    src, kwargs = hub.pretrained_kwargs(model_paths(cfg)[0], "base_model", cfg.trust_remote_code)
    tok = AutoTokenizer.from_pretrained(src, **kwargs)  # pinned revision, remote code only by name
    eos = tok.eos_token_id if tok.eos_token_id is not None else tok.sep_token_id
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos
    return Codec(lambda s: tok.encode(s, add_special_tokens=False), lambda ids: tok.decode(list(ids)),
                 len(tok), mask_id, pad, eos, lambda texts: tok(texts, add_special_tokens=False)["input_ids"])


def stream_blocks(ids: list[int], length: int) -> torch.Tensor:
    """Cut a token stream into consecutive (N, length) blocks (the tail is dropped)."""
    n = len(ids) // length
    return torch.tensor(ids[: n * length], dtype=torch.long).view(n, length)


def _sentences(text: str, min_words: int = 5) -> list[list[str]]:
    """Paragraphs of WikiText as lists of sentences (split at ' . ')."""
    paras = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("="):
            continue
        sents = [s.strip() + " ." for s in line.split(" . ") if len(s.split()) >= min_words]
        if len(sents) >= 2:
            paras.append(sents)
    return paras


PROMPT = "Instruction : continue the article . Input : {x} Response :"


def instruction_pairs(text: str, codec: Codec, length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Variable-length prompt/response pairs from consecutive WikiText sentences.

    Prompt = PROMPT around sentence i (at most length/2 tokens, cut from the left),
    response = sentence i+1 (cut to fit). Returns ids (N, length) padded with
    ``pad_id``, eligible (N, length) True on response tokens, attention (N, length).
    """
    rows, elig, attn = [], [], []
    pairs = [(a, b) for sents in _sentences(text) for a, b in zip(sents[:-1], sents[1:])]
    prompts = codec.encode_many([PROMPT.format(x=a) for a, _ in pairs])
    responses = codec.encode_many([" " + b for _, b in pairs])
    for p, r in zip(prompts, responses):
        p = p[-(length // 2):]
        r = r[: length - len(p)]
        if len(r) < 4:
            continue
        ids = p + r + [codec.pad_id] * (length - len(p) - len(r))
        rows.append(ids)
        e = [False] * len(p) + [True] * len(r) + [False] * (length - len(p) - len(r))
        elig.append(e)
        attn.append([True] * (len(p) + len(r)) + [False] * (length - len(p) - len(r)))
    return torch.tensor(rows), torch.tensor(elig), torch.tensor(attn)


def perturb(ids: torch.Tensor, eligible: torch.Tensor, frac: float, vocab: int, specials, seed: int) -> torch.Tensor:
    """Replace a ``frac`` share of eligible tokens by random non-special tokens (Table 4's perturbed data)."""
    g = torch.Generator().manual_seed(seed)
    hit = (torch.rand(ids.shape, generator=g) < frac) & eligible
    rnd = torch.randint(0, vocab, ids.shape, generator=g)
    for s in specials:
        rnd = torch.where(rnd == s, (rnd + 1) % vocab, rnd)
    return torch.where(hit, rnd, ids)


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
            "n_embd": cfg.n_embd, "n_head": cfg.n_head,
            "block_size": max(cfg.block_len, cfg.ift_len, cfg.pii_len)}


def model_paths(cfg) -> tuple[str, str]:
    """(base, instruct) checkpoints of a llada/dream backbone: the overrides, else the family's hub ids."""
    fam = dlm.FAMILIES[cfg.backbone]
    return cfg.base_model or fam["base"], cfg.instruct_model or fam["instruct"]


def _build_tiny(arch: dict) -> torch.nn.Module:
    return dlm.MaskedDiffusionLM(dlm.DLMConfig(**arch)).to(device())


def _load_hf(cfg, path: str) -> torch.nn.Module:
    family = cfg.backbone
    model = dlm.load_pretrained(path, family, trust_remote_code=cfg.trust_remote_code,
                                dtype=torch.bfloat16 if device().type == "cuda" else None, device=device(),
                                mask_id=None if cfg.mask_id < 0 else cfg.mask_id,
                                auto_class=_auto_class(path, cfg.trust_remote_code))
    return model


def _auto_class(path: str, trust_remote_code: bool = False) -> str:
    """AutoModel for LLaDA/Dream (their remote code registers it); masked/causal LM heads otherwise."""
    from transformers import AutoConfig

    from memlab.models import hub

    src, kwargs = hub.pretrained_kwargs(path, "base_model", trust_remote_code)
    conf = AutoConfig.from_pretrained(src, **kwargs)
    archs = conf.architectures or []
    if any("MaskedLM" in a for a in archs):
        return "AutoModelForMaskedLM"
    if any("CausalLM" in a for a in archs):
        return "AutoModelForCausalLM"
    return "AutoModel"


def _with_lora(model: torch.nn.Module, rank: int) -> torch.nn.Module:
    """Wrap an HF backbone in a LoRA adapter (peft) so 7-8B fine-tuning fits one GPU."""
    if rank <= 0 or not isinstance(model, dlm.HFDiffusionLM):
        return model
    from peft import LoraConfig, get_peft_model

    model.hf = get_peft_model(model.hf, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear"))
    return model


def prepare(cfg) -> Setup:
    """Tokenizer, base and instruct models (cached) and the tokenised WikiText-2 splits."""
    from memlab.data.text import load_wikitext2

    seed_everything(cfg.seed)
    pre_text, eval_text = load_wikitext2("test"), load_wikitext2("valid")
    if cfg.backbone == "tiny":
        codec = _bpe_codec(cfg, [pre_text, eval_text])
    else:
        fam = dlm.FAMILIES[cfg.backbone]
        codec = _hf_codec(cfg, fam["mask_id"] if cfg.mask_id < 0 else cfg.mask_id)
    dft = stream_blocks(codec.encode(eval_text), cfg.block_len)
    ift = instruction_pairs(eval_text, codec, cfg.ift_len)
    info = {"dft_blocks": int(dft.shape[0]), "ift_pairs": int(ift[0].shape[0]), "n_members": cfg.n_members,
            "n_nonmembers": cfg.n_nonmembers, "runs": cfg.runs}
    gap = None
    if "gap" in cfg.domains:
        from memlab.data import docstrings

        doc_text = docstrings.docstring_corpus()
        gap = stream_blocks(codec.encode(doc_text), cfg.block_len)
        info["gap_blocks"] = int(gap.shape[0])
        info["gap_corpus"] = docstrings.corpus_info(doc_text)
    if cfg.backbone == "tiny":
        arch = _arch(cfg, codec)
        pre = stream_blocks(codec.encode(pre_text), max(cfg.block_len, cfg.ift_len))
        pre_ift = instruction_pairs(pre_text, codec, cfg.ift_len)
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
    "gap"), on REGIME_BLOCKS fixed random blocks: the base's mean NLL over one round
    of cyclic masks at ``rho`` (every token scored once), and the NLL of an add-one
    unigram model of the pre-training tokens (specials excluded). A base that only
    learned token frequencies scores about the unigram NLL; the gain is the context it uses.
    """
    cfg, codec = setup.cfg, setup.codec
    specials = (codec.mask_id, codec.pad_id, codec.eos_id)
    out = {}
    for name in [d for d in ("same", "gap") if d == "same" or setup.gap is not None]:
        data = setup.blocks(name)
        idx = torch.randperm(data.shape[0], generator=torch.Generator().manual_seed(7))[:REGIME_BLOCKS]
        ids = data[idx]
        probe = mia.make_probe(torch.ones_like(ids, dtype=torch.bool), rho=cfg.rho, rounds=1, sama_steps=1,
                               seed=7)
        nll = mia.model_view(setup.base, ids, probe, None, cfg.eval_batch, groups={"cyclic"},
                             stats=False)["cyclic"]
        base = float(torch.nanmean(nll))
        uni = dlm.unigram_nll(pre_ids, ids, codec.vocab_size, exclude=specials)
        out[name] = {"base masked NLL": base, "unigram NLL": uni, "context gain": uni - base,
                     "ln V": float(np.log(codec.vocab_size)), "blocks": int(ids.shape[0])}
    return out


class ContextGuardError(ConfigError):
    """The base model's masked NLL is not clearly below a unigram model's: it does not use context."""


def check_context(cfg, reg: dict) -> None:
    """Fail the run (``require_context``) if the base gains less than ``context_margin`` nats over a unigram."""
    r = reg["same"]
    if cfg.require_context and r["context gain"] < cfg.context_margin:
        raise ContextGuardError(
            f"parameter 'pretrain_steps': the base model barely uses context: masked NLL "
            f"{r['base masked NLL']:.3f} nats at rho={cfg.rho:g} on WikiText-2 valid vs "
            f"{r['unigram NLL']:.3f} "
            f"for a unigram model of the pre-training split (gain {r['context gain']:.3f}, needs >= "
            f"{cfg.context_margin:g}); pre-train longer than pretrain_steps={cfg.pretrain_steps} "
            "or pass require_context=False")


def regime_table(setup: Setup) -> pd.DataFrame:
    """The regime table: the base's masked NLL beside a unigram model's, per corpus, with the paper's models.

    The paper's models (LLaDA-8B, Dream-7B) report no masked NLL; their rows carry
    only what the paper says of them.
    """
    cfg = setup.cfg
    names = {"same": "same domain: WikiText-2 valid", "gap": "domain gap: stdlib docstrings"}
    if cfg.backbone == "tiny":
        who = f"ours ({cfg.backbone}, {setup.info.get('params', 0) / 1e6:.2f}M params)"
    else:
        who = f"ours ({model_paths(cfg)[0]})"
    rows = {}
    for name, r in setup.regime.items():
        rows[f"{who}, {names[name]}"] = {
            "pre-training": f"WikiText-2 test, {cfg.pretrain_steps} x 32 blocks" if cfg.backbone == "tiny"
            else "the checkpoint's", "block length": cfg.block_len,
            f"masked NLL at rho={cfg.rho:g}": round(r["base masked NLL"], 3),
            "unigram NLL": round(r["unigram NLL"], 3), "gain over unigram": round(r["context gain"], 3)}
    for name, what in (("LLaDA-8B-Base (paper)", "web-scale pre-training"),
                       ("Dream-v0-Base-7B (paper)", "adapted from an autoregressive LM")):
        rows[name] = {"pre-training": what, "block length": "–",
                      f"masked NLL at rho={cfg.rho:g}": "not reported", "unigram NLL": "–",
                      "gain over unigram": "–"}
    return pd.DataFrame.from_dict(rows, orient="index")


def finetune(setup: Setup, start: torch.nn.Module, stage: str, ids, eligible=None, attention=None, *,
             epochs: int, seed: int, mask_ratio: float | None = None, snapshots=()) -> dict[int, torch.nn.Module]:
    """Fine-tune a copy of ``start`` (cached); returns {epoch: model} for ``snapshots`` and the last epoch.

    ids / eligible / attention: (N, L) training set. All snapshots of one run
    share a cache entry.
    """
    cfg = setup.cfg
    keep = sorted(set(snapshots) | {epochs})
    key = {"stage": stage, "start": _digest(*[p.detach().float().cpu().flatten()[:4096] for p in start.parameters()]),
           "data": _digest(ids, *(t for t in (eligible, attention) if t is not None)), "epochs": epochs,
           "bs": cfg.batch_size, "lr": cfg.lr, "seed": seed, "ratio": mask_ratio, "keep": keep,
           "lora": cfg.lora_rank}

    def compute():
        model = _with_lora(copy.deepcopy(start), cfg.lora_rank)
        states = {}

        def snap(epoch, m):
            if epoch in keep:
                for name, t in m.state_dict().items():
                    # With LoRA only the adapters change; storing them keeps 8B snapshots small.
                    if cfg.lora_rank <= 0 or "lora_" in name:
                        states[f"{epoch}/{name}"] = t.detach().cpu().clone()

        dlm.train_dlm(model, ids, eligible=eligible, attention_mask=attention, epochs=epochs,
                      batch_size=cfg.batch_size, lr=cfg.lr, mask_ratio=mask_ratio, seed=seed,
                      desc=f"fine-tune {stage}", on_epoch_end=snap)
        return states

    states = cache.load_or_compute(CHAPTER, "finetune", key, compute, CODE_VERSION)
    out = {}
    for e in keep:
        m = _with_lora(copy.deepcopy(start), cfg.lora_rank)
        m.load_state_dict({k.split("/", 1)[1]: v for k, v in states.items() if k.startswith(f"{e}/")},
                          strict=cfg.lora_rank <= 0)
        out[e] = m.eval()
    return out


# ----------------------------------------------------------------------------- scoring helpers

def _probe(cfg, eligible: torch.Tensor, seed: int, with_random: bool = False) -> mia.Probe:
    return mia.make_probe(eligible, rho=cfg.rho, rounds=cfg.rounds, secmi_ratios=tuple(cfg.secmi_ratios),
                          secmi_step=cfg.secmi_step, sama_steps=cfg.sama_steps, with_random=with_random,
                          seed=seed)


def _groups(scores) -> set[str]:
    return {mia.NEEDS[s] for s in scores}


def _view(cfg, model, ids, probe, attention, scores):
    return mia.model_view(model, ids, probe, attention, cfg.eval_batch, groups=_groups(scores),
                          stats="min_k_pp" in scores)


FPRS = {"TPR@10%FPR": 0.1, "TPR@1%FPR": 0.01}


def supported(metric: str, n_nonmembers: int, min_fp: int) -> bool:
    """Whether ``n_nonmembers`` support a TPR at the metric's FPR: >= ``min_fp`` false positives allowed.

    With fewer, the ROC point at that FPR is the one at (or next to) zero false
    positives, a different and much noisier quantity (64 non-members: TPR@1%FPR is
    TPR at FPR 0).
    """
    return metric not in FPRS or FPRS[metric] * n_nonmembers >= min_fp


def _metrics(score_dict: dict, labels: np.ndarray, min_fp: int = 1) -> dict[str, dict[str, float]]:
    """{score: {"AUC": %, "TPR@10%FPR": %, "TPR@1%FPR": %}}; an unsupported TPR is NaN (:func:`supported`)."""
    n_non = int((labels == 0).sum())
    out = {}
    for name, s in score_dict.items():
        m = roc_metrics(s, labels)
        row = {"AUC": 100 * m["auc"]}
        for metric, f in FPRS.items():
            ok = supported(metric, n_non, min_fp)
            row[metric] = 100 * m[f"tpr@{f * 100:g}%fpr"] if ok else float("nan")
        out[name] = row
    return out


def na_cells(table: pd.DataFrame, n_nonmembers: int, min_fp: int) -> pd.DataFrame:
    """``table`` (ours, or side-by-side) with unsupported TPR cells of ours written "n/a (n non-members)"."""
    out = table.copy().astype(object)
    for col in out.columns:
        metric, src = (col if isinstance(col, tuple) else (col, "ours"))
        if src == "ours" and not supported(metric, n_nonmembers, min_fp):
            out[col] = f"n/a ({n_nonmembers} non-members)"
    return out


def mean_table(per_run: list[dict], rows=None) -> pd.DataFrame:
    """Mean over runs of {method: {metric: value}} as a DataFrame (rows = method labels, %)."""
    rows = rows or list(per_run[0])
    data = {mia.LABELS.get(r, r): {m: float(np.mean([run[r][m] for run in per_run])) for m in METRICS} for r in rows}
    return pd.DataFrame.from_dict(data, orient="index")[list(METRICS)]


def _split(n_total: int, sizes, seed: int) -> list[torch.Tensor]:
    perm = torch.randperm(n_total, generator=torch.Generator().manual_seed(seed))
    if sum(sizes) > n_total:
        raise ConfigError(f"parameter 'n_members': needs {sum(sizes)} sequences, the data has {n_total}")
    out, at = [], 0
    for s in sizes:
        out.append(perm[at:at + s])
        at += s
    return out


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
        probe = _probe(cfg, torch.ones_like(ids, dtype=torch.bool), seed, with_random=ablate)
        all_scores = scores + (list(mia.ABLATIONS) if ablate else [])
        ref_view = _view(cfg, setup.base, ids, probe, None, all_scores)
        target = snaps[cfg.epochs]
        tv = _view(cfg, target, ids, probe, None, all_scores)
        sc = mia.compute_scores(tv, ref_view, probe, all_scores, h=cfg.h, k=cfg.k, seed=seed)
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
                                                               seed=seed), labels, cfg.tpr_min_fp))
        if r == 0:
            res.examples = {"deltas": mia.deltas_of(tv, ref_view), "labels": labels,
                               "qskew": sc.get("qskew"), "calibration": sc.get("calibration")}
    return res


def instruction_experiment(setup: Setup) -> InstructionRuns:
    """Instruction fine-tuning of the instruct variant on prompt/response pairs (the runs behind Tables 2, 4).

    Prompt tokens are never masked, in training or in scoring; scores use the
    response tokens only.
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
        sc = mia.compute_scores(tv, rv, probe, scores, h=cfg.h, k=cfg.k, seed=seed)
        res.main.append(_metrics(sc, labels, cfg.tpr_min_fp))
        if "qskew" in scores:
            for runs, ref in ((res.ref_base, setup.base), (res.ref_para, para_ref)):
                v = _view(cfg, ref, ids, probe, attn, ["qskew"])
                runs.append(_metrics(mia.compute_scores(tv, v, probe, ["qskew"], h=cfg.h), labels,
                                     cfg.tpr_min_fp))
    return res


def asymmetry_experiment(setup: Setup) -> dict:
    """Figure 1: fine-tune at fixed mask ratios and measure per-token gains on members.

    Gain of a member token = NLL_base - NLL_finetuned under one cyclic round of
    masks at ``rho`` (the same masks for every model); "gain per masked step"
    divides the mean by the expected number of epochs in which the token was
    masked (ratio * epochs). Returns
    {ratio: (n_tokens,) gains} and summary rows.
    """
    cfg = setup.cfg
    mem, = _split(setup.dft.shape[0], (cfg.n_members,), 3000 + cfg.seed)
    ids = setup.dft[mem]
    masks = mia.make_probe(torch.ones_like(ids, dtype=torch.bool), rho=cfg.rho, rounds=1, sama_steps=1,
                           seed=cfg.seed).cyclic
    n, p, l = masks.shape
    flat_ids, flat_masks = ids.repeat_interleave(p, 0), masks.reshape(n * p, l)
    base = dlm.masked_nll(setup.base, flat_ids, flat_masks, batch_size=cfg.eval_batch)
    gains, rows = {}, []
    from scipy.stats import skew

    for ratio in cfg.fixed_ratios:
        m = finetune(setup, setup.base, f"fixed-{ratio}", ids, epochs=cfg.fixed_ratio_epochs, seed=cfg.seed,
                     mask_ratio=ratio)[cfg.fixed_ratio_epochs]
        g = (base - dlm.masked_nll(m, flat_ids, flat_masks, batch_size=cfg.eval_batch)).numpy()
        g = g[np.isfinite(g)]
        gains[ratio] = g
        # A token is trained in an epoch with probability `ratio`, so dividing by ratio * epochs gives the
        # gain per training step in which the token was masked (the quantity of Assumption 3.1).
        rows.append({"mask ratio": ratio, "mean gain (nats)": float(g.mean()), "median gain": float(np.median(g)),
                     "gain per masked step": float(g.mean() / (ratio * cfg.fixed_ratio_epochs)),
                     "skewness": float(skew(g)), "tokens": int(g.size)})
    return {"gains": gains, "table": pd.DataFrame(rows).set_index("mask ratio")}


def pii_experiment(setup: Setup) -> dict:
    """Table 6: reconstruct masked e-mail addresses and phone numbers seen in fine-tuning.

    The base is fine-tuned on ``pii_targets`` records per kind. For each record,
    ``pii_slots`` masks replace the PII (and the end-of-text padding after it);
    ``pii_candidates`` candidates come from independent denoising runs; each
    unique candidate is ranked by cross-entropy (target model, random masks hiding a
    ``pii_ce_share`` of the record's non-padding tokens),
    by Q-Skew with only the PII masked, by Q-Skew with only the context masked,
    and by the combination with weight ``alpha``. Success = the top candidate
    equals the true PII string.
    """
    cfg = setup.cfg
    codec = setup.codec
    records = pii_data.make_pii_records(cfg.pii_targets, seed=cfg.seed)
    enc = pii_data.encode_records(_Tok(codec), records, cfg.pii_len, codec.eos_id)
    if int((enc.prefix_len + cfg.pii_slots).max()) > cfg.pii_len:
        raise ConfigError(f"parameter 'pii_len': records need {int((enc.prefix_len + cfg.pii_slots).max())} tokens")
    target = finetune(setup, setup.base, "pii", enc.ids, epochs=cfg.pii_epochs, seed=cfg.seed)[cfg.pii_epochs]
    memo = pii_memorisation(setup.base, target, enc, cfg.eval_batch)
    g = torch.Generator().manual_seed(cfg.seed)
    methods = ("CE", "Q-Skew (PII mask)", "Q-Skew (context mask)", f"Combine-{cfg.alpha:g}")
    hits = {m: {"email": 0, "phone": 0} for m in methods}
    oracle = {"email": 0, "phone": 0}
    examples = []
    for i in progress(range(len(records)), desc="PII targets"):
        rec, pre = records[i], int(enc.prefix_len[i])
        x = enc.ids[i].clone()
        slots = torch.zeros(cfg.pii_len, dtype=torch.bool)
        slots[pre:pre + cfg.pii_slots] = True
        x[slots] = codec.eos_id
        batch = x.expand(cfg.pii_candidates, -1).clone()
        filled = dlm.denoise(target, batch, slots.expand_as(batch), steps=cfg.pii_steps, temperature=1.0,
                             generator=g)
        cands = {}
        for row in filled:
            toks = row[pre:pre + cfg.pii_slots].tolist()
            toks = toks[:toks.index(codec.eos_id)] if codec.eos_id in toks else toks
            if len(toks) >= 2:
                cands.setdefault(tuple(toks), None)
        if not cands:
            continue
        cand_list = list(cands)
        seqs = torch.full((len(cand_list), cfg.pii_len), codec.eos_id, dtype=torch.long)
        seqs[:, :pre] = enc.ids[i, :pre]
        for j, c in enumerate(cand_list):
            seqs[j, pre:pre + len(c)] = torch.tensor(c)
        # The CE masks hide a share of the record's own tokens (prefix and candidate), never the padding.
        lengths = torch.tensor([pre + len(c) for c in cand_list])
        real = torch.arange(cfg.pii_len)[None, :] < lengths[:, None]
        ce = mia.candidate_ce(target, seqs, repeats=cfg.pii_repeats, mask_share=cfg.pii_ce_share, generator=g,
                              eligible=real, batch_size=cfg.eval_batch)
        sk = {}
        for part in ("pii", "context"):
            elig = torch.stack([mia.span_eligible(pre, len(c), cfg.pii_span, cfg.pii_len, part)
                                for c in cand_list])
            sk[part] = mia.candidate_qskew(target, setup.base, seqs, elig, rho=cfg.rho,
                                           rounds=max(1, cfg.rounds // 2), h=cfg.h, seed=pre,
                                           batch_size=cfg.eval_batch)
        texts = [codec.decode(list(c)).strip() for c in cand_list]
        truth = rec.pii
        ranks = {"CE": -ce, "Q-Skew (PII mask)": sk["pii"], "Q-Skew (context mask)": sk["context"],
                 methods[3]: mia.rank_candidates(ce, sk["pii"], cfg.alpha)}
        oracle[rec.kind] += int(truth in texts)
        for m, s in ranks.items():
            hits[m][rec.kind] += int(texts[int(np.argmax(s))] == truth)
        if len(examples) < 6:
            examples.append({"kind": rec.kind, "truth": truth, "CE top-1": texts[int(np.argmax(-ce))],
                             "combined top-1": texts[int(np.argmax(ranks[methods[3]]))],
                             "unique candidates": len(texts), "truth among candidates": truth in texts})
    n = cfg.pii_targets
    table = pd.DataFrame({m: {"Phone ASR": 100 * hits[m]["phone"] / n, "Email ASR": 100 * hits[m]["email"] / n,
                              "Phone hits": f"{hits[m]['phone']}/{n}", "Email hits": f"{hits[m]['email']}/{n}"}
                          for m in methods}).T
    table.loc["truth among candidates (upper bound)"] = [100 * oracle["phone"] / n, 100 * oracle["email"] / n,
                                                         f"{oracle['phone']}/{n}", f"{oracle['email']}/{n}"]
    return {"table": table, "hits": hits, "oracle": oracle, "n": n, "examples": pd.DataFrame(examples),
            "memorisation": memo}


def pii_memorisation(base, target, enc: pii_data.EncodedRecords, batch_size: int = 64) -> pd.DataFrame:
    """Mean NLL (nats/token) of the true PII tokens with the whole PII masked, base vs fine-tuned.

    The gap says how much of the PII the fine-tuned model has memorised, whether
    or not denoising then reproduces it exactly. Rows: e-mail, phone.
    """
    pos = torch.arange(enc.ids.shape[1])
    masks = (pos >= enc.prefix_len[:, None]) & (pos < (enc.prefix_len + enc.pii_len)[:, None])
    nb = dlm.masked_nll(base, enc.ids, masks, batch_size=batch_size)
    nt = dlm.masked_nll(target, enc.ids, masks, batch_size=batch_size)
    half = enc.ids.shape[0] // 2  # make_pii_records lists e-mails first, then phones
    rows = {}
    for kind, sl in (("email", slice(0, half)), ("phone", slice(half, None))):
        rows[kind] = {"base NLL": float(torch.nanmean(nb[sl])), "fine-tuned NLL": float(torch.nanmean(nt[sl]))}
    return pd.DataFrame(rows).T


class _Tok:
    """Adapter giving a Codec the ``encode(text).ids`` shape that ``encode_records`` expects."""

    def __init__(self, codec: Codec):
        self.codec = codec

    def encode(self, text: str):
        return type("Enc", (), {"ids": self.codec.encode(text)})()


# ----------------------------------------------------------------------------- one function per paper table

def table1(dom: DomainRuns) -> pd.DataFrame:
    """Table 1 (domain fine-tuning): every score's AUC and TPRs (%), mean over runs."""
    return mean_table(dom.main)


def table2(ift: InstructionRuns) -> pd.DataFrame:
    """Table 2 (instruction fine-tuning): every score's AUC and TPRs (%), mean over runs."""
    return mean_table(ift.main)


def figure2_table(dom: DomainRuns) -> pd.DataFrame:
    """Figure 2: AUC (%) by fine-tuning epochs (columns) and score label (rows), mean over runs."""
    epochs = sorted(dom.sweep)
    names = list(dom.sweep[epochs[0]][0])
    return pd.DataFrame({e: {mia.LABELS[n]: float(np.mean([run[n]["AUC"] for run in dom.sweep[e]]))
                             for n in names} for e in epochs})


# side -> (heading, key of the paper's table in data/papers/04_qskew.yaml)
TABLE4_SIDES = {"base": ("base (domain)", "table4_base"),
                "instruct": ("instruct (instruction)", "table4_instruct")}


def table4(dom: DomainRuns, ift: InstructionRuns, scores) -> dict[str, pd.DataFrame]:
    """Table 4 (mismatched references), one frame per side ("base", "instruct"); empty without Q-Skew.

    Rows: Q-Skew with the golden, the other-variant and the para-modification
    reference, and SAMA with its reference when ``"sama"`` is among ``scores``.
    """
    if not dom.ref_instruct:
        return {}
    out = {}
    for side, golden, other, para in (("base", dom.main, dom.ref_instruct, dom.ref_para),
                                      ("instruct", ift.main, ift.ref_base, ift.ref_para)):
        t = pd.concat([mean_table(golden, ["qskew"]).rename(index={"Q-Skew": "Golden reference"}),
                       mean_table(other, ["qskew"]).rename(index={"Q-Skew": "Other-variant reference"}),
                       mean_table(para, ["qskew"]).rename(index={"Q-Skew": "Para-modification reference"})])
        if "sama" in scores:
            t = pd.concat([t, mean_table(golden, ["sama"]).rename(index={"SAMA": "SAMA (w/ Ref)"})])
        out[side] = t
    return out


def table5(dom: DomainRuns) -> pd.DataFrame | None:
    """Table 5 (ablation of Q-Skew's parts), mean over runs; None when Q-Skew was not scored."""
    return mean_table(dom.ablation) if dom.ablation else None


# ---------------------------------------------------------------------------------------------
# Paper claims as predicates over the notebook's metrics (``run.metrics``)
# ---------------------------------------------------------------------------------------------

# At `smoke` the models are toys, so the claims are only judged at `cpu` and `paper`.
MEASURED = ("cpu", "paper")
# The domain setting the claims judge: fine-tuning on another domain than pre-training, as
# LLaDA (web-scale pre-training) fine-tuned on WikiText; "same" is shown beside it as a control.
HEADLINE = "gap"


def auc_variance(auc: float, n_pos: int, n_neg: int) -> float:
    """Hanley & McNeil (1982) variance of an AUC (as a fraction) from n_pos members and n_neg non-members."""
    a = min(max(auc, 1e-6), 1 - 1e-6)
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    return (a * (1 - a) + (n_pos - 1) * (q1 - a * a) + (n_neg - 1) * (q2 - a * a)) / (n_pos * n_neg)


def auc_diff_band(a1: float, a2: float, m: dict, z: float = 1.96) -> float:
    """Half-width (AUC points) of a band on a1 - a2, two AUCs in % each averaged over the run's runs.

    Treats the two AUCs as independent, which overstates the noise of a difference
    measured on the same members (their errors are positively correlated): a cautious band.
    """
    s = m["setup"]
    n1, n0, runs = int(s["n_members"]), int(s["n_nonmembers"]), int(s["runs"])
    var = (auc_variance(a1 / 100, n1, n0) + auc_variance(a2 / 100, n1, n0)) / runs
    return float(100 * z * np.sqrt(var))


def _section(m: dict, section: str) -> dict:
    """The score table of a section: "instruction", or "domain" in the HEADLINE domain setting."""
    return m["domain"][HEADLINE] if section == "domain" else m[section]


def best_baseline(m: dict, section: str) -> tuple[str, float]:
    """Name and AUC of the best score other than Q-Skew in ``section`` ("domain": the HEADLINE setting)."""
    rows = {k: v["AUC"] for k, v in _section(m, section).items() if k != "Q-Skew"}
    if not rows:
        raise paper.NotJudged(f"{section}: no baseline score was run to compare with")
    name = max(rows, key=rows.get)
    return name, rows[name]


def _beats_all(m: dict, section: str) -> tuple[bool, str]:
    """Checks that Q-Skew's AUC is above every other score's, by more than the noise band."""
    name, auc = best_baseline(m, section)
    q = _section(m, section)["Q-Skew"]["AUC"]
    band = auc_diff_band(q, auc, m)
    what = f"Q-Skew AUC {q:.1f} vs best baseline {name} {auc:.1f}"
    paper.outside_noise(q - auc, band, what)
    return q > auc, f"{what} (band \u00b1{band:.1f})"


def _dft_best(m: dict) -> tuple[bool, str]:
    """Checks that Q-Skew has the highest AUC under domain fine-tuning (domain-gap setting)."""
    return _beats_all(m, "domain")


def _ift_best(m: dict) -> tuple[bool, str]:
    """Checks that Q-Skew has the highest AUC under instruction fine-tuning."""
    return _beats_all(m, "instruction")


def _gain10(m: dict) -> tuple[bool, str]:
    """Checks that Q-Skew's AUC minus the best baseline's, averaged over domain and instruction, exceeds 10."""
    gains, bands = [], []
    for section in ("domain", "instruction"):
        q, (_, b) = _section(m, section)["Q-Skew"]["AUC"], best_baseline(m, section)
        gains.append(q - b)
        bands.append(auc_diff_band(q, b, m))
    mean, band = float(np.mean(gains)), float(np.sqrt(np.sum(np.square(bands))) / 2)
    what = "Q-Skew minus best baseline AUC: " + ", ".join(f"{g:+.1f}" for g in gains) + f" (mean {mean:+.1f})"
    paper.outside_noise(mean - 10, band, what + " against the paper's +10")
    return mean > 10, f"{what}, band \u00b1{band:.1f}"


def _right_skew(m: dict) -> tuple[bool, str]:
    """Checks that the members' pooled Q-Skew of Δ is positive and above the non-members'."""
    d = m["delta_stats"][HEADLINE]
    mq, nq = d["members"]["Q-Skew (pooled)"], d["non-members"]["Q-Skew (pooled)"]
    return mq > 0 and mq > nq, (
        f"pooled Q-Skew members {d['members']['Q-Skew (pooled)']:.3f}, non-members {d['non-members']['Q-Skew (pooled)']:.3f}")


def _falls_with_ratio(t: dict, column: str) -> tuple[bool, list[tuple[float, float]]]:
    """Checks that ``column`` of the asymmetry table strictly falls as the mask ratio grows."""
    # The ratios are float keys in run.metrics and strings once read back from the results JSON;
    # sorting and formatting them as floats gives the same order and text either way.
    rows = [(float(r), t[r][column]) for r in sorted(t, key=float)]
    if len(rows) < 2:
        raise paper.NotJudged(f"one fixed mask ratio ({', '.join(f'{r:g}' for r, _ in rows)}); a trend needs at least two")
    values = [v for _, v in rows]
    return all(a > b for a, b in zip(values, values[1:])), rows


def _asymmetry(m: dict) -> tuple[bool, str]:
    """Checks that the total per-token gain after fine-tuning falls as the fixed mask ratio grows (Figure 1)."""
    ok, rows = _falls_with_ratio(m["asymmetry"], "mean gain (nats)")
    return ok, "mean gain by ratio " + ", ".join(f"{r:g}: {v:.3f}" for r, v in rows)


def _per_step(m: dict) -> tuple[bool, str]:
    """Checks that the gain per masked training step falls as the fixed mask ratio grows (Assumption 3.1)."""
    ok, rows = _falls_with_ratio(m["asymmetry"], "gain per masked step")
    return ok, "gain per masked step by ratio " + ", ".join(f"{r:g}: {v:.3f}" for r, v in rows)


def _mismatched(m: dict) -> tuple[bool, str]:
    """Checks that on both sides of Table 4 the worst mismatched reference loses at most 6 AUC points
    against the golden one and stays above SAMA."""
    parts, ok = [], True
    for side in ("base", "instruct"):
        t = m["table4_base"][HEADLINE] if side == "base" else m["table4_instruct"]
        golden = t["Golden reference"]["AUC"]
        worst = min(t["Other-variant reference"]["AUC"], t["Para-modification reference"]["AUC"])
        ok &= golden - worst <= 6 and worst > t["SAMA (w/ Ref)"]["AUC"]
        parts.append(f"{side}: golden {golden:.1f}, worst mismatched {worst:.1f}, SAMA {t['SAMA (w/ Ref)']['AUC']:.1f}")
    return ok, "; ".join(parts)


def _ablation(m: dict) -> tuple[bool, str]:
    """Checks that full Q-Skew has a higher AUC than every ablated variant (Table 5)."""
    t = m["ablation"][HEADLINE]
    full = t["Q-Skew"]["AUC"]
    others = {k: v["AUC"] for k, v in t.items() if k != "Q-Skew"}
    best = max(others, key=others.get)
    band = auc_diff_band(full, others[best], m)
    what = f"full {full:.1f}; " + ", ".join(f"{k} {v:.1f}" for k, v in others.items())
    paper.outside_noise(full - others[best], band, what + f"; full minus best ablation ({best})")
    return all(full > v for v in others.values()), f"{what} (band \u00b1{band:.1f})"


def _pii_judgeable(m: dict) -> tuple[dict, int, str]:
    """(hits, targets per kind, oracle evidence); NotJudged when no target's truth is among its candidates."""
    p = m["pii"]
    h, n, o = p["hits"], int(p["targets_per_kind"]), p["oracle"]
    oracle = f"truth among candidates phone {o['phone']}/{n}, email {o['email']}/{n}"
    if o["phone"] + o["email"] == 0:
        raise paper.NotJudged(f"{oracle}: no ranking can pick the true PII, so none can be compared")
    return h, n, oracle


def _pii_margin(h: dict, a: str, b: str, n: int, what: str) -> float:
    """Total top-1 hit rate of ranking a minus b over 2n targets; NotJudged inside the diff_band."""
    pa, pb = sum(h[a].values()) / (2 * n), sum(h[b].values()) / (2 * n)
    band = diff_band(pa, 2 * n, pb, 2 * n)
    paper.outside_noise(pa - pb, band, f"{what}: hit rate {100 * pa:.0f}% vs {100 * pb:.0f}% of {2 * n}")
    return band


def _pii_combine(m: dict) -> tuple[bool, str]:
    """Checks that the combined CE + skewness ranking has at least CE's top-1 hits for phone and e-mail,
    and more in total, by more than the noise band on the total hit rates."""
    h, n, oracle = _pii_judgeable(m)
    comb = [k for k in h if k.startswith("Combine")][0]
    band = _pii_margin(h, comb, "CE", n, f"{comb} minus CE ({oracle})")
    ok = all(h[comb][kind] >= h["CE"][kind] for kind in ("phone", "email")) and sum(h[comb].values()) > sum(h["CE"].values())
    return ok, (f"top-1 hits CE phone {h['CE']['phone']}/{n}, email {h['CE']['email']}/{n}; "
                f"{comb} phone {h[comb]['phone']}/{n}, email {h[comb]['email']}/{n}; {oracle}; "
                f"band \u00b1{100 * band:.0f} points")


def _pii_skew_alone(m: dict) -> tuple[bool, str]:
    """Checks that ranking by Q-Skew over the PII tokens alone gives fewer top-1 hits in total than CE."""
    h, n, oracle = _pii_judgeable(m)
    q = "Q-Skew (PII mask)"
    band = _pii_margin(h, "CE", q, n, f"CE minus {q} ({oracle})")
    return sum(h[q].values()) < sum(h["CE"].values()), (
        f"{q} {sum(h[q].values())} hits vs CE {sum(h['CE'].values())} of {2 * n}; {oracle}; "
        f"band \u00b1{100 * band:.0f} points")


# Every metric key the chapter records (run.record); a claim reading another key is a typo
# and fails loudly (memlab.paper.evaluate), one reading a key this run lacks is 'not run'.
METRIC_KEYS: tuple[str, ...] = (
    'setup', 'regime', 'domain', 'delta_stats', 'instruction', 'epochs_sweep_auc', 'table4_base',
    'table4_instruct', 'ablation', 'asymmetry', 'pii',
)

def claims():
    """The paper's claims as predicates over this chapter's metrics, judged at `cpu` and `paper`."""
    from memlab.paper import Claim

    return paper.declare(METRIC_KEYS, [
        Claim("dft-best", "Q-Skew has the highest AUC under domain fine-tuning", "Table 1", _dft_best,
              profiles=MEASURED),
        Claim("ift-best", "Q-Skew has the highest AUC under instruction fine-tuning", "Table 2", _ift_best,
              profiles=MEASURED),
        Claim("gain10", "Q-Skew beats the best baseline by more than 10 AUC points on average", "Section 4", _gain10,
              profiles=MEASURED),
        Claim("member-skew", "Members' per-token differences are right-skewed, more than non-members'",
              "Section 3 (Theorem 3.2)", _right_skew, profiles=MEASURED),
        Claim("asymmetry", "After fine-tuning at a lower mask ratio, tokens have gained more (0.25 > 0.5 > 0.75)",
              "Figure 1", _asymmetry, profiles=MEASURED),
        Claim("per-step", "A masked token gains more per training step at a lower mask ratio", "Assumption 3.1",
              _per_step, profiles=MEASURED),
        Claim("mismatch", "With a mismatched reference Q-Skew loses at most a few AUC points and stays above SAMA",
              "Table 4", _mismatched, profiles=MEASURED),
        Claim("ablation", "Each component (cyclic sampling, skewness, quantile weighting) adds AUC", "Table 5",
              _ablation, profiles=MEASURED),
        Claim("pii-combine", "Combining CE with skewness (alpha = 0.1) recovers more PII than CE alone", "Table 6",
              _pii_combine, profiles=MEASURED),
        Claim("pii-skew-alone", "Skewness alone recovers less PII than CE", "Table 6", _pii_skew_alone,
              profiles=MEASURED),
    ])
