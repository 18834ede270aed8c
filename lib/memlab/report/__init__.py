"""Layer report: what a reader sees.

The papers' numbers and verdicts (``paper``), pooling over seeds, the page kit that writes each
chapter's boxes, tables and figures, summaries of sweeps, robustness and stability across seeds,
comparison of runs, the GPU evidence section, and the book render.

May import: core, data, models, science.
"""
