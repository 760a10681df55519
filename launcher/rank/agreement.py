"""Every node must place its replica the same way: digests, cost averaging, and the check.

:func:`graph_digest`, :func:`average_costs` and :func:`placement_digest` make the nodes agree on the graph,
its costs and the placement; :func:`agreed_variables` and :func:`check_variables` compare the replicas'
weights after training. :func:`agree` raises an error on every rank when any rank has one, and
:func:`raise_everywhere` runs a step that way. A mismatch is an :class:`~launcher.rank.failure.AgreedError`
naming the nodes on each side. Why and what is compared: docs/notes-launcher.md.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from launcher.cluster.topology import Topology
from launcher.errors import AgreedError, Inconsistent
from launcher.rank.failure import exit_code, status_of
from pardnn.costs.graph import CostGraph
from pardnn.errors import PardnnError

__all__ = [
    "agree",
    "agreed_variables",
    "average_costs",
    "check_agreement",
    "check_variables",
    "graph_digest",
    "placement_digest",
    "raise_everywhere",
    "variable_digests",
    "variables_digest",
]

# The optimizers' update kernels: ApplyAdam, ResourceApplyAdam, ResourceSparseApplyMomentum, ...
_APPLY = re.compile(r"(Resource)?(Sparse)?Apply[A-Z]\w*")
_VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable"})
_READS = frozenset({"ReadVariableOp", "Identity"})


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


def variable_digests(named_values: Sequence[tuple[str, np.ndarray]]) -> dict[str, str]:
    """SHA-256 of each variable's value (dtype, shape and bytes), by name."""
    return {name: _hash_arrays(np.asarray(value).shape, np.asarray(value)) for name, value in named_values}


def agreed_variables(graph: Any, variables: Sequence[Any]) -> list[Any]:
    """Of ``variables``, those every replica must hold equal: trainable ones and the optimizer's state.

    The optimizer's state is found from the graph (no TensorFlow import): every variable whose
    handle, reference or read value is an input of an ``*Apply*`` update op. Order is kept.
    """
    by_op = {v.op.name: v for v in variables}
    wanted = {v.op.name for v in graph.get_collection("trainable_variables")} & by_op.keys()
    for op in graph.get_operations():
        if not _APPLY.fullmatch(op.type):
            continue
        for tensor in op.inputs:
            source = tensor.op
            if source.type in _READS and source.inputs:
                source = source.inputs[0].op
            if source.type in _VARIABLE_OPS and source.name in by_op:
                wanted.add(source.name)
    return [v for v in variables if v.op.name in wanted]


def check_variables(nodes: Sequence[str], digests: Sequence[Mapping[str, str]]) -> None:
    """Raise :class:`Inconsistent` unless every node holds the same values (``digests``: per node, by name)."""
    names = sorted(set().union(*(d.keys() for d in digests)))
    for name in names:
        groups: dict[str | None, list[str]] = {}
        for node, values in zip(nodes, digests, strict=True):
            groups.setdefault(values.get(name), []).append(node)
        if len(groups) > 1:
            sides = " | ".join(", ".join(members) for members in groups.values())
            raise Inconsistent(
                f"the replicas differ after training (nodes {sides}): first differing variable {name!r} of "
                f"{len(names)} compared (trainable weights and optimizer state); data parallelism did not keep "
                "them equal: check that every node runs the same versions and that Horovod averaged every gradient")


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


def agree(topology: Topology, what: str, error: PardnnError | None) -> None:
    """Raise an :class:`AgreedError` on every rank if ``error`` happened on any (collective).

    The same message from every node is given once, with its exit code and status; different ones
    are named by node.
    """
    outcome = None if error is None else (str(error), exit_code(error), status_of(error))
    outcomes = topology.allgather(outcome)
    failed = [(node, o) for node, o in zip(topology.nodes, outcomes, strict=True) if o is not None]
    if not failed:
        return
    code = max(o[1] for _, o in failed)
    messages: dict[str, list[str]] = {}
    for node, (message, _, _) in failed:
        messages.setdefault(message, []).append(node)
    if len(messages) == 1 and len(failed) == topology.size:
        agreed = AgreedError(failed[0][1][0], code)
        agreed.status = failed[0][1][2]
        raise agreed
    raise AgreedError(f"{what} failed on " + "; ".join(f"node {', '.join(nodes)}: {message}"
                                                       for message, nodes in messages.items()), code)


def raise_everywhere(topology: Topology, what: str, action: Callable[[], Any]) -> Any:
    """Run ``action`` on every node; if it raises a PardnnError anywhere, raise it everywhere (collective)."""
    try:
        result, error = action(), None
    except PardnnError as caught:
        result, error = None, caught
    agree(topology, what, error)
    return result
