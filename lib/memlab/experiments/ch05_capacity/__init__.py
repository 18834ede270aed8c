"""Chapter 5: capacity of GPT-2 models in bits per parameter (Morris et al., 2025).

The notebook ``notebooks/05_capacity.py`` calls this package as ``ch``: :mod:`.spec` (the
parameters and their checks), :mod:`.stages` (data, training and the cache: the measured runs),
:mod:`.tables` (the tables shown and the metric groups recorded) and :mod:`.claims` (the paper's
claims as predicates). The measurements live in :mod:`memlab.science.capacity`.
"""

from .claims import (
    A1_ERROR_PCT,
    ALPHA_TOL,
    DD_RANGE,
    EXTRACT_TOL,
    LAW_RMSE,
    LINEAR_R2,
    METRIC_KEYS,
    PLATEAU_SHARE,
    PLATEAU_TOL,
    PRECISION_MAX,
    TABLE2_TOL,
    TFIDF_P,
    claims,
)
from .spec import CHAPTER, CHECKS, CODE_VERSION, GPT2_VOCAB, SPEC, dataset_sizes_for, paper_setting
from .stages import (
    a1_runs,
    capacity_sweep,
    epoch_steps,
    law_constants,
    paperlike_run,
    precision_sweep,
    reference_code_lengths,
    synthetic_group,
    text_corpus,
    text_run,
    text_schedule,
    text_sweep,
    tfidf_vs_memorization,
)
from .tables import (
    PAPERLIKE_COLUMNS,
    TEXT_COLUMNS,
    a1_error_table,
    a1_metrics,
    a1_sweep,
    alpha_fit,
    below_capacity_memorised_pct,
    benchmark_throughput,
    capacities,
    capacity_metrics,
    convergence_metrics,
    convergence_model,
    convergence_table,
    cost_metrics,
    double_descent_onsets,
    fit_noise,
    law_fit,
    law_metrics,
    paper_law_f1,
    paper_law_table,
    paperlike_metrics,
    precision_alphas,
    precision_capacities,
    precision_metrics,
    precision_table,
    reference_summary,
    regime_metrics,
    sweep_metrics,
    table2_law,
    table2_metrics,
    text_metrics,
    tfidf_metrics,
    tfidf_run,
    training_cost,
)

__all__ = [name for name in dir() if not name.startswith("_")]
