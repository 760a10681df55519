"""The refinement stage (pardnn/polish/refine.py): local search on the emulated schedule's critical chain."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pardnn import CostGraph, Machine, partition
from pardnn.emulation.checks import colocation_violations
from pardnn.emulation.emulated import Emulated
from pardnn.emulation.emulator import emulate
from pardnn.emulation.memory import track_memory
from pardnn.partitioner import PAPER
from pardnn.polish.refine import DEVICE, TRANSFER, critical_chain, evaluations_for, refine
from tests.conftest import most_reach, random_dags, reached

# 1 MB/s and 0 latency: an edge of B bytes takes B us when cut.
SLOW = dict(bandwidth="1MB/s", latency="0us")


def chain() -> CostGraph:
    """a -> b -> c, 10 us each, 1000-byte outputs (1000 us per cut edge at 1 MB/s)."""
    return CostGraph(["a", "b", "c"], [10.0] * 3, [1000] * 3, [0, 1], [1, 2], name="chain")


def test_critical_chain_names_the_transfers_by_hand():
    g, machine = chain(), Machine(2, **SLOW)
    placement = np.array([0, 1, 0])
    schedule = emulate(g, machine, placement)
    # a 0-10 on device 0; b waits for its input until 1010, runs to 1020 on device 1; c starts at 2020.
    assert schedule.makespan_us == pytest.approx(2030.0)
    assert critical_chain(g, placement, schedule) == [(TRANSFER, 1, 2, pytest.approx(1000.0)),
                                                      (TRANSFER, 0, 1, pytest.approx(1000.0))]


def test_critical_chain_names_a_busy_device():
    # x and y (100 us each) both on device 0, no edges: y waits for x.
    g = CostGraph(["x", "y"], [100.0, 100.0], [0, 0], [], [], name="two")
    placement = np.array([0, 0])
    links = critical_chain(g, placement, emulate(g, Machine(2), placement))
    assert links == [(DEVICE, 0, 1, pytest.approx(100.0))]


def test_refine_pulls_the_transfers_onto_one_device():
    g, machine = chain(), Machine(2, **SLOW)
    placement = np.array([0, 1, 0])
    schedule = emulate(g, machine, placement)
    out = refine(g, machine, Emulated(placement, schedule, None), seconds=1.0)
    # First a joins b (10 + 10 + 1000 + 10 = 1030 us), then c joins them: one device, 30 us.
    assert len(set(out.placement.tolist())) == 1
    assert out.schedule.makespan_us == pytest.approx(30.0)
    assert out.details().moves == 2 and out.makespan_before_us == pytest.approx(2030.0)


def test_refine_spreads_a_busy_device():
    g = CostGraph(["x", "y"], [100.0, 100.0], [0, 0], [], [], name="two")
    machine = Machine(2)
    out = refine(g, machine, Emulated(np.array([0, 0]), emulate(g, machine, np.array([0, 0])), None), seconds=1.0)
    assert sorted(out.placement.tolist()) == [0, 1] and out.schedule.makespan_us == pytest.approx(100.0)


def test_refine_respects_memory_limits():
    # Moving y to device 1 would halve the step, but y's 600 B output does not fit there (500 B):
    # x (no output) moves instead, and y stays on device 0.
    g = CostGraph(["x", "y"], [100.0, 100.0], [0, 600], [], [], name="two")
    machine = Machine(2, memory=[2000, 500], reserve=0.0)
    placement = np.array([0, 0])
    schedule = emulate(g, machine, placement)
    out = refine(g, machine, Emulated(placement, schedule, track_memory(g, machine, placement, schedule)), seconds=1.0)
    assert out.placement.tolist() == [1, 0] and out.schedule.makespan_us == pytest.approx(100.0)
    assert (out.memory.peak_bytes <= machine.limits_bytes).all()


def test_budget_is_deterministic_and_zero_turns_it_off():
    g = chain()
    assert evaluations_for(g, 0.0) == 0
    assert evaluations_for(g, 0.2) == evaluations_for(g, 0.2) >= 1
    placement = np.array([0, 1, 0])
    machine = Machine(2, **SLOW)
    out = refine(g, machine, Emulated(placement, emulate(g, machine, placement), None), seconds=0.0)
    assert out.placement.tolist() == [0, 1, 0] and out.evaluations == 0


@given(random_dags(max_ops=25), st.integers(2, 4), st.sampled_from(["150GB/s", "1GB/s"]))
def test_refine_never_slows_never_splits_a_group_and_is_deterministic(g, k, bandwidth):
    machine = Machine(k, bandwidth=bandwidth)
    placement = partition(g, machine, **PAPER).placement
    schedule = emulate(g, machine, placement)
    first = refine(g, machine, Emulated(placement, schedule, None), seconds=0.05)
    second = refine(g, machine, Emulated(placement, schedule, None), seconds=0.05)
    assert first.schedule.makespan_us <= schedule.makespan_us
    assert first.evaluations <= evaluations_for(g, 0.05)
    assert first.placement.tobytes() == second.placement.tobytes()
    assert colocation_violations(g, first.placement) == []
    assert emulate(g, machine, first.placement).makespan_us == pytest.approx(first.schedule.makespan_us)


@most_reach
@given(random_dags(max_ops=25), st.integers(2, 4), st.sampled_from(["150GB/s", "1GB/s"]), st.floats(0.5, 1.0),
       st.sampled_from([None, "upward_rank"]))
def test_the_compiled_moves_make_the_same_search_as_the_python_ones(g, k, bandwidth, tight, order):
    """The chain's, the sweep's and the cluster phase's moves tried in compiled code give the same moves,
    evaluations and answer as tried one by one in Python, with memory limits that bind and in both emulated
    run orders."""
    from pardnn.polish import refine as module

    limit = max(1, int(track_memory(g, Machine(1), np.zeros(g.n, np.int64),
                                    emulate(g, Machine(1), np.zeros(g.n, np.int64))).peak_bytes.max() * tight))
    machine = Machine(k, bandwidth=bandwidth, memory=limit, reserve=0.0)
    try:
        placement = partition(g, machine, **PAPER).placement
    except Exception:  # no placement fits: nothing to refine
        return
    start = Emulated(placement, emulate(g, machine, placement, order=order), None)
    runs, sweeps, chains, clusters = [], [], [], []
    compiled_sweep = module.first_shorter

    def counted(*args):
        (chains if args[-1].size else clusters if args[1][0] > 0 else sweeps).append(args[4])
        return compiled_sweep(*args)

    budget = evaluations_for(g, 0.05)
    for compiled in (True, False):
        search = module._Search(g, machine, start, budget, order)
        search.compiled = compiled and search.compiled
        module.first_shorter = counted
        try:
            search.run()
        finally:
            module.first_shorter = compiled_sweep
        runs.append((search.out.placement.tolist(), search.out.evaluations, search.out.restarts, search.out.moves))
    reached(bool(sweeps) and bool(chains) and bool(clusters), "the compiled chain moves, sweep and cluster sweep ran")
    assert runs[0] == runs[1]


def test_a_linked_pair_moves_together_when_no_single_move_helps():
    """a -> b (1000 B) on device 1, b -> c (1000 B) and d -> c (2000 B) on device 0; 10 us each, 1 MB/s.
    As placed: a 0-10, b 10-20, c waits for b's copy until 1020: 1030 us. Every single move is no
    better: c to device 1 waits 2000 us for d's copy (2020), b to device 0 waits 1000 us for a's
    (1030, not shorter), a to device 0 cuts a -> b (2030), d to device 1 leaves b -> c cut (1040).
    Moving the linked pair {a, b} to device 0 cuts nothing: all four in a row, 40 us."""
    g = CostGraph(["a", "b", "c", "d"], [10.0] * 4, [1000, 1000, 0, 2000], [0, 1, 3], [1, 2, 2], name="pair")
    machine = Machine(2, **SLOW)
    placement = np.array([1, 1, 0, 0])
    schedule = emulate(g, machine, placement)
    assert schedule.makespan_us == pytest.approx(1030.0)
    for op in range(4):
        single = placement.copy()
        single[op] = 1 - single[op]
        assert emulate(g, machine, single).makespan_us >= 1030.0 - 1e-9
    out = refine(g, machine, Emulated(placement, schedule, None), seconds=1.0)
    assert out.placement.tolist() == [0, 0, 0, 0] and out.schedule.makespan_us == pytest.approx(40.0)
    assert [kind for kind, *_ in out.moves] == ["pair"]


@given(random_dags(max_ops=20), st.integers(2, 3), st.floats(0.6, 1.0))
def test_the_deep_search_keeps_every_device_within_its_limit(g, k, share):
    """Kicks and pair moves under memory limits: the answer fits wherever the start fitted."""
    machine = Machine(k, bandwidth="1GB/s")
    placement = partition(g, machine, **PAPER).placement
    peaks = track_memory(g, machine, placement, emulate(g, machine, placement)).peak_bytes
    limited = Machine(k, bandwidth="1GB/s", memory=max(1, int(peaks.max() / share)), reserve=0.0)
    schedule = emulate(g, limited, placement)
    memory = track_memory(g, limited, placement, schedule)
    out = refine(g, limited, Emulated(placement, schedule, memory), seconds=0.5)
    assert out.schedule.makespan_us <= schedule.makespan_us
    assert (out.memory.peak_bytes <= limited.limits_bytes).all()

