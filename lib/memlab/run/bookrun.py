"""``memlab book``: every chapter, one after another or several at once, then the render.

One at a time (``--jobs 1``) each chapter computes with every core and relays its progress bars
to the terminal itself. With ``--jobs N`` up to N chapters run at once, each in its own process
with ``cores // N`` threads (a training loop at one thread uses its core better than two threads
share two: see the book record on the cost page). A chapter that needs a model another chapter
of this book will train waits for that chapter (from the recorded runs' cache keys; chapter 6
reads chapters 1 and 3's models), and the cache's key lock keeps any model from being trained
twice even where no record tells. The terminal shows one line per event (a chapter starting or
ending, what its run prints) and one status bar: how many chapters are done, the book's time
left and each running chapter's latest progress line. In a log (stderr not a terminal) the
status bar is a plain line every :func:`memlab.core.relay.log_every_s` seconds, and each running
chapter's stage lines (a progress bar starting or ending) are lines of their own.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from memlab.core import costs


def needs(chapters: list[str], ests: dict[str, dict]) -> dict[str, set[str]]:
    """For each chapter, the earlier chapters (book order) that train a model it reads.

    From each chapter's estimate (:func:`memlab.core.costs.estimate`): ``keys`` (the models a run
    of it uses) and ``to_train`` (those it would train now). A chapter without a recorded run
    needs nothing that is known: the cache's key lock still trains each model once.
    """
    out: dict[str, set[str]] = {c: set() for c in chapters}
    for i, c in enumerate(chapters):
        mine = set(ests.get(c, {}).get("keys") or ())
        for d in chapters[:i]:
            if mine & set(ests.get(d, {}).get("to_train") or ()):
                out[c].add(d)
    return out


def _job(chapter: str, profile: str, flags: dict[str, Any], threads: int, alongside: int, out: Path,
         progress_file: Path, result: Path) -> None:
    """One chapter in a child process: what it prints goes to ``out``, its progress to ``progress_file``,
    and ``{"ok", "error", "wall_s"}`` to ``result``."""
    from memlab.run.runner import run_chapter

    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)  # the kernel's and papermill's own output too, not only Python's
    os.dup2(fd, 2)
    os.close(fd)
    # new streams on those descriptors: the inherited ones may not write to them (a test's capture)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)
    os.environ[costs.ALONGSIDE_ENV] = str(alongside)  # its cost record says it shared the cores
    t0 = time.perf_counter()
    res: dict[str, Any] = {"ok": True, "error": None}
    try:
        run_chapter(chapter, profile, {}, None, threads=threads, progress_file=progress_file, **flags)
    except BaseException as err:  # noqa: BLE001 - every failure becomes the book's one error line
        res = {"ok": False, "error": str(err) or type(err).__name__}
        print(f"{chapter}: {res['error']}", flush=True)
    res["wall_s"] = time.perf_counter() - t0
    result.write_text(json.dumps(res))


def run_parallel(chapters: list[str], profile: str, flags: dict[str, Any], threads: int, jobs: int,
                 ests: dict[str, dict], book_est: dict) -> dict[str, float]:
    """Run ``chapters`` up to ``jobs`` at a time (see the module); returns chapter -> wall seconds.

    Stops starting chapters after the first failure, lets the running ones finish, then raises
    :class:`memlab.run.runner.RunError` naming every chapter that failed.
    """
    import multiprocessing

    from memlab.core.progress import progress, to_log
    from memlab.core.relay import Tail, enabled, is_stage, latest_lines
    from memlab.run.runner import RunError

    ctx = multiprocessing.get_context("fork")  # the child inherits this process's chapters and settings
    need = needs(chapters, ests)
    wall = {c: book_est["chapters"].get(c, {}).get("wall_s") for c in chapters}
    # longest first (known estimates), the rest in book order: the last chapter started is a short one
    todo = sorted(chapters, key=lambda c: (-(wall[c] or 0.0), chapters.index(c)))
    running: dict[str, tuple[Any, float, Tail]] = {}
    # a log gets each running chapter's stage lines (its status line shows only the latest line)
    in_log = to_log()
    stages: dict[str, Tail] | None = {} if in_log and enabled() else None
    done: dict[str, float] = {}
    failed: dict[str, str] = {}
    n = len(chapters)
    # one line as wide as the terminal (tqdm cuts the running chapters' lines there; a terminal
    # that reports no width gets 100 columns)
    cols = shutil.get_terminal_size((100, 24)).columns or 100
    bar = progress(total=n, desc="book", bar_format="{desc}: {n}/{total} chapters done [{elapsed}]{postfix}",
                   ncols=cols, mininterval=1.0, unit="chapters")
    with tempfile.TemporaryDirectory(prefix="memlab-book-") as tmp:
        folder = Path(tmp)

        def start(c: str) -> None:
            files = {k: folder / f"{c}.{k}" for k in ("out", "progress", "result")}
            files["progress"].write_text("")
            p = ctx.Process(target=_job, args=(c, profile, flags, threads, jobs - 1, files["out"],
                                               files["progress"], files["result"]), name=f"memlab-book-{c}")
            p.start()
            running[c] = (p, time.perf_counter(), Tail(files["out"]))
            if stages is not None:
                stages[c] = Tail(files["progress"])
            guess = f", estimated ~{costs.minutes(wall[c]):g} min" if wall[c] else ""
            bar.write(f"book: starting {c} (chapter {chapters.index(c) + 1} of {n}, {threads} "
                      f"thread{'s' if threads != 1 else ''}{guess})")

        def show(c: str, tail: Tail) -> None:
            """What chapter ``c`` printed since the last look, and in a log its new stage lines."""
            for line in tail.lines():
                bar.write(line)
            for line in stages[c].lines() if stages is not None else ():
                if is_stage(line):
                    bar.write(f"{c}: {line}")

        try:
            while todo or running:
                while not failed and len(running) < jobs:
                    ready = [c for c in todo if need[c] <= set(done)]
                    if not ready:
                        break
                    todo.remove(ready[0])
                    start(ready[0])
                for c, (p, t0, tail) in list(running.items()):
                    show(c, tail)
                    if p.is_alive():
                        continue
                    p.join()
                    show(c, tail)
                    res_path = folder / f"{c}.result"
                    res = json.loads(res_path.read_text()) if res_path.exists() else {
                        "ok": False, "error": f"its process ended with exit code {p.exitcode}"}
                    del running[c]
                    if res["ok"]:
                        done[c] = float(res["wall_s"])
                        bar.update(1)
                    else:
                        failed[c] = res["error"]
                        if todo:
                            bar.write(f"book: {c} failed; starting no more chapters, waiting for the "
                                      f"{len(running)} running")
                if failed and not running:
                    break
                now = time.perf_counter()
                left = costs.book_left_s(book_est, todo, done, {c: now - t0 for c, (_, t0, _) in running.items()})
                status = ([f"~{costs.minutes(left):g} min left"] if left is not None
                          else ["time left not estimated"] if in_log else [])  # a log says so: no line lacks it unnoticed
                # each running chapter's line gets its share of what the terminal has left
                # (a log has no width: each line gets 70)
                share = 70 if in_log else max(24, (cols - 45 - sum(map(len, status))) // max(1, len(running)) - 2)
                inside = latest_lines({c: folder / f"{c}.progress" for c in running}, share)
                bar.set_postfix_str(" | ".join(status + ([inside] if inside else [])), refresh=False)
                bar.refresh()
                time.sleep(1.0)
        except BaseException:
            # Ctrl-C reached the children too: give each a moment to stop its kernel and clean up
            for p, _, _ in running.values():
                p.join(timeout=20)
                if p.is_alive():
                    p.terminate()
                    p.join()
            raise
        finally:
            bar.close()
    if failed:
        raise RunError("the book stopped: " + "; ".join(f"{c}: {e}" for c, e in failed.items()))
    return done


def jobs_count(jobs: int | None, threads: int | None = None) -> int:
    """Chapters ``memlab book`` runs at once: ``--jobs`` (1 to the number of chapters), else on a
    CPU as many as the cores hold at ``--threads`` (or ``OMP_NUM_THREADS``, else 1) each, up to the
    number of chapters (measured: 2 chapters at 1 thread each took 39
    min for the cold book where one at a time at 2 threads took 46, on 2 cores), and 1 on a GPU
    (chapters sharing one GPU each slowed to a third: ``book/gpu``).

    Bad input raises :class:`memlab.core.config.ConfigError` naming what the user typed."""
    from memlab.core.chapters import CHAPTERS
    from memlab.core.config import ConfigError, available_cores, device

    if jobs is None:
        if device().type == "cuda":
            return 1
        return max(1, min(available_cores() // (_chosen_threads(threads) or 1), len(CHAPTERS)))
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= len(CHAPTERS):
        raise ConfigError(f"parameter 'jobs': must be an integer from 1 to {len(CHAPTERS)} (the chapters) "
                          f"(got {jobs!r}); this machine has {available_cores()} cores")
    return jobs


def threads_per_job(threads: int | None, jobs: int) -> int:
    """Threads of each chapter: ``--threads``, else ``OMP_NUM_THREADS``, else the cores shared among the jobs."""
    from memlab.core.config import available_cores

    return _chosen_threads(threads) or max(1, available_cores() // jobs)


def _chosen_threads(threads: int | None) -> int | None:
    """The threads the user chose (``--threads``, else ``OMP_NUM_THREADS``), None when neither is set."""
    from memlab.core.config import thread_count

    return thread_count(threads) if threads is not None or os.environ.get("OMP_NUM_THREADS", "").strip() else None


def book_command(args, root: Path, render) -> None:
    """``memlab book``: check every chapter, print the book's estimate, run the chapters (one at a
    time, or ``--jobs`` at once), record the whole run in the cost log
    (:func:`memlab.core.costs.record_book`), then ``render()``."""
    from memlab.core.chapters import CHAPTERS
    from memlab.core.progress import progress, ticking
    from memlab.run.runner import estimate, run_chapter, set_flag_env, validate

    start = time.perf_counter()
    book = root / "book"
    chapters = args.chapters or list(CHAPTERS)
    jobs = min(jobs_count(args.jobs, args.threads), len(chapters))
    threads = threads_per_job(args.threads, jobs)
    them = f"{len(chapters)} chapter{'s' if len(chapters) != 1 else ''}"
    print(f"book: {them} at profile {args.profile}"
          + (f", {jobs} at a time" if jobs > 1 else "")
          + "; checking every chapter's parameters before any runs", flush=True)
    set_flag_env(args.allow_download, args.allow_cpu, ())  # for the preflight of every chapter
    # all before running any; a bar that keeps ticking, as the first imports from a cold disk can take a while
    with progress(chapters, desc="book: checking", mininterval=0.5) as bar, ticking(bar):
        cfgs = {c: validate(c, args.profile, {}, root)[1] for c in bar}
    ests = {c: estimate(c, args.profile, cfg, threads, book, root) for c, cfg in cfgs.items()}
    est = costs.book_estimate(ests, jobs)
    print(costs.book_estimate_line(args.profile, threads, est), flush=True)
    before = costs.read_log(book)
    flags = {"no_cache": args.no_cache, "allow_download": args.allow_download, "allow_cpu": args.allow_cpu}
    if jobs > 1:
        run_parallel(chapters, args.profile, flags, threads, jobs, ests, est)
    else:
        done: dict[str, float] = {}
        for i, c in enumerate(chapters, 1):
            left = costs.book_left_s(est, chapters[i - 1:], done)
            left_text = "" if left is None else f" (estimated ~{costs.minutes(left):g} min of the book left)"
            print(f"book: chapter {i} of {len(chapters)}: {c}{left_text}", flush=True)
            t0 = time.perf_counter()

            def book_left(elapsed: float, rest: list[str] = chapters[i:], c: str = c) -> float | None:
                return costs.book_left_s(est, rest, done, {c: elapsed})

            run_chapter(c, args.profile, {}, None, threads=threads, book_left=book_left, **flags)
            done[c] = time.perf_counter() - t0
    records = [r for r in costs.read_log(book) if r not in before and r.get("chapter") in chapters]
    # before render: the page shows it
    rec = costs.record_book(book, args.profile, time.perf_counter() - start, records, jobs=jobs)
    with progress(desc="book: rendering the HTML book", bar_format="{desc} [{elapsed}]") as bar, ticking(bar):
        render()
    if rec is not None:
        how = "from an empty model cache" if rec["from_empty_cache"] else "with some models cached"
        print(f"book: its {them} ran in {costs.minutes(rec['wall_s']):g} min wall and "
              f"{costs.minutes(rec['cpu_s']):g} CPU-min, {how} (recorded in {costs.log_path(book)}); "
              f"the render took {time.perf_counter() - start - rec['wall_s']:.0f} s", flush=True)
