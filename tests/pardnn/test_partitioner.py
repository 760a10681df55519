"""partition(): the properties every ParDNN placement has, on random DAGs and synthetic DNN graphs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pardnn import CostGraph, Machine, partition
from pardnn.costs.synthetic import dnn_graph
from pardnn.emulation.checks import check_placement, colocation_violations
from pardnn.emulation.emulator import emulate
from pardnn.steps.colocation import groups_by_vote, keep_groups_whole, resolve_groups
from tests.conftest import random_dags


@given(random_dags(max_ops=40), st.integers(1, 6))
def test_every_op_placed_and_colocation_kept(g, k):
    result = partition(g, Machine(k, bandwidth=1e8, latency=5.0))
    check_placement(g, Machine(k), result.placement, colocation=True)
    assert result.report.evaluation.colocation_violations == 0
    assert result.placement.dtype == np.int64 and not result.placement.flags.writeable


@given(random_dags(max_ops=40))
def test_one_device_puts_everything_on_device_0(g):
    assert not partition(g, Machine(1)).placement.any()


@given(random_dags(max_ops=40), st.integers(2, 6))
def test_makespan_is_at_most_total_work_plus_the_communication_added(g, k):
    """The bound: the emulator is work-conserving (a device never idles while an op it holds is
    ready), so tracing the op that finishes last back through the device-busy stretches and the
    transfers it waited on shows makespan <= total work + comm of the cut edges on that chain
    <= total work + comm of all cut edges. The single-device makespan is the total work."""
    result = partition(g, Machine(k, bandwidth=1e8, latency=5.0))
    e = result.report.evaluation
    assert e.makespan_us <= g.total_work_us + e.comm_us + 1e-6


@given(random_dags(max_ops=40), st.integers(1, 6))
def test_placement_is_deterministic(g, k):
    a = partition(g, Machine(k)).placement
    b = partition(g, Machine(k)).placement
    assert a.tobytes() == b.tobytes()


def test_groups_follow_their_topologically_first_member():
    """var -> read -> apply, all in group 'v'; var sits on 1, the others elsewhere: all go to 1."""
    g = CostGraph(["read", "var", "apply"], [1, 0, 1], [4, 4, 0], [1, 0], [0, 2], colocation=["v", "v", "v"])
    place, moved = keep_groups_whole(g, np.array([0, 1, 2]))
    assert place.tolist() == [1, 1, 1] and moved == 2


def variable_step() -> tuple[CostGraph, np.ndarray]:
    r"""A variable's group {var, read, apply} and two outside ops, as LFLAM might split them::

        var(1) -> read(0) -> mm(0) -> grad(0) -> apply(1)     (device in brackets)
          \_______________________________________^

    Each edge carries 1 MB; ``read`` and ``apply`` compute 1 us, ``mm`` and ``grad`` 5 us.
    """
    g = CostGraph(["var", "read", "mm", "grad", "apply"], [0, 1, 5, 5, 1], [10**6] * 4 + [0],
                  [0, 1, 2, 3, 0], [1, 2, 3, 4, 4], colocation=["v", "v", None, None, "v"])
    return g, np.array([1, 0, 0, 0, 1])


def test_groups_by_vote_by_hand():
    """Group v on device 0: read's 1 us, plus the edges read -> mm and grad -> apply, whose outside
    ends sit on 0 (var -> read and var -> apply are inside the group); on device 1: apply's 1 us
    (var computes nothing). Device 0 wins, so var and apply move."""
    g, raw = variable_step()
    machine = Machine(2, bandwidth=1e9, latency=5.0)
    weight = machine.edge_comm_us(g.edge_bytes)  # 1005 us per edge
    place, moved = groups_by_vote(g, raw, weight, 2)
    assert place.tolist() == [0, 0, 0, 0, 0] and moved == 2
    first, moved_first = keep_groups_whole(g, raw)  # var is first: the group goes to device 1
    assert first.tolist() == [1, 1, 0, 0, 1] and moved_first == 1
    chosen = resolve_groups(g, machine, raw, weight)
    # First member: read -> mm and grad -> apply cross devices (2 × 1005 us); vote: nothing crosses.
    assert chosen.rule == "vote" and chosen.placement.tolist() == [0, 0, 0, 0, 0]
    assert chosen.schedule.makespan_us == 12.0
    assert emulate(g, machine, first).makespan_us == 12.0 + 2 * 1005.0


def test_under_a_memory_limit_fewer_bytes_over_it_come_before_speed():
    """The vote puts all five ops on device 0 (peak 3 MB: var, read and mm's outputs live at once);
    the first-member rule peaks at 2 MB on each device. With 2.5 MB per device only the slower one
    fits, and it is taken; without a limit the faster one is."""
    g, raw = variable_step()
    bounded = Machine(2, memory=2_500_000, bandwidth=1e9, latency=5.0, reserve=0.0)
    chosen = resolve_groups(g, bounded, raw, bounded.edge_comm_us(g.edge_bytes))
    assert chosen.rule == "first member" and chosen.placement.tolist() == [1, 1, 0, 0, 1]
    assert chosen.memory is not None and chosen.memory.peak_bytes.tolist() == [2_000_000, 2_000_000]
    unbounded = Machine(2, bandwidth=1e9, latency=5.0)
    assert resolve_groups(g, unbounded, raw, unbounded.edge_comm_us(g.edge_bytes)).rule == "vote"


@given(random_dags(max_ops=40), st.integers(2, 5))
def test_resolving_groups_is_never_slower_than_following_the_first_member(g, k):
    machine = Machine(k, bandwidth=1e8, latency=5.0)
    raw = np.arange(g.n, dtype=np.int64) % k
    chosen = resolve_groups(g, machine, raw, machine.edge_comm_us(g.edge_bytes))
    assert colocation_violations(g, chosen.placement) == []
    first, _ = keep_groups_whole(g, raw)
    assert chosen.schedule.makespan_us <= emulate(g, machine, first).makespan_us
    assert chosen.schedule.makespan_us == emulate(g, machine, chosen.placement).makespan_us


@pytest.mark.parametrize("k", [2, 4, 8])
def test_synthetic_dnn_graph(k):
    g = dnn_graph(5_000, seed=3)
    result = partition(g, Machine(k))
    assert colocation_violations(g, result.placement) == []
    assert sorted(set(result.placement.tolist())) == list(range(k))  # every device used
    report = result.report
    assert report.evaluation.makespan_us >= report.evaluation.lower_bound_us
    assert set(report.stage_seconds) == {"slicing", "mapping", "guard", "refine", "order", "evaluation"}
    assert report.details["mapped_by_locality"] + report.details["mapped_by_balance"] == \
        report.details["secondary_clusters"]
