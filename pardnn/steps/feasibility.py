"""Proofs of infeasibility: memory demands that no placement can meet.

:func:`check_feasible` raises :class:`~pardnn.errors.InfeasibleError` only with a proof (residual bytes
over total memory, a unit's over every device, an op's working set, :func:`op_need_bytes`, over every
device); a heuristic that finds nothing raises :class:`~pardnn.errors.NoPlacementFoundError` instead.
:func:`infeasible_message` words the shortfall. The proofs: docs/notes-partitioner.md. O(|V| + |E|).
"""

from __future__ import annotations

import numpy as np

from pardnn.costs.graph import CostGraph, Kind
from pardnn.costs.machine import Machine, format_bytes
from pardnn.emulation.memory import accumulating_ops
from pardnn.errors import InfeasibleError
from pardnn.steps.units import units_of

__all__ = ["check_feasible", "check_residual_capacity", "infeasible_message", "op_need_bytes"]


def infeasible_message(device: int, peak: int, limit: int, machine: Machine, extra: str = "") -> str:
    shortfall = peak - limit
    return (f"device {device} needs {format_bytes(peak)} at its peak but its limit is {format_bytes(limit)} "
            f"({format_bytes(int(machine.memory_bytes[device]))} less the {machine.reserve:.0%} reserve): "
            f"{format_bytes(shortfall)} short{extra}. Options: more devices (--devices), a smaller batch, "
            f"or a lower reserve (--reserve).")


def _residual(graph: CostGraph) -> np.ndarray:
    return np.where(graph.kind == Kind.RESIDUAL, graph.out_bytes, 0).astype(np.int64)


def check_residual_capacity(graph: CostGraph, machine: Machine) -> None:
    """Proofs (a) and (b): raise :class:`InfeasibleError` when no placement can hold the residual bytes.

    Residual ops (variables, optimizer slots) live all step, so their sum must fit in the devices'
    total capacity, and every colocation unit's residual bytes must fit on some device.
    """
    limits = machine.limits_bytes
    residual = _residual(graph)
    total = sum(residual.tolist())  # Python integers: K limits near 2**63 add up past int64
    capacity = sum(limits.tolist())
    if total > capacity:
        raise InfeasibleError(
            f"the residual ops (variables, optimizer state) alone need {format_bytes(total)} but the "
            f"{machine.devices} devices hold {format_bytes(capacity)} after the {machine.reserve:.0%} reserve: "
            f"{format_bytes(total - capacity)} short. Options: more devices (--devices), a smaller model, "
            f"or a lower reserve (--reserve).")
    of = units_of(graph)
    per_unit = np.bincount(of, weights=residual)
    if per_unit.size and per_unit.max() > limits.max():
        unit = int(np.argmax(per_unit))
        member = int(np.flatnonzero(of == unit)[0])
        need, limit = int(per_unit[unit]), int(limits.max())
        raise InfeasibleError(
            f"op {graph.names[member]!r} and its colocation group hold {format_bytes(need)} of "
            f"residual state, more than any device's limit ({format_bytes(limit)}): "
            f"{format_bytes(need - limit)} short. Options: larger devices, a smaller model, "
            f"or a lower reserve (--reserve).")


def op_need_bytes(graph: CostGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Proof (c)'s lower bound per op: ``(need, unit residual, own output, inputs)``, need = their sum.

    ``need[v]`` bytes are resident on v's device at v's start under any placement (module docstring).
    """
    kind, out = graph.kind, graph.out_bytes.astype(np.int64)
    of = units_of(graph)
    unit_residual = np.bincount(of, weights=_residual(graph)).astype(np.int64)[of]
    own = np.where(kind == Kind.NORMAL, out, 0)
    src, dst, nbytes = graph.edge_src, graph.edge_dst, graph.edge_bytes.astype(np.int64)
    same_unit = of[src] == of[dst]
    # u on v's device: its output buffer (normal) or its residual bytes (unless v's unit counts them).
    local = np.where((kind[src] == Kind.NORMAL) | ((kind[src] == Kind.RESIDUAL) & ~same_unit), out[src], 0)
    held = np.where(same_unit, local, np.minimum(local, nbytes))  # elsewhere: a copy of >= b bytes
    # A sum TensorFlow may do in place (pardnn.emulation.memory, "In-place sums") need not hold its inputs at once.
    held = np.where((nbytes > 0) & (graph.comp_us[dst] > 0) & ~accumulating_ops(graph)[dst], held, 0)
    inputs = np.bincount(dst, weights=held, minlength=graph.n).astype(np.int64)
    return unit_residual + own + inputs, unit_residual, own, inputs


def check_feasible(graph: CostGraph, machine: Machine) -> None:
    """Raise :class:`InfeasibleError` with a proof (a), (b) or (c) when no placement meets memory.

    Silent when none of the proofs applies — which does not mean a fitting placement exists.
    O(|V| + |E|).
    """
    if not machine.bounded:
        return
    check_residual_capacity(graph, machine)
    need, unit_residual, own, inputs = op_need_bytes(graph)
    limit = int(machine.limits_bytes.max())
    if need.size == 0 or int(need.max()) <= limit:
        return
    v = int(np.argmax(need))
    parts = [f"its output {format_bytes(int(own[v]))}" if own[v] else "",
             f"its inputs {format_bytes(int(inputs[v]))}" if inputs[v] else "",
             f"its colocation group's residual state {format_bytes(int(unit_residual[v]))}" if unit_residual[v] else ""]
    raise InfeasibleError(
        f"op {graph.names[v]!r} needs {format_bytes(int(need[v]))} on its device while it runs "
        f"({', '.join(p for p in parts if p)}), more than any device's limit ({format_bytes(limit)}): "
        f"{format_bytes(int(need[v]) - limit)} short on every device. Options: devices with more memory "
        f"(more devices do not help: one op runs on one device), a smaller batch, or a lower reserve (--reserve).")
