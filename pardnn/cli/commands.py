"""The built-in sub-commands on graph files: info, simulate, place, convert, generate.

Each has an ``add_<name>(subparsers)`` that builds its parser and a ``cmd_<name>(args) -> int``;
:data:`BUILTIN` lists the adders in the order ``pardnn --help`` shows them.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pardnn.costs.machine import Machine, format_bytes
from pardnn.errors import PardnnError
from pardnn.polish.refine import REFINE_SECONDS
from pardnn.registry import PLACERS, get_placer
from pardnn.settings import PLACEMENT

from .options import (
    EXIT_OK,
    EXIT_USAGE,
    PROGRESS_MIN_OPS,
    StageProgress,
    add_cluster_options,
    add_interconnect_options,
    add_machine_options,
    add_parser,
    choices_metavar,
    cluster_from_args,
    machine_from_args,
    param_type,
    print_json,
    ratio_text,
    read_graph,
    us,
)
from .reports import PARDNN, format_allreduce, format_evaluation, format_report

__all__ = ["BUILTIN"]


# ---------------------------------------------------------------------------------------- info
def cmd_info(args: argparse.Namespace) -> int:
    from pardnn.costs.info import graph_info

    graph = read_graph(args.graph)
    info = graph_info(graph, Machine(2, None, args.bandwidth, args.latency))
    if args.json:
        print_json(info)
        return EXIT_OK
    print(f"graph {info['name']!r}: {info['ops']:,} ops ({info['normal_ops']:,} normal, "
          f"{info['residual_ops']:,} residual, {info['reference_ops']:,} reference), {info['edges']:,} edges, "
          f"{info['colocation_groups']:,} colocation groups")
    print(f"total work           {us(info['total_work_us'])}")
    print(f"critical path        {us(info['critical_path_us'])} (with communication: "
          f"{us(info['critical_path_with_comm_us'])})")
    print(f"degree of parallelism (DoP = work / critical path)   {ratio_text(info['dop'])}")
    print(f"comm-to-comp ratio   (CCR = comm of all edges / work) {ratio_text(info['ccr'])}"
          f"  at {args.bandwidth}, {args.latency}")
    print(f"memory               {format_bytes(info['residual_bytes'])} residual, "
          f"{format_bytes(info['normal_bytes'])} of normal outputs")
    return EXIT_OK


def add_info(sub: Any) -> None:
    info = add_parser(sub, "info", help="size, work, critical path, DoP and CCR of a graph",
                      description="Print the size of a graph, its total work and critical path, its degree of "
                                  "parallelism (DoP = work / critical path) and its communication-to-computation "
                                  "ratio (CCR = cost of all edges / work), as in the paper's Table 'DoP and CCR'.")
    info.add_argument("graph", help="graph file (.json, .json.gz or .pardnn, the native format)")
    add_interconnect_options(info, "for CCR")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(func=cmd_info)


# ------------------------------------------------------------------------------------ simulate
def cmd_simulate(args: argparse.Namespace) -> int:
    from pardnn.emulation.allreduce import emulate_with_allreduce
    from pardnn.emulation.emulator import emulate
    from pardnn.emulation.memory import track_memory
    from pardnn.emulation.simulate import evaluate
    from pardnn.emulation.trace import chrome_trace, plot_memory, write_trace
    from pardnn.io import read_ordered_placement, read_placement

    for option, path in (("--trace", args.trace), ("--memory-plot", args.memory_plot)):
        if path and not Path(path).resolve().parent.is_dir():
            raise PardnnError(f"{option} {path}: folder {Path(path).resolve().parent} does not exist; create it first")
    t0 = time.perf_counter()
    graph = read_graph(args.graph)
    if args.ignore_order:  # the order is not even read
        placement, order = read_placement(args.placement, graph, devices=args.devices), None
    else:
        placement, order = read_ordered_placement(args.placement, graph, devices=args.devices)
    devices = args.devices if args.devices is not None else int(placement.max(initial=0)) + 1
    machine = machine_from_args(args, graph, devices)
    t1 = time.perf_counter()
    schedule = emulate(graph, machine, placement, order=order)
    memory = track_memory(graph, machine, placement, schedule)
    evaluation = evaluate(graph, machine, placement, schedule=schedule, memory=memory)
    cluster = cluster_from_args(args, machine)
    step = None if cluster is None else emulate_with_allreduce(graph, machine, placement, cluster, order=order,
                                                               schedule=schedule)
    t2 = time.perf_counter()
    written = []
    if args.trace:
        write_trace(args.trace, chrome_trace(graph, machine, placement, schedule, memory))
        written.append(f"trace {args.trace} ({machine.devices} device tracks)")
    if args.memory_plot:
        plot_memory(args.memory_plot, memory, machine, schedule.makespan_us,
                    title=f"{graph.name}: memory per device over one emulated step")
        written.append(f"memory plot {args.memory_plot}")
    if args.json:
        payload = evaluation.to_dict()
        payload["ordered"] = order is not None
        if step is not None:
            payload["allreduce"] = step.to_dict()
        payload["seconds"] = {"load": t1 - t0, "evaluate": t2 - t1}
        print_json(payload)
    else:
        print(f"{graph.name}: {graph.n:,} ops on {machine.describe()}")
        print("order           " + ("the file's run order on each device (enforced)" if order is not None else
                                    "each device in order of readiness (TensorFlow's FIFO)"))
        print(format_evaluation(evaluation))
        if step is not None:
            print(format_allreduce(step, cluster))
        print(f"time            load {t1 - t0:.2f} s, emulate + memory {t2 - t1:.2f} s")
    for line in written:
        print(f"wrote           {line}", file=sys.stderr if args.json else sys.stdout)
    return EXIT_OK


def add_simulate(sub: Any) -> None:
    simulate = add_parser(sub, "simulate", help="emulate a placement: makespan, memory per device, communication",
                          description="Emulate one training step of GRAPH placed by PLACEMENT (TensorFlow's FIFO "
                                      "scheduler per device, or the file's run order when it has one; transfers of "
                                      "latency + bytes / bandwidth) and report the makespan against the lower bound, "
                                      "the peak memory of every device against its limit, and the communication.")
    simulate.add_argument("graph", help="graph file (.json, .json.gz or .pardnn)")
    simulate.add_argument("placement", help="placement file: 'op_name device' lines, or 'op_name device position' "
                                            "lines of an ordered placement (pardnn place writes one when the order "
                                            "pays), or JSON {op_name: device} / {op_name: [device, position]}")
    simulate.add_argument("--ignore-order", action="store_true",
                          help="emulate an ordered placement's devices in order of readiness instead, to see what "
                               "its run order buys")
    add_machine_options(simulate, devices_required=False)
    add_cluster_options(simulate)
    simulate.add_argument("--json", action="store_true", help="print JSON")
    simulate.add_argument("--trace", metavar="FILE.json",
                          help="write the emulated step as a Chrome/Perfetto trace (open in https://ui.perfetto.dev "
                               "or chrome://tracing): one track per device, transfers as flows, memory counters; "
                               "FILE.json.gz is gzipped")
    simulate.add_argument("--memory-plot", metavar="FILE.png",
                          help="plot each device's memory over the step against its limit (needs matplotlib)")
    simulate.set_defaults(func=cmd_simulate)


# --------------------------------------------------------------------------------------- place
def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of seconds >= 0")
    return value


def cmd_place(args: argparse.Namespace) -> int:
    from pardnn.io import write_placement

    graph = read_graph(args.graph)
    machine = machine_from_args(args, graph, args.devices)
    progress = StageProgress() if graph.n > PROGRESS_MIN_OPS and not args.quiet else None
    placer = get_placer(args.algorithm)
    options: dict[str, Any] = {}
    if placer.memory_heuristics:
        # No --memory-heuristic: "auto", which pardnn.partitioner.resolve_heuristic decides from the machine.
        heuristic: str | None = "auto" if args.memory_heuristic is None else args.memory_heuristic
    elif args.memory_heuristic not in (None, "none"):
        with_heuristics = ", ".join(name for name, p in PLACERS.items() if p.memory_heuristics)
        raise PardnnError(f"--memory-heuristic {args.memory_heuristic} works with --algorithm {with_heuristics} "
                          f"only; {args.algorithm} has none (its report still says whether memory fits)")
    else:
        heuristic = None
    # The switches of the polishing stages, each where the placer has that option.
    for option, value in (("guarded", not args.no_guard), ("refine_seconds", args.refine_seconds)):
        if option in placer.options:
            options[option] = value
    if placer.order_option and args.no_order:
        options[placer.order_option] = False
    if placer.time_option and args.time_budget is not None:
        options[placer.time_option] = args.time_budget
    try:
        result = placer(graph, machine, memory_heuristic=heuristic, progress=progress, **options)
    finally:
        if progress is not None:
            progress.close()
    cluster = cluster_from_args(args, machine)
    judged = None
    if cluster is not None:  # the run order kept only where it pays with the allreduce in the step
        from pardnn.placement.allreduce_order import judge_order

        judged = judge_order(graph, machine, result, cluster)
        result = judged.result
    write_placement(args.output, graph, result.placement, order=result.order)
    if args.json:
        payload = result.report.to_dict()
        payload["placement_file"] = str(args.output)
        payload["ordered"] = result.order is not None
        if judged is not None:
            payload["allreduce"] = {**judged.step.to_dict(), "run_order": judged.why}
        print_json(payload)
    else:
        print(format_report(result.report))
        if judged is not None:
            print(format_allreduce(judged.step, cluster))
            if judged.why:
                print(judged.why)
        print(f"wrote {args.output}")
    return EXIT_OK


def add_place(sub: Any) -> None:
    place = add_parser(sub, "place", help="partition a graph across K devices with ParDNN and write the placement",
                       description="Run ParDNN (graph slicing into K critical paths and secondary clusters, then "
                                   "locality-first lookahead and level-aware mapping) on GRAPH for K devices, write "
                                   "one 'op_name device' line per op, and print what each stage did and cost, the "
                                   "emulated makespan against the lower bound, and per-device load and memory.")
    place.add_argument("graph", help="graph file (.json, .json.gz or .pardnn)")
    add_machine_options(place, devices_required=True)
    add_cluster_options(place)
    placers = "; ".join(f"{name}: {placer.summary}" for name, placer in PLACERS.items())
    budgets = ", ".join(f"{name} {placer.options[placer.time_option]:g} s" for name, placer in PLACERS.items()
                        if placer.time_option)
    place.add_argument("--algorithm", "-a", type=param_type("algorithm"), default=PARDNN,
                       metavar=choices_metavar("algorithm"),
                       help=f"placer (default {PARDNN}): {placers}")
    place.add_argument("--time-budget", type=float, default=None,
                       help=f"seconds a placer with a time budget may spend (default: its own: {budgets}); "
                            "linear_clustering stops clustering, exact (CP-SAT, deterministic seconds) reports the "
                            "best found and its proven bound")
    place.add_argument("--memory-heuristic", type=param_type("memory_heuristic"), default=None,
                       metavar=choices_metavar("memory_heuristic"),
                       help=f"{PLACEMENT['memory_heuristic'].help.replace('the memory limit', '--memory')}; "
                            "when overflow cannot meet the limits the exit code is 3. "
                            "Default: overflow when --memory is given, else none")
    place.add_argument("-o", "--output", required=True, help="placement file to write (.txt lines, or .json)")
    place.add_argument("--json", action="store_true", help="print the report as JSON")
    place.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    place.add_argument("--refine-seconds", type=_seconds, default=REFINE_SECONDS, metavar="S",
                       help="budget of the refinement (local search on the emulated schedule after the guard), "
                            "turned into a fixed number of emulations so every run gives the same placement; "
                            "0 turns it off (default: %(default)s)")
    place.add_argument("--no-guard", action="store_true",
                       help="skip the guard stage: keep ParDNN's own placement even when a cheap placement "
                            "(one device, contiguous split, round robin, critical path, METIS, ETF, a folded "
                            "device) that fits is faster; by default the fastest is kept and the report says "
                            "which. The refinement and the run order still run (--refine-seconds 0, "
                            "--no-run-order); --algorithm pardnn-paper is the paper's algorithm alone")
    place.add_argument("--no-run-order", dest="no_order", action="store_true",
                       help="never write a run order: by default, when running each device's ops in upward-rank "
                            "order (enforced with control dependencies by pardnn.tf.apply) makes the step strictly "
                            "shorter and still fits, the placement is refined under that order and the file gets a "
                            "third column, each op's position on its device")
    place.set_defaults(func=cmd_place)


# ------------------------------------------------------------------------------------- convert
def cmd_convert(args: argparse.Namespace) -> int:
    from pardnn.io import read_reference, write_graph

    profiles = [option for option in ("dot", "times", "sizes") if getattr(args, option) is not None]
    extra = [option for option in ("variables", "references", "noops") if getattr(args, option) is not None]
    if args.graph is not None and (profiles or extra):
        return _usage("convert", f"give a graph file or the reference file set, not both ({args.graph} and "
                                 f"--{(profiles + extra)[0]})")
    if args.graph is None and len(profiles) < 3:
        missing = ", ".join(f"--{option}" for option in ("dot", "times", "sizes") if option not in profiles)
        return _usage("convert", f"{missing} missing: give a graph file, or --dot, --times and --sizes")
    if args.graph is not None:
        graph = read_graph(args.graph)
        if args.name is not None:
            graph = graph.replace(name=args.name)
    else:
        graph = read_reference(args.dot, args.times, args.sizes, variables=args.variables,
                               references=args.references, noops=args.noops, name=args.name)
    write_graph(graph, args.output)
    print(f"wrote {args.output}: {graph.n:,} ops, {graph.m:,} edges")
    return EXIT_OK


def _usage(command: str, message: str) -> int:
    print(f"pardnn {command}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def add_convert(sub: Any) -> None:
    convert = add_parser(sub, "convert", help="convert a graph between JSON and binary, or the reference ParDNN "
                                              "file set to a native graph file",
                         description="Read a native graph file (GRAPH: .json, .json.gz or binary .pardnn) or the "
                                     "profile files of the reference ParDNN implementation (a DOT edge list, "
                                     "name::microseconds timings, name::bytes tensor sizes, and optional lists of "
                                     "variable, reference and no-op names) and write one native graph file, in the "
                                     "form its name says: .pardnn is the compact binary form, which large graphs "
                                     "read several times faster and in less memory.")
    convert.add_argument("graph", nargs="?", help="native graph file to convert (instead of --dot/--times/--sizes)")
    convert.add_argument("--dot", help='DOT edge list ("a" -> "b" lines)')
    convert.add_argument("--times", help="name::microseconds lines")
    convert.add_argument("--sizes", help="name::bytes lines (output tensor size per op)")
    convert.add_argument("--variables", help="variable op names, one per line (residual)")
    convert.add_argument("--references", help="reference op names, one per line (mutate a variable)")
    convert.add_argument("--noops", help="no-op names, one per line (no output memory)")
    convert.add_argument("--name", help="graph name (default: the graph's own, or the DOT file's stem)")
    convert.add_argument("-o", "--output", required=True, help="output graph file (.json, .json.gz or .pardnn)")
    convert.set_defaults(func=cmd_convert)


# ------------------------------------------------------------------------------------ generate
def cmd_generate(args: argparse.Namespace) -> int:
    from pardnn.costs.synthetic import dnn_graph
    from pardnn.io import write_graph

    graph = dnn_graph(args.ops, seed=args.seed)
    write_graph(graph, args.output)
    print(f"wrote {args.output}: {graph.n:,} ops, {graph.m:,} edges")
    return EXIT_OK


def add_generate(sub: Any) -> None:
    generate = add_parser(sub, "generate", help="write a synthetic DNN-shaped training graph", epilog=None,
                          description="Write a synthetic training graph (forward fork-join layers with skip edges, "
                                      "mirrored backward pass, variables with optimizer updates) of about OPS ops, "
                                      "deterministic for a seed; for trying pardnn and for benchmarks.")
    generate.add_argument("--ops", type=int, default=10_000, help="approximate op count (default: %(default)s)")
    generate.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    generate.add_argument("-o", "--output", required=True, help="output graph file (.json, .json.gz or .pardnn)")
    generate.set_defaults(func=cmd_generate)


# ------------------------------------------------------------------------------------ warmup
def cmd_warmup(args: argparse.Namespace) -> int:
    from pardnn import kernelcache
    from pardnn.warmup import warm_up

    seconds = warm_up()
    print(f"numba kernels ready in {seconds:.1f} s (cache: {kernelcache.location()})")
    removed = kernelcache.prune()
    if removed:
        print(f"removed the kernels of {len(removed)} older source tree(s) (the newest {kernelcache.KEEP} are kept)")
    return EXIT_OK


def add_warmup(sub: Any) -> None:
    warmup = add_parser(sub, "warmup", help="compile the numba kernels into their cache now (once after install)",
                        epilog=None,
                        description="Compile every numba kernel pardnn can reach (emulator, memory tracker, "
                                    "slicing, mapping, memory heuristics, baselines) into numba's on-disk cache, so "
                                    "the first placement or the first pardnn-launch job does not pay for it (about "
                                    "65 s of CPU, on every rank at once). The cache is kept per source tree under "
                                    "$PARDNN_CACHE_DIR (default ~/.cache/pardnn)/numba, shared by every checkout "
                                    "and environment with the same pardnn sources, NumPy and numba; NUMBA_CACHE_DIR, "
                                    "when set, is used instead. scripts/setup.sh runs it; run it again after "
                                    "changing or upgrading pardnn, numba or NumPy, or with NUMBA_CACHE_DIR set as your "
                                    "jobs set it. It keeps the newest 4 source trees' kernels and removes older ones.")
    warmup.set_defaults(func=cmd_warmup)


BUILTIN: dict[str, Callable[[Any], None]] = {
    "info": add_info,
    "simulate": add_simulate,
    "place": add_place,
    "convert": add_convert,
    "generate": add_generate,
    "warmup": add_warmup,
}
