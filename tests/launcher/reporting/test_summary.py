"""The summary and its results.csv row, for a whole run and for one that ended without some nodes' figures."""

from __future__ import annotations

from pathlib import Path

from launcher.reporting.summary import results_row, summarize
from tests.launcher.standin import Job

SETTINGS = {"batch_size": 8, "window": [10, 20], "iterations": 100, "costs": "profile", "memory": None}
DEVICES = {"count": 2, "kind": "cpu", "names": ["/device:CPU:0", "/device:CPU:1"]}


def _node(rank: int, rate: float, complete: bool = True) -> dict:
    return {"rank": rank, "throughput": {"samples_per_s": rate, "tokens_per_s": None, "complete": complete,
                                         "step_ms_median": 5.0}}


def _summary(nodes, node_count=None):
    return summarize(status="time_limit", job=Job(), settings=SETTINGS, nodes=nodes, devices=DEVICES,
                     placement={"sha256": "ab"}, extra={}, node_count=node_count)


def test_a_whole_run_sums_its_nodes():
    summary = _summary([_node(0, 10.0), _node(1, 12.0)])
    assert (summary["nodes"], summary["global_batch_size"]) == (2, 16)
    assert summary["throughput"]["samples_per_s"] == 22.0 and summary["throughput"]["complete"] is True
    row = results_row(summary, "2024-01-01T00:00:00Z", Path("/runs/x"))
    assert (row["status"], row["samples_per_s"], row["window_complete"]) == ("time_limit", 22.0, "true")


def test_missing_figures_leave_the_global_figures_unknown():
    summary = _summary([_node(0, 10.0)], node_count=2)
    assert (summary["nodes"], summary["global_batch_size"]) == (2, 16)
    assert summary["throughput"]["samples_per_s"] is None and summary["throughput"]["complete"] is False
    assert summary["throughput"]["per_node_samples_per_s"] == [10.0]
    row = results_row(summary, "2024-01-01T00:00:00Z", Path("/runs/x"))
    assert (row["samples_per_s"], row["window_complete"]) == (None, "false")
