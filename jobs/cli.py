"""The zoo's ``pardnn`` sub-commands: ``capture`` and ``max-batch``.

They join the ``pardnn`` command through the entry-point group ``pardnn.commands`` (see
``pyproject.toml`` and :mod:`pardnn.cli.plugins`): ``register_capture`` and ``register_max_batch``
each add a sub-parser and set its ``func``. Importing this module does not import TensorFlow; the
commands load it once the job file has been read, so a bad job file fails first and fast.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from jobs.config import with_setting
from jobs.schema import PRECISIONS, micro_batches_arg, micro_batches_number, positive_int
from jobs.tfimport import hushed, quiet
from pardnn.cli.options import EXIT_OK, add_parser, param_type, us
from pardnn.costs.machine import format_bytes
from pardnn.errors import MissingDependencyError, PardnnError
from pardnn.settings import PLACEMENT
from pardnn.tfstack import own_process

__all__ = ["cmd_capture", "cmd_max_batch", "register_capture", "register_max_batch"]

_PRESETS = ", ".join(PLACEMENT["device_preset"].choices or ())


# ------------------------------------------------------------------------------------- capture
def _is_function_spec(target: str) -> bool:
    """``package.module:function`` rather than a job file or preset name."""
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


def cmd_capture(args: argparse.Namespace) -> int:
    quiet()  # no TensorFlow INFO lines on the console
    own_process()  # TensorFlow's import, when it comes, is kept out of the garbage collector's passes
    from pardnn.costs.presets import preset
    from pardnn.io import write_graph

    started = time.perf_counter()
    if args.estimate is not None:
        preset(args.estimate)  # an unknown preset fails before anything is built
    job = None
    if not _is_function_spec(args.target):
        from jobs import load_job

        job = load_job(args.target)  # a bad job file fails before TensorFlow loads
    elif args.batch_size is not None or args.micro_batches is not None:
        option = "--batch-size" if args.batch_size is not None else "--micro-batches"
        raise PardnnError(f"{option} applies to job files only; MODULE:FUNCTION builds its own graph")
    try:
        import pardnn.tf  # noqa: F401  (TensorFlow, checked before the graph is built)
    except ImportError as exc:
        raise MissingDependencyError(f"pardnn capture needs TensorFlow ({exc}): pip install -e '.[tf]'") from None
    from jobs.costing import FROM_JOB, cost_graph

    device, steps = args.estimate or PLACEMENT["device_preset"].default, args.profile
    memory: Any = None  # a function's graph carries no limit; a job's carries its [placement] memory
    if job is None:
        graph, fetches, feed_fn, name = _call_function_spec(args.target)
        train: Any = SimpleNamespace(graph=graph, fetches=fetches, feed_fn=feed_fn)
    else:
        from jobs import build

        train = build(job, args.batch_size, micro_batches=args.micro_batches)
        feed_fn, name, memory = train.feed_fn, job.name, FROM_JOB
        if args.estimate is None and args.profile is None:  # the job's own [placement] settings
            device, steps = job.device_preset, job.profile_steps if job.costs == "profile" else None
    built = time.perf_counter()
    name = args.name or name
    if steps is not None:
        if feed_fn is None:
            raise PardnnError(f"{args.target}: profiling needs a feed_fn (return .feed_fn or a third tuple item)")
        with hushed():  # on CPUs TensorFlow warns once a step that it collected no GPU trace
            cost = cost_graph(train, "profile", profile_steps=steps, memory_bytes=memory, name=name)
        how = f"profiled {steps} steps on this machine"
    else:
        cost = cost_graph(train, "estimate", device_preset=device, memory_bytes=memory, name=name)
        how = f"estimated for {preset(device).name}"
    write_graph(cost, args.output)
    print(f"wrote {args.output}: {cost.n:,} ops, {cost.m:,} edges, work {us(cost.total_work_us)} ({how}); "
          f"build {built - started:.1f} s, costs {time.perf_counter() - built:.1f} s")
    return EXIT_OK


def register_capture(sub: Any) -> None:
    """Add ``pardnn capture`` to the ``pardnn`` sub-parsers ``sub``."""
    capture = add_parser(
        sub, "capture",
        help="build a TensorFlow training graph, cost it and write it as a graph file (needs TensorFlow)",
        description="Build the training graph of a job (a jobs/*.toml file or a preset name such as trn-2) or of "
                    "MODULE:FUNCTION (a function returning an object with .graph, .fetches and .feed_fn, or a tuple "
                    "(graph, fetches[, feed_fn])), cost one step and write the native graph file. Building allocates "
                    "nothing, so paper-size graphs are fine with --estimate. Default costs: the job's [placement] "
                    "costs, device_preset and profile_steps (a function: --estimate "
                    f"{PLACEMENT['device_preset'].default}).")
    capture.add_argument("target", metavar="JOB_OR_MODULE:FUNCTION",
                         help="job file, job preset name, or package.module:function")
    capture.add_argument("-o", "--output", required=True,
                         help="graph file to write (.json, .json.gz, or .pardnn: the compact binary form)")
    costs = capture.add_mutually_exclusive_group()
    costs.add_argument("--estimate", metavar="PRESET",
                       help=f"roofline costs for a device preset: {_PRESETS} (no session runs)")
    costs.add_argument("--profile", metavar="N", type=param_type("profile_steps"),
                       help="measure N traced training steps on this machine (allocates and runs the model)")
    capture.add_argument("--batch-size", type=positive_int, default=None, help="override the job's batch size")
    capture.add_argument("--micro-batches", type=micro_batches_number, default=None, metavar="M",
                         help="override the job's [train] micro_batches: split the batch into M micro-batches, "
                              "their gradients summed into one update (M must divide the batch)")
    capture.add_argument("--name", default=None, help="graph name (default: the job's name or the function's)")
    capture.set_defaults(func=cmd_capture)


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
    quiet()  # no TensorFlow INFO lines on the console
    own_process()  # TensorFlow's import, when it comes, is kept out of the garbage collector's passes
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

    options = {"memory": args.memory, "reserve": args.reserve, "preset": args.device_preset,
               "cache": args.cache or None, "limit": args.max_batch, "rebuild": args.rebuild, "on_probe": on_probe,
               "on_note": on_note}
    micro = job.micro_batches if args.micro_batches is None else args.micro_batches
    preset = args.device_preset or job.device_preset
    reserve = job.reserve if args.reserve is None else args.reserve
    machine = job_machine(preset, 1, args.memory if args.memory is not None else job.memory, reserve)
    title = (f"{job.name}: largest batch on {preset} devices of {format_bytes(int(machine.memory_bytes[0]))}, "
             f"{reserve:.0%} reserve")
    if args.precision not in (None, "auto", "float32") and not args.json:
        # float32's answer first, to read the precision's beside it
        print(format_rows(job_max_batch(with_setting(job, "precision", "float32"), args.devices,
                                        micro_batches=1 if micro == "auto" else micro, **options),
                          title + "; precision float32"))
        title += f"; precision {args.precision}"
    if args.precision is not None:
        job = with_setting(job, "precision", args.precision)
    tried = None
    if micro == "auto":
        from jobs.maxbatch import job_max_batch_auto

        rows, tried = job_max_batch_auto(job, args.devices, **options)
    else:
        rows = job_max_batch(job, args.devices, micro_batches=micro, **options)
    if args.json:
        from jobs.maxbatch import describe_machine

        print(rows_json(rows, job.name, describe_machine(machine), tried))
    else:
        print(format_rows(rows, title))
        if tried is not None:
            from jobs.maxbatch import format_tried

            print(format_tried(tried, rows))
        print(f"({sum(len(r.probes) for r in rows)} probes, {time.perf_counter() - started:.1f} s)")
    if args.csv:
        Path(args.csv).write_text(rows_csv(rows, job.name))
    if args.plot:
        plot_rows(rows, job.name, args.plot)
    return EXIT_OK


def register_max_batch(sub: Any) -> None:
    """Add ``pardnn max-batch`` to the ``pardnn`` sub-parsers ``sub``."""
    max_batch = add_parser(
        sub, "max-batch", help="the largest batch a job trains with on K devices: ParDNN against data parallelism",
        description="For each device count K, find the largest batch size for which ParDNN (memory heuristic I) "
                    "places the job's training step within every device's memory, by doubling then bisection; each "
                    "probe costs the job's graph at that batch size on the device preset and partitions it. The "
                    "graph is built in TensorFlow (graph mode: nothing is allocated) at batches 1, 2 and 3; other "
                    "sizes are computed from batches 2 and 3 (sizes, FLOPs and bytes grow linearly with the batch), "
                    "and checked against one more build at the largest batch probed (--rebuild builds every "
                    "probe). Also reports data parallelism's answer (the largest batch one device holds, times K) "
                    "and the ratio, as in the paper's batch-size table. Probe results are cached (--cache), so a "
                    "rerun is instant. Needs TensorFlow.")
    max_batch.add_argument("job", help="job file or preset name (e.g. jobs/word-rnn.toml, word-rnn)")
    max_batch.add_argument("--devices", type=_device_counts, default=[1, 2, 4, 8, 16],
                           help="device counts to answer for (default: 1,2,4,8,16)")
    max_batch.add_argument("--memory", default=None,
                           help="memory per device (default: the job's, else the preset's, e.g. 32GiB)")
    max_batch.add_argument("--reserve", type=param_type("reserve"), default=None,
                           help=f"memory kept free: {PLACEMENT['reserve'].expected()} (default: the job's)")
    max_batch.add_argument("--device-preset", default=None,
                           help=f"device preset for costs and interconnect: {_PRESETS} (default: the job's)")
    max_batch.add_argument("--cache", default=".pardnn-cache/max-batch.json",
                           help="probe cache file (default: %(default)s); a rerun with the same job, batch, K and "
                                "memory reuses it; '' for none)")
    max_batch.add_argument("--max-batch", type=int, default=1 << 20, help="largest batch to try (default: 2^20)")
    max_batch.add_argument("--rebuild", action="store_true",
                           help="build the graph in TensorFlow at every probed batch (4-30 s each for the paper's "
                                "models) instead of building it at batches 2 and 3 and computing the others; the "
                                "default checks the computed graphs against a build at the largest batch probed "
                                "and rebuilds by itself when they differ")
    max_batch.add_argument("--micro-batches", type=micro_batches_arg, default=None, metavar="M|auto",
                           help="split each batch into M micro-batches (the job's [train] micro_batches by default): "
                                "only multiples of M are probed, each the M-copy graph; 'auto' answers for M = "
                                "1, 2, 4, 8, 16 and keeps per K the M with the largest batch, with the table of M")
    max_batch.add_argument("--precision", choices=PRECISIONS, default=None,
                           help="the Keras dtype policy to build the model under (a Keras [model] entry; default the "
                                "job's train.precision); mixed_float16 or mixed_bfloat16 also prints float32's "
                                "table first, to compare (float16 activations take half the bytes)")
    max_batch.add_argument("--json", action="store_true", help="print JSON")
    max_batch.add_argument("--csv", help="also write the table as CSV to this file")
    max_batch.add_argument("--plot", help="also plot max batch against K (PNG) to this file")
    max_batch.add_argument("--quiet", "-q", action="store_true", help="no per-probe progress")
    max_batch.set_defaults(func=cmd_max_batch)
