"""Layer run: running chapters.

Preflight checks, one chapter through papermill (``runner``), the whole book (``bookrun``), sweeps
on Dask (``sweep``) and the GPU evidence job (``gpu_evidence``).

May import: core, data, models, science, report, experiments.
"""
