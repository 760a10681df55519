"""A run order on each device, chosen with the placement and enforced (the ordering stage).

The paper emulates TensorFlow's executor: each device runs its ready ops in order of readiness
(FIFO). That order is not always good. On a device with two ready ops, the one that feeds the
critical path should run first; FIFO may run the other, and then the whole step waits. On 208 small
random DAGs with a proven optimum (``python -m benchmarks.exact``), some cases stay ~30 % above the
optimum under FIFO *for every placement*, while the same DAGs reach the optimum once each device
runs its ops in upward-rank order (HEFT's list-scheduling priority).

So after the refinement, this stage tries an order: each device, when free, runs its ready op of
highest *upward rank* under the placement (its compute plus the longest path after it, the transfer
time of cut edges counted; :class:`pardnn.emulator.Emulator` with ``ranked=True``). It refines the
placement again by the same local search (:func:`pardnn.refine.refine`) judged under that order, and
keeps the order only when the step is strictly shorter than the unordered one and every device still
fits its memory. Otherwise the placement has no order and runs as before.

An order is a *position* per op: its place in its device's run sequence, from the emulated start
order of the list schedule. :func:`pardnn.tf.apply` enforces it with one control dependency from
each op to the next on its device; the emulator honours it the same way (each op also waits for the
one before it on its device to finish: :func:`chain_next`). Replaying the positions of a list schedule
as such chains reproduces that schedule exactly (a free device always started its next op as soon as
it was ready, so waiting for the op before it changes nothing) — the tests check it on random DAGs.

Choices where nothing says what to do:

- **Upward rank, not a search over orders.** One priority per placement, computed in O(|V| + |E|);
  the refinement searches placements under it. On the exact benchmark this closes the cases FIFO
  cannot reach.
- **Kept only when strictly shorter.** An order adds control dependencies the user's graph did not
  have; they are worth it only when they buy time.
- **Positions are dense** (0..n_d - 1 on a device with n_d ops). A file may give any distinct
  non-negative integers per device; :func:`check_order` turns them dense and rejects an order that
  contradicts the graph (an op before one of its inputs on its device, or a cycle through two
  devices' sequences) naming the ops.

Complexity: the ordered refinement costs what the refinement costs (its budget, ``seconds``) plus one
O(|V| + |E|) rank sweep per emulation; the positions and chains are O(|V| log |V|).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from pardnn.emulator import Emulator, Schedule
from pardnn.errors import InvalidPlacementError
from pardnn.graph import CostGraph
from pardnn.machine import Machine
from pardnn.memory import MemoryProfile, track_memory
from pardnn.refine import refine

__all__ = ["Ordered", "chain_next", "check_order", "order_placement", "positions"]

_MAX_NAMED = 8


@dataclass(frozen=True)
class Ordered:
    """A placement with a run order that beats the same stage's unordered answer."""

    placement: np.ndarray
    position: np.ndarray  # int64 per op: its place in its device's sequence (0 runs first)
    schedule: Schedule
    memory: MemoryProfile | None
    details: dict[str, Any]


def positions(placement: np.ndarray, schedule: Schedule) -> np.ndarray:
    """Each op's position in its device's run sequence in ``schedule`` (0 first), from its start order."""
    if schedule.sequence is None:
        raise ValueError("the schedule has no start sequence (make it with pardnn.emulator)")
    return _dense(np.asarray(placement, dtype=np.int64), schedule.sequence)


def _dense(place: np.ndarray, key: np.ndarray) -> np.ndarray:
    # Each op's rank by ``key`` among the ops of its device.
    by_device = np.lexsort((key, place))
    first = np.searchsorted(place[by_device], place[by_device], side="left")
    position = np.empty(place.size, np.int64)
    position[by_device] = np.arange(place.size) - first
    return position


def chain_next(placement: np.ndarray, position: np.ndarray) -> np.ndarray:
    """Per op, the op its device runs next under ``position`` (-1 for each device's last)."""
    place = np.asarray(placement, dtype=np.int64)
    by_device = np.lexsort((np.asarray(position), place))
    after = np.full(place.size, -1, np.int64)
    same = place[by_device[1:]] == place[by_device[:-1]]
    after[by_device[:-1][same]] = by_device[1:][same]
    return after


def check_order(graph: CostGraph, placement: np.ndarray, position: Any, source: str = "the order") -> np.ndarray:
    """Validate a run order for ``placement`` and return it dense (0..n_d - 1 on each device).

    Raises
    ------
    InvalidPlacementError
        Naming ``source``: a wrong length, a negative or non-integer position, two ops of one device
        at one position, an op before one of its inputs on its device, or a cycle through the
        devices' sequences and the graph's edges (ops on it named).
    """
    raw = np.asarray(position)
    if raw.shape != (graph.n,):
        raise InvalidPlacementError(f"{source} has {raw.size} positions for the {graph.n} ops of {graph.name!r}")
    if raw.size and not np.issubdtype(raw.dtype, np.integer):
        raise InvalidPlacementError(f"{source}: positions must be integers, got {raw.dtype}")
    raw = raw.astype(np.int64)
    if raw.size and raw.min() < 0:
        v = int(np.argmin(raw))
        raise InvalidPlacementError(f"{source}: op {graph.names[v]!r} has position {raw[v]}; expected >= 0")
    place = np.asarray(placement, dtype=np.int64)
    by_device = np.lexsort((raw, place))
    same = place[by_device[1:]] == place[by_device[:-1]]
    clash = np.flatnonzero(same & (raw[by_device[1:]] == raw[by_device[:-1]]))
    if clash.size:
        a, b = int(by_device[clash[0]]), int(by_device[clash[0] + 1])
        raise InvalidPlacementError(f"{source}: ops {graph.names[a]!r} and {graph.names[b]!r} are both at position "
                                    f"{raw[a]} on device {place[a]}; positions on one device must differ")
    dense = _dense(place, raw)
    src, dst = graph.edge_src, graph.edge_dst
    backwards = np.flatnonzero((place[src] == place[dst]) & (dense[src] > dense[dst]))
    if backwards.size:
        e = int(backwards[0])
        u, v = int(src[e]), int(dst[e])
        raise InvalidPlacementError(
            f"{source}: op {graph.names[v]!r} (position {raw[v]}) runs before its input {graph.names[u]!r} "
            f"(position {raw[u]}) on device {place[u]}; an op's inputs on its device come first")
    left = _unordered(graph.n, graph.succ_ptr, graph.succ, graph.pred_ptr, chain_next(place, dense))
    if left.size:
        named = ", ".join(repr(graph.names[v]) for v in left[:_MAX_NAMED].tolist())
        raise InvalidPlacementError(
            f"{source}: the devices' sequences and the graph's edges form a cycle through {left.size} ops "
            f"({named}{', ...' if left.size > _MAX_NAMED else ''}): one device runs an op before one that "
            f"another device needs first")
    return dense


@njit(cache=True, nogil=True)
def _unordered(n: int, succ_ptr: np.ndarray, succ: np.ndarray, pred_ptr: np.ndarray, after: np.ndarray) -> np.ndarray:
    # Kahn's algorithm over the graph's edges and the chains; the ops it cannot reach lie on or after a cycle.
    indegree = np.empty(n, np.int64)
    for v in range(n):
        indegree[v] = pred_ptr[v + 1] - pred_ptr[v]
    for v in range(n):
        if after[v] >= 0:
            indegree[after[v]] += 1
    stack = np.empty(n, np.int64)
    top = 0
    for v in range(n):
        if indegree[v] == 0:
            stack[top] = v
            top += 1
    seen = 0
    while top > 0:
        top -= 1
        v = stack[top]
        seen += 1
        for k in range(succ_ptr[v], succ_ptr[v + 1] + 1):
            w = succ[k] if k < succ_ptr[v + 1] else after[v]
            if w < 0:
                continue
            indegree[w] -= 1
            if indegree[w] == 0:
                stack[top] = w
                top += 1
    if seen == n:
        return np.zeros(0, np.int64)
    return np.flatnonzero(indegree > 0)


def order_placement(graph: CostGraph, machine: Machine, placement: np.ndarray, schedule: Schedule, *,
                    seconds: float) -> tuple[Ordered | None, dict[str, Any]]:
    """The ordering stage (module docstring): ``placement`` refined under upward-rank order, with its
    positions, if that step is strictly shorter than ``schedule`` (``placement``'s unordered emulation)
    and fits; else ``None``. Deterministic. Also returns what it tried (the report's ``order`` entry)."""
    details: dict[str, Any] = {"kept": False, "unordered_us": schedule.makespan_us}
    if machine.devices < 2 or graph.n == 0:
        return None, details
    place = np.asarray(placement, dtype=np.int64)
    ranked = Emulator(graph, machine, ranked=True)(place)
    memory = track_memory(graph, machine, place, ranked) if machine.bounded else None
    details["ranked_us"] = ranked.makespan_us
    if memory is not None and not (memory.peak_bytes <= machine.limits_bytes).all():
        details["why_not"] = "over a device's memory in upward-rank order"
        return None, details
    refined = refine(graph, machine, place, ranked, memory, seconds=seconds, ranked=True)
    details.update(ordered_us=refined.schedule.makespan_us, refine=refined.details())
    if not refined.schedule.makespan_us < schedule.makespan_us * (1 - 1e-9):
        details["why_not"] = "not shorter than the order of readiness"
        return None, details
    details["kept"] = True
    return Ordered(refined.placement, positions(refined.placement, refined.schedule), refined.schedule,
                   refined.memory, details), details
