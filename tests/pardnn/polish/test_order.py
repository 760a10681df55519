"""pardnn.polish.order: run orders per device, their check, their emulation, and the ordering stage."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from pardnn import CostGraph, Machine, partition
from pardnn.emulation.checks import chain_next, check_order
from pardnn.emulation.emulated import emulate_and_track
from pardnn.emulation.emulator import UPWARD_RANK, Emulator, emulate
from pardnn.emulation.memory import track_memory
from pardnn.errors import InvalidPlacementError
from pardnn.polish.order import order_placement, positions
from pardnn.registry import PLACERS
from tests.conftest import most_reach, random_dags, reached
from tests.helpers.graphs import CHEAP


def fork() -> CostGraph:
    """a -> {b, c} on device 0, c -> d (1000 B) on device 1; a 1 us, b and c 10 us, d 100 us."""
    return CostGraph(["a", "b", "c", "d"], [1.0, 10.0, 10.0, 100.0], [0, 0, 1000, 0], [0, 0, 2], [1, 2, 3])


FAST = {"bandwidth": 1e9, "latency": 0.0}  # 1000 B take 1 us


def test_an_order_is_emulated_as_a_chain_by_hand():
    """Readiness order ties b and c at 1 and runs b first (topological rank): c 11-21, d 22-122. With
    c at position 1 and b at 2 on device 0: a 0-1, c 1-11, b 11-21; d gets c's copy at 12: 12-112."""
    g, machine, placement = fork(), Machine(2, **FAST), np.array([0, 0, 0, 1])
    assert emulate(g, machine, placement).makespan_us == pytest.approx(122.0)
    s = emulate(g, machine, placement, order=np.array([0, 2, 1, 0]))
    assert s.start_us.tolist() == [0, 11, 1, 12] and s.makespan_us == pytest.approx(112.0)
    assert s.sequence.tolist() == [0, 2, 1, 3]


def test_a_chain_waits_for_the_op_before_even_when_another_is_ready():
    """A control dependency waits: with b before c, c waits for b although c's device is free of work
    it could do; the order b, c is then strict (not a priority)."""
    g, machine, placement = fork(), Machine(2, **FAST), np.array([0, 0, 0, 1])
    s = emulate(g, machine, placement, order=np.array([0, 1, 2, 0]))
    assert s.start_us.tolist() == [0, 1, 11, 22]


def test_the_ranked_emulator_gives_upward_rank_order():
    g, machine, placement = fork(), Machine(2, **FAST), np.array([0, 0, 0, 1])
    ranked = Emulator(g, machine, order=UPWARD_RANK)(placement)
    assert ranked.makespan_us == pytest.approx(112.0)
    assert positions(placement, ranked).tolist() == [0, 2, 1, 0]
    assert chain_next(placement, positions(placement, ranked)).tolist() == [2, -1, 1, -1]
    with pytest.raises(ValueError, match=r"order='fifo': expected None \(order of readiness\), 'upward_rank'"):
        Emulator(g, machine, order="fifo")


def with_fork(g: CostGraph, scale: float = 50.0) -> CostGraph:
    """``g`` and, apart from it, :func:`fork` scaled by ``scale`` with a, b, c in one group: in order of
    readiness b runs before c (both ready at once, b first in topological order), which delays d's
    input; in upward-rank order c runs first. So the ordering stage has a choice on most graphs."""
    n = g.n
    labels = np.array((*g.group_names, None), dtype=object)[g.colocation].tolist()
    return CostGraph([*g.names, "fork/a", "fork/b", "fork/c", "fork/d"],
                     [*g.comp_us, 1.0, 10 * scale, 10 * scale, 100 * scale], [*g.out_bytes, 0, 0, 1000, 0],
                     [*g.edge_src, n, n, n + 2], [*g.edge_dst, n + 1, n + 2, n + 3], [*g.edge_bytes, 0, 0, 1000],
                     kind=[*g.kind.tolist(), 0, 0, 0, 0], colocation=[*labels, "fork", "fork", "fork", None])


@most_reach
@given(random_dags(max_ops=40, min_ops=15).map(with_fork), st.integers(2, 4), st.sampled_from([1e6, 1e9]),
       st.integers(0, 2**31))
def test_replaying_a_list_schedule_as_chains_reproduces_it(g, k, bandwidth, seed):
    """The positions of the ranked schedule, enforced as chains, give the very same schedule: what
    pardnn.tf.apply enforces is what the report emulated. The fork's a, b, c share device 0 and d is
    on device 1, so the ranked order differs from readiness on (almost) every graph."""
    machine = Machine(k, bandwidth=bandwidth, latency=1.0)
    placement = np.random.default_rng(seed).integers(0, k, g.n)
    placement[-4:] = [0, 0, 0, 1]
    ranked = Emulator(g, machine, order=UPWARD_RANK)(placement)
    reached(ranked.sequence.tolist() != emulate(g, machine, placement).sequence.tolist(),
            "the ranked schedule runs ops in another order than readiness")
    replay = emulate(g, machine, placement, order=positions(placement, ranked))
    assert replay.start_us.tolist() == ranked.start_us.tolist()
    assert replay.finish_us.tolist() == ranked.finish_us.tolist()
    assert replay.makespan_us == ranked.makespan_us


def test_check_order_names_what_is_wrong():
    g, placement = fork(), np.array([0, 0, 0, 1])
    assert check_order(g, placement, [5, 9, 7, 3]).tolist() == [0, 2, 1, 0]
    with pytest.raises(InvalidPlacementError, match="has 2 positions for the 4 ops"):
        check_order(g, placement, [0, 1])
    with pytest.raises(InvalidPlacementError, match="'d' has position -1"):
        check_order(g, placement, [0, 1, 2, -1])
    with pytest.raises(InvalidPlacementError, match="ops 'b' and 'c' are both at position 1 on device 0"):
        check_order(g, placement, [0, 1, 1, 0])
    with pytest.raises(InvalidPlacementError, match="'b' \\(position 0\\) runs before its input 'a'"):
        check_order(g, placement, [1, 0, 2, 0])
    with pytest.raises(InvalidPlacementError, match="must be integers"):
        check_order(g, placement, [0.0, 1.0, 2.0, 0.0])


def test_check_order_finds_a_cycle_through_two_devices():
    """b -> c and e -> a across devices; device 0 runs a then b, device 1 c then e: a waits for e,
    e for c, c for b, b for a."""
    g = CostGraph(["a", "b", "c", "e"], [1.0] * 4, [8] * 4, [1, 3], [2, 0])
    with pytest.raises(InvalidPlacementError, match=r"form a cycle \(4 ops on or after it"):
        check_order(g, np.array([0, 0, 1, 1]), [0, 1, 0, 1])
    assert check_order(g, np.array([0, 0, 1, 1]), [1, 0, 0, 1]).tolist() == [1, 0, 0, 1]


def test_partition_keeps_an_order_only_when_it_is_shorter():
    """The fork on 2 devices: ParDNN's best unordered answer is 111 us (b on its own device); the order
    cannot beat it there, so none is kept; with b pinned next to a by a group it can."""
    g, machine = fork(), Machine(2, **FAST)
    result = partition(g, machine)
    assert result.report.evaluation.makespan_us == pytest.approx(
        emulate(g, machine, result.placement, order=result.order).makespan_us)
    grouped = CostGraph(["a", "b", "c", "d"], [1.0, 10.0, 10.0, 100.0], [0, 0, 1000, 0], [0, 0, 2], [1, 2, 3],
                        colocation=["g", "g", "g", None])
    plain = partition(grouped, machine, ordered=False)
    ordered = partition(grouped, machine)
    assert plain.order is None and plain.report.evaluation.makespan_us == pytest.approx(121.0)
    assert ordered.order is not None and ordered.report.details["order"].kept
    assert ordered.report.evaluation.makespan_us == pytest.approx(112.0)
    assert ordered.placement.tolist() in ([0, 0, 0, 1], [1, 1, 1, 0]) and ordered.order.tolist() == [0, 2, 1, 0]


@most_reach
@given(random_dags(max_ops=30, min_ops=10).map(with_fork), st.integers(2, 4), st.sampled_from(["150GB/s", "1GB/s"]),
       st.floats(0.7, 1.5))
def test_the_ordering_stage_never_slows_and_keeps_memory(g, k, bandwidth, share):
    """Limit: ``share`` × the peak of ParDNN's own unlimited answer, raised to the smallest peak of a cheap
    placement when below it, so a placement is known to fit and the guard must find one."""
    free = Machine(k, bandwidth=bandwidth)
    plain = partition(g, free, ordered=False, memory_heuristic=None)
    peak = int(max(track_memory(g, free, plain.placement, emulate(g, free, plain.placement)).peak_bytes.max(), 1))
    witness = min(max(PLACERS[name](g, free).report.evaluation.peak_memory_bytes) for name in CHEAP)
    event(f"the limit is raised to a cheap placement's peak: {peak * share < witness}")
    machine = Machine(k, bandwidth=bandwidth, memory=max(1, int(peak * share), witness), reserve=0.0)
    unordered = partition(g, machine, ordered=False)  # never InfeasibleError: a cheap placement fits
    ranked = Emulator(g, machine, order=UPWARD_RANK)(unordered.placement)
    reached(ranked.sequence.tolist() != emulate(g, machine, unordered.placement).sequence.tolist(),
            "the upward-rank order runs the unordered answer's ops in another order")
    ordered = partition(g, machine)
    event(f"an order is kept: {ordered.order is not None}")
    assert ordered.report.evaluation.makespan_us <= unordered.report.evaluation.makespan_us
    assert ordered.report.evaluation.memory_fits
    replay = emulate(g, machine, ordered.placement, order=ordered.order)
    assert replay.makespan_us == pytest.approx(ordered.report.evaluation.makespan_us)
    if ordered.order is not None:
        memory = track_memory(g, machine, ordered.placement, replay)
        assert (memory.peak_bytes <= machine.limits_bytes).all()
    again = partition(g, machine)
    assert again.placement.tobytes() == ordered.placement.tobytes()
    assert (again.order is None) == (ordered.order is None)
    assert again.order is None or again.order.tobytes() == ordered.order.tobytes()


def test_order_placement_reports_why_it_kept_none():
    g, machine = fork(), Machine(1)
    chosen, details = order_placement(g, machine, emulate_and_track(g, machine, np.zeros(4, np.int64)), seconds=0.1)
    assert chosen is None and details.kept is False
