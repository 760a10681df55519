"""``pardnn-launch JOB [options]``: thin over :func:`launcher.run` (parse, configure logging, call).

:func:`main` is the console script; :func:`build_parser` takes each option from the settings schema
(:mod:`launcher.settings`). Options override the job file. Run one task per node
(``srun --ntasks-per-node=1 pardnn-launch JOB``), one per device for ``--parallelism data``.
Exit codes: 0 ok, 1 error, 2 bad command line, 3 infeasible or does not fit, 4 stalled, 130 interrupted,
143 time limit. Rules: docs/notes-launcher.md.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from jobs.schema import PLACEMENT_TABLE, PRECISIONS, RUN_TABLE, TRAIN, micro_batches_arg
from launcher.cluster import hosts
from launcher.core import run
from launcher.env import EMULATE_NODES, launch_rank, share_cores
from launcher.rank.failure import exit_code
from launcher.reporting import console
from launcher.settings import ALLREDUCE_CHOICES, LAUNCHER_DEFAULTS, OVERRIDABLE, SCHEMA, parse_window
from launcher.training.recompute import WRAPPED
from launcher.variants import DATA, PARALLELISMS, RECOMPUTE
from pardnn.tfstack import own_process

__all__ = ["build_parser", "main"]

EPILOG = f"""\
precedence: command line, then the job file, then defaults.
outputs: OUT/<job>-<placer>-n<N>-k<K>-b<B>-<time>/{{rank-<r>.jsonl, rank-<r>.log, figures-<r>.json,
  heartbeat-<r>.json, placement.txt, summary.json, status.json}} and a row in OUT/results.csv.
testing on one machine: {EMULATE_NODES}=1 mpirun -np 2 pardnn-launch JOB (each rank stands for a node).
exit codes: 0 ok, 1 error, 2 bad command line, 3 infeasible or does not fit, 4 stalled, 130 interrupted,
  143 SIGTERM/SIGUSR1.
more: docs/launcher.md (placers, data parallelism, --compare, pardnn-report's comparison figures).
"""


def _window(text: str) -> str:
    try:
        parse_window(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


_TABLE = {**dict.fromkeys(TRAIN, "train"), **dict.fromkeys(RUN_TABLE, "run"),
          **dict.fromkeys(PLACEMENT_TABLE, "placement")}


class _Parser(argparse.ArgumentParser):
    """Every rank parses the same command line: only the launcher's rank 0 prints its usage errors."""

    def error(self, message: str) -> NoReturn:
        if launch_rank() in (None, 0):
            self.print_usage(sys.stderr)
            self.exit(2, f"{self.prog}: error: {message}\n")
        self.exit(2)
_TYPES = {"int": int, "float": float}


def _shown(value: Any) -> str:
    if value is None:
        return "unlimited"
    if isinstance(value, tuple):
        return ":".join(map(str, value))
    return str(value)


def _option(group: argparse._ArgumentGroup, name: str, text: str | None = None, *, show_default: bool = True,
            help_suffix: str = "", **extra: Any) -> None:
    """``--name`` for the setting ``name``: type, choices, default and help (unless ``text``) from :data:`SCHEMA`."""
    param = SCHEMA[name]
    text = (text or param.help or name.replace("_", " ")) + help_suffix
    if name == "device_preset":  # aliases and capitals are accepted too (v100, A100, ...)
        text += f": {', '.join(param.choices or ())}"
    elif param.choices is not None:
        extra.setdefault("choices", param.choices)
    default = f"; default {_shown(param.default)}" if show_default and not param.required else ""
    extra.setdefault("type", _TYPES.get(param.kind, str))
    where = f"job file: [{_TABLE[name]}] {name}" if name in _TABLE else "not in job files yet"
    group.add_argument(f"--{name.replace('_', '-')}", help=f"{text} ({where}{default})", **extra)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="pardnn-launch", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Place a job's training graph across each node's devices with ParDNN and train it "
                    "across nodes with Horovod (one MPI rank per node, or per replica with --replica-devices).")
    parser.add_argument("job", help="job file (jobs/NAME.toml) or preset name")
    run_group = parser.add_argument_group("run")
    _option(run_group, "iterations")
    _option(run_group, "window", type=_window, metavar="START:END")
    _option(run_group, "batch_size", "samples per step on one node", metavar="B")
    _option(run_group, "micro_batches", type=micro_batches_arg, metavar="M|auto")
    run_group.add_argument("--precision", choices=PRECISIONS, default=None,
                           help="the Keras dtype policy the model entry is made under; mixed_float16 trains with "
                                "dynamic loss scaling (job file: [train] precision; default auto: the model's own)")
    run_group.add_argument("--eval-every", type=int, default=None, metavar="N",
                           help="validate every N iterations and after the last (job file: [eval] every; the job's "
                                "[eval] names the validation batches)")
    run_group.add_argument("--out", help=f"output directory (default {LAUNCHER_DEFAULTS['out']})")
    run_group.add_argument("--no-progress", dest="progress", action="store_false", default=None,
                           help="no progress bar")
    _option(run_group, "stall_timeout", show_default=False, metavar="SECONDS")
    checkpoints = parser.add_argument_group("checkpoints and the trained model")
    checkpoints.add_argument("--checkpoint-every", type=int, metavar="N",
                             help="rank 0 saves the variables every N iterations, and on SIGTERM/SIGUSR1 "
                                  "(default 0: only on a stop signal when --checkpoint-dir is given)")
    checkpoints.add_argument("--checkpoint-dir", metavar="DIR", help="checkpoint folder (default OUT/<run>/checkpoint)")
    checkpoints.add_argument("--resume", nargs="?", const="latest", metavar="DIR",
                             help="continue from the checkpoint in DIR (a checkpoint or run folder); alone: the "
                                  "newest checkpoint of the same job under --out or --checkpoint-dir; 'auto': that, "
                                  "or from the beginning when there is none. The saved placement and M are used (no "
                                  "profiling, no placing)")
    checkpoints.add_argument("--keep-checkpoints", type=int, metavar="N",
                             help="keep the newest N checkpoints of the folder, deleting older ones once a newer one "
                                  "is whole (default 3; 0 keeps all)")
    checkpoints.add_argument("--save-model", metavar="PATH",
                             help="at the end, rank 0 writes the trained model in Keras' files: PATH.weights.h5 "
                                  "(model.load_weights after your build()), PATH.keras (whole, where Keras can "
                                  "save the model); a zoo model's weights go into an HDF5 file by variable name")
    checkpoints.add_argument("--replace", action="store_true", default=None,
                             help="with --resume: place the graph anew (profile, place) and load the saved values by "
                                  "variable name, for a graph or cluster that changed since the checkpoint")
    placement = parser.add_argument_group("placement")
    _option(placement, "devices_per_node", "devices per node: the first K GPUs, or K logical CPU devices without GPUs",
            metavar="K")
    _option(placement, "memory", "memory per device, e.g. 32GiB, or 'unlimited'; unset: the device preset's on GPUs, "
            "unlimited on CPUs", show_default=False, metavar="SIZE")
    _option(placement, "costs")
    _option(placement, "profile_steps", metavar="N")
    _option(placement, "reserve", metavar="FRACTION")
    _option(placement, "memory_heuristic")
    _option(placement, "run_order", metavar="true|false")
    _option(placement, "device_preset", metavar="PRESET")
    _option(placement, "placer", metavar="NAME", help_suffix=f": {', '.join(SCHEMA['placer'].choices or ())}")
    variants = parser.add_argument_group("parallelism and comparisons")
    variants.add_argument("--parallelism", choices=PARALLELISMS,
                          help="model: each node's replica placed across its devices (default); data: plain Horovod "
                               "data parallelism, one rank per device, the whole model on each, the same global batch "
                               "unless --batch-size (then per device)")
    variants.add_argument("--recompute", action="store_true", default=None,
                          help=f"with --parallelism data: gradient checkpointing (tf.recompute_grad per block; "
                               f"models: {', '.join(WRAPPED)})")
    variants.add_argument("--compare", metavar="A,B,...",
                          help=f"train each in turn in this allocation and print one table: placers, {DATA}, "
                               f"{RECOMPUTE} (one rank per device when data is listed)")
    variants.add_argument("--replica-devices", metavar="K|auto", default=None,
                          help="devices per model-parallel replica: each node runs devices_per_node / K ranks, each "
                               "placing its replica across its own K devices (the node's batch split over them), "
                               "all averaging gradients; auto: launched with one rank per device, rank 0 plans as "
                               "pardnn plan does and every K-th rank trains the plan chosen; default: all the "
                               "node's devices, one replica per node")
    variants.add_argument("--allreduce", choices=ALLREDUCE_CHOICES,
                          help="how ranks average gradients: horovod (hvd.allreduce per gradient on its variable's "
                               "device, overlapping the backward pass), mpi4py (one fused host-side MPI_Allreduce per "
                               "step; for TensorFlow >= 2.16, where Horovod 0.28.1 does not build), or auto (default: "
                               "horovod where horovod.tensorflow imports with MPI, else mpi4py)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more (every rank)")
    hosts.add_options(parser)
    return parser


class _Format(logging.Formatter):
    """``pardnn-launch: message``; from WARNING up ``warning:`` or ``error:`` follows the name (the console
    filter reads it)."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno >= logging.ERROR:
            return f"pardnn-launch: error: {text}"
        if record.levelno >= logging.WARNING:
            return f"pardnn-launch: warning: {text}"
        return f"pardnn-launch: {text}"


def _configure_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Format("%(message)s"))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
    for noisy in ("tensorflow", "absl", "numba", "h5py", "matplotlib"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    share_cores()  # before MPI (Horovod's or mpi4py's init) and TensorFlow start
    own_process()  # TensorFlow's import, when it comes, is kept out of the garbage collector's passes
    parser = build_parser()
    on_hosts = hosts.start(parser, argv)  # --hosts/--hostfile: mpirun runs pardnn-launch there (launcher.cluster.hosts)
    if on_hosts is not None:
        return on_hosts
    console.start(launch_rank())
    args = parser.parse_args(argv)
    _configure_logging(args.verbose)
    overrides = {name: getattr(args, name) for name in (*OVERRIDABLE, "precision", "eval_every")}  # job overrides
    try:
        run(args.job, **overrides)
    except SystemExit:
        raise
    except BaseException as error:  # run() has reported it on stderr
        return exit_code(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
