"""Every node must place its replica the same way: digests, cost averaging, and the check.

Each node profiles its own replica, so measured op times differ a little between nodes, and
ParDNN (deterministic for identical inputs) could then place them differently. So nodes first
check that they captured the same graph (:func:`graph_digest`), then share costs
(:func:`average_costs`: mean op time, largest tensor size, identical bytes on every node since an
allreduce gives every rank the same result), then partition, then compare placement digests
(:func:`placement_digest` of the placement file's text). A mismatch is an
:class:`~launcher.failure.AgreedError` naming the nodes on each side, found by all ranks at once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from launcher.errors import AgreedError
from launcher.topology import Topology
from pardnn.graph import CostGraph

__all__ = ["average_costs", "check_agreement", "graph_digest", "placement_digest", "variables_digest"]


def _hash_arrays(*parts: Any) -> str:
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, np.ndarray):
            digest.update(str(part.dtype).encode())
            digest.update(np.ascontiguousarray(part).tobytes())
        else:
            digest.update(repr(part).encode())
        digest.update(b"\0")
    return digest.hexdigest()


def graph_digest(graph: CostGraph) -> str:
    """SHA-256 of the graph's structure: op names and types, edges, kinds, colocation (not costs)."""
    return _hash_arrays("\n".join(graph.names), "\n".join(graph.ops), graph.edge_src.astype(np.int64),
                        graph.edge_dst.astype(np.int64), graph.kind.astype(np.int64),
                        graph.colocation.astype(np.int64), graph.group_names)


def placement_digest(text: str) -> str:
    """SHA-256 of the placement file's text (:func:`pardnn.io.format_placement`: ``op_name device`` lines)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def variables_digest(named_values: Sequence[tuple[str, np.ndarray]]) -> str:
    """SHA-256 of variable values (by name order): equal on every node when data parallelism works."""
    parts: list[Any] = []
    for name, value in sorted(named_values, key=lambda item: item[0]):
        array = np.asarray(value)
        parts += [name, array.shape, array]
    return _hash_arrays(*parts)


def check_agreement(nodes: Sequence[str], values: Sequence[str], what: str, hint: str) -> None:
    """Raise :class:`AgreedError` unless every node has the same value (nodes grouped by value)."""
    groups: dict[str, list[str]] = {}
    for node, value in zip(nodes, values, strict=True):
        groups.setdefault(value, []).append(node)
    if len(groups) <= 1:
        return
    sides = "; ".join(f"{', '.join(members)}: {value[:12]}" for value, members in groups.items())
    raise AgreedError(f"nodes computed different {what} ({sides}); {hint}")


def average_costs(topology: Topology, graph: CostGraph) -> CostGraph:
    """The same :class:`CostGraph` on every node: mean ``comp_us``, largest ``out_bytes``/edge bytes.

    Everything else (colocation group labels, ``memory_limit_bytes``, names) is the graph's own.
    Raises :class:`AgreedError` when the nodes' graphs differ in structure. Collective.
    """
    check_agreement(topology.nodes, topology.allgather(graph_digest(graph)), "training graphs",
                    "every node must build the same job with the same versions of TensorFlow, pardnn and jobs/")
    if topology.size == 1:
        return graph
    comp = topology.allreduce(graph.comp_us, "sum") / topology.size
    out_bytes = topology.allreduce(graph.out_bytes, "max")
    edge_bytes = topology.allreduce(graph.edge_bytes, "max")
    return graph.replace(comp_us=comp, out_bytes=out_bytes, edge_bytes=edge_bytes)
