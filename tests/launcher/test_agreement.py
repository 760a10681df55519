"""Agreement between nodes: digests, the mismatch message, cost sharing on one node."""

from __future__ import annotations

import numpy as np
import pytest

from launcher.agreement import average_costs, check_agreement, graph_digest, placement_digest, variables_digest
from launcher.errors import AgreedError
from launcher.topology import single_node
from pardnn.graph import CostGraph


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


def test_placement_digest_is_the_hash_of_the_placement_file():
    import hashlib

    assert placement_digest(["a", "b"], np.array([0, 1])) == hashlib.sha256(b"a 0\nb 1\n").hexdigest()


def test_variables_digest_depends_on_values_not_on_order():
    w, b = np.ones((2, 2), np.float32), np.zeros(2, np.float32)
    assert variables_digest([("w", w), ("b", b)]) == variables_digest([("b", b), ("w", w)])
    assert variables_digest([("w", w), ("b", b)]) != variables_digest([("w", w * 2), ("b", b)])


def test_average_costs_on_one_node_is_the_graph_itself():
    graph = _graph([1, 2, 3])
    assert average_costs(single_node(), graph) is graph
