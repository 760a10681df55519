"""The refinement's cluster moves (pardnn/polish/clusters.py, the last phase of pardnn/polish/refine.py):
single-linkage clusters worked out by hand, a step only a cluster move shortens, and the phase never
lengthening the step it starts from."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pardnn import CostGraph, Machine, partition
from pardnn.emulation.emulated import Emulated
from pardnn.emulation.emulator import emulate
from pardnn.emulation.memory import track_memory
from pardnn.partitioner import PAPER
from pardnn.polish import refine as module
from pardnn.polish.clusters import linkage_clusters
from pardnn.polish.refine import SECONDS_PER_ELEMENT, SECONDS_PER_MOVE, evaluations_for, refine
from pardnn.steps.units import units_of
from tests.conftest import most_reach, random_dags, reached

SLOW = dict(bandwidth="1MB/s", latency="0us")  # an edge of B bytes takes B us when cut


def test_linkage_clusters_by_hand():
    """Edges by bytes: a-b 9, b-c 8, d-e 7, c-d 6, e-f 5, f-g 4, a-g 1; v and w share a group with b.
    Units: {b, v, w}, a, c, d, e, f, g (7). Merges: {a, b} (a pair), {a, b, c} (3 units: a cluster),
    {d, e} (a pair), {a..e} (5 units, over half of 7: not listed, and every later merge is larger)."""
    names = ["a", "b", "c", "d", "e", "f", "g", "v", "w"]
    src, dst, size = [0, 1, 3, 2, 4, 5, 0, 7, 8], [1, 2, 4, 3, 5, 6, 6, 1, 1], [9, 8, 7, 6, 5, 4, 1, 3, 3]
    graph = CostGraph(names, [1.0] * 9, [8] * 9, src, dst, size,
                      colocation=[None, "g", None, None, None, None, None, "g", "g"])
    unit = units_of(graph)
    assert [sorted(np.flatnonzero(np.isin(unit, cluster)).tolist()) for cluster in linkage_clusters(graph, unit)] == [
        [0, 1, 2, 7, 8]]


def two_clusters(branches: int = 4) -> CostGraph:
    """s -> ax, bx (1 B); x -> y1..y4 -> z inside each of a and b (1000 B); az, bz -> t (1 B).
    s and t take 1 us, the others 10 us."""
    names = ["s"]
    for c in "ab":
        names += [f"{c}x", *(f"{c}y{i}" for i in range(branches)), f"{c}z"]
    names.append("t")
    at = {name: i for i, name in enumerate(names)}
    edges = []
    for c in "ab":
        edges.append(("s", f"{c}x", 1))
        for i in range(branches):
            edges += [(f"{c}x", f"{c}y{i}", 1000), (f"{c}y{i}", f"{c}z", 1000)]
        edges.append((f"{c}z", "t", 1))
    return CostGraph(names, [1.0 if name in "st" else 10.0 for name in names], [8] * len(names),
                     [at[u] for u, _, _ in edges], [at[v] for _, v, _ in edges], [b for *_, b in edges])


def test_a_cluster_moves_where_no_unit_or_pair_does(monkeypatch):
    """All on device 0 the 14 ops run in a row: 1 + 12 x 10 + 1 = 122 us. Moving b's six ops to device 1
    cuts only the 1-byte edges: s 0-1, bx 2-12 (after s's copy), by* 12-52, bz 52-62, its copy to t at
    63, t 63-64, while a runs 1-61 on device 0: 64 us. Every single op and every linked pair moved
    instead cuts a 1000-byte edge (1000 us), or (s or t alone) adds a 1-us copy: never shorter. With
    a budget that buys the whole sweep but no kicks (100 emulations), the search without clusters stays
    at 122 us; with them its first move is b's cluster."""
    graph = two_clusters()
    machine = Machine(2, **SLOW)
    start = np.zeros(graph.n, np.int64)
    schedule = emulate(graph, machine, start)
    assert schedule.makespan_us == pytest.approx(122.0)
    b = np.array([name.startswith("b") for name in graph.names])
    assert emulate(graph, machine, b.astype(np.int64)).makespan_us == pytest.approx(64.0)
    linked = {(int(u), int(v)) for u, v in zip(graph.edge_src, graph.edge_dst, strict=True)}
    for moved in [(op,) for op in range(graph.n)] + sorted(linked):
        trial = start.copy()
        trial[list(moved)] = 1
        assert emulate(graph, machine, trial).makespan_us >= 122.0 - 1e-9, moved

    seconds = 100.5 * (SECONDS_PER_MOVE + SECONDS_PER_ELEMENT * (graph.n + graph.m))
    assert evaluations_for(graph, seconds) == 100
    answer = Emulated(start, schedule, None)
    monkeypatch.setattr(module, "CLUSTER_MOVES", False)
    before = refine(graph, machine, answer, seconds=seconds)
    assert before.schedule.makespan_us == pytest.approx(122.0) and before.moves == []
    monkeypatch.setattr(module, "CLUSTER_MOVES", True)
    after = refine(graph, machine, answer, seconds=seconds)
    assert after.schedule.makespan_us <= 64.0 + 1e-9
    kind, first_op, source, target = after.moves[0]
    assert (kind, source, target) == ("cluster", 0, 1) and graph.names[first_op] in ("ax", "bx")


@most_reach
@given(random_dags(max_ops=25), st.integers(2, 3), st.floats(0.5, 1.0))
def test_the_cluster_phase_never_lengthens_the_step_and_keeps_the_limits(g, k, tight):
    """From ParDNN's placement under a limit that binds: the refinement ends no longer than where it stood
    when the cluster phase began, within every limit, and within its budget."""
    one = Machine(1)
    limit = max(1, int(track_memory(g, one, np.zeros(g.n, np.int64),
                                    emulate(g, one, np.zeros(g.n, np.int64))).peak_bytes.max() * tight))
    machine = Machine(k, bandwidth="1GB/s", memory=limit, reserve=0.0)
    try:
        placement = partition(g, machine, **PAPER).placement
    except Exception:  # no placement fits: nothing to refine
        return
    schedule = emulate(g, machine, placement)
    start = Emulated(placement, schedule, track_memory(g, machine, placement, schedule))
    before: list[tuple[float, int, int]] = []
    phase = module._Search.clustered

    def seen(search: module._Search) -> None:
        before.append((search.out.answer.makespan_us, len(search.moving) - search.paired, search.out.evaluations))
        phase(search)

    module._Search.clustered = seen  # type: ignore[method-assign]
    try:
        out = refine(g, machine, start, seconds=0.02)
    finally:
        module._Search.clustered = phase  # type: ignore[method-assign]
    [(makespan, clusters, evaluations)] = before
    reached(clusters > 0, "the cluster phase had clusters to move")
    assert out.schedule.makespan_us <= makespan + 1e-9
    assert out.evaluations > evaluations or clusters == 0  # the kicks left the phase its share
    assert out.evaluations <= evaluations_for(g, 0.02)
    assert (out.memory.peak_bytes <= machine.limits_bytes).all()
