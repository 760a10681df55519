"""partition(): the properties every ParDNN placement has, on random DAGs and synthetic DNN graphs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pardnn import CostGraph, Machine
from pardnn.partition import keep_groups_whole, partition
from pardnn.simulate import check_placement, colocation_violations
from pardnn.synthetic import dnn_graph
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


@pytest.mark.parametrize("k", [2, 4, 8])
def test_synthetic_dnn_graph(k):
    g = dnn_graph(5_000, seed=3)
    result = partition(g, Machine(k))
    assert colocation_violations(g, result.placement) == []
    assert sorted(set(result.placement.tolist())) == list(range(k))  # every device used
    report = result.report
    assert report.evaluation.makespan_us >= report.evaluation.lower_bound_us
    assert set(report.stage_seconds) == {"slicing", "mapping", "evaluation"}
    assert report.details["mapped_by_locality"] + report.details["mapped_by_balance"] == \
        report.details["secondary_clusters"]
