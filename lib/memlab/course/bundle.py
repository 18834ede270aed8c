"""The student bundle: what students install and work in, with no exercise master inside.

``memlab exercises build`` writes it beside the per-chapter build (memlab.course.exercises):

    <out>/memlab-course/                   the bundle: a course folder students work in
        README.md                          install (one command), data, where runs go
        pyproject.toml                     marks the course folder ([tool.memlab] only, not a package)
        book/                              where `memlab run` publishes when no --book-dir is given
        memlab-<version>-py3-none-any.whl  the library: lib/memlab's modules, nothing else
        assignments/<chapter>.ipynb        the student notebooks (no solutions, public tests only)
        notebooks/<chapter>.py             the chapter sources `memlab run` executes (open exercises)
        data/papers/*.yaml, data/generic_probes.csv   what those chapters read
    <out>/memlab-course.zip                the same folder, zipped
    <out>/student-zips/<id>.zip            with --roster: the bundle with that student's variants

The wheel is built from the *running* library (so students run the code the autograder runs) in a
temporary tree holding only its ``.py`` files and ``py.typed``, with a ``pyproject.toml`` written
from the installed distribution's metadata (the same pins); nothing of ``exercises/`` can reach it.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from memlab.core.config import ConfigError, installed_repository

BUNDLE = "memlab-course"
RUNS_ENV, RUNS_DEFAULT = "MEMLAB_RUNS", "~/memlab-runs"  # where a student's open-exercise runs go
ZIP_NAME = "memlab-course.zip"
ROSTER_ZIPS = "student-zips"
# The one install command, run in the bundle folder (the glob is the bundle's single wheel).
INSTALL = "python3 -m venv .venv && .venv/bin/python -m pip install memlab-*.whl"
# Files of the project a chapter run reads (besides its notebooks/<id>.py source).
COURSE_DATA = ("data/generic_probes.csv",)
MARKER = """\
# A memlab course folder (the student bundle of `memlab exercises build`). memlab finds its
# project from the working directory: the nearest folder holding pyproject.toml and book/.
# This file only marks the folder; it is not a package (install the .whl beside it).
[tool.memlab]
kind = "student-bundle"
"""


class BundleError(ConfigError):
    """The bundle cannot be written (no installed metadata, a failed wheel build, a missing source)."""


# ----------------------------------------------------------------------------- the wheel

def library_files() -> list[tuple[Path, str]]:
    """(file, path inside the wheel) of the running memlab package: its .py files and py.typed."""
    import memlab

    pkg = Path(memlab.__file__).resolve().parent
    files = [p for p in sorted(pkg.rglob("*")) if p.is_file() and "__pycache__" not in p.parts
             and (p.suffix == ".py" or p.name == "py.typed")]
    return [(p, "memlab/" + p.relative_to(pkg).as_posix()) for p in files]


def _toml_list(items: list[str]) -> str:
    return "[\n" + "".join(f"  {json.dumps(i)},\n" for i in items) + "]"


def pyproject_text() -> str:
    """A pyproject.toml for the library alone, from the installed distribution's metadata.

    Name, version, Python range, the pinned dependencies (no extras) and the ``memlab`` command
    are the installed ones, which ``pip install`` took from the repository's pyproject.toml.
    """
    from importlib import metadata

    try:
        dist = metadata.distribution("memlab")
    except metadata.PackageNotFoundError:
        raise BundleError("memlab is not installed (no metadata): install it with pip before building "
                          "the student bundle") from None
    deps = [r for r in (dist.requires or []) if "extra ==" not in r]
    scripts = {e.name: e.value for e in dist.entry_points if e.group == "console_scripts"}
    meta = dist.metadata
    return "\n".join([
        "[build-system]", 'requires = ["setuptools>=77", "wheel"]', 'build-backend = "setuptools.build_meta"', "",
        "[project]", f'name = {json.dumps(meta["Name"])}', f'version = {json.dumps(meta["Version"])}',
        f'description = {json.dumps(meta.get("Summary") or "memlab")}',
        f'requires-python = {json.dumps(meta.get("Requires-Python") or ">=3.10")}',
        f"dependencies = {_toml_list(deps)}", "",
        "[project.scripts]", *[f"{k} = {json.dumps(v)}" for k, v in scripts.items()], "",
        "[tool.setuptools.packages.find]", 'where = ["lib"]', "",
        "[tool.setuptools.package-data]", 'memlab = ["py.typed"]', ""])


def build_wheel(dest: Path) -> Path:
    """Build the library's wheel into ``dest`` (offline: setuptools' PEP 517 hook, no isolation)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="memlab-wheel-") as tmp:
        tree = Path(tmp)
        for src, rel in library_files():
            target = tree / "lib" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
        (tree / "pyproject.toml").write_text(pyproject_text())
        hook = "import sys, setuptools.build_meta as b; print(b.build_wheel(sys.argv[1]))"
        proc = subprocess.run([sys.executable, "-c", hook, str(dest.resolve())], cwd=tree,
                              capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise BundleError(f"building the memlab wheel failed: {(proc.stderr or proc.stdout).strip()[-1500:]}")
    return dest / proc.stdout.strip().splitlines()[-1]


# ----------------------------------------------------------------------------- the bundle

def _project_file(rel: str, root: Path) -> Path:
    """``rel`` of the project folder, else of the repository memlab was installed from (a course
    repository may hold only exercises/)."""
    for base in (root, installed_repository()):
        if base is not None and (base / rel).is_file():
            return base / rel
    raise BundleError(f"the student bundle needs {rel}: not in {root} nor in an installed repository")


def course_files(chapters, root: Path) -> list[tuple[Path, str]]:
    """(file, path in the bundle) of what the open exercises' `memlab run` of ``chapters`` reads."""
    from memlab.core.chapters import CHAPTERS

    rels = [CHAPTERS[c].source for c in chapters] + [f"data/papers/{c}.yaml" for c in chapters]
    return [(_project_file(rel, root), rel) for rel in [*rels, *COURSE_DATA]]


def readme_text(chapters) -> str:
    """The bundle's README.md (what book/exercises.md says, for a student without the book)."""

    listing = "\n".join(f"- `assignments/{c}.ipynb`" for c in chapters)
    return f"""# memlab course exercises

This folder is your course folder. It holds the exercise notebooks, the `memlab` library as a
wheel, and what `memlab run` needs for the open exercises. It holds no solutions.

{listing}

## Install (once)

With Python 3.10-3.12, in this folder:

```bash
{INSTALL}
```

pip fetches memlab's pinned dependencies (PyTorch among them) from PyPI. Open the notebooks with
this environment's kernel in JupyterLab, VS Code or any Jupyter front end
(`.venv/bin/python -m pip install jupyterlab` if you have none), and run their cells in order.

## Data for the open exercises (once)

The autograded exercises need no data. The open ones re-run a chapter with `memlab run`, which
reads CIFAR-10 (chapters 1-2) or WikiText-2 (chapters 3-5). From this folder:

```bash
.venv/bin/memlab exercises fetch
```

downloads them into `data/` (or set `MEMLAB_DATA_ROOT` to a folder your instructor provides).

## Where your runs go

Each open exercise prints its `memlab run` commands. They write into your own folder,
`{RUNS_DEFAULT}/<your id>/` (`{RUNS_ENV}` moves it; the id is `STUDENT` at the top of each
notebook, else your login name), so students sharing one server never overwrite each other.
Run them from a terminal in this folder: memlab finds its project (the nearest folder holding
`pyproject.toml` and `book/`) from the working directory.
"""


def write_bundle(built: dict[str, dict[str, Path]], out: Path, root: Path) -> dict[str, Path]:
    """Write ``<out>/memlab-course/`` and ``<out>/memlab-course.zip`` for the chapters of a build.

    built: chapter -> {"student": notebook path, ...} (memlab.course.exercises.build). Returns
    {"folder", "zip", "wheel"}. The folder is rewritten from scratch.
    """
    folder = Path(out) / BUNDLE
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "book").mkdir(parents=True)
    (folder / "book" / ".keep").write_text("")  # a zip keeps no empty folder; book/ marks the course folder
    (folder / "pyproject.toml").write_text(MARKER)
    for src, rel in course_files(list(built), root):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, folder / rel)
    for chapter, paths in built.items():
        (folder / "assignments").mkdir(exist_ok=True)
        shutil.copy2(paths["student"], folder / "assignments" / f"{chapter}.ipynb")
    wheel = build_wheel(folder)
    (folder / "README.md").write_text(readme_text(list(built)))
    return {"folder": folder, "zip": zip_folder(folder, Path(out) / ZIP_NAME), "wheel": wheel}


def zip_folder(folder: Path, dest: Path, replace: dict[str, Path] | None = None) -> Path:
    """Zip ``folder`` into ``dest`` under its own name; ``replace``: path in the folder -> file to
    store there instead (a student's own variant of a notebook)."""
    replace = dict(replace or {})
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                rel = p.relative_to(folder).as_posix()
                z.write(replace.pop(rel, p), f"{folder.name}/{rel}")
    if replace:
        tmp.unlink()
        raise BundleError(f"no {', '.join(sorted(replace))} in the bundle {folder}")
    tmp.replace(dest)
    return dest


def roster_zips(bundle: Path, variants: dict[str, dict[str, Path]], out: Path) -> dict[str, Path]:
    """One bundle zip per student, ``<out>/student-zips/<id>.zip``, holding their own notebooks.

    variants: student id -> chapter -> that student's notebook.
    """
    return {sid: zip_folder(bundle, Path(out) / ROSTER_ZIPS / f"{sid}.zip",
                            {f"assignments/{c}.ipynb": p for c, p in nbs.items()})
            for sid, nbs in variants.items()}
