"""Chapter 2, split-half dependence evaluation (SDE) of unlearning on CIFAR-10 classifiers (the fast
BatchNorm CNN at ``cpu``, the paper's ResNet-18 at ``paper``).

``notebooks/02_sde.py`` runs it as ``from memlab.experiments import ch02_sde as ch``; every name it,
the tests and chapter 6 use is re-exported here. The package holds:

* :mod:`.spec`: parameters (``SPEC``, ``CHECKS``), the chapter id and the subset protocol;
* :mod:`.stages`: data, cached models, outputs and the SDE / MMD / Wasserstein judgements;
* :mod:`.tables`: the paper's tables and the metric groups the notebook records;
* :mod:`.claims`: metric keys, gates and the claims' predicates.

The statistic lives in :mod:`memlab.science.sde`, F1 and its bootstrap band in :mod:`memlab.science.metrics`,
outputs at each depth and the confidence attack in :mod:`memlab.science.probes`.
"""
from memlab.science.metrics import f1_band
from memlab.science.metrics import f1_score as f1
from memlab.science.probes import accuracy_pct
from memlab.science.probes import layer_outputs as model_outputs_all

from .claims import METRIC_KEYS, claims
from .spec import (ACC_KEPT_PP, CHAPTER, CHECKS, CHOICES, CODE_VERSION, DETECTORS, FEATURES, METHODS,
                   NOT_RUN_DATASETS, SPEC, VARIANT, column, main_fraction, main_size)
from .stages import (_MODELS, Data, Pools, all_outputs, build_model, chapter1_config, classify,
                     controlled_experiment, draw_subsets, early_epoch, epoch_mean_lrs, holdout_split,
                     judge_targets, load_data, method_config, model_outputs, reference_state, spread_analysis,
                     subset_list, train_model, unlearn_all)
from .tables import (acc_kept, accuracy_rule_table, accuracy_table, bandwidth_ablation, cached_training_cpu_s,
                     claim_inputs, closing_regime, cost_metrics, depth_ablation, depth_metrics, early_check,
                     evaluate_unlearning, feature_metrics, identity_summary, main_metrics, regime, regime_text,
                     sensitivity_row, sensitivity_table, setup_text, size_sweep, sizes_table, table1, table2,
                     table3, training_costs, variant_table)

__all__ = [
    "ACC_KEPT_PP", "CHAPTER", "CHECKS", "CHOICES", "CODE_VERSION", "DETECTORS", "FEATURES", "METHODS",
    "METRIC_KEYS", "NOT_RUN_DATASETS", "SPEC", "VARIANT", "Data", "Pools", "acc_kept", "accuracy_pct",
    "accuracy_rule_table", "accuracy_table", "all_outputs", "bandwidth_ablation", "build_model",
    "cached_training_cpu_s", "chapter1_config", "claim_inputs", "claims", "classify", "closing_regime", "column",
    "controlled_experiment", "cost_metrics", "depth_ablation", "depth_metrics", "draw_subsets", "early_check",
    "early_epoch", "epoch_mean_lrs", "evaluate_unlearning", "f1", "f1_band", "feature_metrics",
    "holdout_split", "identity_summary", "judge_targets", "load_data", "main_fraction", "main_metrics",
    "main_size", "method_config", "model_outputs", "model_outputs_all", "reference_state", "regime",
    "regime_text", "sensitivity_row", "sensitivity_table", "setup_text", "size_sweep", "sizes_table",
    "spread_analysis", "subset_list", "table1", "table2",
    "table3", "train_model", "training_costs", "unlearn_all", "variant_table",
]
