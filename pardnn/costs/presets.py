"""Device presets: published peak rates of data-centre GPUs and their node interconnect.

Used by :func:`pardnn.tf.estimate.estimate` (roofline costs) and :func:`machine_for` (a
:class:`~pardnn.costs.machine.Machine` for K such GPUs). This module does not import TensorFlow, so the
CLI and the launcher can build a machine from a preset name alone.

Figures (vendor datasheets; FP32 without tensor cores, dense):

============  ===========  ===========  ======  ===========================================
preset        FP32 peak    HBM          memory  GPU-to-GPU, per direction
============  ===========  ===========  ======  ===========================================
v100-32gb     15.7 TFLOP/s 900 GB/s     32 GiB  150 GB/s: 6 NVLink2 links × 25 GB/s (NVSwitch, DGX-2)
a100-80gb     19.5 TFLOP/s 2039 GB/s    80 GiB  300 GB/s: NVLink3, 12 links × 25 GB/s (DGX A100)
h100-80gb     67 TFLOP/s   3350 GB/s    80 GiB  450 GB/s: NVLink4, 18 links × 25 GB/s (DGX H100)
h200-141gb    67 TFLOP/s   4800 GB/s   141 GB   450 GB/s: NVLink4, 18 links × 25 GB/s (DGX H200)
cpu-2core     0.14 TFLOP/s 19 GB/s      24 GiB  19 GB/s: logical devices share one memory
============  ===========  ===========  ======  ===========================================

The node each GPU comes in, by its alias:

============  ==========  ====  ===================================
preset        alias       GPUs  network (the node's NICs together)
============  ==========  ====  ===================================
v100-32gb     dgx-2       16    8 × 100 Gb/s InfiniBand: 100 GB/s
a100-80gb     dgx-a100    8     8 × 200 Gb/s InfiniBand: 200 GB/s
h100-80gb     dgx-h100    8     8 × 400 Gb/s InfiniBand: 400 GB/s
h200-141gb    dgx-h200    8     8 × 400 Gb/s InfiniBand: 400 GB/s
cpu-2core                 2     MPI between ranks in one memory
============  ==========  ====  ===================================

The gradient allreduce across nodes uses the network (:mod:`pardnn.emulation.allreduce`). Its latency per
ring step (``network_latency_us``, 10 µs) and that of a ring step inside the node
(``step_latency_us``, 5 µs) are model parameters; for ``cpu-2core`` both and its network are fitted to
Horovod's allreduce between MPI ranks of the test machine (``python -m benchmarks.allreduce_model``).

``cpu-2core`` is this project's test machine (2 cores of an AMD EPYC, 24 GiB), for comparing
estimates with profiles where no GPU is: TensorFlow 2.15's FP32 matmul rate and elementwise
bandwidth on one logical CPU device, measured by ``python -m benchmarks.estimate_vs_profile
--calibrate`` (best of 5 runs of a 2048² matmul and a 32 Mi-element add); a copy between logical CPU
devices is a memory copy, so its link is the memory bandwidth, with 5 µs latency; 1 µs per op is the
traced time of a scalar add (the floor of every profiled op time).

The V100 row is the paper's machine (DGX-2, 16 × Tesla V100-SXM3-32GB over NVSwitch); 15.7 TFLOP/s
is the datasheet figure for V100 SXM. Two figures are model parameters, not datasheet numbers:
``latency_us`` (25 µs: a TensorFlow Send/Recv pair with its copy launch, far above the wire
latency) and ``launch_us`` (5 µs: TensorFlow's per-op dispatch and kernel launch on a GPU).
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
