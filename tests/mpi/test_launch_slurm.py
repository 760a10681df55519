"""pardnn-launch submitted with sbatch to a one-node Slurm cluster started on this machine.

``slurm/local-cluster.sh`` starts slurmctld and slurmd (and munged) for the test; two tasks on the
one node stand for two nodes (``PARDNN_EMULATE_NODES=1``), or train two replicas of it. Needs root
and Debian's ``slurm-wlm`` and ``munge``; skipped without them. No other Slurm may run on this
machine (the default ports).
"""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.mpi import require_stack

ROOT = Path(__file__).resolve().parents[2]
SLURM = ROOT / "slurm"
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol")

pytestmark = [pytest.mark.mpi, pytest.mark.slow]


@pytest.fixture(scope="module")
def slurm_conf(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    missing = [p for p in PROGRAMS if shutil.which(p) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (apt-get install slurm-wlm munge)")
    if os.geteuid() != 0:
        pytest.skip("a local Slurm cluster needs root")
    state = tmp_path_factory.mktemp("slurm")
    proc = subprocess.run(["bash", str(SLURM / "local-cluster.sh"), "start", str(state)], capture_output=True,
                          text=True, timeout=60)
    if proc.returncode != 0:
        subprocess.run(["bash", str(SLURM / "local-cluster.sh"), "stop", str(state)], timeout=30)
        pytest.fail(f"local Slurm cluster did not start:\n{proc.stdout}{proc.stderr}")
    try:
        yield state / "slurm.conf"
    finally:
        subprocess.run(["bash", str(SLURM / "local-cluster.sh"), "stop", str(state)], timeout=30)


def _wait(job_id: str, env: dict[str, str], timeout: float) -> tuple[str, str]:
    """Poll the job until it ends (sbatch --wait polls at growing intervals); its state and exit code."""
    deadline = time.monotonic() + timeout
    while True:
        shown = subprocess.run(["scontrol", "show", "job", "-o", job_id], env=env, capture_output=True,
                               text=True).stdout
        state = re.search(r"JobState=(\S+)", shown)
        if state and state.group(1) not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            exit_code = re.search(r"ExitCode=(\S+)", shown)
            return state.group(1), exit_code.group(1) if exit_code else "?"
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job_id], env=env)
            pytest.fail(f"Slurm job {job_id} still {state.group(1) if state else '?'} after {timeout:.0f} s")
        time.sleep(0.5)


def mpi_environment(slurm_conf: Path) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(slurm_conf), "PARDNN_EMULATE_NODES": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
           "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}


def _submit(script: str, env: dict[str, str], log: Path, cwd: Path, *options: str,
            sbatch: tuple[str, ...] = ()) -> str:
    """Submit ``script`` for word-rnn-tiny on 2 devices per node with ``options`` (``sbatch``: options of
    sbatch's own); the job id.

    This node has 2 tasks' worth of CPUs and no GPUs: the script's GPU and core request is overridden."""
    submit = ["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2", "--gpus-per-node=0", "--cpus-per-task=1",
              "--time=00:05:00", f"--output={log}", "--open-mode=append", *sbatch, str(SLURM / script),
              "word-rnn-tiny", *options, "--devices-per-node", "2", "--no-progress"]
    done = subprocess.run(submit, env=env, cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip().split(";")[0]


@pytest.mark.parametrize("script", ["pardnn.sbatch", "pardnn-mpirun.sbatch"])
def test_sbatch_runs_a_tiny_job_on_two_emulated_nodes(slurm_conf, tmp_path, script):
    require_stack()
    out = tmp_path / "runs"
    env = mpi_environment(slurm_conf)
    log = tmp_path / "slurm.out"
    started = time.monotonic()
    job_id = _submit(script, env, log, tmp_path, "--iterations", "30", "--window", "10:30", "--out", str(out))
    state, exit_code = _wait(job_id, env, timeout=150)
    seconds = time.monotonic() - started
    output = log.read_text() if log.exists() else "(no output)"
    assert (state, exit_code) == ("COMPLETED", "0:0"), output

    summary = json.loads(next(out.glob("*/summary.json")).read_text())
    assert summary["status"] == "complete" and summary["nodes"] == 2
    assert summary["slurm"]["SLURM_JOB_ID"] == job_id
    assert summary["consistency"]["placement_sha256_equal"] and summary["consistency"]["variables_sha256_equal"]
    assert summary["throughput"]["samples_per_s"] > 0
    print(f"\n{script}: Slurm job {job_id} took {seconds:.1f} s, "
          f"{summary['throughput']['samples_per_s']:.1f} samples/s")


def test_the_plan_commands_sbatch_trains_two_replicas_of_two_devices_on_one_node(slurm_conf, tmp_path):
    """What ``pardnn plan`` prints for k = 2, M = 2 on a node of 4 devices, submitted with this node's
    resources (no GPUs, 2 CPUs, one task asked for): pardnn.sbatch starts the plan's 2 tasks of 1 CPU,
    two ranks on one real node (PARDNN_EMULATE_NODES=0), each training a replica of 2 logical devices."""
    require_stack()
    from jobs.plan import train_commands
    from pardnn.plan.search import Plan

    out = tmp_path / "runs"
    env = {**mpi_environment(slurm_conf), "PARDNN_EMULATE_NODES": "0"}
    log = tmp_path / "slurm.out"
    command = shlex.split(train_commands("word-rnn-tiny", Plan(replica_devices=2, micro_batches=2, node_devices=4),
                                         nodes=1)["sbatch"])
    script = command.index("slurm/pardnn.sbatch")
    command[script] = str(SLURM / "pardnn.sbatch")
    here = ["--parsable", "--ntasks-per-node=1", "--cpus-per-task=2", "--gpus-per-node=0", "--time=00:05:00",
            f"--output={log}"]  # after the plan's own: sbatch keeps the last of each
    submit = [*command[:script], *here, *command[script:], "--costs", "estimate", "--iterations", "20", "--window",
              "5:20", "--no-progress", "--out", str(out)]
    assert submit[:5] == ["sbatch", "--nodes=1", "--ntasks-per-node=2", "--gpus-per-node=4", "--cpus-per-task=16"]
    started = time.monotonic()
    job_id = subprocess.run(submit, env=env, cwd=tmp_path, capture_output=True, text=True,
                            check=True).stdout.strip().split(";")[0]
    state, exit_code = _wait(job_id, env, timeout=150)
    output = log.read_text() if log.exists() else "(no output)"
    assert (state, exit_code) == ("COMPLETED", "0:0"), output
    assert "pardnn.sbatch: --replica-devices 2 on 4 devices per node: 2 task(s) per node of 1 CPU(s)" in output
    summary = json.loads(next(out.glob("*/summary.json")).read_text())
    assert summary["status"] == "complete" and summary["nodes"] == 1, output
    assert summary["settings"]["replica_devices"] == 2 and summary["batch_size"] == 8  # 16 per node over 2 replicas
    assert summary["consistency"]["variables_sha256_equal"]
    assert summary["slurm"]["SLURM_JOB_ID"] == job_id
    print(f"\nthe plan's sbatch: Slurm job {job_id} took {time.monotonic() - started:.1f} s")


@pytest.mark.parametrize("script", ["pardnn.sbatch", "pardnn-mpirun.sbatch"])
def test_the_time_limit_signal_reaches_every_rank_and_the_job_exits_143(slurm_conf, tmp_path, script):
    """What --signal=B:TERM@120 does before the time limit, sent at once: SIGTERM to the batch shell only
    (scancel --batch). Its trap passes it on; both ranks write their files; the job exits 143."""
    require_stack()
    out = tmp_path / "runs"
    env = mpi_environment(slurm_conf)
    log = tmp_path / "slurm.out"
    job_id = _submit(script, env, log, tmp_path, "--iterations", "1000000", "--window", "10:2000", "--out", str(out))
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        beats = [json.loads(p.read_text() or "{}") for p in out.glob("*/heartbeat-*.json")]
        if len(beats) == 2 and all((b.get("iteration") or 0) >= 30 for b in beats):
            break
        time.sleep(0.5)
    else:
        subprocess.run(["scancel", job_id], env=env)
        pytest.fail("the job did not reach iteration 30:\n" + (log.read_text() if log.exists() else ""))
    subprocess.run(["scancel", "--batch", "--signal=TERM", job_id], env=env, check=True)
    state, exit_code = _wait(job_id, env, timeout=120)
    output = log.read_text() if log.exists() else "(no output)"
    assert exit_code == "143:0", (state, output)
    assert f"{script}: SIGTERM: forwarding it to" in output
    run_dir = next(out.glob("*/summary.json")).parent
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "time_limit" and [n["rank"] for n in summary["per_node"]] == [0, 1]
    [row] = list(csv.DictReader((out / "results.csv").read_text().splitlines()))
    assert row["status"] == "time_limit"


def test_a_requeued_job_resumes_from_its_newest_checkpoint(slurm_conf, tmp_path):
    """sbatch --requeue, then scontrol requeue once the job has saved a checkpoint: Slurm kills it and
    starts it again with SLURM_RESTART_COUNT=1; the batch script adds --resume to the same command line,
    and the second run goes on from the first one's newest checkpoint with its placement, to the end."""
    require_stack()
    out = tmp_path / "runs"
    env = mpi_environment(slurm_conf)
    log = tmp_path / "slurm.out"
    # 300 iterations of about 20 ms with a checkpoint every 5: seconds left when the first checkpoint shows.
    job_id = _submit("pardnn.sbatch", env, log, tmp_path, "--iterations", "300", "--window", "250:290",
                     "--checkpoint-every", "5", "--out", str(out), sbatch=("--requeue",))
    deadline = time.monotonic() + 150
    while not list(out.glob("*/checkpoint/ckpt-*.json")):
        assert time.monotonic() < deadline, log.read_text() if log.exists() else "(no output)"
        time.sleep(0.2)
    subprocess.run(["scontrol", "requeue", job_id], env=env, check=True, capture_output=True)
    deadline = time.monotonic() + 240
    while True:  # requeued: completing, then pending again, then running, then done
        shown = subprocess.run(["scontrol", "show", "job", "-o", job_id], env=env, capture_output=True,
                               text=True).stdout
        restarts = re.search(r"Restarts=(\d+)", shown)
        if restarts and int(restarts.group(1)) >= 1 and "JobState=PENDING" in shown:
            break
        assert time.monotonic() < deadline, shown
        time.sleep(0.5)
    # Slurm holds a requeued job back for a while (its begin time, set once it is pending again): start it now.
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], env=env, capture_output=True)
    state, exit_code = _wait(job_id, env, timeout=300)
    output = log.read_text() if log.exists() else "(no output)"
    assert (state, exit_code) == ("COMPLETED", "0:0"), output
    assert "pardnn.sbatch: restart 1 of Slurm job" in output, output
    runs = sorted(p for p in out.iterdir() if p.is_dir())
    assert len(runs) == 2, runs
    first, second = runs
    summary = json.loads((second / "summary.json").read_text())
    assert summary["status"] == "complete", output
    assert summary["placement"]["resumed_from"].startswith(str(first / "checkpoint"))
    assert "profile" not in summary["per_node"][0]["phases_seconds"]
    assert summary["slurm"]["SLURM_JOB_ID"] == job_id
