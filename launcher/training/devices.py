"""The node's devices as TensorFlow sees them, their memory, and the machine ParDNN partitions for.

A node with GPUs uses its first K GPUs (K = ``devices_per_node``; more than it has is an error).
A node without GPUs uses K logical CPU devices (``ConfigProto(device_count={"CPU": K})``) that share
the host's cores: the development and CI machines run placements for real this way. A data-parallel
rank drives one device (:func:`replica_devices`).

Imports TensorFlow; :mod:`launcher.core` imports this module only when a run starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import tensorflow as tf

from launcher.errors import LaunchError
from launcher.reporting.collector import process_rss_bytes
from launcher.settings import Settings
from pardnn.costs.machine import Machine
from pardnn.costs.presets import preset
from pardnn.tf import device_names

__all__ = ["NodeDevices", "node_devices", "node_machine", "replica_devices"]


@dataclass(frozen=True)
class NodeDevices:
    """``kind`` ``"gpu"`` or ``"cpu"``, and the K device names placements refer to."""

    kind: str
    names: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.names)

    def memory_probe(self) -> tuple[Callable[[], dict[str, int | None]], str]:
        """A function giving bytes per device, and what it measures (``allocator-peak`` or ``process-rss``)."""
        if self.kind == "gpu":
            def gpu_peaks() -> dict[str, int | None]:
                peaks: dict[str, int | None] = {}
                for name in self.names:
                    try:
                        peaks[name] = int(tf.config.experimental.get_memory_info(_short(name))["peak"])
                    except (ValueError, RuntimeError):
                        peaks[name] = None
                return peaks
            return gpu_peaks, "allocator-peak"
        return (lambda: dict.fromkeys(self.names, process_rss_bytes())), "process-rss"

    def reset_peaks(self) -> None:
        """Forget the peaks of profiling, so the figures are training's (GPUs only)."""
        if self.kind == "gpu":
            for name in self.names:
                try:
                    tf.config.experimental.reset_memory_stats(_short(name))
                except (ValueError, RuntimeError):
                    pass


def node_devices(count: int, node: str, first: int | None = None) -> NodeDevices:
    """The node's first ``count`` GPUs, or ``count`` logical CPU devices when it has no GPU.

    ``first`` (``--replica-devices``: several replicas share the node): GPUs ``first`` .. ``first + count
    - 1``, this rank's own, made the process's only visible GPUs (``/device:GPU:0`` .. ``count - 1``), so
    that no rank allocates memory on another's.
    """
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return NodeDevices("cpu", tuple(device_names(count, "cpu")))
    exclusive = first is not None
    first = first or 0
    if first + count > len(gpus):
        if not exclusive:
            raise LaunchError(f"devices_per_node = {count}, but node {node} has {len(gpus)} GPUs; "
                              f"pass --devices-per-node {len(gpus)} or fewer")
        raise LaunchError(f"a replica of node {node} would drive GPUs {first}..{first + count - 1}, but the node has "
                          f"{len(gpus)}: more ranks than replicas fit; launch devices_per_node / --replica-devices "
                          "tasks per node")
    if not exclusive:
        return NodeDevices("gpu", tuple(device_names(count, "gpu")))
    wanted = gpus[first:first + count]
    try:
        tf.config.set_visible_devices(wanted, "GPU")
        return NodeDevices("gpu", tuple(device_names(count, "gpu")))
    except RuntimeError:  # set up already (an earlier variant of a comparison): only a process's first setting counts
        visible = [gpu.name for gpu in tf.config.get_visible_devices("GPU")]
    if not all(gpu.name in visible for gpu in wanted):
        raise LaunchError(f"node {node}: this process set up GPUs {', '.join(visible)} for an earlier variant and "
                          f"cannot widen them to GPUs {first}..{first + count - 1}; in a comparison on GPUs list the "
                          "plans from the largest k down (k=8,k=4,k=2,k=1), the placers before them and data last")
    names = device_names(len(visible), "gpu")
    return NodeDevices("gpu", tuple(names[visible.index(gpu.name)] for gpu in wanted))


def _short(name: str) -> str:
    """``/device:GPU:3`` → ``GPU:3``, the form ``tf.config.experimental``'s memory functions take."""
    return name.rsplit("/device:", 1)[-1]


def node_machine(settings: Settings, devices: NodeDevices) -> Machine:
    """The :class:`Machine` ParDNN partitions for: the preset's interconnect; memory as set.

    Memory per device: ``settings.memory`` if set; else on GPUs the preset's memory
    (``device_preset``, default V100 32 GB); on logical CPU devices unlimited.
    """
    spec = preset(settings.device_preset)
    memory: int | str | None = settings.memory
    if memory is None and devices.kind == "gpu":
        memory = spec.memory_bytes
    return Machine(devices.count, memory=memory, bandwidth=spec.link_bandwidth_Bps, latency=spec.latency_us,
                   reserve=settings.reserve)


def replica_devices(index: int, node: str) -> NodeDevices:
    """The one device a data-parallel rank drives: GPU ``index`` of its node, made the process's only
    visible GPU (so it is ``/device:GPU:0``), or one CPU device when the node has no GPU."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return NodeDevices("cpu", tuple(device_names(1, "cpu")))
    if index >= len(gpus):
        raise LaunchError(f"rank {index} of node {node} drives GPU {index}, but the node has {len(gpus)} GPUs; "
                          "run one rank per GPU")
    try:
        tf.config.set_visible_devices(gpus[index], "GPU")
    except RuntimeError:  # set up already (a comparison's node leader, after its model-parallel runs)
        if index != 0:
            raise LaunchError(f"rank {index} of node {node}: TensorFlow set up every GPU before this data-parallel "
                              "run; a comparison runs model parallelism on each node's first rank only") from None
    return NodeDevices("gpu", tuple(device_names(1, "gpu")))
