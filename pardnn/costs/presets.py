"""Device presets: published peak rates of data-centre GPUs and their node interconnect.

Used by :func:`pardnn.tf.estimate.estimate` (roofline costs) and :func:`machine_for` (a
:class:`~pardnn.costs.machine.Machine` for K such GPUs); TensorFlow-free. ``preset("dgx-a100")``
gives the A100 preset, ``machine_for("h100", 8)`` a DGX H100's machine. The figures, their sources
and the model parameters are in docs/tensorflow.md ("Device presets").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pardnn.costs.machine import Machine
from pardnn.errors import InvalidMachineError

__all__ = ["PRESETS", "DevicePreset", "machine_for", "preset"]

_GIB = 2**30
# MPI between ranks of the test machine (shared memory): fitted by `python -m benchmarks.allreduce_model`
# to Horovod's allreduce under mpirun -np 2 and 4 (benchmarks/RESULTS.md, section allreduce-model).
CPU_NETWORK_BPS = 0.97e9
CPU_STEP_LATENCY_US = 0.0  # below what a fit over 1 ms cycles resolves


@dataclass(frozen=True)
class DevicePreset:
    """One GPU model and its interconnect. Rates in FLOP/s and bytes/s, times in µs."""

    name: str
    description: str
    peak_flops: float
    memory_bandwidth_Bps: float
    memory_bytes: int
    link_bandwidth_Bps: float
    latency_us: float = 25.0
    launch_us: float = 5.0
    gpus_per_node: int = 8
    network_Bps: float = 100e9
    network_latency_us: float = 10.0
    step_latency_us: float = 5.0

    def kernel_us(self, flops: npt.ArrayLike, moved_bytes: npt.ArrayLike) -> Any:
        """Roofline time of kernels in µs: ``max(flops / peak, bytes / bandwidth) × 1e6 + launch``.

        Elementwise over arrays (a NumPy float for scalars); the one formula behind
        :func:`pardnn.tf.estimate.estimate` and :mod:`pardnn.batch.batchscale`, so both give identical times.
        """
        flops_a = np.asarray(flops, dtype=np.float64)
        moved_a = np.asarray(moved_bytes, dtype=np.float64)
        return np.maximum(flops_a / self.peak_flops, moved_a / self.memory_bandwidth_Bps) * 1e6 + self.launch_us


PRESETS: dict[str, DevicePreset] = {
    p.name: p
    for p in (
        DevicePreset("v100-32gb", "Tesla V100-SXM3-32GB, NVSwitch (DGX-2)", 15.7e12, 900e9, 32 * _GIB, 150e9,
                     gpus_per_node=16, network_Bps=100e9),
        DevicePreset("a100-80gb", "A100-SXM4-80GB, NVLink3 (DGX A100)", 19.5e12, 2039e9, 80 * _GIB, 300e9,
                     gpus_per_node=8, network_Bps=200e9),
        DevicePreset("h100-80gb", "H100-SXM5-80GB, NVLink4 (DGX H100)", 67e12, 3350e9, 80 * _GIB, 450e9,
                     gpus_per_node=8, network_Bps=400e9),
        DevicePreset("h200-141gb", "H200-SXM5-141GB, NVLink4 (DGX H200)", 67e12, 4800e9, 141 * 10**9, 450e9,
                     gpus_per_node=8, network_Bps=400e9),
        DevicePreset("cpu-2core", "2 cores of an AMD EPYC, TensorFlow CPU kernels (this project's test machine)",
                     1.4e11, 19e9, 24 * _GIB, 19e9, latency_us=5.0, launch_us=1.0, gpus_per_node=2,
                     network_Bps=CPU_NETWORK_BPS, network_latency_us=CPU_STEP_LATENCY_US,
                     step_latency_us=CPU_STEP_LATENCY_US),
    )
}

_ALIASES = {"v100": "v100-32gb", "a100": "a100-80gb", "h100": "h100-80gb", "h200": "h200-141gb",
            "dgx-2": "v100-32gb", "dgx-a100": "a100-80gb", "dgx-h100": "h100-80gb", "dgx-h200": "h200-141gb"}


def preset(name: str | DevicePreset) -> DevicePreset:
    """The preset called ``name`` (case-insensitive; ``v100``, ``a100``, ``h100`` are aliases, and
    ``dgx-2``, ``dgx-a100``, ``dgx-h100`` name the node's GPU)."""
    if isinstance(name, DevicePreset):
        return name
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in PRESETS:
        raise InvalidMachineError(f"unknown device preset {name!r}; expected one of {', '.join(PRESETS)}")
    return PRESETS[key]


def machine_for(device: str | DevicePreset, devices: int, *, reserve: float = 0.10) -> Machine:
    """A :class:`Machine` of ``devices`` GPUs of preset ``device`` (memory, link bandwidth, latency).

    Examples
    --------
    >>> machine_for("v100", 16).describe()
    '16 devices, 32.00 GiB per device, 10% reserve, 150 GB/s, 25 us latency'
    """
    spec = preset(device)
    return Machine(devices, memory=spec.memory_bytes, bandwidth=spec.link_bandwidth_Bps,
                   latency=spec.latency_us, reserve=reserve)
