"""The registry of every placer by name: ParDNN (``"pardnn"``), the paper's algorithm alone
(``"pardnn-paper"``: no guard, no refinement, no run order) and the baselines
(:data:`pardnn.baselines.BASELINES`). Each is a :class:`~pardnn.placement.placer.Placer`, called like
:func:`pardnn.partition`.

The CLI's ``--algorithm`` choices, the settings' ``algorithm`` values, ``pardnn-launch --placer``, the
guard's candidates (the ``cheap`` baselines) and the benchmarks are built from :data:`PLACERS`.
"""

from __future__ import annotations

from functools import partial

from pardnn.baselines import BASELINES
from pardnn.partitioner import PAPER, partition
from pardnn.placement.placer import Placer
from pardnn.polish.refine import REFINE_SECONDS

__all__ = ["PLACERS", "Placer", "get_placer"]

PLACERS: dict[str, Placer] = {
    "pardnn": Placer("pardnn", partition, options={"guarded": True, "refine_seconds": REFINE_SECONDS, "ordered": True},
                     order_option="ordered", memory_heuristics=True, complete=True,
                     summary="ParDNN: the paper's slicing, mapping and memory heuristics, then the guard, the "
                             "refinement and the run order"),
    "pardnn-paper": Placer("pardnn-paper", partial(partition, **PAPER), memory_heuristics=True, complete=True,
                           summary="the paper's algorithm alone (no guard, refinement or run order)"),
    **BASELINES,
}


def get_placer(name: str) -> Placer:
    """The placer called ``name``; raises ``ValueError`` listing the valid names.

    Every placer has one signature, ``placer(graph, machine, *, memory_heuristic="auto", **options)``,
    and returns a :class:`~pardnn.placement.result.Result`:

    >>> from pardnn import CostGraph, Machine
    >>> g = CostGraph(["a", "b", "c"], [1.0, 1.0, 1.0], [0, 0, 0], src=[0, 1], dst=[1, 2])
    >>> get_placer("round_robin")(g, Machine(2)).placement.tolist()
    [0, 1, 0]
    >>> "pardnn" in PLACERS and "metis" in PLACERS
    True
    >>> get_placer("fastest")
    Traceback (most recent call last):
    ...
    ValueError: unknown placer 'fastest'; expected one of pardnn, pardnn-paper, ...
    """
    try:
        return PLACERS[name]
    except KeyError:
        raise ValueError(f"unknown placer {name!r}; expected one of {', '.join(PLACERS)}") from None
