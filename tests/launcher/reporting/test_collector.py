"""Collector: throughput over the window by hand, phases, memory peaks, JSON lines."""

from __future__ import annotations

import json

import pytest

from launcher.reporting.collector import Collector, window_throughput


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_window_throughput_by_hand():
    # iterations 0..5; window 2:5 takes 0.5 + 0.25 + 0.25 = 1.0 s for 3 steps of 8 samples, 80 tokens.
    figures = window_throughput([9.0, 9.0, 0.5, 0.25, 0.25, 9.0], (2, 5), 8, 80)
    assert figures["steps"] == 3
    assert figures["seconds"] == pytest.approx(1.0)
    assert figures["samples_per_s"] == pytest.approx(24.0)
    assert figures["tokens_per_s"] == pytest.approx(240.0)
    assert figures["step_ms_median"] == pytest.approx(250.0)
    assert figures["complete"] is True


def test_window_throughput_of_a_stopped_run_is_marked_incomplete():
    figures = window_throughput([1.0, 1.0, 0.5], (1, 10), 4, None)
    assert (figures["steps"], figures["complete"], figures["tokens_per_s"]) == (2, False, None)
    assert figures["samples_per_s"] == pytest.approx(8 / 1.5)


def test_window_throughput_empty_window():
    figures = window_throughput([1.0], (5, 10), 4, None)
    assert (figures["steps"], figures["samples_per_s"], figures["step_ms_mean"]) == (0, 0.0, None)


def test_collector_records_phases_iterations_and_memory(tmp_path):
    clock = FakeClock()
    path = tmp_path / "rank-0.jsonl"
    collector = Collector(path, {"rank": 0, "node": "n0"}, clock=clock, flush_every=1e9)
    with collector.phase("build"):
        clock.now += 2.0
    usage = iter([100, 300, 200, 50])
    collector.watch_memory(lambda: {"/device:CPU:0": next(usage)}, "process-rss", (1, 3))
    for index, seconds in enumerate([0.5, 0.25, 0.75]):
        collector.before_iteration(index)
        collector.iteration(index, seconds, loss=1.0 / (index + 1))
    summary = collector.node_summary((1, 3), samples_per_step=4, tokens_per_step=None)
    assert summary["phases_seconds"] == {"build": 2.0}
    assert summary["throughput"]["samples_per_s"] == pytest.approx(8 / 1.0)
    assert summary["memory"]["device_peak_bytes"] == {"/device:CPU:0": 300}
    assert summary["final_loss"] == pytest.approx(1 / 3)
    assert summary["host"]["seconds"] >= 0
    assert summary["rank"] == 0

    collector.flush("complete")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["event"] for r in records].count("iteration") == 3
    assert records[-1] == {**records[-1], "event": "status", "status": "complete", "rank": 0, "node": "n0"}
    assert not list(tmp_path.glob(".*tmp"))


def test_collector_flushes_periodically(tmp_path):
    clock = FakeClock()
    path = tmp_path / "rank-1.jsonl"
    collector = Collector(path, {"rank": 1}, clock=clock, flush_every=10.0)
    collector.iteration(0, 0.1)
    assert not path.exists()
    clock.now = 11.0
    collector.iteration(1, 0.1)
    assert json.loads(path.read_text().splitlines()[-1])["status"] == "running"


def test_a_final_status_is_not_overwritten_by_a_periodic_flush(tmp_path):
    path = tmp_path / "rank-0.jsonl"
    collector = Collector(path, {"rank": 0}, flush_every=0.0)
    collector.flush("time_limit", "stopped by SIGTERM")  # the signal watcher's thread
    collector.iteration(0, 0.1)  # the main thread, one step later: its periodic flush must not undo it
    assert json.loads(path.read_text().splitlines()[-1])["status"] == "time_limit"
    collector.flush("complete")
    assert json.loads(path.read_text().splitlines()[-1])["status"] == "complete"
