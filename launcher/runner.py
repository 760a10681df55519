"""What the variants of one run share (:class:`SharedByVariants`), apart from how a run lives and ends
(:mod:`launcher.lifecycle`), so that the variants' trainers (:mod:`launcher.placing.model`,
:mod:`launcher.training.replicas`) and the life that runs them import it from below."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["BuildFn", "SharedByVariants"]

BuildFn = Callable[..., Any]


@dataclass
class SharedByVariants:
    """What the variants of a run share: the graph builder, the allreduce backend
    (:class:`launcher.training.dataparallel.Backend`, ``None`` for one rank) and the node leaders' group
    (``None``: every rank), and the model-parallel graph once built and costed
    (:class:`launcher.placing.model.Costed`)."""

    build: BuildFn
    allreduce: Any = None
    leaders_set: Any = None
    costed: Any = None
