"""Failure behaviour: exit codes, the one line, and stop signals answered while the main thread is busy."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from launcher.cluster.topology import Topology
from launcher.errors import AgreedError, Inconsistent, Interrupted, LaunchError, Stalled, Terminated
from launcher.rank.failure import EXIT_TERMINATED, exit_code, fail, one_line, status_of
from launcher.rank.signals import StopGuard
from pardnn.errors import InfeasibleError

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("error", "code"), [
    (LaunchError("x"), 1), (RuntimeError("x"), 1), (InfeasibleError("x"), 3), (Terminated("x"), 143),
    (KeyboardInterrupt(), 130), (Interrupted("x"), 130), (Stalled("x"), 4), (AgreedError("x"), 1),
    (AgreedError("x", 3), 3), (Inconsistent("x"), 1),
])
def test_exit_codes(error, code):
    assert exit_code(error) == code


@pytest.mark.parametrize(("error", "status"), [
    (RuntimeError("x"), "failed"), (Terminated("x"), "time_limit"), (Interrupted("x"), "interrupted"),
    (KeyboardInterrupt(), "interrupted"), (Stalled("x"), "stalled"), (Inconsistent("x"), "inconsistent"),
    (AgreedError("x"), "failed"),
])
def test_status_of(error, status):
    assert status_of(error) == status


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
    assert capsys.readouterr().err == "pardnn-launch: error: nodes differ\n"
    assert comm.aborted is None


@pytest.mark.parametrize(("signum", "kind", "status"), [
    (signal.SIGTERM, Terminated, "time_limit"), (signal.SIGUSR1, Terminated, "time_limit"),
    (signal.SIGINT, Interrupted, "interrupted"),
])
def test_stop_guard_check_raises_after_a_stop_signal(signum, kind, status):
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)}
    flushed = []
    with StopGuard(lambda status, message: flushed.append((status, message)), grace_seconds=30) as guard:
        guard.check()
        os.kill(os.getpid(), signum)
        deadline = time.monotonic() + 5
        while not flushed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert guard.stopping
        with pytest.raises(kind, match=signal.Signals(signum).name) as caught:
            guard.check()
    assert [s for s, _ in flushed] == [status] and caught.value.status == status
    assert "time limit" not in flushed[0][1] if signum == signal.SIGINT else "time limit" in flushed[0][1]
    assert {s: signal.getsignal(s) for s in before} == before


BLOCKED = textwrap.dedent("""
    import sys, threading
    from pathlib import Path
    from launcher.rank.signals import StopGuard

    out = Path(sys.argv[1])
    with StopGuard(lambda status, message: out.write_text(status), grace_seconds=1.0):
        print("ready", flush=True)
        threading.Event().wait()  # stands for a Session.run that never returns
""")


def test_sigterm_flushes_and_exits_while_the_main_thread_is_blocked(tmp_path):
    out = tmp_path / "flushed"
    proc = subprocess.Popen([sys.executable, "-c", BLOCKED, str(out)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == EXIT_TERMINATED  # the grace is 1 s; the timeout only stops a hang
    assert out.read_text() == "time_limit"


STANDIN = [sys.executable, "-m", "tests.launcher.standin"]


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code", "status", "said"), [
    (signal.SIGTERM, EXIT_TERMINATED, "time_limit", "error: stopped by SIGTERM (Slurm's time limit"),
    (signal.SIGINT, 130, "interrupted", "error: interrupted (SIGINT, Ctrl-C)"),
])
def test_a_stop_signal_during_training_writes_every_file_and_exits_with_its_code(tmp_path, signum, code, status,
                                                                                 said):
    settings = json.dumps({"iterations": 1_000_000, "window": "10:20", "progress": False})
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.Popen([*STANDIN, "--out", str(tmp_path), "--settings", settings], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("*/placement.txt")) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.5)  # into training
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    errors = [line for line in stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith(f"pardnn-launch: {said}"), stderr
    assert ("time limit" in stderr) == (signum == signal.SIGTERM)
    [run_dir] = [p for p in tmp_path.iterdir() if p.is_dir()]
    records = [json.loads(line) for line in (run_dir / "rank-0.jsonl").read_text().splitlines()]
    assert records[-1]["status"] == status
    assert sum(r["event"] == "iteration" for r in records) > 20
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == status and summary["partial"] is True
    assert summary["throughput"]["samples_per_s"] > 0 and summary["throughput"]["complete"] is True
    assert json.loads((run_dir / "status.json").read_text())["status"] == status
    assert json.loads((run_dir / "figures-0.json").read_text())["status"] == status
    [row] = list(csv.DictReader((tmp_path / "results.csv").read_text().splitlines()))
    assert (row["status"], row["window_complete"]) == (status, "true")


def test_the_one_line_of_a_stop_is_printed_once_whichever_thread_comes_first(tmp_path, capsys):
    """A stop signal reaches the main thread (it raises at its next iteration) and the signal watcher's
    thread (it writes the files and announces); both may try to print the line, only the first does."""
    import threading

    from launcher.rank.state import RunState

    state = RunState(job=None, settings=None, topology=None, directory=tmp_path, collector=None)
    claims: list[bool] = []
    threads = [threading.Thread(target=lambda: claims.append(state.claim_report())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(claims) == [False] * 7 + [True]

    state = RunState(job=None, settings=None, topology=None, directory=tmp_path, collector=None)
    state._speak("stopped by SIGUSR1 (the time limit, passed on by the batch script)", True)
    assert not state.claim_report()  # the main thread's fail() then stays quiet
    state._speak("stopped by SIGUSR1 (the time limit, passed on by the batch script)", True)
    assert capsys.readouterr().err.count("pardnn-launch: error: stopped by SIGUSR1") == 1
