"""Layer science: each paper's methods and measurements, taking tensors and models.

``bn`` (BatchNorm recalibration audit), ``sde`` (split-half dependence), ``probes`` (linear probes,
relearning, confidence attacks), ``unlearning`` (the unlearning methods), ``canaries`` (canary
audits), ``mia`` (Q-Skew and the membership baselines), ``capacity`` (memorisation bits and
capacity), ``lenses`` (the cross-paper lenses), ``metrics`` (ROC, bands, bootstraps).

May import: core, data, models.
"""
