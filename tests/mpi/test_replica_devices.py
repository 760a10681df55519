"""``--replica-devices k``: each node runs G/k ranks, each placing its own replica across its k devices,
all averaging gradients. 2 emulated nodes × 2 replicas × 2 logical devices under ``mpirun -np 4`` train
the losses of one device at the same global batch (2 nodes × 16 samples: 4 replicas of 8)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.losses import one_device_losses, run_losses
from tests.helpers.mpi import LAUNCH, MPIRUN_FLAGS, TINY_JOB, mpi_environment, mpirun_launch, output, require_stack

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

ITERATIONS, NODE_BATCH = 5, 16  # word-rnn-tiny: batch 16 per node
RUN = [*LAUNCH, TINY_JOB, "--iterations", str(ITERATIONS), "--window", "1:4", "--no-progress",
       "--devices-per-node", "4", "--replica-devices", "2", "--costs", "estimate"]


def _launch(out: Path, backend: str, *options: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    proc, _ = mpirun_launch([*RUN, "--out", str(out), "--allreduce", backend, *options], ranks=4, timeout=900,
                            horovod=backend == "horovod")
    assert proc.returncode == 0, output(proc)
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    return proc, json.loads((run_dir / "summary.json").read_text())


@pytest.mark.parametrize("backend", ["mpi4py", "horovod"])
def test_two_replicas_of_two_devices_per_node_train_the_one_device_losses(tmp_path: Path, backend: str) -> None:
    proc, summary = _launch(tmp_path, backend)
    assert summary["status"] == "complete" and summary["allreduce"] == backend
    assert summary["nodes"] == 2 and summary["batch_size"] == NODE_BATCH // 2
    assert summary["settings"]["replica_devices"] == 2
    assert summary["consistency"]["variables_sha256_equal"]
    assert f"gradients averaged across 4 ranks by {backend}" in proc.stderr
    assert "2 node(s) × 2 cpu device(s), 2 replicas of 2 per node" in proc.stderr
    # Every replica places its own graph across its 2 devices, the same way.
    placed = {line.split()[1] for line in (Path(summary["run_dir"]) / "placement.txt").read_text().splitlines()
              if not line.startswith("#")}
    assert placed <= {"0", "1"}
    # A run order ParDNN found was judged with the 4 replicas' allreduce: kept only where not slower.
    placement = summary["placement"]
    judged = placement.get("run_order_judged", "")
    if placement["run_order"] or judged:
        assert judged.startswith("run order kept" if placement["run_order"] else "run order dropped"), judged
        assert f"{placement['allreduce']['step_us'] / 1e3:.2f} ms as it trains" in judged
    np.testing.assert_allclose(run_losses(Path(summary["run_dir"]), 4), one_device_losses(TINY_JOB, 4, 8, ITERATIONS),
                               rtol=1e-5)


@pytest.mark.parametrize("options, words", [
    (["--replica-devices", "3"], "--replica-devices 3 does not divide the node's 4 devices"),
    (["--replica-devices", "2", "--batch-size", "6", "--micro-batches", "2"],
     "each replica's 3 samples (batch_size 6 over 2 replicas, --replica-devices 2) do not split into "
     "--micro-batches 2"),
])
def test_bad_replica_devices_are_one_line_before_any_tensorflow_work(tmp_path: Path, options: list[str],
                                                                      words: str) -> None:
    proc = subprocess.run([*LAUNCH, TINY_JOB, "--devices-per-node", "4", "--out", str(tmp_path), *options],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and words in proc.stderr, output(proc)
    assert "Traceback" not in proc.stderr and not any(tmp_path.iterdir())


@pytest.mark.parametrize(("emulate", "k", "words"), [
    ("2", "2", "PARDNN_EMULATE_NODES='2': expected 0 or 1 (1: every rank stands for a node of its own"),
    ("0", "2", "--replica-devices 2 runs one rank per replica of 2 devices, 4 per node of 8 devices, but node "),
    ("0", "auto", "--replica-devices auto runs one rank per device, 8 per node (the plan chosen trains on every "
                  "k-th), but node "),
])
def test_two_ranks_that_cannot_run_are_one_line_on_rank_0(tmp_path: Path, emulate: str, k: str, words: str) -> None:
    """Every rank finds it; rank 0 alone prints it: a bad PARDNN_EMULATE_NODES, and one node of 8 devices
    running 2 ranks where --replica-devices 2 needs 4 and auto 8 (the line names them, not data parallelism)."""
    mpirun = require_stack(horovod=False)
    env, _ = mpi_environment(emulate=False)
    env["PARDNN_EMULATE_NODES"] = emulate
    proc = subprocess.run([mpirun, *MPIRUN_FLAGS, "-x", "PARDNN_EMULATE_NODES", "-np", "2", *LAUNCH, TINY_JOB,
                           "--devices-per-node", "8", "--replica-devices", k, "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, env=env)
    ours = [line for line in proc.stderr.splitlines() if line.startswith("pardnn-launch")]
    assert proc.returncode != 0 and len(ours) == 1, output(proc)
    assert ours[0].startswith(f"pardnn-launch: error: {words}"), output(proc)
    if emulate == "0":
        n = 4 if k == "2" else 8
        assert ours[0].endswith(f" runs 2. Launch {n} tasks per node (sbatch/srun --ntasks-per-node={n}, mpirun "
                                f"--map-by ppr:{n}:node), or pass --devices-per-node to match"), output(proc)
