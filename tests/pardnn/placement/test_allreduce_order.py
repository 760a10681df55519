"""A run order judged with the gradient allreduce in the step (pardnn.placement.allreduce_order), on a
graph small enough to emulate by hand."""

from __future__ import annotations

import numpy as np

from pardnn import CostGraph, Kind, Machine
from pardnn.emulation.allreduce import Cluster
from pardnn.emulation.simulate import evaluate_step
from pardnn.placement.allreduce_order import judge_order
from pardnn.placement.result import PartitionReport, Result

MB = 10**6
TWO_NODES = Cluster(nodes=2, network_Bps=1e9, network_latency_us=0, cycle_us=0)  # 1 MB averaged: 1,000 µs
# x feeds a weight gradient wg (1 MB, averaged, then its update upd) and the rest of the backward pass:
# dx, then y (100 µs, 3 MB, freed once y2 has read it); z reads wg and y2 (wg lives until z).
NAMES = ["x", "wg", "upd", "dx", "y", "y2", "z"]
GRAPH = CostGraph(NAMES, [10.0, 10.0, 1.0, 10.0, 100.0, 10.0, 1.0], [8, MB, 0, 8, 3 * MB, 8, 8],
                  src=[0, 1, 0, 3, 4, 5, 1], dst=[1, 2, 3, 4, 5, 6, 6], edge_bytes=[8, MB, 8, 8, 3 * MB, 8, MB],
                  kind=[Kind.NORMAL, Kind.NORMAL, Kind.REFERENCE, Kind.NORMAL, Kind.NORMAL, Kind.NORMAL, Kind.NORMAL])
# The critical path first (the ordering stage's upward rank): wg after y2, so its allreduce starts late.
ORDER = np.array([0, 4, 5, 1, 2, 3, 6], np.int64)  # positions of x, wg, upd, dx, y, y2, z


def _result(machine: Machine, order: np.ndarray | None = ORDER) -> Result:
    placement = np.zeros(GRAPH.n, np.int64)
    evaluation, schedule, memory = evaluate_step(GRAPH, machine, placement, order=order)
    report = PartitionReport("by hand", 1, GRAPH.n, GRAPH.m, None, {}, evaluation)
    return Result(placement, report, order, schedule, memory)


def test_the_order_is_dropped_where_readiness_hides_more_of_the_allreduce() -> None:
    """In order of readiness wg runs 10-20 and its average 20-1,020: upd at 1,020, the step 1,021 µs.
    In the run order wg runs 130-140 (after x, dx, y, y2), its average ends at 1,140, upd runs then and
    z after it: 1,142 µs. The same 142 µs of compute either way."""
    judged = judge_order(GRAPH, Machine(1), _result(Machine(1)), TWO_NODES)
    assert judged.dropped and judged.result.order is None
    assert (judged.ordered_us, judged.step.step_us, judged.step.compute_us) == (1142.0, 1021.0, 142.0)
    assert judged.result.report.evaluation.makespan_us == 142.0  # evaluated again, in order of readiness
    assert judged.result.report.details["run_order_dropped"]["replicas"] == 2
    assert judged.why == ("run order dropped: 1.14 ms with it, the allreduce across 2 replicas included; "
                          "1.02 ms as it trains")


def test_the_order_is_kept_where_readiness_would_not_fit() -> None:
    """In order of readiness wg (1 MB, alive until z) and y (3 MB) are in memory together: 4 MB at the
    peak; in the run order y is freed before wg is made: 3 MB. With 3.5 MB usable the order stays,
    although readiness is shorter with the allreduce."""
    machine = Machine(1, memory=int(3.5 * MB), reserve=0.0)
    assert not _result(machine, order=None).report.evaluation.memory_fits
    result = _result(machine)
    judged = judge_order(GRAPH, machine, result, TWO_NODES)
    assert result.report.evaluation.memory_fits and not judged.dropped and judged.result is result
    assert judged.step.step_us == 1142.0 and judged.why.startswith("run order kept: 1.14 ms")


def test_nothing_to_judge_without_an_order_or_without_replicas() -> None:
    unordered = _result(Machine(1), order=None)
    judged = judge_order(GRAPH, Machine(1), unordered, TWO_NODES)
    assert (judged.result, judged.dropped, judged.why, judged.step.step_us) == (unordered, False, "", 1021.0)
    alone = judge_order(GRAPH, Machine(1), _result(Machine(1)), Cluster())  # one replica: nothing averaged
    assert alone.result.order is not None and alone.step.step_us == 142.0 and alone.why == ""


def test_an_order_that_helps_with_the_allreduce_is_kept() -> None:
    """A run order that runs wg first (its average starts at 20) and upd last does what readiness
    does: a tie, and the order stays."""
    first = np.array([0, 1, 6, 2, 3, 4, 5], np.int64)
    judged = judge_order(GRAPH, Machine(1), _result(Machine(1), order=first), TWO_NODES)
    assert not judged.dropped and judged.result.order is not None and judged.step.step_us == 1021.0
