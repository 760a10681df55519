"""The exact placer's schedules outside CP-SAT (:mod:`pardnn.baselines.exact`).

:func:`list_schedule` (the model's integer schedule of an order), :func:`hint_candidate` (the first
search's start), :func:`pick` (the placement returned) and :func:`model_order` (the model's run order,
when the emulator runs it faster). O(|V| + |E|) per list schedule.
"""

from __future__ import annotations

import numpy as np

from pardnn.baselines.critical_path import critical_path_placement
from pardnn.baselines.topological import topological_placement
from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine
from pardnn.emulation.checks import dense_positions
from pardnn.emulation.emulated import emulate_and_track, strictly_shorter
from pardnn.emulation.emulator import emulate

__all__ = ["Candidate", "canonical", "hint_candidate", "list_schedule", "model_order", "pick"]

Candidate = tuple[np.ndarray, list[int], str]  # placement, start ticks, label


def list_schedule(graph: CostGraph, place: np.ndarray, order: list[int], dur: list[int], comm: list[int]) -> list[int]:
    """Integer starts when the ops run in ``order`` (topological, and per device the run order), each as
    early as its device and inputs allow: a schedule of the model."""
    free = [0] * (int(place.max(initial=0)) + 1)
    start = [0] * graph.n
    for v in order:
        t = free[place[v]]
        for slot in range(graph.pred_ptr[v], graph.pred_ptr[v + 1]):
            u = int(graph.pred[slot])
            cut = comm[int(graph.pred_edge[slot])] if place[u] != place[v] else 0
            t = max(t, start[u] + dur[u] + cut)
        start[v] = t
        free[place[v]] = t + dur[v]
    return start


def canonical(place: np.ndarray, unit: np.ndarray, devices: int) -> np.ndarray:
    """Devices renamed in order of first use by the units 0, 1, ... (the value-precedence order)."""
    first = np.full(int(unit.max(initial=-1)) + 1, -1, np.int64)
    first[unit] = place  # the members of a unit share its device
    rename = np.full(devices, -1, np.int64)
    for d in first.tolist():
        if rename[d] < 0:
            rename[d] = int((rename >= 0).sum())
    rename[rename < 0] = np.arange(int((rename >= 0).sum()), devices)
    return rename[place]


def hint_candidate(graph: CostGraph, machine: Machine, residual: np.ndarray, unit: np.ndarray, dur: list[int],
          comm: list[int], symmetric: bool) -> Candidate | None:
    """The single-device, topological or critical-path placement within the residual limits whose
    emulated order gives the shortest integer schedule (ties in that order)."""
    best: tuple[int, Candidate] | None = None
    for name, place in (("single", np.zeros(graph.n, np.int64)),
                        ("topological", topological_placement(graph, machine)[0]),
                        ("critical_path", critical_path_placement(graph, machine)[0])):
        load = np.bincount(place, weights=residual, minlength=machine.devices)
        if machine.bounded and (load > machine.limits_bytes).any():
            continue
        place = canonical(place, unit, machine.devices) if symmetric else place
        order = np.lexsort((graph.topo_rank, emulate(graph, machine, place).start_us)).tolist()
        start = list_schedule(graph, place, order, dur, comm)
        length = max(s + d for s, d in zip(start, dur))
        if best is None or length < best[0]:
            best = (length, (place, start, name))
    return None if best is None else best[1]


def pick(graph: CostGraph, machine: Machine, candidates: list[Candidate], dur: list[int],
         ordered: bool = True) -> tuple[np.ndarray, list[int] | None, str, np.ndarray | None]:
    """The candidate with the least emulated makespan, in order of readiness or (``ordered``) in its model
    order (the emulator's order of readiness can undo the model's), ties to the shorter model schedule,
    then to the later; without any, device 0. Returns its placement, start ticks, label and run order
    (``None``: order of readiness)."""
    if not candidates:
        return np.zeros(graph.n, np.int64), None, "device 0", None
    emulated: dict[bytes, float] = {}
    for place, _, _ in candidates:
        if place.tobytes() not in emulated:
            emulated[place.tobytes()] = emulate(graph, machine, place).makespan_us
    judged = []  # ((emulated makespan, model makespan), candidate, its run order)
    for candidate in candidates:
        place, starts, _ = candidate
        fifo_us = emulated[place.tobytes()]
        found = model_order(graph, machine, place, starts, fifo_us) if ordered else None
        makespan = fifo_us if found is None else found[1]
        judged.append(((makespan, max(s + t for s, t in zip(starts, dur))), candidate, None if found is None
                       else found[0]))
    _, (place, starts, label), order = min(reversed(judged), key=lambda item: item[0])
    return place, starts, label, order


def model_order(graph: CostGraph, machine: Machine, placement: np.ndarray, starts: list[int],
                fifo_us: float) -> tuple[np.ndarray, float] | None:
    """The model's run order of ``placement`` (module notes) and its emulated makespan, if that beats
    ``fifo_us`` (the placement's in order of readiness) and fits memory; else ``None``."""
    if machine.devices < 2 or graph.n == 0:
        return None
    place = np.asarray(placement, dtype=np.int64)
    key = np.empty(graph.n, np.int64)
    key[np.lexsort((graph.topo_rank, np.asarray(starts)))] = np.arange(graph.n)  # a linear extension of the DAG
    order = dense_positions(place, key)
    ordered = emulate(graph, machine, place, order=order)
    if not strictly_shorter(ordered.makespan_us, fifo_us):
        return None
    if not emulate_and_track(graph, machine, place, schedule=ordered).fits(machine):
        return None
    return order, ordered.makespan_us
