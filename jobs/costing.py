"""Cost one training step: profile or estimate its graph, then attach the memory limit.

:func:`cost_graph` is the one place that turns a built step (a :class:`jobs.TrainGraph`, or any object
with ``graph``, ``fetches`` and, to profile, ``feed_fn``) into the
:class:`~pardnn.costs.graph.CostGraph` ParDNN partitions; ``pardnn-launch``, ``pardnn capture`` and
:func:`jobs.export_graph` call it. A step carrying its ``job`` takes the job's ``[placement]``
defaults, a bare one the schema's (docs/internals.md, "The job's graph"). Imports TensorFlow
only when called.
"""

from __future__ import annotations

from typing import Any

from jobs.schema import PLACEMENT_TABLE
from pardnn.costs.graph import CostGraph

__all__ = ["COSTS", "FROM_JOB", "cost_graph"]

COSTS = ("estimate", "profile", "capture")


class _FromJob:
    def __repr__(self) -> str:
        return "FROM_JOB"


FROM_JOB: Any = _FromJob()  # memory_bytes default: the job's [placement] memory


def cost_graph(train: Any, costs: str = "estimate", *, device_preset: str | None = None,
               profile_steps: int | None = None, memory_bytes: int | None = FROM_JOB, name: str | None = None,
               devices: int = 1, kind: str = "cpu", unknown_dim: int | None = None) -> CostGraph:
    """The :class:`CostGraph` of one step of ``train``, carrying the memory limit.

    Parameters
    ----------
    train:
        The step (see the module docstring): ``graph``, ``fetches``, optionally ``feed_fn``,
        ``job`` and ``batch_size``.
    costs:
        ``"estimate"`` (roofline times on ``device_preset``; builds only, allocates nothing),
        ``"profile"`` (``profile_steps`` traced steps on this machine; runs the model) or
        ``"capture"`` (structure and sizes only, 0 µs per op).
    device_preset, profile_steps:
        Default (``None``): the job's ``[placement]`` settings, else the schema's defaults.
    memory_bytes:
        The graph's ``memory_limit_bytes`` (the device memory a graph file records; ``None`` =
        unlimited). Default: the job's ``[placement] memory``, else ``None``.
    name:
        The graph's name; default the job's name, else ``"tf-step"``.
    devices, kind:
        Profiling only: the logical devices (``"cpu"``) or GPUs (``"gpu"``) the session has.
    unknown_dim:
        Size of any dimension the graph leaves unknown; default the step's ``batch_size``.

    Raises
    ------
    ValueError
        An unknown ``costs``.
    pardnn.errors.PardnnError
        From capturing, estimating (an unknown preset) or profiling the graph.
    """
    if costs not in COSTS:
        raise ValueError(f"costs={costs!r}: expected one of {', '.join(COSTS)}")
    import pardnn.tf

    job = getattr(train, "job", None)

    def setting(value: Any, key: str) -> Any:
        if value is not None:
            return value
        return getattr(job, key) if job is not None else PLACEMENT_TABLE[key].default

    name = name or (str(job.name) if job is not None else "tf-step")
    if unknown_dim is None:
        unknown_dim = getattr(train, "batch_size", None)
    if costs == "estimate":
        cost = pardnn.tf.estimate(train.graph, train.fetches, setting(device_preset, "device_preset"),
                                  unknown_dim=unknown_dim, name=name)
    elif costs == "profile":
        streamed = getattr(train, "stream", None) is not None  # a [data] dataset's iterator starts in init_op
        cost = pardnn.tf.profile(train.graph, train.fetches, getattr(train, "feed_fn", None),
                                 steps=setting(profile_steps, "profile_steps"), devices=devices, kind=kind,
                                 unknown_dim=unknown_dim, name=name, init_ops=train.init_op if streamed else None)
    else:
        cost = pardnn.tf.capture(train.graph, train.fetches, unknown_dim=unknown_dim, name=name)
    if memory_bytes is FROM_JOB:
        memory_bytes = job.memory_bytes if job is not None else None
    if memory_bytes == cost.memory_limit_bytes:
        return cost
    return cost.replace(memory_limit_bytes=memory_bytes)
