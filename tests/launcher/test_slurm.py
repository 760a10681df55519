"""The Slurm scripts: they parse, pass shellcheck, and run the argv they should (fake srun/mpirun/sbatch)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SLURM = ROOT / "slurm"
SCRIPTS = ["pardnn.sbatch", "pardnn-mpirun.sbatch", "sweep.sh", "local-cluster.sh"]

RECORDER = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["RECORD"], "a") as out:
    out.write(json.dumps([os.path.basename(sys.argv[0]), *sys.argv[1:]]) + "\\n")
if os.path.basename(sys.argv[0]) == "sbatch":
    print("Submitted batch job 1")
"""


@pytest.fixture
def fake_bin(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """PATH with fake srun, mpirun and sbatch first; each appends its argv as a JSON line to RECORD."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("srun", "mpirun", "sbatch"):
        (bin_dir / name).write_text(RECORDER)
        (bin_dir / name).chmod(0o755)
    record = tmp_path / "argv.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HOROVOD_", "NCCL_", "PARDNN_"))}
    env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", RECORD=str(record))
    return env, record


def _calls(record: Path) -> list[list[str]]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def _directives(script: Path) -> list[str]:
    return [line.split(None, 1)[1] for line in script.read_text().splitlines() if line.startswith("#SBATCH ")]


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_parses(script):
    subprocess.run(["bash", "-n", str(SLURM / script)], check=True)


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_passes_shellcheck(script):
    if shutil.which("shellcheck") is None:
        if os.environ.get("CI"):
            pytest.fail("shellcheck not installed (scripts/setup.sh installs it)")
        pytest.skip("shellcheck not installed")
    proc = subprocess.run(["shellcheck", str(SLURM / script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("script", ["pardnn.sbatch", "pardnn-mpirun.sbatch"])
def test_sbatch_directives_ask_for_gpus_and_cores_per_node_one_task_each(script):
    directives = _directives(SLURM / script)
    # B: the early signal goes to the batch shell only; its trap passes it on (see the next test).
    for wanted in ("--ntasks-per-node=1", "--gpus-per-node=4", "--cpus-per-task=32", "--signal=B:TERM@120"):
        assert wanted in directives
    assert any(d.startswith("--nodes=") for d in directives)
    # 4 GPUs: the devices_per_node of the default and of every job file; no whole-node request that
    # leaves GPUs idle or cannot be met on 8-GPU nodes.
    assert not any(d.startswith(("--gres=gpu", "--exclusive")) for d in directives)


def test_pardnn_sbatch_runs_srun_with_pmix(fake_bin):
    env, record = fake_bin
    env.update(SLURM_JOB_ID="42", SLURM_JOB_NUM_NODES="4", SLURM_JOB_NODELIST="dgx[1-4]")
    proc = subprocess.run(["bash", str(SLURM / "pardnn.sbatch"), "jobs/trn 2.toml", "--iterations", "160"],
                          env=env, capture_output=True, text=True, check=True)
    assert "Slurm job 42, 4 node(s): dgx[1-4]" in proc.stdout
    assert _calls(record) == [["srun", "--mpi=pmix", "--kill-on-bad-exit=1", "pardnn-launch", "jobs/trn 2.toml",
                               "--iterations", "160"]]


@pytest.mark.parametrize(("slurm", "options", "sized"), [
    # 2 nodes of 4 devices, replicas of 2: 2 tasks per node, 4 in all, each half the node's 32 CPUs.
    ({"SLURM_CPUS_ON_NODE": "32"}, ["--devices-per-node", "4", "--replica-devices", "2"],
     ["--ntasks=4", "--ntasks-per-node=2", "--cpus-per-task=16"]),
    # auto: one task per device of the 8 GPUs Slurm gave the node (no --devices-per-node), 8 CPUs each.
    ({"SLURM_CPUS_ON_NODE": "64", "SLURM_GPUS_ON_NODE": "8"}, ["--replica-devices=auto"],
     ["--ntasks=16", "--ntasks-per-node=8", "--cpus-per-task=8"]),
    ({"SLURM_CPUS_ON_NODE": "30", "SLURM_GPUS_PER_NODE": "a100:4"}, ["--replica-devices", "1"],
     ["--ntasks=8", "--ntasks-per-node=4", "--cpus-per-task=7"]),
    # The last --devices-per-node counts, as for pardnn-launch; no CPU count: Slurm's share.
    ({}, ["--devices-per-node", "2", "--devices-per-node=4", "--replica-devices", "4"],
     ["--ntasks=2", "--ntasks-per-node=1"]),
    # Left to the allocation (and to pardnn-launch's checks): k not dividing G, G unknown, no k.
    ({"SLURM_CPUS_ON_NODE": "32"}, ["--devices-per-node", "4", "--replica-devices", "3"], []),
    ({"SLURM_CPUS_ON_NODE": "32"}, ["--replica-devices", "2"], []),
    ({"SLURM_CPUS_ON_NODE": "32", "SLURM_GPUS_ON_NODE": "4"}, ["--devices-per-node", "4"], []),
])
def test_pardnn_sbatch_sizes_tasks_and_cpus_for_replicas_of_k_devices(fake_bin, slurm, options, sized):
    env, record = fake_bin
    env.update(SLURM_JOB_NUM_NODES="2", SLURM_NTASKS_PER_NODE="1", SLURM_CPUS_PER_TASK="32", **slurm)
    proc = subprocess.run(["bash", str(SLURM / "pardnn.sbatch"), "trn", *options], env=env, capture_output=True,
                          text=True, check=True)
    assert _calls(record) == [["srun", "--mpi=pmix", "--kill-on-bad-exit=1", *sized, "pardnn-launch", "trn",
                               *options]]
    assert ("task(s) per node" in proc.stdout) == bool(sized), proc.stdout


def test_pardnn_sbatch_with_fewer_cpus_than_tasks_is_one_line(fake_bin):
    env, record = fake_bin
    env.update(SLURM_JOB_NUM_NODES="1", SLURM_CPUS_ON_NODE="2")
    proc = subprocess.run(["bash", str(SLURM / "pardnn.sbatch"), "trn", "--devices-per-node", "4", "--replica-devices",
                           "auto"], env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and _calls(record) == []
    assert proc.stderr == ("pardnn.sbatch: --replica-devices auto on 4 devices per node runs 4 tasks per node, but the "
                           "allocation has 2 CPU(s) per node: ask for 4 or more (sbatch --cpus-per-task=4)\n")


@pytest.mark.parametrize(("allocated", "extra"), [("1", ["--oversubscribe"]), ("2(x3)", [])])
def test_mpirun_variant_runs_one_rank_per_replica_of_k_devices(fake_bin, allocated, extra):
    """mpirun counts Slurm's tasks as its slots: more ranks per node than tasks need --oversubscribe."""
    env, record = fake_bin
    env.update(SLURM_JOB_NUM_NODES="3", SLURM_NTASKS_PER_NODE=allocated, SLURM_CPUS_ON_NODE="32")
    proc = subprocess.run(["bash", str(SLURM / "pardnn-mpirun.sbatch"), "trn", "--devices-per-node", "8",
                           "--replica-devices", "4"], env=env, capture_output=True, text=True, check=True)
    [call] = _calls(record)
    assert call[:8 + len(extra)] == ["mpirun", "-np", "6", "--map-by", "ppr:2:node", "--bind-to", "none", *extra,
                                     "-x"]
    assert "--replica-devices 4 on 8 devices per node: 2 rank(s) per node" in proc.stdout


def test_pardnn_sbatch_without_a_job_is_a_usage_error(fake_bin):
    env, record = fake_bin
    proc = subprocess.run(["bash", str(SLURM / "pardnn.sbatch")], env=env, capture_output=True, text=True)
    assert proc.returncode == 2 and "usage" in proc.stderr
    assert _calls(record) == []


def test_mpirun_variant_runs_one_rank_per_node_and_forwards_the_environment(fake_bin):
    env, record = fake_bin
    env.update(SLURM_JOB_NUM_NODES="3", SLURM_NTASKS_PER_NODE="1", HOROVOD_FUSION_THRESHOLD="0",
               NCCL_DEBUG="INFO", PYTHONPATH="/opt/pardnn")
    subprocess.run(["bash", str(SLURM / "pardnn-mpirun.sbatch"), "wrn-2", "--devices-per-node", "16"],
                   env=env, capture_output=True, text=True, check=True)
    [call] = _calls(record)
    assert call[:7] == ["mpirun", "-np", "3", "--map-by", "ppr:1:node", "--bind-to", "none"]
    forwarded = [call[i + 1] for i, arg in enumerate(call) if arg == "-x"]
    assert {"PATH", "PYTHONPATH", "HOROVOD_FUSION_THRESHOLD", "NCCL_DEBUG"} <= set(forwarded)
    assert call[-3:] == ["wrn-2", "--devices-per-node", "16"] and call[-4] == "pardnn-launch"


def test_mpirun_variant_reads_slurms_tasks_per_node_form(fake_bin):
    env, record = fake_bin
    env.update(SLURM_JOB_NUM_NODES="3", SLURM_NTASKS_PER_NODE="2(x3)")
    subprocess.run(["bash", str(SLURM / "pardnn-mpirun.sbatch"), "trn"], env=env, check=True, capture_output=True)
    assert _calls(record)[0][1:5] == ["-np", "6", "--map-by", "ppr:2:node"]


def test_sweep_submits_the_gpu_and_node_studies(fake_bin, tmp_path):
    env, record = fake_bin
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("# job 1 2 4 8 16\ntrn  1 8 32 64 128\nwrn-2 - - 4 16 32  # use-case 2\n\n")
    subprocess.run(["bash", str(SLURM / "sweep.sh"), "--jobs", str(jobs), "--max-nodes", "4", "--out", "runs/x",
                    "--", "--partition=dgx2", "--comment=scaling study"], env=env, check=True, capture_output=True)
    calls = _calls(record)
    script = str(SLURM / "pardnn.sbatch")
    shapes = [(c[1], c[2], c[c.index(script) + 1], c[-3]) for c in calls]
    assert shapes == [
        ("--nodes=1", "--gpus-per-node=1", "trn", "1"), ("--nodes=1", "--gpus-per-node=2", "trn", "8"),
        ("--nodes=1", "--gpus-per-node=4", "trn", "32"), ("--nodes=1", "--gpus-per-node=8", "trn", "64"),
        ("--nodes=1", "--gpus-per-node=16", "trn", "128"),
        ("--nodes=2", "--gpus-per-node=16", "trn", "128"), ("--nodes=4", "--gpus-per-node=16", "trn", "128"),
        ("--nodes=1", "--gpus-per-node=4", "wrn-2", "4"), ("--nodes=1", "--gpus-per-node=8", "wrn-2", "16"),
        ("--nodes=1", "--gpus-per-node=16", "wrn-2", "32"),
        ("--nodes=2", "--gpus-per-node=16", "wrn-2", "32"), ("--nodes=4", "--gpus-per-node=16", "wrn-2", "32"),
    ]
    first = calls[0]
    assert first[:6] == ["sbatch", "--nodes=1", "--gpus-per-node=1", "--job-name=pardnn-trn-n1-k1-b1",
                         "--partition=dgx2", "--comment=scaling study"]
    assert first[6:] == [script, "trn", "--devices-per-node", "1", "--batch-size", "1", "--out", "runs/x"]


def test_sweep_dry_run_submits_nothing_and_bad_lists_are_refused(fake_bin, tmp_path):
    env, record = fake_bin
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("trn 1 8 32 64 128\n")
    proc = subprocess.run(["bash", str(SLURM / "sweep.sh"), "--jobs", str(jobs), "--study", "nodes", "--dry-run"],
                          env=env, capture_output=True, text=True, check=True)
    assert [line.split()[1] for line in proc.stdout.splitlines()] == ["--nodes=1", "--nodes=2", "--nodes=4"]
    assert _calls(record) == []
    jobs.write_text("trn 1 8 32\n")
    proc = subprocess.run(["bash", str(SLURM / "sweep.sh"), "--jobs", str(jobs)], env=env, capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "line 1: expected a job and 5 batch sizes" in proc.stderr


def test_sweep_submits_each_placer_and_data_parallelism_or_one_comparison(fake_bin, tmp_path):
    """--placers: a run per entry; data runs one task per GPU at the per-node batch over the GPUs (8 / 2 = 4),
    and is left out where the batch does not split (3 over 2 GPUs). --compare: one allocation per configuration."""
    env, record = fake_bin
    jobs = tmp_path / "jobs.txt"
    jobs.write_text("trn 1 8 - - -\nwrn 1 3 - - -\n")
    sweep = ["bash", str(SLURM / "sweep.sh"), "--jobs", str(jobs), "--study", "gpus", "--out", "runs/x"]
    proc = subprocess.run([*sweep, "--placers", "pardnn,metis,data+recompute"], env=env, check=True,
                          capture_output=True, text=True)
    script = str(SLURM / "pardnn.sbatch")
    calls = _calls(record)
    names = [next(a for a in c if a.startswith("--job-name="))[len("--job-name="):] for c in calls]
    assert names == ["pardnn-trn-n1-k1-b1", "pardnn-trn-metis-n1-k1-b1", "pardnn-trn-data-recompute-n1-k1-b1",
                     "pardnn-trn-n1-k2-b8", "pardnn-trn-metis-n1-k2-b8", "pardnn-trn-data-recompute-n1-k2-b8",
                     "pardnn-wrn-n1-k1-b1", "pardnn-wrn-metis-n1-k1-b1", "pardnn-wrn-data-recompute-n1-k1-b1",
                     "pardnn-wrn-n1-k2-b3", "pardnn-wrn-metis-n1-k2-b3"]
    assert "wrn at 2 GPUs: batch 3 does not split over the GPUs; data+recompute not submitted" in proc.stderr
    data = calls[5]
    assert data[1:5] == ["--nodes=1", "--gpus-per-node=2", "--ntasks-per-node=2", "--cpus-per-task=8"]
    assert data[data.index(script):] == [script, "trn", "--devices-per-node", "2", "--batch-size", "4", "--out",
                                         "runs/x", "--parallelism", "data", "--recompute"]
    assert calls[4][-2:] == ["--placer", "metis"] and calls[3][-2:] == ["--out", "runs/x"]
    record.unlink()
    subprocess.run([*sweep, "--placers", "pardnn,data", "--compare"], env=env, check=True, capture_output=True)
    compared = _calls(record)
    assert len(compared) == 4 and compared[1][3:5] == ["--ntasks-per-node=2", "--cpus-per-task=8"]
    assert compared[1][-2:] == ["--compare", "pardnn,data"] and "--batch-size" in compared[1]
    assert compared[1][compared[1].index("--batch-size") + 1] == "8"  # per node: the comparison splits it


def test_paper_job_list_is_well_formed(fake_bin):
    env, record = fake_bin
    subprocess.run(["bash", str(SLURM / "sweep.sh"), "--max-nodes", "2"], env=env, check=True, capture_output=True)
    calls = _calls(record)
    assert len(calls) == 5 * (5 + 1) + 5 * (3 + 1)  # use-case 1: 5 GPU counts; use-case 2: 3; plus 2 nodes each


LONG_STEP = """#!/usr/bin/env python3
import os, signal, sys, time
def stop(signum, frame):
    with open(os.environ["RECORD"], "a") as out:
        out.write(signal.Signals(signum).name + "\\n")
    sys.exit(143)  # what pardnn-launch (and so srun, or mpirun after SIGUSR1) exits with after a time limit
for name in ("SIGTERM", "SIGUSR1"):
    signal.signal(getattr(signal, name), stop)
open(os.environ["READY"], "w").close()
time.sleep(60)
sys.exit(1)
"""


@pytest.mark.parametrize(("script", "step"), [("pardnn.sbatch", "srun"), ("pardnn-mpirun.sbatch", "mpirun")])
def test_the_batch_scripts_pass_slurms_early_sigterm_on_to_the_ranks(fake_bin, tmp_path, script, step):
    """--signal=B:TERM@120 signals the batch shell: its trap passes the signal on to the step as SIGUSR1, which
    srun and mpirun forward to every task (SIGTERM would make srun kill the tasks, and mpirun kill the ranks and
    exit 1), and the script exits with the step's code."""
    env, record = fake_bin
    (tmp_path / "bin" / step).write_text(LONG_STEP)
    ready = tmp_path / "ready"
    env.update(READY=str(ready), SLURM_JOB_NUM_NODES="2", SLURM_NTASKS_PER_NODE="1")
    proc = subprocess.Popen(["bash", str(SLURM / script), "trn"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), proc.communicate()
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 143, stderr
    assert record.read_text().split() == ["SIGUSR1"]
    assert f"{script}: SIGTERM: forwarding it to the" in stderr
