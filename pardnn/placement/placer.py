"""A placer, as every part of pardnn sees it: one record, with its public signature generated.

:class:`Placer` ``(name, place, options, cheap)``: ``place(graph, machine, **options)`` gives a
:class:`Placed`; calling the record like :func:`pardnn.partition` times it, evaluates the placement and
returns a :class:`~pardnn.placement.result.Result`. The registry is :data:`pardnn.registry.PLACERS`;
adding a placer is a module and one registry line.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine
from pardnn.emulation.simulate import evaluate_step
from pardnn.placement.result import PartitionReport, Progress, Result, communication_ratio, warn_if_uncosted

__all__ = ["Placed", "Placer", "finish"]


class Placed(NamedTuple):
    """What ``place`` returns: a device per op, the placer's details, and optionally a run order
    (each op's position in its device's sequence, which the evaluation then assumes)."""

    placement: np.ndarray
    details: dict[str, Any]
    order: np.ndarray | None = None


@dataclass(frozen=True)
class Placer:
    """One placer of the registry (module docstring).

    ``place``: ``(graph, machine, **options) -> Placed`` (or, with ``complete``, already the public
    signature returning a :class:`~pardnn.placement.result.Result`: ParDNN's pipeline). ``options``: the public
    defaults of its keyword options (the guard calls ``place`` with the function's own defaults,
    which never depend on the clock). ``cheap``: offered to the guard. ``memory_aware``: it reads the
    machine's memory sizes itself, so on a machine with sizes the guard also tries it blind to them
    (the tracker may find that placement fits, and it can be faster). ``time_option``/``order_option``:
    the option that a time budget (``--time-budget``) or "no run order" (``--no-order``) sets.
    ``memory_heuristics``: it takes ``memory_heuristic`` (else it must be ``None``). ``summary``: one
    line for ``--help`` and the docs.
    """

    name: str
    place: Callable[..., Any]
    options: Mapping[str, Any] = field(default_factory=dict)
    cheap: bool = False
    memory_aware: bool = False
    time_option: str | None = None
    order_option: str | None = None
    memory_heuristics: bool = False
    complete: bool = False
    summary: str = ""

    def __call__(self, graph: CostGraph, machine: Machine, *, memory_heuristic: str | None = "auto",
                 progress: Progress | None = None, **options: Any) -> Result:
        """Place ``graph`` on ``machine`` and evaluate it (the public signature of every placer).

        ``memory_heuristic``: ``"auto"`` (the default) lets the placer decide (ParDNN runs heuristic I
        on a machine with memory sizes; a placer without heuristics runs none); a name or ``None``
        (none) is passed to a placer with heuristics.

        Raises
        ------
        ValueError
            A ``memory_heuristic`` other than ``"auto"`` or ``None`` for a placer without one, or an
            option it does not have.
        """
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            have = ", ".join(self.options) or "none"
            raise ValueError(f"the {self.name} placer has no option {', '.join(unknown)} (its options: {have})")
        if self.complete:  # its own report, under the registry's name
            result = self.place(graph, machine, memory_heuristic=memory_heuristic, progress=progress,
                                **{**self.options, **options})
            return replace(result, report=replace(result.report, algorithm=self.name))
        if memory_heuristic not in (None, "auto") and not self.memory_heuristics:
            raise ValueError(f"the {self.name} placer has no memory heuristic: memory_heuristic={memory_heuristic!r}, "
                             "expected None")
        if progress is not None and self.takes_progress:
            options = {**options, "progress": progress}
        elif progress is not None:
            progress("placement", 0, 1)
        started = time.perf_counter()
        placed = Placed(*self.place(graph, machine, **{**self.options, **options}))
        return finish(graph, machine, placed.placement, algorithm=self.name,
                      placement_seconds=time.perf_counter() - started, details=placed.details, progress=progress,
                      order=placed.order)

    @property
    def takes_progress(self) -> bool:
        """``place`` reports its own progress (a ``progress`` keyword)."""
        return "progress" in inspect.signature(self.place).parameters


def finish(graph: CostGraph, machine: Machine, placement: np.ndarray, *, algorithm: str,
           placement_seconds: float, details: dict[str, Any], progress: Progress | None = None,
           order: np.ndarray | None = None) -> Result:
    """Evaluate ``placement`` (in its run ``order``, if any) and return it, read-only, with its report.

    ``stage_seconds`` holds ``placement`` (the placer's own time) and ``evaluation``. Warns when no op
    of ``graph`` costs anything (:func:`~pardnn.placement.result.warn_if_uncosted`).
    """
    warn_if_uncosted(graph)
    if progress is not None:
        progress("evaluation", 0, 1)
    place = np.ascontiguousarray(placement, dtype=np.int64)
    started = time.perf_counter()
    evaluation, schedule, memory = evaluate_step(graph, machine, place, order=order)
    seconds = {"placement": placement_seconds, "evaluation": time.perf_counter() - started}
    report = PartitionReport(algorithm, machine.devices, graph.n, graph.m, communication_ratio(graph, machine),
                             seconds, evaluation, details)
    place.flags.writeable = False
    if order is not None:
        order = np.array(order, dtype=np.int64)
        order.flags.writeable = False
    return Result(place, report, order, schedule, memory)
