"""Chapter 3: auditing reasoning-trace memorisation after unlearning.

The package's parts: ``spec`` (parameters and checks), ``stages`` (data, cached models,
probes), ``tables`` (tables and recorded metric groups, the audited-K rule) and ``claims``
(the paper's claims). The probes themselves live in :mod:`memlab.science.canaries`, the language-model
training and LoRA pieces in :mod:`memlab.models.lm`. Every name the notebook, the exercises, the
tests and chapter 6 use is re-exported here: ``from memlab.experiments import
ch03_canary_audit as ch`` then ``ch.prepare``, ``ch.audit_state``, ``ch.claims``, ...
"""
from memlab.science.canaries import deepseek_format
from memlab.data import authors as A
from memlab.data.text import wikitext_sentences
from memlab.models.lm import LORA_TARGETS

from .claims import JUDGED, METRIC_KEYS, TF_DROP, claims
from .spec import (CHAPTER, CHECKS, CODE_VERSION, DRIFT_MODEL, PAPER_MODEL, REAL_SETTING, SMALL, SPEC, SUPPRESS,
                   real_command)
from .stages import (
    ARMS, BIO_ARMS, COMPLETE_TRACE, GENERIC_TRACE, OTHER_ARMS, TRAIN_SECONDS, Setup, attach, author_examples,
    chat_format_for, detach, drift_outputs, evaluate_arms, generic_examples, memorise, prepare,
    pretrain_small, retain_examples, run_sweep, side_grid, summarise, unlearn_sweep,
)
from .tables import (
    AUDIT_OUT_FRAC, AUDIT_THK_FRAC, Z95, anatomy_table, audit_band, audit_state, bypass_examples,
    jsonable_summary, ksweep_frame, ksweep_metrics, parser_flip_section, parser_flip_table, prefill_tables,
    regime_frame, regime_sentence, render_sections, retain_examples_with_names, retain_metrics, template_frame,
    templates_metrics, variant_table,
)

__all__ = [
    "A", "ARMS", "AUDIT_OUT_FRAC", "AUDIT_THK_FRAC", "BIO_ARMS", "CHAPTER", "CHECKS", "CODE_VERSION",
    "COMPLETE_TRACE", "DRIFT_MODEL", "GENERIC_TRACE", "JUDGED", "LORA_TARGETS", "METRIC_KEYS", "OTHER_ARMS",
    "PAPER_MODEL", "REAL_SETTING", "SMALL", "SPEC", "SUPPRESS", "Setup", "TF_DROP", "TRAIN_SECONDS", "Z95", "anatomy_table",
    "attach", "audit_band", "audit_state", "author_examples", "bypass_examples", "chat_format_for", "claims",
    "deepseek_format", "detach", "drift_outputs", "evaluate_arms", "generic_examples",
    "jsonable_summary", "ksweep_frame", "ksweep_metrics", "memorise", "parser_flip_section",
    "parser_flip_table", "prefill_tables", "prepare", "pretrain_small", "real_command", "regime_frame", "regime_sentence", "render_sections",
    "retain_examples", "retain_examples_with_names", "retain_metrics", "run_sweep", "side_grid", "summarise",
    "template_frame", "templates_metrics", "unlearn_sweep", "variant_table", "wikitext_sentences",
]
