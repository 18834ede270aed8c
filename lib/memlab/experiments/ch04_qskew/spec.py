"""Chapter 4 (Q-Skew) parameters: ``CHAPTER``, ``CODE_VERSION``, the ``SPEC`` of every parameter
with its per-profile values, the ``CHECKS`` run on a resolved config before any work, the run-time context
guard (:func:`check_context`), and the metric columns of the membership tables (``METRICS``, ``FPRS``).
"""
from __future__ import annotations

from memlab.core.config import SEED_HIGH, ConfigError, Param
from memlab.science import mia

CHAPTER = "04_qskew"
CODE_VERSION = "4"  # 4: likelihood baselines on LLaDA random-t masks, blocks of 64, 3 seeds per fixed ratio;
# 3: base pre-trained on half the docstring modules; 2: 4000-step base at block 48

SPEC: dict[str, Param] = {
    "seed": Param(int, 0, low=0, high=SEED_HIGH, doc="base seed; run r uses seed + r"),
    "runs": Param(int, {"smoke": 2, "cpu": 3, "paper": 3}, low=1, high=10,
                  doc="independent fine-tuning runs averaged"),
    "backbone": Param(str, {"smoke": "tiny", "cpu": "tiny", "paper": "llada"}, choices=("tiny", "llada", "dream"),
                      doc="tiny: a small DLM pre-trained here; llada/dream: transformers checkpoints"),
    "base_model": Param(str, "",
                        doc="HF id or local path of the base DLM; '': the backbone family's (llada/dream)"),
    "instruct_model": Param(str, "", doc="HF id or local path of the instruct DLM; '': the family's"),
    "mask_id": Param(int, -1, low=-1, doc="-1: the family's mask id (LLaDA 126336, Dream 151666)"),
    "trust_remote_code": Param(bool, {"smoke": False, "cpu": False, "paper": True},
                               doc="run the checkpoints' own modelling code"),
    "lora_rank": Param(int, {"smoke": 0, "cpu": 0, "paper": 16}, low=0,
                       doc="0: full fine-tuning; >0: LoRA (peft) of this rank"),
    "vocab_size": Param(int, {"smoke": 512, "cpu": 1024, "paper": 1024}, low=64, high=65536,
                        doc="BPE vocabulary (tiny backbone)"),
    "n_layer": Param(int, {"smoke": 1, "cpu": 2, "paper": 2}, low=1, high=48),
    "n_embd": Param(int, {"smoke": 32, "cpu": 128, "paper": 128}, low=16, high=4096),
    "n_head": Param(int, {"smoke": 2, "cpu": 4, "paper": 4}, low=1, high=64),
    "pretrain_steps": Param(int, {"smoke": 30, "cpu": 4000, "paper": 4000}, low=1,
                            doc="pre-training batches (32 blocks each) of the tiny base"),
    "instruct_steps": Param(int, {"smoke": 10, "cpu": 150, "paper": 150}, low=1,
                            doc="batches turning the tiny base into 'instruct'"),
    "block_len": Param(int, {"smoke": 16, "cpu": 64, "paper": 128}, low=4, high=4096,
                       doc="domain fine-tuning block length (tokens; the paper trains blocks of 64, 128 or 256)"),
    "ift_len": Param(int, {"smoke": 24, "cpu": 48, "paper": 256}, low=8, high=4096,
                     doc="instruction pair max length (tokens)"),
    "n_members": Param(int, {"smoke": 12, "cpu": 250, "paper": 500}, low=4,
                       doc="members (= fine-tuning set) per run"),
    "n_nonmembers": Param(int, {"smoke": 12, "cpu": 250, "paper": 500}, low=4, doc="non-members per run"),
    "domains": Param(list, ["same", "gap"], item=str, choices=("same", "gap"),
                     doc="domain fine-tuning data: same (WikiText-2 valid, the pre-training domain) and/or "
                         "gap (Python standard-library docstrings)"),
    "require_context": Param(bool, {"smoke": False, "cpu": True, "paper": True},
                             doc="fail the run unless the base's masked NLL is context_margin "
                                 "below a unigram's"),
    "context_margin": Param(float, 0.5, low=0.0, doc="nats the base must beat the unigram NLL by"),
    "tpr_min_fp": Param(int, 5, low=1, doc="TPR at FPR f is reported only if f x non-members >= this"),
    "epochs": Param(int, {"smoke": 2, "cpu": 6, "paper": 6}, low=1, high=100, doc="fine-tuning epochs (paper: 6)"),
    "epochs_sweep": Param(list, {"smoke": [1, 2], "cpu": [1, 2, 4, 6], "paper": [1, 2, 3, 4, 5, 6]},
                          item=int, low=1, high=100,
                          doc="epochs at which Figure 2 scores the fine-tuning run (<= epochs)"),
    "batch_size": Param(int, {"smoke": 8, "cpu": 16, "paper": 16}, low=1,
                        doc="fine-tuning batch size (paper: 16)"),
    "lr": Param(float, {"smoke": 1e-3, "cpu": 1e-3, "paper": 2e-5}, low=1e-7, high=1.0,
                doc="fine-tuning learning rate"),
    "pretrain_lr": Param(float, 2e-3, low=1e-6, high=1.0),
    "rho": Param(float, 0.35, low=0.0, high=1.0, closed="neither", doc="cyclic mask ratio"),
    "rounds": Param(int, {"smoke": 2, "cpu": 5, "paper": 5}, low=1, high=64,
                    doc="cyclic sampling rounds R (5 rounds of 3 batches at rho 0.35: 15 passes, the "
                        "paper's 16 steps per sample)"),
    "mc_steps": Param(int, {"smoke": 4, "cpu": 16, "paper": 16}, low=1, high=256,
                      doc="LLaDA random-t passes per sequence for Loss, Min-K%, Min-K%++ and Calibration "
                          "(paper: 16 denoising steps per sample for every method)"),
    "h": Param(float, 0.1, low=0.0, closed="neither", doc="quantile bump bandwidth"),
    "k": Param(float, 0.2, low=0.01, high=1.0, doc="Min-K% / Min-K%++ fraction"),
    "secmi_ratios": Param(list, [0.1, 0.3, 0.5, 0.7], item=float, low=0.01, high=0.99,
                          doc="SecMI's deterministic states t (mask ratios)"),
    "secmi_step": Param(float, 0.2, low=0.01, high=0.99, doc="SecMI's forward/reverse step k (mask ratio)"),
    "sama_steps": Param(int, {"smoke": 3, "cpu": 16, "paper": 16}, low=1, high=64,
                        doc="SAMA's progressive masking steps (paper: 16 denoising steps per sample)"),
    "scores": Param(list, list(mia.SCORES), item=str, choices=mia.SCORES, doc="membership scores to run"),
    "fixed_ratios": Param(list, [0.25, 0.5, 0.75], item=float, low=0.01, high=1.0, doc="Figure 1 mask ratios"),
    "fixed_ratio_epochs": Param(int, {"smoke": 1, "cpu": 4, "paper": 4}, low=1, high=100,
                                doc="fine-tuning epochs at each fixed mask ratio (paper Figure 1: 4); one "
                                    "fine-tuning per ratio and run (runs seeds)"),
    "pii_targets": Param(int, {"smoke": 3, "cpu": 20, "paper": 50}, low=1,
                         doc="PII targets per kind (e-mail, phone)"),
    "pii_len": Param(int, {"smoke": 48, "cpu": 48, "paper": 64}, low=24, high=4096,
                     doc="PII record length (tokens)"),
    # cpu: chosen on the regime measure alone (CE's top-1 rate over both kinds, gate pii_ce_off_ceiling:
    # at most 50 %, the paper's 25 % of Table 6 doubled), never on the skewness or combined rankings: the
    # value inside the gate whose rate is nearest the paper's. Measured at the cpu profile (seed 0, 20 + 20
    # targets, PII stage only, code version 4): epochs -> CE rate (truth among candidates, of 40):
    # 6, 20, 50, 100, 300 -> 0 % (0); 400 -> 0 % (2); 500 -> 12.5 % (8); 600 -> 27.5 % (14);
    # 700 -> 37.5 % (24); 800 -> 52.5 % (29); 1000 -> 90 % (36). Fewer than ~400 epochs leave the
    # truth out of every candidate set: the small model has not memorised the records at all.
    "pii_epochs": Param(int, {"smoke": 3, "cpu": 600, "paper": 6}, low=1, high=5000,
                        doc="fine-tuning epochs on the PII records (paper: 6)"),
    "pii_slots": Param(int, 20, low=1, high=256, doc="mask tokens inserted at the PII position"),
    "pii_candidates": Param(int, {"smoke": 4, "cpu": 16, "paper": 64}, low=1, high=1024,
                            doc="N candidates by denoising"),
    "pii_steps": Param(int, {"smoke": 4, "cpu": 16, "paper": 16}, low=1, high=256,
                       doc="denoising steps per candidate"),
    "pii_repeats": Param(int, {"smoke": 2, "cpu": 8, "paper": 16}, low=1, high=64,
                         doc="random masks per candidate for the CE ranking"),
    "pii_ce_share": Param(float, 0.35, low=0.0, high=1.0, closed="neither",
                          doc="share of a record's non-padding tokens each CE mask hides (paper: 35%)"),
    "pii_span": Param(int, 20, low=4, high=256, doc="context span X around the PII for the skewness"),
    "alpha": Param(float, 0.1, low=0.0, high=1.0, doc="weight of the skewness in the combined PII rank"),
    "eval_batch": Param(int, {"smoke": 64, "cpu": 256, "paper": 32}, low=1,
                        doc="sequences per forward when scoring"),
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
    from memlab.core.config import data_root

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


# The run-time guard on the measured regime (stages.prepare calls it once the base is scored).
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


METRICS = ("AUC", "TPR@10%FPR", "TPR@1%FPR")
# The TPR columns of the membership tables and the FPR each is read at (memlab.science.metrics.roc_row).
FPRS = {"TPR@10%FPR": 0.1, "TPR@1%FPR": 0.01}
