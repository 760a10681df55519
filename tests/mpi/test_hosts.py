"""``pardnn-launch --hosts localhost,localhost``: the launcher starts mpirun itself (two emulated nodes)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.helpers.mpi import ROOT, TINY_JOB, mpi_environment, require_stack

pytestmark = [pytest.mark.mpi, pytest.mark.slow]


def test_hosts_runs_one_rank_per_listed_host(tmp_path):
    require_stack()
    env, _ = mpi_environment(emulate=True)  # PARDNN_EMULATE_NODES=1: localhost twice stands for two nodes
    out = tmp_path / "runs"
    # Open MPI needs --oversubscribe for 2 ranks on 2 cores, and --allow-run-as-root in containers.
    argv = ["pardnn-launch", "--hosts", "localhost,localhost", "--mpi-args=--oversubscribe --allow-run-as-root",
            TINY_JOB, "--iterations", "30", "--window", "10:30", "--devices-per-node", "2", "--out", str(out),
            "--no-progress"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(next(out.glob("*/summary.json")).read_text())
    assert summary["status"] == "complete" and summary["nodes"] == 2
    assert summary["consistency"]["placement_sha256_equal"] and summary["consistency"]["variables_sha256_equal"]
