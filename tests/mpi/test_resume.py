"""Resuming with the command a run started with: a rank killed mid-run, then the same command with
--resume (profiled costs, the default) goes on from the newest checkpoint with the saved placement."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.losses import run_losses
from tests.helpers.mpi import (
    RESUMABLE,
    RESUMABLE_ITERATIONS,
    heartbeat,
    mpirun_launch,
    mpirun_start,
    output,
    uninterrupted_losses,
    wait_for_iteration,
)

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

# Still running (for seconds) when the rank is killed, half a second in; the resumed run trains the rest.
ITERATIONS, FIRST = RESUMABLE_ITERATIONS, RESUMABLE


def _iterations(folder: Path) -> list[int]:
    return sorted(json.loads(path.read_text())["iteration"] for path in folder.glob("ckpt-*.json"))


def test_a_killed_rank_resumes_with_the_first_command_line_and_the_uninterrupted_losses(tmp_path):
    out = tmp_path / "runs"
    proc = mpirun_start([*FIRST, "--out", str(out)])
    run_dir = wait_for_iteration(out, proc, 22)
    os.kill(heartbeat(run_dir, 1)["pid"], signal.SIGKILL)  # a node lost: no signal handler, no last checkpoint
    proc.communicate(timeout=120)
    assert proc.returncode != 0
    saved = _iterations(run_dir / "checkpoint")
    # The newest three (--keep-checkpoints 3), each whole: its values and placement beside its .json.
    assert len(saved) == 3 and saved == [saved[0], saved[0] + 5, saved[0] + 10] and 20 <= saved[-1] < ITERATIONS, saved
    for meta in (run_dir / "checkpoint").glob("ckpt-*.json"):
        described = json.loads(meta.read_text())
        assert (meta.parent / described["data"]).is_file() and (meta.parent / described["placement_file"]).is_file()
    assert len(list((run_dir / "checkpoint").glob("placement-*.txt"))) == 1
    assert not list((run_dir / "checkpoint").glob("*.tmp"))

    resumed, _ = mpirun_launch([*FIRST, "--out", str(out), "--resume"], timeout=300)
    assert resumed.returncode == 0, output(resumed)
    assert f"resuming {run_dir / 'checkpoint' / f'ckpt-{saved[-1]:08d}.json'}" in resumed.stderr
    [resumed_dir] = [p for p in out.iterdir() if p.is_dir() and p != run_dir]
    summary = json.loads((resumed_dir / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["consistency"]["variables_sha256_equal"]
    saved_meta = json.loads((run_dir / "checkpoint" / f"ckpt-{saved[-1]:08d}.json").read_text())
    assert summary["placement"]["sha256"] == saved_meta["placement_sha256"]
    assert summary["placement"]["resumed_from"].endswith(f"ckpt-{saved[-1]:08d}.json")
    phases = summary["per_node"][0]["phases_seconds"]
    assert "profile" not in phases and "partition" not in phases, phases  # neither profiled nor placed again
    assert (resumed_dir / "placement.txt").read_text() == (run_dir / "placement.txt").read_text()

    got = run_losses(resumed_dir, 2)
    expected = np.mean(uninterrupted_losses(), axis=0)[saved[-1]:]  # the same command, never stopped
    assert len(got) == ITERATIONS - saved[-1]
    assert got.tolist() == expected.tolist()  # exactly: a placement moves ops, not the arithmetic


def test_a_changed_cluster_shape_is_one_line_and_overwrites_nothing(tmp_path):
    out = tmp_path / "runs"
    first, _ = mpirun_launch([*FIRST, "--iterations", "10", "--window", "2:8", "--costs", "estimate",
                              "--out", str(out)])
    assert first.returncode == 0, output(first)
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    before = {p.name: p.read_bytes() for p in (run_dir / "checkpoint").iterdir()}
    again, _ = mpirun_launch([*FIRST, "--iterations", "20", "--window", "2:8", "--costs", "estimate",
                              "--devices-per-node", "3", "--out", str(out), "--resume"])
    assert again.returncode == 1
    lines = [line for line in again.stderr.splitlines() if "error" in line]
    assert len(lines) == 1, again.stderr
    assert "its placement spans 2 cpu device(s) per node, this run has 3 cpu device(s)" in lines[0]
    assert "--replace" in lines[0] and "Traceback" not in again.stderr
    assert {p.name: p.read_bytes() for p in (run_dir / "checkpoint").iterdir()} == before

    replaced, _ = mpirun_launch([*FIRST, "--iterations", "20", "--window", "12:18", "--costs", "estimate",
                                 "--devices-per-node", "3", "--out", str(out), "--resume", str(run_dir),
                                 "--replace"])
    assert replaced.returncode == 0, output(replaced)
    [new_dir] = [p for p in out.iterdir() if p.is_dir() and p != run_dir and (p / "summary.json").exists()
                 and json.loads((p / "summary.json").read_text())["status"] == "complete"]
    assert sorted(run_losses(new_dir, 2).shape) == [10]  # iterations 10..19, from the saved weights
