"""The critical chain of an emulated step, and the moves it suggests (the refinement's first moves).

:func:`critical_chain` walks back from the op that finishes last through the links that set each
start: a transfer (the op waited for a copy from another device) or its device (it waited for the op
before it there); :func:`chain_moves` turns the costliest links into ``(unit, device)`` moves, as
:mod:`pardnn.polish.refine` describes.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine
from pardnn.emulation.emulator import Schedule

__all__ = ["DEVICE", "TRANSFER", "chain_moves", "critical_chain"]

TRANSFER, DEVICE = "transfer", "device"


def critical_chain(graph: CostGraph, placement: np.ndarray, schedule: Schedule,
                   keep: int | None = None) -> list[tuple[str, int, int, float]]:
    """The links of the chain that ends at the last op to finish: ``(kind, before, after, cost_us)``.

    ``kind`` is ``"transfer"`` (``after`` waited for a copy of ``before``'s output; cost = the
    transfer time) or ``"device"`` (``after`` was ready but waited for ``before`` on its device;
    cost = the wait). Same-device data links cost nothing and are followed but not listed.
    ``keep``: when the chain has more links, only the ``keep`` costliest, costliest first (ties in
    chain order), chosen on arrays: the chain of the 200k-op benchmark graph has 30,669 links, and
    making a tuple of each took 0.05 s, twice the emulation of the one move its budget tries.
    """
    if graph.n == 0:
        return []
    start, finish = schedule.start_us, schedule.finish_us
    tolerance = 1e-9 * max(1.0, schedule.makespan_us)
    # Per op, the op before it on its device.
    by_device = np.lexsort((start, placement))
    previous = np.full(graph.n, -1, np.int64)
    same = placement[by_device[1:]] == placement[by_device[:-1]]
    previous[by_device[1:][same]] = by_device[:-1][same]
    last = int(np.argmax(finish))  # the first of the latest to finish
    kinds, before, after = np.empty(graph.n, np.int8), np.empty(graph.n, np.int64), np.empty(graph.n, np.int64)
    cost = np.empty(graph.n)
    count = _walk_chain(last, graph.pred_ptr, graph.pred_edge, graph.edge_src, schedule.edge_arrival_us, start, finish,
                        np.asarray(placement, dtype=np.int64), previous, tolerance, kinds, before, after, cost)
    chosen = np.arange(count) if keep is None or count <= keep else np.argsort(-cost[:count], kind="stable")[:keep]
    names = (TRANSFER, DEVICE)
    return [(names[k], b, a, c) for k, b, a, c in zip(kinds[chosen].tolist(), before[chosen].tolist(),
                                                       after[chosen].tolist(), cost[chosen].tolist(), strict=True)]


@njit(cache=True, nogil=True)
def _walk_chain(v: int, pred_ptr: np.ndarray, pred_edge: np.ndarray, edge_src: np.ndarray, arrival: np.ndarray,
                start: np.ndarray, finish: np.ndarray, placement: np.ndarray, previous: np.ndarray, tolerance: float,
                kinds: np.ndarray, before: np.ndarray, after: np.ndarray, cost: np.ndarray) -> int:
    # The walk of critical_chain from op v; writes the links (kind 0 transfer, 1 device), returns how many.
    count = 0
    for _ in range(start.size):
        ready, e = 0.0, -1  # the latest-arriving input (the first such in-edge on ties), and when
        for q in range(pred_ptr[v], pred_ptr[v + 1]):
            f = pred_edge[q]
            if e < 0 or arrival[f] > ready:
                e, ready = f, arrival[f]
        if e >= 0 and start[v] <= ready + tolerance:  # a data link
            u = edge_src[e]
            if placement[u] != placement[v]:
                kinds[count], before[count], after[count], cost[count] = 0, u, v, arrival[e] - finish[u]
                count += 1
            v = u
        elif previous[v] >= 0 and abs(finish[previous[v]] - start[v]) <= tolerance:  # a device link
            w = previous[v]
            kinds[count], before[count], after[count], cost[count] = 1, w, v, start[v] - ready
            count += 1
            v = w
        else:
            break
    return count


def chain_moves(graph: CostGraph, machine: Machine, placement: np.ndarray, unit: np.ndarray,
                first_op: np.ndarray, links: list[tuple[str, int, int, float]]) -> list[tuple[int, int]]:
    """``(unit, target device)`` moves suggested by the chain, most promising first, without repeats."""
    scored: dict[tuple[int, int], float] = {}

    def suggest(op: int, target: int, cost: float) -> None:
        key = (int(unit[op]), int(target))
        if target != placement[op] and cost > scored.get(key, -1.0):
            scored[key] = cost

    load = np.bincount(placement, weights=graph.comp_us, minlength=machine.devices).tolist()
    # Per device, the least loaded other device (first on ties): the least loaded, or for that one the next.
    order = sorted(range(machine.devices), key=lambda d: (load[d], d))
    least_other = [order[0] if d != order[0] else order[min(1, machine.devices - 1)] for d in range(machine.devices)]
    device_links = np.array([after for kind, _, after, _ in links if kind != TRANSFER], np.int64)
    feeding = iter(_most_feeding_device(device_links, graph.pred_ptr, graph.pred, graph.pred_bytes,
                                        np.asarray(placement, dtype=np.int64), machine.devices).tolist())
    for kind, before, after, cost in links:
        if kind == TRANSFER:
            suggest(after, int(placement[before]), cost)
            suggest(before, int(placement[after]), cost)
            continue
        source = next(feeding)
        if source >= 0:
            suggest(after, source, cost)
        suggest(after, least_other[int(placement[after])], cost)
    return sorted(scored, key=lambda key: (-scored[key], int(first_op[key[0]]), key[1]))


@njit(cache=True, nogil=True)
def _most_feeding_device(ops: np.ndarray, pred_ptr: np.ndarray, pred: np.ndarray, pred_bytes: np.ndarray,
                         placement: np.ndarray, devices: int) -> np.ndarray:
    # Per op: the other device its inputs bring the most bytes from (first on ties), -1 if none brings any.
    out = np.full(ops.size, -1, np.int64)
    inputs = np.zeros(devices)
    for i in range(ops.size):
        v = ops[i]
        inputs[:] = 0.0
        for q in range(pred_ptr[v], pred_ptr[v + 1]):
            inputs[placement[pred[q]]] += pred_bytes[q]
        best = 0.0
        for d in range(devices):
            if d != placement[v] and inputs[d] > best:
                best, out[i] = inputs[d], d
    return out
