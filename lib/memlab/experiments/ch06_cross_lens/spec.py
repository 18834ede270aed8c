"""Chapter 6's declarations: its id, its parameters (``SPEC``) and their checks, its pre-registered hypotheses.

The chapter caches nothing of its own (every model comes from chapters 1 and 3, at the same
profile and with their default parameters), so ``CODE_VERSION`` keys nothing. ``ILLUSION_PP``
is the pre-registered convention the vision stage uses to form the illusion set; the claims'
own thresholds live in :mod:`.claims`.
"""
from __future__ import annotations

from memlab.core.config import SEED_HIGH, ConfigError, Param, resolve
from memlab.data import authors as A
from memlab.experiments import ch01_bn_illusion as ch1
from memlab.experiments import ch02_sde as ch2
from memlab.report import paper
from memlab.science.unlearning import npo

CHAPTER = "06_cross_lens"
CODE_VERSION = "1"  # caches nothing of its own: every model comes from chapters 1 and 3
ILLUSION_PP = 10.0  # pre-registered: a BatchNorm method with ΔF >= 10 pp is in the illusion set

SPEC: dict[str, Param] = {
    "seed": Param(int, 0, low=0, high=SEED_HIGH, doc="seed of the SDE subsets and shuffles, attacks and bootstraps"),
    "vision": Param(bool, True, doc="run the vision lenses on chapter 1's models (questions 1 and 4)"),
    "language": Param(bool, True, doc="run the LM lenses on chapter 3's runs (questions 2-4)"),
    "vision_methods": Param(list, {"smoke": ["Retrain", "GA", "BadTeacher", "SSD"], "cpu": list(ch1.METHODS),
                                   "paper": list(ch1.METHODS)}, item=str, choices=ch1.METHODS,
                            doc="chapter 1's methods to look at (its cached models; smoke keeps four)"),
    "sde_feature": Param(str, ch2.SPEC["feature"].default, choices=ch2.FEATURES,
                         doc="outputs SDE reads (chapter 2's default)"),
    "sde_size": Param(int, {"smoke": 6, "cpu": 40, "paper": 400}, low=4, high=5000,
                      doc="images per SDE subset (targets and both references)"),
    "n_targets": Param(int, {"smoke": 3, "cpu": 20, "paper": 50}, low=1, high=1000,
                       doc="forget-class target subsets per model"),
    "n_shuffles": Param(int, {"smoke": 20, "cpu": 200, "paper": 200}, low=1, high=10000,
                        doc="shufflings of the second half per subset (chapter 2's)"),
    "n_bins": Param(int, 30, low=2, high=1000, doc="histogram bins of the JSD decision (chapter 2's)"),
    "lm_methods": Param(list, list(npo.LM_METHODS), item=str, choices=npo.LM_METHODS,
                        doc="chapter 3's unlearning runs to audit"),
    "bits_prefill": Param(str, "BIO", choices=A.PREFILLS,
                          doc="prefill of the teacher-forced context in which canary bits are counted"),
    "n_fresh": Param(int, {"smoke": 8, "cpu": 30, "paper": 60}, low=2, high=100,
                     doc="fresh fictional authors (never trained on): the non-members of question 3"),
    "min_k": Param(float, 0.2, low=0.0, high=1.0, closed="right", doc="k of Min-K% and Min-K%++"),
    "n_boot": Param(int, {"smoke": 200, "cpu": 2000, "paper": 2000}, low=10, high=100000,
                    doc="bootstrap resamples of every interval"),
}


def _check_sizes(cfg) -> None:
    if not cfg.vision:
        return
    c1 = resolve(ch1.CHAPTER, profile=cfg.profile)
    pools = {"forget-class training images": c1.train_per_class * c1.n_forget_classes,
             "forget-class test images": c1.test_per_class * c1.n_forget_classes,
             "retain images of chapter 1's evaluation set": c1.eval_retain}
    for what, n in pools.items():
        if cfg.sde_size > n:
            raise ConfigError(f"parameter 'sde_size': must be at most the {n} {what} at profile "
                              f"{cfg.profile} (got {cfg.sde_size})")


def _check_something(cfg) -> None:
    if not (cfg.vision or cfg.language):
        raise ConfigError("parameter 'vision': at least one of 'vision' and 'language' must be true (got both false)")


CHECKS = [_check_something, _check_sizes]


def hypotheses() -> dict:
    """The pre-registered hypotheses of ``data/papers/06_cross_lens.yaml`` (key -> entry)."""
    return dict(paper.load(CHAPTER)["hypotheses"])
