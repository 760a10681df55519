"""benchmarks/estimate_vs_profile.py: one model compared, the section rendered, the CPU preset."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("tensorflow")

from benchmarks.estimate_vs_profile import compare, render
from pardnn.costs.presets import preset


@pytest.mark.slow
@pytest.mark.tf
def test_one_model_is_compared_and_rendered():
    row = compare("word-rnn-tiny", steps=2)
    assert row["ops"] > 900 and 0 < row["compared"] + row["free"] <= row["ops"]  # the step, 994 ops
    assert -1 <= row["rho"] <= 1 and row["median"] > 0 and row["p10"] <= row["median"] <= row["p90"]
    # Both placements judged with the profiled costs: the profiled one is ParDNN's own answer for them.
    assert row["makespan_profiled_us"] > 0 and math.isclose(
        row["placement_ratio"], row["makespan_estimated_us"] / row["makespan_profiled_us"])
    text = render([row], 1.0, "python -m benchmarks.estimate_vs_profile", 2)
    assert "| word-rnn-tiny |" in text and "cpu-2core" in text


def test_the_cpu_preset_describes_this_machine():
    cpu = preset("cpu-2core")
    assert cpu.memory_bytes == 24 * 2**30 and cpu.link_bandwidth_Bps == cpu.memory_bandwidth_Bps
    assert cpu.kernel_us(0, 0) == cpu.launch_us == 1.0
