"""Memory heuristic I: the overflow handler (the paper's Section 3.2, Eqs. 4-5).

:func:`handle_overflow` emulates, tracks memory (Eq. 3) and solves each device's overflow as a greedy
0-1 min-knapsack, moving whole units to devices with room, until every device fits; it raises
:class:`~pardnn.errors.InfeasibleError` with a proof or :class:`~pardnn.errors.NoPlacementFoundError`.
Paper choice: units, rounds, the cover heap, the target device and ties (docs/notes-partitioner.md).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from pardnn.costs.graph import CostGraph, Kind
from pardnn.costs.machine import Machine
from pardnn.emulation.emulated import emulate_and_track
from pardnn.emulation.emulator import Schedule
from pardnn.emulation.memory import INT64_MAX, MemoryProfile
from pardnn.errors import NoPlacementFoundError
from pardnn.steps.feasibility import check_feasible, infeasible_message
from pardnn.steps.units import Units

__all__ = ["OverflowResult", "handle_overflow"]


@dataclass(frozen=True)
class OverflowResult:
    """The placement after heuristic I, and what it did."""

    placement: np.ndarray
    moved_ops: int
    rounds: int
    moves: list[tuple[int, int, int]] = field(default_factory=list)  # (unit's first op, from, to)
    # The emulation of the final placement (its last round), so callers need not emulate it again;
    # None when the machine has no memory limit and nothing was emulated.
    schedule: Schedule | None = None
    memory: MemoryProfile | None = None


def _potentials(graph: CostGraph, place: np.ndarray, memory: MemoryProfile, schedule: Schedule,
                residual: np.ndarray, unit: np.ndarray, units: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``M_pot`` of every op at the peak instant of its own device (plus residual bytes), and per unit
    and device the bytes of that potential that are copies received *from* that device — moving the
    unit there turns them into local reads, so the target needs no room for them."""
    when = memory.peak_time_us
    at = when[memory.buffer_device]
    alloc, free = memory.buffer_alloc_us, memory.buffer_free_us
    live = (alloc <= at) & ((free > at) | ((free == alloc) & (alloc == at)))
    live &= memory.buffer_owner != memory.buffer_producer
    owner, nbytes = memory.buffer_owner[live], memory.buffer_bytes[live]
    pot = np.bincount(owner, weights=nbytes, minlength=graph.n)
    t = when[place]
    running = (graph.kind == Kind.NORMAL) & (schedule.start_us <= t) & (schedule.finish_us >= t)
    source = place[memory.buffer_producer[live]]
    copy = source != memory.buffer_device[live]
    key = unit[owner[copy]] * k + source[copy]
    copies = np.bincount(key, weights=nbytes[copy], minlength=units * k).reshape(units, k)
    return pot + np.where(running, graph.out_bytes, 0) + residual, copies


def _move_costs(units: Units, place: np.ndarray) -> np.ndarray:
    """Eq. 5 per unit: its compute plus its communication with other units on its own device."""
    count = units.ptr.size - 1
    unit_device = np.empty(count, np.int64)
    unit_device[units.of] = place
    same = place[units.edge_other] == unit_device[units.edge_owner]
    return units.compute + np.bincount(units.edge_owner[same], weights=units.edge_comm[same], minlength=count)


@dataclass
class _Round:
    """What one round knows: the emulated step's memory, and the units' Eq. 4 / Eq. 5 terms.

    ``reserved`` / ``reserved_always`` are the bytes this round has already sent to each device at
    the overflow instants and for the whole step (residual bytes), so later moves of the round see
    the room that is really left.
    """

    limits: np.ndarray
    memory: MemoryProfile
    units: Units
    place: np.ndarray
    unit_device: np.ndarray
    pot: np.ndarray  # a_j of Eq. 4: the unit's M_pot at the peak instant of its device
    res: np.ndarray  # the unit's residual bytes (held all step wherever it goes)
    copies: np.ndarray  # [unit, device]: bytes of pot that are copies received from that device
    cost: np.ndarray  # c_j of Eq. 4: move_cost, Eq. 5
    reserved: np.ndarray
    reserved_always: np.ndarray

    @classmethod
    def start(cls, graph: CostGraph, machine: Machine, units: Units, place: np.ndarray, memory: MemoryProfile,
              schedule: Schedule, residual: np.ndarray) -> _Round:
        count = units.count
        potential, copies = _potentials(graph, place, memory, schedule, residual, units.of, count, machine.devices)
        unit_device = np.empty(count, np.int64)
        unit_device[units.of] = place
        return cls(machine.limits_bytes, memory, units, place, unit_device,
                   np.bincount(units.of, weights=potential, minlength=count),
                   np.bincount(units.of, weights=residual, minlength=count), copies,
                   _move_costs(units, place), np.zeros(machine.devices, np.int64),
                   np.zeros(machine.devices, np.int64))


def _holds_residual(state: _Round, res: np.ndarray) -> np.ndarray:
    """[unit, device]: whether the device can hold the unit's residual bytes all step — on top of its
    own peak and this round's arrivals. A unit without residual bytes needs no such room."""
    room_always = _room(state.limits, state.memory.peak_bytes, state.reserved_always)
    return (res[:, None] == 0) | (res[:, None] <= room_always[None, :])


def _candidates(state: _Round, device: int, frozen: np.ndarray, usage_then: np.ndarray) -> np.ndarray:
    """Units on ``device`` that relieve it and that some other device can hold right now.

    A target must hold the unit's potential, less the copies it would read locally there, on top of
    its use at the overflow instant, and the unit's residual bytes (if any) on top of its own peak.
    Rooms only shrink during one device's turn, so a unit that fits nowhere now never will in this
    round.
    """
    pot = state.pot
    units = np.flatnonzero((state.unit_device == device) & ~frozen & (pot > 0))
    needs = pot[units, None] - state.copies[units]  # on each possible target
    holds = ((needs <= _room(state.limits, usage_then, state.reserved)[None, :])
             & _holds_residual(state, state.res[units]))
    holds[:, device] = False
    return units[holds.any(axis=1)]


def _target(state: _Round, unit: int, device: int, usage_then: np.ndarray) -> int:
    """The device ``unit`` moves to, or -1 when none can hold it.

    Among the devices with room (see :func:`_candidates`), the one the unit communicates with most,
    then the lowest peak (with this round's arrivals), then the lowest index. Called once per unit
    taken, so compiled (:func:`_pick_target`).
    """
    units = state.units
    return int(_pick_target(unit, device, state.limits, state.memory.peak_bytes, usage_then, state.reserved,
                            state.reserved_always, float(state.pot[unit]), float(state.res[unit]),
                            state.copies[unit], state.place, units.edge_ptr, units.edge_other, units.edge_comm))


@njit(cache=True, nogil=True)
def _pick_target(unit: int, device: int, limits: np.ndarray, peak: np.ndarray, usage_then: np.ndarray,
                 reserved: np.ndarray, reserved_always: np.ndarray, pot: float, res: float, copies: np.ndarray,
                 place: np.ndarray, edge_ptr: np.ndarray, edge_other: np.ndarray, edge_comm: np.ndarray) -> int:
    # The room checks of _holds_residual and _candidates for one unit, with the potential and copies
    # truncated to whole bytes (_candidates compares them as they are: the same for the whole byte
    # counts emulation gives); each room as _room computes it. Then the unit's communication per device
    # summed in edge order (as np.bincount sums), and the best by (most communication, lowest peak, index).
    k = limits.size
    comm = np.zeros(k)
    for e in range(edge_ptr[unit], edge_ptr[unit + 1]):
        comm[place[edge_other[e]]] += edge_comm[e]
    whole = np.floor(pot)  # whole bytes, as the potential and copies are counted
    best = -1
    for d in range(k):
        if d == device:
            continue
        if not (res == 0 or res <= float(limits[d] - peak[d]) - float(reserved_always[d])):
            continue
        if whole - np.floor(copies[d]) > float(limits[d] - usage_then[d]) - float(reserved[d]):
            continue
        if best < 0 or comm[d] > comm[best] or (comm[d] == comm[best]
                                                and float(peak[d]) + float(reserved[d])
                                                < float(peak[best]) + float(reserved[best])):
            best = d
    return best


def _room(limits: np.ndarray, used: np.ndarray, reserved: np.ndarray) -> np.ndarray:
    """Bytes left per device, in float64: ``limits - used`` first, in int64 (exact: a limit is 1 to
    2^63 - 2, a use 0 to 2^63 - 1, so a saturated use leaves -1 byte, never 0, as :mod:`pardnn.emulation.memory`
    ("Exabytes") wants), then this round's reservations, in float64 (exact below 2^53 bytes, and no
    int64 wrap-around when they are exabytes)."""
    return (limits - used).astype(np.float64) - reserved.astype(np.float64)


def _reserve(reserved: np.ndarray, device: int, nbytes: int) -> None:
    """Add ``nbytes`` to ``reserved[device]`` in Python integers, saturated to the int64 range."""
    reserved[device] = min(max(int(reserved[device]) + nbytes, -INT64_MAX), INT64_MAX)


def _relieve(state: _Round, device: int, frozen: np.ndarray, moves: list[tuple[int, int, int]]) -> int:
    """Solve the overflow of ``device`` at its peak instant as the greedy min-knapsack of Eq. 4.

    Eq. 4: minimise sum_j c_j x_j subject to sum_j a_j x_j >= O, x_j in {0, 1}, where O is the
    overflow, a_j the unit's ``M_pot`` and c_j its ``move_cost`` (Eq. 5). Greedily, as the paper:
    a min-heap on the movement criterion c_j / a_j (its keys fixed for the round, so a sorted list
    read in order), and a min-heap on c_j holding the units whose
    a_j alone covers what is left of O — refreshed as it shrinks: units enter in order of falling
    a_j as soon as a_j >= the remaining overflow; take both tops and keep the one of lower c_j. A
    unit no device can hold is dropped. Moves ``place`` in ``state`` and freezes the moved units;
    returns the ops moved.
    """
    memory = state.memory
    overflow = int(memory.peak_bytes[device] - state.limits[device])  # O
    usage_then = memory.usage_all_at(float(memory.peak_time_us[device]))
    candidates = _candidates(state, device, frozen, usage_then)
    if candidates.size == 0:
        return 0
    first_op = state.units.first_op
    pot, cost = state.pot, state.cost
    criterion = cost[candidates] / pot[candidates]  # c_j / a_j; ties to the earlier first op
    by_criterion = candidates[np.lexsort((first_op[candidates], criterion))].tolist()
    cheapest = 0  # the next of by_criterion not taken yet
    by_size = candidates[np.lexsort((first_op[candidates], -pot[candidates]))].tolist()  # falling a_j
    by_cost: list[tuple[float, int, int]] = []
    entered = 0
    taken: set[int] = set()
    remaining = overflow
    moved = 0
    while remaining > 0:
        while entered < len(by_size) and pot[by_size[entered]] >= remaining:  # a_j >= what is left of O
            unit = by_size[entered]
            entered += 1
            if unit not in taken:
                heapq.heappush(by_cost, (float(cost[unit]), int(first_op[unit]), unit))
        while cheapest < len(by_criterion) and by_criterion[cheapest] in taken:  # taken from by_cost
            cheapest += 1
        while by_cost and by_cost[0][2] in taken:  # taken from by_criterion
            heapq.heappop(by_cost)
        if cheapest == len(by_criterion) and not by_cost:
            break
        if by_cost and (cheapest == len(by_criterion) or by_cost[0][0] < cost[by_criterion[cheapest]]):
            unit = heapq.heappop(by_cost)[2]
        else:
            unit = by_criterion[cheapest]
            cheapest += 1
        taken.add(unit)
        target = _target(state, unit, device, usage_then)
        if target < 0:
            continue  # no device can hold it: not considered again
        members = state.units.members_of(unit)
        state.place[members] = target
        state.unit_device[unit] = target
        frozen[unit] = True
        _reserve(state.reserved, target, int(pot[unit]) - int(state.copies[unit, target]))
        _reserve(state.reserved_always, target, int(state.res[unit]))
        remaining -= int(pot[unit])
        moved += members.size
        moves.append((int(members[0]), device, target))
    return moved


def handle_overflow(graph: CostGraph, machine: Machine, placement: np.ndarray, *,
                    progress: Callable[[int, int], None] | None = None,
                    max_rounds: int | None = None) -> OverflowResult:
    """Memory heuristic I: move ops off overflowing devices until every device fits its limit.

    Parameters
    ----------
    graph, machine:
        The graph and a machine with memory (``machine.bounded``).
    placement:
        The Step 1 placement (colocation groups whole).
    progress:
        Called as ``progress(round, overflowing_devices)`` after each round.
    max_rounds:
        Give up (:class:`~pardnn.errors.NoPlacementFoundError`) when a device still overflows after
        this many rounds; ``None``: no cap (the loop still ends after at most U rounds).

    Raises
    ------
    InfeasibleError
        With a proof (:func:`~pardnn.steps.feasibility.check_feasible`, checked first) that no placement
        meets memory.
    NoPlacementFoundError
        When a device still overflows and no unit left on it can move: the heuristic failed, which
        proves nothing (other starting placements may succeed).
    """
    place = np.array(placement, dtype=np.int64)
    if not machine.bounded:
        return OverflowResult(place, 0, 0)
    check_feasible(graph, machine)
    limits = machine.limits_bytes
    units = Units.build(graph, machine)
    residual = np.where(graph.kind == Kind.RESIDUAL, graph.out_bytes, 0)
    frozen = np.zeros(units.count, bool)
    moves: list[tuple[int, int, int]] = []
    rounds = 0
    while True:
        answer = emulate_and_track(graph, machine, place)
        schedule, memory = answer.schedule, answer.memory
        assert memory is not None  # the machine has memory sizes
        if answer.fits(machine):
            return OverflowResult(place, int(np.diff(units.ptr)[frozen].sum()), rounds, moves, schedule, memory)
        over = np.flatnonzero(memory.peak_bytes > limits)
        moved, capped = 0, rounds == max_rounds
        if not capped:
            rounds += 1
            state = _Round.start(graph, machine, units, place, memory, schedule, residual)
            worst_first = over[np.argsort(-(memory.peak_bytes[over] - limits[over]), kind="stable")]
            moved = sum(_relieve(state, int(device), frozen, moves) for device in worst_first)
            if progress is not None:
                progress(rounds, int(over.size))
        if moved == 0:  # every round before this one froze at least one more unit: the loop ends
            worst = int(over[np.argmax(memory.peak_bytes[over] - limits[over])])
            moved_ops = int(np.diff(units.ptr)[frozen].sum())
            why = (f"then stopped at its cap of {max_rounds} rounds" if capped else
                   "the last moving none: at its peak no op left on it can move to a device with room")
            raise NoPlacementFoundError("no placement found: " + infeasible_message(
                worst, int(memory.peak_bytes[worst]), int(limits[worst]), machine,
                f" after memory heuristic I moved {moved_ops} ops in {rounds} round{'s' * (rounds != 1)}, {why} "
                f"(this is not a proof that no placement fits)"))
