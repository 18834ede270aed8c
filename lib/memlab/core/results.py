"""Chapter results and their provenance: ``<book>/results/<chapter>.json``.

The output folder is ``$MEMLAB_OUTPUT_DIR`` when the chapter runner sets it
(a staging folder that replaces the published outputs only when the whole
chapter succeeded). A notebook run any other way (Jupyter, Binder, plain
Python) writes into the scratch folder ``<repo>/_build/scratch/`` and says so
once, so it never overwrites the published book; only ``memlab run`` publishes.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np

import memlab
from memlab.core.config import Config, device, repo_root

_SCRATCH_SAID: list[Path] = []


def scratch_dir() -> Path:
    """Where outputs of a run outside ``memlab run`` go: ``<repo>/_build/scratch`` (ignored by git)."""
    return repo_root() / "_build" / "scratch"


def output_dir() -> Path:
    """Root of the chapter outputs (``results/``, ``figures/`` below it).

    ``$MEMLAB_OUTPUT_DIR`` under ``memlab run``; otherwise the scratch folder
    (never the published ``book/``), announced once per process.
    """
    env = os.environ.get("MEMLAB_OUTPUT_DIR")
    if env:
        return Path(env).expanduser()
    path = scratch_dir()
    if path not in _SCRATCH_SAID:
        _SCRATCH_SAID.append(path)
        print(f"memlab: not run by 'memlab run': outputs go to {path} (the published book/ is left alone)")
    return path


def results_path(chapter: str) -> Path:
    return output_dir() / "results" / f"{chapter}.json"


def to_jsonable(obj: Any) -> Any:
    """Numbers, strings, lists and dicts only; numpy/torch scalars and arrays converted; NaN -> None."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "to_dict") and not isinstance(obj, type):
        try:
            return to_jsonable(obj.to_dict())
        except TypeError:
            pass
    if hasattr(obj, "tolist"):  # numpy / torch arrays and scalars
        return to_jsonable(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return None if not math.isfinite(float(obj)) else float(obj)
    if obj is None or isinstance(obj, str):
        return obj
    return repr(obj)


def git_commit() -> str:
    """The repository's HEAD commit (with ``+dirty`` for uncommitted changes), or 'unknown'."""
    try:
        root = repo_root()
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "lib", "notebooks"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def cpu_name() -> str:
    """The CPU's model and the vector ISA torch's kernels use, e.g. ``AMD EPYC, AVX2``.

    Float results differ slightly between ISAs (AVX2 vs AVX-512 kernels sum in other
    orders), so a published number names the one that produced it.
    """
    import torch

    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return f"{model}, {torch.backends.cpu.get_cpu_capability()}"


def device_label() -> str:
    """The device a run computes on, as provenance and the cost log name it, e.g. ``cpu (AMD EPYC, AVX512)``."""
    import torch

    dev = device()
    name = torch.cuda.get_device_name(0) if dev.type == "cuda" else cpu_name()
    return f"{dev.type} ({name})"


def provenance(profile: str, wall_time_s: float, commit: str | None = None) -> dict[str, Any]:
    """Where a result came from: commit (``commit``, else HEAD now), versions, device, wall time, date."""
    import torch

    from memlab.core.compiling import compiled_steps
    from memlab.core.config import cpu_bf16

    try:
        import transformers

        tv = transformers.__version__
    except ImportError:  # pragma: no cover - pinned dependency
        tv = None
    return {
        "git_commit": commit or git_commit(),
        "memlab_version": memlab.__version__,
        "profile": profile,
        "device": device_label(),
        "cpu_threads": torch.get_num_threads(),
        "torch_compile": compiled_steps(),
        "cpu_bf16": cpu_bf16(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": tv,
        "numpy": np.__version__,
        "wall_time_s": round(float(wall_time_s), 1),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON through a temporary file and a rename, so readers never see half a file."""
    from memlab.core.fsutil import write_atomic

    text = json.dumps(to_jsonable(data), indent=1, sort_keys=False) + "\n"
    write_atomic(path, lambda f: f.write(text.encode()))  # umask permissions, not mkstemp's 0600


def chapter_code(chapter: str) -> str | None:
    """Fingerprint of the code that defines a chapter's run: its experiments package and notebook source.

    sha256 (first 12 hex digits) over every ``.py`` file of the chapter's package (or its one
    module), in path order, each preceded by its path inside the package, then the notebook's
    source, then the fingerprints of the chapters it runs (``Chapter.uses``: chapter 6 runs chapters
    1 and 3 at their defaults, so a change there changes its numbers too). Two results with the same
    fingerprint ran the same parameters, stages, tables and claim predicates; a seed sweep whose
    runs' fingerprint differs from the published page's ran earlier code (:mod:`memlab.report.robustness`
    says so). None for a chapter outside the registry (test fakes) or one whose files are missing.
    """
    import hashlib
    import importlib.util

    from memlab.core.chapters import CHAPTERS
    from memlab.core.config import repo_root

    ch = CHAPTERS.get(chapter)
    if ch is None:
        return None
    spec = importlib.util.find_spec(ch.module)
    if spec is None or not spec.origin:
        return None
    origin = Path(spec.origin)
    if spec.submodule_search_locations:  # a package: every file of it counts
        root = origin.parent
        files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
        named = [(p.relative_to(root).as_posix(), p) for p in files]
    else:
        named = [(origin.name, origin)]
    notebook = repo_root() / ch.source
    if not notebook.is_file() or not all(p.is_file() for _, p in named):
        return None
    h = hashlib.sha256()
    for name, path in named:
        h.update(name.encode() + b"\0")
        h.update(path.read_bytes())
    h.update(notebook.read_bytes())
    for used in ch.uses:
        code = chapter_code(used)
        if code is None:
            return None
        h.update(f"{used}\0{code}".encode())
    return h.hexdigest()[:12]


MOVES_FILE = "data/code_moves.yaml"  # earlier fingerprints of a chapter's current code (see same_code)


def earlier_codes(chapter: str, now: str | None = None) -> set[str]:
    """Fingerprints of earlier code that ``data/code_moves.yaml`` declares equal to the chapter's current
    code: a move of modules that changed no result (every chapter's ``smoke`` results identical apart
    from wall times). A declaration holds only while its ``now`` is the current fingerprint, so any
    later change to the chapter leaves its earlier sweeps stale again. ``now``: the chapter's
    fingerprint, when the caller has it already (it hashes the chapter's files)."""
    import yaml

    from memlab.core.config import repo_root

    path = repo_root() / MOVES_FILE
    if not path.is_file():
        return set()
    now = chapter_code(chapter) if now is None else now
    moves = (yaml.safe_load(path.read_text()) or {}).get(chapter) or []
    return {m["was"] for m in moves if now is not None and m.get("now") == now}


def same_code(chapter: str, a: str | None, b: str | None) -> bool:
    """Whether fingerprints ``a`` and ``b`` (:func:`chapter_code`) name the same chapter code: equal,
    or both the current code or an earlier one declared equal to it (:func:`earlier_codes`)."""
    if a == b:
        return True
    now = chapter_code(chapter)
    current = {now} | earlier_codes(chapter, now)
    return a in current and b in current

class Run:
    """One chapter run: holds its config, the metrics the notebook fills, and the clock."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.chapter = cfg.chapter
        self.metrics: dict[str, Any] = {}
        self.started = time.perf_counter()
        self.cpu_started = time.process_time()  # this process's CPU time: the cost whatever the load
        # the threads the run was started with (--threads): a stage may use fewer for a while (chapter
        # 3's decoding), which must not make the record, and the estimates read from it, say fewer
        import torch

        self.threads = torch.get_num_threads()
        # read once, so the page's provenance box and its results file name the same commit
        self.commit = git_commit()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def cost(self) -> dict[str, Any]:
        """This run's cost so far (:func:`memlab.core.costs.run_cost`): CPU, wall, threads, memory, models."""
        from memlab.core import costs

        return costs.run_cost(time.process_time() - self.cpu_started, self.elapsed(), self.threads)

    def record(self, **metrics: Any) -> None:
        """Add metrics (JSON-able after :func:`to_jsonable`)."""
        self.metrics.update(metrics)

    def payload(self, claims: list[dict] | None = None) -> dict[str, Any]:
        import sys

        from memlab.core.chapters import CHAPTERS

        # The figures this run published (in order), so the book's tests can count them on the page.
        plotting = sys.modules.get("memlab.report.plotting")
        figures = plotting.published_figures(self.chapter) if plotting is not None else []
        return {
            "chapter": self.chapter,
            "title": CHAPTERS[self.chapter].title if self.chapter in CHAPTERS else self.chapter,
            "profile": self.cfg.profile,
            "params": self.cfg.to_dict(),
            "metrics": self.metrics,
            "claims": claims or [],
            "figures": figures,
            "provenance": {**provenance(self.cfg.profile, self.elapsed(), self.commit),
                           "chapter_code": chapter_code(self.chapter),
                           "cost": self.cost()},
        }

    def save(self, claims: list[dict] | None = None, pooled_seeds: int | None = None) -> Path:
        """Write ``results/<chapter>.json`` (metrics, params, claims, provenance) atomically; the page's
        closing line says the verdicts are single-seed, and pooled over ``pooled_seeds`` on the page
        where a seed sweep of this code is published (:func:`memlab.report.pagekit.judge` passes it)."""
        path = results_path(self.chapter)
        payload = self.payload(claims)
        write_json_atomic(path, payload)
        _show_closing_line(payload, POOLED_ON_PAGE.format(n=pooled_seeds) if pooled_seeds else SINGLE_SEED)
        return path

    def provenance_box(self) -> None:
        """Show, in the notebook, which profile and parameters produced this page."""
        from IPython.display import Markdown, display

        display(Markdown(provenance_markdown(self.cfg, self.commit)))


# What one run's verdicts are (the closing lines of a page and of ``memlab run`` say it).
SINGLE_SEED = ("Its verdicts are single-seed (this run alone); `memlab sweep` over seeds pools them "
               "(see the Robustness page).")
# ... and where a seed sweep of the page's code is published ({n}: its seeds), what the page shows
POOLED_ON_PAGE = ("Its own verdicts (the claims table's Verdict column) are single-seed; the findings and the "
                  "Across seeds column pool them over {n} seeds (see the Robustness page).")


def _show_closing_line(payload: dict, basis: str = SINGLE_SEED) -> None:
    """In a notebook, say how long the run took, where its numbers went, and what its verdicts are
    pooled over (``basis``: :data:`SINGLE_SEED` or :data:`POOLED_ON_PAGE`)."""
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:  # pragma: no cover - ipython ships with the notebook stack
        return
    if get_ipython() is None:
        return
    prov = payload["provenance"]
    display(Markdown(
        f"*This page ran at the `{payload['profile']}` profile in {prov['wall_time_s']:.0f} s on {prov['device']}; "
        f"its numbers are in `{_where_results_go(payload['chapter'])}`. {basis}*"
    ))


def _where_results_go(chapter: str) -> str:
    """``book/results/<chapter>.json`` under ``memlab run`` (published there), else the scratch path."""
    if os.environ.get("MEMLAB_OUTPUT_DIR"):
        return f"book/results/{chapter}.json"
    return str(scratch_dir() / "results" / f"{chapter}.json")


def provenance_markdown(cfg: Config, commit: str | None = None) -> str:
    """A collapsed MyST admonition: one title line (profile, seed, commit, machine), the parameters inside."""
    p = provenance(cfg.profile, 0.0, commit)
    params = ", ".join(f"`{k}={v}`" for k, v in cfg.items())
    seed = f" · seed {cfg['seed']}" if "seed" in cfg else ""
    sha, dirty = p["git_commit"].removesuffix("+dirty"), p["git_commit"].endswith("+dirty")
    short = sha[:12]
    code = (f"commit `{sha}` with uncommitted changes to the code (the chapter's code fingerprint "
            f"`{(chapter_code(cfg.chapter) or 'unknown')[:12]}` identifies it)" if dirty else f"commit `{sha}`")
    title = (f"Provenance: profile `{cfg.profile}`{seed} · commit `{short}` · {p['device']}, "
             f"{p['cpu_threads']} thread{'s' if p['cpu_threads'] != 1 else ''}"
             f"{'' if p['torch_compile'] else ', eager (no torch.compile)'}")
    return (
        f":::{{admonition}} {title}\n:class: note dropdown\n\n"
        f"Produced at the **{cfg.profile}** profile with {params}.  \n"
        f"Code: {code}, memlab {p['memlab_version']}, torch {p['torch']}, "
        f"transformers {p['transformers']}; device {p['device']}; run on {p['date']}.  \n"
        f"Re-run: `memlab run {cfg.chapter} --profile {cfg.profile}` (add `-p name value` to change a parameter). "
        "The wall time is in the chapter's results file.\n:::"
    )


def load_results(chapter: str, book_dir: Path | None = None) -> dict | None:
    """The saved results of a chapter, or None when it has not been run."""
    path = (book_dir or output_dir()) / "results" / f"{chapter}.json"
    return json.loads(path.read_text()) if path.exists() else None
