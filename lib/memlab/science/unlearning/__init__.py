"""Unlearning methods behind one registry (see :mod:`memlab.science.unlearning.registry`).

Every module in this package registers its methods when imported; ``registry.get``
and ``registry.names`` import them all.
"""
from memlab.science.unlearning.registry import Method, Splits, get, names, register  # noqa: F401
