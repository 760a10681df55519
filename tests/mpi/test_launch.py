"""pardnn-launch under ``mpirun -np 2`` on one machine, each rank standing for a node.

Outside CI these tests skip when horovod or mpirun is missing; in CI (``CI`` set) that fails.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.helpers.mpi import (
    LAUNCH,
    STANDIN,
    TINY_JOB,
    assert_valid_rank_files,
    heartbeat,
    mpirun_launch,
    mpirun_start,
    output,
    read_records,
    uninterrupted_losses,
    wait_for_iteration,
)

pytestmark = [pytest.mark.mpi, pytest.mark.slow]



def test_two_nodes_train_a_tiny_job_in_lockstep(tmp_path):
    # As the README runs it: TensorFlow's own log level, so its INFO lines are printed (into the logs only).
    proc, seconds = mpirun_launch([*LAUNCH, TINY_JOB, "--iterations", "160", "--window", "100:150",
                                   "--devices-per-node", "2", "--out", str(tmp_path)], tf_log_level=None)
    assert proc.returncode == 0, output(proc)
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
        assert set(node["phases_seconds"]) >= {"build", "profile", "compile", "partition", "apply", "train"}
        assert "build_hooked" not in node["phases_seconds"]  # the graph is built once, with the hook
    # One measured step as TensorFlow traced it (each rank), the emulated step (rank 0), and the two compared.
    for name in ("timeline-rank0.json", "timeline-rank1.json", "emulated-step.json"):
        assert json.loads((run_dir / name).read_text())["traceEvents"], name
    step = summary["step_ms"]
    assert step["emulated"] > 0 and step["measured_median"] > 0
    assert step["ratio"] == pytest.approx(step["measured_median"] / step["emulated"])
    # Data parallelism worked: the same placement everywhere, and identical weights and optimizer state.
    assert nodes[0]["placement_sha256"] == nodes[1]["placement_sha256"] == summary["placement"]["sha256"]
    assert nodes[0]["variables_sha256"] == nodes[1]["variables_sha256"]
    consistency = summary["consistency"]
    assert consistency["placement_sha256_equal"] and consistency["variables_sha256_equal"]
    assert consistency["variables_compared"] > 0
    assert summary["versions"]["horovod"] and summary["versions"]["mpi"]
    # Each rank wrote its own records, figures and log; rank 0 the placement, the status and the sweep row.
    umask = os.umask(0o022)
    os.umask(umask)
    for rank in (0, 1):
        records = assert_valid_rank_files(run_dir, rank)
        assert records[-1]["status"] == "complete"
        assert sum(r["event"] == "iteration" for r in records) == 160
        log = (run_dir / f"rank-{rank}.log").read_text()
        assert "I tensorflow/" in log or "I external/" in log  # TensorFlow's INFO lines are kept in the log
    assert json.loads((run_dir / "status.json").read_text())["status"] == "complete"
    for path in run_dir.iterdir():
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask, path  # as any file the user writes
    placed = (run_dir / "placement.txt").read_text().splitlines()
    assert len(placed) == summary["placement"]["ops"]
    [row] = list(csv.DictReader((tmp_path / "results.csv").read_text().splitlines()))
    assert (row["nodes"], row["devices_per_node"], row["status"]) == ("2", "2", "complete")
    # The console: rank 0's progress once, no TensorFlow INFO line, nothing from rank 1 (it only warns or fails).
    console = proc.stdout + proc.stderr
    assert not [line for line in console.splitlines() if ": I " in line], output(proc)
    assert console.count("profiled 3 steps") == 1 and "iteration 160/160" in console
    print(f"\ntwo-node run: {seconds:.1f} s wall, {throughput['samples_per_s']:.1f} samples/s, "
          f"{throughput['tokens_per_s']:.1f} tokens/s over iterations 100-150")


def test_an_error_on_one_rank_ends_the_run_with_its_message(tmp_path):
    settings = json.dumps({"iterations": 160, "progress": False})
    # A hang (the healthy rank waiting in its allreduce) would end in TimeoutExpired; no wall time is asserted.
    proc, _ = mpirun_launch([*STANDIN, "--out", str(tmp_path), "--fail-at", "60", "--settings", settings])
    assert proc.returncode != 0, output(proc)
    errors = [line for line in proc.stderr.splitlines() if "pardnn-launch: error" in line]
    assert len(errors) == 1, output(proc)
    assert ("pardnn-launch: error on rank 1 (node " in errors[0]
            and "InjectedFailure: injected failure while feeding iteration 60" in errors[0]), output(proc)
    [run_dir] = [p for p in tmp_path.iterdir() if p.is_dir()]
    failed = read_records(run_dir / "rank-1.jsonl")[-1]
    assert failed["status"] == "failed" and "injected failure" in failed["message"]
    status = json.loads((run_dir / "status.json").read_text())
    assert (status["status"], status["rank"], status["exit_code"]) == ("failed", 1, 1)
    assert "injected failure" in status["message"]
    assert "Traceback" in (run_dir / "rank-1.log").read_text()  # the unexpected error's traceback, in its log


def test_two_ranks_on_one_node_are_refused_with_the_fix(tmp_path):
    proc, _ = mpirun_launch([*LAUNCH, TINY_JOB, "--out", str(tmp_path)], emulate=False)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if "pardnn-launch: error" in line]
    assert len(errors) == 1, output(proc)  # rank 0 speaks for both
    assert "--ntasks-per-node=1" in errors[0] and "mpirun --map-by ppr:1:node" in errors[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("problem", ["job", "out"])
def test_an_error_every_rank_finds_is_printed_once(tmp_path, problem):
    (tmp_path / "taken").write_text("")
    args = ([str(tmp_path / "missing.toml"), "--out", str(tmp_path)] if problem == "job"
            else [TINY_JOB, "--out", str(tmp_path / "taken" / "runs")])
    proc, _ = mpirun_launch([*LAUNCH, *args])
    assert proc.returncode == 1
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("pardnn-launch: error: "), output(proc)
    assert ("missing.toml: no such job file" if problem == "job" else "cannot create the folder") in errors[0]


@pytest.mark.parametrize("how", ["to the ranks", "SIGUSR1 to mpirun"])
def test_a_time_limit_stops_both_nodes_with_their_figures_in_the_summary(tmp_path, how):
    """Slurm's time limit mid-window: SIGTERM to every rank (srun, --signal=TERM) or SIGUSR1 to mpirun (what
    slurm/pardnn-mpirun.sbatch's trap sends it). Exit 143, a partial summary with both nodes, a results row."""
    settings = json.dumps({"iterations": 1_000_000, "window": "10:2000", "progress": False})
    proc = mpirun_start([*STANDIN, "--out", str(tmp_path), "--settings", settings])
    run_dir = wait_for_iteration(tmp_path, proc, 30)
    if how == "to the ranks":
        for rank in (0, 1):
            os.kill(heartbeat(run_dir, rank)["pid"], signal.SIGTERM)
    else:
        proc.send_signal(signal.SIGUSR1)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr
    errors = [line for line in stderr.splitlines() if "pardnn-launch: error" in line]
    assert len(errors) == 1 and "stopped by SIG" in errors[0] and "time limit" in errors[0], stderr
    for rank in (0, 1):
        records = assert_valid_rank_files(run_dir, rank)
        assert records[-1]["status"] == "time_limit", stderr
        assert sum(r["event"] == "iteration" for r in records) >= 30
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "time_limit" and summary["partial"] is True and summary["nodes_missing"] == []
    assert [n["rank"] for n in summary["per_node"]] == [0, 1]
    assert [n["figures_status"] for n in summary["per_node"]] == ["time_limit", "time_limit"]
    assert summary["throughput"]["samples_per_s"] > 0 and summary["throughput"]["complete"] is False  # mid-window
    assert json.loads((run_dir / "status.json").read_text())["exit_code"] == 143
    [row] = list(csv.DictReader((tmp_path / "results.csv").read_text().splitlines()))
    assert (row["status"], row["nodes"], row["window_complete"]) == ("time_limit", "2", "false")


def test_a_stopped_rank_is_named_and_every_live_rank_ends(tmp_path):
    """SIGSTOP one rank: within the stall timeout (20 s) plus a few heartbeats the job ends, non-zero, the
    message names the stopped rank, and every rank's files are valid (the stopped one's from before)."""
    settings = json.dumps({"iterations": 1_000_000, "window": "10:20", "progress": False, "stall_timeout": 20})
    proc = mpirun_start([*STANDIN, "--out", str(tmp_path), "--settings", settings])
    run_dir = wait_for_iteration(tmp_path, proc, 30)
    stopped = heartbeat(run_dir, 1)
    os.kill(stopped["pid"], signal.SIGSTOP)
    try:
        _, stderr = proc.communicate(timeout=50)  # the requirement: ended within 50 s of the stop (~25 s here)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    finally:
        try:
            os.kill(stopped["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == 4, stderr
    errors = [line for line in stderr.splitlines() if "pardnn-launch: error" in line]
    assert len(errors) == 1, stderr
    assert f"rank 1 (node {stopped['node']}) last seen at iteration" in errors[0] and "stopped responding" in errors[0]
    records = assert_valid_rank_files(run_dir, 0)
    assert records[-1]["status"] == "stalled"
    # The stopped rank wrote nothing while stopped; mpirun resumes it to end it, and it may record why.
    assert assert_valid_rank_files(run_dir, 1)[-1]["status"] in ("running", "stalled")
    status = json.loads((run_dir / "status.json").read_text())
    assert (status["status"], status["rank"], status["exit_code"]) == ("stalled", 0, 4)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "stalled" and [n["rank"] for n in summary["per_node"]] == [0, 1]
    assert summary["throughput"]["complete"] is True  # the window 10:20 was measured before the stop
    [row] = list(csv.DictReader((tmp_path / "results.csv").read_text().splitlines()))
    assert (row["status"], row["window_complete"]) == ("stalled", "true")


def test_replicas_that_drift_apart_fail_the_run_naming_the_first_variable(tmp_path):
    settings = json.dumps({"iterations": 30, "window": "10:20", "progress": False})
    proc, _ = mpirun_launch([*STANDIN, "--out", str(tmp_path), "--skew-rank", "1", "--settings", settings])
    assert proc.returncode == 1, output(proc)
    errors = [line for line in proc.stderr.splitlines() if "pardnn-launch: error" in line]
    assert len(errors) == 1, output(proc)
    assert "the replicas differ after training" in errors[0] and "first differing variable 'dense0/bias:0'" in errors[0]
    [run_dir] = [p for p in tmp_path.iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "inconsistent" and summary["consistency"]["variables_sha256_equal"] is False
    assert json.loads((run_dir / "status.json").read_text())["status"] == "inconsistent"
    [row] = list(csv.DictReader((tmp_path / "results.csv").read_text().splitlines()))
    assert row["status"] == "inconsistent"


def _losses(run_dir: Path) -> dict[int, float]:
    return {r["index"]: r["loss"] for r in read_records(run_dir / "rank-0.jsonl") if r["event"] == "iteration"}


def test_a_run_stopped_by_a_time_limit_resumes_with_the_same_losses(tmp_path):
    """Run B saves every 5 iterations and on SIGTERM; --resume continues it: its losses are those of an
    uninterrupted run A at the same iterations (same seed, Adam's state restored, the data sequence kept;
    A: the one tests/mpi/test_resume.py compares with, placed from profiled costs where B's are estimated)."""
    common = ["--devices-per-node", "2", "--costs", "estimate", "--no-progress"]
    stopped_out, resumed_out = tmp_path / "b", tmp_path / "c"
    proc = mpirun_start([*LAUNCH, TINY_JOB, "--iterations", "1000000", "--window", "2:8",
                         "--checkpoint-every", "5", "--out", str(stopped_out), *common])
    run_dir = wait_for_iteration(stopped_out, proc, 12)
    for rank in (0, 1):
        os.kill(heartbeat(run_dir, rank)["pid"], signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "time_limit"
    saved = sorted((run_dir / "checkpoint").glob("ckpt-*.json"))
    assert saved and not list((run_dir / "checkpoint").glob("*.tmp")), stderr
    iterations = [json.loads(path.read_text())["iteration"] for path in saved]
    point = iterations[-1]
    # --keep-checkpoints 3 (the default): the newest three, every 5 iterations but the stop's
    assert point >= 10 and len(saved) == 3 and iterations[:2] == [iterations[1] - 5, iterations[1]]
    assert all(i % 5 == 0 for i in iterations[:2]) and iterations[1] < point <= iterations[1] + 5
    last = max(_losses(run_dir))
    assert point in (last + 1, (last + 1) // 5 * 5), (point, last)  # at the stop, else the last multiple of 5

    resumed, _ = mpirun_launch([*LAUNCH, TINY_JOB, "--iterations", str(point + 5), "--window", "2:8",
                                "--resume", str(run_dir), "--out", str(resumed_out), *common])
    assert resumed.returncode == 0, output(resumed)
    [resumed_dir] = [p for p in resumed_out.iterdir() if p.is_dir()]
    summary = json.loads((resumed_dir / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["consistency"]["variables_sha256_equal"]
    assert summary["placement"]["sha256"] == json.loads(saved[-1].read_text())["placement_sha256"]

    expected, got = uninterrupted_losses()[0], _losses(resumed_dir)
    assert sorted(got) == list(range(point, point + 5)) and point + 5 <= len(expected)
    assert [got[i] for i in sorted(got)] == [expected[i] for i in sorted(got)]  # exactly
