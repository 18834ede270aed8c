"""A technical-English corpus available offline everywhere: docstrings of the Python standard library.

Chapter 4 needs fine-tuning text from a domain other than WikiText that every machine
has without a download, and a disjoint share of the same domain for its base's
pre-training (:func:`split_corpus`). The standard library's
docstrings are such a text: English prose about programming, read at runtime with
:func:`inspect.getdoc` from a fixed list of pure-Python modules. The text is the
same on every machine with the same Python version (``platform.python_version()``,
recorded in each result's provenance); platform-specific modules (``os``,
``socket``, ...) are left out so that it does not depend on the operating system.
"""
from __future__ import annotations

import hashlib
import platform
import sys

# Pure-Python (or C-accelerated but platform-independent) modules with rich documentation,
# in a fixed order. Only modules every CPython build ships; none is imported for its side effects.
MODULES: tuple[str, ...] = (
    "argparse", "ast", "base64", "bisect", "calendar", "collections", "configparser", "contextlib", "copy",
    "csv", "dataclasses", "datetime", "decimal", "difflib", "email.message", "enum", "fractions", "functools",
    "gettext", "heapq", "html.parser", "http.client", "inspect", "ipaddress", "itertools", "json", "logging",
    "mailbox", "numbers", "operator", "optparse", "pickle", "pprint", "queue", "random", "re", "sched",
    "secrets", "shlex", "smtplib", "statistics", "string", "struct", "tarfile", "textwrap", "threading",
    "timeit", "tokenize", "traceback", "typing", "unittest.case", "urllib.parse", "uuid", "warnings",
    "weakref", "zipfile",
)


# The collector runs in a fresh interpreter (``python -I -S``: no site packages, no user
# environment) because libraries imported here change what the standard library holds: torch,
# IPython and others replace functions of ``inspect``, ``warnings`` or ``logging`` by their own,
# which would drop or add docstrings depending on what the calling process imported before.
_COLLECT = r"""
import importlib, inspect, json, platform, sys

def public_members(mod):
    out = []
    for name in sorted(vars(mod)):
        if name.startswith("_"):
            continue
        obj = vars(mod)[name]
        own = getattr(obj, "__module__", None) == mod.__name__
        if not (own and (inspect.isclass(obj) or inspect.isroutine(obj))):
            continue
        out.append(obj)
        if inspect.isclass(obj):
            out += [m for n, m in sorted(vars(obj).items())
                    if not n.startswith("_") and (inspect.isroutine(m) or isinstance(m, property))]
    return out

seen, out = set(), []
for name in json.loads(sys.argv[1]):
    try:
        mod = importlib.import_module(name)
    except ImportError as err:
        sys.exit(f"docstring corpus: standard-library module {name!r} cannot be imported "
                 f"on Python {platform.python_version()} ({err})")
    for obj in [mod] + public_members(mod):
        doc = inspect.getdoc(obj)
        if not doc or len(doc.split()) < 5 or doc in seen:
            continue
        seen.add(doc)
        paras = [" ".join(p.split()) for p in doc.split("\n\n")]
        out.append("\n".join(p for p in paras if p))
json.dump(out, sys.stdout)
"""


def docstrings(modules=MODULES) -> list[str]:
    """The docstrings of ``modules`` (module, then its public classes, functions and methods), deduplicated.

    Each docstring is cleaned by :func:`inspect.getdoc` and its lines joined with
    single spaces (paragraph breaks kept as newlines). They are read in a fresh
    interpreter of this Python (see ``_COLLECT``; never with -OO, which strips
    docstrings), so the text depends only on the Python version.
    """
    import json
    import subprocess

    res = subprocess.run([sys.executable, "-I", "-S", "-c", _COLLECT, json.dumps(list(modules))],
                         capture_output=True, text=True, env={}, timeout=300)
    if res.returncode != 0:
        raise RuntimeError(res.stderr.strip().splitlines()[-1] if res.stderr.strip()
                           else f"docstring corpus: collector exited with {res.returncode}")
    return json.loads(res.stdout)


def docstring_corpus(modules=MODULES) -> str:
    """All docstrings of :func:`docstrings` as one text, separated by blank lines."""
    return "\n\n".join(docstrings(modules))


# The domain is split by module: the base's pre-training reads one half (so it knows the domain, as
# LLaDA's web-scale pre-training knows WikiText's), the fine-tuning members and non-members come from
# the other half, whose texts it has never seen.
PRETRAIN_MODULES: tuple[str, ...] = MODULES[0::2]
GAP_MODULES: tuple[str, ...] = MODULES[1::2]


def split_corpus() -> tuple[str, str]:
    """(pre-training share, fine-tuning share): the docstrings of :data:`PRETRAIN_MODULES` and of
    :data:`GAP_MODULES` as two texts; a docstring both halves hold (an inherited one) is kept only in the
    pre-training share, so no fine-tuning text was pre-trained on."""
    pre = docstrings(PRETRAIN_MODULES)
    seen = set(pre)
    return "\n\n".join(pre), "\n\n".join(d for d in docstrings(GAP_MODULES) if d not in seen)


def corpus_info(text: str, modules=MODULES) -> dict:
    """What identifies a corpus in a result: Python version, module count, size and a content hash."""
    return {"python": platform.python_version(), "modules": len(modules), "chars": len(text),
            "words": len(text.split()), "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]}
