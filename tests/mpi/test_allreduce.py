"""The mpi4py allreduce backend through pardnn-launch under mpirun: the losses of one device at the same
global batch, on either TensorFlow stack (no Horovod needed).

Runs of word-rnn-tiny for 6 iterations with ``--allreduce mpi4py``:

- 2 ranks (emulated nodes) × 2 logical devices, ParDNN's placement, profiled costs (the default);
- the same with ``--micro-batches 4``;
- plain data parallelism on 2 ranks (one device each).

The reference is made here, in-process, on one device: at iteration ``i`` the batches the replicas read
(``i·R + r``, r = 0..R-1) concatenated into one batch.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.losses import one_device_losses, run_losses
from tests.helpers.mpi import LAUNCH, TINY_JOB, mpirun_launch, output

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

ITERATIONS, WINDOW, NODE_BATCH = 6, "2:5", 16  # word-rnn-tiny: batch 16 per node
RUN = [*LAUNCH, TINY_JOB, "--iterations", str(ITERATIONS), "--window", WINDOW, "--no-progress",
       "--allreduce", "mpi4py"]


def _launch(out: Path, *options: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    proc, _ = mpirun_launch([*RUN, "--out", str(out), *options], ranks=2, timeout=600, horovod=False)
    assert proc.returncode == 0, output(proc)
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    return proc, json.loads((run_dir / "summary.json").read_text())


def _one_device_losses(ranks: int, replica_batch: int) -> np.ndarray:
    return one_device_losses(TINY_JOB, ranks, replica_batch, ITERATIONS)


def _check_consistent(summary: dict) -> None:
    assert summary["status"] == "complete" and summary["allreduce"] == "mpi4py"
    assert summary["consistency"]["variables_sha256_equal"] and summary["consistency"]["variables_compared"] > 0


@pytest.mark.parametrize("micro", [1, 4])
def test_two_nodes_averaging_through_mpi4py_train_the_one_device_losses(tmp_path, micro):
    proc, summary = _launch(tmp_path, "--devices-per-node", "2", "--micro-batches", str(micro))
    _check_consistent(summary)
    assert summary["placement"]["sha256"] and summary["settings"]["micro_batches"] == micro
    assert "gradients averaged across 2 ranks by mpi4py" in proc.stderr
    # The fused host op sits on device 0 (the host here) and keeps its name scope.
    placed = dict(line.split()[:2] for line in (Path(summary["run_dir"]) / "placement.txt").read_text().splitlines())
    fused = [name for name in placed if name.startswith("pardnn_allreduce/fused/")]
    assert fused, "the fused allreduce is in the placed graph"
    np.testing.assert_allclose(run_losses(Path(summary["run_dir"]), 2), _one_device_losses(2, NODE_BATCH), rtol=1e-5)


def test_data_parallelism_through_mpi4py_trains_the_one_device_losses(tmp_path):
    _, summary = _launch(tmp_path, "--parallelism", "data", "--devices-per-node", "2")
    _check_consistent(summary)
    replica = summary["batch_size"]
    assert summary["parallelism"] == "data" and replica == NODE_BATCH // 2
    np.testing.assert_allclose(run_losses(Path(summary["run_dir"]), 2), _one_device_losses(2, replica), rtol=1e-5)
