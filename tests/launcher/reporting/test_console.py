"""The console tee: everything a process writes to fds 1 and 2 reaches its log; the console gets a filtered copy."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from launcher.reporting.console import Console, classify

ROOT = Path(__file__).resolve().parents[3]
TF_INFO = "2024-01-01 12:00:00.123456: I tensorflow/core/util/port.cc:113] oneDNN custom operations are on."
TF_WARNING = "2024-01-01 12:00:00.123456: W tensorflow/core/x.cc:1] something to know"
HOROVOD_WARNING = "[2024-01-01 12:00:00.123456: W /horovod/common/stall_inspector.cc:107] One or more tensors"


@pytest.mark.parametrize(("line", "level"), [
    (TF_INFO, "info"), (TF_WARNING, "warning"), (HOROVOD_WARNING, "warning"),
    ("2024-01-01 12:00:00.123456: E tensorflow/x.cc:1] bad", "error"),
    ("I1123 12:00:00.123456  1234 file.py:10] absl info", "info"),
    ("W1123 12:00:00.123456  1234 file.py:10] absl warning", "warning"),
    ("I0000 00:00:1795773953.940092   13375 cudart_stub.cc:31] TensorFlow 2.21 before absl is set up", "info"),
    ("W0000 00:00:1795773954.061420   13375 xplane_to_step_stats.cc:84] GPU trace was not collected.", "warning"),
    ("pardnn-launch: error on rank 1 (node b): boom", "error"), ("pardnn-launch: warning: careful", "warning"),
    ("WARNING:root:python logging", "warning"), ("Traceback (most recent call last):", "error"),
    ("/x.py:3: DeprecationWarning: old", "warning"),
    ("pardnn-launch: word-rnn-tiny: iteration 16/160", None), ("plain print", None),
])
def test_classify(line, level):
    assert classify(line)[0] == level


def test_rank_0_sees_all_but_tensorflow_info_and_benign_warnings():
    console = Console(0)
    assert console.shown(TF_INFO, "info") is None
    assert console.shown("pardnn-launch: iteration 1/10", None) == "pardnn-launch: iteration 1/10"
    assert console.shown("2024-01-01 12:00:00.1: W tensorflow/x.cc:78] GPU trace was not collected.", "warning") is None
    assert console.shown(TF_WARNING, "warning") == TF_WARNING  # one node: no prefix
    # TensorFlow 2.21's load-time notices: absl's, and the CUDA probe of the `tensorflow` wheel without a driver.
    absl = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
    assert console.shown(absl, "warning") is None
    cuinit = ("E0000 00:00:1795774088.104118   13840 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: "
              "Failed call to cuInit: UNKNOWN ERROR (303)")
    assert console.shown(cuinit, "error") is None


def test_other_ranks_show_warnings_and_errors_only_prefixed_by_rank_and_node():
    console = Console(1)
    console.node, console.several = "node-b", True
    assert console.shown("pardnn-launch: iteration 1/10", None) is None
    assert console.shown(TF_WARNING, "warning") == f"[rank 1 node-b] {TF_WARNING}"
    line = "pardnn-launch: error on rank 1 (node node-b): boom"
    assert console.shown(line, "error") == line  # it names the rank already


PROGRAM = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from launcher.reporting import console
    rank = int(sys.argv[2])
    console.start(rank)
    print("before the log file exists")
    os.write(2, (sys.argv[3] + "\\n" + "To enable the following instructions: AVX2\\n").encode())  # C++ writes
    console.attach(Path(sys.argv[1]), rank, "node-x", True)
    os.write(2, (sys.argv[4] + "\\n").encode())
    print("pardnn-launch: iteration 5/10", file=sys.stderr, flush=True)
    sys.stderr.write("progress 50%\\r")
    sys.stderr.flush()
    time.sleep(0.6)  # a partial line reaches rank 0's console after 0.2 s without output
    try:
        1 / 0
    except ZeroDivisionError:
        import traceback
        traceback.print_exc()
    print("pardnn-launch: error on rank %d (node node-x): boom" % rank, file=sys.stderr, flush=True)
    console.drain()
    os._exit(3)  # no atexit: drain() alone must have copied everything
""")


@pytest.mark.parametrize("rank", [0, 1])
def test_the_tee_copies_everything_to_the_log_and_filters_the_console(tmp_path, rank):
    log = tmp_path / f"rank-{rank}.log"
    proc = subprocess.run([sys.executable, "-c", PROGRAM, str(log), str(rank), TF_INFO, TF_WARNING], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr
    text = log.read_bytes().decode()  # (read_text would turn the progress bar's \r into \n)
    for expected in ("before the log file exists", TF_INFO, "To enable the following instructions", TF_WARNING,
                     "iteration 5/10", "progress 50%\r", "ZeroDivisionError: division by zero", "boom"):
        assert expected in text
    assert "oneDNN" not in proc.stderr and "To enable" not in proc.stderr  # TensorFlow's INFO, continuation too
    assert f"[rank {rank} node-x] {TF_WARNING}" in proc.stderr
    assert f"[rank {rank} node-x] ZeroDivisionError: division by zero" in proc.stderr
    assert proc.stderr.count("error on rank") == 1
    if rank == 0:
        assert "before the log file exists" in proc.stdout
        assert "pardnn-launch: iteration 5/10" in proc.stderr and "progress 50%" in proc.stderr
    else:
        assert proc.stdout == "" and "iteration 5/10" not in proc.stderr and "progress" not in proc.stderr


CHILD_HOLDS_THE_PIPE = textwrap.dedent("""
    import os, subprocess, sys
    from pathlib import Path
    from launcher.reporting import console
    tee = console.start(0)
    console.attach(Path(sys.argv[1]), 0, "node-x", False)
    # A child inherits fds 1 and 2 (the pipes) and outlives the close, as Open MPI's singleton server does
    # when a run without mpirun initialises MPI: EOF cannot come before it exits.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(8)"])
    os.write(2, b"written before the close\\n")
    tee.close()
    print("closed", child.poll() is None, flush=True)  # before the child ended (the old close waited for it)
    child.kill()
""")


def test_closing_does_not_wait_for_a_child_that_holds_the_pipe(tmp_path):
    log = tmp_path / "rank-0.log"
    proc = subprocess.run([sys.executable, "-c", CHILD_HOLDS_THE_PIPE, str(log)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["closed", "True"]  # closed while the child was still alive
    assert "written before the close" in log.read_text() and "written before the close" in proc.stderr
