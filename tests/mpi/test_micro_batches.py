"""pardnn-launch with micro-batched steps under ``mpirun -np 2`` (each rank standing for a node)."""

from __future__ import annotations

import json

import pytest

from tests.helpers.mpi import LAUNCH, TINY_JOB, mpirun_launch, output

pytestmark = [pytest.mark.mpi, pytest.mark.slow]


def test_two_nodes_train_a_micro_batched_job(tmp_path):
    proc, seconds = mpirun_launch([*LAUNCH, TINY_JOB, "--micro-batches", "4", "--out", str(tmp_path)])
    assert proc.returncode == 0, output(proc)
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


def test_two_nodes_choose_the_same_m_with_auto_and_train_it(tmp_path):
    """--micro-batches auto at batch 8: M = 1, 2, 4, 8 built, profiled (the nodes' costs averaged) and placed on
    both ranks (unless a lower bound rules one out); both choose the same M and train identical placements
    of its graph."""
    proc, seconds = mpirun_launch([*LAUNCH, TINY_JOB, "--micro-batches", "auto", "--batch-size", "8",
                                   "--out", str(tmp_path)], timeout=600)
    assert proc.returncode == 0, output(proc)
    [run_dir] = [p for p in tmp_path.iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["nodes"] == 2
    table = summary["micro_batches"]
    assert [(row["micro_batches"], row["status"] == "skipped") for row in table["trials"]] == [
        (1, False), (2, False), (4, False), (8, False), (16, True)]
    placed = [row for row in table["trials"] if row["status"] == "fits"]
    assert all(row["step_us"] > 0 and row["peak_bytes"] > 0 for row in placed)
    chosen = table["chosen"]
    [row] = [row for row in placed if row["micro_batches"] == chosen]
    label = f"k={row['replica_devices']} M={chosen}"
    assert f"micro-batches auto: chose {label}: " in proc.stderr and table["why"].startswith(label)
    allreduce = summary["placement"]["allreduce"]  # each M compared with the gradient allreduce of 2 nodes in its step
    assert allreduce["replicas"] == 2 and row["step_us"] == pytest.approx(allreduce["step_us"])
    nodes = summary["per_node"]
    assert nodes[0]["placement_sha256"] == nodes[1]["placement_sha256"] == summary["placement"]["sha256"]
    assert summary["consistency"]["placement_sha256_equal"] and summary["consistency"]["variables_sha256_equal"]
    placed_ops = {line.split()[0] for line in (run_dir / "placement.txt").read_text().splitlines()}
    assert ({f"micro_{m}/tokens" for m in range(chosen)} <= placed_ops) if chosen > 1 else ("tokens" in placed_ops)
    for rank in (0, 1):  # each rank logged the same choice
        assert f"chose {label}:" in (run_dir / f"rank-{rank}.log").read_text()
    print(f"\nauto two-node run: {seconds:.1f} s wall; " + ", ".join(
        f"M = {row['micro_batches']}: {row['status']} {row['step_us'] or row['bound_us'] or 0:.0f} us"
        for row in table["trials"]) + f"; chose M = {chosen}")


def test_auto_with_compare_is_refused_in_one_line(tmp_path):
    proc, _ = mpirun_launch([*LAUNCH, TINY_JOB, "--micro-batches", "auto", "--compare", "pardnn,critical_path",
                             "--out", str(tmp_path)])
    assert proc.returncode == 1, output(proc)  # a bad setting, found by every rank, said once
    assert proc.stderr.count("--micro-batches auto chooses M for one placement") == 1
    assert "--micro-batches auto chooses M for one placement; --compare trains several" in proc.stderr
