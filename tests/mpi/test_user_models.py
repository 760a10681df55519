"""pardnn-launch trains the user's own models (examples/keras_*) under ``mpirun -np 2``, each rank
standing for a node: the same placement on both, identical replicas after training, a results row.

Outside CI these tests skip when horovod or mpirun is missing; in CI (``CI`` set) that fails.
"""

from __future__ import annotations

import csv
import json

import pytest

from tests.mpi.test_launch import LAUNCH, ROOT, _output, _records, mpirun_launch

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

EXAMPLES = ["keras_cnn", "keras_transformer"]


@pytest.mark.parametrize("example", EXAMPLES)
def test_two_nodes_train_a_users_keras_model(tmp_path, example):
    # Run from another folder: the job file's own folder is where its module net.py is found.
    work = tmp_path / "elsewhere"
    work.mkdir()
    job = ROOT / "examples" / example / "job.toml"
    out = tmp_path / "runs"
    proc, seconds = mpirun_launch([*LAUNCH, str(job), "--out", str(out), "--no-progress"], timeout=400, cwd=work)
    assert proc.returncode == 0, _output(proc)
    assert "Traceback" not in proc.stderr, _output(proc)
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())

    assert summary["status"] == "complete" and summary["nodes"] == 2 and summary["emulated_nodes"] is True
    assert summary["job"]["model"] == "net:build" and summary["job"]["data"] == {"entry": "net:batches"}
    assert summary["window"] == [10, 30] and summary["devices_per_node"] == 4
    nodes = summary["per_node"]
    assert [n["rank"] for n in nodes] == [0, 1]
    for node in nodes:
        assert node["iterations_run"] == 30 and node["throughput"]["steps"] == 20
    # Data parallelism worked: the same placement everywhere, and identical variables after training.
    assert nodes[0]["placement_sha256"] == nodes[1]["placement_sha256"] == summary["placement"]["sha256"]
    assert nodes[0]["variables_sha256"] == nodes[1]["variables_sha256"]
    assert summary["consistency"]["placement_sha256_equal"] is True
    assert summary["consistency"]["variables_sha256_equal"] is True
    for rank in (0, 1):
        records = _records(run_dir / f"rank-{rank}.jsonl")
        assert records[-1]["status"] == "complete"
        losses = [r["loss"] for r in records if r["event"] == "iteration"]
        assert len(losses) == 30 and all(loss == loss for loss in losses)  # no NaN
    placed = (run_dir / "placement.txt").read_text().splitlines()
    assert len(placed) == summary["placement"]["ops"]
    [row] = list(csv.DictReader((out / "results.csv").read_text().splitlines()))
    assert (row["job"], row["model"], row["nodes"], row["devices_per_node"], row["status"]) == (
        example.replace("_", "-"), "net:build", "2", "4", "complete")
    print(f"\n{example}: {seconds:.1f} s wall, {summary['throughput']['samples_per_s']:.1f} samples/s")
