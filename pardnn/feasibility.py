"""What no placement can do: memory demands that no device, or no machine, can meet.

:func:`check_residual_capacity` is a proof of infeasibility (residual bytes over the total
capacity, or one unit's residual bytes over every device); :func:`infeasible_message` words a
device's shortfall with what to change.

Complexity: O(|V|).
"""

from __future__ import annotations

import numpy as np

from pardnn.errors import InfeasibleError
from pardnn.graph import CostGraph, Kind
from pardnn.machine import Machine, format_bytes
from pardnn.units import units_of

__all__ = ["check_residual_capacity", "infeasible_message"]


def infeasible_message(device: int, peak: int, limit: int, machine: Machine, extra: str = "") -> str:
    shortfall = peak - limit
    return (f"device {device} needs {format_bytes(peak)} at its peak but its limit is {format_bytes(limit)} "
            f"({format_bytes(int(machine.memory_bytes[device]))} less the {machine.reserve:.0%} reserve): "
            f"{format_bytes(shortfall)} short{extra}. Options: more devices (--devices), a smaller batch, "
            f"or a lower reserve (--reserve).")


def check_residual_capacity(graph: CostGraph, machine: Machine) -> None:
    """Raise :class:`InfeasibleError` at once when no placement can hold the residual bytes.

    Residual ops (variables, optimizer slots) live all step, so their sum must fit in the devices'
    total capacity, and every colocation unit's residual bytes must fit on some device.
    """
    limits = machine.limits_bytes
    residual = np.where(graph.kind == Kind.RESIDUAL, graph.out_bytes, 0)
    total = int(residual.sum())
    capacity = int(limits.sum())
    if total > capacity:
        raise InfeasibleError(
            f"the residual ops (variables, optimizer state) alone need {format_bytes(total)} but the "
            f"{machine.devices} devices hold {format_bytes(capacity)} after the {machine.reserve:.0%} reserve: "
            f"{format_bytes(total - capacity)} short. Options: more devices (--devices), a smaller model, "
            f"or a lower reserve (--reserve).")
    per_unit = np.bincount(units_of(graph), weights=residual)
    if per_unit.size and per_unit.max() > limits.max():
        unit = int(np.argmax(per_unit))
        member = int(np.flatnonzero(units_of(graph) == unit)[0])
        raise InfeasibleError(
            f"op {graph.names[member]!r} and its colocation group hold {format_bytes(int(per_unit[unit]))} of "
            f"residual state, more than any device's limit ({format_bytes(int(limits.max()))}). Options: "
            f"larger devices, a smaller model, or a lower reserve (--reserve).")
