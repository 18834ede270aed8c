"""Run one chapter: validate its parameters, check its data, execute it with papermill, publish it.

Used by :mod:`memlab.cli`, :mod:`memlab.run.sweep` and :mod:`memlab.report.robustness`; imports none of them.

A run executes into a staging folder inside the book (``.staging-<chapter>.tmp-<pid>-<hex>``)
and publishes the notebook, results and figures into the book only when the whole chapter
succeeded (:func:`publish`), so a failed run leaves the previous good outputs in place.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from memlab.core import notices, relay
from memlab.core.chapters import CHAPTERS
from memlab.core.config import DEFAULT_PROFILE, PROFILES, ConfigError, Param, path_kind, repo_root, thread_count
from memlab.core.publish import PublishError, clean_stale_staging, publish


class RunError(RuntimeError):
    """A chapter failed while executing; the message names the chapter and the cell."""


def failed_folder(book: Path) -> Path:
    """Where a failed run leaves its notebook and kernel log: ``_build/failed/`` beside the book folder
    (``<repo>/_build/failed/`` for the repository's ``book/``), never inside the book."""
    return Path(book).parent / "_build" / "failed"


def parse_value(text: str, param: Param | None = None, name: str = "value") -> Any:
    """A command-line value, read for ``param`` (its kind decides; see :func:`memlab.core.config.parse_text`).

    Without ``param`` the kind is guessed by the same strict rules: ``3`` -> int, ``1e-3`` / ``.inf``
    -> float, ``true`` -> bool, ``[a, b]`` -> list of strings, ``none`` -> None, else the text.
    """
    from memlab.core import config

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
    from memlab.core import config

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


def notebook_from_source(chapter: str, root: Path):
    """The chapter notebook (an ``nbformat.NotebookNode``) built from its jupytext source ``notebooks/<id>.py``."""
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
    from memlab.core.config import resolve

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
    if data_env and path_kind(data_env) != "folder":
        raise ConfigError(f"parameter 'data_root': MEMLAB_DATA_ROOT={data_env!r} is not a folder")
    check_cache_folder()
    cfg = resolve(chapter, profile=profile, **params)
    _preflight(chapter, cfg)
    return nb, cfg


def check_cache_folder() -> None:
    """Refuse, before any work, a model cache (``--cache-dir`` / ``MEMLAB_CACHE``) that is a file, sits
    under a file, or cannot be written (a probe file is created and removed: permission bits alone do
    not tell, since root writes through them and a read-only mount refuses everyone)."""
    from memlab.core.cache import cache_path
    from memlab.core.fsutil import tmp_path

    folder = cache_path()
    existing = next((p for p in (folder, *folder.parents) if path_kind(p) is not None), None)
    if existing == folder and path_kind(folder) != "folder":
        raise ConfigError(f"parameter 'cache-dir': {str(folder)!r} is a file, not a folder")
    if existing is None or path_kind(existing) != "folder":
        raise ConfigError(f"parameter 'cache-dir': {str(folder)!r} cannot be a folder "
                          f"({str(existing)!r} is a file)")
    probe = tmp_path(existing, "write-probe")
    try:
        probe.touch(exist_ok=False)
        probe.unlink()
    except OSError as err:
        raise ConfigError(f"parameter 'cache-dir': cannot write to {str(existing)!r} "
                          f"({err.strerror or type(err).__name__}); choose a writable --cache-dir") from None


def _preflight(chapter: str, cfg) -> None:
    """Data, hub models and GPU of the run, checked before any work (:mod:`memlab.run.preflight`).

    Flags arrive through the environment that :func:`run_chapter` sets
    (``MEMLAB_ALLOW_DOWNLOAD``, ``MEMLAB_ALLOW_CPU``, ``MEMLAB_TRUST_REMOTE_CODE``).
    """
    from memlab.run import preflight

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
    # A start time, not the status: papermill's notebook_complete marks every cell still pending as
    # "completed" after a dead kernel, but only cells that started have a start_time.
    started = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
               and c.metadata.get("papermill", {}).get("start_time")]
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


def _kernel_manager_class(log_path: Path | None = None, runtime: Path | None = None):
    """A kernel manager that remembers how its kernel process ended (for :func:`_failing_cell`).

    With ``log_path``, the kernel process's own stderr (C-library messages such
    as "double free or corruption", and the Python stack that faulthandler
    prints on a fatal signal) goes to that file; with ``runtime``, its
    connection file goes into that folder.
    """
    from jupyter_client.manager import AsyncKernelManager

    class RecordingKernelManager(AsyncKernelManager):
        last_returncode: int | None = None

        async def start_kernel(self, **kw):
            if runtime is not None and not self.connection_file:
                # jupyter_client would make it with mkstemp in /tmp, where a run killed with -9 leaves
                # it for good; in the staging folder, the next run's clean-up removes it
                self.connection_file = str(runtime / f"kernel-{os.getpid()}-{id(self):x}.json")
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


def _print_notices(path: Path) -> None:
    """The kernel's cache warnings (:mod:`memlab.core.notices`), one ``memlab: warning:`` line each (those
    of one cause joined, :func:`memlab.core.notices.fold`)."""
    for line in notices.fold(notices.read(path)):
        print(f"memlab: warning: {line}", file=sys.stderr)


def book_folder(book_dir: str | os.PathLike | None, root: Path) -> Path:
    """The folder a run publishes into: ``<root>/book`` when ``book_dir`` is None, else ``book_dir``.

    An empty ``book_dir`` (``--book-dir "$X"`` with ``X`` unset) or one that is a file is refused
    rather than read as the repository's own book.
    """
    if book_dir is None:
        return root / "book"
    if not str(book_dir).strip():
        raise ConfigError("parameter 'book-dir': is empty (give a folder, or leave --book-dir out to "
                          "publish into book/)")
    path = Path(book_dir).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"parameter 'book-dir': {str(book_dir)!r} is a file, not a folder")
    return path


def check_trusted_names(names: Sequence[str]) -> None:
    """Refuse a ``--trust-remote-code`` value that is not one model's name (empty, a wildcard, a list)."""
    for name in names:
        if not name.strip() or any(c in name for c in "*?[],") or name != name.strip():
            raise ConfigError(f"parameter 'trust-remote-code': {name!r} is not a model name; name each model "
                              "whose own code may run, e.g. --trust-remote-code GSAI-ML/LLaDA-8B-Base "
                              "(repeat the flag for several)")


def set_flag_env(allow_download: bool, allow_cpu: bool, trust_remote_code: Sequence[str]) -> None:
    """The run's flags as environment variables: the preflight, the kernel and its loaders read them."""
    from memlab.data.download import allow_download as env_allows

    check_trusted_names(trust_remote_code)
    os.environ["MEMLAB_ALLOW_DOWNLOAD"] = "1" if allow_download or env_allows() else "0"
    if allow_cpu:
        os.environ["MEMLAB_ALLOW_CPU"] = "1"
    if trust_remote_code:
        names = [n for n in os.environ.get("MEMLAB_TRUST_REMOTE_CODE", "").split(",") if n]
        os.environ["MEMLAB_TRUST_REMOTE_CODE"] = ",".join(dict.fromkeys(names + list(trust_remote_code)))


@contextlib.contextmanager
def flag_env(allow_download: bool = False, allow_cpu: bool = False, trust_remote_code: Sequence[str] = ()):
    """:func:`set_flag_env` for the duration of a block (``--dry-run`` validates under the same flags)."""
    before = dict(os.environ)
    try:
        set_flag_env(allow_download, allow_cpu, trust_remote_code)
        yield
    finally:
        os.environ.clear()
        os.environ.update(before)


def estimate(chapter: str, profile: str, cfg, threads: int, book: Path, root: Path) -> dict:
    """The cost of the run about to start (:func:`memlab.core.costs.estimate`), from this book's cost log and the published one."""
    from memlab.core import cache, costs
    from memlab.core.results import device_label, to_jsonable

    books = list(dict.fromkeys([book, root / "book"]))
    return costs.estimate(chapter, profile, to_jsonable(cfg.to_dict()), threads, books, cache.has,
                          code=costs.code_version(chapter), device=device_label())


def verdict_basis(chapter: str, book: Path | None = None) -> str:
    """What the run's closing line says its verdicts are: single-seed, and pooled on the page where
    ``book`` (default the repository's, which the notebook reads) holds a seed sweep of the chapter's
    current code (the page's findings and claims table show it)."""
    from memlab.report import pagekit

    found = pagekit.current_sweep(chapter, book)
    if found is None:
        return "verdicts single-seed (one run)"
    return (f"this run's verdicts are single-seed; the page's findings and claims table show them pooled over "
            f"{found[1]} seeds (the published sweep of this chapter's code)")


def print_estimate(chapter: str, profile: str, cfg, threads: int, book: Path, root: Path, file=None) -> dict:
    """Print the one estimate line before any work; returns the estimate."""
    from memlab.core import costs

    est = estimate(chapter, profile, cfg, threads, book, root)
    print(costs.estimate_line(chapter, profile, est), file=file or sys.stdout, flush=True)
    return est


def _record_cost(book: Path, chapter: str, wall_s: float, est: dict) -> None:
    """Append the published run's cost to the book's cost log (``<book>/costs.json``)."""
    import json

    from memlab.core import costs

    try:
        payload = json.loads((book / "results" / f"{chapter}.json").read_text())
    except (OSError, ValueError):
        return
    costs.record(book, payload, wall_s, est.get("this_cpu_s"), code=costs.code_version(chapter))


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
    threads: int | None = None,
    progress_file: Path | None = None,
    book_left: Callable[[float], float | None] | None = None,
) -> Path:
    """Validate and preflight, execute with papermill, publish; returns the executed notebook's path.

    ``progress_file``: the kernel's progress lines are appended there instead of shown on this
    terminal (a sweep's run, or one chapter of ``memlab book --jobs N``, whose bar shows them).
    ``book_left(seconds this chapter has run)``: ``memlab book``'s estimate of the book's wall
    seconds left (None when unknown), which a log's heartbeat adds to the chapter's time left.

    The kernel computes with ``threads`` threads (:func:`memlab.core.config.thread_count`: the
    argument, else ``OMP_NUM_THREADS``, else every core this process may use).

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
    n_threads = thread_count(threads)  # a bad --threads or OMP_NUM_THREADS is refused before any work
    allow_download = allow_download or env_allows()  # the flag, or MEMLAB_ALLOW_DOWNLOAD=1 exported
    book = book_folder(book_dir, root)
    env_before = dict(os.environ)
    staging: Path | None = None
    try:
        set_flag_env(allow_download, allow_cpu, trust_remote_code)
        nb, cfg = validate(chapter, profile, params, root)
        est = print_estimate(chapter, profile, cfg, n_threads, book, root)
        from memlab.run import preflight

        preflight.fetch(chapter, cfg)  # downloads (when allowed) before the kernel starts
        book.mkdir(parents=True, exist_ok=True)
        clean_stale_staging(book)
        from memlab.core.fsutil import make_tmp_dir

        staging = make_tmp_dir(book, f"staging-{chapter}")  # .staging-<id>.tmp-<pid>-<hex>, umask mode
        os.environ["MEMLAB_OUTPUT_DIR"] = str(staging)
        notice_file = staging / "notices.log"
        os.environ[notices.ENV] = str(notice_file)
        if no_cache:
            os.environ["MEMLAB_NO_CACHE"] = "1"
        if not allow_download:
            os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
            if profile in ("smoke", "cpu"):
                os.environ["MEMLAB_OFFLINE"] = "1"  # the kernel's memlab import turns the guard on
        os.environ.setdefault("MPLBACKEND", "Agg")
        from memlab.core.cache import cache_path

        # compiled kernels beside the models, so an empty cache folder means a cold run, compile included
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_path().parent / "inductor"))
        # Every core by default (--threads N or OMP_NUM_THREADS to choose): numbers are identical
        # on the same CPU type at the same thread count, which the provenance records.
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(n_threads)
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
        km_class = _kernel_manager_class(kernel_log, staging)
        follow = relay.enabled() and not log_output and progress_file is None
        if follow:  # the kernel's progress bars, on this terminal (memlab.core.relay)
            os.environ[relay.ENV] = str(staging / "progress.log")
        elif progress_file is not None:
            os.environ[relay.ENV] = str(progress_file)
        try:
            # a log's heartbeat says the time left from the estimate's wall time at these threads
            def note(elapsed: float) -> str | None:
                left = book_left(elapsed) if book_left else None
                return None if left is None else f"~{relay.duration(left)} of the book left"

            with (relay.Follower(staging / "progress.log", chapter, expected_s=est.get("this_wall_s"), note=note)
                  if follow else contextlib.nullcontext()):
                papermill.execute_notebook(
                    str(src_nb), str(out_nb), parameters=parameters, kernel_name="python3", cwd=str(root),
                    progress_bar=False, log_output=log_output, report_mode=False, kernel_manager_class=km_class,
                )
        except Exception as err:  # noqa: BLE001 - every failure kind becomes one named line
            _print_notices(notice_file)
            failed = failed_folder(book) / f"{chapter}.ipynb"
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
        _print_notices(notice_file)
        src_nb.unlink()
        try:
            publish(staging, book, chapter)
        except PublishError as err:
            raise RunError(str(err)) from None
        wall = time.perf_counter() - start
        _record_cost(book, chapter, wall, est)
        print(f"{chapter}: ran at profile {profile} in {wall:.0f} s -> "
              f"{book / 'chapters' / (chapter + '.ipynb')}; {verdict_basis(chapter)}")
    finally:
        os.environ.clear()
        os.environ.update(env_before)
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return book / "chapters" / f"{chapter}.ipynb"
