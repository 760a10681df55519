"""Scheduler emulator: hand-worked schedules and invariants over random DAGs.

Machines use bandwidth 1e6 B/s and latency 1 us, so an edge of b bytes costs 1 + b us across devices.
"""

from __future__ import annotations

import heapq

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pardnn import CostGraph, InvalidPlacementError, Machine
from pardnn.emulation.emulator import UPWARD_RANK, Emulator, emulate, emulate_sweep, upward_rank
from pardnn.emulation.simulate import lower_bound_us
from tests.conftest import most_reach, random_dags, reached

SLOW_LINK = {"bandwidth": 1e6, "latency": 1.0}


def test_chain_on_one_device_runs_back_to_back():
    """a(1) -> b(2) -> c(3): starts 0, 1, 3; makespan 6."""
    g = CostGraph(["a", "b", "c"], [1, 2, 3], [5, 5, 5], [0, 1], [1, 2])
    s = emulate(g, Machine(1), np.zeros(3, int))
    assert s.start_us.tolist() == [0, 1, 3] and s.finish_us.tolist() == [1, 3, 6] and s.makespan_us == 6


def test_cross_device_edge_adds_latency_plus_transfer():
    """a(1) on 0 -> b(2) on 1 with 10 bytes: b waits 1 + 10 us for its input, starts at 12."""
    g = CostGraph(["a", "b"], [1, 2], [10, 0], [0], [1])
    s = emulate(g, Machine(2, **SLOW_LINK), np.array([0, 1]))
    assert s.start_us.tolist() == [0, 12] and s.makespan_us == 14
    assert s.edge_arrival_us.tolist() == [12]


def test_fork_runs_in_parallel_on_two_devices():
    """a(1) forks to b(4) and c(4) (0-byte edges); b on 0, c on 1: both start when their input lands."""
    g = CostGraph(["a", "b", "c"], [1, 4, 4], [0, 0, 0], [0, 0], [1, 2])
    s = emulate(g, Machine(2, **SLOW_LINK), np.array([0, 0, 1]))
    assert s.start_us.tolist() == [0, 1, 2]  # c: 1 (a) + 1 latency
    assert s.makespan_us == 6


def test_join_waits_for_the_last_input():
    """a(2) on 0 and b(5) on 1 both feed c(1) on 0 (3 bytes from b): c starts at max(2, 5 + 1 + 3) = 9."""
    g = CostGraph(["a", "b", "c"], [2, 5, 1], [0, 3, 0], [0, 1], [2, 2])
    s = emulate(g, Machine(2, **SLOW_LINK), np.array([0, 1, 0]))
    assert s.start_us.tolist() == [0, 0, 9] and s.makespan_us == 10


def test_device_queue_is_fifo_by_readiness():
    """root(1) feeds x (ready at 1) and, through y(5) on device 1, z (ready at 6 + 1 = 7).
    w(10) on device 0 is ready at 0. Device 0 runs root then w (0..1, 1..11) and only then x (ready
    at 1, before z at 7): x 11..12, z 12..13."""
    names = ["root", "w", "x", "y", "z"]
    g = CostGraph(names, [1, 10, 1, 5, 1], [0] * 5, [0, 0, 3], [2, 3, 4])
    s = emulate(g, Machine(2, **SLOW_LINK), np.array([0, 0, 0, 1, 0]))
    assert s.start_us.tolist() == [0, 1, 11, 2, 12]


def test_a_priority_replaces_the_order_of_readiness_in_the_sweep():
    """The graph of the FIFO test above, with priorities root 0, w 1, x 5, z 2 (lowest first). Device 0
    has root and w at 0: root 0..1; at 1 w and x: w 1..11; by 11 x and z (ready at 7) wait: z before
    x although x was ready first: z 11..12, x 12..13."""
    names = ["root", "w", "x", "y", "z"]
    g = CostGraph(names, [1, 10, 1, 5, 1], [0] * 5, [0, 0, 3], [2, 3, 4])
    machine = Machine(2, **SLOW_LINK)
    start = emulate_sweep(g.n, 2, g.succ_ptr, g.succ, machine.edge_comm_us(g.succ_bytes), g.pred_ptr,
                          np.array([0, 0, 0, 1, 0]), g.comp_us, g.topo_rank, np.array([0, 1, 5, 0, 2.0]),
                          np.zeros(0, np.int64), np.zeros(0))[0]
    assert start.tolist() == [0, 1, 12, 2, 11]
    with pytest.raises(ValueError, match="order has 2 positions for the 5 ops"):
        Emulator(g, Machine(2), order=np.zeros(2, np.int64))


def test_fifo_ties_break_by_topological_rank():
    g = CostGraph(["b", "a"], [1, 1], [0, 0], [], [])
    s = emulate(g, Machine(1), np.zeros(2, int))
    assert s.start_us.tolist() == [0, 1]


def test_zero_cost_ops():
    g = CostGraph(["a", "b", "c"], [0, 0, 0], [0, 0, 0], [0, 1], [1, 2])
    assert emulate(g, Machine(2), np.array([0, 0, 0])).makespan_us == 0


def test_bad_placement_is_rejected():
    g = CostGraph(["a", "b"], [1, 1], [0, 0], [], [])
    with pytest.raises(InvalidPlacementError, match=r"op 'b' is placed on device 2, outside 0..1"):
        emulate(g, Machine(2), np.array([0, 2]))
    with pytest.raises(InvalidPlacementError, match="1 entries for the 2 ops"):
        emulate(g, Machine(2), np.array([0]))


@given(random_dags())
def test_single_device_makespan_is_total_work(g):
    s = emulate(g, Machine(1), np.zeros(g.n, int))
    assert s.makespan_us == pytest.approx(g.total_work_us)


@given(random_dags(), st.integers(1, 5), st.integers(0, 2**31))
def test_schedule_is_feasible_and_above_the_lower_bound(g, k, seed):
    place = np.random.default_rng(seed).integers(0, k, g.n)
    machine = Machine(k, bandwidth=1e8, latency=2.0)
    s = emulate(g, machine, place)
    bound, _ = lower_bound_us(g, k)
    assert s.makespan_us >= bound - 1e-9
    # Every op starts after all its inputs arrive; arrivals respect the link cost.
    comm = np.where(place[g.edge_src] != place[g.edge_dst], machine.edge_comm_us(g.edge_bytes), 0.0)
    assert np.allclose(s.edge_arrival_us, s.finish_us[g.edge_src] + comm)
    assert np.all(s.start_us[g.edge_dst] >= s.edge_arrival_us - 1e-9)
    # A device runs one op at a time.
    for d in range(k):
        ops = np.flatnonzero(place == d)
        order = ops[np.lexsort((s.finish_us[ops], s.start_us[ops]))]
        assert np.all(s.start_us[order][1:] >= s.finish_us[order][:-1] - 1e-9)


@given(random_dags(), st.integers(1, 4))
def test_emulation_is_deterministic(g, k):
    place = np.arange(g.n) % k
    a, b = emulate(g, Machine(k), place), emulate(g, Machine(k), place)
    assert np.array_equal(a.start_us, b.start_us) and a.makespan_us == b.makespan_us


@given(random_dags(), st.integers(1, 4), st.integers(0, 2**31))
def test_prepared_emulator_matches_emulate_for_every_placement(g, k, seed):
    # One Emulator serves many placements (the refinement's trials): each schedule equals a fresh emulate().
    machine = Machine(k, **SLOW_LINK)
    run = Emulator(g, machine)
    rng = np.random.default_rng(seed)
    for _ in range(3):
        place = rng.integers(0, k, g.n).astype(np.int64)
        a, b = run(place), emulate(g, machine, place)
        assert np.array_equal(a.start_us, b.start_us) and np.array_equal(a.finish_us, b.finish_us)
        assert np.array_equal(a.edge_arrival_us, b.edge_arrival_us) and a.makespan_us == b.makespan_us
        assert not a.start_us.flags.writeable


def reference_schedule(g: CostGraph, machine: Machine, place: np.ndarray, priority: np.ndarray | None):
    """The module docstring's executor, written plainly with heapq: events at one instant (a finish, or
    an op's inputs all arrived) all applied, then every idle device, in index order, starts the first
    op of its queue (by readiness, or ``priority``; ties by topological rank)."""
    comm = machine.edge_comm_us(g.edge_bytes)
    waiting = np.diff(g.pred_ptr).tolist()
    ready, start, finish = [0.0] * g.n, [0.0] * g.n, [0.0] * g.n
    arrival, sequence = [0.0] * g.m, [0] * g.n
    events = [(0.0, v) for v in range(g.n) if waiting[v] == 0]  # an op ready at that time
    heapq.heapify(events)
    running: list[tuple[float, int]] = []  # (finish, op)
    queues: list[list[tuple[float, int, int]]] = [[] for _ in range(machine.devices)]
    busy = [False] * machine.devices
    started, crowded, woken = 0, False, False
    while events or running:
        now = min([t for t, _ in events[:1]] + [t for t, _ in running[:1]])
        freed = set()
        while running and running[0][0] <= now:
            _, v = heapq.heappop(running)
            busy[place[v]] = False
            freed.add(place[v])
            for e in np.flatnonzero(g.edge_src == v).tolist():
                w = int(g.edge_dst[e])
                arrival[e] = finish[v] + (0.0 if place[w] == place[v] else comm[e])
                ready[w] = max(ready[w], arrival[e])
                waiting[w] -= 1
                if waiting[w] == 0:
                    heapq.heappush(events, (ready[w], w))
        while events and events[0][0] <= now:
            _, v = heapq.heappop(events)
            key = ready[v] if priority is None else priority[v]
            heapq.heappush(queues[place[v]], (key, int(g.topo_rank[v]), v))
        starting = 0
        for d in range(machine.devices):
            if not busy[d] and queues[d]:
                _, _, v = heapq.heappop(queues[d])
                busy[d], start[v], finish[v], sequence[v] = True, now, now + g.comp_us[v], started
                started, starting = started + 1, starting + 1
                woken |= started > 1 and d not in freed
                heapq.heappush(running, (finish[v], v))
        crowded |= starting > 1
    return start, finish, arrival, sequence, crowded or woken


@most_reach
@given(random_dags(max_ops=25), st.integers(2, 5), st.booleans(), st.integers(0, 2**31))
def test_the_sweep_is_the_executor_written_plainly(g, k, ranked, seed):
    """Start, finish, arrival and start sequence equal, bit for bit, those of a plain heapq executor
    (above), in order of readiness and in upward-rank order. Reached: at some instant two devices or
    more start an op, or an idle device starts one that an arriving input made ready (the sweep starts
    only the devices listed in that instant, in device order)."""
    place = np.random.default_rng(seed).integers(0, k, g.n)
    machine = Machine(k, **SLOW_LINK)
    s = emulate(g, machine, place, order=UPWARD_RANK if ranked else None)
    priority = -upward_rank(g, machine, place) if ranked else None
    start, finish, arrival, sequence, listed = reference_schedule(g, machine, place, priority)
    assert s.start_us.tolist() == start and s.finish_us.tolist() == finish
    assert s.edge_arrival_us.tolist() == arrival and s.sequence.tolist() == sequence
    assert s.makespan_us == max(finish, default=0.0)
    reached(listed, "devices started at one instant, or an idle device woken")


def test_a_release_time_holds_an_op_and_frees_its_device_meanwhile() -> None:
    """a (1 µs) feeds b (2 µs) and c (3 µs) on one device; b is released at 10 µs. FIFO would run b at 1;
    held, c runs 1-4 and b 10-12."""
    g = CostGraph(["a", "b", "c"], [1, 2, 3], [0] * 3, [0, 0], [1, 2])
    free = emulate(g, Machine(1), np.zeros(3, np.int64))
    assert free.start_us.tolist() == [0, 1, 3] and free.makespan_us == 6
    held = emulate(g, Machine(1), np.zeros(3, np.int64), release=np.array([0, 10.0, 0]))
    assert held.start_us.tolist() == [0, 10, 1] and held.makespan_us == 12
    source_held = emulate(g, Machine(1), np.zeros(3, np.int64), release=np.array([5.0, 0, 0]))
    assert source_held.start_us.tolist() == [5, 6, 8]  # an op without inputs waits for its release too
    with pytest.raises(ValueError, match="release: expected 3 finite times >= 0"):
        emulate(g, Machine(1), np.zeros(3, np.int64), release=np.array([0, -1.0, 0]))


def test_a_frozen_placement_reuses_the_sweeps_compiled_for_a_writable_one() -> None:
    """numba compiles a kernel once per argument type and a read-only array is a type of its own: the emulator
    hands its kernels the placement in one form, so a caller's frozen placement (and the compiled refinement's
    writable ones) share one compilation instead of compiling the sweeps twice."""
    from pardnn.emulation.emulator import upward_rank_sweep

    g = CostGraph(["a", "b", "c", "d"], [1, 2, 3, 1], [8, 8, 8, 8], [0, 0, 1, 2], [1, 2, 3, 3])
    writable = np.array([0, 0, 1, 1])
    frozen = writable.copy()
    frozen.flags.writeable = False
    runs = [Emulator(g, Machine(2), order) for order in (None, UPWARD_RANK)]
    expected = [run(writable).makespan_us for run in runs], upward_rank(g, Machine(2), writable).tolist()
    compiled = len(emulate_sweep.signatures), len(upward_rank_sweep.signatures)
    assert ([run(frozen).makespan_us for run in runs], upward_rank(g, Machine(2), frozen).tolist()) == expected
    assert (len(emulate_sweep.signatures), len(upward_rank_sweep.signatures)) == compiled
    assert not frozen.flags.writeable  # the caller's array is left as it was
