"""Layer course: the otter-graded course kit.

Exercises built from their masters and graded (``exercises``), the student bundle (``bundle``) and
feedback on a submission (``feedback``).

May import: core, data, models, science, report, experiments, run.
"""
