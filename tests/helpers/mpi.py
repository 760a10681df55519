"""Running ``pardnn-launch`` (or any program) under ``mpirun`` on this machine, each rank standing
for a node, and reading what the ranks wrote.

Outside CI a test that needs the stack skips when horovod, mpi4py or mpirun is missing; in CI
(``CI`` set) that fails.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the repository
IN_CI = bool(os.environ.get("CI"))
MPIRUN_FLAGS = ["--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
TINY_JOB = "word-rnn-tiny"  # jobs/word-rnn-tiny.toml: a 2-layer LSTM language model, ms per step



def require_stack(horovod: bool = True) -> str:
    """mpirun's path; with ``horovod``, Horovod must import too (the pinned stack), else mpi4py (either stack)."""
    mpirun = shutil.which("mpirun")
    problems = []
    if mpirun is None:
        problems.append("mpirun not on PATH (scripts/setup.sh installs openmpi-bin)")
    if horovod:
        try:
            import horovod.tensorflow
        except ImportError:
            problems.append("horovod not installed (scripts/install-horovod.sh)")
    elif importlib.util.find_spec("mpi4py") is None:  # not imported: MPI initialised here would confuse mpirun
        problems.append("mpi4py not installed (pip install -e '.[dist]')")
    if problems:
        if IN_CI:
            pytest.fail("; ".join(problems))
        pytest.skip("; ".join(problems))
    assert mpirun is not None
    return mpirun


def mpi_environment(emulate: bool, tf_log_level: str | None = "2") -> tuple[dict[str, str], list[str]]:
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    if tf_log_level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = tf_log_level
    # Containers often forbid the cross-memory-attach that Open MPI's shared-memory transport uses.
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    env.pop("PARDNN_EMULATE_NODES", None)
    forward = []
    if emulate:
        env["PARDNN_EMULATE_NODES"] = "1"
        forward = ["-x", "PARDNN_EMULATE_NODES"]
    return env, forward


def mpirun_launch(program: list[str], *, ranks: int = 2, emulate: bool = True, timeout: float = 150,
                  cwd: Path = ROOT, tf_log_level: str | None = "2",
                  horovod: bool = True) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ``program`` on ``ranks`` ranks of this machine; returns the process and its wall seconds.

    ``tf_log_level``: ``TF_CPP_MIN_LOG_LEVEL`` (``None``: unset, TensorFlow's INFO lines are printed);
    ``horovod``: whether the run needs Horovod (else mpi4py).
    """
    mpirun = require_stack(horovod)
    env, forward = mpi_environment(emulate, tf_log_level)
    argv = [mpirun, *MPIRUN_FLAGS, *forward, "-np", str(ranks), *program]
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    return proc, time.monotonic() - started


def mpirun_start(program: list[str]) -> subprocess.Popen[str]:
    """Start ``program`` on two emulated nodes under mpirun, in the background."""
    mpirun = require_stack()
    env, forward = mpi_environment(True)
    return subprocess.Popen([mpirun, *MPIRUN_FLAGS, *forward, "-np", "2", *program], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_iteration(out: Path, proc: subprocess.Popen[str], iteration: int, timeout: float = 150) -> Path:
    """The run folder once both ranks' heartbeats show ``iteration`` done (fails if the run ends first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        beats = [json.loads(p.read_text() or "{}") for p in out.glob("*/heartbeat-*.json")]
        if len(beats) == 2 and all((b.get("iteration") or 0) >= iteration for b in beats):
            return next(out.glob("*/heartbeat-0.json")).parent
        time.sleep(0.5)
    proc.kill()
    pytest.fail(f"the run did not reach iteration {iteration}:\n" + "\n".join(proc.communicate()))


def heartbeat(run_dir: Path, rank: int) -> dict[str, Any]:
    return json.loads((run_dir / f"heartbeat-{rank}.json").read_text())


def assert_valid_rank_files(run_dir: Path, rank: int) -> list[dict[str, Any]]:
    """A rank's files are *valid* when each is whole: every line of ``rank-<r>.jsonl`` parses and the last
    is a status record, ``figures-<r>.json`` and ``heartbeat-<r>.json`` parse and name the rank, and the
    log exists. (Atomic replacement guarantees it even for a rank killed or stopped mid-run.)"""
    records = read_records(run_dir / f"rank-{rank}.jsonl")
    assert records[-1]["event"] == "status" and records[-1]["rank"] == rank
    figures = json.loads((run_dir / f"figures-{rank}.json").read_text())
    assert figures["rank"] == rank and figures["figures"]["iterations_run"] > 0
    assert heartbeat(run_dir, rank)["rank"] == rank
    assert (run_dir / f"rank-{rank}.log").exists()
    return records


def output(proc: subprocess.CompletedProcess[str]) -> str:
    return f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"


def read_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


LAUNCH = [sys.executable, "-m", "launcher.cli"]
STANDIN = [sys.executable, "-m", "tests.launcher.standin"]
# word-rnn-tiny on 2 emulated nodes of 2 devices, a checkpoint every 5 iterations, profiled costs (the
# default): long enough (about 20 ms an iteration) to be stopped mid-run; its uninterrupted losses are
# the reference a resumed run equals exactly (uninterrupted_losses).
RESUMABLE_ITERATIONS = 300
RESUMABLE = [*LAUNCH, TINY_JOB, "--iterations", str(RESUMABLE_ITERATIONS), "--window", "250:290",
             "--devices-per-node", "2", "--checkpoint-every", "5", "--no-progress"]


def uninterrupted_losses() -> list[list[float]]:
    """Each rank's loss at every iteration of :data:`RESUMABLE` run without a stop: launched once per test
    run (:func:`tests.helpers.shared.shared`) for every test that resumes a stopped run and compares. The
    losses at an iteration depend neither on the placement (it moves ops, not the arithmetic) nor on
    how many iterations the run has (a constant learning rate, the same batch sequence)."""
    import tempfile

    from tests.helpers import shared as shared_module

    def launch() -> list[list[float]]:
        out = Path(tempfile.mkdtemp(prefix="uninterrupted-", dir=shared_module.ROOT))  # the run's temporary root
        proc, _ = mpirun_launch([*RESUMABLE, "--out", str(out)], timeout=300)
        assert proc.returncode == 0, output(proc)
        [run_dir] = [p for p in out.iterdir() if p.is_dir()]
        return [[r["loss"] for r in read_records(run_dir / f"rank-{rank}.jsonl") if r["event"] == "iteration"]
                for rank in (0, 1)]

    return shared_module.shared(("uninterrupted losses", *RESUMABLE), launch)

