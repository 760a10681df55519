"""The command line of the benchmark suite: ``python -m benchmarks`` and ``pardnn bench``.

:func:`main` is ``python -m benchmarks``. :func:`register` is the plugin hook through which the
``pardnn`` command gets its ``bench`` sub-command: the entry point group ``pardnn.commands`` names it
(``bench = "benchmarks.cli:register"``), so the library itself holds no benchmark code. Both take
the options of :func:`add_bench_arguments` and run :func:`run_bench`; the report records the command
as it was typed (``pardnn bench ...`` or ``python -m benchmarks ...``).
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.report import output_paths, write_outputs
from benchmarks.suite import (
    BASELINES,
    FULL,
    LABELS,
    MODEL_GRAPHS,
    QUICK,
    LinePrinter,
    SuiteConfig,
    graph_paths,
    run_suite,
)
from pardnn.errors import MissingDependencyError, PardnnError

__all__ = ["add_bench_arguments", "command_line", "config_from_args", "main", "register", "run_bench"]

EXIT_OK, EXIT_BAD_INPUT = 0, 1
USAGE = """\
``python -m benchmarks``: the partitioner benchmark suite, the same as ``pardnn bench``.

    python -m benchmarks            # full suite (minutes): benchmarks/RESULTS.md, benchmarks/out/
    python -m benchmarks --quick    # CI suite (seconds): benchmarks/out/quick/
    python -m benchmarks --help     # every option
"""
BENCH_HELP = "benchmark ParDNN against every baseline; write RESULTS.md, CSV and plots"
BENCH_DESCRIPTION = (
    "Run ParDNN and the baseline placers on synthetic DNN graphs (and any graph files given) for several device "
    "counts, without and under memory limits, time the pardnn commands, and write benchmarks/RESULTS.md (command, "
    "machine, summary, a table per suite), benchmarks/out/results.csv and plots of the makespan ratios and of placer "
    "time against graph size (log-log, fitted slopes). The full suite takes minutes; --quick takes seconds. Default "
    "paths are relative to the current directory: run it from the repository root.")
BENCH_EPILOG = "exit codes: 0 ok, 1 bad input (a missing or invalid graph file), 2 bad command line."


def _number(text: str, kind: type, rule: str, ok: Callable[[Any], bool]) -> Any:
    try:
        value = kind(text.replace("_", ""))
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not {rule}")
    return value


def _positive_int(text: str) -> int:
    return int(_number(text, int, "a whole number >= 1", lambda v: v >= 1))


def _factor(text: str) -> float:
    return float(_number(text, float, "a finite number > 0", lambda v: math.isfinite(v) and v > 0))


def _seconds(text: str) -> float:
    return float(_number(text, float, "a finite number of seconds >= 0", lambda v: math.isfinite(v) and v >= 0))


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``pardnn bench`` (and ``python -m benchmarks``). ``None`` means "the mode's default"."""
    parser.add_argument("graph_files", nargs="*", metavar="GRAPH",
                        help="graph files (or directories of *.json.gz) to run besides the synthetic graphs")
    parser.add_argument("--graphs", nargs="+", action="extend", default=[], metavar="DIR_OR_FILE",
                        help="more graph files or directories of graph files (default in the full suite: "
                             f"{MODEL_GRAPHS}/ if it exists, where `python -m jobs.paper` writes the paper's models)")
    parser.add_argument("--quick", action="store_true",
                        help=f"the CI suite (seconds): {', '.join(f'{s:,}' for s in QUICK.sizes)} ops, K = "
                             f"{', '.join(map(str, QUICK.devices))}, {', '.join(LABELS[p] for p in QUICK.baselines)}, "
                             f"LC budget {QUICK.lc_budget_s:g} s; writes under benchmarks/out/quick/")
    parser.add_argument("--sizes", nargs="*", type=_positive_int, default=None, metavar="OPS",
                        help="synthetic graph sizes (default: " + ", ".join(f"{s:_}" for s in FULL.sizes)
                             + "; none: `--sizes` alone)")
    parser.add_argument("--devices", "-k", nargs="+", type=_positive_int, default=None, metavar="K",
                        help="device counts (default: " + ", ".join(map(str, FULL.devices)) + ")")
    parser.add_argument("--factors", nargs="*", type=_factor, default=None, metavar="F",
                        help="memory limits as factors of demand / K (default: "
                             + ", ".join(f"{f:g}" for f in FULL.factors) + "; none: `--factors` alone)")
    parser.add_argument("--placers", nargs="+", choices=BASELINES, default=None, metavar="NAME",
                        help="baselines to compare ParDNN with (default: all: " + ", ".join(BASELINES) + ")")
    parser.add_argument("--lc-budget", type=_seconds, default=None, metavar="SECONDS",
                        help=f"time budget of each linear clustering run (default: {FULL.lc_budget_s:g} s)")
    parser.add_argument("--lc-max-ops", type=_positive_int, default=None, metavar="OPS",
                        help=f"skip linear clustering above this many ops (default: {FULL.lc_max_ops:_})")
    parser.add_argument("--seed", type=int, default=None, help="seed of the synthetic graphs (default: 0)")
    parser.add_argument("--no-speed", action="store_true", help="do not time the pardnn commands")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="directory for results.csv and the plots (default: benchmarks/out)")
    parser.add_argument("--results", type=Path, default=None, metavar="FILE",
                        help="the Markdown report (default: benchmarks/RESULTS.md; with --quick, DIR/RESULTS.md)")


def config_from_args(args: argparse.Namespace) -> SuiteConfig:
    """The suite of the mode (``--quick`` or full) with the options given replacing its defaults."""
    mode = QUICK if args.quick else FULL

    def chosen(value: Any, default: Any) -> Any:
        if value is None:
            return default
        return tuple(dict.fromkeys(value)) if isinstance(value, list) else value

    named = [*args.graph_files, *args.graphs]
    if not named and not args.quick and MODEL_GRAPHS.is_dir():
        named = [MODEL_GRAPHS]
    config = SuiteConfig(
        sizes=chosen(args.sizes, mode.sizes), devices=chosen(args.devices, mode.devices),
        factors=chosen(args.factors, mode.factors), baselines=chosen(args.placers, mode.baselines),
        graph_files=graph_paths(named),
        lc_budget_s=chosen(args.lc_budget, mode.lc_budget_s), lc_max_ops=chosen(args.lc_max_ops, mode.lc_max_ops),
        speed_ops=0 if args.no_speed else mode.speed_ops,
        speed_devices=mode.speed_devices, speed_repeats=mode.speed_repeats, seed=chosen(args.seed, mode.seed))
    if not config.sizes and not config.graph_files:
        raise PardnnError("nothing to run: no synthetic sizes (--sizes) and no graph files")
    return config


def command_line(prog: str, args: argparse.Namespace) -> str:
    """The command with the options given (in a canonical order), for the report's first line."""
    parts = [*shlex.split(prog), *args.graph_files]
    if args.quick:
        parts.append("--quick")
    for flag, values in (("--sizes", args.sizes), ("--devices", args.devices), ("--factors", args.factors),
                         ("--placers", args.placers), ("--graphs", args.graphs or None)):
        if values is not None:
            parts += [flag, *map(str, values)]
    for flag, value in (("--lc-budget", args.lc_budget), ("--lc-max-ops", args.lc_max_ops), ("--seed", args.seed),
                        ("--out", args.out), ("--results", args.results)):
        if value is not None:
            parts += [flag, str(value)]
    if args.no_speed:
        parts.append("--no-speed")
    return shlex.join(parts)


def run_bench(args: argparse.Namespace, prog: str = "pardnn bench", progress: LinePrinter = print) -> list[Path]:
    """Run the suite the parsed ``args`` describe, write its outputs, return the files written.

    ``prog`` is the command as the report records it. Raises :class:`PardnnError` for bad input (a
    missing or invalid graph file, nothing to run, matplotlib missing).
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError("pardnn bench draws its plots with matplotlib: pip install matplotlib") from exc
    config = config_from_args(args)
    artifacts, results_path = output_paths(args)
    results = run_suite(config, progress)
    return write_outputs(results, command_line(prog, args), artifacts, results_path)


def _pardnn_bench(args: argparse.Namespace) -> int:
    """The ``pardnn bench`` sub-command: errors propagate to ``pardnn``'s main (exit 1, one line)."""

    def progress(message: str) -> None:
        print(f"pardnn bench: {message}", file=sys.stderr, flush=True)

    for path in run_bench(args, "pardnn bench", progress):
        print(f"wrote {path}")
    return EXIT_OK


def register(subparsers: Any) -> None:
    """Add the ``bench`` sub-command to ``subparsers`` (what ``ArgumentParser.add_subparsers`` returns).

    The plugin hook of the ``pardnn`` command (entry point group ``pardnn.commands``). The parsed
    arguments carry ``func``: it runs the suite and returns the exit code, or raises
    :class:`PardnnError` for bad input.
    """
    bench = subparsers.add_parser("bench", help=BENCH_HELP, description=BENCH_DESCRIPTION, epilog=BENCH_EPILOG)
    add_bench_arguments(bench)
    bench.set_defaults(func=_pardnn_bench)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=USAGE,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bench_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks``: run the suite; bad input is one line on stderr and exit 1."""
    args = build_parser().parse_args(argv)

    def progress(message: str) -> None:
        print(f"benchmarks: {message}", file=sys.stderr, flush=True)

    try:
        written = run_bench(args, "python -m benchmarks", progress)
    except (PardnnError, OSError) as exc:
        print(f"benchmarks: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for path in written:
        print(f"wrote {path}")
    return EXIT_OK
