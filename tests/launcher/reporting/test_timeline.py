"""The launcher draws the emulated step the placer already computed (``emulated-step.json``), and
emulates only a placement that comes without one (a resumed run's, read back from its file)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from launcher.reporting import timeline
from launcher.reporting.timeline import write_emulated
from pardnn import CostGraph, Machine, partition
from pardnn.registry import PLACERS


def fork_join() -> tuple[CostGraph, Machine]:
    """a(10 µs) feeds b and c (40 µs each), which d (10 µs) joins; 1000-byte outputs."""
    graph = CostGraph.from_named_edges(["a", "b", "c", "d"], [10.0, 40.0, 40.0, 10.0], [1000, 1000, 1000, 0],
                                       [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])
    return graph, Machine(2, memory="1MiB", bandwidth="1GB/s", latency="1us")


def _trace(path: Path) -> dict:
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


@pytest.mark.parametrize("placer", [name for name in PLACERS if name != "exact"])
def test_every_placer_returns_the_step_its_report_describes(placer: str) -> None:
    graph, machine = fork_join()
    result = PLACERS[placer](graph, machine)
    assert result.schedule is not None and result.memory is not None
    assert result.schedule.makespan_us == result.report.evaluation.makespan_us
    assert result.memory.peak_bytes.tolist() == result.report.evaluation.peak_memory_bytes


def test_the_placers_step_is_drawn_without_a_second_emulation(tmp_path: Path, monkeypatch) -> None:
    graph, machine = fork_join()
    result = partition(graph, machine)
    again = tmp_path / "emulated-again.json"
    assert write_emulated(again, graph, machine, result.placement, result.order) == 62.0  # by hand: 10 + 2 + 40 + 10

    def no_emulation(*args, **kwargs):
        raise AssertionError("the launcher emulated a step the placer had already emulated")

    monkeypatch.setattr(timeline, "emulate", no_emulation)
    monkeypatch.setattr(timeline, "track_memory", no_emulation)
    kept = tmp_path / "emulated-step.json"
    makespan = write_emulated(kept, graph, machine, result.placement, result.order, schedule=result.schedule,
                              memory=result.memory)
    assert makespan == result.report.evaluation.makespan_us == 62.0
    assert _trace(kept) == _trace(again)  # the same drawing either way


def test_a_placement_without_its_step_is_emulated(tmp_path: Path) -> None:
    graph, machine = fork_join()
    makespan = write_emulated(tmp_path / "step.json", graph, machine, np.array([0, 0, 0, 0]))
    assert makespan == 100.0  # one device: 10 + 40 + 40 + 10
