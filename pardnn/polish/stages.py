"""The shape of a polishing stage: what runs after Step 2, and how the pipeline chains it.

A stage is ``run(graph, machine, current: Emulated | None, context: Context) -> (Emulated | None,
details)``; :func:`polish` runs :data:`pardnn.partitioner.POLISH` in turn and keeps a stage's answer
only when it beats the current one. Adding a stage: one function and one :class:`Stage`
(docs/notes-partitioner.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from pardnn.costs.graph import CostGraph
from pardnn.costs.machine import Machine
from pardnn.emulation.emulated import Emulated
from pardnn.errors import PardnnError

__all__ = ["Ahead", "Context", "Stage", "polish"]


class Ahead(Protocol):
    """Work done in a second thread: ``running()`` while it is at work, ``result()`` waits for it."""

    def running(self) -> bool: ...

    def result(self) -> Any: ...


@dataclass(frozen=True)
class Context:
    """What a stage may use besides the current answer.

    ``edge_weight``: each edge's transfer time if cut (µs); ``seconds``: the refinement budget (the
    refinement's and the ordering stage's); ``failure``: why Step 2 produced no answer (heuristic I
    gave up), else ``None``; ``heuristic``: the memory heuristic that ran (``None``: Step 1 only);
    ``ahead``: the guard's candidates being made in a second thread (:class:`Ahead`), or ``None``;
    ``progress``: ``(done, total)`` within the running stage, or ``None``; ``ordered``: a stage may
    return a run order (``partition(..., ordered=False)``: never).
    """

    edge_weight: np.ndarray
    seconds: float
    failure: PardnnError | None = None
    heuristic: str | None = None
    ahead: Ahead | None = None
    progress: Callable[[int, int], None] | None = None
    ordered: bool = True


Run = Callable[[CostGraph, Machine, "Emulated | None", Context], tuple["Emulated | None", Any]]


@dataclass(frozen=True)
class Stage:
    """A polishing stage: its name (the report's key and the progress label), its function, and
    whether it needs a fitting answer to start from."""

    name: str
    run: Run
    needs_fit: bool = True


def polish(graph: CostGraph, machine: Machine, current: Emulated | None, stages: Sequence[Stage], context: Context,
           *, seconds: dict[str, float], details: dict[str, Any],
           progress: Callable[[str, int, int], None] | None = None) -> Emulated | None:
    """Run ``stages`` in turn from ``current`` (module docstring); return the answer kept.

    Each stage's wall time goes into ``seconds`` and its record into ``details``, under its name.
    """
    for stage in stages:
        if stage.needs_fit and (current is None or not current.fits(machine)):
            continue
        started = time.perf_counter()
        if progress is not None:
            progress(stage.name, 0, 1)
        step = None if progress is None else _within(progress, stage.name)
        answer, record = stage.run(graph, machine, current, _with_progress(context, step))
        details[stage.name] = record
        seconds[stage.name] = time.perf_counter() - started
        if answer is not None and answer.beats(current, machine):
            current = answer
    return current


def _within(progress: Callable[[str, int, int], None], name: str) -> Callable[[int, int], None]:
    return lambda done, total: progress(name, done, total)


def _with_progress(context: Context, step: Callable[[int, int], None] | None) -> Context:
    return context if step is None else replace(context, progress=step)
