"""Chapter 6: one model, many lenses — the papers' measurements turned on each other's models.

No paper of its own: the chapter takes the models chapters 1 and 3 train and cache and looks at
them with the other papers' measuring instruments, then judges the book's pre-registered
hypotheses (``data/papers/06_cross_lens.yaml``, committed before the first run).

* :mod:`.spec` — ``CHAPTER``, ``CODE_VERSION``, ``SPEC``, ``CHECKS``, ``ILLUSION_PP``, :func:`hypotheses`;
* :mod:`.stages` — the vision lenses, the LM lenses and the lenses' rank agreement, as plain data;
* :mod:`.tables` — what the page records and shows;
* :mod:`.claims` — ``METRIC_KEYS``, the predicates and :func:`claims`.

The lenses themselves (code lengths, membership scores, SDE on a forget set, Kendall tau) live in
:mod:`memlab.science.lenses`.
"""
from memlab.science.lenses import membership_aucs, sde_out_of_training

from .claims import CONTROL_PP, JUDGED, METRIC_KEYS, claims
from .spec import CHAPTER, CHECKS, CODE_VERSION, ILLUSION_PP, SPEC, hypotheses
from .stages import (LM_LENSES, VISION_COLS, VISION_LENSES, agreement, audited_state, forget_otr, fresh_authors,
                     lm_lenses, lm_probe_sets, nonmember_images, sde_subsets, sub_configs, vision_lens_frame,
                     vision_lenses)
from .tables import (GAP_UNITS, VERDICT_WORDS, VISION_SHOWN, agreement_metrics, gaps_text, hypotheses_table, short_titles,
                     lm_frame, lm_metrics, preregistration, published_gaps, question_summary, tau_record,
                     tau_tests_table, vision_metrics, vision_record, vision_tables)

__all__ = [
    "CHAPTER", "CHECKS", "CODE_VERSION", "CONTROL_PP", "GAP_UNITS", "ILLUSION_PP", "JUDGED", "LM_LENSES",
    "METRIC_KEYS", "SPEC", "VERDICT_WORDS", "VISION_COLS", "VISION_LENSES", "VISION_SHOWN", "agreement",
    "agreement_metrics", "audited_state", "claims", "forget_otr", "fresh_authors", "gaps_text", "hypotheses",
    "hypotheses_table", "short_titles", "lm_frame", "lm_lenses", "lm_metrics", "lm_probe_sets", "membership_aucs",
    "nonmember_images", "preregistration", "published_gaps", "question_summary", "sde_out_of_training",
    "sde_subsets", "sub_configs", "tau_record", "tau_tests_table", "vision_lens_frame", "vision_lenses",
    "vision_metrics", "vision_record", "vision_tables",
]
