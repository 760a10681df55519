"""The gradient allreduce in the emulated step: what data parallelism adds to a replica's step.

:func:`emulate_with_allreduce` emulates a replica with each variable's update held until its gradient's
allreduce is done, priced as Horovod runs it (one channel per rank, tensor fusion in cycles, a
hierarchical ring; :class:`Cluster`, :func:`cluster_for`). The model: docs/algorithm.md ("The gradient
allreduce in the step"); choices: docs/notes-partitioner.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pardnn.costs.graph import CostGraph, Kind
from pardnn.costs.machine import Machine
from pardnn.costs.presets import DevicePreset, preset
from pardnn.emulation.emulator import RunOrder, Schedule, emulate

__all__ = ["CYCLE_US", "FUSION_BYTES", "AllreduceStep", "Cluster", "cluster_for", "emulate_with_allreduce",
           "fused_channel", "gradients"]

CYCLE_US = 1000.0  # HOROVOD_CYCLE_TIME's default, 1 ms (Horovod 0.21 and later)
FUSION_BYTES = 128 * 2**20  # HOROVOD_FUSION_THRESHOLD's default, 128 MiB (Horovod 0.21 and later)
_CHAIN_PASSES = 16  # passes for chains of gradients that read other variables' updates (a training step has none)


@dataclass(frozen=True)
class Cluster:
    """Where the replicas run: ``nodes`` × ``replicas_per_node`` replicas, the node's GPU link and network.

    Rates in bytes/s, latencies in µs per ring step.
    """

    nodes: int = 1
    replicas_per_node: int = 1
    link_Bps: float = 150e9
    link_latency_us: float = 5.0
    network_Bps: float = 100e9
    network_latency_us: float = 10.0
    fusion_bytes: int = FUSION_BYTES
    cycle_us: float = CYCLE_US
    copy_Bps: float = math.inf  # memory bandwidth: a fused buffer of several gradients is copied in and out

    def __post_init__(self) -> None:
        for name in ("nodes", "replicas_per_node"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: {value!r}: expected a whole number >= 1")
        for name in ("link_Bps", "network_Bps", "copy_Bps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: {getattr(self, name)!r}: expected a rate > 0")
        for name in ("link_latency_us", "network_latency_us", "cycle_us"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name}: {getattr(self, name)!r}: expected a time >= 0")
        if self.fusion_bytes < 0:
            raise ValueError(f"fusion_bytes: {self.fusion_bytes!r}: expected bytes >= 0 (0: no fusion)")

    @property
    def replicas(self) -> int:
        return self.nodes * self.replicas_per_node

    def allreduce_us(self, nbytes: float) -> float:
        """One allreduce of ``nbytes`` across every replica (module docstring, ``t(b)``).

        >>> Cluster(nodes=4, network_Bps=100e9, network_latency_us=10).allreduce_us(100e6)  # 2·3/4·1 ms + 60 µs
        1560.0
        """
        r, n, b = self.replicas_per_node, self.nodes, float(nbytes)
        inside = 0.0 if r == 1 else 2 * (r - 1) / r * b / self.link_Bps * 1e6 + 2 * (r - 1) * self.link_latency_us
        across = 0.0 if n == 1 else 2 * (n - 1) / n * b / self.network_Bps * 1e6 + 2 * (n - 1) * self.network_latency_us
        return inside + across


def cluster_for(device: str | DevicePreset, nodes: int, replicas_per_node: int = 1, *,
                network_Bps: float | None = None) -> Cluster:
    """The :class:`Cluster` of ``nodes`` nodes of preset ``device`` (its link, network and latencies).

    >>> cluster_for("dgx-2", 4).network_Bps / 1e9   # 8 × 100 Gb/s InfiniBand
    100.0
    """
    spec = preset(device)
    return Cluster(nodes, replicas_per_node, spec.link_bandwidth_Bps, spec.step_latency_us,
                   spec.network_Bps if network_Bps is None else network_Bps, spec.network_latency_us,
                   copy_Bps=spec.memory_bandwidth_Bps)


def gradients(graph: CostGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The gradients the replicas average: ``(update, nbytes, edge, edge_update)``.

    An update is an op of kind reference (it mutates a variable: ``ApplyAdam``, ``AssignSub``); its
    gradient is what reaches it from ordinary ops (the variable itself and the optimizer's slots are
    residual), so ``nbytes[i]`` is the bytes of those edges into ``update[i]``. ``edge`` lists those
    edges (graph edge order) and ``edge_update`` the index into ``update`` of each one's consumer.
    """
    dst_kind = graph.kind[graph.edge_dst]
    src_kind = graph.kind[graph.edge_src]
    into = np.flatnonzero((dst_kind == Kind.REFERENCE) & (src_kind == Kind.NORMAL) & (graph.edge_bytes > 0))
    update, edge_update = np.unique(graph.edge_dst[into], return_inverse=True)
    nbytes = np.bincount(edge_update, weights=graph.edge_bytes[into], minlength=update.size).astype(np.int64)
    return update.astype(np.int64), nbytes, into.astype(np.int64), edge_update.astype(np.int64)


def fused_channel(ready_us: np.ndarray, nbytes: np.ndarray, cluster: Cluster) -> tuple[np.ndarray, int, float]:
    """When each gradient's average is done on one rank's channel: ``(done_us, buffers, busy_us)``.

    ``ready_us[i]``: when gradient ``i`` is ready; ``nbytes[i]``: its size. Cycles begin at 0 and then
    ``cycle_us`` after the last began, or when it ends if later; the first cycle at or after a
    gradient is ready reduces it with whatever else is ready then (in order of readiness, ties by
    index), in buffers of at most ``fusion_bytes``, one after another (module docstring).

    >>> c = Cluster(nodes=2, network_Bps=1e9, network_latency_us=0, cycle_us=0, fusion_bytes=1000)
    >>> # 1 µs per kB: the first two fill one buffer; the third waits for the channel, then goes alone
    >>> fused_channel(np.array([0.0, 0.0, 0.5]), np.array([600, 400, 100]), c)[0].tolist()
    [1.0, 1.0, 1.1]
    """
    ready = np.asarray(ready_us, dtype=np.float64)
    size = np.asarray(nbytes, dtype=np.int64)
    order = np.lexsort((np.arange(ready.size), ready))
    done = np.empty(ready.size)
    tick, cycle, i, buffers, busy = 0.0, cluster.cycle_us, 0, 0, 0.0  # tick: when the next cycle begins
    while i < order.size:
        wanted = ready[order[i]]
        if wanted > tick:  # idle cycles pass until one begins at or after the gradient is ready
            tick += math.ceil((wanted - tick) / cycle - 1e-12) * cycle if cycle > 0 else wanted - tick
        began = t = tick
        while i < order.size and ready[order[i]] <= began:  # this cycle's buffers, one after another
            j, total = i, 0
            while j < order.size and ready[order[j]] <= began and (
                    j == i or total + size[order[j]] <= cluster.fusion_bytes):
                total += int(size[order[j]])
                j += 1
            took = cluster.allreduce_us(total)
            if j - i > 1:  # packed into the fusion buffer and back out
                took += 2 * total / cluster.copy_Bps * 1e6
            t += took
            done[order[i:j]] = t
            i, buffers, busy = j, buffers + 1, busy + took
        tick = max(began + cycle, t)
    return done, buffers, busy


@dataclass(frozen=True)
class AllreduceStep:
    """A replica's step with the gradient allreduce in it. Times in µs.

    ``compute_us``: the step alone (one replica, nothing averaged); ``step_us``: with the allreduce;
    ``exposed_us``: what the allreduce adds (``step_us - compute_us``, the part the backward pass does
    not hide); ``busy_us``: the channel's working time; ``buffers``: fused allreduces per step;
    ``gradient_bytes``: bytes averaged per step; ``schedule``: the emulated step with the updates held.
    """

    compute_us: float
    step_us: float
    exposed_us: float
    busy_us: float
    buffers: int
    gradient_bytes: int
    replicas: int
    schedule: Schedule

    def to_dict(self) -> dict[str, float | int]:
        return {"compute_us": self.compute_us, "step_us": self.step_us, "exposed_allreduce_us": self.exposed_us,
                "allreduce_busy_us": self.busy_us, "allreduce_buffers": self.buffers,
                "gradient_bytes": self.gradient_bytes, "replicas": self.replicas}


def emulate_with_allreduce(graph: CostGraph, machine: Machine, placement: np.ndarray, cluster: Cluster, *,
                           order: RunOrder = None, schedule: Schedule | None = None) -> AllreduceStep:
    """Emulate one replica's step of ``graph`` placed by ``placement`` with its gradients averaged across
    ``cluster``'s replicas.

    ``schedule``: the step without the allreduce, if already emulated (with the same ``order``). The
    updates are held until their gradients' averages are done, and the step emulated again; the
    gradients' ready times can move when the updates do (a device freed earlier), so this repeats until
    they stop moving: 2 emulations in practice; a gradient that reads another variable's update (a chain
    of k such) may need k + 1, so it repeats up to once per update and once more, at most 18 times.

    >>> from pardnn import CostGraph, Kind, Machine
    >>> g = CostGraph(["grad", "update"], [100.0, 1.0], [10**6, 0], src=[0], dst=[1], kind=[0, Kind.REFERENCE])
    >>> one = emulate_with_allreduce(g, Machine(1), np.array([0, 0]), Cluster(nodes=1))
    >>> (one.compute_us, one.exposed_us)   # one replica: nothing to average
    (101.0, 0.0)
    >>> two = emulate_with_allreduce(g, Machine(1), np.array([0, 0]), Cluster(nodes=2, network_Bps=1e9,
    ...                              network_latency_us=0, cycle_us=0))
    >>> (two.step_us, two.exposed_us)   # 1 MB across 2 nodes at 1 GB/s: 2·1/2·1000 µs
    (1101.0, 1000.0)
    """
    alone = emulate(graph, machine, placement, order=order) if schedule is None else schedule
    update, nbytes, edge, edge_update = gradients(graph)
    if cluster.replicas == 1 or update.size == 0:
        return AllreduceStep(alone.makespan_us, alone.makespan_us, 0.0, 0.0, 0, int(nbytes.sum()), cluster.replicas,
                             alone)
    current, ready = alone, None
    release = np.zeros(graph.n)
    for _ in range(min(update.size, _CHAIN_PASSES) + 2):
        now_ready = np.zeros(update.size)
        np.maximum.at(now_ready, edge_update, current.edge_arrival_us[edge])
        if ready is not None and np.array_equal(now_ready, ready):
            break
        ready = now_ready
        done, buffers, busy = fused_channel(ready, nbytes, cluster)
        release[update] = done
        current = emulate(graph, machine, placement, order=order, release=release)
    return AllreduceStep(alone.makespan_us, current.makespan_us, current.makespan_us - alone.makespan_us, busy,
                         buffers, int(nbytes.sum()), cluster.replicas, current)
