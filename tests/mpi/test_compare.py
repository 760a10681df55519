"""Every placer, plain data parallelism and --compare through pardnn-launch under mpirun, and pardnn-report on them.

Few runs, each read by several tests (module-scoped fixtures), on word-rnn-tiny for 6 iterations:

- every placer of the registry (pardnn-paper included) in one ``--compare`` on 2 ranks × 2 logical devices;
- ``--compare pardnn,metis,data,data+recompute`` on 4 ranks (2 nodes × 2 devices; the node leaders run the
  placers, every rank a data-parallel replica);
- a placer over the memory limit, one process: ``does_not_fit`` before training.

The data-parallel losses are checked against a one-device run of the same global batch, made here
in-process: each iteration's four replica batches concatenated into one batch of 32.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pardnn.registry import PLACERS
from tests.helpers.losses import one_device_losses, run_losses
from tests.helpers.mpi import LAUNCH, ROOT, TINY_JOB, mpirun_launch, output, read_records

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

ITERATIONS, WINDOW = 6, "2:5"
RUN = [*LAUNCH, TINY_JOB, "--iterations", str(ITERATIONS), "--window", WINDOW, "--devices-per-node", "2",
       "--no-progress"]
EVERY_PLACER = list(PLACERS)  # pardnn-paper included
RANKS, REPLICA_BATCH = 4, 8  # word-rnn-tiny: 16 per node, 2 nodes × 2 devices


def _rows(out: Path) -> list[dict[str, str]]:
    return list(csv.DictReader((out / "results.csv").read_text().splitlines()))


def _launch(out: Path, *options: str, ranks: int) -> subprocess.CompletedProcess[str]:
    proc, _ = mpirun_launch([*RUN, "--out", str(out), *options], ranks=ranks, timeout=600)
    assert proc.returncode == 0, output(proc)
    return proc


@pytest.fixture(scope="module")
def placers(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("placers")
    return out, _launch(out, "--compare", ",".join(EVERY_PLACER), ranks=2)


@pytest.fixture(scope="module")
def compared(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("compared")
    return out, _launch(out, "--compare", "pardnn,metis,data,data+recompute", ranks=RANKS)


@pytest.mark.parametrize("placer", EVERY_PLACER)
def test_every_placer_trains_and_writes_its_row(placers, placer):
    out, _ = placers
    [row] = [row for row in _rows(out) if row["placer"] == placer]
    run_dir = Path(row["run_dir"])
    assert run_dir.name.startswith(f"word-rnn-tiny-{placer}-n2-k2-b16-")
    summary = json.loads((run_dir / "summary.json").read_text())
    if row["status"] == "no_placement":  # exact: the CP-SAT placer takes small graphs only
        assert placer == "exact" and "ops" in row["message"], row["message"]
        return
    assert (row["status"], row["parallelism"], row["window_complete"]) == ("complete", "model", "true")
    assert (summary["placer"], summary["placement"]["placer"]) == (placer, placer)
    assert float(row["samples_per_s"]) > 0 and float(row["emulated_step_ms"]) > 0
    assert float(row["step_ratio"]) == pytest.approx(float(row["step_ms_median"]) / float(row["emulated_step_ms"]),
                                                     rel=1e-3)
    iterations = [r for r in read_records(run_dir / "rank-1.jsonl") if r["event"] == "iteration"]
    assert len(iterations) == ITERATIONS
    log = next(out.glob("*-compare-*/rank-0.log")).read_text()
    assert f"by {placer}: " in log  # the log's placement line names the placer


def test_the_graph_is_costed_once_for_every_placer(placers):
    out, _ = placers
    profiled = {Path(row["placer"]): json.loads((Path(row["run_dir"]) / "figures-0.json").read_text())
                for row in _rows(out)}
    phases = [set(figures["figures"]["phases_seconds"]) for figures in profiled.values()]
    assert sum("profile" in p for p in phases) == 1, phases


def _losses(run_dir: Path, ranks: int) -> np.ndarray:
    return run_losses(run_dir, ranks)


def _one_device_losses(recompute: bool) -> np.ndarray:
    """word-rnn-tiny on one device, batch 32: at iteration i, the replicas' batches i·4 + r, r = 0..3."""
    return one_device_losses(TINY_JOB, RANKS, REPLICA_BATCH, ITERATIONS, recompute=recompute)


def test_compare_prints_its_table_and_writes_a_row_per_variant(compared):
    out, proc = compared
    rows = _rows(out)
    assert [(r["placer"], r["parallelism"], r["recompute"], r["status"]) for r in rows] == [
        ("pardnn", "model", "false", "complete"), ("metis", "model", "false", "complete"),
        ("", "data", "false", "complete"), ("", "data", "true", "complete")]
    assert {(r["nodes"], r["devices_per_node"], r["global_batch_size"]) for r in rows} == {("2", "2", "32")}
    assert [r["batch_size"] for r in rows] == ["16", "16", str(REPLICA_BATCH), str(REPLICA_BATCH)]
    table = [line for line in proc.stdout.splitlines() if line.startswith("| ")]  # the header, then a line each
    assert table[0].startswith("| variant | status | samples/s | speed-up |")
    assert [line.split(" | ")[0] for line in table[1:]] == ["| pardnn", "| metis", "| data", "| data+recompute"]
    assert table[1].split(" | ")[3] == "1.00×"
    [folder] = out.glob("word-rnn-tiny-compare-n2-k2-b16-*")
    assert (folder / "comparison.md").read_text().count("| complete |") == 4
    for rank in range(RANKS):  # every rank's log of the whole comparison
        assert (folder / f"rank-{rank}.log").exists()


def test_data_parallelism_trains_the_one_device_losses(compared):
    out, _ = compared
    [row] = [r for r in _rows(out) if r["parallelism"] == "data" and r["recompute"] == "false"]
    np.testing.assert_allclose(_losses(Path(row["run_dir"]), RANKS), _one_device_losses(False), rtol=1e-5)


def test_data_parallelism_with_recompute_trains_the_one_device_losses(compared):
    out, _ = compared
    [row] = [r for r in _rows(out) if r["recompute"] == "true"]
    assert (row["parallelism"], row["recompute"], row["status"], row["batch_size"]) == (
        "data", "true", "complete", str(REPLICA_BATCH))
    run_dir = Path(row["run_dir"])
    assert run_dir.name.startswith("word-rnn-tiny-data-recompute-n2-k2-b16-")
    np.testing.assert_allclose(_losses(run_dir, RANKS), _one_device_losses(True), rtol=1e-5)


def test_a_placement_over_the_memory_limit_ends_as_does_not_fit_untrained(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "launcher.cli", TINY_JOB, "--placer", "single", "--memory", "64KiB",
                           "--reserve", "0", "--costs", "estimate", "--devices-per-node", "2", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 3, output(proc)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("pardnn-launch: error")]
    assert len(errors) == 1 and "single: device 0 needs" in errors[0] and "over its limit of 64.00 KiB" in errors[0]
    [row] = _rows(tmp_path)
    assert (row["status"], row["placer"], row["fits"], row["samples_per_s"]) == ("does_not_fit", "single", "false", "")
    run_dir = Path(row["run_dir"])
    assert json.loads((run_dir / "status.json").read_text())["status"] == "does_not_fit"
    records = read_records(run_dir / "rank-0.jsonl")
    assert not [r for r in records if r["event"] == "iteration"]
    assert "train" not in {r.get("name") for r in records if r["event"] == "phase"}


def _drawn(path: Path) -> tuple[tuple[int, ...], int]:
    from matplotlib import image

    pixels = image.imread(path)[..., :3]
    return pixels.shape, int(((pixels.max(axis=-1) - pixels.min(axis=-1)) > 0.2).sum())


def test_pardnn_report_draws_the_comparison_and_the_fidelity(placers, compared, tmp_path, capsys):
    from launcher.report import main

    dirs: list[Any] = [placers[0], compared[0]]
    assert main([*map(str, dirs), "--out", str(tmp_path)]) == 0
    report = (tmp_path / "report.md").read_text()
    assert "### speed-up of pardnn over each alternative" in report
    assert "### the emulator's fidelity: measured / emulated step" in report
    for variant in ("metis", "data", "data+recompute", "pardnn-paper"):
        assert f"| {variant} | 2 |" in report, variant  # a fidelity line per variant at K = 2
    for name in ("word-rnn-tiny-speedup.png", "word-rnn-tiny-fidelity.png"):
        shape, coloured = _drawn(tmp_path / name)
        assert shape == (400, 600, 3) and coloured > 100, name
