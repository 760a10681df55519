"""pardnn-launch under ``mpirun -np 2`` on one machine, each rank standing for a node.

Outside CI these tests skip when horovod or mpirun is missing; in CI (``CI`` set) that fails.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
IN_CI = bool(os.environ.get("CI"))
MPIRUN_FLAGS = ["--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
TINY_JOB = "word-rnn-tiny"  # jobs/word-rnn-tiny.toml: a 2-layer LSTM language model, ms per step

pytestmark = [pytest.mark.mpi, pytest.mark.slow]


def _require_stack() -> str:
    mpirun = shutil.which("mpirun")
    problems = []
    if mpirun is None:
        problems.append("mpirun not on PATH (scripts/setup.sh installs openmpi-bin)")
    try:
        import horovod.tensorflow  # noqa: F401
    except ImportError:
        problems.append("horovod not installed (scripts/install-horovod.sh)")
    if problems:
        if IN_CI:
            pytest.fail("; ".join(problems))
        pytest.skip("; ".join(problems))
    assert mpirun is not None
    return mpirun


def mpirun_launch(program: list[str], *, ranks: int = 2, emulate: bool = True, timeout: float = 150,
                  cwd: Path = ROOT) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ``program`` on ``ranks`` ranks of this machine; returns the process and its wall seconds."""
    mpirun = _require_stack()
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Containers often forbid the cross-memory-attach that Open MPI's shared-memory transport uses.
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    env.pop("PARDNN_EMULATE_NODES", None)
    forward = []
    if emulate:
        env["PARDNN_EMULATE_NODES"] = "1"
        forward = ["-x", "PARDNN_EMULATE_NODES"]
    argv = [mpirun, *MPIRUN_FLAGS, *forward, "-np", str(ranks), *program]
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    return proc, time.monotonic() - started


def _output(proc: subprocess.CompletedProcess[str]) -> str:
    return f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


LAUNCH = [sys.executable, "-m", "launcher.cli"]
STANDIN = [sys.executable, "-m", "tests.launcher.standin"]


def test_two_nodes_train_a_tiny_job_in_lockstep(tmp_path):
    proc, seconds = mpirun_launch([*LAUNCH, TINY_JOB, "--iterations", "160", "--window", "100:150",
                                   "--devices-per-node", "2", "--out", str(tmp_path)])
    assert proc.returncode == 0, _output(proc)
    [run_dir] = [p for p in tmp_path.iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())

    assert summary["status"] == "complete" and summary["nodes"] == 2 and summary["emulated_nodes"] is True
    assert summary["window"] == [100, 150] and summary["global_batch_size"] == 2 * summary["batch_size"]
    nodes = summary["per_node"]
    assert [n["rank"] for n in nodes] == [0, 1] and nodes[0]["node"] != nodes[1]["node"]
    throughput = summary["throughput"]
    assert throughput["complete"] is True
    assert throughput["samples_per_s"] == pytest.approx(sum(n["throughput"]["samples_per_s"] for n in nodes))
    assert throughput["tokens_per_s"] > throughput["samples_per_s"] > 0
    for node in nodes:
        assert node["iterations_run"] == 160 and node["throughput"]["steps"] == 50
        peaks = node["memory"]["device_peak_bytes"]
        assert sorted(peaks) == ["/device:CPU:0", "/device:CPU:1"] and min(peaks.values()) > 0
        assert set(node["phases_seconds"]) >= {"build", "profile", "partition", "apply", "train"}
    # Data parallelism worked: the same placement everywhere, and identical variables after training.
    assert nodes[0]["placement_sha256"] == nodes[1]["placement_sha256"] == summary["placement"]["sha256"]
    assert nodes[0]["variables_sha256"] == nodes[1]["variables_sha256"]
    assert summary["consistency"] == {"placement_sha256_equal": True, "variables_sha256_equal": True}
    assert summary["versions"]["horovod"] and summary["versions"]["mpi"]
    # Each rank wrote its own records; rank 0 wrote the placement and the sweep row.
    for rank in (0, 1):
        records = _records(run_dir / f"rank-{rank}.jsonl")
        assert records[-1]["status"] == "complete"
        assert sum(r["event"] == "iteration" for r in records) == 160
    placed = (run_dir / "placement.txt").read_text().splitlines()
    assert len(placed) == summary["placement"]["ops"]
    [row] = list(csv.DictReader((tmp_path / "results.csv").read_text().splitlines()))
    assert (row["nodes"], row["devices_per_node"], row["status"]) == ("2", "2", "complete")
    print(f"\ntwo-node run: {seconds:.1f} s wall, {throughput['samples_per_s']:.1f} samples/s, "
          f"{throughput['tokens_per_s']:.1f} tokens/s over iterations 100-150")


def test_an_error_on_one_rank_ends_the_run_with_its_message(tmp_path):
    settings = json.dumps({"iterations": 160, "progress": False})
    # A hang (the healthy rank waiting in its allreduce) would end in TimeoutExpired; no wall time is asserted.
    proc, _ = mpirun_launch([*STANDIN, "--out", str(tmp_path), "--fail-at", "60", "--settings", settings])
    assert proc.returncode != 0, _output(proc)
    assert ("pardnn-launch: error on rank 1 (node " in proc.stderr
            and "InjectedFailure: injected failure while feeding iteration 60" in proc.stderr), _output(proc)
    [run_dir] = [p for p in tmp_path.iterdir() if p.is_dir()]
    failed = _records(run_dir / "rank-1.jsonl")[-1]
    assert failed["status"] == "failed" and "injected failure" in failed["message"]


def test_two_ranks_on_one_node_are_refused_with_the_fix(tmp_path):
    proc, _ = mpirun_launch([*LAUNCH, TINY_JOB, "--out", str(tmp_path)], emulate=False)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if "pardnn-launch: error" in line]
    assert len(errors) == 1, _output(proc)  # rank 0 speaks for both
    assert "--ntasks-per-node=1" in errors[0] and "mpirun --map-by ppr:1:node" in errors[0]
    assert "Traceback" not in proc.stderr


def test_sigterm_to_mpirun_stops_both_nodes_with_their_records(tmp_path):
    """Slurm's time limit: SIGTERM reaches every rank; each writes what it measured and the run ends."""
    mpirun = _require_stack()
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
           "PARDNN_EMULATE_NODES": "1"}
    settings = json.dumps({"iterations": 1_000_000, "window": "10:20", "progress": False})
    argv = [mpirun, *MPIRUN_FLAGS, "-x", "PARDNN_EMULATE_NODES", "-np", "2", *STANDIN, "--out", str(tmp_path),
            "--settings", settings]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while not list(tmp_path.glob("*/placement.txt")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(3)  # into training
    started = time.monotonic()
    proc.terminate()
    _, stderr = proc.communicate(timeout=60)
    assert time.monotonic() - started < 30
    assert proc.returncode != 0
    [run_dir] = [p for p in tmp_path.iterdir() if p.is_dir()]
    for rank in (0, 1):
        records = _records(run_dir / f"rank-{rank}.jsonl")
        assert records[-1]["status"] == "terminated", stderr
        assert sum(r["event"] == "iteration" for r in records) > 20
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "terminated" and summary["throughput"]["samples_per_s"] > 0
