"""What a run trains: a placer's placement of each node's replica, or plain data parallelism.

A :class:`Variant` is one way to train the job (``--placer NAME``, ``--parallelism data [--recompute]``);
:func:`variants_of` gives the run's (several with ``--compare``), :func:`ranks_per_node` the ranks each
needs, :func:`replica_batch` a replica's batch, :func:`place` a placement with the variant's placer
(registry: :data:`pardnn.registry.PLACERS`) and :func:`check_fits` its memory check (``does_not_fit``);
:class:`SharedByVariants` is what the variants of one run share (the builder, the allreduce, the graph).
docs/launcher.md (The alternatives); the choices made here: docs/notes-launcher.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobs.schema import AUTO, COMMAND_LINE, JOB_FILE
from launcher.errors import DoesNotFit, LaunchError
from pardnn.costs.machine import Machine, format_bytes
from pardnn.placement.result import Result
from pardnn.registry import get_placer
from pardnn.settings import ALGORITHMS

__all__ = ["DATA", "PARALLELISMS", "RECOMPUTE", "BuildFn", "SharedByVariants", "Variant", "check_fits", "dataset_shard",
           "place", "plan_entry", "ranks_per_node", "ranks_why", "replica_batch", "slug", "variant_settings",
           "variants_of"]

PARALLELISMS = ("model", "data")
DATA, RECOMPUTE = "data", "data+recompute"


@dataclass(frozen=True)
class Variant:
    """A placer's model parallelism (``placer`` set) or data parallelism (``placer`` ``None``);
    ``replica_devices``: a compared plan's k (``None``: the run's setting)."""

    placer: str | None = "pardnn"
    recompute: bool = False
    replica_devices: int | None = None

    @property
    def parallelism(self) -> str:
        return "data" if self.placer is None else "model"

    @property
    def label(self) -> str:
        """The name ``--compare`` takes and the tables show: the placer, ``data``, ``data+recompute`` or ``k=K``."""
        if self.replica_devices is not None:
            return f"k={self.replica_devices}"
        if self.placer is not None:
            return self.placer
        return RECOMPUTE if self.recompute else DATA

    @property
    def slug(self) -> str:
        return slug(self.label)


def slug(label: str) -> str:
    """A variant's label as file and folder names have it (``data+recompute`` → ``data-recompute``,
    ``k=2`` → ``k2``, ``pardnn k=2`` → ``pardnn-k2``): no spaces."""
    return label.replace("+", "-").replace("=", "").replace(" ", "-")


def plan_entry(label: str) -> int | None:
    """The K of a ``--compare`` entry ``k=K`` (``None`` for any other entry)."""
    if not label.startswith("k="):
        return None
    try:
        k = int(label[2:])
    except ValueError:
        return 0
    return k if k >= 1 else 0


def _entry(label: str, placer: str) -> Variant:
    if label == DATA:
        return Variant(None)
    if label == RECOMPUTE:
        return Variant(None, recompute=True)
    k = plan_entry(label)
    if k is not None:
        return Variant(placer, replica_devices=k)
    return Variant(label)


def _compare_entries(value: Any) -> tuple[str, ...]:
    """``"a,b"`` or a list of names → the names, checked: known, none twice."""
    names = [part.strip() for part in value.split(",")] if isinstance(value, str) else [str(v) for v in value]
    allowed = (*ALGORITHMS, DATA, RECOMPUTE, "k=K")
    unknown = [name for name in names if name not in allowed[:-1] and not plan_entry(name)]
    if not names or unknown or "" in names:
        raise LaunchError(f"compare: {value!r}: expected a comma-separated list of {', '.join(allowed)} (K: devices "
                          "per replica, dividing the node's)"
                          + (f" ({', '.join(map(repr, unknown))} is not one)" if unknown else ""))
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise LaunchError(f"compare: {', '.join(twice)} listed twice; list each variant once")
    return tuple(names)


def variant_settings(values: Mapping[str, Any], sources: Mapping[str, str]) -> dict[str, Any]:
    """``parallelism``, ``recompute`` and ``compare`` of the settings, checked against each other."""
    parallelism, recompute, compare = values["parallelism"], values["recompute"], values["compare"]
    if parallelism not in PARALLELISMS:
        raise LaunchError(f"parallelism: {parallelism!r}: expected one of {', '.join(PARALLELISMS)}")
    if not isinstance(recompute, bool):
        raise LaunchError(f"recompute: {recompute!r}: expected true or false")
    entries = () if compare is None else _compare_entries(compare)
    if recompute and (parallelism != "data" or entries):
        raise LaunchError("--recompute is gradient checkpointing for --parallelism data (ParDNN spreads a model "
                          "that barely fits instead); in --compare list data+recompute")
    if entries and parallelism == "data" and sources.get("parallelism") != "default":
        raise LaunchError("--parallelism data and --compare: list data in --compare instead")
    if entries and (values["resume"] is not None or values["checkpoint_every"] or values["checkpoint_dir"]):
        raise LaunchError("--compare trains each variant once from the start: no checkpoints or --resume with it")
    return {"parallelism": parallelism, "recompute": recompute, "compare": entries}


def variants_of(settings: Any) -> tuple[Variant, ...]:
    """The variants a run trains, in order: ``--compare``'s, else the one its settings name."""
    if settings.compare:
        return tuple(_entry(label, settings.placer) for label in settings.compare)
    if settings.parallelism == "data":
        return (Variant(None, recompute=settings.recompute),)
    return (Variant(settings.placer),)


def ranks_per_node(settings: Any) -> int:
    """K (one rank per device) when a variant of the run is data parallel, a compared plan ``k=K`` or
    ``--replica-devices auto`` (the ranks a plan does not use wait); else one per model-parallel replica:
    K / ``replica_devices`` (1 by default, one replica across all the node's devices)."""
    if settings.replica_devices == AUTO or any(v.placer is None or v.replica_devices is not None
                                               for v in variants_of(settings)):
        return settings.devices_per_node
    return settings.replicas_per_node


def ranks_why(settings: Any) -> str | None:
    """What asks for :func:`ranks_per_node`'s ranks, as the topology check's error says it (``None``:
    data parallelism, its default)."""
    devices, variants = settings.devices_per_node, variants_of(settings)
    if any(v.placer is None for v in variants):
        return None
    if settings.replica_devices == AUTO:
        return (f"--replica-devices auto runs one rank per device, {devices} per node (the plan chosen trains on "
                "every k-th)")
    if settings.compare and any(v.replica_devices is not None for v in variants):
        return f"--compare {','.join(settings.compare)} runs one rank per device, {devices} per node"
    k = settings.replica_devices
    if k is None:
        return None
    return (f"--replica-devices {k} runs one rank per replica of {k} device{'s' if int(k) > 1 else ''}, "
            f"{devices // int(k)} per node of {devices} devices")


def replica_batch(settings: Any, variant: Variant, devices: int) -> int:
    """Samples per step of one replica: for model parallelism the node's batch split over its replicas
    (``--replica-devices``; all of it by default); for data parallelism the node's batch split over its
    ``devices`` (the same global batch), or ``--batch-size`` as given on the command line of a
    standalone data-parallel run."""
    batch = int(settings.batch_size)
    if variant.placer is not None:
        return batch // settings.replicas_per_node  # divisible: launcher.settings.check_replicas (or the plan)
    source = settings.sources.get("batch_size", JOB_FILE)
    if not settings.compare and source == COMMAND_LINE:
        return batch
    if batch % devices:
        raise LaunchError(f"batch_size {batch} per node ({source}) does not split over {devices} devices for data "
                          f"parallelism at the same global batch; pass --batch-size, per device with --parallelism "
                          "data, or a batch size divisible by the devices")
    return batch // devices


def place(name: str, graph: Any, machine: Machine, heuristic: str | None, *, ordered: bool = True) -> Result:
    """The placement of ``graph`` by the registry's placer ``name``: with ``heuristic`` if it has memory
    heuristics (ParDNN's), else none; without a run order when not ``ordered`` (``--run-order false``)."""
    placer = get_placer(name)
    options: dict[str, Any] = {} if ordered or placer.order_option is None else {placer.order_option: False}
    return placer(graph, machine, memory_heuristic=heuristic if placer.memory_heuristics else None, **options)


def check_fits(label: str, peaks: Sequence[int], limits: Sequence[int] | None, machine: Machine) -> None:
    """Raise :class:`DoesNotFit` naming the first device whose emulated peak is over its limit."""
    if limits is None:
        return
    for device, (peak, limit) in enumerate(zip(peaks, limits, strict=True)):
        if peak > limit:
            raise DoesNotFit(
                f"{label}: device {device} needs {format_bytes(peak)} at its peak, over its limit of "
                f"{format_bytes(limit)} ({machine.describe()}); not trained. Try pardnn (its memory heuristic), "
                "more devices, a smaller batch or a lower --reserve")


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
