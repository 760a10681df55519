"""What every ``pardnn`` sub-command shares: exit codes, machine options, value parsing, output helpers.

Option values, defaults and choices come from the settings schema (:data:`pardnn.settings.PLACEMENT`),
so a range or a list of names is written once. The zoo's commands (``jobs.cli``) use these too.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine
from pardnn.settings import PLACEMENT

__all__ = [
    "EPILOG", "EXIT_BAD_INPUT", "EXIT_INFEASIBLE", "EXIT_OK", "EXIT_USAGE", "PROGRESS_MIN_OPS", "StageProgress",
    "add_interconnect_options", "add_machine_options", "add_parser", "choices_metavar", "machine_from_args",
    "param_type", "print_json", "ratio_text", "read_graph", "table", "us",
]

EXIT_OK = 0
EXIT_BAD_INPUT = 1
EXIT_USAGE = 2
EXIT_INFEASIBLE = 3

EPILOG = """\
units: sizes take B, KB/MB/GB (powers of 1000) or KiB/MiB/GiB (powers of 1024): 32GiB;
bandwidth the same per second: 150GB/s; latency us, ms or s: 25us.
exit codes: 0 ok, 1 bad input, 2 bad command line, 3 infeasible (memory cannot be met).
"""

PROGRESS_MIN_OPS = 50_000  # graphs this large show stage progress on stderr


# ------------------------------------------------------------------------------- parsing values
def param_type(key: str) -> Callable[[str], Any]:
    """An argparse ``type`` for settings key ``key``: :meth:`Param.parse`, its words on a bad value."""
    param = PLACEMENT[key]

    def parse(text: str) -> Any:
        try:
            return param.parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {param.expected()}") from None

    parse.__name__ = key
    return parse


def choices_metavar(key: str) -> str:
    """``{a,b,c}``: the usage text of a settings key with choices."""
    choices = PLACEMENT[key].choices
    assert choices is not None, key
    return "{" + ",".join(map(str, choices)) + "}"


def add_parser(sub: Any, name: str, *, help: str, description: str, epilog: str | None = EPILOG,
               ) -> argparse.ArgumentParser:
    """A sub-command parser with the house formatting (the epilog's lines kept as written)."""
    return sub.add_parser(name, help=help, description=description, epilog=epilog,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def add_interconnect_options(group: Any, purpose: str = "") -> None:
    """``--bandwidth`` and ``--latency`` with the settings' defaults (help: ``purpose`` if given)."""
    group.add_argument("--bandwidth", default=PLACEMENT["bandwidth"].default,
                       help=f"{purpose or 'interconnect bandwidth between two devices'} (default: %(default)s)")
    group.add_argument("--latency", default=PLACEMENT["latency"].default,
                       help=f"{purpose or 'latency per transfer'} (default: %(default)s)")


def add_machine_options(parser: argparse.ArgumentParser, *, devices_required: bool) -> None:
    """``--devices``, ``--memory``, ``--bandwidth``, ``--latency``, ``--reserve``."""
    group = parser.add_argument_group("machine")
    group.add_argument("--devices", "-k", type=int, required=devices_required, default=None,
                       help="number of devices K" + ("" if devices_required else
                                                     " (default: highest device in the placement + 1)"))
    group.add_argument("--memory", default=None,
                       help="memory per device: one size (32GiB) or one per device (32GiB,32GiB,16GiB,16GiB); "
                            "default: unlimited, or the graph file's memory_limit_bytes")
    add_interconnect_options(group)
    reserve = PLACEMENT["reserve"]
    group.add_argument("--reserve", type=param_type("reserve"), default=reserve.default,
                       help=f"{reserve.help}: {reserve.expected()} (default: %(default)s)")


def machine_from_args(args: argparse.Namespace, graph: CostGraph, devices: int) -> Machine:
    """The machine the options describe; memory defaults to the graph file's limit."""
    memory: Any = args.memory
    if memory is None and graph.memory_limit_bytes is not None:
        memory = graph.memory_limit_bytes
    return Machine(devices, memory, args.bandwidth, args.latency, args.reserve)


def read_graph(path: str) -> CostGraph:
    from pardnn.io import read_any_graph

    return read_any_graph(path)


# ---------------------------------------------------------------------------------------- output
def print_json(payload: dict[str, Any]) -> None:
    """``payload`` as JSON on stdout; an infinite or NaN number (JSON has none) as ``null``."""
    json.dump(_finite(payload), sys.stdout, indent=2, sort_keys=True, allow_nan=False)
    sys.stdout.write("\n")


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def ratio_text(value: float | None, spec: str = ".2f") -> str:
    """A ratio formatted by ``spec``, or "—" when it has none (``None``: a zero makespan or work under it)."""
    return "—" if value is None or not math.isfinite(value) else format(value, spec)


def table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    """Right-aligned columns, two spaces apart, header first."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(f"{{:>{w}}}" for w in widths)
    return "\n".join(line.format(*map(str, r)) for r in [header, *rows])


def us(value: float) -> str:
    """A time in µs as ``12.3 us`` or, from a millisecond on, ``1,234.567 ms``."""
    return f"{value / 1e3:,.3f} ms" if value >= 1e3 else f"{value:,.1f} us"


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


def add_cluster_options(parser: argparse.ArgumentParser) -> None:
    """``--nodes``, ``--replicas-per-node``, ``--node``, ``--network``: the replicas whose gradients are averaged."""
    group = parser.add_argument_group(
        "data parallelism", "the replica placed here runs on NODES nodes, REPLICAS per node, and every step averages "
        "its gradients across all of them (one fused allreduce at a time per replica, as Horovod does): the report "
        "then gives the step as compute + exposed allreduce (`place` keeps a run order only where it is not "
        "slower with the allreduce than order of readiness)")
    group.add_argument("--nodes", type=positive_int, default=1, help="nodes (default: 1)")
    group.add_argument("--replicas-per-node", type=positive_int, default=1, metavar="R",
                       help="replicas on each node (default: 1); a node of G GPUs runs G / K of them")
    group.add_argument("--node", type=_node_preset, default=PLACEMENT["device_preset"].default,
                       metavar="PRESET", help="the node's network and allreduce latencies: a device preset or "
                       "dgx-2, dgx-a100, dgx-h100, dgx-h200 (default: %(default)s)")
    group.add_argument("--network", default=None, metavar="RATE",
                       help="the node's network, all its NICs together (default: the preset's, e.g. 100GB/s for "
                            "a DGX-2's 8 x 100 Gb/s InfiniBand)")


def _node_preset(text: str) -> str:
    from pardnn.costs.presets import preset
    from pardnn.errors import InvalidMachineError

    try:
        return preset(text).name
    except InvalidMachineError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a device preset or dgx-2, dgx-a100, dgx-h100, dgx-h200") from None


def positive_int(text: str) -> int:
    """A command-line whole number >= 1 (``--nodes``, ``--batch-size``)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 1")
    return value


def cluster_from_args(args: argparse.Namespace, machine: Machine) -> Any:
    """The :class:`~pardnn.emulation.allreduce.Cluster` the options describe (the node's GPU link: the
    machine's), or ``None`` for one replica."""
    from pardnn.costs.machine import parse_bandwidth
    from pardnn.emulation.allreduce import cluster_for

    if args.nodes * args.replicas_per_node == 1:
        return None
    network = None if args.network is None else parse_bandwidth(args.network, "--network")
    return replace(cluster_for(args.node, args.nodes, args.replicas_per_node, network_Bps=network),
                   link_Bps=machine.bandwidth_Bps)
