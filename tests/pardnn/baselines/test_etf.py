"""The ETF-style list-scheduling placer: answers worked out by hand, and its place in the guard."""

from __future__ import annotations

import numpy as np
import pytest

from pardnn import CostGraph, Machine, partition
from pardnn.baselines.etf import etf_placement
from pardnn.costs.synthetic import dnn_graph
from pardnn.registry import PLACERS

# 1 MB/s and 1 us latency: a 1000-byte transfer costs 1001 us, a 0-byte one 1 us.
SLOW = {"bandwidth": 1e6, "latency": 1.0}


def test_a_chain_whose_transfers_cost_more_than_its_compute_stays_on_one_device():
    """a -> b -> c, 10 us each, 1000-byte edges: b starts at 10 on a's device, at 1011 anywhere else."""
    g = CostGraph(["a", "b", "c"], [10.0] * 3, [1000] * 3, [0, 1], [1, 2])
    placement, details = etf_placement(g, Machine(3, **SLOW))
    assert placement.tolist() == [0, 0, 0]
    assert details == {"memory_overflow_ops": 0, "devices_used": 1}


def test_independent_ops_fill_the_free_devices():
    """Three 5-us ops, no edges, 2 devices: x and y start at 0 on devices 0 and 1, z at 5 on device 0
    (both free at 5: the lower index)."""
    g = CostGraph(["x", "y", "z"], [5.0] * 3, [0] * 3, [], [])
    placement, _ = etf_placement(g, Machine(2))
    assert placement.tolist() == [0, 1, 0]


def test_the_heavier_branch_follows_its_parent_and_the_other_branch_moves():
    """a (1 us) -> b (10 us) and a -> c (3 us), 0-byte edges at 1 us latency. Priorities: bl(b) = 10 >
    bl(c) = 3, so b goes first: device 0 (a's) at 1, else at 1 + 1 = 2. Then c: device 0 is busy until
    11, device 1 gets a's output at 2: c on device 1."""
    g = CostGraph(["a", "b", "c"], [1.0, 10.0, 3.0], [0, 0, 0], [0, 0], [1, 2])
    placement, _ = etf_placement(g, Machine(2, **SLOW))
    assert placement.tolist() == [0, 0, 1]


def test_equal_starts_go_to_the_critical_parents_device():
    """p0 (2 us) and p1 (4 us) feed v (1 us); x (6 us) stands alone; free transfers (0 bytes, 0 latency).
    Priorities (bottom levels): x 6, p1 5, p0 3, v 1. x: device 0 at 0 (ends 6); p1: device 1 at 0 (ends
    4); p0: device 1 at 4 (ends 6). v can start at 6 on either device; its critical parent (the input
    that arrives last) is p0, on device 1, so v goes there, not to the lower index."""
    g = CostGraph(["p0", "p1", "v", "x"], [2.0, 4.0, 1.0, 6.0], [0] * 4, [0, 1], [2, 2])
    placement, _ = etf_placement(g, Machine(2, bandwidth=1e30, latency=0.0))
    assert placement.tolist() == [1, 1, 1, 0]


def test_a_device_without_room_for_the_residual_state_is_skipped():
    """Two variables of 600 B (residual) on devices of 1000 B (reserve 0): the second cannot join the
    first, although device 0 is where it would start earliest."""
    g = CostGraph(["w1", "w2"], [1.0, 1.0], [600, 600], [], [], kind=["residual", "residual"])
    placement, details = etf_placement(g, Machine(2, memory=1000, reserve=0.0))
    assert sorted(placement.tolist()) == [0, 1] and details["memory_overflow_ops"] == 0
    crowded, details = etf_placement(g, Machine(1, memory=1000, reserve=0.0))
    assert crowded.tolist() == [0, 0] and details["memory_overflow_ops"] == 1  # no room anywhere: placed anyway


def test_a_colocation_group_follows_its_first_member():
    """var (residual) is read by r and updated by u at the end of a long chain; r and u must sit with var."""
    g = CostGraph(["var", "r", "m1", "m2", "u"], [0.0, 1.0, 50.0, 50.0, 1.0], [8, 8, 8, 8, 0],
                  [0, 1, 2, 3, 0], [1, 2, 3, 4, 4], kind=[1, 0, 0, 0, 2], colocation=["v", "v", None, None, "v"])
    placement, _ = etf_placement(g, Machine(3))
    assert placement[0] == placement[1] == placement[4]


def test_the_guard_offers_it_and_keeps_it_when_it_is_strictly_faster():
    """On this 2,000-op synthetic training step at K = 4 the ETF placement is shorter than ParDNN's own
    and every other cheap placement (measured when the placer was added): the guard keeps it, with the
    makespan the registry's ETF placer reports."""
    g, machine = dnn_graph(2000, seed=0), Machine(4, bandwidth="130GB/s", latency="25us")
    guard = partition(g, machine, refine_seconds=0, ordered=False).report.details["guard"]
    alone = PLACERS["etf"](g, machine).report.evaluation.makespan_us
    assert guard.winner == "etf"
    assert guard.makespan_us == pytest.approx(alone)
    assert guard.makespan_us < guard.pardnn_makespan_us
    assert all(v is None or v >= guard.makespan_us for k, v in guard.candidates.items() if k != "etf")


def test_it_is_deterministic_and_keeps_every_group_whole_on_a_large_graph():
    g, machine = dnn_graph(20_000, seed=3), Machine(8)
    first, details = etf_placement(g, machine)
    second, _ = etf_placement(g, machine)
    assert first.tobytes() == second.tobytes()
    assert details["devices_used"] == len(set(first.tolist())) > 1
    grouped = g.colocation >= 0
    for group in np.unique(g.colocation[grouped]):
        assert np.unique(first[g.colocation == group]).size == 1
