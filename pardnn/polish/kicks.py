"""The refinement's iterated local search in one compiled call: the same kicks, descents, memory
checks and log as the Python loop of :meth:`pardnn.polish.refine._Search.iterate`.

:func:`iterate_compiled` kicks four random units to random devices, descends (the critical chain's
moves via :func:`pardnn.polish.chain.chain_links` and :func:`~pardnn.polish.chain.suggested_moves`,
then the whole neighbourhood via :func:`first_shorter`), checks each kept move's memory with
:func:`pardnn.emulation.memory.tracked_peaks`, and keeps a kick only if the step got strictly shorter.
Its random draws are NumPy's: numba draws from the same ``Generator``, and :func:`_choose` is
``Generator.choice(..., replace=False)``'s algorithm. Why and what it saves: docs/internals.md
("The refinement").
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from pardnn.emulation.emulated import TOLERANCE
from pardnn.emulation.emulator import emulate_sweep, upward_rank_sweep
from pardnn.emulation.memory import tracked_peaks
from pardnn.polish.chain import chain_links, suggested_moves

__all__ = ["KIND_NAMES", "first_shorter", "iterate_compiled"]

# The log's move kinds, by code (pardnn.polish.refine's names).
KIND_NAMES = ("neighbour", "pair", "cluster", "kick", "transfer", "device")
NEIGHBOUR, PAIR, CLUSTER, KICK, TRANSFER, DEVICE = range(6)
# The state shared by the steps below: counts[EVALUATIONS] emulations spent, counts[LOGGED] moves in
# the log, counts[RESTARTS] kicks kept.
EVALUATIONS, LOGGED, RESTARTS = range(3)


@njit(inline='always')
def _choose(rng, population: int, size: int) -> np.ndarray:
    """``rng.choice(population, size=size, replace=False)`` for ``population`` up to 10,000 (NumPy's
    Floyd branch, then its shuffle): the same draws from the same stream."""
    chosen = np.empty(size, np.int64)
    mask = 0
    while mask < int(1.2 * size):  # the smallest 2^j - 1 at least 1.2 size: the hash set's mask
        mask = 2 * mask + 1
    taken = np.full(mask + 1, -1, np.int64)
    for j in range(population - size, population):
        value = rng.integers(0, j + 1)
        loc = value & mask
        while taken[loc] != -1 and taken[loc] != value:
            loc = (loc + 1) & mask
        if taken[loc] == -1:  # value is new
            taken[loc] = value
            chosen[j - population + size] = value
        else:  # value was drawn before: j instead (it cannot have been)
            loc = j & mask
            while taken[loc] != -1:
                loc = (loc + 1) & mask
            taken[loc] = j
            chosen[j - population + size] = j
    for i in range(size - 1, 0, -1):
        j = rng.integers(0, i + 1)
        chosen[i], chosen[j] = chosen[j], chosen[i]
    return chosen


@njit(inline='always')
def _shorter(makespan: float, than: float) -> bool:
    """:func:`pardnn.emulation.emulated.strictly_shorter`."""
    if math.isinf(than):
        return not math.isinf(makespan)
    return makespan < than * (1 - TOLERANCE)


@njit(inline='always')
def _emulated(trial, devices, ranked, succ_ptr, succ, edge_comm, pred_ptr, comp, topo_rank, topo_order):
    """:class:`pardnn.emulation.emulator.Emulator`'s call, compiled: ``(start, finish, makespan, arrival,
    sequence)`` of ``trial`` in order of readiness or, ``ranked``, by its upward rank."""
    priority = np.zeros(0)
    if ranked:
        priority = -upward_rank_sweep(trial, succ_ptr, succ, edge_comm, comp, topo_order)
    return emulate_sweep(trial.size, devices, succ_ptr, succ, edge_comm, pred_ptr, trial, comp, topo_rank, priority,
                         np.zeros(0, np.int64), np.zeros(0))


@njit(cache=True, nogil=True)
def first_shorter(placement: np.ndarray, set_ptr: np.ndarray, set_ops: np.ndarray, devices: int, begin: int,
                  limit: int, best: float, succ_ptr: np.ndarray, succ: np.ndarray, edge_comm: np.ndarray,
                  pred_ptr: np.ndarray, comp: np.ndarray, topo_rank: np.ndarray, topo_order: np.ndarray,
                  ranked: bool, targets: np.ndarray) -> tuple[int, int]:
    """The first of the moves from ``begin`` whose trial is strictly shorter than ``best``, and the
    trials emulated (at most ``limit``): ``(index, used)``, index -1 when none is or the budget ran out.

    With ``targets`` empty the moves are the sweep's (move = set * devices + target), else move i takes
    set i to ``targets[i]`` (the chain's). A move whose ops are all on its target already is skipped,
    not emulated."""
    trial = placement.copy()
    used = 0
    moves = (set_ptr.size - 1) * devices if targets.size == 0 else targets.size
    for index in range(begin, moves):
        if used >= limit:
            return -1, used
        which, target = (index // devices, index % devices) if targets.size == 0 else (index, targets[index])
        first, last = set_ptr[which], set_ptr[which + 1]
        moved = False
        for q in range(first, last):
            if placement[set_ops[q]] != target:
                moved = True
        if not moved:
            continue
        for q in range(first, last):
            trial[set_ops[q]] = target
        makespan = _emulated(trial, devices, ranked, succ_ptr, succ, edge_comm, pred_ptr, comp, topo_rank,
                             topo_order)[2]
        used += 1
        for q in range(first, last):
            trial[set_ops[q]] = placement[set_ops[q]]
        if _shorter(makespan, best):
            return index, used
    return -1, used


@njit(inline='always')
def _copy(target: np.ndarray, source: np.ndarray) -> None:
    """``target[:] = source`` as a loop: numba's slice assignment compiles a shape check whose error message
    (string formatting) costs several seconds of a cold compile."""
    for i in range(source.size):
        target[i] = source[i]


@njit(inline='always')
def _keep(trial, code, first, source, target, g, devices, ranked, bounded, limits, place, schedule, makespan,
          counts, log) -> bool:
    """:meth:`_Search.keep`: emulate ``trial``; if every device fits, it becomes the answer (``place``,
    ``schedule`` = start, finish, arrival, ``makespan``) and its move is logged."""
    (succ_ptr, succ, edge_comm, pred_ptr, _, _, _, edge_src, edge_dst, edge_bytes, comp, topo_rank, topo_order, kind,
     out_bytes, candidates) = g
    start, finish, span, arrival, _ = _emulated(trial, devices, ranked, succ_ptr, succ, edge_comm, pred_ptr, comp,
                                                topo_rank, topo_order)
    if bounded:
        peak = tracked_peaks(devices, trial, succ_ptr, succ, edge_src, edge_dst, edge_bytes, kind, out_bytes,
                             candidates, limits, start, finish, arrival)
        for d in range(devices):
            if peak[d] > limits[d]:
                return False
    _copy(place, trial)
    _copy(schedule[0], start)
    _copy(schedule[1], finish)
    _copy(schedule[2], arrival)
    makespan[0] = span
    row = counts[LOGGED]
    log[row, 0], log[row, 1], log[row, 2], log[row, 3] = code, first, source, target
    counts[LOGGED] += 1
    return True


@njit(inline='always')
def _first_kept(set_ptr, set_ops, targets, set_kind, set_first, budget, g, devices, ranked, bounded, limits,
                place, schedule, makespan, counts, log) -> bool:
    """:meth:`_Search._first_kept`: the first strictly shorter move (found by
    :func:`first_shorter`) that fits, kept; ``set_kind`` and ``set_first``: each
    moving set's log kind and its first unit's first op."""
    (succ_ptr, succ, edge_comm, pred_ptr, _, _, _, _, _, _, comp, topo_rank, topo_order, _, _, _) = g
    begin = np.int64(0)  # not a literal: first_shorter keeps the one signature the Python sweep compiles
    while counts[EVALUATIONS] < budget:
        index, used = first_shorter(place, set_ptr, set_ops, devices, begin, budget - counts[EVALUATIONS],
                                     makespan[0], succ_ptr, succ, edge_comm, pred_ptr, comp, topo_rank,
                                     topo_order, ranked, targets)
        counts[EVALUATIONS] += used
        if index < 0:
            return False
        which, target = (index, targets[index]) if targets.size else (index // devices, index % devices)
        trial = place.copy()
        for q in range(set_ptr[which], set_ptr[which + 1]):
            trial[set_ops[q]] = target
        if _keep(trial, set_kind[which], set_first[which], place[set_ops[set_ptr[which]]], target, g, devices,
                 ranked, bounded, limits, place, schedule, makespan, counts, log):
            return True
        begin = index + 1  # shorter but over a limit: the search goes on after it
    return False


@njit(inline='always')
def _chain_sets(unit, first_op, bounds, members, budget, g, devices, place, schedule, makespan, counts):
    """:meth:`_Search.chain_move`'s moving sets: the units the critical chain suggests moving, as
    ``(set_ptr, set_ops, targets, set_kind, set_first)`` for :func:`_first_kept` (no set when none)."""
    (_, _, _, pred_ptr, pred, pred_bytes, pred_edge, edge_src, _, _, comp, _, _, _, _, _) = g
    kinds, before, after, cost = chain_links(place, schedule[0], schedule[1], schedule[2], makespan[0], pred_ptr,
                                             pred_edge, edge_src, max(16, 2 * (budget - counts[EVALUATIONS])))
    units, targets = suggested_moves(place, unit, first_op, devices, comp, pred_ptr, pred, pred_bytes, kinds, before,
                                     after, cost)
    # Each move's log kind: that of the first link (costliest first) with an end in its unit.
    link_of = np.full(bounds.size - 1, -1, np.int64)
    for i in range(kinds.size - 1, -1, -1):
        link_of[unit[before[i]]] = i
        link_of[unit[after[i]]] = i
    set_ptr = np.zeros(units.size + 1, np.int64)
    set_kind, set_first = np.empty(units.size, np.int64), np.empty(units.size, np.int64)
    for i in range(units.size):
        u = units[i]
        set_ptr[i + 1] = set_ptr[i] + bounds[u + 1] - bounds[u]
        set_kind[i] = DEVICE if link_of[u] < 0 or kinds[link_of[u]] != 0 else TRANSFER
        set_first[i] = first_op[u]
    set_ops = np.empty(set_ptr[-1], np.int64)
    for i in range(units.size):
        u = units[i]
        set_ops[set_ptr[i]:set_ptr[i + 1]] = members[bounds[u]:bounds[u + 1]]
    return set_ptr, set_ops, targets, set_kind, set_first


@njit(inline='always')
def _descend(unit, first_op, bounds, members, sweep, budget, g, devices, ranked, bounded, limits, place, schedule,
             makespan, counts, log) -> None:
    """:meth:`_Search.descend`: chain moves, else the whole neighbourhood (``sweep``: its moving sets as
    set_ptr, set_ops, kinds, first ops), while one is kept. (One call of :func:`_first_kept` for both:
    numba inlines it once: about 30 % less of this kernel's compile.)"""
    sweep_ptr, sweep_ops, sweep_kind, sweep_first = sweep
    no_targets = np.zeros(0, np.int64)
    while counts[EVALUATIONS] < budget:
        kept = False
        for phase in range(2):
            if phase == 0:  # the critical chain's moves first
                set_ptr, set_ops, targets, set_kind, set_first = _chain_sets(
                    unit, first_op, bounds, members, budget, g, devices, place, schedule, makespan, counts)
                if set_ptr.size == 1:  # no move suggested
                    continue
            else:  # then the whole neighbourhood
                set_ptr, set_ops, targets, set_kind, set_first = sweep_ptr, sweep_ops, no_targets, sweep_kind, \
                    sweep_first
            if _first_kept(set_ptr, set_ops, targets, set_kind, set_first, budget, g, devices, ranked, bounded,
                           limits, place, schedule, makespan, counts, log):
                kept = True
                break
        if not kept:
            return


@njit(cache=True, nogil=True)
def iterate_compiled(rng, kick_units, unit, first_op, bounds, members, order, sweep, evaluations, budget, g,
                     devices, ranked, bounded, limits, place, start, finish, arrival, makespan):
    """:meth:`_Search.iterate` from the answer ``place`` (emulated: ``start``, ``finish``, ``arrival``,
    ``makespan``) with ``evaluations`` of ``budget`` spent: kick ``kick_units`` of the ``order.size``
    units (``order``: unit ids in sweep order; ``bounds``/``members``: each unit's ops), descend, keep
    if strictly shorter, else go back, until the budget is spent.

    Returns ``(placement, evaluations, restarts, log)``: the answer, the emulations spent in all,
    kicks kept, and the moves kept as rows ``(kind code, first op, from, to)`` (:data:`KIND_NAMES`)."""
    place = place.copy()
    schedule = (start.copy(), finish.copy(), arrival.copy())
    span = np.array([makespan])
    counts = np.zeros(3, np.int64)
    counts[EVALUATIONS] = evaluations
    log = np.empty((max(0, budget - evaluations) + 1, 4), np.int64)  # at most one kept move per emulation
    units = order.size
    while counts[EVALUATIONS] < budget:
        before, before_schedule = place.copy(), (schedule[0].copy(), schedule[1].copy(), schedule[2].copy())
        before_span, logged = span[0], counts[LOGGED]
        trial = place.copy()
        for u in _choose(rng, units, min(units, kick_units)):
            target = rng.integers(0, devices)
            uid = order[u]
            for q in range(bounds[uid], bounds[uid + 1]):
                trial[members[q]] = target
        counts[EVALUATIONS] += 1
        if _keep(trial, KICK, -1, -1, -1, g, devices, ranked, bounded, limits, place, schedule, span, counts, log):
            counts[RESTARTS] += 1
            _descend(unit, first_op, bounds, members, sweep, budget, g, devices, ranked, bounded, limits, place,
                     schedule, span, counts, log)
            if not _shorter(span[0], before_span):
                _copy(place, before)
                for i in range(3):
                    _copy(schedule[i], before_schedule[i])
                span[0] = before_span
                counts[LOGGED] = logged
    return place, counts[EVALUATIONS], counts[RESTARTS], log[:counts[LOGGED]]
