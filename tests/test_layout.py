"""The library's layout rules, read from the source (AST): which folder a module sits in, who may
import whom, and how big a chapter file may be.

CONTRIBUTING.md states the rules ("Where things live"); this test is how they stay true:

- ``lib/memlab`` holds ``__init__.py``, ``cli.py`` and one folder per layer of ``memlab.LAYERS``,
  nothing else (``py.typed``, the PEP 561 marker, aside); a module anywhere else fails with one line
  saying which layer's folder it belongs in;
- each layer's ``__init__`` docstring names the layer and the layers it may import;
- a module imports only from its own layer and the layers before it in ``memlab.LAYERS``
  (function-level imports included): science, models and data never import report, run, course or
  the chapters; report never imports run; the chapters never import run or course;
- no import cycle anywhere in ``lib/memlab`` (function-level imports included: a cycle deferred
  into a function is still a cycle a reader has to untangle);
- every chapter is a package of the same shape (spec, stages, tables, claims), no file of it
  over ``MAX_CHAPTER_FILE_LINES`` lines;
- every science function a chapter calls has a docstring, one that gives shapes or units where it
  takes or returns tensors or arrays;
- CONTRIBUTING.md's "Where things live" lists every module of every layer, and no other;
- the chapter fingerprint covers every file of the package.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from memlab import LAYERS
from memlab.core.chapters import CHAPTERS

LIB = Path(__file__).resolve().parents[1] / "lib" / "memlab"
CONTRIBUTING = LIB.parents[1] / "CONTRIBUTING.md"
TOP = "cli"  # the command line sits above every layer
OUTSIDE_LAYERS = {"__init__.py", f"{TOP}.py", "py.typed", "__pycache__"}
# Modules of the lower layers that are machinery rather than a paper's method or measurement.
MACHINERY = {"memlab.data.download", "memlab.models.hub"}
PACKAGE_FILES = {"__init__.py", "spec.py", "stages.py", "tables.py", "claims.py"}
MAX_CHAPTER_FILE_LINES = 420
# Words a docstring uses when it says what shape or unit a tensor or array has.
SHAPE_WORDS = re.compile(r"shape|\(n|\[n|\(b|\[b|\bN\b|\bB\b|\bT\b|\bV\b|batch|vector|matrix|scalar|"
                         r"bits|nats|%|\bpp\b|seconds|probabilit|fraction|per (?:token|example|row|sample)",
                         re.IGNORECASE)
ARRAY_TYPES = re.compile(r"Tensor|ndarray")


def module_name(path: Path, lib: Path | None = None) -> str:
    rel = path.relative_to((lib or LIB).parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules(lib: Path | None = None) -> dict[str, Path]:
    lib = lib or LIB
    return {module_name(p, lib): p for p in sorted(lib.rglob("*.py")) if "__pycache__" not in p.parts}


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


def import_graph(lib: Path | None = None) -> dict[str, set[str]]:
    mods = modules(lib)
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def layer_of(name: str) -> str | None:
    """The layer a module sits in (``memlab.science.sde`` -> "science"), ``TOP`` for the command line,
    "memlab" for the package itself, None for a module outside every layer's folder."""
    parts = name.split(".")
    if parts == ["memlab"]:
        return "memlab"
    if parts == ["memlab", TOP]:
        return TOP
    return parts[1] if parts[1] in LAYERS else None


def rank(layer: str) -> int:
    """Position in the layer order; the package itself comes first, the command line last."""
    return -1 if layer == "memlab" else len(LAYERS) if layer == TOP else LAYERS.index(layer)


def home(targets: set[str]) -> str:
    """The lowest layer whose modules may import every one of ``targets``."""
    ranks = [rank(layer) for t in targets if (layer := layer_of(t)) not in (None, "memlab")]
    return LAYERS[max(ranks, default=0)]


def misplaced(graph: dict[str, set[str]], lib: Path | None = None) -> list[str]:
    """One line per module outside every layer's folder, naming the folder it belongs in."""
    lib = lib or LIB
    out = []
    for name, targets in sorted(graph.items()):
        if layer_of(name) is None:
            where = home(targets)
            out.append(f"{name.replace('.', '/')}.py sits outside the layers: by what it imports it belongs in "
                       f"lib/memlab/{where}/ (or a later layer's folder: {', '.join(LAYERS[LAYERS.index(where):])})")
    for entry in sorted(p.name for p in lib.iterdir()):
        if entry not in OUTSIDE_LAYERS and entry not in LAYERS and not entry.endswith(".py"):
            out.append(f"lib/memlab/{entry} is neither a layer ({', '.join(LAYERS)}) nor {TOP}.py")
    return out


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """One line per import of a later layer, naming where the importing module would belong."""
    out = []
    for name, targets in sorted(graph.items()):
        layer = layer_of(name)
        if layer is None:
            continue  # reported by misplaced()
        allowed = "core" if layer == "memlab" else layer  # the package's __init__ may use core only
        for t in sorted(targets):
            if layer_of(t) is not None and layer_of(t) != "memlab" and rank(layer_of(t)) > rank(allowed):
                below = ", ".join(LAYERS[: rank(allowed)]) or "nothing else of memlab"
                out.append(f"{name} imports {t}: {allowed} may import {allowed} and {below}; "
                           f"move it to lib/memlab/{layer_of(t)}/ or later, or move what it uses down")
    return out


def test_the_import_scanner_sees_relative_and_function_level_imports(tmp_path):
    pkg = tmp_path / "memlab" / "experiments" / "chx"
    pkg.mkdir(parents=True)
    src = pkg / "claims.py"
    src.write_text("from .spec import A\n\ndef f():\n    from memlab.run import sweep\n    import memlab.cli\n")
    known = {"memlab.experiments.chx.spec", "memlab.experiments.chx.claims", "memlab.run.sweep", "memlab.cli",
             "memlab", "memlab.experiments", "memlab.experiments.chx", "memlab.run"}
    assert imports_of("memlab.experiments.chx.claims", src, known) == {
        "memlab.experiments.chx.spec", "memlab.run.sweep", "memlab.cli"}


def test_lib_memlab_holds_the_layers_and_the_command_line_only(graph):
    assert len(LAYERS) <= 8, "at most 8 layers: a folder a newcomer can map in ten minutes"
    assert {p.name for p in LIB.iterdir()} - OUTSIDE_LAYERS == set(LAYERS)
    problems = misplaced(graph)
    assert not problems, "\n".join(problems)


def test_no_module_imports_a_later_layer(graph):
    problems = upward_imports(graph)
    assert not problems, "\n".join(problems)


def test_a_constructed_violation_fails_with_one_line_saying_where_it_belongs(tmp_path):
    lib = tmp_path / "memlab"
    for layer in LAYERS:
        (lib / layer).mkdir(parents=True)
        (lib / layer / "__init__.py").write_text("")
    (lib / "__init__.py").write_text("")
    (lib / "run" / "runner.py").write_text("")
    (lib / "report" / "pagekit.py").write_text("")
    (lib / "science" / "sde.py").write_text("def f():\n    from memlab.run.runner import run_chapter\n")
    (lib / "report" / "page.py").write_text("from memlab.run import runner\n")
    (lib / "helpers.py").write_text("from memlab.report import pagekit\n")
    g = import_graph(lib)
    up = upward_imports(g)
    assert up == [
        "memlab.report.page imports memlab.run.runner: report may import report and core, data, models, "
        "science; move it to lib/memlab/run/ or later, or move what it uses down",
        "memlab.science.sde imports memlab.run.runner: science may import science and core, data, models; "
        "move it to lib/memlab/run/ or later, or move what it uses down"]
    assert misplaced(g, lib) == [
        "memlab/helpers.py sits outside the layers: by what it imports it belongs in lib/memlab/report/ "
        f"(or a later layer's folder: {', '.join(LAYERS[LAYERS.index('report'):])})"]


def test_each_layer_says_what_it_holds_and_may_import():
    import importlib

    for i, layer in enumerate(LAYERS):
        doc = importlib.import_module(f"memlab.{layer}").__doc__ or ""
        assert doc.startswith(f"Layer {layer}: "), f"memlab/{layer}/__init__.py: docstring must open 'Layer {layer}: '"
        may = re.search(r"^May import: (.*)$", doc, re.M)
        expected = ", ".join(LAYERS[:i]) + "." if i else "nothing else of memlab."
        assert may and may.group(1) == expected, f"memlab/{layer}: 'May import: {expected}' expected"


def test_where_things_live_lists_every_module():
    """CONTRIBUTING.md's "Where things live": one row per layer, its modules in backticks, in step with the tree."""
    text = CONTRIBUTING.read_text()
    section = text.split("## Where things live", 1)[1].split("\n## ", 1)[0]
    rows = {m.group(1): set(re.findall(r"`([\w/]+)`", m.group(2)))
            for m in re.finditer(r"^\| `(\w+)/` \|[^|]*\|(.*)\|\s*$", section, re.M)}
    assert list(rows) == list(LAYERS), "one row per layer, in the order of memlab.LAYERS"
    for layer in LAYERS:
        tree = {p.stem if p.is_file() else p.name + "/" for p in (LIB / layer).iterdir()
                if p.name not in ("__init__.py", "__pycache__") and (p.suffix == ".py" or p.is_dir())}
        assert rows[layer] == tree, f"CONTRIBUTING.md, {layer}/: listed {sorted(rows[layer] - tree)} " \
                                    f"not in the tree, missing {sorted(tree - rows[layer])}"


def test_the_readme_layout_names_every_layer_in_order():
    text = (LIB.parents[1] / "README.md").read_text()
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    listed = re.findall(r"^  (\w+)/ ", block, re.M)
    assert listed == list(LAYERS), f"README.md's layout lists {listed}, the tree's layers are {list(LAYERS)}"


def is_method_module(name: str) -> bool:
    """A module holding a paper's methods or measurements, or the models and data they take."""
    return layer_of(name) in ("science", "models", "data") and name not in MACHINERY


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
                    elif node.module in mods and is_method_module(node.module):
                        out.add((node.module, a.name))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in mods and a.asname:
                        aliases[a.asname] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and is_method_module(aliases[node.value.id])):
                out.add((aliases[node.value.id], node.attr))
    return out


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

    from memlab.core import chapters, results

    pkg = tmp_path / "fakechap"
    pkg.mkdir()
    for f in PACKAGE_FILES:
        (pkg / f).write_text(f"# {f}\n")
    nb = tmp_path / "notebooks" / "99_fake.py"
    nb.parent.mkdir()
    nb.write_text("# %%\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(chapters.CHAPTERS, "99_fake", chapters.Chapter("99_fake", "Fake", "fakechap", ""))
    monkeypatch.setattr("memlab.core.config.repo_root", lambda: tmp_path)
    sys.modules.pop("fakechap", None)
    before = results.chapter_code("99_fake")
    assert before is not None
    (pkg / "claims.py").write_text("# claims, changed\n")
    assert results.chapter_code("99_fake") != before
    (pkg / "claims.py").write_text("# claims.py\n")
    assert results.chapter_code("99_fake") == before
    nb.write_text("# %% changed\n")
    assert results.chapter_code("99_fake") != before


def test_the_old_flat_names_students_used_still_import_the_same_module_and_warn():
    """The one shim (memlab.core.legacy_names): a notebook written before the layers, as the rehearsal
    submissions in exercises/demo-submissions/ are, still imports (test_exercises grades them)."""
    import importlib
    import sys

    from memlab.core.legacy_names import OLD_TO_NEW

    for old, new in OLD_TO_NEW.items():
        sys.modules.pop(old, None)
        with pytest.warns(DeprecationWarning, match=f"{old} is now {new}"):
            assert importlib.import_module(old) is importlib.import_module(new)
    sys.modules.pop("memlab.unlearning.npo", None)  # a submodule of an old package follows it
    with pytest.warns(DeprecationWarning, match="memlab.unlearning.npo is now memlab.science.unlearning.npo"):
        npo = importlib.import_module("memlab.unlearning.npo")
    assert npo is importlib.import_module("memlab.science.unlearning.npo")


def test_nothing_in_the_project_uses_the_old_flat_names():
    from memlab.core.legacy_names import OLD_TO_NEW

    root = LIB.parents[1]
    files = [p for folder in ("lib", "tests", "benchmarks", "scripts") for p in (root / folder).rglob("*.py")]
    files += sorted((root / "notebooks").glob("*.py")) + sorted((root / "exercises").glob("*.py"))
    known = set(OLD_TO_NEW) | set(modules())
    used = []
    for path in files:
        if "__pycache__" in path.parts or path.name in ("legacy_names.py", "test_layout.py"):
            continue
        for target in imports_of("memlab.x", path, known):
            if target in OLD_TO_NEW:
                used.append(f"{path.relative_to(root)} imports {target}: use {OLD_TO_NEW[target]}")
    assert not used, "\n".join(used)


def test_declared_code_moves_name_the_current_code_of_their_chapters():
    """data/code_moves.yaml: each entry's ``now`` is its chapter's fingerprint today; a chapter changed
    since its move has a stale entry, which must go (its earlier sweep is then stale too)."""
    import yaml

    from memlab.core.results import MOVES_FILE, chapter_code

    moves = yaml.safe_load((LIB.parents[1] / MOVES_FILE).read_text()) or {}
    stale = [f"{ch}: now {m['now']} is not the chapter's code {chapter_code(ch)}; delete the entry"
             for ch, entries in moves.items() for m in entries if m["now"] != chapter_code(ch)]
    assert set(moves) <= set(CHAPTERS) and not stale, "\n".join(stale)


def test_same_code_holds_only_for_a_declared_move_of_the_current_code(tmp_path, monkeypatch):
    from memlab.core import results

    (tmp_path / "data").mkdir()
    (tmp_path / results.MOVES_FILE).write_text("01_x:\n  - now: 'new'\n    was: 'old'\n    why: a move\n")
    monkeypatch.setattr("memlab.core.config.repo_root", lambda: tmp_path)
    monkeypatch.setattr(results, "chapter_code", lambda chapter: "new")
    assert results.same_code("01_x", "old", "new") and results.same_code("01_x", "new", "old")
    assert results.same_code("01_x", "other", "other")
    assert not results.same_code("01_x", "old", "other") and not results.same_code("02_y", "old", "new")
    monkeypatch.setattr(results, "chapter_code", lambda chapter: "changed since")  # the chapter moved on
    assert not results.same_code("01_x", "old", "changed since") and results.earlier_codes("01_x") == set()
