"""Plans of the cluster under ``mpirun -np 4`` (2 emulated nodes × 2 ranks, one per logical device):
``--replica-devices auto`` plans and trains the plan it chose, with the ranks it does not use waiting;
``--compare k=2,k=1`` trains both plans in one allocation. Each trains the losses of one device at the
same global batch (rtol 1e-5)."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.losses import one_device_losses, run_losses
from tests.helpers.mpi import LAUNCH, TINY_JOB, mpirun_launch, output

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

ITERATIONS = 5
RUN = [*LAUNCH, TINY_JOB, "--iterations", str(ITERATIONS), "--window", "1:4", "--no-progress",
       "--devices-per-node", "2", "--costs", "estimate", "--allreduce", "mpi4py"]


def _launch(out: Path, *options: str) -> subprocess.CompletedProcess[str]:
    proc, _ = mpirun_launch([*RUN, "--out", str(out), *options], ranks=4, timeout=900, horovod=False)
    assert proc.returncode == 0, output(proc)
    return proc


def _summaries(out: Path) -> dict[str, dict]:
    return {p.name: json.loads((p / "summary.json").read_text()) for p in out.iterdir()
            if p.is_dir() and (p / "summary.json").exists()}


def test_auto_tries_every_plan_and_trains_the_fastest_that_fits(tmp_path: Path) -> None:
    proc = _launch(tmp_path, "--replica-devices", "auto", "--micro-batches", "auto")
    [summary] = _summaries(tmp_path).values()
    plan = summary["plan"]
    # k = 1 (2 replicas of 8 per node) and k = 2 (1 replica of 16) × M = 1..16; M = 16 does not split 8.
    # Each of the 9 others is placed, or pruned when its step's lower bound is longer than a fitting one's.
    tried = {(t["replica_devices"], t["micro_batches"]): t for t in plan["trials"]}
    assert set(tried) == {(k, m) for k in (1, 2) for m in (1, 2, 4, 8, 16)}
    assert tried[1, 16]["status"] == "skipped" and "does not split" in tried[1, 16]["reason"]
    fitting = [t for t in plan["trials"] if t["status"] == "fits"]
    pruned = [t for t in plan["trials"] if t["status"] == "pruned"]  # not placed: slower than a fitting plan
    assert len(fitting) + len(pruned) == 9 and fitting
    best = max(t["samples_per_s"] for t in fitting)
    chosen = plan["chosen"]
    assert chosen["samples_per_s"] >= best * (1 - 1e-6)  # the fastest (a near-tie may keep the simpler one)
    assert all(t["bound_us"] > chosen["step_us"] and t["step_us"] is None for t in pruned)
    for t in fitting:  # the cluster's samples/s is its 2 nodes × 16 samples over the step
        assert t["samples_per_s"] == pytest.approx(32 / (t["step_us"] * 1e-6))
        assert t["step_us"] == pytest.approx(t["compute_us"] + t["exposed_allreduce_us"])
    k, micro = chosen["replica_devices"], chosen["micro_batches"]
    assert summary["settings"]["replica_devices"] == k and summary["settings"]["micro_batches"] == micro
    assert f"plan chosen: k={k} M={micro}" in proc.stderr
    replicas = 2 * (2 // k)
    assert summary["status"] == "complete" and summary["batch_size"] == 16 * k // 2
    np.testing.assert_allclose(run_losses(Path(summary["run_dir"]), replicas),
                               one_device_losses(TINY_JOB, replicas, 16 * k // 2, ITERATIONS), rtol=1e-5)
    [row] = list(csv.DictReader((tmp_path / "results.csv").open()))
    cut = f" ({len(pruned)} pruned, not placed)" if pruned else ""
    assert row["replica_devices"] == str(k) and row["plan"] == f"auto: k={k} M={micro} of 9 plans tried{cut}"


def test_auto_trains_on_every_kth_rank_while_the_others_wait(tmp_path: Path) -> None:
    # 15 samples per node do not split over 2 replicas: only k = 2 (one replica per node) can train.
    _launch(tmp_path, "--replica-devices", "auto", "--batch-size", "15")
    [summary] = _summaries(tmp_path).values()
    assert [t["status"] for t in summary["plan"]["trials"]] == ["skipped", "fits"]
    assert summary["plan"]["why"] == "k=2 M=1: the only plan that fits"
    run_dir = Path(summary["run_dir"])
    assert summary["nodes"] == 2 and summary["replicas"] == 2  # ranks 1 and 3 (local rank 1) waited
    assert sorted(p.name for p in run_dir.glob("rank-*.jsonl")) == ["rank-0.jsonl", "rank-1.jsonl"]
    np.testing.assert_allclose(run_losses(run_dir, 2), one_device_losses(TINY_JOB, 2, 15, ITERATIONS), rtol=1e-5)


def test_compare_trains_each_plan_in_one_allocation(tmp_path: Path) -> None:
    proc = _launch(tmp_path, "--compare", "k=2,k=1")
    runs = {s["settings"]["replica_devices"]: s for s in _summaries(tmp_path).values()}
    assert set(runs) == {1, 2}
    for k, summary in runs.items():
        replicas = 2 * (2 // k)
        assert summary["status"] == "complete" and summary["batch_size"] == 8 * k
        np.testing.assert_allclose(run_losses(Path(summary["run_dir"]), replicas),
                                   one_device_losses(TINY_JOB, replicas, 8 * k, ITERATIONS), rtol=1e-5)
    [folder] = [p for p in tmp_path.iterdir() if "-compare-" in p.name]
    table = (folder / "comparison.md").read_text()
    assert "| k=2 | complete |" in table and "| k=1 | complete |" in table, proc.stderr
    rows = {row["replica_devices"] for row in csv.DictReader((tmp_path / "results.csv").open())}
    assert rows == {"1", "2"}


@pytest.mark.parametrize("options, words", [
    (["--compare", "k=3"], "--compare k=3 does not divide the node's 2 devices"),
    (["--compare", "k=two"], "'k=two' is not one"),
    (["--replica-devices", "auto", "--parallelism", "data"], "does not combine with --parallelism data"),
    (["--compare", "k=1", "--batch-size", "3"], "batch_size 3 per node does not split over its 2 replicas"),
])
def test_bad_plans_are_one_line_before_any_tensorflow_work(tmp_path: Path, options: list[str], words: str) -> None:
    proc = subprocess.run([*LAUNCH, TINY_JOB, "--devices-per-node", "2", "--out", str(tmp_path), *options],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and words in proc.stderr, output(proc)
    assert "Traceback" not in proc.stderr and not any(tmp_path.iterdir())
