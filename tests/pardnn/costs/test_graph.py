from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pardnn import CostGraph, InvalidGraphError, Kind
from pardnn.costs.csr import merge_parallel_edges, pointers, stable_buckets
from pardnn.costs.graph import segment_reduce
from tests.conftest import random_dags


def diamond() -> CostGraph:
    """a -> b, a -> c, b -> d, c -> d (a feeds two branches that join)."""
    return CostGraph(["a", "b", "c", "d"], [1, 2, 3, 4], [10, 20, 30, 40], [0, 0, 1, 2], [1, 2, 3, 3])


def test_csr_of_a_diamond():
    g = diamond()
    assert g.succ_ptr.tolist() == [0, 2, 3, 4, 4]
    assert g.succ.tolist() == [1, 2, 3, 3]
    assert g.pred_ptr.tolist() == [0, 0, 1, 2, 4]
    assert g.pred.tolist() == [0, 0, 1, 2]
    assert g.edge_bytes.tolist() == [10, 10, 20, 30]  # default: the producer's out_bytes
    assert g.topo_order.tolist() == [0, 1, 2, 3]
    assert g.predecessors(3).tolist() == [1, 2]
    assert g.total_work_us == 10.0


def test_arrays_are_read_only():
    g = diamond()
    with pytest.raises(ValueError):
        g.comp_us[0] = 5.0
    with pytest.raises(ValueError):
        g.succ[0] = 2


def test_an_unpickled_graph_is_equal_and_its_arrays_read_only_as_built():
    """A build worker's graph comes back pickled: each array equal, read-only again and of the same numba type
    (a writable array is another type: every compiled kernel would compile once more for it)."""
    import pickle

    import numba

    g = CostGraph(["a", "b", "c", "d"], [1, 2, 3, 4], [10, 20, 30, 40], [0, 0, 1, 2], [1, 2, 3, 3],
                  colocation=["x", "x", None, None], memory_limit_bytes=100)
    again = pickle.loads(pickle.dumps(g))
    arrays = {name: value for name, value in vars(g).items() if isinstance(value, np.ndarray)}
    assert {"comp_us", "succ", "pred_ptr", "topo_rank", "colocation"} <= arrays.keys()
    for name, value in arrays.items():
        copy = getattr(again, name)
        assert np.array_equal(copy, value) and not copy.flags.writeable, name
        assert numba.typeof(copy) == numba.typeof(value), name
    assert again.succ is again.edge_dst and again.names == g.names and again.memory_limit_bytes == 100
    with pytest.raises(ValueError):
        again.comp_us[0] = 5.0


def test_parallel_edges_are_merged_by_summing_bytes():
    g = CostGraph(["a", "b"], [1, 1], [8, 0], [0, 0], [1, 1], [8, 4])
    assert g.m == 1 and g.edge_bytes.tolist() == [12]


def test_topological_order_when_indices_are_not():
    g = CostGraph(["late", "early"], [1, 1], [0, 0], [1], [0])
    assert g.topo_order.tolist() == [1, 0]
    assert g.topo_rank.tolist() == [1, 0]


def test_empty_and_single_node():
    empty = CostGraph([], [], [], [], [])
    assert empty.n == 0 and empty.m == 0 and empty.topo_order.size == 0
    single = CostGraph(["x"], [5.0], [7], [], [])
    assert single.topo_order.tolist() == [0]


def test_kinds_and_groups():
    g = CostGraph(["v", "read", "apply"], [0, 1, 1], [100, 100, 0], [0, 0], [1, 2],
                  kind=["residual", "normal", "reference"], colocation=["v", None, "v"])
    assert g.kind.tolist() == [Kind.RESIDUAL, Kind.NORMAL, Kind.REFERENCE]
    assert g.colocation.tolist() == [0, -1, 0] and g.group_names == ("v",)
    assert [m.tolist() for m in g.group_members()] == [[0, 2]]


def test_cycle_is_named():
    with pytest.raises(InvalidGraphError, match=r"cycle: 'b', 'c', 'a', 'b'"):
        CostGraph(["a", "b", "c", "x"], [1, 1, 1, 1], [0] * 4, [0, 1, 2, 3], [1, 2, 0, 0])


def test_self_loop_is_a_cycle():
    with pytest.raises(InvalidGraphError, match="op 'a' feeds itself"):
        CostGraph(["a"], [1], [0], [0], [0])


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf")])
def test_bad_compute_names_op_and_field(value):
    with pytest.raises(InvalidGraphError, match=r"^node #1 'b': comp_us = .*; expected a finite number >= 0$"):
        CostGraph(["a", "b"], [1.0, value], [0, 0], [], [])


@pytest.mark.parametrize("value", [-1, 2.5, float("nan")])
def test_bad_out_bytes_names_op_and_field(value):
    with pytest.raises(InvalidGraphError, match=r"^node #1 'b': out_bytes = .*; expected a whole number of bytes >= 0"):
        CostGraph(["a", "b"], [1.0, 1.0], [0, value], [], [])


def test_bad_edge_bytes_names_edge():
    with pytest.raises(InvalidGraphError, match=r"^edge #0 'a' -> 'b': bytes = -3; expected a whole number of bytes"):
        CostGraph(["a", "b"], [1, 1], [0, 0], [0], [1], [-3])


def test_duplicate_name():
    with pytest.raises(InvalidGraphError, match=r"^node #2 'a': duplicate name \(node #0 has it too\)$"):
        CostGraph(["a", "b", "a"], [1, 1, 1], [0, 0, 0], [], [])


def test_empty_name():
    with pytest.raises(InvalidGraphError, match=r"^node #1: name = ''; expected a non-empty string$"):
        CostGraph(["a", ""], [1, 1], [0, 0], [], [])
    with pytest.raises(InvalidGraphError, match=r"^node #0: name = 7; expected a non-empty string$"):
        CostGraph([7], [1], [0], [], [])


def test_unknown_endpoint_by_name():
    with pytest.raises(InvalidGraphError, match=r"^edge #1 'a' -> 'zz': unknown op 'zz' \(not among the 2 ops\)$"):
        CostGraph.from_named_edges(["a", "b"], [1, 1], [0, 0], [("a", "b"), ("a", "zz")])


def test_endpoint_index_out_of_range():
    with pytest.raises(InvalidGraphError, match=r"destination index 5, outside 0\.\.1"):
        CostGraph(["a", "b"], [1, 1], [0, 0], [0], [5])


def test_unknown_kind():
    with pytest.raises(InvalidGraphError, match=r"^node #0 'a': kind = 'variable'; expected one of normal"):
        CostGraph(["a"], [1], [0], [], [], kind=["variable"])


def test_wrong_lengths():
    with pytest.raises(InvalidGraphError, match="comp_us has 1 values for 2 ops"):
        CostGraph(["a", "b"], [1], [0, 0], [], [])


@given(random_dags())
def test_topological_order_respects_every_edge(g):
    rank = g.topo_rank
    assert np.all(rank[g.edge_src] < rank[g.edge_dst])
    assert sorted(g.topo_order.tolist()) == list(range(g.n))


@given(random_dags())
def test_csr_views_agree(g):
    pairs_succ = {(int(v), int(w)) for v in range(g.n) for w in g.successors(v)}
    pairs_pred = {(int(p), int(v)) for v in range(g.n) for p in g.predecessors(v)}
    assert pairs_succ == pairs_pred == set(zip(g.edge_src.tolist(), g.edge_dst.tolist()))
    assert np.array_equal(g.edge_bytes[g.pred_edge], g.pred_bytes)
    # predecessors in (destination, source) order, as a comparison sort gives them
    assert np.array_equal(g.pred_edge, np.lexsort((g.edge_src, g.edge_dst)))


@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7), st.integers(0, 9)), max_size=30))
def test_predecessors_in_order_from_edges_in_any_order(edges):
    """Edges given unsorted and with parallel ones (merged): the predecessor order is still (destination,
    source), as a comparison sort gives it."""
    edges = [(min(a, b), max(a, b), size) for a, b, size in edges if a != b]  # acyclic: low to high
    g = CostGraph([f"op{i}" for i in range(8)], np.ones(8), np.zeros(8), [e[0] for e in edges],
                  [e[1] for e in edges], [e[2] for e in edges])
    assert np.array_equal(g.pred_edge, np.lexsort((g.edge_src, g.edge_dst)))
    assert sorted(zip(g.pred.tolist(), g.pred_bytes.tolist())) == sorted(zip(g.edge_src.tolist(),
                                                                              g.edge_bytes.tolist()))


@given(st.lists(st.integers(0, 6), max_size=40))
def test_stable_buckets_is_a_stable_sort(keys):
    keys = np.array(keys, dtype=np.int64)
    assert np.array_equal(stable_buckets(keys, pointers(keys, 7)), np.argsort(keys, kind="stable"))


# ---------------------------------------------------------------------------------------- validation
def test_whole_floats_are_bytes_and_large_ints_stay_exact():
    g = CostGraph(["a", "b", "c"], [1, 1, 1], [4096.0, 2**62 + 1, 1e6], [0], [1], [2.0e3], param_bytes=[0, 1.0, 0])
    assert g.out_bytes.dtype == np.int64 and g.out_bytes.tolist() == [4096, 2**62 + 1, 10**6]
    assert g.edge_bytes.tolist() == [2000] and g.param_bytes.tolist() == [0, 1, 0]


@pytest.mark.parametrize(
    ("out_bytes", "message"),
    [
        ([0, 2**64], r"^node #1 'b': out_bytes = 18446744073709551616; expected a whole number .* < 2\*\*63$"),
        (np.array([0, 2**63], dtype=np.uint64), r"^node #1 'b': out_bytes = 9223372036854775808; expected"),
        ([0, float("inf")], r"^node #1 'b': out_bytes = inf; expected a whole number of bytes >= 0$"),
        ([0, "8"], r"^node #1 'b': out_bytes = '8'; expected a whole number of bytes >= 0$"),
        ([0, None], r"^node #1 'b': out_bytes = None; expected a whole number of bytes >= 0$"),
        ([0, 10**400], r"^node #1 'b': out_bytes = 1000000000000000000000000000000000000000\.\.\. \(401 characters\)"),
    ],
    ids=["beyond-uint64", "uint64", "inf", "string", "none", "huge"],
)
def test_bad_bytes_name_the_value(out_bytes, message):
    with pytest.raises(InvalidGraphError, match=message):
        CostGraph(["a", "b"], [1, 1], out_bytes, [], [])


def test_edge_bytes_none_means_the_producers_bytes():
    g = CostGraph(["a", "b", "c"], [1, 1, 1], [8, 4, 0], [0, 1, 0], [1, 2, 2], [None, 3, None])
    assert g.edge_bytes.tolist() == [8, 8, 3]  # sorted by (src, dst): a->b, a->c, b->c
    named = CostGraph.from_named_edges(["a", "b"], [1, 1], [8, 0], [("a", "b")])
    assert named.edge_bytes.tolist() == [8]


@pytest.mark.parametrize(
    ("limit", "expected"), [(2**30, 2**30), (1e9, 10**9), (np.int64(5), 5), (None, None)]
)
def test_memory_limit_accepts_whole_numbers(limit, expected):
    g = CostGraph(["a"], [1], [0], [], [], memory_limit_bytes=limit)
    assert g.memory_limit_bytes == expected and (expected is None or type(g.memory_limit_bytes) is int)


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "1GB", 2**63])
def test_memory_limit_rejects(limit):
    message = rf"^graph 'g': memory_limit_bytes = {re.escape(repr(limit))}; expected a whole number of bytes > 0"
    with pytest.raises(InvalidGraphError, match=message):
        CostGraph(["a"], [1], [0], [], [], name="g", memory_limit_bytes=limit)


def test_kind_codes_out_of_range():
    with pytest.raises(InvalidGraphError, match=r"^node #1 'b': kind = 3; expected 0, 1 or 2"):
        CostGraph(["a", "b"], [1, 1], [0, 0], [], [], kind=np.array([0, 3]))
    with pytest.raises(InvalidGraphError, match=r"^node #0 'a': kind = 7; expected one of normal, residual, reference"):
        CostGraph(["a"], [1], [0], [], [], kind=[7])


def test_colocation_ids_and_labels():
    ids = CostGraph(["a", "b", "c", "d"], [1] * 4, [0] * 4, [], [], colocation=np.array([5, -1, 2, 5]))
    assert ids.colocation.tolist() == [0, -1, 1, 0] and ids.group_names == ("5", "2")
    with pytest.raises(InvalidGraphError, match=r"^node #1 'b': colocation = -2; expected a group id >= 0 or -1$"):
        CostGraph(["a", "b"], [1, 1], [0, 0], [], [], colocation=[0, -2])


def test_segment_reduce_and_edge_merging_live_in_csr():
    ptr = np.array([0, 2, 2, 5])
    assert segment_reduce(np.maximum, np.array([1.0, 3.0, 2.0, 7.0, 5.0]), ptr, -1.0).tolist() == [3.0, -1.0, 7.0]
    src, dst, nbytes = merge_parallel_edges(np.array([1, 0, 0]), np.array([2, 1, 1]), np.array([5, 2, 3]))
    assert (src.tolist(), dst.tolist(), nbytes.tolist()) == ([0, 1], [1, 2], [5, 5])


# ---------------------------------------------------------------------------------------- replace
def grouped() -> CostGraph:
    return CostGraph(["v", "read", "apply"], [0.0, 1.0, 2.0], [100, 100, 0], [0, 0, 1], [1, 2, 2], [100, 7, 5],
                     kind=["residual", "normal", "reference"], colocation=["loc:@v", None, "loc:@v"],
                     ops=["VariableV2", "Identity", "Assign"], param_bytes=[100, 0, 0], name="g",
                     memory_limit_bytes=2**20)


def test_replace_keeps_every_field_not_given():
    g = grouped()
    assert g.replace() == g
    r = g.replace(comp_us=[5.0, 6.0, 7.0])
    assert r.comp_us.tolist() == [5.0, 6.0, 7.0]
    assert r.memory_limit_bytes == 2**20
    assert r.group_names == ("loc:@v",) and r.colocation.tolist() == [0, -1, 0]
    assert r.replace(comp_us=g.comp_us) == g
    assert g.comp_us.tolist() == [0.0, 1.0, 2.0]  # the original is untouched


def test_replace_keeps_edge_bytes_when_only_out_bytes_change():
    r = grouped().replace(out_bytes=[200, 300, 0])
    assert r.out_bytes.tolist() == [200, 300, 0] and r.edge_bytes.tolist() == [100, 7, 5]


def test_replace_names_rebuilds_the_index():
    r = grouped().replace(names=["w", "w/read", "w/assign"])
    assert r.index == {"w": 0, "w/read": 1, "w/assign": 2}
    with pytest.raises(InvalidGraphError, match=r"^node #2 'w': duplicate name \(node #0 has it too\)$"):
        grouped().replace(names=["w", "x", "w"])


def test_replace_rejects_unknown_fields():
    with pytest.raises(TypeError, match=r"unknown field.*succ"):
        grouped().replace(succ=np.zeros(3))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"comp_us": [0.0, -1.0, 2.0]}, r"^node #1 'read': comp_us = -1\.0; expected a finite number >= 0$"),
        ({"out_bytes": [100, 1.5, 0]}, r"^node #1 'read': out_bytes = 1\.5; expected a whole number of bytes >= 0$"),
        ({"memory_limit_bytes": 0}, r"^graph 'g': memory_limit_bytes = 0; expected a whole number of bytes > 0"),
        ({"edge_dst": [1, 2, 0]}, r"^graph 'g' has a cycle: "),
        ({"kind": ["normal", "normal", "variable"]}, r"^node #2 'apply': kind = 'variable'; expected one of"),
    ],
    ids=["negative-comp", "fractional-bytes", "memory-limit", "cycle", "kind"],
)
def test_replace_validates_again(fields, message):
    with pytest.raises(InvalidGraphError, match=message):
        grouped().replace(**fields)


@given(st.lists(st.integers(-1, 3), min_size=1, max_size=12),
       st.lists(st.sampled_from(["loc:@a", "loc:@b", "c", "d"]), min_size=4, max_size=4))
def test_group_ids_with_their_labels_equal_the_labels_themselves(ids, labels):
    """The binary reader's form (ids into a label table) gives the graph the labels themselves give,
    whether the ids are numbered by first appearance (kept) or not, and labels repeat or not."""
    n = len(ids)
    table = [*labels, None]
    names = [f"op{i}" for i in range(n)]
    by_label = CostGraph(names, np.ones(n), np.zeros(n), [], [], colocation=[table[i] for i in ids])
    by_id = CostGraph(names, np.ones(n), np.zeros(n), [], [], colocation=np.array(ids), _group_names=labels)
    assert by_id == by_label
    assert by_id.colocation.tolist() == by_label.colocation.tolist() and by_id.group_names == by_label.group_names


@pytest.mark.parametrize(("ids", "labels", "kept"), [
    ([0, -1, 1, 0, 2], ["x", "y", "z"], True),  # numbered by first appearance: the ids are kept
    ([-1, -1], [], True),
    ([1, -1, 0], ["x", "y"], False),  # not by first appearance: renumbered through the labels
    ([0, 2, 1], ["x", "y", "z"], False),
    ([0, 1], ["x", "x"], False),  # one label twice: one group
    ([0, -1], ["x", "y"], False),  # a label unused
])
def test_group_ids_kept_only_in_the_graphs_own_form(ids, labels, kept):
    from pardnn.costs.validation import _numbered_ids

    n = len(ids)
    assert (_numbered_ids(np.array(ids), n, labels) is not None) is kept
    names = [f"op{i}" for i in range(n)]
    table = [*labels, None]
    by_label = CostGraph(names, np.ones(n), np.zeros(n), [], [], colocation=[table[i] for i in ids])
    by_id = CostGraph(names, np.ones(n), np.zeros(n), [], [], colocation=np.array(ids), _group_names=labels)
    assert by_id.colocation.tolist() == by_label.colocation.tolist() and by_id.group_names == by_label.group_names


# ---------------------------------------------------------------------------------- names joined by NUL
def _outcome(check, value) -> str:
    try:
        check(value)
    except InvalidGraphError as exc:
        return str(exc)
    return "ok"


NUL_FREE = st.text(st.characters(blacklist_characters="\0"), max_size=4)


@given(st.lists(NUL_FREE | st.sampled_from(["a", "b", ""]), min_size=1, max_size=10))
def test_joined_names_are_checked_as_the_names_are(names):
    # Hashing the joined names (pardnn.costs.validation.check_joined_names) accepts exactly the name lists
    # check_names accepts, and refuses the others with the same message (the culprit named).
    from pardnn.costs.validation import check_joined_names, check_names

    assert _outcome(check_joined_names, "\0".join(names)) == _outcome(check_names, names)


def test_joined_names_are_checked_as_the_names_are_over_seeded_lists():
    # The property above over seeded lists of its kind, counting both answers so that neither is
    # left untried: about half the lists hold a duplicate or an empty name.
    from pardnn.costs.validation import check_joined_names, check_names

    rng = np.random.default_rng(0)
    refused = 0
    for _ in range(300):
        names = [str(name) for name in rng.choice(["a", "b", "", "c/d", "é", "\ud800"], rng.integers(1, 5))]
        outcome = _outcome(check_joined_names, "\0".join(names))
        assert outcome == _outcome(check_names, names)
        refused += outcome != "ok"
    assert 50 <= refused <= 250, refused


def test_a_hash_collision_falls_back_to_the_names(monkeypatch):
    # Two names with one hash are told apart by the names themselves: distinct names pass, a true
    # duplicate is named.
    from pardnn.costs import validation

    def one_hash(blob, n):
        return np.zeros(n, np.uint64), False

    monkeypatch.setattr(validation, "_name_hashes", one_hash)
    validation.check_joined_names("a\0b\0c")
    with pytest.raises(InvalidGraphError, match=r"^node #2 'a': duplicate name \(node #0 has it too\)$"):
        validation.check_joined_names("a\0b\0a")


def test_a_graph_given_joined_names_splits_them_only_when_asked():
    graph = CostGraph((), [1.0, 2.0, 3.0], [0, 0, 0], [0, 1], [1, 2], _joined_names="x\0y/é\0z")
    assert graph.n == 3 and graph._names is None
    assert graph.joined_names == "x\0y/é\0z" and graph._names is None
    assert graph.names == ("x", "y/é", "z") and graph.index == {"x": 0, "y/é": 1, "z": 2}
    assert graph == CostGraph(["x", "y/é", "z"], [1.0, 2.0, 3.0], [0, 0, 0], [0, 1], [1, 2])
    with pytest.raises(InvalidGraphError, match=r"^node #1 'y': comp_us = -2.0"):
        CostGraph((), [1.0, -2.0], [0, 0], [], [], _joined_names="x\0y")
    with pytest.raises(InvalidGraphError, match=r"^graph 'graph' has a cycle: op 'y' feeds itself"):
        CostGraph((), [1.0, 2.0], [0, 0], [1], [1], _joined_names="x\0y")
    with pytest.raises(TypeError, match="_joined_names replaces names"):
        CostGraph(["x", "y"], [1.0, 2.0], [0, 0], [], [], _joined_names="x\0y")
    built = CostGraph(["x", "y"], [1.0, 2.0], [0, 0], [], [])
    assert built.joined_names == "x\0y" and built._joined is None  # joined anew, not kept
