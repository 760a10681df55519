"""Step 1: slicing (Algorithm 1) and LFLAM (Algorithm 2) on hand-worked graphs, plus properties."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pardnn import CostGraph
from pardnn.costs.levels import bottom_levels_sweep, top_levels, top_levels_sweep, weighted_levels
from pardnn.steps.mapping import _spans, map_clusters
from pardnn.steps.slicing import Clusters, _update_levels, slice_graph
from tests.conftest import most_reach, random_dags, reached
from tests.helpers.graphs import g1


def clusters_as_names(g: CostGraph, c: Clusters) -> list[list[str]]:
    return [[g.names[v] for v in c.cluster(i)] for i in range(c.count)]


def test_slicing_by_hand_one_primary():
    """G1 (see test_levels_fenwick.g1): the critical path a -> c -> e (10) is the primary; with levels
    recomputed on {b, d}, b (w_lvl 5) starts the secondary path b -> d."""
    g, w = g1()
    c = slice_graph(g, w, 1)
    assert clusters_as_names(g, c) == [["a", "c", "e"], ["b", "d"]]
    assert c.cluster_of.tolist() == [0, 1, 0, 1, 0]


def test_slicing_by_hand_more_primaries_than_paths():
    """With K = 3 the two paths are primaries 0 and 1 and primary 2 stays empty."""
    g, w = g1()
    c = slice_graph(g, w, 3)
    assert clusters_as_names(g, c) == [["a", "c", "e"], ["b", "d"], []]


def test_slicing_extends_backward_from_the_heaviest_op():
    """x(1) -> y(1) -> z(1) and x -> h(10): the primary is x -> h. Levels recomputed on {y, z} give
    both w_lvl 2; y (lower rank) starts the secondary, which grows forward: [y, z]."""
    g = CostGraph(["x", "y", "z", "h"], [1, 1, 1, 10], [0] * 4, [0, 1, 0], [1, 2, 3])
    c = slice_graph(g, np.zeros(g.m), 1)
    assert clusters_as_names(g, c) == [["x", "h"], ["y", "z"]]


def test_secondary_path_grows_backward_to_unvisited_predecessors():
    """p(1) -> q(1) -> r(9) and s(20) alone. K = 1: primary [s]. Levels on {p, q, r}: all three have
    w_lvl 11; p (lowest rank) starts and the walk forward takes the whole chain."""
    g = CostGraph(["p", "q", "r", "s"], [1, 1, 9, 20], [0] * 4, [0, 1], [1, 2])
    c = slice_graph(g, np.zeros(g.m), 1)
    assert clusters_as_names(g, c) == [["s"], ["p", "q", "r"]]


def test_secondary_with_stale_levels_grows_backward():
    """h(100) alone is the primary. Levels on the rest: q(10) -> r(20), q -> v(5), p(1) -> v, so
    w_lvl q 30, r 30, v 15, p 6. The first secondary is q -> r; then v is the heaviest op left and its
    unvisited predecessor p joins it backward: [p, v] (not [v] and [p])."""
    g = CostGraph(["h", "q", "r", "v", "p"], [100, 10, 20, 5, 1], [0] * 5, [1, 1, 4], [2, 3, 3])
    c = slice_graph(g, np.zeros(g.m), 1)
    assert clusters_as_names(g, c) == [["h"], ["q", "r"], ["p", "v"]]


def two_chains(y_comp: float, extra: list[tuple[str, float, str, str, float]]):
    """Primaries by hand: P0 = x0..x3 (comp 10 each), P1 = y0..y3 (comp y_comp each), chains with
    free (0-weight) edges. ``extra`` adds secondaries (name, comp, pred, succ-or-None, edge weight)."""
    names = [f"x{i}" for i in range(4)] + [f"y{i}" for i in range(4)]
    comp = [10.0] * 4 + [y_comp] * 4
    edges = [(f"x{i}", f"x{i + 1}", 0.0) for i in range(3)] + [(f"y{i}", f"y{i + 1}", 0.0) for i in range(3)]
    for name, c, pred, _, weight in extra:
        names.append(name)
        comp.append(c)
        edges.append((pred, name, weight))
    g = CostGraph.from_named_edges(names, comp, [0] * len(names), [(s, d) for s, d, _ in edges])
    weight = np.zeros(g.m)
    lookup = {(g.index[s], g.index[d]): w for s, d, w in edges}
    for e in range(g.m):
        weight[e] = lookup[(int(g.edge_src[e]), int(g.edge_dst[e]))]
    cluster_of = np.array([0] * 4 + [1] * 4 + list(range(2, 2 + len(extra))))
    ptr = np.arange(len(extra) + 1) + 8
    ptr = np.concatenate(([0, 4], ptr))
    clusters = Clusters(2, cluster_of, ptr, np.arange(len(names)))
    return g, weight, clusters


def test_condition_c_communication_dominates():
    """s (1 us) hangs off x1 with an edge of 100 us. span(s) = [20, 121): W = [20, 20], U = 0, so (a) and
    (b) fail, but 100 > 1 + 20 + 0: (c) maps s to P0 for locality."""
    g, w, c = two_chains(10.0, [("s", 1.0, "x1", None, 100.0)])
    m = map_clusters(g, w, c, 2, ccr=0.0)
    assert m.placement[g.index["s"]] == 0 and m.mapped_by_locality == 1 and m.mapped_by_balance == 0


def test_level_aware_balancing_when_no_condition_holds():
    """Same, but the edge costs 10 and P1 has only y0, y1 (levels 0 and 10) within ... of which none is
    in span(s) = [20, 41): W = [20, 0]. No locality condition holds (10 < 1 + 20), so Eq. 2 decides:
    P0 costs 20 + 0, P1 costs 0 + 10 → P1."""
    g, w, c = two_chains(10.0, [("s", 1.0, "x1", None, 10.0)])
    # Drop y2, y3 from P1's work in the span by making them cost nothing.
    g = CostGraph(g.names, np.where(np.isin(np.arange(g.n), [g.index["y2"], g.index["y3"]]), 0.0, g.comp_us),
                  g.out_bytes, g.edge_src, g.edge_dst, g.edge_bytes)
    m = map_clusters(g, w, c, 2, ccr=0.0)
    assert m.placement[g.index["s"]] == 1 and m.mapped_by_locality == 0 and m.mapped_by_balance == 1


def test_condition_b_mapping_improves_balance():
    """P1's ops cost 20 (levels 0, 20, 40, 60); s (edge 5 from x1) has span [20, 80): W = [20, 60].
    Mapping s to P0 gives W = [21, 60]: the imbalance drops from 40 to 39, so (b) holds."""
    g, w, c = two_chains(20.0, [("s", 1.0, "x1", None, 5.0)])
    m = map_clusters(g, w, c, 2, ccr=0.0)
    assert m.placement[g.index["s"]] == 0 and m.mapped_by_locality == 1


def test_condition_a_unmapped_work_covers_the_imbalance():
    """s (1 us, edge 5 from x1) and t (50 us, edge 1 from y1). t is more critical (w_lvl 71) and goes
    first: mapping it to P1 causes an imbalance of 50 that s's 1 us cannot cover, so it waits. s: W =
    [20, 20], mapping causes an imbalance of 1 and t's 50 us of unmapped work within the span covers it
    (a). t is left to balancing: P0 costs 21 + 1, P1 costs 20 + 0 → P1."""
    g, w, c = two_chains(10.0, [("s", 1.0, "x1", None, 5.0), ("t", 50.0, "y1", None, 1.0)])
    m = map_clusters(g, w, c, 2, ccr=0.0)
    assert [g.names[8 + int(i) - 2] for i in m.criticality_order] == ["t", "s"]
    assert m.placement[g.index["s"]] == 0 and m.placement[g.index["t"]] == 1
    assert m.mapped_by_locality == 1 and m.mapped_by_balance == 1
    # Without t there is no unmapped work: s is not mapped by locality (Eq. 2 still picks P0).
    g2, w2, c2 = two_chains(10.0, [("s", 1.0, "x1", None, 5.0)])
    m2 = map_clusters(g2, w2, c2, 2, ccr=0.0)
    assert m2.mapped_by_locality == 0 and m2.placement[g2.index["s"]] == 0


def test_maximally_communicating_clusters_need_high_ccr():
    """u talks to x1 (edge 6) and y1 (edge 1): maximally but not totally communicating with P0. Below
    CCR 10 the lookahead ignores it; at CCR >= 10 it maps it to P0 by locality."""
    names_extra = [("u", 1.0, "x1", None, 6.0)]
    g, w, c = two_chains(20.0, names_extra)
    g = CostGraph(g.names, g.comp_us, g.out_bytes, np.append(g.edge_src, g.index["y1"]),
                  np.append(g.edge_dst, g.index["u"]))
    w = np.zeros(g.m)
    w[(g.edge_src == g.index["x1"]) & (g.edge_dst == g.index["u"])] = 6.0
    w[(g.edge_src == g.index["y1"]) & (g.edge_dst == g.index["u"])] = 1.0
    assert map_clusters(g, w, c, 2, ccr=1.0).mapped_by_locality == 0
    high = map_clusters(g, w, c, 2, ccr=10.0)
    assert high.mapped_by_locality == 1 and high.placement[g.index["u"]] == 0


@given(random_dags(max_ops=40), st.integers(1, 6), st.integers(0, 2**31))
def test_clusters_partition_the_ops_into_paths(g, k, seed):
    w = np.random.default_rng(seed).random(g.m) * 5
    c = slice_graph(g, w, k)
    assert sorted(c.members.tolist()) == list(range(g.n))
    assert c.primaries == k and c.count >= k
    edges = set(zip(g.edge_src.tolist(), g.edge_dst.tolist()))
    for i in range(c.count):
        path = c.cluster(i).tolist()
        assert all((a, b) in edges for a, b in itertools.pairwise(path)), path
        assert all(c.cluster_of[v] == i for v in path)
        if i >= k:
            assert path, "secondary clusters are never empty"
    # The first primary is a critical path: its length equals the largest weighted level.
    if g.n:
        path = c.cluster(0)
        length = g.comp_us[path].sum() + sum(
            w[np.flatnonzero((g.edge_src == a) & (g.edge_dst == b))[0]] for a, b in itertools.pairwise(path))
        assert length == pytest.approx(weighted_levels(g, w)[2].max())


def _twice(g: CostGraph, rng: np.random.Generator) -> tuple[CostGraph, np.ndarray]:
    """Two disjoint copies of ``g``'s edges, every op costing 1, and edge weights 0 or 1 (the same in
    both copies): every heaviest path has its twin, so the choice between them is the tie-break's."""
    n = g.n
    names = [f"a/{v}" for v in range(n)] + [f"b/{v}" for v in range(n)]
    src = np.concatenate([g.edge_src, g.edge_src + n])
    dst = np.concatenate([g.edge_dst, g.edge_dst + n])
    twice = CostGraph(names, np.ones(2 * n), np.zeros(2 * n, np.int64), src, dst, np.ones(src.size, np.int64))
    assert np.array_equal(twice.edge_src, src) and np.array_equal(twice.edge_dst, dst)  # kept in this order
    return twice, np.tile(rng.integers(0, 2, g.m).astype(float), 2)


@most_reach
@given(random_dags(max_ops=30), st.integers(2, 6), st.integers(0, 2**31))
def test_each_primary_runs_through_the_heaviest_op_left(g, k, seed):
    """Primary j runs through the op of highest weighted level in the graph left by primaries
    0..j-1, ties to the lowest topological rank (levels recomputed by weighted_levels). On two copies
    of a random DAG, so that distinct heaviest paths tie (reached: the heaviest ops are not all on the
    primary, so a wrong tie-break would miss the op)."""
    g, w = _twice(g, np.random.default_rng(seed))
    c = slice_graph(g, w, k)
    active = np.ones(g.n, bool)
    tied = False
    for j in range(k):
        if not active.any():
            assert c.cluster(j).size == 0
            continue
        level = np.where(active, weighted_levels(g, w, active)[2], -np.inf)
        heaviest = np.flatnonzero(level == level.max())
        tied |= not np.isin(heaviest, c.cluster(j)).all()
        assert heaviest[np.argmin(g.topo_rank[heaviest])] in c.cluster(j).tolist()
        active[c.cluster(j)] = False
    reached(tied, "heaviest ops off the primary")


def test_slicing_names_a_wrong_number_of_edge_weights():
    g = CostGraph(["a", "b", "c"], [1.0, 2.0, 3.0], [8, 8, 8], [0, 1], [1, 2])
    with pytest.raises(ValueError, match="edge_weight has 1 values for 2 edges"):
        slice_graph(g, np.ones(1), 2)


@given(random_dags(max_ops=40), st.integers(1, 6), st.sampled_from([0.0, 20.0]))
def test_mapping_places_every_op_and_keeps_primaries(g, k, ccr):
    w = np.ones(g.m)
    c = slice_graph(g, w, k)
    m = map_clusters(g, w, c, k, ccr)
    assert m.placement.min(initial=0) >= 0 and m.placement.max(initial=0) < k
    primary = c.cluster_of < k
    assert np.array_equal(m.placement[primary], c.cluster_of[primary])
    # A secondary cluster goes to one device, whole.
    for i in range(k, c.count):
        assert len(set(m.placement[c.cluster(i)].tolist())) == 1
    assert m.mapped_by_locality + m.mapped_by_balance == c.count - k
    # Considered most critical first (weighted level with the edges inside clusters free), ties to the
    # lower topological rank of the cluster's first op.
    free = np.where(c.cluster_of[g.edge_src] == c.cluster_of[g.edge_dst], 0.0, w)
    level = weighted_levels(g, free)[2]
    key = {i: (-level[c.cluster(i)].max(), g.topo_rank[c.cluster(i)[0]]) for i in range(k, c.count)}
    assert m.criticality_order.tolist() == sorted(key, key=key.__getitem__)


@most_reach
@given(random_dags(max_ops=40, min_ops=10), st.integers(0, 2**31))
def test_spans_are_the_levels_between_the_inputs_finish_and_the_outputs_start(g, seed):
    """The span of a cluster (first op f, last op e): from the first level >= the latest finish
    (tl + comp) of f's inputs, 0 without inputs, to the first level >= the earliest tl of e's outputs,
    the critical-path length without outputs; computed here op by op from that definition, for random
    pairs (f, e) and edge weights that make most finishes fall between two levels. Reached: the span
    starts more than one level below f's own (the search walks down from there)."""
    rng = np.random.default_rng(seed)
    w = np.where(rng.random(g.m) < 0.3, 0.0, rng.random(g.m) * 20)
    top = top_levels(g, w)
    levels = np.unique(top)
    level_of = np.searchsorted(levels, top)
    critical = weighted_levels(g, w)[2].max()
    first, last = rng.integers(0, g.n, 200), rng.integers(0, g.n, 200)
    lo, hi = _spans(first, last, g.pred_ptr, g.pred, g.succ_ptr, g.succ, top, g.comp_us, levels,
                    level_of.astype(np.int64), int(np.searchsorted(levels, critical)))
    edges = set(zip(g.edge_src.tolist(), g.edge_dst.tolist(), strict=True))
    far = False
    for c, (f, e) in enumerate(zip(first.tolist(), last.tolist(), strict=True)):
        start = max([0.0] + [top[p] + g.comp_us[p] for p in range(g.n) if (p, f) in edges])
        end = min([top[s] for s in range(g.n) if (e, s) in edges], default=critical)
        assert lo[c] == sum(level < start for level in levels.tolist()), (c, f, start)
        assert hi[c] == sum(level < end for level in levels.tolist()), (c, e, end)
        far |= lo[c] < level_of[f] - 1
    reached(far, "a span starting two levels or more below its first op's")


@most_reach
@given(random_dags(max_ops=40), st.integers(0, 2**31))
def test_levels_updated_after_a_path_leaves_are_the_full_sweeps(g, seed):
    """Random groups of ops leave the graph one after another (as primaries do); after each, the levels
    updated in place equal, bit for bit, full sweeps over the ops left (0 for the ops gone). Reached: a
    change passes on beyond the direct neighbours of the ops that left (an op two edges away changes)."""
    rng = np.random.default_rng(seed)
    w = np.where(rng.random(g.m) < 0.3, 0.0, rng.random(g.m) * 20)
    pred_w = w[g.pred_edge]
    cluster_of = np.full(g.n, -1, np.int64)
    top = top_levels_sweep(g.topo_order, g.pred_ptr, g.pred, pred_w, g.comp_us, cluster_of < 0)
    bottom = bottom_levels_sweep(g.topo_order, g.succ_ptr, g.succ, w, g.comp_us, cluster_of < 0)
    dirty = np.zeros(g.n, np.bool_)
    far = False
    for step in range(6):
        left = np.flatnonzero(cluster_of < 0)
        if left.size == 0:
            break
        path = rng.choice(left, size=min(left.size, int(rng.integers(1, 4))), replace=False)
        cluster_of[path] = step
        before_top, before_bottom = top.copy(), bottom.copy()
        _update_levels(path, path.size, g.topo_order, g.topo_rank, g.pred_ptr, g.pred, pred_w, g.succ_ptr, g.succ,
                       w, g.comp_us, cluster_of, top, bottom, dirty)
        active = cluster_of < 0
        assert top.tobytes() == top_levels_sweep(g.topo_order, g.pred_ptr, g.pred, pred_w, g.comp_us,
                                                 active).tobytes()
        assert bottom.tobytes() == bottom_levels_sweep(g.topo_order, g.succ_ptr, g.succ, w, g.comp_us,
                                                       active).tobytes()
        assert not dirty.any()
        near = set(path.tolist()) | {int(u) for v in path for u in g.succ[g.succ_ptr[v]:g.succ_ptr[v + 1]]} | \
            {int(u) for v in path for u in g.pred[g.pred_ptr[v]:g.pred_ptr[v + 1]]}
        changed = set(np.flatnonzero((top != before_top) | (bottom != before_bottom)).tolist())
        far |= bool(changed - near)
    reached(far, "a level two edges or more from the ops that left changes")
