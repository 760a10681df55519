"""``pardnn-launch JOB [options]``: thin over :func:`launcher.run` (parse, configure logging, call).

Options override the job file; what neither sets takes the defaults of :mod:`launcher.settings`.
Run it with one task per node: ``srun --ntasks-per-node=1 pardnn-launch JOB`` or
``mpirun --map-by ppr:1:node pardnn-launch JOB``; on one machine without a launcher it is one node.

Exit codes: 0 success; 1 error (bad job file or setting, a failure on any rank; one line on
stderr naming the rank); 2 bad command line; 3 infeasible (no placement meets memory);
143 stopped by SIGTERM (the collector's files hold what was measured); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from launcher.core import run
from launcher.env import EMULATE_NODES
from launcher.failure import exit_code
from launcher.settings import COSTS, MEMORY_HEURISTICS, parse_window

__all__ = ["build_parser", "main"]

EPILOG = f"""\
precedence: command line, then the job file, then defaults.
outputs: OUT/<run id>/{{rank-<r>.jsonl, placement.txt, summary.json}} and a row in OUT/results.csv.
testing on one machine: {EMULATE_NODES}=1 mpirun -np 2 pardnn-launch JOB (each rank stands for a node).
exit codes: 0 ok, 1 error, 2 bad command line, 3 infeasible, 143 SIGTERM.
"""


def _window(text: str) -> str:
    try:
        parse_window(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pardnn-launch", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Place a job's training graph across each node's devices with ParDNN and train it "
                    "across nodes with Horovod (one MPI rank per node).")
    parser.add_argument("job", help="job file (jobs/NAME.toml) or preset name")
    run_group = parser.add_argument_group("run")
    run_group.add_argument("--iterations", type=int, help="training iterations (job file: [run] iterations)")
    run_group.add_argument("--window", type=_window, metavar="START:END",
                           help="measured iterations, start inclusive, end exclusive (default 100:150)")
    run_group.add_argument("--batch-size", type=int, help="batch size per node (job file: [train] batch_size)")
    run_group.add_argument("--out", help="output directory (default runs)")
    run_group.add_argument("--no-progress", dest="progress", action="store_false", default=None,
                           help="no progress bar")
    placement = parser.add_argument_group("placement")
    placement.add_argument("--devices-per-node", type=int, metavar="K",
                           help="devices per node: the first K GPUs, or K logical CPU devices without GPUs (default 4)")
    placement.add_argument("--memory", help="memory per device, e.g. 32GiB, or 'unlimited' "
                                            "(default: the device preset's on GPUs, unlimited on CPUs)")
    placement.add_argument("--costs", choices=COSTS, help="measure op costs (profile) or model them (estimate)")
    placement.add_argument("--profile-steps", type=int, metavar="N", help="steps traced when profiling (default 5)")
    placement.add_argument("--reserve", type=float, help="fraction of device memory kept free (default 0.1)")
    placement.add_argument("--memory-heuristic", choices=MEMORY_HEURISTICS, help="default overflow")
    placement.add_argument("--device-preset", help="GPU model for estimates and interconnect (default v100-32gb)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more (every rank)")
    return parser


def _configure_logging(verbose: bool) -> None:
    level = logging.DEBUG if verbose else logging.INFO
    logging.basicConfig(level=level, format="pardnn-launch: %(message)s", stream=sys.stderr)
    for noisy in ("tensorflow", "absl", "numba", "h5py", "matplotlib"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _configure_logging(args.verbose)
    overrides = {name: getattr(args, name) for name in (
        "iterations", "window", "batch_size", "out", "progress", "devices_per_node", "memory", "costs",
        "profile_steps", "reserve", "memory_heuristic", "device_preset")}
    try:
        run(args.job, **overrides)
    except SystemExit:
        raise
    except BaseException as error:  # run() has reported it on stderr
        return exit_code(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
