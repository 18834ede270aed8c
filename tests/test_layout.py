"""The library's layout rules, read from the source (AST): who may import whom, and how big a chapter file may be.

CONTRIBUTING.md states the rules; this test is how they stay true:

- science modules (everything in ``lib/memlab`` outside ``experiments/`` and the orchestration
  modules) never import ``memlab.experiments``;
- chapter packages never import the orchestration modules (cli, runner, sweep, book, robustness);
- no import cycle anywhere in ``lib/memlab`` (function-level imports included: a cycle deferred
  into a function is still a cycle a reader has to untangle);
- every chapter is a package of the same shape (spec, stages, tables, claims), no file of it
  over ``MAX_CHAPTER_FILE_LINES`` lines;
- every science function a chapter calls has a docstring, one that gives shapes or units where it
  takes or returns tensors or arrays;
- the chapter fingerprint covers every file of the package.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from memlab.chapters import CHAPTERS

LIB = Path(__file__).resolve().parents[1] / "lib" / "memlab"
ORCHESTRATION = {"memlab.cli", "memlab.runner", "memlab.sweep", "memlab.book", "memlab.robustness",
                 "memlab.publish", "memlab.relay", "memlab.exercises", "memlab.bundle", "memlab.feedback"}
# The library's plumbing: configuration, caching, results, pages. Not science, but not allowed to
# import the chapters either.
INFRASTRUCTURE = {"memlab.cache", "memlab.config", "memlab.paper", "memlab.results", "memlab.plotting",
                  "memlab.tables", "memlab.progress", "memlab.notices", "memlab.fsutil", "memlab.netguard",
                  "memlab.preflight", "memlab.pagekit", "memlab.bibstyle", "memlab.data.download",
                  "memlab.models.hub"}
PACKAGE_FILES = {"__init__.py", "spec.py", "stages.py", "tables.py", "claims.py"}
MAX_CHAPTER_FILE_LINES = 420
# Words a docstring uses when it says what shape or unit a tensor or array has.
SHAPE_WORDS = re.compile(r"shape|\(n|\[n|\(b|\[b|\bN\b|\bB\b|\bT\b|\bV\b|batch|vector|matrix|scalar|"
                         r"bits|nats|%|\bpp\b|seconds|probabilit|fraction|per (?:token|example|row|sample)",
                         re.IGNORECASE)
ARRAY_TYPES = re.compile(r"Tensor|ndarray")


def module_name(path: Path) -> str:
    rel = path.relative_to(LIB.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(LIB.rglob("*.py")) if "__pycache__" not in p.parts}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every memlab module ``name`` imports, at any depth of its code (relative imports resolved)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def add(target: str) -> None:
        # "from memlab import a" names module memlab.a; "import memlab.a.b" names memlab.a.b.
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("memlab"):
                    add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("memlab"):
                continue
            for alias in node.names:
                full = f"{mod}.{alias.name}"
                add(full if full in known else mod)
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def is_chapter(name: str) -> bool:
    return name.startswith("memlab.experiments.ch")


def is_science(name: str) -> bool:
    return (not name.startswith("memlab.experiments") and name not in ORCHESTRATION
            and name not in {"memlab", "memlab.chapters"})


def test_the_import_scanner_sees_relative_and_function_level_imports(tmp_path):
    pkg = tmp_path / "memlab" / "experiments" / "chx"
    pkg.mkdir(parents=True)
    src = pkg / "claims.py"
    src.write_text("from .spec import A\n\ndef f():\n    from memlab import sweep\n    import memlab.cli\n")
    known = {"memlab.experiments.chx.spec", "memlab.experiments.chx.claims", "memlab.sweep", "memlab.cli",
             "memlab", "memlab.experiments", "memlab.experiments.chx"}
    global LIB
    saved, LIB = LIB, tmp_path / "memlab"
    try:
        assert imports_of("memlab.experiments.chx.claims", src, known) == {
            "memlab.experiments.chx.spec", "memlab.sweep", "memlab.cli"}
    finally:
        LIB = saved


def test_science_modules_never_import_the_chapters(graph):
    bad = {m: sorted(t for t in targets if t.startswith("memlab.experiments"))
           for m, targets in graph.items() if is_science(m)}
    assert not {m: t for m, t in bad.items() if t}, "science modules importing chapter code"


def test_chapter_packages_never_import_the_orchestration(graph):
    bad = {m: sorted(targets & ORCHESTRATION) for m, targets in graph.items() if is_chapter(m)}
    assert not {m: t for m, t in bad.items() if t}


def test_no_import_cycle_in_the_library(graph):
    # Tarjan's strongly connected components; any component of two or more modules is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            # A package importing its own submodules (an __init__ re-export) is not a cycle
            # unless a submodule imports the package back, which the edge w -> v then shows.
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    import sys

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("chapter", sorted(CHAPTERS))
def test_every_chapter_is_a_package_of_the_same_shape(chapter):
    folder = LIB / "experiments" / CHAPTERS[chapter].module.rpartition(".")[2]
    assert folder.is_dir(), f"{chapter}: expected the package {folder.relative_to(LIB.parent)}/"
    names = {p.name for p in folder.glob("*.py")}
    assert PACKAGE_FILES <= names, f"{chapter}: missing {sorted(PACKAGE_FILES - names)}"
    long = {p.name: n for p in folder.glob("*.py") if (n := len(p.read_text().splitlines())) > MAX_CHAPTER_FILE_LINES}
    assert not long, f"{chapter}: files over {MAX_CHAPTER_FILE_LINES} lines: {long}"


def science_calls(chapter_files: list[Path]) -> set[tuple[str, str]]:
    """(module, function) of every ``from memlab.<science> import f`` / ``<alias>.f(...)`` a chapter uses."""
    mods = modules()
    out: set[tuple[str, str]] = set()
    for path in chapter_files:
        tree = ast.parse(path.read_text())
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("memlab") and not node.level:
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    if full in mods:
                        aliases[a.asname or a.name] = full
                    elif node.module in mods and is_science(node.module):
                        out.add((node.module, a.name))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in mods and a.asname:
                        aliases[a.asname] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and is_science(aliases[node.value.id])):
                out.add((aliases[node.value.id], node.attr))
    return out


def is_method_module(name: str) -> bool:
    """A module holding a paper's methods or metrics (what CONTRIBUTING calls a science module)."""
    return is_science(name) and name not in INFRASTRUCTURE


def test_every_science_function_a_chapter_calls_says_its_shapes():
    import importlib
    import inspect

    files = [p for p in (LIB / "experiments").rglob("*.py") if "__pycache__" not in p.parts]
    missing = []
    for mod, name in sorted(science_calls(files)):
        if not is_method_module(mod):
            continue
        obj = getattr(importlib.import_module(mod), name, None)
        if not (inspect.isfunction(obj) and obj.__module__.startswith("memlab")):
            continue  # constants, classes, re-exported library functions
        doc = inspect.getdoc(obj) or ""
        # A function that takes or returns tensors/arrays must say their shapes or units; any
        # other science function needs at least a docstring.
        takes_arrays = bool(ARRAY_TYPES.search(str(inspect.signature(obj))))
        if not doc or (takes_arrays and not SHAPE_WORDS.search(doc)):
            missing.append(f"{mod}.{name}")
    assert not missing, f"science functions without a docstring giving shapes/units: {missing}"


def test_the_fingerprint_covers_every_file_of_a_chapter_package(tmp_path, monkeypatch):
    import sys

    from memlab import chapters, results

    pkg = tmp_path / "fakechap"
    pkg.mkdir()
    for f in PACKAGE_FILES:
        (pkg / f).write_text(f"# {f}\n")
    nb = tmp_path / "notebooks" / "99_fake.py"
    nb.parent.mkdir()
    nb.write_text("# %%\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(chapters.CHAPTERS, "99_fake", chapters.Chapter("99_fake", "Fake", "fakechap", ""))
    monkeypatch.setattr("memlab.config.repo_root", lambda: tmp_path)
    sys.modules.pop("fakechap", None)
    before = results.chapter_code("99_fake")
    assert before is not None
    (pkg / "claims.py").write_text("# claims, changed\n")
    assert results.chapter_code("99_fake") != before
    (pkg / "claims.py").write_text("# claims.py\n")
    assert results.chapter_code("99_fake") == before
    nb.write_text("# %% changed\n")
    assert results.chapter_code("99_fake") != before
