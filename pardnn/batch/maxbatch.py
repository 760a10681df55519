"""The largest trainable batch on K devices: ParDNN against data parallelism (the paper's "Increase over ideal DP").

:func:`max_batch` finds, per K, the largest batch that ParDNN fits and the largest one device fits times K,
by galloping and bisection, each probe a callback's graph partitioned; :func:`best_micro_batches` picks
the best M per K. Probes are cached (:class:`ProbeCache`). Search rules: docs/notes-partitioner.md.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine, format_bytes
from pardnn.errors import InfeasibleError
from pardnn.partitioner import partition

__all__ = ["BatchRow", "ProbeCache", "ProbeResult", "best_micro_batches", "data_parallel_fits", "fingerprint_of",
           "max_batch", "search_largest"]

MAX_BATCH = 1 << 20
SLACK = 2  # failing sizes in a row that end the upward scan after bisection


@dataclass(frozen=True)
class ProbeResult:
    """One probe: did batch ``batch`` fit on ``devices`` devices, and at what peak."""

    batch: int
    devices: int
    fits: bool
    peak_bytes: int  # highest per-device peak of the placement (or of one device for data parallelism)
    limit_bytes: int
    makespan_us: float
    seconds: float
    cached: bool = False


@dataclass(frozen=True)
class BatchRow:
    """The answer for one K."""

    devices: int
    pardnn_batch: int  # 0: not even batch 1 fits
    data_parallel_batch: int  # largest batch per replica × K
    probes: list[ProbeResult] = field(default_factory=list)
    micro_batches: int = 1  # M: each batch split into M micro-batches (both answers are multiples of M)

    @property
    def ratio(self) -> float:
        """ParDNN's batch over data parallelism's (the paper's "increase over ideal DP")."""
        return self.pardnn_batch / self.data_parallel_batch if self.data_parallel_batch else float("inf")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ratio"] = self.ratio if self.data_parallel_batch else None
        return out


class ProbeCache:
    """Probe results by key, kept in memory and (with ``path``) in a JSON file written atomically."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = None if path is None else Path(path)
        self.entries: dict[str, dict[str, Any]] = {}
        if self.path is not None and self.path.exists():
            try:
                self.entries = json.loads(self.path.read_text())
            except (OSError, ValueError):
                self.entries = {}  # a damaged cache is only a cache: start again

    def get(self, key: str) -> ProbeResult | None:
        entry = self.entries.get(key)
        return None if entry is None else ProbeResult(**{**entry, "cached": True})

    def put(self, key: str, result: ProbeResult) -> None:
        self.entries[key] = {**asdict(result), "cached": False}
        self._save()

    def staged(self) -> ProbeCache:
        """An in-memory copy: what it adds reaches this cache only through :meth:`commit`."""
        copy = ProbeCache()
        copy.entries = dict(self.entries)
        return copy

    def added_since(self, base: ProbeCache) -> dict[str, ProbeResult]:
        """Entries this cache has and ``base`` has not (probes computed since :meth:`staged`)."""
        return {key: ProbeResult(**entry) for key, entry in self.entries.items() if key not in base.entries}

    def commit(self, results: dict[str, ProbeResult]) -> None:
        """Add ``results`` (as from :meth:`added_since`) and write the file once."""
        self.entries.update({key: {**asdict(result), "cached": False} for key, result in results.items()})
        self._save()

    def _save(self) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(self.entries, indent=1, sort_keys=True))
            os.replace(tmp, self.path)


def search_largest(fits: Callable[[int], bool], *, start: int = 1, limit: int = MAX_BATCH,
                   slack: int = SLACK, guess: int | None = None) -> int:
    """Largest ``b`` in ``[start, limit]`` with ``fits(b)``; 0 if ``fits(start)`` fails.

    Without a guess: doubling from ``start`` until a probe fails (or ``limit``). With one: probe the
    guess, then gallop away from it (steps of 1/32 of the guess, doubling) until the answer is
    bracketed. Then bisection between the last success and the first failure. A memory heuristic is
    not exactly monotone near its limit (a greedy knapsack can fail at ``b`` and succeed at
    ``b + 1``), so the search finally scans upward until ``slack + 1`` sizes in a row fail (at most
    ``4 (slack + 1)`` sizes): the answer is the largest fitting size below such a run.
    """
    good, bad = _bracket(fits, start, limit, guess)
    if good == 0:
        return 0
    if bad is not None:
        while bad - good > 1:
            middle = (good + bad) // 2
            if fits(middle):
                good = middle
            else:
                bad = middle
    misses = 0
    candidate = good + 1
    scan_end = good + 4 * (slack + 1)  # a heuristic flickering near its limit must not walk far
    while misses <= slack and candidate <= min(limit, scan_end):
        if fits(candidate):
            good = candidate
            misses = 0
        else:
            misses += 1
        candidate += 1
    return good


def _bracket(fits: Callable[[int], bool], start: int, limit: int, guess: int | None) -> tuple[int, int | None]:
    """``(good, bad)``: a fitting size and the next failing one above it (None: ``limit`` fits)."""
    if guess is None or guess <= start:
        if not fits(start):
            return 0, None
        good, step = start, start
    else:
        guess = min(guess, limit)
        step = max(1, guess // 32)
        if not fits(guess):
            bad = guess
            while True:  # gallop down
                candidate = max(start, bad - step)
                if fits(candidate):
                    return candidate, bad
                if candidate == start:
                    return 0, None
                bad, step = candidate, step * 2
        good = guess
    while True:  # gallop up (doubling when there was no guess)
        candidate = min(good + step, limit)
        if candidate == good:
            return good, None
        if not fits(candidate):
            return good, candidate
        good, step = candidate, step * 2


def _linear_guess(fits: Callable[[int], bool], log: list[ProbeResult], start: int) -> int | None:
    """Probe ``start`` and ``2 start`` and extrapolate the peak linearly to the limit."""
    if not fits(start):
        return None
    low = log[-1]
    if not fits(2 * start):
        return start
    high = log[-1]
    slope = (high.peak_bytes - low.peak_bytes) / start
    if slope <= 0:
        return None
    return max(start, int(start + (low.limit_bytes - low.peak_bytes) / slope))


def _probe_pardnn(graph: CostGraph, machine: Machine) -> tuple[bool, int, float]:
    try:
        result = partition(graph, machine, memory_heuristic="overflow")
    except InfeasibleError:
        step1 = partition(graph, machine, memory_heuristic=None).report.evaluation
        return False, max(step1.peak_memory_bytes), step1.makespan_us
    evaluation = result.report.evaluation
    return True, max(evaluation.peak_memory_bytes), evaluation.makespan_us


def data_parallel_fits(graph: CostGraph, machine: Machine) -> tuple[bool, int, float]:
    """Whether the whole step fits one device of ``machine`` (a data-parallel replica)."""
    one = Machine(1, int(machine.memory_bytes[0]), machine.bandwidth_Bps, machine.latency_us, machine.reserve)
    evaluation = partition(graph, one, memory_heuristic=None).report.evaluation
    return evaluation.memory_fits, evaluation.peak_memory_bytes[0], evaluation.makespan_us


def max_batch(graph_for_batch: Callable[[int], CostGraph], devices: Sequence[int],
              machine_for: Callable[[int], Machine], *, fingerprint: str, cache: ProbeCache | None = None,
              start: int = 1, limit: int = MAX_BATCH, micro_batches: int = 1,
              on_probe: Callable[[str, ProbeResult], None] | None = None) -> list[BatchRow]:
    """For every K in ``devices``: the largest batch ParDNN fits, and data parallelism's.

    Parameters
    ----------
    graph_for_batch:
        Builds (and costs) the training step at a batch size; called once per uncached probe, so an
        expensive builder keeps its own graphs by batch (as ``jobs.maxbatch`` does).
    devices:
        The K values.
    machine_for:
        The machine of K devices (memory, interconnect, reserve).
    fingerprint:
        Identifies the job (model and everything but the batch) in cache keys.
    cache:
        Probe cache (in memory if None).
    micro_batches:
        M: the step splits its batch into M micro-batches (``graph_for_batch`` builds the M-copy
        graph), so only multiples of M are probed: the search runs over the micro-batch size
        ``b``, the batch being ``M b`` (data parallelism's replica too). M = 1 is the plain step.
    on_probe:
        Called as ``on_probe(kind, result)`` after every probe (``kind``: ``"pardnn"`` or ``"dp"``).

    Raises
    ------
    InfeasibleError
        When not even batch ``start`` fits ParDNN on the largest K, naming the shortfall.
    """
    cache = cache if cache is not None else ProbeCache()
    step = int(micro_batches)
    first, last = max(1, -(-start // step)), limit // step  # micro-batch sizes b with start <= M b <= limit

    def probe(kind: str, k: int, size: int, *, log: list[ProbeResult]) -> bool:
        batch, machine = size * step, machine_for(k)
        key = json.dumps([fingerprint, kind, batch, k, machine.memory_bytes.tolist(), machine.reserve,
                          machine.bandwidth_Bps, machine.latency_us, *([step] if step != 1 else [])])
        result = cache.get(key)
        if result is None:
            started = time.perf_counter()
            check = _probe_pardnn if kind == "pardnn" else data_parallel_fits
            fits, peak, makespan = check(graph_for_batch(batch), machine)
            result = ProbeResult(batch, k, fits, int(peak), int(machine.limits_bytes[0]), float(makespan),
                                 time.perf_counter() - started)
            cache.put(key, result)
        log.append(result)
        if on_probe is not None:
            on_probe(kind, result)
        return result.fits

    dp_log: list[ProbeResult] = []
    dp_fits = functools.partial(probe, "dp", 1, log=dp_log)
    per_replica = step * search_largest(dp_fits, start=first, limit=last, guess=_linear_guess(dp_fits, dp_log, first))
    rows = []
    previous: tuple[int, int] | None = None  # (K, answer) of the last K that fitted anything
    for k in devices:
        log: list[ProbeResult] = []
        # Each probe builds a graph, so start near the answer: the last K's answer scaled to this K
        # (or data parallelism's), and gallop from there.
        guess = previous[1] * k // previous[0] if previous else (per_replica * k or None)
        best = step * search_largest(functools.partial(probe, "pardnn", k, log=log), start=first, limit=last,
                                     guess=None if guess is None else guess // step)
        rows.append(BatchRow(k, best, per_replica * k, log + (dp_log if k == devices[0] else []), step))
        if best:
            previous = (k, best)
    if rows and all(row.pardnn_batch == 0 for row in rows):
        _none_fits(rows, max(devices), first * step, machine_for)
    return rows


def _none_fits(rows: Sequence[BatchRow], k: int, batch: int, machine_for: Callable[[int], Machine]) -> NoReturn:
    """Raise the :class:`InfeasibleError` of a model that fits no K even at the smallest ``batch``."""
    failed = [p for row in rows for p in row.probes if p.devices == k and p.batch == batch]
    need = failed[0].peak_bytes if failed else 0
    limit_bytes = int(machine_for(k).limits_bytes[0])
    micro = rows[0].micro_batches
    raise InfeasibleError(
        f"the model does not fit even at batch {batch}{f' ({micro} micro-batches)' if micro != 1 else ''} on {k} "
        f"devices: the best placement peaks at {format_bytes(need)} on a device whose limit is "
        f"{format_bytes(limit_bytes)} ({format_bytes(max(need - limit_bytes, 0))} short). Options: more devices, "
        f"larger devices, a smaller model, or a lower reserve.")


def best_micro_batches(rows_by_m: Mapping[int, Sequence[BatchRow]]) -> list[BatchRow]:
    """Per K, the row of the M whose largest batch is the largest (a tie: the smaller M), from each M's
    rows (every M answering the same K in the same order; an M that fits nothing has rows of 0)."""
    ordered = sorted(rows_by_m.items())
    best = []
    for position in range(len(ordered[0][1])):
        candidates = [rows[position] for _, rows in ordered]
        best.append(max(candidates, key=lambda row: row.pardnn_batch))  # max keeps the first of equals
    return best


def fingerprint_of(*parts: Any) -> str:
    """A stable short hash of the job's content, the pardnn version and the memory model (for cache keys)."""
    import hashlib

    from pardnn import __version__
    from pardnn.emulation.memory import MEMORY_MODEL

    text = json.dumps([__version__, MEMORY_MODEL, *parts], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
