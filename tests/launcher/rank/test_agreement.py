"""Agreement between nodes: digests, the mismatch message, cost sharing on one node."""

from __future__ import annotations

import numpy as np
import pytest

from launcher.cluster.topology import single_node
from launcher.errors import AgreedError, Inconsistent
from launcher.rank.agreement import (
    agreed_variables,
    average_costs,
    check_agreement,
    check_variables,
    graph_digest,
    placement_digest,
    variable_digests,
    variables_digest,
)
from pardnn.costs.graph import CostGraph


def _graph(comp: list[float]) -> CostGraph:
    return CostGraph(["a", "b", "c"], comp, [4, 4, 4], [0, 1], [1, 2], colocation=[None, "g", "g"])


def test_check_agreement_names_the_nodes_on_each_side():
    with pytest.raises(AgreedError) as caught:
        check_agreement(["n0", "n1", "n2"], ["aaaa" * 16, "bbbb" * 16, "aaaa" * 16], "placements", "fix it")
    message = str(caught.value)
    assert "n0, n2: aaaaaaaaaaaa" in message
    assert "n1: bbbbbbbbbbbb" in message
    assert message.endswith("fix it")


def test_check_agreement_passes_when_all_equal():
    check_agreement(["n0", "n1"], ["x", "x"], "placements", "")


def test_graph_digest_ignores_costs_but_not_structure():
    assert graph_digest(_graph([1, 2, 3])) == graph_digest(_graph([3, 2, 1]))
    other = CostGraph(["a", "b", "c"], [1, 2, 3], [4, 4, 4], [0, 0], [1, 2])
    assert graph_digest(_graph([1, 2, 3])) != graph_digest(other)


def test_placement_digest_is_the_hash_of_the_placement_file(tmp_path):
    import hashlib

    from pardnn.io import format_placement, write_placement

    graph = CostGraph(["a", "b"], [1, 1], [4, 4], [0], [1])
    text = format_placement(graph, np.array([0, 1]))
    assert text == "a 0\nb 1\n"
    write_placement(tmp_path / "placement.txt", graph, np.array([0, 1]))
    assert (tmp_path / "placement.txt").read_bytes() == text.encode()
    assert placement_digest(text) == hashlib.sha256(b"a 0\nb 1\n").hexdigest()


def test_variables_digest_depends_on_values_not_on_order():
    w, b = np.ones((2, 2), np.float32), np.zeros(2, np.float32)
    assert variables_digest([("w", w), ("b", b)]) == variables_digest([("b", b), ("w", w)])
    assert variables_digest([("w", w), ("b", b)]) != variables_digest([("w", w * 2), ("b", b)])


def test_average_costs_on_one_node_is_the_graph_itself():
    graph = _graph([1, 2, 3])
    assert average_costs(single_node(), graph) is graph


class _TwoNodes:
    """Two nodes seen from one: ``allreduce`` combines this node's array with the other node's next one
    (average_costs reduces comp_us, out_bytes, edge_bytes in that order)."""

    nodes = ("n0", "n1")
    size = 2

    def __init__(self, other: CostGraph) -> None:
        self.theirs = [other.comp_us, other.out_bytes, other.edge_bytes]

    def allgather(self, value):
        return [value, value]

    def allreduce(self, array, op="sum"):
        theirs = self.theirs.pop(0)
        return array + theirs if op == "sum" else np.maximum(array, theirs)


def _costed(comp: list[float], out: list[int], edges: list[int], memory: int | None = None) -> CostGraph:
    return CostGraph(["a", "b", "c"], comp, out, [0, 1], [1, 2], edges, colocation=[None, "g", "g"],
                     memory_limit_bytes=memory)


def test_average_costs_keeps_memory_limit_and_group_labels():
    mine = _costed([1, 2, 3], [4, 8, 4], [4, 8], memory=2**20)
    averaged = average_costs(_TwoNodes(_costed([3, 4, 5], [6, 2, 4], [6, 2])), mine)
    assert averaged.comp_us.tolist() == [2, 3, 4]
    assert averaged.out_bytes.tolist() == [6, 8, 4]
    assert averaged.edge_bytes.tolist() == [6, 8]
    assert averaged.memory_limit_bytes == 2**20
    assert averaged.group_names == mine.group_names and averaged.colocation.tolist() == mine.colocation.tolist()
    assert averaged.name == mine.name and averaged.names == mine.names
    assert graph_digest(averaged) == graph_digest(mine)


def test_check_variables_names_the_nodes_and_the_first_differing_variable():
    same = variable_digests([("w:0", np.ones(3)), ("w/Adam:0", np.zeros(3))])
    check_variables(["n0", "n1"], [same, dict(same)])
    drifted = {**same, "w:0": variable_digests([("w:0", np.ones(3) * 2)])["w:0"]}
    with pytest.raises(Inconsistent) as caught:
        check_variables(["n0", "n1", "n2"], [same, drifted, same])
    message = str(caught.value)
    assert "nodes n0, n2 | n1" in message and "first differing variable 'w:0' of 2 compared" in message
    assert caught.value.status == "inconsistent" and "\n" not in message


def test_variable_digests_see_dtype_and_shape():
    digests = variable_digests([("a", np.zeros(4, np.float32)), ("b", np.zeros(4, np.float64)),
                                ("c", np.zeros((2, 2), np.float32))])
    assert len(set(digests.values())) == 3


@pytest.mark.tf
def test_agreed_variables_are_the_weights_and_the_optimizer_state_not_per_replica_statistics():
    from tests.launcher.standin import Job, build

    for optimizer in ("adam", "momentum"):
        trained = build(Job(optimizer=optimizer))
        names = sorted(v.op.name for v in agreed_variables(trained.graph, trained.variables))
        every = sorted(v.op.name for v in trained.variables)
        assert "input_mean" in every and "input_mean" not in names  # a moving statistic of each node's inputs
        kernels = [f"dense{i}/{part}" for i in range(3) for part in ("bias", "kernel")]
        slots = {"adam": [f"{k}/Adam{suffix}" for k in kernels for suffix in ("", "_1")],
                 "momentum": [f"{k}/Momentum" for k in kernels]}[optimizer]
        powers = ["beta1_power", "beta2_power"] if optimizer == "adam" else []
        assert names == sorted(kernels + slots + powers)
