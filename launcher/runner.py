"""What the variants of one run share (:class:`SharedByVariants`), apart from how a run lives and ends
(:mod:`launcher.lifecycle`), so that the variants' trainers (:mod:`launcher.placing.model`,
:mod:`launcher.training.replicas`) and the life that runs them import it from below."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BuildFn", "SharedByVariants", "dataset_shard"]

BuildFn = Callable[..., Any]


@dataclass
class SharedByVariants:
    """What the variants of a run share: the graph builder, the allreduce backend
    (:class:`launcher.training.dataparallel.Backend`, ``None`` for one rank), the groups of ranks that
    train while others wait, by devices per replica k (:func:`launcher.lifecycle.start_allreduce`), the
    group of the variant training now (``training_set``; ``None``: every rank), and the model-parallel
    graph once built and costed (:class:`launcher.placing.model.Costed`)."""

    build: BuildFn
    allreduce: Any = None
    groups: dict[int, Any] = field(default_factory=dict)
    training_set: Any = None
    training_k: int | None = None
    costed: Any = None

    def train_on(self, k: int | None) -> None:
        """The next variant trains on the group of replicas of ``k`` devices (``None``: every rank)."""
        self.training_k = k
        self.training_set = None if k is None else self.groups.get(k)


def dataset_shard(state: Any) -> dict[str, Any]:
    """``shard=(rank, ranks)`` for the builder when the job reads a ``[data] dataset``: each rank's
    ``fn(batch_size, rank, ranks)`` makes its own shard (a function's batches are sharded by iteration)."""
    if getattr(state.job, "dataset", None) is None:
        return {}
    return {"shard": (state.topology.rank, state.topology.size)}
