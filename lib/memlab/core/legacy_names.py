"""The one compatibility shim: the module names the exercises imported before the library had layers.

A student's notebook written against the flat layout (``from memlab import sde``,
``from memlab.exercises import runs_dir``) still imports, so the autograder grades a submission made
before the move; each such import warns with the new name. Only the names an exercise handed to
students used are here (the exercise masters' imports at the move); nothing in the project uses them
(``tests/test_layout.py`` checks), and no name is added for new code.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# old top-level module -> its module now; a submodule of an old package follows its package
OLD_TO_NEW = {
    "memlab.bn": "memlab.science.bn",
    "memlab.canaries": "memlab.science.canaries",
    "memlab.capacity": "memlab.science.capacity",
    "memlab.metrics": "memlab.science.metrics",
    "memlab.mia": "memlab.science.mia",
    "memlab.sde": "memlab.science.sde",
    "memlab.unlearning": "memlab.science.unlearning",
    "memlab.lm": "memlab.models.lm",
    "memlab.exercises": "memlab.course.exercises",
}


def new_name(old: str) -> str | None:
    """The module an old name now lives at (``memlab.unlearning.npo`` -> ``memlab.science.unlearning.npo``)."""
    for prefix, target in OLD_TO_NEW.items():
        if old == prefix or old.startswith(prefix + "."):
            return target + old[len(prefix):]
    return None


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name and loads it as the module now holding it (the same module object)."""

    def find_spec(self, fullname, path=None, target=None):
        if new_name(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return None  # a placeholder; exec_module puts the real module in its place

    def exec_module(self, module):
        new = new_name(module.__name__)
        warnings.warn(f"{module.__name__} is now {new}; the old name is kept only for notebooks written "
                      "before the library had layers", DeprecationWarning, stacklevel=2)
        # the import system returns whatever sys.modules holds under the name once this returns
        sys.modules[module.__name__] = importlib.import_module(new)


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once), ahead of the path finder that would load a
    second copy of a module under its old name."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias())
