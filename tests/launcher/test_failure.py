"""Failure behaviour: exit codes, the one line, and SIGTERM flushing while the main thread is busy."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from launcher.errors import AgreedError, LaunchError, Terminated
from launcher.failure import EXIT_TERMINATED, StopGuard, exit_code, fail, one_line
from launcher.topology import Topology
from pardnn.errors import InfeasibleError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("error", "code"), [
    (LaunchError("x"), 1), (RuntimeError("x"), 1), (InfeasibleError("x"), 3), (Terminated("x"), 143),
    (KeyboardInterrupt(), 130), (AgreedError("x"), 1), (AgreedError("x", 3), 3),
])
def test_exit_codes(error, code):
    assert exit_code(error) == code


def test_one_line_joins_lines_and_names_unexpected_types():
    assert one_line(LaunchError("bad\n  value")) == "bad value"
    assert one_line(ZeroDivisionError("division by zero")) == "ZeroDivisionError: division by zero"


def test_fail_on_one_node_prints_one_line_and_flushes(capsys):
    flushed = []
    fail(LaunchError("the window is wrong"), None, lambda status, message: flushed.append((status, message)))
    assert capsys.readouterr().err == "pardnn-launch: error: the window is wrong\n"
    assert flushed == [("failed", "the window is wrong")]


class FakeComm:
    def __init__(self) -> None:
        self.aborted: int | None = None

    def Abort(self, code: int) -> None:  # mpi4py's name
        self.aborted = code


def test_fail_on_one_of_several_nodes_names_the_rank_and_aborts(capsys):
    comm = FakeComm()
    fail(RuntimeError("boom"), Topology(1, 2, ("a", "b"), comm=comm))
    assert "pardnn-launch: error on rank 1 (node b): RuntimeError: boom" in capsys.readouterr().err
    assert comm.aborted == 1


def test_agreed_error_is_printed_by_rank_0_only_and_aborts_nothing(capsys):
    comm = FakeComm()
    fail(AgreedError("nodes differ"), Topology(1, 2, ("a", "b"), comm=comm))
    assert capsys.readouterr().err == ""
    fail(AgreedError("nodes differ"), Topology(0, 2, ("a", "b"), comm=comm))
    assert "error on rank 0 (node a): nodes differ" in capsys.readouterr().err
    assert comm.aborted is None


def test_stop_guard_check_raises_after_sigterm(tmp_path):
    flushed = []
    with StopGuard(lambda status, message: flushed.append(status), grace_seconds=30) as guard:
        guard.check()
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while not flushed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert guard.stopping
        with pytest.raises(Terminated, match="SIGTERM"):
            guard.check()
    assert flushed == ["terminated"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


BLOCKED = textwrap.dedent("""
    import sys, threading
    from pathlib import Path
    from launcher.failure import StopGuard

    out = Path(sys.argv[1])
    with StopGuard(lambda status, message: out.write_text(status), grace_seconds=1.0):
        print("ready", flush=True)
        threading.Event().wait()  # stands for a Session.run that never returns
""")


def test_sigterm_flushes_and_exits_while_the_main_thread_is_blocked(tmp_path):
    out = tmp_path / "flushed"
    proc = subprocess.Popen([sys.executable, "-c", BLOCKED, str(out)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == EXIT_TERMINATED
    assert time.monotonic() - started < 10
    assert out.read_text() == "terminated"


STANDIN = [sys.executable, "-m", "tests.launcher.standin"]


@pytest.mark.tf
@pytest.mark.slow
def test_sigterm_during_training_writes_the_records_and_exits_143(tmp_path):
    settings = json.dumps({"iterations": 1_000_000, "window": "10:20", "progress": False})
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.Popen([*STANDIN, "--out", str(tmp_path), "--settings", settings], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("*/placement.txt")) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.5)  # into training
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == EXIT_TERMINATED, stderr
    assert "error: stopped by SIGTERM" in stderr
    records = [json.loads(line) for line in next(tmp_path.glob("*/rank-0.jsonl")).read_text().splitlines()]
    assert records[-1]["status"] == "terminated"
    assert sum(r["event"] == "iteration" for r in records) > 20
    summary = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    assert summary["status"] == "terminated" and summary["partial"] is True
    assert summary["throughput"]["samples_per_s"] > 0
