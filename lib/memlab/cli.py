"""Command line: run a chapter, run every chapter, render the book (memlab.book), sweep (memlab.sweep).

    memlab run CHAPTER [--profile P] [-p NAME VALUE ...] [--dry-run] [--no-cache] [--book-dir DIR]
    memlab book [--profile P] [--chapters ID ...]
    memlab render [--root DIR]
    memlab list
    memlab exercises build [CHAPTER ...] [--book] | memlab exercises grade PATH ...   (memlab.exercises)
    memlab sweep CHAPTER [--profile P] -p NAME VALUES ... | memlab sweep --summary DIR   (memlab.sweep)

``run`` checks the chapter name, every parameter name and value against the
chapter's SPEC (the one declaration of its parameters; ``memlab list`` prints
it) before executing anything; the notebook receives ``profile`` and a
``params`` dict of the overrides. It executes into a staging folder and publishes the notebook,
results and figures into ``book/`` only when the whole chapter succeeded, so
a failed run leaves the previous good outputs in place.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Sequence


from memlab.chapters import CHAPTERS
from memlab.book import BuildError, render
from memlab import exercises
from memlab.config import DEFAULT_PROFILE, PROFILES, ConfigError, Param, repo_root


class RunError(RuntimeError):
    """A chapter failed while executing; the message names the chapter and the cell."""


def parse_value(text: str, param: Param | None = None, name: str = "value") -> Any:
    """A command-line value, read for ``param`` (its kind decides; see :func:`memlab.config.parse_text`).

    Without ``param`` the kind is guessed by the same strict rules: ``3`` -> int, ``1e-3`` / ``.inf``
    -> float, ``true`` -> bool, ``[a, b]`` -> list of strings, ``none`` -> None, else the text.
    """
    from memlab import config

    if param is not None:
        return config.parse_text(name, text, param)
    t = text.strip()
    if t in ("none", "None", "null", "~"):
        return None
    for kind in (int, float, bool):
        try:
            return config.parse_text(name, t, Param(kind, None))
        except ConfigError:
            pass
    if t.startswith("["):
        return config.parse_text(name, t, Param(list, None))
    return config.parse_text(name, t, Param(str, None))


def parse_params(chapter: str, pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """``-p NAME VALUE`` pairs as typed values, each read by its SPEC entry; one-line errors naming NAME.

    ``profile`` is refused (it is ``--profile``), a name given twice is refused, and an unknown
    name is refused with the nearest names of the chapter.
    """
    from memlab import config

    if chapter not in CHAPTERS:
        raise ConfigError(f"chapter {chapter!r}: must be one of {', '.join(CHAPTERS)}")
    names = [n for n, _ in pairs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"parameter {dup[0]!r}: given more than once")
    spec = config.chapter_module(chapter).SPEC
    out = {}
    for name, text in pairs:
        if name == "profile":
            raise ConfigError("parameter 'profile': choose it with --profile, not -p profile")
        pname, p = config.find_param(spec, name)
        if p is None:
            raise config.unknown_parameter(chapter, spec, name)
        out[name] = parse_value(text, p, name) if isinstance(text, str) else text
    return out


def notebook_from_source(chapter: str, root: Path) -> "nbformat.NotebookNode":  # noqa: F821
    """The chapter notebook built from its jupytext source ``notebooks/<id>.py``."""
    import jupytext

    src = root / CHAPTERS[chapter].source
    if not src.exists():
        raise ConfigError(f"chapter {chapter!r}: source {src} does not exist yet")
    nb = jupytext.read(src)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def notebook_parameters(nb) -> dict[str, str]:
    """Names of the parameters cell (tagged ``parameters``) with their source line.

    Parsed with ``ast`` so annotations such as ``int | None`` are understood.
    """
    import ast

    cells = [c for c in nb.cells if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])]
    if not cells:
        raise ConfigError("the notebook has no cell tagged 'parameters'")
    names = {}
    source = cells[0].source
    lines = source.splitlines()
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for t in targets:
            if isinstance(t, ast.Name):
                names[t.id] = lines[node.lineno - 1].strip()
    return names


def validate(chapter: str, profile: str, params: dict[str, Any], root: Path) -> tuple[Any, Any]:
    """Check chapter, parameter names and values against the chapter's SPEC; return (notebook, config).

    ``params`` maps names (``lr``, ``SalUn.lr``) to typed values or to command-line text. The
    notebook's parameters cell must declare ``profile`` and ``params``, which papermill sets.
    """
    from memlab.config import resolve

    if chapter not in CHAPTERS:
        raise ConfigError(f"chapter {chapter!r}: must be one of {', '.join(CHAPTERS)}")
    if profile not in PROFILES:
        raise ConfigError(f"parameter 'profile': must be one of {', '.join(PROFILES)} (got {profile!r})")
    params = parse_params(chapter, list(params.items()))
    nb = notebook_from_source(chapter, root)
    missing = [n for n in ("profile", "params") if n not in notebook_parameters(nb)]
    if missing:
        raise ConfigError(f"chapter {chapter!r}: the notebook's parameters cell must declare profile and "
                          f"params (missing: {', '.join(missing)})")
    data_env = os.environ.get("MEMLAB_DATA_ROOT")
    if data_env and not Path(data_env).expanduser().is_dir():
        raise ConfigError(f"parameter 'data_root': MEMLAB_DATA_ROOT={data_env!r} is not a folder")
    cfg = resolve(chapter, profile=profile, **params)
    _preflight(chapter, cfg)
    return nb, cfg


def _preflight(chapter: str, cfg) -> None:
    """Data, hub models and GPU of the run, checked before any work (:mod:`memlab.preflight`).

    Flags arrive through the environment that :func:`run_chapter` sets
    (``MEMLAB_ALLOW_DOWNLOAD``, ``MEMLAB_ALLOW_CPU``, ``MEMLAB_TRUST_REMOTE_CODE``).
    """
    from memlab import preflight

    preflight.check(chapter, cfg, profile=getattr(cfg, "profile", None))


# ----------------------------------------------------------------------------- failures, named

_SIGNALS = {"SIGABRT": "aborted (SIGABRT)", "SIGKILL": "killed (SIGKILL, e.g. out of memory)",
            "SIGSEGV": "crashed (SIGSEGV, segmentation fault)", "SIGBUS": "crashed (SIGBUS)",
            "SIGTERM": "terminated (SIGTERM)", "SIGINT": "interrupted (SIGINT)"}


def describe_exit(returncode: int | None) -> str:
    """How a kernel process ended, in words: ``-6`` -> ``"aborted (SIGABRT)"``."""
    import signal

    if returncode is None:
        return "died (exit status unknown)"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            return f"killed by signal {-returncode}"
        return _SIGNALS.get(name, f"killed by {name}")
    return f"exited with status {returncode}"


def _first_line(source: str) -> str:
    for line in str(source).splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= 70 else line[:67] + "..."
    return "(empty cell)"


def _cell_position(nb, index: int | None) -> int | None:
    """The ``In [n]`` number of cell ``index`` in the saved notebook.

    A cell the dead kernel never answered for has no execution count: it is
    the one after the highest count before it.
    """
    if nb is None or index is None or not 0 <= index < len(nb.cells):
        return None
    own = nb.cells[index].get("execution_count")
    if own:
        return own
    earlier = (c.get("execution_count") or 0 for c in nb.cells[:index] if c.cell_type == "code")
    return 1 + max(earlier, default=0)


def _dead_cell(nb) -> int | None:
    """Index of the cell that was running when the kernel died: the last one papermill started."""
    if nb is None:
        return None
    started = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
               and c.metadata.get("papermill", {}).get("status", "pending") != "pending"]
    return started[-1] if started else None


def _failing_cell(err: BaseException, nb=None, returncode: int | None = None) -> str:
    """``cell 7 (`x = train(...)`): ValueError: ...`` for a failure; the signal for a dead kernel.

    ``nb`` is the executed notebook as papermill saved it (to find the cell and
    its source); ``returncode`` is the dead kernel's exit status.
    """
    dead = type(err).__name__ == "DeadKernelError"
    index = _dead_cell(nb) if dead else getattr(err, "cell_index", None)
    number = getattr(err, "exec_count", None) or _cell_position(nb, index)
    source = getattr(err, "source", None)
    if source is None and nb is not None and index is not None and 0 <= index < len(nb.cells):
        source = nb.cells[index].source
    where = f"cell {number}" if number is not None else "a cell"
    if source is not None:
        where += f" (`{_first_line(source)}`)"
    if dead:
        return f"{where}: the kernel {describe_exit(returncode)}"
    ename, evalue = getattr(err, "ename", None) or type(err).__name__, getattr(err, "evalue", None)
    evalue = str(err) if evalue is None else str(evalue)
    last = evalue.strip().splitlines()[-1] if evalue.strip() else ""
    return f"{where}: {ename}: {last}" if last else f"{where}: {ename}"


def _kernel_manager_class(log_path: Path | None = None):
    """A kernel manager that remembers how its kernel process ended (for :func:`_failing_cell`).

    With ``log_path``, the kernel process's own stderr (C-library messages such
    as "double free or corruption", and the Python stack that faulthandler
    prints on a fatal signal) goes to that file.
    """
    from jupyter_client.manager import AsyncKernelManager

    class RecordingKernelManager(AsyncKernelManager):
        last_returncode: int | None = None

        async def start_kernel(self, **kw):
            if log_path is not None and "stderr" not in kw:
                kw["stderr"] = open(log_path, "ab")  # noqa: SIM115 - the kernel process owns it from here
            return await super().start_kernel(**kw)

        async def is_alive(self) -> bool:
            alive = await super().is_alive()
            process = getattr(self.provisioner, "process", None)
            if not alive and process is not None and process.poll() is not None:
                RecordingKernelManager.last_returncode = process.poll()
            return alive

    return RecordingKernelManager


def clean_stale_staging(book: Path) -> list[Path]:
    """Remove ``book/.staging-*`` folders that killed runs left (their process is dead).

    Staging folders carry the runner's pid (``.staging-<chapter>.tmp-<pid>-<hex>``)
    so a concurrent live run keeps its own; older unnamed ones go after an hour.
    """
    from memlab.fsutil import LEGACY_MAX_AGE_S, is_orphan

    removed = []
    now = time.time()
    for child in Path(book).glob(".staging-*"):
        legacy = ".tmp-" not in child.name
        stale = (now - child.stat().st_mtime > LEGACY_MAX_AGE_S) if legacy else is_orphan(child, now)
        if stale and child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child)
    return removed


def _publish(staging: Path, book: Path, chapter: str) -> None:
    """Move a successful run's outputs from ``staging`` into ``book`` (figures replaced whole)."""
    for sub, name in (("chapters", f"{chapter}.ipynb"), ("results", f"{chapter}.json")):
        src = staging / sub / name
        if not src.exists():
            raise RunError(f"chapter {chapter!r}: the run wrote no {sub}/{name} (did it call run.save()?)")
        (book / sub).mkdir(parents=True, exist_ok=True)
        os.replace(src, book / sub / name)
    fig_src, fig_dst = staging / "figures" / chapter, book / "figures" / chapter
    if fig_dst.exists():
        shutil.rmtree(fig_dst)
    if fig_src.exists():
        (book / "figures").mkdir(parents=True, exist_ok=True)
        shutil.move(str(fig_src), str(fig_dst))


def _set_flag_env(allow_download: bool, allow_cpu: bool, trust_remote_code: Sequence[str]) -> None:
    """The run's flags as environment variables: the preflight, the kernel and its loaders read them."""
    from memlab.data.download import allow_download as env_allows

    os.environ["MEMLAB_ALLOW_DOWNLOAD"] = "1" if allow_download or env_allows() else "0"
    if allow_cpu:
        os.environ["MEMLAB_ALLOW_CPU"] = "1"
    if trust_remote_code:
        names = [n for n in os.environ.get("MEMLAB_TRUST_REMOTE_CODE", "").split(",") if n]
        os.environ["MEMLAB_TRUST_REMOTE_CODE"] = ",".join(dict.fromkeys(names + list(trust_remote_code)))


@contextlib.contextmanager
def flag_env(allow_download: bool = False, allow_cpu: bool = False, trust_remote_code: Sequence[str] = ()):
    """:func:`_set_flag_env` for the duration of a block (``--dry-run`` validates under the same flags)."""
    before = dict(os.environ)
    try:
        _set_flag_env(allow_download, allow_cpu, trust_remote_code)
        yield
    finally:
        os.environ.clear()
        os.environ.update(before)


def run_chapter(
    chapter: str,
    profile: str = DEFAULT_PROFILE,
    params: dict[str, Any] | None = None,
    book_dir: Path | None = None,
    no_cache: bool = False,
    allow_download: bool = False,
    log_output: bool = False,
    allow_cpu: bool = False,
    trust_remote_code: Sequence[str] = (),
) -> Path:
    """Validate and preflight, execute with papermill, publish; returns the executed notebook's path.

    The flags reach the chapter's kernel (and every loader it calls) through
    the environment: ``MEMLAB_ALLOW_DOWNLOAD``, ``MEMLAB_ALLOW_CPU``,
    ``MEMLAB_TRUST_REMOTE_CODE``; at the smoke and cpu profiles without
    ``allow_download`` the network guard is on (``MEMLAB_OFFLINE=1``). Any
    failure raises :class:`RunError` with one line naming the cell, its first
    source line and the exception or the kernel's signal, and the saved
    failed notebook; ``book/`` keeps its previous outputs.
    """
    import nbformat
    import papermill

    from memlab.data.download import allow_download as env_allows

    root = repo_root()
    params = dict(params or {})
    allow_download = allow_download or env_allows()  # the flag, or MEMLAB_ALLOW_DOWNLOAD=1 exported
    book = Path(book_dir) if book_dir else root / "book"
    env_before = dict(os.environ)
    staging: Path | None = None
    try:
        _set_flag_env(allow_download, allow_cpu, trust_remote_code)
        nb, cfg = validate(chapter, profile, params, root)
        from memlab import preflight

        preflight.fetch(chapter, cfg)  # downloads (when allowed) before the kernel starts
        book.mkdir(parents=True, exist_ok=True)
        clean_stale_staging(book)
        from memlab.fsutil import make_tmp_dir

        staging = make_tmp_dir(book, f"staging-{chapter}")  # .staging-<id>.tmp-<pid>-<hex>, umask mode
        os.environ["MEMLAB_OUTPUT_DIR"] = str(staging)
        if no_cache:
            os.environ["MEMLAB_NO_CACHE"] = "1"
        if not allow_download:
            os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
            if profile in ("smoke", "cpu"):
                os.environ["MEMLAB_OFFLINE"] = "1"  # the kernel's memlab import turns the guard on
        os.environ.setdefault("MPLBACKEND", "Agg")
        # One thread by default: results are deterministic at a fixed thread count, and the
        # published book was run with one. (The heap corruption that first forced one thread was
        # oneDNN's AVX2 kernel on channels-last inputs, benchmarks/repro_onednn_channels_last.py;
        # vision inputs are now contiguous.) Set OMP_NUM_THREADS yourself to use more.
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        os.environ.setdefault("PYTHONFAULTHANDLER", "1")  # a fatal signal leaves its Python stack in the log
        os.environ.setdefault("LIBC_FATAL_STDERR_", "1")  # glibc's "double free ..." to stderr, not the tty
        (staging / "chapters").mkdir()
        src_nb = staging / "source.ipynb"
        nbformat.write(nb, src_nb)
        out_nb = staging / "chapters" / f"{chapter}.ipynb"
        # the notebook's parameters cell holds only these two; SPEC declares the rest
        parameters = {"profile": profile, "params": parse_params(chapter, list(params.items()))}
        start = time.perf_counter()
        kernel_log = staging / "kernel.log"
        km_class = _kernel_manager_class(kernel_log)
        try:
            papermill.execute_notebook(
                str(src_nb), str(out_nb), parameters=parameters, kernel_name="python3", cwd=str(root),
                progress_bar=False, log_output=log_output, report_mode=False, kernel_manager_class=km_class,
            )
        except Exception as err:  # noqa: BLE001 - every failure kind becomes one named line
            failed = root / "_build" / "failed" / f"{chapter}.ipynb"
            failed.parent.mkdir(parents=True, exist_ok=True)
            executed = None
            if out_nb.exists():
                shutil.copy(out_nb, failed)
                try:
                    executed = nbformat.read(out_nb, as_version=4)
                except Exception:  # noqa: BLE001 - a half-written notebook still names the chapter
                    executed = None
            where = _failing_cell(err, executed, km_class.last_returncode)
            saved = f"failed notebook: {failed}" if out_nb.exists() else "no notebook was written"
            if type(err).__name__ == "DeadKernelError" and kernel_log.exists() and kernel_log.stat().st_size:
                log_copy = failed.with_suffix(".kernel.log")
                shutil.copy(kernel_log, log_copy)
                saved += f"; kernel log: {log_copy}"
            raise RunError(f"chapter {chapter!r} failed in {where} ({saved})") from None
        src_nb.unlink()
        _publish(staging, book, chapter)
        print(f"{chapter}: ran at profile {profile} in {time.perf_counter() - start:.0f} s -> "
              f"{book / 'chapters' / (chapter + '.ipynb')}")
    finally:
        os.environ.clear()
        os.environ.update(env_before)
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return book / "chapters" / f"{chapter}.ipynb"


# ----------------------------------------------------------------------------- entry point

def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="memlab", description="Run the chapters of the memorization & unlearning book.")
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="execute one chapter with papermill")
    r.add_argument("chapter", help="chapter id: " + ", ".join(CHAPTERS))
    r.add_argument("--profile", default=DEFAULT_PROFILE, help="smoke | cpu | paper (default cpu)")
    r.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                   help="override a parameter that `memlab list` shows, e.g. -p epochs 2, -p lr 1e-3, "
                        "-p budgets '[10, 30]', -p SalUn.lr 0.01 (a method's hyperparameter)")
    r.add_argument("--dry-run", action="store_true",
                   help="validate and print the resolved configuration as JSON; run nothing")
    r.add_argument("--no-cache", action="store_true", help="re-train instead of loading cached models")
    r.add_argument("--cache-dir", default=None, help="folder of the model cache (default data/cache/models)")
    r.add_argument("--allow-download", action="store_true",
                   help="let loaders reach the network (torchvision, WikiText-2, the hub); else it is off")
    r.add_argument("--allow-cpu", action="store_true", help="run the paper profile without a GPU (days)")
    r.add_argument("--trust-remote-code", action="append", default=[], metavar="MODEL",
                   help="let this hub model run its own modelling code (repeat for several)")
    r.add_argument("--book-dir", default=None, help="where chapters/, results/, figures/ go (default book/)")
    r.add_argument("--log-output", action="store_true", help="stream the notebook's output while it runs")
    b = sub.add_parser("book", help="run every chapter, then render the HTML book")
    b.add_argument("--profile", default=DEFAULT_PROFILE)
    b.add_argument("--chapters", nargs="*", default=None, help="subset of chapter ids (default all)")
    b.add_argument("--no-cache", action="store_true")
    b.add_argument("--allow-download", action="store_true", help="fetch missing data once into data/")
    b.add_argument("--allow-cpu", action="store_true", help="run the paper profile without a GPU")
    rd = sub.add_parser("render", help="render the HTML book from the executed chapters")
    rd.add_argument("--root", default=None, help="project folder holding _config.yml, _toc.yml and book/")
    sub.add_parser("list", help="list the chapters and their parameters")
    exercises.add_subparser(sub)  # memlab exercises build|grade (memlab.exercises)
    sw = sub.add_parser("sweep", help="run a chapter over a grid of parameter values on Dask",
                        description="Run the Cartesian product of the -p values as independent chapter runs "
                                    "(one folder each, never the published book). VALUES: one value, a list "
                                    "V1,V2,... or an integer range A..B (inclusive); a list-valued parameter "
                                    "is one value in brackets: -p budgets '[10, 30],[5]'.")
    sw.add_argument("chapter", nargs="?", help="chapter id: " + ", ".join(CHAPTERS))
    sw.add_argument("--profile", default=DEFAULT_PROFILE, help="smoke | cpu | paper (default cpu)")
    sw.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("NAME", "VALUES"),
                    help="values to sweep, e.g. -p seed 0..2 -p lr 1e-3,1e-2")
    sw.add_argument("--out", default=None, help="parent of the sweep folder (default data/sweeps)")
    sw.add_argument("--summary", default=None, metavar="DIR",
                    help="only (re)write summary.json and summary.png of the sweep folder DIR")
    sw.add_argument("--publish", action="store_true",
                    help="with --summary: copy summary.json to book/robustness/<chapter>.json (the Robustness page)")
    sw.add_argument("--page", default=None, metavar="RUN",
                    help="with --summary DIR --publish: also publish run RUN of the sweep (its default-settings "
                         "run, e.g. seed-0) as the chapter's page in book/, so page and sweep are one execution")
    sw.add_argument("--workers", type=int, default=None,
                    help="LocalCluster worker processes (default cores // threads)")
    sw.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of each run (default 1)")
    sw.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                    help="use an existing Dask cluster")
    sw.add_argument("--cluster", choices=("local", "slurm", "print"), default="local",
                    help="local (default), slurm (submit jobs with dask-jobqueue), print (show the SLURM "
                         "job script, submit nothing)")
    sw.add_argument("--cluster-config", default=None, metavar="FILE",
                    help="YAML of the SLURM jobs: cores, memory, walltime, gpus, queue, account, jobs, "
                         "threads, job_extra")
    sw.add_argument("--gpus-per-run", type=int, default=None,
                    help="GPUs each run requests as a Dask resource (default 1 at the paper profile, else 0)")
    sw.add_argument("--no-cache", action="store_true")
    sw.add_argument("--allow-download", action="store_true")
    sw.add_argument("--allow-cpu", action="store_true", help="run the paper profile without a GPU")
    return ap


def _split_param_pairs(argv: Sequence[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """Take every ``-p NAME VALUE`` out of ``argv`` verbatim, so that a value such as ``-.inf`` or
    ``-3`` is not mistaken for an option (argparse would); the rest goes to argparse."""
    rest, pairs, i = [], [], 0
    while i < len(argv):
        if argv[i] in ("-p", "--param") and i + 2 < len(argv) and not argv[i + 1].startswith("-"):
            pairs.append((argv[i + 1], argv[i + 2]))
            i += 3
        else:
            rest.append(argv[i])
            i += 1
    return rest, pairs


def _default_text(p: Param, key: str | None = None, group_param: Param | None = None) -> str:
    """A parameter's default per profile: ``0`` or ``smoke 4 | cpu 8 | paper 64``."""
    def fmt(v):
        return "''" if v == "" else str(v).replace("'", "") if isinstance(v, list) else str(v)

    if group_param is not None:  # GROUP.KEY: the profile's value, else the module default
        group, k = key.split(".", 1)
        vals = {pr: group_param.default_for(pr).get(group, {}).get(k, p.default) for pr in PROFILES}
    else:
        vals = {pr: p.default_for(pr) for pr in PROFILES}
    if len({repr(v) for v in vals.values()}) == 1:
        return fmt(vals[PROFILES[0]])
    return " | ".join(f"{pr} {fmt(v)}" for pr, v in vals.items())


def _kind_text(p: Param) -> str:
    kind = f"list[{p.item.__name__}]" if p.kind is list and p.item else p.kind.__name__
    parts = [kind]
    if p.choices is not None:
        parts.append(("items from " if p.kind is list else "one of ") + ", ".join(map(str, p.choices)))
    if p.range_text():
        parts.append(("items " if p.kind is list else "") + p.range_text())
    if p.allow_none:
        parts.append("or none")
    return ", ".join(parts)


def list_lines(chapter: str) -> list[str]:
    """``memlab list`` for one chapter: a line per name ``-p`` accepts (kind, range, default per profile)."""
    from memlab.config import chapter_module

    lines = []
    for name, p in chapter_module(chapter).SPEC.items():
        if p.kind is dict:
            lines.append(f"    {name}: {p.doc} (set one as -p METHOD.KEY VALUE)")
            for group, keys in p.schema.items():
                for key, sub in keys.items():
                    dotted = f"{group}.{key}"
                    default = _default_text(sub, dotted, p)
                    lines.append(f"      {dotted:<26} {_kind_text(sub)}; default {default}")
            continue
        doc = f" -- {p.doc}" if p.doc else ""
        lines.append(f"    {name:<28} {_kind_text(p)}; default {_default_text(p)}{doc}")
    return lines


def _sweep_command(parser, args, pairs) -> None:
    """``memlab sweep``: the summary of a folder, or a sweep (:mod:`memlab.sweep`)."""
    from memlab import sweep

    if args.summary:
        if args.chapter or pairs:
            parser.error("--summary DIR takes no chapter and no -p")
        if args.page and not args.publish:
            parser.error("--page RUN goes with --summary DIR --publish")
        folder = Path(args.summary).expanduser()
        sweep.write_summary(folder)
        print(f"summary: {folder / 'summary.json'}")
        if args.publish:
            from memlab import robustness

            if args.page:  # checked (complete, defaults, current code) before the summary is copied
                print(f"published page: {robustness.publish_page(folder, args.page, repo_root() / 'book')}")
            print(f"published: {robustness.publish(folder, repo_root() / 'book')}")
        return
    if args.publish or args.page:
        parser.error("--publish and --page go with --summary DIR")
    if not args.chapter:
        parser.error("the sweep needs a CHAPTER (or --summary DIR)")
    for flag, value, low in (("workers", args.workers, 1), ("threads", args.threads, 1),
                             ("gpus-per-run", args.gpus_per_run, 0)):
        if value is not None and value < low:
            raise ConfigError(f"parameter '{flag}': must be an integer >= {low} (got {value})")
    if args.profile not in PROFILES:
        raise ConfigError(f"parameter 'profile': must be one of {', '.join(PROFILES)} (got {args.profile!r})")
    gpus = args.gpus_per_run
    if gpus is None:  # the paper profile runs on GPUs unless --allow-cpu
        gpus = int(args.profile == "paper" and not args.allow_cpu)
    sweep.run_sweep(args.chapter, args.profile, sweep.parse_axes(args.chapter, pairs), args.out, args.workers,
                    args.threads, args.scheduler, None if args.cluster == "local" else args.cluster,
                    args.cluster_config, gpus,
                    flags={"no_cache": args.no_cache, "allow_download": args.allow_download,
                           "allow_cpu": args.allow_cpu})


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, pairs = _split_param_pairs(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if pairs and args.command not in ("run", "sweep"):
        parser.error(f"-p is an option of 'memlab run', not of 'memlab {args.command}'")
    try:
        if args.command == "run":
            params = parse_params(args.chapter, pairs)
            if args.dry_run:
                import json

                with flag_env(args.allow_download, args.allow_cpu, args.trust_remote_code):
                    _, cfg = validate(args.chapter, args.profile, params, repo_root())
                print(json.dumps(cfg.to_dict(), indent=1))
                return 0
            if args.cache_dir:
                os.environ["MEMLAB_CACHE"] = str(Path(args.cache_dir).expanduser().resolve())
            run_chapter(args.chapter, args.profile, params, args.book_dir, args.no_cache, args.allow_download,
                        args.log_output, allow_cpu=args.allow_cpu, trust_remote_code=args.trust_remote_code)
        elif args.command == "book":
            chapters = args.chapters or list(CHAPTERS)
            _set_flag_env(args.allow_download, args.allow_cpu, ())  # for the preflight of every chapter
            for c in chapters:  # validate all before running any
                validate(c, args.profile, {}, repo_root())
            for c in chapters:
                run_chapter(c, args.profile, {}, None, args.no_cache, args.allow_download,
                            allow_cpu=args.allow_cpu)
            render()
        elif args.command == "sweep":
            _sweep_command(parser, args, pairs)
        elif args.command == "exercises":
            return exercises.main(args)
        elif args.command == "render":
            render(Path(args.root) if args.root else None)
        elif args.command == "list":
            print("Set any of these with: memlab run CHAPTER --profile P -p NAME VALUE "
                  "(defaults per profile)")
            for cid, ch in CHAPTERS.items():
                print(f"{cid}: {ch.title}")
                try:
                    print("\n".join(list_lines(cid)))
                except ImportError as e:
                    print(f"    (not available: {e})")
        return 0
    except ConfigError as e:
        print(f"memlab: error: {e}", file=sys.stderr)
        return 2
    except (RunError, BuildError) as e:
        print(f"memlab: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("memlab: interrupted; the published book/ is unchanged", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
