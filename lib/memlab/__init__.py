"""memlab: the shared library of the memorization and unlearning companion book.

Its subpackages are layers, lowest first (``LAYERS``): a module imports from its own layer and
the layers before it, never from one after it (``tests/test_layout.py`` enforces it). ``cli`` sits
on top. Each subpackage's docstring says what it holds and what it may import; CONTRIBUTING.md's
"Where things live" lists every module (a test keeps it in step with the tree).
"""
import os as _os

__version__ = "0.1.0"

LAYERS = ("core", "data", "models", "science", "report", "experiments", "run", "course")

from memlab.core import legacy_names as _legacy_names  # noqa: E402

_legacy_names.install()  # the old flat names, for student notebooks written before the layers

if _os.environ.get("MEMLAB_OFFLINE") == "1":  # tests run chapters with the network off
    from memlab.core import netguard as _netguard

    _netguard.install()
