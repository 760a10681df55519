"""Synthetic DNN training graphs for tests and benchmarks.

:func:`dnn_graph` builds one training step shaped like a real one, with TensorFlow-style names:
forward layers (chains and fork-join blocks, some residual), their mirrored backward pass, variables
with Adam slots and updates; :func:`chain_graph` a plain chain. Shapes, sizes and costs:
docs/notes-partitioner.md.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import numpy as np

from pardnn.costs.graph import CostGraph, Kind
from pardnn.costs.machine import DEFAULT_BANDWIDTH_BPS, DEFAULT_LATENCY_US

__all__ = ["chain_graph", "dnn_graph"]

KIB, MIB = 1 << 10, 1 << 20
ACTIVATION_BYTES, KERNEL_BYTES, VECTOR_BYTES = (64 * KIB, 64 * MIB), (16 * KIB, 64 * MIB), (1 * KIB, 64 * KIB)
INNER_DIM = (64, 2048)  # the contracted dimension of a layer's MatMul/Conv2D
FLOP_PER_US, MEMORY_BYTES_PER_US, LAUNCH_US = 15e6, 900e3, 5.0

_ZERO, _LIGHT, _HEAVY, _UPDATE = range(4)  # cost classes
_NONE, _ACT, _PARAM, _KERNEL, _VECTOR = range(5)  # size classes
_IN, _GRAD, _SKIP = -1, -2, -3  # a layer's external edge ends: its input, upstream gradient, skip source
_LOSS = ("loss/SparseSoftmaxCrossEntropyWithLogits", "loss/Mean", "gradients/loss/Mean_grad/Tile",
         "gradients/loss/SparseSoftmaxCrossEntropyWithLogits_grad/mul")
_LOSS_TYPES = ("SparseSoftmaxCrossEntropyWithLogits", "Mean", "Tile", "Mul")
_WEIGHTED = {  # forward type -> input-gradient (type, name), weight-gradient (type, name)
    "MatMul": (("MatMul", "MatMul"), ("MatMul", "MatMul_1")),
    "Conv2D": (("Conv2DBackpropInput",) * 2, ("Conv2DBackpropFilter",) * 2),
    "BiasAdd": (("Identity",) * 2, ("BiasAddGrad",) * 2),
    "Mul": (("Mul", "Mul"), ("Mul", "Mul_1")),
}
_GRAD_TYPE = {"Relu": "ReluGrad", "Sigmoid": "SigmoidGrad", "Tanh": "TanhGrad", "Mul": "Mul",
              "BatchMatMulV2": "BatchMatMulV2", "ConcatV2": "Split", "AddV2": "Identity"}
_SAVES_OUTPUT = {"Relu", "Sigmoid", "Tanh", "Mul"}  # their gradient reads their output
_HEAVY_TYPES = {"MatMul", "Conv2D", "BatchMatMulV2"}
_ACTIVATIONS = ("Relu", "Sigmoid", "Tanh")


@dataclass(frozen=True)
class _Template:
    """One layer: forward nodes ``0..n_fwd-1``, then backward nodes ``n_fwd..`` (the first consumes
    the upstream gradient); negative edge ends are the layer's external ends."""

    parts: tuple[tuple[str, str], ...]  # (prefix, suffix) of each name around "layer_<l>/"
    ops: tuple[str, ...]
    table: np.ndarray  # rows: cost class, size class, kind, owner (variable node, or -1)
    src: np.ndarray
    dst: np.ndarray
    n_fwd: int
    out: int  # forward node producing the layer output
    gout: int  # backward node producing the gradient of the layer input
    skip: bool


class _LayerNodes:
    """The nodes and edges of one layer template as they are added, in order (node ids are list indices)."""

    def __init__(self) -> None:
        self.nodes: list[tuple[str, str, str, int, int, int, int]] = []  # prefix, suffix, op, cost, size, kind, owner
        self.src: list[int] = []
        self.dst: list[int] = []

    def add(self, prefix: str, suffix: str, op: str, cost: int, size: int, kind: int = Kind.NORMAL,
            owner: int = -1) -> int:
        self.nodes.append((prefix, suffix, op, cost, size, kind, owner))
        return len(self.nodes) - 1

    def edges(self, ends: list[int], to: int) -> None:
        self.src.extend(ends)
        self.dst.extend([to] * len(ends))


def _template(heavy: str, width: int, depth: int, nvars: int, skip: bool, dropout: bool) -> _Template:
    """One layer shape: its variables and forward ops here, then the mirrored backward ops and the updates."""
    layer = _LayerNodes()
    branches = _branch_ops(heavy, width, depth, nvars, dropout)
    variables: dict[str, tuple[int, int, int]] = {}
    for _, _, var in itertools.chain.from_iterable(branches):
        if var:  # the variable, then its two Adam slots
            v = layer.add("", var, "VarHandleOp", _ZERO, _KERNEL if var.endswith("kernel") else _VECTOR,
                          Kind.RESIDUAL, len(layer.nodes))
            m = layer.add("", f"{var}/Adam", "VarHandleOp", _ZERO, _PARAM, Kind.RESIDUAL, v)
            variables[var] = (v, m, layer.add("", f"{var}/Adam_1", "VarHandleOp", _ZERO, _PARAM, Kind.RESIDUAL, v))
    forward: list[tuple[int, str, str, list[int], str]] = []  # node, type, name, inputs, variable
    ends = []
    for branch in branches:
        previous = _IN
        for op, name, var in branch:
            node = layer.add("", name, op, _HEAVY if op in _HEAVY_TYPES else _LIGHT, _ACT)
            layer.edges([previous] + ([variables[var][0]] if var else []), node)
            forward.append((node, op, name, [previous], var))
            previous = node
        ends.append(previous)
    out = ends[0]
    if width > 1:
        out = layer.add("", "concat", "ConcatV2", _LIGHT, _ACT)
        layer.edges(ends, out)
        forward.append((out, "ConcatV2", "concat", ends, ""))
    if skip:
        body, out = out, layer.add("", "add", "AddV2", _LIGHT, _ACT)
        layer.edges([body, _SKIP], out)
        forward.append((out, "AddV2", "add", [body], ""))
    n_fwd = len(layer.nodes)
    gout = _add_backward(layer, forward, variables, out)
    prefixes, suffixes, ops, *numbers = zip(*layer.nodes, strict=True)
    return _Template(tuple(zip(prefixes, suffixes, strict=True)), ops, np.array(numbers, np.int64),
                     np.array(layer.src, np.int64), np.array(layer.dst, np.int64), n_fwd, out, gout, skip)


def _branch_ops(heavy: str, width: int, depth: int, nvars: int, dropout: bool) -> list[list[tuple[str, str, str]]]:
    """Each branch's ops as (type, name, variable or ""): one branch for a plain chain, ``width`` for a block."""
    if width == 1:  # plain chain: weighted ops, an activation, maybe dropout
        weighted = [(heavy, heavy, "kernel"), ("BiasAdd", "BiasAdd", "bias"), ("Mul", "Mul", "gamma")]
        return [weighted[:nvars] + [("Relu", "Relu", "")] + ([("Mul", "dropout/Mul", "")] if dropout else [])]
    return [  # fork-join block: the first nvars branches start with a weighted op
        [(heavy, f"branch_{b}/{heavy}", f"branch_{b}/kernel") if b < nvars
         else ("BatchMatMulV2", f"branch_{b}/BatchMatMulV2", "")]
        + [(a, f"branch_{b}/{a}", "") for a in itertools.islice(itertools.cycle(_ACTIVATIONS), b, b + depth - 1)]
        for b in range(width)
    ]


def _add_backward(layer: _LayerNodes, forward: list[tuple[int, str, str, list[int], str]],
                  variables: dict[str, tuple[int, int, int]], out: int) -> int:
    """The gradient ops in reverse topological order, then the variables' updates; returns the node of
    the gradient of the layer input."""
    upstream = {out: _GRAD}
    input_grads, updates = [], []
    for node, op, name, inputs, var in reversed(forward):  # the mirror: reverse topological order
        cost = _HEAVY if op in _HEAVY_TYPES else _LIGHT
        if var:
            (in_type, in_name), (w_type, w_name) = _WEIGHTED[op]
            grad = layer.add("gradients/", f"{name}_grad/{in_name}", in_type, cost, _ACT)
            layer.edges([upstream[node], variables[var][0]], grad)
            weight = layer.add("gradients/", f"{name}_grad/{w_name}", w_type, cost, _PARAM, Kind.NORMAL,
                               variables[var][0])
            layer.edges([upstream[node], inputs[0]], weight)
            updates.append((var, weight))
        else:
            grad = layer.add("gradients/", f"{name}_grad/{_GRAD_TYPE[op]}", _GRAD_TYPE[op], cost, _ACT)
            saved = [node] if op in _SAVES_OUTPUT else inputs if op == "BatchMatMulV2" else []
            layer.edges([upstream[node], *saved], grad)
        for source in inputs:
            if source == _IN:
                input_grads.append(grad)
            else:
                upstream[source] = grad
    gout = input_grads[0]
    if len(input_grads) > 1:
        gout = layer.add("gradients/", "AddN", "AddN", _LIGHT, _ACT)
        layer.edges(input_grads, gout)
    for var, weight in updates:
        v, m, s = variables[var]
        update = layer.add("Adam/update_", f"{var}/ResourceApplyAdam", "ResourceApplyAdam", _UPDATE, _NONE,
                           Kind.REFERENCE, v)
        layer.edges([weight, v, m, s], update)
    return gout


@functools.lru_cache(maxsize=8)
def _catalogue(branches: int, block_share: float, skip_share: float) -> tuple[tuple[_Template, ...], np.ndarray]:
    """Every layer shape (heavy op, width, depth, variables, skip, dropout) and its probability."""
    templates, probs = [], []
    widths = range(max(2, branches - 1), branches + 2)
    for heavy, skip in itertools.product(("MatMul", "Conv2D"), (False, True)):
        p_common = 0.5 * (skip_share if skip else 1 - skip_share)
        for nvars, dropout in itertools.product((1, 2, 3), (False, True)):
            templates.append(_template(heavy, 1, 1, nvars, skip, dropout))
            probs.append(p_common * (1 - block_share) / 6)
        for width, depth, nvars in itertools.product(widths, (1, 2, 3), (1, 2, 3)):
            templates.append(_template(heavy, width, depth, min(nvars, width), skip, False))
            probs.append(p_common * block_share / (9 * len(widths)))
    probabilities = np.array(probs) / sum(probs)
    probabilities.flags.writeable = False
    return tuple(templates), probabilities


def _draw_layers(rng: np.random.Generator, budget: int, sizes: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Random layer shapes whose sizes add up to ``budget`` within half the smallest shape."""
    live = np.flatnonzero(probs > 0)
    smallest, largest = live[np.argmin(sizes[live])], sizes[live].max()
    keys = rng.choice(sizes.size, size=int(budget / float(sizes @ probs) * 1.1) + 16, p=probs)
    ends = np.cumsum(sizes[keys])
    keep = int(np.searchsorted(ends, budget - largest, side="right"))
    chosen = keys[:keep].tolist()
    left = budget - (int(ends[keep - 1]) if keep else 0)
    while left >= sizes[smallest]:  # the last few layers: shapes that still fit
        fits = live[sizes[live] <= left]
        chosen.append(int(rng.choice(fits, p=probs[fits] / probs[fits].sum())))
        left -= int(sizes[chosen[-1]])
    if 2 * left > sizes[smallest] or not chosen:
        chosen.append(int(smallest))
    return np.array(chosen, np.int64)


def _log_uniform(uniform: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
    low, high = np.log(bounds[0]), np.log(bounds[1])
    return np.exp(low + uniform * (high - low))


def dnn_graph(
    ops: int,
    *,
    seed: int = 0,
    name: str | None = None,
    branches: int = 6,
    block_share: float = 0.6,
    skip_share: float = 0.5,
    ccr: float | None = None,
) -> CostGraph:
    """A synthetic training-step graph of about ``ops`` ops (the module docstring has its shape and costs).

    Parameters
    ----------
    ops:
        Requested op count. The graph has ``ops`` ± half its smallest layer shape: ± 4 ops with the
        default shares (within 5 % from 80 ops on), more when ``block_share`` or ``skip_share`` is 1.
    seed:
        Seed of ``numpy.random.default_rng``; equal arguments give byte-identical graphs.
    name:
        Graph name; default ``dnn-<ops>-s<seed>``.
    branches:
        Typical parallel branches of a fork-join block (``branches - 1`` to ``branches + 1``, at
        least 2): the knob for the degree of parallelism.
    block_share, skip_share:
        Probability that a layer is a fork-join block, and that it ends in a residual connection.
    ccr:
        If given, the outputs of normal ops are rescaled so that the graph's communication-to-computation
        ratio (every edge cut at 150 GB/s and 25 µs, over the total compute) is ``ccr``.

    Raises
    ------
    ValueError
        An option out of range, ``ops`` below the smallest graph, or ``ccr`` not above the floor set by
        edge latency and parameter transfers.

    Notes
    -----
    O(|V| + |E|) NumPy work, plus Python work per layer and per op name.
    """
    if branches < 2 or not 0 <= block_share <= 1 or not 0 <= skip_share <= 1:
        raise ValueError(f"need branches >= 2 and shares in [0, 1]; got {branches=}, {block_share=}, {skip_share=}")
    if ccr is not None and not ccr > 0:
        raise ValueError(f"ccr must be > 0, got {ccr}")
    templates, probs = _catalogue(branches, block_share, skip_share)
    sizes = np.array([len(t.ops) for t in templates])
    if ops < 5 + sizes[probs > 0].min():
        raise ValueError(f"ops = {ops} is below the smallest graph these options give ({5 + sizes[probs > 0].min()})")
    rng = np.random.default_rng(seed)
    keys = _draw_layers(rng, ops - 5, sizes, probs)  # 5: the input op and the four loss ops
    skip_from = np.arange(keys.size) - rng.integers(2, 5, keys.size)
    table, layer_of, edge_src, edge_dst = _layout(templates, sizes, keys, skip_from)
    out_bytes, comp_us = _costs(rng, table, layer_of, keys.size)
    _, size, kind, owner = table
    if ccr is not None:
        out_bytes = _rescale_to_ccr(out_bytes, comp_us, kind, edge_src, ccr)
    names, op_types = _names(templates, keys)
    return CostGraph(
        names, comp_us, out_bytes, edge_src, edge_dst, kind=kind.astype(np.int8),
        colocation=np.where(kind != Kind.NORMAL, owner, -1), ops=op_types,
        param_bytes=np.where((size == _KERNEL) | (size == _VECTOR), out_bytes, 0),
        name=name if name is not None else f"dnn-{ops}-s{seed}",
    )


def _layout(templates: tuple[_Template, ...], sizes: np.ndarray, keys: np.ndarray,
            skip_from: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Where every node and edge goes: input, forward layers 0..L-1, loss, backward layers L-1..0, each
    template's layers at once. Returns the nodes' template rows (cost class, size class, kind, owner: a
    (4, |V|) array), each node's layer, and the edges' sources and destinations."""
    layers = keys.size
    n_fwd = np.array([t.n_fwd for t in templates])[keys]
    n_bwd = sizes[keys] - n_fwd
    f_base = 1 + np.cumsum(n_fwd) - n_fwd
    loss = 1 + int(n_fwd.sum())
    b_base = loss + 4 + np.cumsum(n_bwd[::-1])[::-1] - n_bwd
    n = loss + 4 + int(n_bwd.sum())
    table = np.repeat([[_LIGHT], [_ACT], [Kind.NORMAL], [-1]], n, axis=1)
    cost, size, kind, owner = table  # views of its rows
    layer_of = np.zeros(n, np.int64)
    layer_of[loss : loss + 4] = layers - 1
    out, gin, gout = np.empty((3, layers), np.int64)
    by_template = np.split(np.argsort(keys, kind="stable"), np.cumsum(np.bincount(keys, minlength=len(templates)))[:-1])
    node_ids = []
    for t, at in zip(templates, by_template, strict=True):
        local = np.arange(len(t.ops))
        rows = np.where(local < t.n_fwd, f_base[at, None] + local, b_base[at, None] + local - t.n_fwd)
        cost[rows], size[rows], kind[rows], layer_of[rows] = *t.table[:3], at[:, None]
        owner[rows] = np.where(t.table[3] >= 0, rows[:, t.table[3]], -1)
        out[at], gin[at], gout[at] = rows[:, t.out], rows[:, t.n_fwd], rows[:, t.gout]
        node_ids.append(rows)

    external = np.stack([  # per layer, the nodes behind _IN, _GRAD, _SKIP
        np.concatenate(([0], out[:-1])),
        np.concatenate((gout[1:], [loss + 3])),
        np.where(skip_from >= 0, out[np.maximum(skip_from, 0)], 0),
    ], axis=1)
    skip_back = np.array([t.skip for t in templates])[keys] & (skip_from >= 0)  # residual gradients
    src = [np.array([out[-1], 0, loss, loss + 1, loss + 2, loss]), gin[skip_back]]
    dst = [np.array([loss, loss, loss + 1, loss + 2, loss + 3, loss + 3]), gin[skip_from[skip_back]]]
    for t, at, rows in zip(templates, by_template, node_ids, strict=True):
        ends = np.concatenate((rows, external[at]), axis=1)  # -1, -2, -3 -> the last three columns
        src.append(ends[:, np.where(t.src >= 0, t.src, len(t.ops) - 1 - t.src)].ravel())
        dst.append(ends[:, np.where(t.dst >= 0, t.dst, len(t.ops) - 1 - t.dst)].ravel())
    return table, layer_of, np.concatenate(src), np.concatenate(dst)


def _costs(rng: np.random.Generator, table: np.ndarray, layer_of: np.ndarray,
           layers: int) -> tuple[np.ndarray, np.ndarray]:
    """Each node's output bytes and compute time (µs), drawn as the module docstring says (``table``
    and ``layer_of`` as :func:`_layout` returns them)."""
    cost, size, _, owner = table
    size_draw = rng.random(layer_of.size)
    activation = _log_uniform(rng.random(layers), ACTIVATION_BYTES)[layer_of] * 2.0 ** (size_draw - 0.5)
    activation = np.clip(activation, *ACTIVATION_BYTES)
    inner = _log_uniform(rng.random(layers), INNER_DIM)[layer_of]
    out_bytes = np.where(size == _ACT, activation, 0.0)
    out_bytes = np.where(size == _KERNEL, _log_uniform(size_draw, KERNEL_BYTES), out_bytes)
    out_bytes = np.where(size == _VECTOR, _log_uniform(size_draw, VECTOR_BYTES), out_bytes).round().astype(np.int64)
    out_bytes = np.where(size == _PARAM, out_bytes[owner], out_bytes)
    # float32 elements: heavy ops do 2 FLOP per output element and inner index, the rest stream memory.
    comp_us = np.where(cost == _HEAVY, 2 * LAUNCH_US + activation / 2 * inner / FLOP_PER_US,
                       LAUNCH_US + 2 * activation / MEMORY_BYTES_PER_US)
    comp_us = np.where(cost == _UPDATE, LAUNCH_US + 7 * out_bytes[owner] / MEMORY_BYTES_PER_US, comp_us)
    comp_us[cost == _ZERO] = 0.0
    return out_bytes, comp_us


def _names(templates: tuple[_Template, ...], keys: np.ndarray) -> tuple[list[str], list[str]]:
    """Each node's name and op type, in node order (layout of :func:`_layout`)."""
    names, op_types = ["input/IteratorGetNext"], ["IteratorGetNext"]
    for backward, order in ((False, range(keys.size)), (True, range(keys.size - 1, -1, -1))):
        if backward:
            names += _LOSS
            op_types += _LOSS_TYPES
        for index in order:
            t = templates[keys[index]]
            part = slice(t.n_fwd, None) if backward else slice(t.n_fwd)
            label = f"layer_{index}/"
            names.extend([prefix + label + suffix for prefix, suffix in t.parts[part]])
            op_types.extend(t.ops[part])
    return names, op_types


def _rescale_to_ccr(out_bytes: np.ndarray, comp_us: np.ndarray, kind: np.ndarray, src: np.ndarray,
                    ccr: float) -> np.ndarray:
    """Scale the outputs of normal ops so that the edges' transfer time is ``ccr`` × total compute."""
    per_us = DEFAULT_BANDWIDTH_BPS / 1e6
    scaled = kind[src] == Kind.NORMAL
    fixed = DEFAULT_LATENCY_US * src.size + out_bytes[src[~scaled]].sum() / per_us
    floor = fixed / comp_us.sum()
    if ccr <= floor:
        raise ValueError(f"ccr = {ccr} is not above this graph's floor {floor:.3g} (edge latency and parameters)")
    factor = (ccr * comp_us.sum() - fixed) / (out_bytes[src[scaled]].sum() / per_us)
    return np.where(kind == Kind.NORMAL, np.round(out_bytes * factor), out_bytes).astype(np.int64)


def chain_graph(ops: int, *, comp_us: float = 100.0, out_bytes: int = MIB, name: str = "chain") -> CostGraph:
    """``op_0 → op_1 → … → op_<ops-1>``, every op with the same cost and size: a hand-checkable graph."""
    return CostGraph([f"op_{i}" for i in range(ops)], np.full(ops, comp_us), np.full(ops, out_bytes, np.int64),
                     np.arange(ops - 1), np.arange(1, ops), ops=["Identity"] * ops, name=name)
