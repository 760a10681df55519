"""The GPUs this rank may use, their model and memory, and what the run's settings take from them.

:func:`detect` is a pure function of the environment and ``nvidia-smi``'s output; :func:`detect_gpus`
gathers those inputs without importing TensorFlow; :func:`adapt` applies a detection to resolved
settings (what the job file and command line leave unset). The rules are in docs/launcher.md ("GPUs,
presets and sizing").
"""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from launcher.env import launch_rank
from launcher.errors import LaunchError
from pardnn.settings import PLACEMENT

__all__ = ["NVIDIA_SMI", "GpuInfo", "adapt", "describe", "detect", "detect_gpus", "parse_nvidia_smi",
           "pinned_keys", "preset_for"]

logger = logging.getLogger(__name__)

NVIDIA_SMI = ("nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits")
_HIDDEN = ("", "-1", "none", "nodevfiles", "void")
# Model name substrings (lower case) → preset; the first that matches wins.
_MODELS = (("h200", "h200-141gb"), ("h100", "h100-80gb"), ("a100", "a100-80gb"), ("v100", "v100-32gb"))
ADAPTED = ("devices_per_node", "device_preset", "memory")


@dataclass(frozen=True)
class GpuInfo:
    """``count`` GPUs this rank may use; ``model``/``memory_mib`` when known (the smallest if they differ)."""

    count: int
    model: str | None
    memory_mib: int | None
    source: str

    @property
    def preset(self) -> str | None:
        return preset_for(self.model, self.memory_mib)


def parse_nvidia_smi(text: str | None) -> list[tuple[str, int | None]]:
    """Rows ``(name, MiB)`` of ``nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits``."""
    rows = []
    for line in (text or "").splitlines():
        name, _, memory = line.strip().rpartition(",")
        if not name.strip():
            continue
        memory = memory.strip()
        rows.append((name.strip(), int(float(memory)) if memory.replace(".", "", 1).isdigit() else None))
    return rows


def _ids(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def detect(environ: Mapping[str, str], smi_text: str | None = None,
           tf_gpus: Sequence[tuple[str, int | None]] | None = None) -> GpuInfo | None:
    """The GPUs a rank may use, from its environment, ``nvidia-smi``'s output and TensorFlow's devices.

    ``tf_gpus``: ``(name, MiB)`` per GPU TensorFlow lists (it honours ``CUDA_VISIBLE_DEVICES``
    already). ``None`` when no GPU is there or visible.
    """
    smi = parse_nvidia_smi(smi_text)
    sources = []
    slurm: list[str] | int | None = None
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        if _ids(environ.get(name, "")):
            slurm, slurm_name = _ids(environ[name]), name
            break
    else:
        on_node = environ.get("SLURM_GPUS_ON_NODE", "").strip()
        if on_node.isdigit() and int(on_node) > 0:
            slurm, slurm_name = int(on_node), "SLURM_GPUS_ON_NODE"
    if not smi and not tf_gpus and slurm is None:
        return None
    rows: list[tuple[str, int | None]] = list(tf_gpus or smi)
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if tf_gpus:
        count, sources = len(tf_gpus), ["TensorFlow"]
    elif visible is not None:
        if visible.strip().lower() in _HIDDEN:
            return None
        ids = _ids(visible)
        count, sources = len(ids), ["CUDA_VISIBLE_DEVICES"]
        if rows and all(i.isdigit() and int(i) < len(rows) for i in ids) and len(rows) > len(ids):
            rows = [rows[int(i)] for i in ids]  # nvidia-smi lists every GPU of the node
    elif slurm is not None:
        count, sources = (slurm if isinstance(slurm, int) else len(slurm)), [slurm_name]
    else:
        count, sources = len(smi), ["nvidia-smi"]
    if count <= 0:
        return None
    if smi and not tf_gpus:
        sources.append("nvidia-smi")
    names = sorted({name for name, _ in rows})
    memories = [mib for _, mib in rows if mib is not None]
    model = " / ".join(names) if names else None
    return GpuInfo(count, model, min(memories) if memories else None, ", ".join(dict.fromkeys(sources)))


def preset_for(model: str | None, memory_mib: int | None = None) -> str | None:
    """The device preset of a GPU model (by name: V100, A100, H100, H200), ``None`` for others.

    The preset gives the rates and the interconnect; memory comes from the detection, so an A100
    40GB maps to ``a100-80gb`` with 40 GB per device (``memory_mib`` is not needed to choose).
    """
    del memory_mib
    lowered = (model or "").lower()
    return next((preset for key, preset in _MODELS if key in lowered), None)


def run_nvidia_smi(timeout: float = 10.0) -> str | None:
    """``nvidia-smi``'s GPU list, or ``None`` when it is absent, fails or hangs."""
    try:
        proc = subprocess.run(list(NVIDIA_SMI), capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _tf_gpus() -> list[tuple[str, int | None]] | None:
    """TensorFlow's GPUs as ``(name, MiB)``, only when TensorFlow is already imported."""
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return None
    try:
        found = []
        for device in tf.config.list_physical_devices("GPU"):
            details = tf.config.experimental.get_device_details(device)
            found.append((str(details.get("device_name", "GPU")), None))
        return found or None
    except Exception:  # a TensorFlow without GPU support or device details: no detection
        return None


def detect_gpus(environ: Mapping[str, str] | None = None) -> GpuInfo | None:
    """:func:`detect` on this process's environment, ``nvidia-smi`` and (if loaded) TensorFlow."""
    return detect(os.environ if environ is None else environ, run_nvidia_smi(), _tf_gpus())


def pinned_keys(job: Any) -> set[str]:
    """The ``[placement]`` keys the job file sets (its defaults filled in do not count)."""
    path = getattr(job, "path", None)
    if path is not None:
        try:
            with open(path, "rb") as handle:
                return set(tomllib.load(handle).get("placement", {}))
        except (OSError, tomllib.TOMLDecodeError):
            pass
    return {name for name in ADAPTED if getattr(job, name, PLACEMENT[name].default) != PLACEMENT[name].default}


def describe(gpus: GpuInfo | None, settings: Any) -> str:
    """``devices: 8 × NVIDIA A100-SXM4-80GB (detected; preset a100-80gb)`` and where each part came from."""
    sources = settings.sources
    if gpus is None:
        return (f"devices: {settings.devices_per_node} per node ({sources.get('devices_per_node', 'default')}; no GPU "
                "seen by Slurm or nvidia-smi: logical CPU devices unless TensorFlow finds GPUs); "
                f"preset {settings.device_preset} ({sources.get('device_preset', 'default')})")
    model = gpus.model or "GPU(s) of unknown model"
    line = f"devices: {settings.devices_per_node} × {model} ({sources.get('devices_per_node', 'default')}"
    line += f"; preset {settings.device_preset}" + (
        ")" if sources.get("device_preset") == "detected" else f" ({sources.get('device_preset')}))")
    memory = settings.memory or "unlimited"
    return f"{line}, memory {memory} ({sources.get('memory', 'default')}); {gpus.count} GPU(s) via {gpus.source}"


def adapt(settings: Any, job: Any, gpus: GpuInfo | None) -> Any:
    """``settings`` with what the user left unpinned taken from ``gpus``; logs the devices line.

    Raises :class:`LaunchError` when ``devices_per_node`` asks for more GPUs than there are.
    """
    if gpus is None:  # today's behaviour; launcher.core logs the devices TensorFlow gives
        logger.debug("%s", describe(None, settings))
        return settings
    pinned = pinned_keys(job)
    sources = dict(settings.sources)
    changes: dict[str, Any] = {}

    def free(name: str) -> bool:
        return sources.get(name) != "command line" and name not in pinned

    if free("devices_per_node"):
        changes["devices_per_node"] = gpus.count
    preset = gpus.preset
    if preset is not None and free("device_preset"):
        changes["device_preset"] = preset
    if gpus.memory_mib is not None and free("memory"):
        changes["memory"] = f"{gpus.memory_mib}MiB"
    for name in list(changes):
        sources[name] = "detected"
    changes["gpus"] = f"{gpus.count} × {gpus.model or 'GPU'}"
    adapted = dataclasses.replace(settings, **changes, sources=sources)
    asked = adapted.devices_per_node
    if asked > gpus.count:
        raise LaunchError(
            f"devices_per_node = {asked} ({sources['devices_per_node']}), but this node has {gpus.count} GPU(s) "
            f"({gpus.source}); pass --devices-per-node {gpus.count} or fewer, or ask for more GPUs "
            "(sbatch --gpus-per-node)")
    logger.info("%s", describe(gpus, adapted))
    if preset is None and gpus.model and free("device_preset"):
        logger.info("no preset for %s: costs and interconnect use %s", gpus.model, adapted.device_preset)
    if asked < gpus.count and launch_rank() in (None, 0):
        logger.warning("%d of %d GPUs left idle: devices_per_node = %d (%s); drop it to use all of them, or ask "
                       "Slurm for fewer (--gpus-per-node %d)", gpus.count - asked, gpus.count, asked,
                       sources["devices_per_node"], asked)
    return adapted
