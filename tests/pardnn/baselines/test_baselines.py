"""Baseline placers: one checker over every placer (hand-made, random and synthetic graphs), plus
answers worked out by hand for each."""

from __future__ import annotations

import itertools
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pardnn import CostGraph, InfeasibleError, Machine
from pardnn.baselines import MissingDependencyError
from pardnn.baselines.critical_path import critical_path_ops
from pardnn.baselines.linear_clustering import glb_map, linear_clusters
from pardnn.baselines.metis import contract_groups
from pardnn.costs.synthetic import dnn_graph
from pardnn.emulation.checks import check_placement
from pardnn.emulation.simulate import evaluate
from pardnn.placement.result import Result
from pardnn.registry import PLACERS, get_placer
from tests.conftest import random_dags

BASELINES = [name for name, placer in PLACERS.items() if not placer.memory_heuristics]
# The exact placer refuses graphs above its max_ops (tests/pardnn/baselines/test_exact.py checks that and its answers).
SCALABLE = [name for name in PLACERS if name != "exact"]
FREE_COMM = {"bandwidth": 1e30, "latency": 0.0}  # with 0-byte edges every transfer costs exactly 0


def place(name: str, graph: CostGraph, machine: Machine, **options: Any) -> Result:
    try:
        return get_placer(name)(graph, machine, **options)
    except MissingDependencyError as exc:
        pytest.skip(str(exc))


def assert_valid(graph: CostGraph, machine: Machine, result: Result) -> None:
    """What every placer promises: every op on a device in range, groups whole, an honest report."""
    placement = result.placement
    assert placement.dtype == np.int64 and placement.shape == (graph.n,)
    assert not placement.flags.writeable
    check_placement(graph, machine, placement, colocation=True)
    report = result.report
    truth = evaluate(graph, machine, placement, order=result.order)
    assert report.evaluation == truth
    assert report.evaluation.memory_fits == truth.memory_fits
    assert report.evaluation.colocation_violations == 0
    assert (report.devices, report.ops, report.edges) == (machine.devices, graph.n, graph.m)
    assert "evaluation" in report.stage_seconds and all(s >= 0 for s in report.stage_seconds.values())
    if not get_placer(report.algorithm).complete:  # a baseline: its own time and the evaluation
        assert set(report.stage_seconds) == {"placement", "evaluation"}


def chain(comp: list[float]) -> CostGraph:
    """a -> b -> c ... with the given compute and 0-byte outputs."""
    names = [chr(ord("a") + i) for i in range(len(comp))]
    return CostGraph(names, comp, [0] * len(comp), range(len(comp) - 1), range(1, len(comp)))


def fork() -> CostGraph:
    """a -> b -> d and a -> c -> d; b is heavy, so the critical path is a, b, d."""
    return CostGraph.from_named_edges(["a", "b", "c", "d"], [1, 5, 1, 1], [10, 10, 100, 10],
                                      [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])


def two_triangles() -> CostGraph:
    names = [f"x{i}" for i in range(3)] + [f"y{i}" for i in range(3)]
    edges = [("x0", "x1"), ("x1", "x2"), ("x0", "x2"), ("y0", "y1"), ("y1", "y2"), ("y0", "y2")]
    return CostGraph.from_named_edges(names, [1.0] * 6, [64] * 6, edges)


# --------------------------------------------------------------------- the checker over every placer
@pytest.mark.parametrize("name", list(PLACERS))
@given(g=random_dags(max_ops=40), k=st.integers(1, 6), memory=st.sampled_from([None, 4000, 20000, 10**6]))
def test_every_placer_on_random_dags(name, g, k, memory):
    machine = Machine(k, memory=memory, bandwidth=1e8, latency=5.0)
    try:
        result = place(name, g, machine)
    except InfeasibleError:
        # Only a placer with memory heuristics refuses; a baseline always places, and its evaluation
        # says whether memory fits.
        assert get_placer(name).memory_heuristics
        return
    assert_valid(g, machine, result)


@pytest.mark.parametrize("name", SCALABLE)
@pytest.mark.parametrize("k", [1, 4])
def test_every_placer_on_a_synthetic_dnn_graph(name, k):
    g = dnn_graph(2000, seed=1)
    machine = Machine(k)
    result = place(name, g, machine)
    assert_valid(g, machine, result)
    assert result.report.algorithm == name
    assert result.report.evaluation.makespan_us >= result.report.evaluation.lower_bound_us * (1 - 1e-12)
    if k == 1:
        assert not result.placement.any()


@pytest.mark.parametrize("name", list(PLACERS))
@pytest.mark.parametrize("graph", [fork, two_triangles, lambda: chain([1, 1, 1, 1])],
                         ids=["fork", "triangles", "chain"])
def test_every_placer_on_hand_made_graphs(name, graph):
    g = graph()
    for k in (1, 2, 3, 8):
        machine = Machine(k)
        assert_valid(g, machine, place(name, g, machine))


@pytest.mark.parametrize("name", list(PLACERS))
def test_every_placer_on_the_empty_and_the_single_op_graph(name):
    empty = CostGraph([], [], [], [], [])
    result = place(name, empty, Machine(3))
    assert result.placement.tolist() == []
    one = CostGraph(["only"], [5.0], [8], [], [])
    result = place(name, one, Machine(3))
    assert_valid(one, Machine(3), result)
    # The topological split puts an op where the midpoint of its work falls: block 1 of 3.
    assert result.placement.tolist() == ([1] if name == "topological" else [0])


@pytest.mark.parametrize("name", list(PLACERS))
def test_every_placer_keeps_a_group_spanning_the_graph_whole(name):
    """var (residual) is read at the start and updated at the end of a chain: all three go together."""
    g = CostGraph(["var", "read", "mid", "late", "apply"], [0, 1, 4, 4, 1], [32, 32, 32, 32, 0],
                  [0, 1, 2, 3, 0], [1, 2, 3, 4, 4], kind=[1, 0, 0, 0, 2], colocation=["v", "v", None, None, "v"])
    machine = Machine(3)
    result = place(name, g, machine)
    assert_valid(g, machine, result)
    assert len({int(result.placement[i]) for i in (0, 1, 4)}) == 1


@pytest.mark.parametrize("name", list(PLACERS))
@given(g=random_dags(max_ops=30), k=st.integers(2, 5))
def test_every_placer_is_deterministic(name, g, k):
    machine = Machine(k, bandwidth=1e8, latency=5.0)
    first = place(name, g, machine).placement
    assert place(name, g, machine).placement.tobytes() == first.tobytes()


def test_every_placer_is_deterministic_on_a_synthetic_dnn_graph():
    g = dnn_graph(2000, seed=1)
    for name in SCALABLE:
        first = place(name, g, Machine(4)).placement
        assert place(name, g, Machine(4)).placement.tobytes() == first.tobytes(), name


# --------------------------------------------------------------------- registry and arguments
def test_registry_names():
    assert list(PLACERS) == ["pardnn", "pardnn-paper", "single", "topological", "round_robin", "critical_path",
                             "linear_clustering", "metis", "etf", "pipeline", "exact"]
    # The guard's candidates are the cheap ones, in the registry's order (its order on ties).
    assert [name for name, placer in PLACERS.items() if placer.cheap] == [
        "single", "topological", "round_robin", "critical_path", "linear_clustering", "metis", "etf", "pipeline"]


def test_get_placer_unknown_name_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown placer 'cp'.*single.*critical_path"):
        get_placer("cp")


@pytest.mark.parametrize("name", BASELINES)
def test_baselines_take_no_memory_heuristic(name):
    with pytest.raises(ValueError, match=f"the {name} placer has no memory heuristic"):
        place(name, fork(), Machine(2), memory_heuristic="balance")


# --------------------------------------------------------------------- hand-worked answers
def test_single_device_puts_everything_on_device_0():
    assert place("single", fork(), Machine(4)).placement.tolist() == [0, 0, 0, 0]


def test_round_robin_chain():
    assert place("round_robin", chain([1, 1, 1, 1]), Machine(2)).placement.tolist() == [0, 1, 0, 1]


def test_round_robin_follows_the_topological_order_not_the_index():
    """d -> c -> b -> a: topological order d, c, b, a gets devices 0, 1, 2, 0."""
    g = CostGraph(["a", "b", "c", "d"], [1] * 4, [0] * 4, [3, 2, 1], [2, 1, 0])
    assert place("round_robin", g, Machine(3)).placement.tolist() == [0, 2, 1, 0]


def test_topological_chain_equal_compute():
    assert place("topological", chain([1, 1, 1, 1]), Machine(2)).placement.tolist() == [0, 0, 1, 1]


def test_topological_splits_by_compute_not_by_op_count():
    """Work 6: the midpoints 1.5, 3.5, 4.5, 5.5 fall in halves 0, 1, 1, 1."""
    result = place("topological", chain([3, 1, 1, 1]), Machine(2))
    assert result.placement.tolist() == [0, 1, 1, 1]
    assert result.report.details["block_work_us"] == [3.0, 3.0]


def test_topological_without_compute_splits_by_op_count():
    assert place("topological", chain([0, 0, 0, 0, 0, 0]), Machine(3)).placement.tolist() == [0, 0, 1, 1, 2, 2]


def test_critical_path_fork():
    """CP a, b, d (work 7) on device 0; c goes to the least-loaded device 1."""
    g = fork()
    path, _ = critical_path_ops(g, Machine(2).edge_comm_us(g.edge_bytes))
    assert [g.names[v] for v in path] == ["a", "b", "d"]
    result = place("critical_path", g, Machine(2))
    assert result.placement.tolist() == [0, 0, 1, 0]
    assert result.report.details["critical_path_ops"] == 3
    assert result.report.details["memory_overflow_ops"] == 0


def test_critical_path_length_counts_communication():
    """Chain of 3 ops, compute 1 each, two 0-byte edges at latency 10 µs: 3 + 2 * 10."""
    g = chain([1, 1, 1])
    result = place("critical_path", g, Machine(2, latency=10.0))
    assert result.report.details["critical_path_us"] == pytest.approx(23.0)


def test_critical_path_skips_a_device_without_memory():
    """c needs its own 100 B plus the 10 B copy of a's output; device 1 can hold 100 B, device 2 plenty.
    Limits are memory x 0.9: 100 B and 10 kB."""
    g = fork()
    result = place("critical_path", g, Machine(3, memory=[10_000, 112, 10_000]))
    assert result.placement.tolist() == [0, 0, 2, 0]
    assert result.report.details["memory_overflow_ops"] == 0
    assert result.report.evaluation.memory_fits


def test_critical_path_without_room_anywhere_takes_the_least_loaded_device():
    """Limits 108 B and 100 B. Device 0 holds a, b, d (30 B); c needs 100 B there or 110 B on device 1:
    no room, so c goes to the least-loaded device 1 and overflows it; then d receives c's 100 B on
    device 0 (130 B > 108 B) and overflows device 0."""
    g = fork()
    result = place("critical_path", g, Machine(2, memory=[120, 112]))
    assert result.placement.tolist() == [0, 0, 1, 0]
    assert result.report.details["memory_overflow_ops"] == 2
    assert not result.report.evaluation.memory_fits


def test_critical_path_places_the_group_of_a_path_op_on_device_0():
    """The path runs through 'read' (group v); the variable and its update join it on device 0."""
    g = CostGraph(["var", "read", "heavy", "apply", "side"], [0, 1, 10, 1, 2], [8, 8, 8, 0, 8],
                  [0, 1, 2, 0, 1], [1, 2, 3, 3, 4], kind=[1, 0, 0, 2, 0], colocation=["v", "v", None, "v", None])
    result = place("critical_path", g, Machine(2))
    assert result.placement.tolist() == [0, 0, 0, 0, 1]
    assert result.report.details["pinned_ops"] == 4


@given(g=random_dags(max_ops=40), k=st.integers(1, 5), memory=st.integers(500, 200_000))
def test_critical_path_memory_model_is_conservative(g, k, memory):
    """The greedy's model never frees anything, so when it found room for every op, memory fits."""
    machine = Machine(k, memory=memory, bandwidth=1e8, latency=5.0)
    result = place("critical_path", g, machine)
    if result.report.details["memory_overflow_ops"] == 0:
        assert result.report.evaluation.memory_fits


def lc_graph() -> CostGraph:
    """a(2) -> b(3), a -> c(1), b -> d(1), b -> e(4), c -> d, c -> e, g(3) -> d.

    Bottom levels (no communication): d 1, e 4, b 7, c 5, a 9, g 4. Path 1: a, then b (7 > 5), then
    e (4 > 1). Recomputed on {c, d, g}: d 1, c 2, g 4, so path 2 is g, d and path 3 is c. (With the
    first levels, c (5) would have started path 2 instead: recomputation matters here.)
    """
    return CostGraph.from_named_edges(["a", "b", "c", "d", "e", "g"], [2, 3, 1, 1, 4, 3], [0] * 6,
                                      [("a", "b"), ("a", "c"), ("b", "d"), ("b", "e"), ("c", "d"), ("c", "e"),
                                       ("g", "d")])


def test_linear_clustering_paths_by_hand():
    g = lc_graph()
    weight = Machine(2, **FREE_COMM).edge_comm_us(g.edge_bytes)
    cluster_of, ptr, members, paths = linear_clusters(g, weight)
    assert paths == 3
    assert [[g.names[v] for v in members[ptr[c] : ptr[c + 1]]] for c in range(paths)] == \
        [["a", "b", "e"], ["g", "d"], ["c"]]
    assert cluster_of.tolist() == [0, 0, 2, 1, 0, 1]


def test_linear_clustering_glb_by_hand():
    """Starts (top levels, clusters free inside): {a, b, e} 0, {g, d} 0, {c} 2; work 9, 4, 1.
    GLB: {a, b, e} -> 0, {g, d} -> 1 (least loaded), {c} -> 1 (4 < 9)."""
    g = lc_graph()
    machine = Machine(2, **FREE_COMM)
    weight = machine.edge_comm_us(g.edge_bytes)
    cluster_of, ptr, members, _ = linear_clusters(g, weight)
    assert glb_map(g, weight, cluster_of, ptr, members, 2).tolist() == [0, 1, 1]
    result = place("linear_clustering", g, machine)
    assert result.placement.tolist() == [0, 0, 1, 1, 0, 1]
    assert result.report.details["timeout"] is False
    assert (result.report.details["paths"], result.report.details["singletons"]) == (3, 0)


def test_linear_clustering_glb_orders_clusters_by_start_not_by_extraction():
    """a1(1) -> a2(9), a1 -> c(8), a1 -> d(3), b(1) alone. Paths: {a1, a2} (10), {c}, {d}, {b}.
    Starts: 0, 1, 1, 0, so GLB maps {a1, a2} -> 0, {b} -> 1, {c} -> 1 (1 < 10), {d} -> 1 (9 < 10).
    In extraction order {b} would come last and go to device 0 (10 < 11)."""
    g = CostGraph.from_named_edges(["a1", "a2", "b", "c", "d"], [1, 9, 1, 8, 3], [0] * 5,
                                   [("a1", "a2"), ("a1", "c"), ("a1", "d")])
    result = place("linear_clustering", g, Machine(2, **FREE_COMM))
    assert result.placement.tolist() == [0, 0, 1, 1, 1]


@given(g=random_dags(max_ops=30), k=st.integers(1, 5))
def test_linear_clustering_timeout_still_places_every_op(g, k):
    machine = Machine(k, bandwidth=1e8, latency=5.0)
    result = place("linear_clustering", g, machine, time_budget_s=0)
    assert_valid(g, machine, result)
    details = result.report.details
    assert details["timeout"] is True and details["paths"] == 0
    assert details["singletons"] == details["clusters"] == g.n


def test_linear_clustering_reports_progress():
    calls: list[tuple[str, int, int]] = []
    g = lc_graph()
    place("linear_clustering", g, Machine(2), progress=lambda stage, done, total: calls.append((stage, done, total)))
    clustering = [c for c in calls if c[0] == "clustering"]
    assert clustering and clustering[-1] == ("clustering", g.n, g.n)
    assert [c[0] for c in calls][-2:] == ["mapping", "evaluation"]


def test_linear_clustering_rejects_a_negative_budget():
    with pytest.raises(ValueError, match="time_budget_s"):
        place("linear_clustering", fork(), Machine(2), time_budget_s=-1)


def kim_browne_reference(g: CostGraph, weight: np.ndarray) -> list[list[int]]:
    """Linear clustering as Kim and Browne state it, slowly: after every path, every bottom level of
    the ops left is recomputed from scratch; the path starts at the first op (topological order) of
    highest level and follows the successor of highest weight + level, ties to the lowest rank."""
    left = set(range(g.n))
    paths = []
    while left:
        bottom = np.zeros(g.n)
        for v in reversed(g.topo_order.tolist()):
            if v in left:
                best = 0.0
                for k in range(g.succ_ptr[v], g.succ_ptr[v + 1]):
                    s = int(g.succ[k])
                    if s in left and weight[k] + bottom[s] > best:
                        best = weight[k] + bottom[s]
                bottom[v] = g.comp_us[v] + best
        v = max(left, key=lambda u: (bottom[u], -g.topo_rank[u]))
        path = []
        while v >= 0:
            path.append(v)
            left.discard(v)
            free = [(weight[k] + bottom[g.succ[k]], -g.topo_rank[g.succ[k]], int(g.succ[k]))
                    for k in range(g.succ_ptr[v], g.succ_ptr[v + 1]) if int(g.succ[k]) in left]
            v = max(free)[2] if free else -1
        paths.append(path)
    return paths


@given(g=random_dags(max_ops=40), tied=st.booleans(), bandwidth=st.sampled_from([1e30, 1e9, 1e6]))
def test_linear_clustering_recomputes_levels_incrementally_with_the_same_paths(g, tied, bandwidth):
    """The incremental recomputation of levels gives exactly the paths of the full one, ties included
    (``tied``: integer compute and transfer costs, so many levels are equal)."""
    if tied:
        g = g.replace(comp_us=np.round(g.comp_us / 10.0))
    weight = Machine(2, bandwidth=bandwidth, latency=1.0 if tied else 0.5).edge_comm_us(g.edge_bytes)
    if tied:
        weight = np.round(weight)
    _, ptr, members, paths = linear_clusters(g, weight)
    assert paths == ptr.size - 1
    assert [members[ptr[c] : ptr[c + 1]].tolist() for c in range(paths)] == kim_browne_reference(g, weight)


def test_linear_clustering_clusters_are_paths():
    """Every cluster is a chain of edges of the graph, and the clusters partition the ops."""
    g = dnn_graph(1000, seed=2)
    weight = Machine(4).edge_comm_us(g.edge_bytes)
    cluster_of, ptr, members, paths = linear_clusters(g, weight)
    assert paths == ptr.size - 1
    assert sorted(members.tolist()) == list(range(g.n))
    edges = set(zip(g.edge_src.tolist(), g.edge_dst.tolist()))
    for c in range(paths):
        path = members[ptr[c] : ptr[c + 1]].tolist()
        assert all((u, v) in edges for u, v in itertools.pairwise(path))
        assert (cluster_of[path] == c).all()


def test_metis_separates_two_disconnected_triangles():
    result = place("metis", two_triangles(), Machine(2))
    placement = result.placement.tolist()
    assert placement[0] == placement[1] == placement[2] != placement[3] == placement[4] == placement[5]
    assert result.report.evaluation.cut_edges == 0


def test_metis_one_device_or_few_vertices_needs_no_metis():
    assert place("metis", two_triangles(), Machine(1)).placement.tolist() == [0] * 6
    assert place("metis", chain([1, 1, 1]), Machine(4)).placement.tolist() == [0, 1, 2]


def test_metis_contracts_groups():
    """Both triangles share group 'g' (x0 and y0): they must land raise_everywhere, one vertex for METIS."""
    g = CostGraph.from_named_edges([f"x{i}" for i in range(3)] + [f"y{i}" for i in range(3)], [1.0] * 6, [64] * 6,
                                   [("x0", "x1"), ("x1", "x2"), ("x0", "x2"), ("y0", "y1"), ("y1", "y2"),
                                    ("y0", "y2")], colocation=["g", None, None, "g", None, None])
    result = place("metis", g, Machine(2))
    assert result.placement[0] == result.placement[3]
    assert result.report.details["vertices"] == 5


CONTRACTED = {"cases": 0, "parallel": 0}


@settings(max_examples=max(60, settings().max_examples))  # its share of merged arcs is counted below: not fewer
@given(random_dags(max_ops=40, groups=0.5), st.randoms(use_true_random=False))
def test_metis_contraction_matches_a_dictionary_of_arcs(graph: CostGraph, rnd) -> None:
    """The contracted graph against one built arc by arc in a dict: every cut edge in both directions
    between the vertices of its ends' groups (ungrouped ops alone), parallel arcs summed, rows sorted.
    Weights are whole numbers, so the sums are exact in any order."""
    weight = np.array([float(rnd.randint(0, 9)) for _ in range(graph.m)])
    vertex_of, comp, xadj, adjncy, arc_weight = contract_groups(graph, weight)
    keys = [("g", int(c)) if c >= 0 else ("op", v) for v, c in enumerate(graph.colocation)]
    numbered = {key: i for i, key in enumerate(sorted(set(keys)))}  # groups by id, then ops by index
    assert vertex_of.tolist() == [numbered[key] for key in keys]
    assert np.allclose(comp, [sum(graph.comp_us[v] for v in range(graph.n) if vertex_of[v] == i)
                              for i in range(len(numbered))])
    arcs: dict[tuple[int, int], float] = {}
    for e, (u, v) in enumerate(zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), strict=True)):
        a, b = numbered[keys[u]], numbered[keys[v]]
        if a != b:
            for arc in ((a, b), (b, a)):
                arcs[arc] = arcs.get(arc, 0.0) + weight[e]
    expected = sorted(arcs)
    assert [(t, int(h)) for t in range(len(numbered)) for h in adjncy[xadj[t]:xadj[t + 1]]] == expected
    assert arc_weight.tolist() == [arcs[arc] for arc in expected]
    assert xadj.dtype == adjncy.dtype == np.int64
    CONTRACTED["cases"] += 1
    cut = int((vertex_of[graph.edge_src] != vertex_of[graph.edge_dst]).sum())
    CONTRACTED["parallel"] += len(expected) < 2 * cut


def test_metis_contraction_cases_reach_parallel_arcs():
    """The test above must mostly reach what it tests: graphs whose contraction merges arcs."""
    test_metis_contraction_matches_a_dictionary_of_arcs()
    assert CONTRACTED["parallel"] >= CONTRACTED["cases"] // 4, CONTRACTED


def test_metis_without_pymetis_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pymetis", None)  # makes ``import pymetis`` fail
    with pytest.raises(MissingDependencyError, match="pip install pymetis"):
        PLACERS["metis"](two_triangles(), Machine(2))
    assert PLACERS["metis"](two_triangles(), Machine(1)).placement.tolist() == [0] * 6  # K = 1 needs no METIS
