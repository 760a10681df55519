"""The ``pardnn`` command: thin over the library (parse, call, print).

Exit codes: 0 success; 1 bad input (unreadable file, invalid graph, machine or placement);
2 bad command line (argparse); 3 infeasible (no placement meets memory).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pardnn.errors import InfeasibleError, MissingDependencyError, PardnnError
from pardnn.graph import CostGraph
from pardnn.machine import DEFAULT_BANDWIDTH_BPS, DEFAULT_LATENCY_US, DEFAULT_RESERVE, Machine, format_bytes

EXIT_OK = 0
EXIT_BAD_INPUT = 1
EXIT_USAGE = 2
EXIT_INFEASIBLE = 3

EPILOG = """\
units: sizes take B, KB/MB/GB (powers of 1000) or KiB/MiB/GiB (powers of 1024): 32GiB;
bandwidth the same per second: 150GB/s; latency us, ms or s: 25us.
exit codes: 0 ok, 1 bad input, 2 bad command line, 3 infeasible (memory cannot be met).
"""


def _machine_options(parser: argparse.ArgumentParser, *, devices_required: bool) -> None:
    group = parser.add_argument_group("machine")
    group.add_argument("--devices", "-k", type=int, required=devices_required, default=None,
                       help="number of devices K" + ("" if devices_required else
                                                     " (default: highest device in the placement + 1)"))
    group.add_argument("--memory", default=None,
                       help="memory per device: one size (32GiB) or one per device (32GiB,32GiB,16GiB,16GiB); "
                            "default: unlimited, or the graph file's memory_limit_bytes")
    group.add_argument("--bandwidth", default=f"{DEFAULT_BANDWIDTH_BPS / 1e9:g}GB/s",
                       help="interconnect bandwidth between two devices (default: %(default)s)")
    group.add_argument("--latency", default=f"{DEFAULT_LATENCY_US:g}us",
                       help="latency per transfer (default: %(default)s)")
    group.add_argument("--reserve", type=float, default=DEFAULT_RESERVE,
                       help="fraction of each device's memory kept free (default: %(default)s)")


def _machine(args: argparse.Namespace, graph: CostGraph, devices: int) -> Machine:
    memory: Any = args.memory
    if memory is None and graph.memory_limit_bytes is not None:
        memory = graph.memory_limit_bytes
    return Machine(devices, memory, args.bandwidth, args.latency, args.reserve)


def _read_graph(path: str) -> CostGraph:
    from pardnn.io import read_any_graph

    return read_any_graph(path)


def _print_json(payload: dict[str, Any]) -> None:
    json.dump(payload, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def _table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(f"{{:>{w}}}" for w in widths)
    return "\n".join(line.format(*map(str, r)) for r in [header, *rows])


def _us(value: float) -> str:
    return f"{value / 1e3:,.3f} ms" if value >= 1e3 else f"{value:,.1f} us"


# ---------------------------------------------------------------------------------------- info
def graph_info(graph: CostGraph, machine: Machine) -> dict[str, Any]:
    """The paper's Table "DoP and CCR" figures for one graph."""
    from pardnn.levels import critical_path_us

    work = graph.total_work_us
    critical = critical_path_us(graph)
    comm = float(machine.edge_comm_us(graph.edge_bytes).sum()) if graph.m else 0.0
    kinds = np.bincount(graph.kind, minlength=3)
    return {
        "name": graph.name,
        "ops": graph.n,
        "edges": graph.m,
        "normal_ops": int(kinds[0]),
        "residual_ops": int(kinds[1]),
        "reference_ops": int(kinds[2]),
        "colocation_groups": len(graph.group_names),
        "total_work_us": work,
        "critical_path_us": critical,
        "critical_path_with_comm_us": critical_path_us(graph, machine.edge_comm_us(graph.edge_bytes)),
        "dop": work / critical if critical > 0 else 0.0,
        "total_comm_us": comm,
        "ccr": comm / work if work > 0 else 0.0,
        "residual_bytes": int(graph.out_bytes[graph.kind == 1].sum()),
        "normal_bytes": int(graph.out_bytes[graph.kind == 0].sum()),
    }


def cmd_info(args: argparse.Namespace) -> int:
    graph = _read_graph(args.graph)
    info = graph_info(graph, Machine(2, None, args.bandwidth, args.latency))
    if args.json:
        _print_json(info)
        return EXIT_OK
    print(f"graph {info['name']!r}: {info['ops']:,} ops ({info['normal_ops']:,} normal, "
          f"{info['residual_ops']:,} residual, {info['reference_ops']:,} reference), {info['edges']:,} edges, "
          f"{info['colocation_groups']:,} colocation groups")
    print(f"total work           {_us(info['total_work_us'])}")
    print(f"critical path        {_us(info['critical_path_us'])} (with communication: "
          f"{_us(info['critical_path_with_comm_us'])})")
    print(f"degree of parallelism (DoP = work / critical path)   {info['dop']:.2f}")
    print(f"comm-to-comp ratio   (CCR = comm of all edges / work) {info['ccr']:.2f}"
          f"  at {args.bandwidth}, {args.latency}")
    print(f"memory               {format_bytes(info['residual_bytes'])} residual, "
          f"{format_bytes(info['normal_bytes'])} of normal outputs")
    return EXIT_OK


# ------------------------------------------------------------------------------------ simulate
def format_evaluation(evaluation: Any) -> str:
    lines = [
        f"makespan        {_us(evaluation.makespan_us)}   lower bound {_us(evaluation.lower_bound_us)}"
        f"   ratio {evaluation.ratio:.3f}",
        f"communication   {evaluation.cut_edges:,} cut edges, {format_bytes(evaluation.cut_bytes)}, "
        f"{_us(evaluation.comm_us)} of transfers",
        f"memory          {'fits' if evaluation.memory_fits else 'DOES NOT FIT'}"
        + ("" if evaluation.limit_bytes is not None else " (no limit given)"),
    ]
    if evaluation.colocation_violations:
        lines.append(f"colocation      {evaluation.colocation_violations} group(s) SPLIT across devices")
    rows = []
    for d, load in enumerate(evaluation.load_us):
        limit = evaluation.limit_bytes[d] if evaluation.limit_bytes is not None else None
        rows.append([str(d), f"{evaluation.ops_per_device[d]:,}", _us(load),
                     format_bytes(evaluation.peak_memory_bytes[d]), format_bytes(evaluation.residual_bytes[d]),
                     "-" if limit is None else format_bytes(limit),
                     "-" if limit is None else ("ok" if evaluation.peak_memory_bytes[d] <= limit else "OVER")])
    lines.append(_table(rows, ["device", "ops", "load", "peak memory", "residual", "limit", "fits"]))
    return "\n".join(lines)


def cmd_simulate(args: argparse.Namespace) -> int:
    from pardnn.io import read_placement
    from pardnn.simulate import evaluate

    t0 = time.perf_counter()
    graph = _read_graph(args.graph)
    placement = read_placement(args.placement, graph, devices=args.devices)
    devices = args.devices if args.devices is not None else int(placement.max(initial=0)) + 1
    machine = _machine(args, graph, devices)
    t1 = time.perf_counter()
    evaluation = evaluate(graph, machine, placement)
    t2 = time.perf_counter()
    if args.json:
        payload = evaluation.to_dict()
        payload["seconds"] = {"load": t1 - t0, "evaluate": t2 - t1}
        _print_json(payload)
    else:
        print(f"{graph.name}: {graph.n:,} ops on {machine.describe()}")
        print(format_evaluation(evaluation))
        print(f"time            load {t1 - t0:.2f} s, emulate + memory {t2 - t1:.2f} s")
    return EXIT_OK


# --------------------------------------------------------------------------------------- place
PROGRESS_MIN_OPS = 50_000


class StageProgress:
    """One status line on stderr per stage (redrawn in place on a terminal)."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.stage = ""
        self.started = time.perf_counter()

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage != self.stage:
            if self.stage and self.tty:
                self.stream.write("\n")
            self.stage = stage
            self.started = time.perf_counter()
            if not self.tty:
                self.stream.write(f"pardnn: {stage} ...\n")
        if self.tty:
            self.stream.write(f"\rpardnn: {stage} {done}/{total}  {time.perf_counter() - self.started:.1f} s")
        self.stream.flush()

    def close(self) -> None:
        if self.stage and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def format_report(report: Any) -> str:
    stages = ", ".join(f"{name} {seconds:.3f} s" for name, seconds in report.stage_seconds.items())
    details = report.details
    lines = [f"{report.algorithm}: {report.ops:,} ops, {report.edges:,} edges on {report.devices} devices; "
             f"CCR {report.ccr:.2f}",
             f"stages          {stages} (total {report.total_seconds:.3f} s)"]
    if details.get("memory_heuristic"):
        before = details["peak_before_bytes"]
        after = details["peak_after_bytes"]
        lines.append(f"memory          heuristic {details['memory_heuristic']}: moved {details['moved_ops']:,} ops "
                     f"({details['moved_share']:.1%} of all), makespan {_us(details['makespan_before_us'])} -> "
                     f"{_us(details['makespan_after_us'])}, max peak {format_bytes(max(before))} -> "
                     f"{format_bytes(max(after))}, {report.stage_seconds.get('memory', 0.0):.3f} s")
    if "primary_ops" in details:
        lines.append(f"clusters        {len(details['primary_ops'])} primaries of "
                     f"{', '.join(str(x) for x in details['primary_ops'])} ops; "
                     f"{details['secondary_clusters']:,} secondaries: {details['mapped_by_locality']:,} mapped for "
                     f"locality ({details['lookahead_passes']} passes), {details['mapped_by_balance']:,} by "
                     f"level-aware balancing; {details['colocation_moved']:,} ops moved to keep colocation groups")
    lines.append(format_evaluation(report.evaluation))
    return "\n".join(lines)


def cmd_place(args: argparse.Namespace) -> int:
    from pardnn.io import write_placement
    from pardnn.placers import get_placer

    graph = _read_graph(args.graph)
    machine = _machine(args, graph, args.devices)
    progress = StageProgress() if graph.n > PROGRESS_MIN_OPS and not args.quiet else None
    if args.algorithm == "pardnn":
        heuristic: str | None = "auto" if args.memory_heuristic is None else args.memory_heuristic
        options: dict[str, Any] = {}
    else:
        if args.memory_heuristic not in (None, "none"):
            raise PardnnError(f"--memory-heuristic {args.memory_heuristic} works with --algorithm pardnn only; "
                              f"{args.algorithm} has none (its report still says whether memory fits)")
        heuristic = None
        options = {"time_budget_s": args.time_budget} if args.algorithm == "linear_clustering" else {}
    placer = get_placer(args.algorithm)
    try:
        result = placer(graph, machine, memory_heuristic=heuristic, progress=progress, **options)
    finally:
        if progress is not None:
            progress.close()
    write_placement(args.output, graph, result.placement)
    if args.json:
        payload = result.report.to_dict()
        payload["placement_file"] = str(args.output)
        _print_json(payload)
    else:
        print(format_report(result.report))
        print(f"wrote {args.output}")
    return EXIT_OK


# ------------------------------------------------------------------------------------- convert
def cmd_convert(args: argparse.Namespace) -> int:
    from pardnn.io import read_reference, write_graph

    graph = read_reference(args.dot, args.times, args.sizes, variables=args.variables,
                           references=args.references, noops=args.noops, name=args.name)
    write_graph(graph, args.output)
    print(f"wrote {args.output}: {graph.n:,} ops, {graph.m:,} edges")
    return EXIT_OK


# ------------------------------------------------------------------------------------- capture
def _is_function_spec(target: str) -> bool:
    """``package.module:function`` rather than a job file or preset name."""
    from pathlib import Path

    return ":" in target and not target.endswith(".toml") and not Path(target).exists()


def _call_function_spec(target: str) -> tuple[Any, Any, Any, str]:
    """Import ``module:function``, call it; its result gives (graph, fetches, feed_fn, name)."""
    import importlib

    module_name, _, function_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PardnnError(f"{target}: cannot import module {module_name!r}: {exc}") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise PardnnError(f"{target}: module {module_name!r} has no function {function_name!r}")
    result = function()
    if hasattr(result, "graph") and hasattr(result, "fetches"):
        return result.graph, result.fetches, getattr(result, "feed_fn", None), function_name
    if isinstance(result, tuple) and len(result) in (2, 3):
        return result[0], result[1], result[2] if len(result) == 3 else None, function_name
    raise PardnnError(f"{target}: returned {type(result).__name__}; expected an object with .graph and .fetches "
                      "(and .feed_fn to profile), or a tuple (graph, fetches[, feed_fn])")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 1")
    return value


def cmd_capture(args: argparse.Namespace) -> int:
    from pardnn.errors import MissingDependencyError
    from pardnn.io import write_graph
    from pardnn.presets import preset

    started = time.perf_counter()
    if args.estimate is not None:
        preset(args.estimate)  # an unknown preset fails before anything is built
    job = None
    if not _is_function_spec(args.target):
        import jobs

        job = jobs.load_job(args.target)  # a bad job file fails before TensorFlow loads
    elif args.batch_size is not None:
        raise PardnnError("--batch-size applies to job files only; MODULE:FUNCTION builds its own graph")
    try:
        import pardnn.tf as pardnn_tf
    except ImportError as exc:
        raise MissingDependencyError(f"pardnn capture needs TensorFlow ({exc}): pip install -e '.[tf]'") from None
    device, steps = args.estimate or "v100-32gb", args.profile
    if job is None:
        graph, fetches, feed_fn, name = _call_function_spec(args.target)
    else:
        from jobs import build

        train = build(job, args.batch_size)
        graph, fetches, feed_fn, name = train.graph, train.fetches, train.feed_fn, job.name
        if args.estimate is None and args.profile is None:  # the job's own [placement] settings
            device, steps = job.device_preset, job.profile_steps if job.costs == "profile" else None
    built = time.perf_counter()
    name = args.name or name
    if steps is not None:
        if feed_fn is None:
            raise PardnnError(f"{args.target}: profiling needs a feed_fn (return .feed_fn or a third tuple item)")
        cost = pardnn_tf.profile(graph, fetches, feed_fn, steps=steps, name=name)
        how = f"profiled {steps} steps on this machine"
    else:
        cost = pardnn_tf.estimate(graph, fetches, device, name=name)
        how = f"estimated for {preset(device).name}"
    if job is not None and job.memory_bytes is not None:
        from jobs.training import with_memory_limit

        cost = with_memory_limit(cost, job.memory_bytes)
    write_graph(cost, args.output)
    print(f"wrote {args.output}: {cost.n:,} ops, {cost.m:,} edges, work {_us(cost.total_work_us)} ({how}); "
          f"build {built - started:.1f} s, costs {time.perf_counter() - built:.1f} s")
    return EXIT_OK


# ------------------------------------------------------------------------------------ generate
def cmd_generate(args: argparse.Namespace) -> int:
    from pardnn.io import write_graph
    from pardnn.synthetic import dnn_graph

    graph = dnn_graph(args.ops, seed=args.seed)
    write_graph(graph, args.output)
    print(f"wrote {args.output}: {graph.n:,} ops, {graph.m:,} edges")
    return EXIT_OK


# --------------------------------------------------------------------------------------- bench
def cmd_bench(args: argparse.Namespace) -> int:
    from pardnn.bench import run_bench

    def progress(message: str) -> None:
        print(f"pardnn bench: {message}", file=sys.stderr, flush=True)

    for path in run_bench(args, "pardnn bench", progress):
        print(f"wrote {path}")
    return EXIT_OK


# ----------------------------------------------------------------------------------- max-batch
def _device_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected device counts like 1,2,4,8,16") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected device counts >= 1 like 1,2,4,8,16")
    return sorted(set(counts))


def cmd_max_batch(args: argparse.Namespace) -> int:
    from jobs import load_job

    job = load_job(args.job)  # a bad job file fails here, before TensorFlow loads
    try:
        from jobs.maxbatch import format_rows, job_machine, job_max_batch, plot_rows, rows_csv, rows_json
    except ImportError as exc:
        raise MissingDependencyError(f"pardnn max-batch needs TensorFlow ({exc}): pip install -e '.[tf]'") from None
    started = time.perf_counter()

    def on_probe(kind: str, probe: Any) -> None:
        if args.quiet:
            return
        label = "ParDNN" if kind == "pardnn" else "one device (data parallelism)"
        verdict = "fits" if probe.fits else "does not fit"
        source = "cached" if probe.cached else f"{probe.seconds:.1f} s"
        print(f"pardnn max-batch: K={probe.devices:<2} batch {probe.batch:<6} {label}: {verdict} "
              f"(peak {format_bytes(probe.peak_bytes)} of {format_bytes(probe.limit_bytes)}; {source})",
              file=sys.stderr, flush=True)

    def on_note(message: str) -> None:
        if not args.quiet:
            print(f"pardnn max-batch: {message}", file=sys.stderr, flush=True)

    rows = job_max_batch(job, args.devices, memory=args.memory, reserve=args.reserve, preset=args.device_preset,
                         cache=args.cache or None, limit=args.max_batch, rebuild=args.rebuild, on_probe=on_probe,
                         on_note=on_note)
    preset = args.device_preset or job.device_preset
    reserve = job.reserve if args.reserve is None else args.reserve
    machine = job_machine(preset, 1, args.memory if args.memory is not None else job.memory, reserve)
    title = (f"{job.name}: largest batch on {preset} devices of {format_bytes(int(machine.memory_bytes[0]))}, "
             f"{reserve:.0%} reserve")
    if args.json:
        from jobs.maxbatch import describe_machine

        print(rows_json(rows, job.name, describe_machine(machine)))
    else:
        print(format_rows(rows, title))
        print(f"({sum(len(r.probes) for r in rows)} probes, {time.perf_counter() - started:.1f} s)")
    if args.csv:
        Path(args.csv).write_text(rows_csv(rows, job.name))
    if args.plot:
        plot_rows(rows, job.name, args.plot)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pardnn",
        description="ParDNN: place the ops of a DNN training graph across K devices for a short step "
                    "within each device's memory, and evaluate placements.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    info = sub.add_parser("info", help="size, work, critical path, DoP and CCR of a graph",
                          description="Print the size of a graph, its total work and critical path, its degree "
                                      "of parallelism (DoP = work / critical path) and its communication-to-"
                                      "computation ratio (CCR = cost of all edges / work), as in the paper's "
                                      "Table 'DoP and CCR'.", epilog=EPILOG,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    info.add_argument("graph", help="graph file (.json or .json.gz, the native format)")
    info.add_argument("--bandwidth", default=f"{DEFAULT_BANDWIDTH_BPS / 1e9:g}GB/s",
                      help="for CCR (default: %(default)s)")
    info.add_argument("--latency", default=f"{DEFAULT_LATENCY_US:g}us", help="for CCR (default: %(default)s)")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(func=cmd_info)

    simulate = sub.add_parser("simulate", help="emulate a placement: makespan, memory per device, communication",
                              description="Emulate one training step of GRAPH placed by PLACEMENT (TensorFlow's "
                                          "FIFO scheduler per device, transfers of latency + bytes / bandwidth) and "
                                          "report the makespan against the lower bound, the peak memory of every "
                                          "device against its limit, and the communication.",
                              epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    simulate.add_argument("graph", help="graph file (.json or .json.gz)")
    simulate.add_argument("placement", help="placement file: 'op_name device' lines, or JSON {op_name: device}")
    _machine_options(simulate, devices_required=False)
    simulate.add_argument("--json", action="store_true", help="print JSON")
    simulate.set_defaults(func=cmd_simulate)

    place = sub.add_parser("place", help="partition a graph across K devices with ParDNN and write the placement",
                           description="Run ParDNN (graph slicing into K critical paths and secondary clusters, then "
                                       "locality-first lookahead and level-aware mapping) on GRAPH for K devices, "
                                       "write one 'op_name device' line per op, and print what each stage did and "
                                       "cost, the emulated makespan against the lower bound, and per-device load "
                                       "and memory.", epilog=EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    place.add_argument("graph", help="graph file (.json or .json.gz)")
    _machine_options(place, devices_required=True)
    place.add_argument("--algorithm", "-a", default="pardnn",
                       choices=["pardnn", "critical_path", "linear_clustering", "metis", "topological",
                                "round_robin", "single"],
                       help="placer: pardnn (the paper; default) or a baseline to compare with: critical_path "
                            "(Mayer et al. 2017), linear_clustering (Kim & Browne 1988 + GLB; quadratic), metis "
                            "(needs pymetis), topological (contiguous equal-work split), round_robin, single")
    place.add_argument("--time-budget", type=float, default=60.0,
                       help="seconds linear_clustering may spend before it stops clustering (default: %(default)s)")
    place.add_argument("--memory-heuristic", choices=["overflow", "balance", "none"], default=None,
                       help="how to meet --memory: 'overflow' (heuristic I: emulate the schedule and move ops off "
                            "overflowing devices; meets the limits or fails with exit code 3), 'balance' "
                            "(heuristic II: balance memory shares without emulation; faster, no guarantee), "
                            "'none' (Step 1 only). Default: overflow when --memory is given, else none")
    place.add_argument("-o", "--output", required=True, help="placement file to write (.txt lines, or .json)")
    place.add_argument("--json", action="store_true", help="print the report as JSON")
    place.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    place.set_defaults(func=cmd_place)

    convert = sub.add_parser("convert", help="convert the reference ParDNN file set to a native graph file",
                             description="Read the profile files of the reference ParDNN implementation (a DOT "
                                         "edge list, name::microseconds timings, name::bytes tensor sizes, and "
                                         "optional lists of variable, reference and no-op names) and write one "
                                         "native graph file.", epilog=EPILOG,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    convert.add_argument("--dot", required=True, help='DOT edge list ("a" -> "b" lines)')
    convert.add_argument("--times", required=True, help="name::microseconds lines")
    convert.add_argument("--sizes", required=True, help="name::bytes lines (output tensor size per op)")
    convert.add_argument("--variables", help="variable op names, one per line (residual)")
    convert.add_argument("--references", help="reference op names, one per line (mutate a variable)")
    convert.add_argument("--noops", help="no-op names, one per line (no output memory)")
    convert.add_argument("--name", help="graph name (default: the DOT file's stem)")
    convert.add_argument("-o", "--output", required=True, help="output graph file (.json or .json.gz)")
    convert.set_defaults(func=cmd_convert)

    capture = sub.add_parser(
        "capture", help="build a TensorFlow training graph, cost it and write it as a graph file (needs TensorFlow)",
        description="Build the training graph of a job (a jobs/*.toml file or a preset name such as trn-2) or of "
                    "MODULE:FUNCTION (a function returning an object with .graph, .fetches and .feed_fn, or a tuple "
                    "(graph, fetches[, feed_fn])), cost one step and write the native graph file. Building allocates "
                    "nothing, so paper-size graphs are fine with --estimate. Default costs: the job's [placement] "
                    "costs, device_preset and profile_steps (a function: --estimate v100-32gb).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    capture.add_argument("target", metavar="JOB_OR_MODULE:FUNCTION",
                         help="job file, job preset name, or package.module:function")
    capture.add_argument("-o", "--output", required=True, help="graph file to write (.json or .json.gz)")
    costs = capture.add_mutually_exclusive_group()
    costs.add_argument("--estimate", metavar="PRESET",
                       help="roofline costs for a device preset: v100-32gb, a100-80gb, h100-80gb (no session runs)")
    costs.add_argument("--profile", metavar="N", type=_positive_int,
                       help="measure N traced training steps on this machine (allocates and runs the model)")
    capture.add_argument("--batch-size", type=_positive_int, default=None, help="override the job's batch size")
    capture.add_argument("--name", default=None, help="graph name (default: the job's name or the function's)")
    capture.set_defaults(func=cmd_capture)

    generate = sub.add_parser("generate", help="write a synthetic DNN-shaped training graph",
                              description="Write a synthetic training graph (forward fork-join layers with skip "
                                          "edges, mirrored backward pass, variables with optimizer updates) of about "
                                          "OPS ops, deterministic for a seed; for trying pardnn and for benchmarks.")
    generate.add_argument("--ops", type=int, default=10_000, help="approximate op count (default: %(default)s)")
    generate.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    generate.add_argument("-o", "--output", required=True, help="output graph file (.json or .json.gz)")
    generate.set_defaults(func=cmd_generate)

    from pardnn.bench import add_bench_arguments

    max_batch = sub.add_parser(
        "max-batch", help="the largest batch a job trains with on K devices: ParDNN against data parallelism",
        description="For each device count K, find the largest batch size for which ParDNN (memory heuristic I) "
                    "places the job's training step within every device's memory, by doubling then bisection; each "
                    "probe costs the job's graph at that batch size on the device preset and partitions it. The "
                    "graph is built in TensorFlow (graph mode: nothing is allocated) at batches 1, 2 and 3; other "
                    "sizes are computed from batches 2 and 3 (sizes, FLOPs and bytes grow linearly with the batch), "
                    "and checked against one more build at the largest batch probed (--rebuild builds every "
                    "probe). Also reports data parallelism's answer (the "
                    "largest batch one device holds, times K) and the ratio, as in the paper's batch-size table. "
                    "Probe results are cached (--cache), so a rerun is instant. Needs TensorFlow.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    max_batch.add_argument("job", help="job file or preset name (e.g. jobs/word-rnn.toml, word-rnn)")
    max_batch.add_argument("--devices", type=_device_counts, default=[1, 2, 4, 8, 16],
                           help="device counts to answer for (default: 1,2,4,8,16)")
    max_batch.add_argument("--memory", default=None,
                           help="memory per device (default: the job's, else the preset's, e.g. 32GiB)")
    max_batch.add_argument("--reserve", type=float, default=None, help="memory kept free (default: the job's)")
    max_batch.add_argument("--device-preset", default=None,
                           help="device preset for costs and interconnect: v100-32gb, a100-80gb, h100-80gb "
                                "(default: the job's)")
    max_batch.add_argument("--cache", default=".pardnn-cache/max-batch.json",
                           help="probe cache file (default: %(default)s); a rerun with the same job, batch, K and "
                                "memory reuses it; '' for none)")
    max_batch.add_argument("--max-batch", type=int, default=1 << 20, help="largest batch to try (default: 2^20)")
    max_batch.add_argument("--rebuild", action="store_true",
                           help="build the graph in TensorFlow at every probed batch (4-30 s each for the paper's "
                                "models) instead of building it at batches 2 and 3 and computing the others; the "
                                "default checks the computed graphs against a build at the largest batch probed "
                                "and rebuilds by itself when they differ")
    max_batch.add_argument("--json", action="store_true", help="print JSON")
    max_batch.add_argument("--csv", help="also write the table as CSV to this file")
    max_batch.add_argument("--plot", help="also plot max batch against K (PNG) to this file")
    max_batch.add_argument("--quiet", "-q", action="store_true", help="no per-probe progress")
    max_batch.set_defaults(func=cmd_max_batch)

    bench = sub.add_parser("bench", help="benchmark ParDNN against every baseline; write RESULTS.md, CSV and plots",
                           description="Run ParDNN and the baseline placers on synthetic DNN graphs (and any graph "
                                       "files given) for several device counts, without and under memory limits, "
                                       "time the pardnn commands, and write benchmarks/RESULTS.md (command, machine, "
                                       "summary, a table per suite), benchmarks/out/results.csv and plots of the "
                                       "makespan ratios and of placer time against graph size (log-log, fitted "
                                       "slopes). The full suite takes minutes; --quick takes seconds. Default "
                                       "paths are relative to the current directory: run it from the repository "
                                       "root.",
                           epilog="exit codes: 0 ok, 1 bad input (a missing or invalid graph file), 2 bad command "
                                  "line.")
    add_bench_arguments(bench)
    bench.set_defaults(func=cmd_bench)
    return parser


def _version() -> str:
    from pardnn import __version__

    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except InfeasibleError as exc:
        print(f"pardnn: infeasible: {exc}", file=sys.stderr)
        if getattr(args, "command", None) == "place":
            print("pardnn: no placement was written", file=sys.stderr)
        return EXIT_INFEASIBLE
    except (PardnnError, OSError) as exc:
        message = str(exc) if not isinstance(exc, OSError) or not exc.filename else \
            f"{exc.filename}: {exc.strerror or exc}"
        print(f"pardnn: error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("pardnn: interrupted", file=sys.stderr)
        return 130


def run() -> None:
    """The ``pardnn`` console command: :func:`main`, then a fast exit.

    Once the command is done (files written and closed, output flushed) the interpreter's own
    teardown is skipped: unloading numba's compiled code takes 0.1-0.2 s, a tenth of a 200,000-op
    ``pardnn place``. Library callers use :func:`main`, which returns normally.
    """
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # the reader went away (``pardnn info g.json | head``); nothing left to say
        pass
    os._exit(code)


if __name__ == "__main__":
    run()
