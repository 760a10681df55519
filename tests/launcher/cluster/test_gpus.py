"""GPU detection (a pure function of the environment and nvidia-smi's output) and what it sets."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from launcher.cluster import gpus
from launcher.cluster.gpus import GpuInfo, adapt, describe, detect, parse_nvidia_smi, pinned_keys, preset_for
from launcher.errors import LaunchError
from launcher.settings import resolve

# nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits on a DGX-2, a DGX A100, a DGX H100.
V100 = "Tesla V100-SXM3-32GB, 32510\n" * 16
A100 = "NVIDIA A100-SXM4-80GB, 81920\n" * 8
H100 = "NVIDIA H100 80GB HBM3, 81559\n" * 8
A100_40 = "NVIDIA A100-SXM4-40GB, 40960\n" * 4
H200 = "NVIDIA H200, 143771\n"  # as nvidia-smi names it on an H200 SXM machine


def test_parse_nvidia_smi_rows():
    assert parse_nvidia_smi("Tesla V100-SXM3-32GB, 32510\n\nNVIDIA A100-SXM4-80GB, 81920\n") == [
        ("Tesla V100-SXM3-32GB", 32510), ("NVIDIA A100-SXM4-80GB", 81920)]
    assert parse_nvidia_smi("Some GPU, [N/A]") == [("Some GPU", None)]
    assert parse_nvidia_smi(None) == parse_nvidia_smi("") == []


@pytest.mark.parametrize(("text", "count", "preset", "mib"), [
    (V100, 16, "v100-32gb", 32510), (A100, 8, "a100-80gb", 81920), (H100, 8, "h100-80gb", 81559),
    (A100_40, 4, "a100-80gb", 40960), (H200, 1, "h200-141gb", 143771), ("Tesla T4, 15360\n", 1, None, 15360)])
def test_detect_from_nvidia_smi(text, count, preset, mib):
    found = detect({}, text)
    assert found is not None
    assert (found.count, found.preset, found.memory_mib, found.source) == (count, preset, mib, "nvidia-smi")


def test_nothing_detected_without_gpus():
    assert detect({}) is None
    assert detect({"CUDA_VISIBLE_DEVICES": "0,1"}) is None  # no evidence of a GPU: a stray variable
    assert detect({"CUDA_VISIBLE_DEVICES": ""}, A100) is None  # every GPU hidden
    assert detect({"CUDA_VISIBLE_DEVICES": "-1"}, A100) is None


def test_cuda_visible_devices_selects_the_rows_nvidia_smi_lists():
    mixed = "Tesla V100-SXM2-16GB, 16160\nNVIDIA A100-SXM4-80GB, 81920\nNVIDIA A100-SXM4-80GB, 81920\n"
    found = detect({"CUDA_VISIBLE_DEVICES": "1,2"}, mixed)
    assert found == GpuInfo(2, "NVIDIA A100-SXM4-80GB", 81920, "CUDA_VISIBLE_DEVICES, nvidia-smi")
    # Under Slurm's cgroups nvidia-smi lists only the allocated GPUs, CUDA renumbered from 0.
    found = detect({"CUDA_VISIBLE_DEVICES": "0,1,2,3", "SLURM_JOB_GPUS": "4,5,6,7"}, A100[: len(A100) // 2])
    assert found is not None and (found.count, found.preset) == (4, "a100-80gb")


@pytest.mark.parametrize(("env", "count", "source"), [
    ({"SLURM_STEP_GPUS": "0,1,2,3", "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7"}, 4, "SLURM_STEP_GPUS"),
    ({"SLURM_JOB_GPUS": "2,3"}, 2, "SLURM_JOB_GPUS"),
    ({"SLURM_GPUS_ON_NODE": "8"}, 8, "SLURM_GPUS_ON_NODE"),
    ({"SLURM_GPUS_ON_NODE": "0"}, None, None)])
def test_detect_from_slurm_without_nvidia_smi(env, count, source):
    found = detect(env)
    if count is None:
        assert found is None
    else:
        assert found == GpuInfo(count, None, None, source)


def test_tensorflow_devices_win():
    found = detect({"CUDA_VISIBLE_DEVICES": "0,1,2"}, H100, tf_gpus=[("NVIDIA H100 80GB HBM3", None)] * 2)
    assert found == GpuInfo(2, "NVIDIA H100 80GB HBM3", None, "TensorFlow")


def test_preset_for_names():
    assert preset_for("Tesla V100-PCIE-16GB") == "v100-32gb"
    assert preset_for("NVIDIA A100 80GB PCIe") == "a100-80gb"
    assert preset_for("NVIDIA H100 PCIe") == "h100-80gb"
    assert preset_for("NVIDIA GeForce RTX 4090") is None and preset_for(None) is None


def test_nvidia_smi_absent_is_no_output(monkeypatch):
    monkeypatch.setattr(gpus, "NVIDIA_SMI", ("/nonexistent/nvidia-smi", "-L"))
    assert gpus.run_nvidia_smi(timeout=5) is None


@dataclass(frozen=True)
class Job:
    batch_size: int = 8
    devices_per_node: int = 4
    memory: str | None = None
    device_preset: str = "v100-32gb"
    path: Path | None = None


def _job_file(tmp_path: Path, placement: str, **values: Any) -> Job:
    """A job read from a file whose [placement] table is ``placement`` (``values``: what it sets)."""
    path = tmp_path / "job.toml"
    path.write_text(f"[model]\ntype = 'x'\n[placement]\n{placement}\n")
    return Job(path=path, **values)


def test_unpinned_settings_follow_the_gpus(tmp_path, caplog):
    caplog.set_level(logging.INFO, "launcher.cluster.gpus")
    job = _job_file(tmp_path, "reserve = 0.1")
    settings = adapt(resolve(job), job, detect({}, A100))
    assert (settings.devices_per_node, settings.device_preset, settings.memory) == (8, "a100-80gb", "81920MiB")
    assert {settings.sources[k] for k in ("devices_per_node", "device_preset", "memory")} == {"detected"}
    assert settings.gpus == "8 × NVIDIA A100-SXM4-80GB"
    assert "devices: 8 × NVIDIA A100-SXM4-80GB (detected; preset a100-80gb), memory 81920MiB (detected)" in caplog.text
    assert "idle" not in caplog.text


def test_pinned_settings_stay_and_idle_gpus_warn(tmp_path, caplog, monkeypatch):
    monkeypatch.delenv("OMPI_COMM_WORLD_RANK", raising=False)
    job = _job_file(tmp_path, "devices_per_node = 4\ndevice_preset = 'v100-32gb'\nmemory = '32GiB'", memory="32GiB")
    assert pinned_keys(job) == {"devices_per_node", "device_preset", "memory"}
    settings = adapt(resolve(job), job, detect({}, A100))
    assert (settings.devices_per_node, settings.device_preset, settings.memory) == (4, "v100-32gb", "32GiB")
    line = describe(detect({}, A100), settings)
    assert line.startswith("devices: 4 × NVIDIA A100-SXM4-80GB (job file; preset v100-32gb (job file))")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith("4 of 8 GPUs left idle")


def test_command_line_pins_and_too_many_devices_fail(tmp_path):
    job = _job_file(tmp_path, "")
    settings = adapt(resolve(job, {"devices_per_node": 2, "memory": "60GiB"}), job, detect({}, H100))
    assert (settings.devices_per_node, settings.device_preset, settings.memory) == (2, "h100-80gb", "60GiB")
    with pytest.raises(LaunchError, match=r"^devices_per_node = 16 \(command line\), but this node has 8 GPU\(s\) "
                                          r"\(nvidia-smi\); pass --devices-per-node 8 or fewer"):
        adapt(resolve(job, {"devices_per_node": 16}), job, detect({}, A100))


def test_without_gpus_nothing_changes(tmp_path):
    job: Any = _job_file(tmp_path, "")
    settings = resolve(job)
    assert adapt(settings, job, None) == settings and settings.devices_per_node == 4


def test_job_without_file_pins_what_differs_from_the_defaults():
    assert pinned_keys(Job(devices_per_node=2)) == {"devices_per_node"}
    assert pinned_keys(Job()) == set()
