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
from pardnn.emulation.peaks import stable_order

__all__ = ["DEVICE", "TRANSFER", "chain_links", "chain_moves", "critical_chain", "suggested_moves"]

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
    # Writable copies of the schedule's read-only arrays, as the compiled kicks pass theirs: one signature
    # (one compile) of the kernel serves both.
    kinds, before, after, cost = chain_links(np.array(placement, dtype=np.int64), schedule.start_us.copy(),
                                             schedule.finish_us.copy(), schedule.edge_arrival_us.copy(),
                                             schedule.makespan_us, graph.pred_ptr, graph.pred_edge, graph.edge_src,
                                             -1 if keep is None else keep)
    names = (TRANSFER, DEVICE)
    return [(names[k], b, a, c) for k, b, a, c in zip(kinds.tolist(), before.tolist(), after.tolist(), cost.tolist(),
                                                       strict=True)]


@njit(cache=True, nogil=True)
def chain_links(placement: np.ndarray, start: np.ndarray, finish: np.ndarray, arrival: np.ndarray, makespan: float,
                pred_ptr: np.ndarray, pred_edge: np.ndarray, edge_src: np.ndarray, keep: int):
    """:func:`critical_chain` as arrays ``(kinds, before, after, cost)`` (kind 0: a transfer, 1: a device
    link); ``keep`` < 0 keeps every link. The refinement's compiled kicks (:mod:`pardnn.polish.kicks`)
    call it directly."""
    n = start.size
    tolerance = 1e-9 * max(1.0, makespan)
    # Per op, the op before it on its device: ops by start (ties by index), then stably by device.
    by_start = stable_order(start)
    devices = 0
    for v in range(n):
        devices = max(devices, placement[v] + 1)
    slot = np.zeros(devices + 1, np.int64)
    for v in range(n):
        slot[placement[v] + 1] += 1
    for d in range(devices):
        slot[d + 1] += slot[d]
    by_device = np.empty(n, np.int64)
    for v in by_start:
        by_device[slot[placement[v]]] = v
        slot[placement[v]] += 1
    previous = np.full(n, -1, np.int64)
    for i in range(1, n):
        if placement[by_device[i]] == placement[by_device[i - 1]]:
            previous[by_device[i]] = by_device[i - 1]
    last = np.argmax(finish)  # the first of the latest to finish
    kinds, before, after = np.empty(n, np.int8), np.empty(n, np.int64), np.empty(n, np.int64)
    cost = np.empty(n)
    count = _walk_chain(last, pred_ptr, pred_edge, edge_src, arrival, start, finish, placement, previous, tolerance,
                        kinds, before, after, cost)
    if keep < 0 or count <= keep:  # chain order
        return kinds[:count], before[:count], after[:count], cost[:count]
    # The ``keep`` costliest, costliest first, ties in chain order.
    chosen = stable_order(-cost[:count])[:keep]
    return kinds[chosen], before[chosen], after[chosen], cost[chosen]


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
    kinds = np.array([kind != TRANSFER for kind, *_ in links], np.int8)
    before, after, cost = (np.array([link[i] for link in links], dtype) for i, dtype in
                           ((1, np.int64), (2, np.int64), (3, np.float64)))
    units, targets = suggested_moves(np.asarray(placement, dtype=np.int64), unit, first_op, machine.devices,
                                     graph.comp_us, graph.pred_ptr, graph.pred, graph.pred_bytes,
                                     kinds, before, after, cost)
    return list(zip(units.tolist(), targets.tolist(), strict=True))


@njit(cache=True, nogil=True)
def suggested_moves(placement: np.ndarray, unit: np.ndarray, first_op: np.ndarray, devices: int, comp: np.ndarray,
                    pred_ptr: np.ndarray, pred: np.ndarray, pred_bytes: np.ndarray, kinds: np.ndarray,
                    before: np.ndarray, after: np.ndarray, cost: np.ndarray):
    """:func:`chain_moves` on :func:`chain_links`' arrays: ``(units, targets)``, most promising first.

    Each link suggests up to two moves (a transfer: each end to the other's device; a device link:
    ``after`` to the device that feeds it most bytes, and to the least loaded other device), scored
    by the link's cost; a move suggested twice keeps its highest score. Order: score descending, then
    the unit's first op, then the target."""
    # The load of each device (summed in op order, as np.bincount) and, per device, the least loaded
    # other device (first on ties): the least loaded, or for that one the next.
    load = np.zeros(devices)
    for v in range(placement.size):
        load[placement[v]] += comp[v]
    order = np.arange(devices)
    for i in range(1, devices):  # insertion sort by (load, device)
        d, j = order[i], i - 1
        while j >= 0 and load[order[j]] > load[d]:
            order[j + 1] = order[j]
            j -= 1
        order[j + 1] = d
    least_other = np.full(devices, order[0])
    least_other[order[0]] = order[min(1, devices - 1)]
    links = kinds.size
    device_links = 0
    for i in range(links):
        device_links += kinds[i] != 0
    afters = np.empty(device_links, np.int64)
    j = 0
    for i in range(links):
        if kinds[i] != 0:
            afters[j] = after[i]
            j += 1
    feeding = _most_feeding_device(afters, pred_ptr, pred, pred_bytes, placement, devices)
    # Every suggestion as (key = unit * devices + target, cost), then the best score per key.
    keys, scores = np.empty(2 * links, np.int64), np.empty(2 * links)
    count, fed = 0, 0
    for i in range(links):
        if kinds[i] == 0:
            ops, targets = (after[i], before[i]), (placement[before[i]], placement[after[i]])
        else:
            source = feeding[fed]
            fed += 1
            ops, targets = (after[i], after[i]), (source, least_other[placement[after[i]]])
        for s in range(2):
            op, target = ops[s], targets[s]
            if target >= 0 and target != placement[op] and cost[i] > -1.0:
                keys[count], scores[count] = unit[op] * devices + target, cost[i]
                count += 1
    by_key = stable_order(keys[:count].astype(np.float64))
    best_keys, best = np.empty(count, np.int64), np.empty(count)
    distinct = 0
    for i in by_key:
        if distinct > 0 and best_keys[distinct - 1] == keys[i]:
            if scores[i] > best[distinct - 1]:
                best[distinct - 1] = scores[i]
            continue
        best_keys[distinct], best[distinct] = keys[i], scores[i]
        distinct += 1
    # Order: by the unit's first op and target (distinct for distinct keys), then stably by score, highest first.
    second = np.empty(distinct)
    for i in range(distinct):
        second[i] = first_op[best_keys[i] // devices] * devices + best_keys[i] % devices
    by_op = stable_order(second)
    by_score = stable_order(-best[by_op])
    chosen = by_op[by_score]
    return best_keys[chosen] // devices, best_keys[chosen] % devices


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
