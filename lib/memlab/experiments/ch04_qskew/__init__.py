"""Chapter 4 (Q-Skew): membership inference and PII reconstruction on fine-tuned diffusion LMs.

``notebooks/04_qskew.py`` runs it as ``from memlab.experiments import ch04_qskew as ch``; every name it
and the tests use is re-exported here. The package holds:

* :mod:`.spec`: parameters (``SPEC``, ``CHECKS``), the chapter id, the context guard, metric columns;
* :mod:`.stages`: tokenizer, cached base/instruct and fine-tuned models, the experiments' runs;
* :mod:`.tables`: the paper's tables and the metric groups the notebook records;
* :mod:`.claims`: metric keys, the claims' predicates and the one definition of the best baseline.

The scores live in :mod:`memlab.science.mia` (with the PII attack, :func:`memlab.science.mia.reconstruct_pii`), the
ROC rows, AUC band and context regime in :mod:`memlab.science.metrics`, the tokenizer adapters and LoRA
loading in :mod:`memlab.models.diffusion_lm`, the WikiText parsing and token blocks in
:mod:`memlab.data.text`.
"""
from memlab.data.text import INSTRUCTION_PROMPT as PROMPT
from memlab.data.text import instruction_pairs, perturb, stream_blocks
from memlab.science.metrics import auc_variance
from memlab.science.mia import pii_memorisation
from memlab.models.diffusion_lm import Codec

from .claims import (GAIN_MIN, HEADLINE, MEASURED, METRIC_KEYS, MISMATCH_COST, NEAR_ZERO, auc_diff_band,
                     best_baseline, best_of, claims, paper_mean_gain)
from .spec import CHAPTER, CHECKS, CODE_VERSION, FPRS, METRICS, SPEC, ContextGuardError, check_context
from .stages import (REGIME_BLOCKS, DomainRuns, InstructionRuns, RunMetrics, Setup, _metrics,
                     asymmetry_experiment, domain_experiment, finetune, instruction_experiment, model_paths,
                     pii_experiment, prepare, regime)
from .tables import (OUR_SETTINGS, PAPER_SETTINGS, TABLE4_SIDES, ablation_metrics, asymmetry_metrics,
                     baseline_level_metrics, baseline_level_table, delta_metrics, delta_table, domain_metrics,
                     figure2_table, instruction_metrics, level_bound, mean_table, na_cells, paper_baseline_levels,
                     pii_metrics,
                     pooled_deltas, regime_table, sequence_bootstrap_se, skew_gap_band, skew_zero_band, supported,
                     sweep_metrics, table1, table2, table4, table4_metrics, table5, table6, closing_regime)

__all__ = [
    "CHAPTER", "CHECKS", "CODE_VERSION", "FPRS", "GAIN_MIN", "HEADLINE", "MEASURED", "METRICS", "METRIC_KEYS",
    "MISMATCH_COST", "NEAR_ZERO", "OUR_SETTINGS", "PAPER_SETTINGS", "PROMPT",
    "REGIME_BLOCKS", "SPEC", "TABLE4_SIDES", "Codec", "ContextGuardError", "DomainRuns", "InstructionRuns",
    "RunMetrics", "Setup", "_metrics", "ablation_metrics", "asymmetry_experiment", "asymmetry_metrics",
    "auc_diff_band", "auc_variance", "baseline_level_metrics", "baseline_level_table", "best_baseline", "best_of",
    "check_context", "claims", "closing_regime", "delta_metrics",
    "delta_table", "domain_experiment", "domain_metrics", "figure2_table", "finetune", "instruction_experiment",
    "instruction_metrics", "instruction_pairs", "level_bound", "mean_table", "model_paths", "na_cells", "perturb",
    "paper_baseline_levels", "paper_mean_gain", "pii_experiment", "pii_memorisation", "pii_metrics",
    "pooled_deltas", "prepare", "regime",
    "regime_table",
    "sequence_bootstrap_se", "skew_gap_band", "skew_zero_band", "stream_blocks", "supported", "sweep_metrics", "table1", "table2", "table4",
    "table4_metrics", "table5",
    "table6",
]
