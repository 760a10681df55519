"""pardnn-launch with micro-batched steps under ``mpirun -np 2`` (each rank standing for a node)."""

from __future__ import annotations

import json

import pytest

from tests.mpi.test_launch import LAUNCH, TINY_JOB, _output, mpirun_launch

pytestmark = [pytest.mark.mpi, pytest.mark.slow]


def test_two_nodes_train_a_micro_batched_job(tmp_path):
    proc, seconds = mpirun_launch([*LAUNCH, TINY_JOB, "--micro-batches", "4", "--out", str(tmp_path)])
    assert proc.returncode == 0, _output(proc)
    assert "4 micro-batches of 4" in proc.stdout + proc.stderr
    [run_dir] = [p for p in tmp_path.iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["nodes"] == 2
    assert summary["settings"]["micro_batches"] == 4 and summary["batch_size"] == 16
    assert summary["throughput"]["samples_per_s"] > 0
    nodes = summary["per_node"]
    assert nodes[0]["placement_sha256"] == nodes[1]["placement_sha256"] == summary["placement"]["sha256"]
    assert summary["consistency"]["placement_sha256_equal"] and summary["consistency"]["variables_sha256_equal"]
    placed = [line.split()[0] for line in (run_dir / "placement.txt").read_text().splitlines()]
    assert {f"micro_{m}/tokens" for m in range(4)} <= set(placed)
    print(f"\nmicro-batched two-node run: {seconds:.1f} s wall, {summary['throughput']['samples_per_s']:.1f} samples/s")


def test_auto_micro_batches_is_refused_in_one_line(tmp_path):
    proc, _ = mpirun_launch([*LAUNCH, TINY_JOB, "--micro-batches", "auto", "--out", str(tmp_path)])
    assert proc.returncode == 2
    assert "'auto' (choosing M by emulating each) is not built yet" in proc.stderr
