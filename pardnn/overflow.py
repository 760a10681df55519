"""Memory heuristic I: the overflow handler (the paper's Section 3.2, Eqs. 4-5).

Emulate the schedule, track memory per device (Eq. 3), and wherever a device's use exceeds its limit
(``memory × (1 − reserve)``) treat the overflow ``O`` as a 0-1 min-knapsack (Eq. 4): choose ops whose
memory potentials at the overflow instant add up to at least ``O`` at least total *move cost*
(Eq. 5: the op's compute plus its communication with ops on the same device — what moving it
adds in imbalance and transfers). Greedily, as the paper does: a min-heap keyed by
``move_cost / M_pot`` and a second min-heap keyed by ``move_cost`` holding the ops whose potential
alone covers the overflow; each step takes both tops and keeps the cheaper move (the other goes
back). An op moves only to a device that can hold its potential; otherwise it is dropped from the
heaps. Moved ops never move again, so the handler ends.

Choices where the paper is silent:

- **Units.** A colocation group (a variable, its slots, the ops that read or mutate them) moves as
  one unit: its potential and move cost are the sums over its members (residual members count their
  bytes, live all step); edges inside the unit cost nothing.
- **Where the overflow is taken.** Each round handles every overflowing device at its peak instant
  (the largest overflow); the moves of a round are applied together, then the step is emulated again
  and potentials recomputed (the paper recomputes after every move; batching per device and round
  keeps the same greedy but costs one O(|V| + |E|) emulation per round instead of per move).
- **Target device.** Among the devices that can hold the unit — its residual bytes on top of their
  peak, and its potential on top of their use at the overflow instant, less the copies it received
  from that very device (there they become local reads), plus what this round already sent there —
   the one the unit communicates with most, then the
  lowest peak, then the lowest index.
- **Ties** in either heap are broken by the unit's lowest op index, so the result is deterministic.

If a round moves nothing while a device still overflows, or the residual bytes alone exceed the
total capacity (checked first), :class:`~pardnn.errors.InfeasibleError` names the device, its peak,
its limit, the shortfall and what to change.

Complexity: per round O((|V| + |E|) log |V|) for emulation and potentials plus O(U log U) heap work
for U candidate units; each op moves at most once, so at most |V| moves over all rounds — the
paper's O(|V|^2) worst case; in practice a handful of rounds.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from pardnn.emulator import Schedule, emulate
from pardnn.errors import InfeasibleError
from pardnn.feasibility import check_residual_capacity, infeasible_message
from pardnn.graph import CostGraph, Kind
from pardnn.machine import Machine
from pardnn.memory import MemoryProfile, track_memory
from pardnn.units import Units

__all__ = ["OverflowResult", "handle_overflow"]


@dataclass(frozen=True)
class OverflowResult:
    """The placement after heuristic I, and what it did."""

    placement: np.ndarray
    moved_ops: int
    rounds: int
    moves: list[tuple[int, int, int]] = field(default_factory=list)  # (unit's first op, from, to)


def _potentials(graph: CostGraph, place: np.ndarray, memory: MemoryProfile, schedule: Schedule,
                residual: np.ndarray, unit: np.ndarray, units: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``M_pot`` of every op at the peak instant of its own device (plus residual bytes), and per unit
    and device the bytes of that potential that are copies received *from* that device — moving the
    unit there turns them into local reads, so the target needs no room for them."""
    when = memory.peak_time_us
    at = when[memory.buffer_device]
    alloc, free = memory.buffer_alloc_us, memory.buffer_free_us
    live = (alloc <= at) & ((free > at) | (free == alloc)) & (memory.buffer_owner != memory.buffer_producer)
    owner, nbytes = memory.buffer_owner[live], memory.buffer_bytes[live]
    pot = np.bincount(owner, weights=nbytes, minlength=graph.n)
    t = when[place]
    running = (graph.kind == Kind.NORMAL) & (schedule.start_us <= t) & (schedule.finish_us >= t)
    source = place[memory.buffer_producer[live]]
    copy = source != memory.buffer_device[live]
    key = unit[owner[copy]] * k + source[copy]
    copies = np.bincount(key, weights=nbytes[copy], minlength=units * k).reshape(units, k)
    return pot + np.where(running, graph.out_bytes, 0) + residual, copies


def _move_costs(graph: CostGraph, units: Units, place: np.ndarray) -> np.ndarray:
    """Eq. 5 per unit: its compute plus its communication with other units on its own device."""
    count = units.ptr.size - 1
    cost = np.bincount(units.of, weights=graph.comp_us, minlength=count)
    unit_device = np.empty(count, np.int64)
    unit_device[units.of] = place
    owner = np.repeat(np.arange(count), np.diff(units.edge_ptr))
    same = place[units.edge_other] == unit_device[owner]
    return cost + np.bincount(owner[same], weights=units.edge_comm[same], minlength=count)


def handle_overflow(graph: CostGraph, machine: Machine, placement: np.ndarray, *,
                    progress: Callable[[int, int], None] | None = None) -> OverflowResult:
    """Memory heuristic I: move ops off overflowing devices until every device fits its limit.

    Parameters
    ----------
    graph, machine:
        The graph and a machine with memory (``machine.bounded``).
    placement:
        The Step 1 placement (colocation groups whole).
    progress:
        Called as ``progress(round, overflowing_devices)`` after each round.

    Raises
    ------
    InfeasibleError
        When the residual bytes cannot fit, or a device still overflows and no candidate is left.
    """
    place = np.array(placement, dtype=np.int64)
    if not machine.bounded:
        return OverflowResult(place, 0, 0)
    check_residual_capacity(graph, machine)
    limits = machine.limits_bytes
    units = Units.build(graph, machine)
    count = units.ptr.size - 1
    residual = np.where(graph.kind == Kind.RESIDUAL, graph.out_bytes, 0)
    frozen = np.zeros(count, bool)
    moves: list[tuple[int, int, int]] = []
    rounds = 0
    devices = np.arange(machine.devices)
    while True:
        schedule = emulate(graph, machine, place)
        memory = track_memory(graph, machine, place, schedule)
        over = np.flatnonzero(memory.peak_bytes > limits)
        if over.size == 0:
            break
        rounds += 1
        potential, copies = _potentials(graph, place, memory, schedule, residual, units.of, count, machine.devices)
        unit_pot = np.bincount(units.of, weights=potential, minlength=count)
        unit_res = np.bincount(units.of, weights=residual, minlength=count)
        cost = _move_costs(graph, units, place)
        unit_device = np.empty(count, np.int64)
        unit_device[units.of] = place
        reserved = np.zeros(machine.devices, np.int64)
        reserved_always = np.zeros(machine.devices, np.int64)
        moved_this_round = 0
        for device in over[np.argsort(-(memory.peak_bytes[over] - limits[over]), kind="stable")]:
            device = int(device)
            overflow = int(memory.peak_bytes[device] - limits[device])
            usage_then = memory.usage_all_at(float(memory.peak_time_us[device]))
            others = devices != device
            room_then = int((limits - usage_then - reserved)[others].max(initial=-1))
            room_always = int((limits - memory.peak_bytes - reserved_always)[others].max(initial=-1))
            # Rooms only shrink during this device's turn: a unit that fits nowhere now never will.
            candidates = np.flatnonzero((unit_device == device) & ~frozen & (unit_pot > 0)
                                        & (unit_pot - copies.max(axis=1) <= room_then) & (unit_res <= room_always))
            needs = unit_pot[candidates, None] - copies[candidates]  # on each possible target
            holds = ((needs <= (limits - usage_then - reserved)[None, :])
                     & (unit_res[candidates, None] <= (limits - memory.peak_bytes - reserved_always)[None, :]))
            holds[:, device] = False
            candidates = candidates[holds.any(axis=1)]
            if candidates.size == 0:
                continue
            ratio_heap = list(zip((cost[candidates] / unit_pot[candidates]).tolist(),
                                  units.first_op[candidates].tolist(), candidates.tolist()))
            cover = candidates[unit_pot[candidates] >= overflow]
            cover_heap = list(zip(cost[cover].tolist(), units.first_op[cover].tolist(), cover.tolist()))
            heapq.heapify(ratio_heap)
            heapq.heapify(cover_heap)
            taken: set[int] = set()
            remaining = overflow
            while remaining > 0:
                for heap in (ratio_heap, cover_heap):
                    while heap and heap[0][2] in taken:
                        heapq.heappop(heap)
                if not ratio_heap and not cover_heap:
                    break
                if cover_heap and (not ratio_heap or cover_heap[0][0] < cost[ratio_heap[0][2]]):
                    chosen = heapq.heappop(cover_heap)[2]
                else:
                    chosen = heapq.heappop(ratio_heap)[2]
                taken.add(chosen)
                relief = int(unit_pot[chosen])
                need = relief - copies[chosen].astype(np.int64)  # per target device
                need_always = int(unit_res[chosen])
                if need.min() > room_then or need_always > room_always:
                    continue  # no device can hold it (fast path of the check below)
                # The target must hold the unit's residual bytes on top of its own peak, and the
                # unit's potential (less the copies it would read locally there) on top of its use
                # at the instant of this overflow.
                fits = np.flatnonzero((memory.peak_bytes + reserved_always + need_always <= limits)
                                      & (usage_then + reserved + need <= limits) & (devices != device))
                if fits.size == 0:
                    continue  # no device can hold it: not considered again
                lo, hi = units.edge_ptr[chosen], units.edge_ptr[chosen + 1]
                comm = np.bincount(place[units.edge_other[lo:hi]], weights=units.edge_comm[lo:hi],
                                   minlength=machine.devices)[fits]
                target = int(fits[np.lexsort((fits, memory.peak_bytes[fits] + reserved[fits], -comm))[0]])
                members = units.members_of(chosen)
                place[members] = target
                unit_device[chosen] = target
                frozen[chosen] = True
                reserved[target] += need[target]
                reserved_always[target] += need_always
                remaining -= relief
                room_then = int((limits - usage_then - reserved)[others].max())
                room_always = int((limits - memory.peak_bytes - reserved_always)[others].max())
                moved_this_round += members.size
                moves.append((int(members[0]), device, target))
        if progress is not None:
            progress(rounds, int(over.size))
        if moved_this_round == 0:
            worst = int(over[np.argmax(memory.peak_bytes[over] - limits[over])])
            moved_ops = int(np.diff(units.ptr)[frozen].sum())
            raise InfeasibleError(infeasible_message(
                worst, int(memory.peak_bytes[worst]), int(limits[worst]), machine,
                f" after moving {moved_ops} ops in {rounds - 1} rounds, no op left on it can move to a "
                f"device with room"))
    return OverflowResult(place, int(np.diff(units.ptr)[frozen].sum()), rounds, moves)
