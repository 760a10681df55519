"""Speed of the command line: the ``pardnn`` commands timed in fresh interpreters.

``pardnn place`` (without and with each memory heuristic) and ``pardnn simulate`` run on one
synthetic graph, each in a fresh interpreter, so interpreter start, imports and reading the graph
count; the numba kernels load from the on-disk cache that the suite's warm-up filled. Our
targets are for 200,000 ops on K = 16.

The *first run* is timed too: ``pardnn place`` of a small graph in a fresh interpreter whose
``NUMBA_CACHE_DIR`` is a new, empty directory, so every sweep it runs is compiled first: what the
first command on a freshly installed machine costs. It is a benchmark, not a test: wall times on
shared machines vary too much to assert on.
"""

from __future__ import annotations

import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pardnn import partition
from pardnn.costs.machine import Machine
from pardnn.costs.synthetic import dnn_graph
from pardnn.errors import PardnnError
from pardnn.io import write_graph

__all__ = ["FIRST_RUN_DEVICES", "FIRST_RUN_OPS", "LinePrinter", "SpeedRow", "first_run", "speed"]

LinePrinter = Callable[[str], None]  # one line of progress (the suite's too)

# The speed targets, in seconds, for 200,000 ops on K = 16.
TARGET_OPS, TARGET_DEVICES = 200_000, 16
TARGET_PLACE_S, TARGET_PLACE_MEMORY_S, TARGET_SIMULATE_S = 2.0, 5.0, 3.0
SPEED_LIMIT_FACTOR = 1.2  # the memory limit of the timed `pardnn place --memory`, × demand / K
EXIT_INFEASIBLE = 3  # `pardnn place`: no placement meets memory
# The first run: `pardnn place` of this graph into an empty numba cache, and its target in seconds.
FIRST_RUN_OPS, FIRST_RUN_DEVICES, FIRST_RUN_TARGET_S = 2_000, 4, 10.0
FIRST_RUN_ABOUT = (f"The first run: `pardnn place` of a graph of about {FIRST_RUN_OPS:,} ops on K = "
                   f"{FIRST_RUN_DEVICES} in a fresh interpreter whose numba cache (`NUMBA_CACHE_DIR`) is a new, "
                   "empty directory, so it compiles every sweep it runs, as the first command on a machine does; "
                   "its target is for that graph.")
CLI = (sys.executable, "-m", "pardnn.cli")


PAPER_ONLY = ("-a", "pardnn-paper")  # the twin: the paper's algorithm alone, no polishing stage

@dataclass(frozen=True)
class SpeedRow:
    """One timed command; ``infeasible`` when it exited with code 3 (no placement meets memory);
    ``note`` says how it differs from the other rows (the first run's empty cache and own graph)."""

    command: str
    seconds: float
    target_s: float | None
    infeasible: bool = False
    note: str = ""
    twin_of: str = ""  # the command this one is the paper-alone twin of (measured interleaved with it)
    paired_ratio: float | None = None  # twins: median over rounds of the command's time / this one's


def speed(ops: int, k: int, repeats: int, seed: int = 0, progress: LinePrinter = print) -> tuple[list[SpeedRow], str]:
    """Median wall time of the ``pardnn`` commands on one synthetic graph of ``ops`` ops at K = ``k`` (the
    suite's ``speed_*`` settings), each in a fresh interpreter, then of the first run (:func:`first_run`)."""
    at_target = ops == TARGET_OPS and k == TARGET_DEVICES
    graph = dnn_graph(ops, seed=seed)
    peaks = partition(graph, Machine(k), memory_heuristic=None).report.evaluation.peak_memory_bytes
    limit = int(SPEED_LIMIT_FACTOR * sum(peaks) / k)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        graph_path, placement = Path(tmp) / f"{graph.name}.json.gz", Path(tmp) / "placement.txt"
        write_graph(graph, graph_path)
        place = [*CLI, "place", str(graph_path), "-k", str(k), "-o", str(placement), "-q"]
        memory = ["--memory", str(limit), "--reserve", "0", "--memory-heuristic"]
        plain = f"pardnn place GRAPH -k {k} -o placement.txt"
        limited = f"pardnn place GRAPH -k {k} --memory {limit} --reserve 0 --memory-heuristic overflow -o placement.txt"
        # (argv, shown, target, the shown command it is the paper-alone twin of: -a pardnn-paper, no
        # polishing stage). The twins run interleaved with the default commands, round by round, so the
        # polishing stages' cost is measured side by side under the same load.
        commands = [
            (place, plain, TARGET_PLACE_S, ""),
            ([*place, *PAPER_ONLY], plain.replace(" -o ", f" {' '.join(PAPER_ONLY)} -o "), None, plain),
            ([*place, *memory, "overflow"], limited, TARGET_PLACE_MEMORY_S, ""),
            ([*place, *memory, "overflow", *PAPER_ONLY], limited.replace(" -o ", f" {' '.join(PAPER_ONLY)} -o "), None,
             limited),
            ([*place, *memory, "balance"], f"pardnn place GRAPH -k {k} --memory {limit} --reserve 0 "
                                           "--memory-heuristic balance -o placement.txt", TARGET_PLACE_MEMORY_S, ""),
        ]
        times: list[list[float]] = [[] for _ in commands]
        infeasible = [False] * len(commands)
        for _ in range(repeats):
            for i, (argv, _shown, _target, _twin) in enumerate(commands):
                seconds, code = _wall(argv)
                times[i].append(seconds)
                infeasible[i] = code == EXIT_INFEASIBLE
        index = {shown: i for i, (_argv, shown, _target, _twin) in enumerate(commands)}
        for i, (_argv, shown, target, twin) in enumerate(commands):
            seconds = statistics.median(times[i])
            # A twin's rounds ran next to its command's, under the same load: their ratio per round is a
            # steadier measure of the guard's cost than the ratio of two medians taken apart.
            paired = (statistics.median(a / b for a, b in zip(times[index[twin]], times[i], strict=True))
                      if twin else None)
            rows.append(SpeedRow(shown, seconds, target if at_target else None, infeasible[i], twin_of=twin,
                                 paired_ratio=paired))
            progress(f"speed: {shown}: {seconds:.2f} s" + (" (infeasible)" if infeasible[i] else ""))
        _median_wall(place, 1)  # the default placement again, for simulate
        shown = f"pardnn simulate GRAPH placement.txt -k {k}"
        seconds, _ = _median_wall([*CLI, "simulate", str(graph_path), str(placement), "-k", str(k)], repeats)
        rows.append(SpeedRow(shown, seconds, TARGET_SIMULATE_S if at_target else None))
        progress(f"speed: {shown}: {seconds:.2f} s")
    rows.append(first_run(repeats, seed, progress))
    return rows, f"{graph.name}: {graph.n:,} ops, {graph.m:,} edges, K = {k}"


def first_run(repeats: int = 1, seed: int = 0, progress: LinePrinter = print, work: Path | None = None) -> SpeedRow:
    """Median wall time of a cold ``pardnn place``: a ``FIRST_RUN_OPS``-op synthetic graph on
    K = ``FIRST_RUN_DEVICES`` in a fresh interpreter whose ``NUMBA_CACHE_DIR`` is a new, empty
    directory (one per repeat), so it compiles every sweep it runs.

    ``work`` holds the graph, the placement and the caches (``numba-cache-<repeat>``), kept for a
    look afterwards; by default a temporary directory, removed. Raises :class:`PardnnError` when the
    command fails, or when it left no numba cache index (``*.nbi``) in its empty cache: then it
    compiled nothing and the row would not measure what it says.
    """
    if work is None:
        with tempfile.TemporaryDirectory() as tmp:
            return first_run(repeats, seed, progress, Path(tmp))
    graph = dnn_graph(FIRST_RUN_OPS, seed=seed)
    graph_path = work / f"{graph.name}.json.gz"
    write_graph(graph, graph_path)
    argv = [*CLI, "place", str(graph_path), "-k", str(FIRST_RUN_DEVICES), "-o", str(work / "placement.txt"), "-q"]
    times = []
    for repeat in range(repeats):
        cache = work / f"numba-cache-{repeat}"
        cache.mkdir()
        times.append(_wall(argv, {**os.environ, "NUMBA_CACHE_DIR": str(cache)})[0])
        if not any(cache.rglob("*.nbi")):
            raise PardnnError(f"the first run compiled nothing into its empty NUMBA_CACHE_DIR {cache} "
                              "(is numba's JIT or its cache disabled?): " + shlex.join(argv))
    shown = f"pardnn place GRAPH -k {FIRST_RUN_DEVICES} -o placement.txt"
    row = SpeedRow(shown, statistics.median(times), FIRST_RUN_TARGET_S,
                   note=f"first run: empty numba cache, {graph.n:,} ops")
    progress(f"speed: {shown} ({row.note}): {row.seconds:.2f} s")
    return row


def _median_wall(argv: Sequence[str], repeats: int) -> tuple[float, bool]:
    """Median wall time of ``argv`` and whether it exited 3 (infeasible: an answer, not a failure)."""
    times = []
    infeasible = False
    for _ in range(repeats):
        seconds, code = _wall(argv)
        times.append(seconds)
        infeasible = code == EXIT_INFEASIBLE
    return statistics.median(times), infeasible


def _wall(argv: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[float, int]:
    """Wall time and exit code of one run of ``argv``; raises :class:`PardnnError` unless it exited
    0 or 3."""
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, EXIT_INFEASIBLE):
        raise PardnnError(f"benchmark command failed (exit {done.returncode}): {shlex.join(argv)}: "
                          f"{done.stderr.strip()}")
    return seconds, done.returncode
