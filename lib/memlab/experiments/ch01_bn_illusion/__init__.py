"""Chapter 1: the BatchNorm illusion in unlearning evaluation.

The package the notebook ``notebooks/01_bn_illusion.py`` uses as ``ch``: ``spec`` (parameters,
checks, the methods' hyperparameter table), ``stages`` (data, cached models, experiments),
``tables`` (the paper's tables and the recorded metric groups) and ``claims``. Every public name
is re-exported here.
"""
from memlab.data.vision import patch_shuffle  # noqa: F401 - moved to memlab.data.vision; old callers
from memlab.science.metrics import correlation_tests  # noqa: F401 - the science behind :func:`correlations`

from .claims import GAP_PP, METRIC_KEYS, NINE, ZERO_ROWS, ZERO_TOL_PP, claims
from .spec import (CHAPTER, CHECKS, CODE_VERSION, HP_RANGES, HPARAMS, METHOD_HPARAMS, METHODS,
                   NUM_CLASSES, OOD_SOURCES, SPEC)
from .stages import (VIT_METHODS, Data, audit, budget_sweep, build, epochs_for, fingerprint, forget_accuracy,
                     forget_classes, ga_step_sweep, groupnorm_control, linear_probe, load_data, method_hparams,
                     misalignment_profile, original_model, recovered_accuracy, relearn_curve, retain_accuracy,
                     run_method_table, salun_mix_sweep, unlearned_model, vit_control)
from .tables import (METRICS, closing_caveat, model_markers, regime_text, setup_text, REGIME_COLUMNS, appendix_h_metrics, appendix_q_metrics, correlation_metrics,
                     correlations, data_metrics, figure1a_metrics, figure1a_table, figure1b_metrics,
                     figure1b_table, forget_epochs, gn_metrics, lp_decomposition, misalignment_metrics,
                     recal_metrics, regime, regime_metrics, schedule_metrics, summarise, table1_metrics,
                     table2_metrics, vit_metrics)

__all__ = [
    "CHAPTER", "CHECKS", "CODE_VERSION", "HP_RANGES", "HPARAMS", "METHOD_HPARAMS", "METHODS",
    "NUM_CLASSES", "OOD_SOURCES", "SPEC",
    "VIT_METHODS", "Data", "audit", "budget_sweep", "build", "epochs_for", "fingerprint", "forget_accuracy",
    "forget_classes", "ga_step_sweep", "groupnorm_control", "linear_probe", "load_data", "method_hparams",
    "misalignment_profile", "original_model", "recovered_accuracy", "relearn_curve", "retain_accuracy",
    "run_method_table", "salun_mix_sweep", "unlearned_model", "vit_control",
    "METRICS", "REGIME_COLUMNS", "appendix_h_metrics", "appendix_q_metrics", "correlation_metrics", "correlations",
    "data_metrics", "figure1a_metrics", "figure1a_table", "figure1b_metrics", "figure1b_table", "gn_metrics",
    "forget_epochs", "lp_decomposition", "schedule_metrics",
    "misalignment_metrics", "recal_metrics", "regime", "regime_metrics", "summarise", "table1_metrics",
    "table2_metrics", "vit_metrics", "closing_caveat", "model_markers", "regime_text", "setup_text",
    "GAP_PP", "METRIC_KEYS", "NINE", "ZERO_ROWS", "ZERO_TOL_PP", "claims",
    "patch_shuffle", "correlation_tests",
]
