"""``--micro-batches auto``: the launcher's M search is :class:`pardnn.plan.search.Planner`'s (tested in
tests/pardnn/plan); here its table and one-line error (:mod:`launcher.placing.planning`), and the real
graphs in the slow tests at the end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.errors import LaunchError
from launcher.placing.planning import micro_report, no_micro_fits
from launcher.rank.failure import exit_code, status_of
from launcher.reporting.summary import results_row
from launcher.settings import check_auto, resolve
from pardnn.plan.search import Plan, PlanSearch, Trial
from tests.launcher.standin import Job

ROOT = Path(__file__).resolve().parents[3]


def _search(*trials: Trial) -> PlanSearch:
    chosen = next((t for t in trials if t.fits), None)
    return PlanSearch(trials, chosen, "k=2 M=1: the only plan that fits" if chosen else "no plan fits", 0.0)


def test_no_m_fits_is_one_does_not_fit_line_naming_every_m_once_per_reason():
    over = "peak 300.00 MiB over the limit of 100.00 MiB"
    search = _search(Trial(Plan(2, 1, 2), 4, "does_not_fit", over), Trial(Plan(2, 2, 2), 4, "does_not_fit", over),
                     Trial(Plan(2, 4, 2), 4, "infeasible", "pardnn: 3 GiB short."),
                     Trial(Plan(2, 8, 2), 4, "skipped", "the replica's batch 4 does not split into 8 micro-batches"))
    error = no_micro_fits(search, 4)
    assert exit_code(error) == 3 and status_of(error) == "does_not_fit"
    assert str(error) == ("--micro-batches auto: no M fits the devices' memory at batch 4 (M = 1, 2: " + over
                          + "; M = 4: pardnn: 3 GiB short; M = 8: does not divide the batch 4); not trained. "
                          "Try more devices, a smaller batch or a lower --reserve")
    assert error.report["chosen"] is None and [t["micro_batches"] for t in error.report["trials"]] == [1, 2, 4, 8]


def test_the_report_lists_every_m_with_its_figures():
    search = _search(Trial(Plan(2, 1, 2), 2, "fits", ops=10, compute_us=800.0, exposed_us=0.0, step_us=800.0,
                           samples_per_s=2500.0, peak_bytes=5),
                     Trial(Plan(2, 2, 2), 2, "pruned", "its step is at least 0.90 ms", ops=20, bound_us=900.0))
    table = json.loads(json.dumps(micro_report(search)))
    assert table["mode"] == "auto" and table["chosen"] == 1 and table["why"] == search.why
    assert [(row["micro_batches"], row["status"], row["step_us"], row["bound_us"]) for row in table["trials"]] == [
        (1, "fits", 800.0, None), (2, "pruned", None, 900.0)]


def test_the_results_row_has_the_m_trained():
    summary = {"throughput": {"samples_per_s": None, "tokens_per_s": None, "complete": False}, "per_node": [],
               "placement": {}, "job": {}, "status": "does_not_fit", "nodes": 1, "devices_per_node": 2,
               "device_kind": "cpu", "batch_size": 8, "global_batch_size": 8, "window": [1, 2],
               "settings": {"iterations": 3, "costs": "estimate", "memory": None, "micro_batches": "auto"}}
    assert results_row({**summary, "micro_batches": {"chosen": 4}}, "t", Path("r"))["micro_batches"] == 4
    assert results_row({**summary, "micro_batches": {"chosen": None}}, "t", Path("r"))["micro_batches"] is None
    plain = {**summary, "settings": {**summary["settings"], "micro_batches": 2}}
    assert results_row(plain, "t", Path("r"))["micro_batches"] == 2


def test_auto_is_for_one_placer_across_the_devices():
    check_auto(resolve(Job(), {"micro_batches": "auto"}))
    with pytest.raises(LaunchError, match="--micro-batches auto chooses M for one placement; --compare"):
        resolve(Job(), {"micro_batches": "auto", "compare": "pardnn,critical_path"})
    with pytest.raises(LaunchError, match="with --parallelism data give a whole number M"):
        resolve(Job(), {"micro_batches": "auto", "parallelism": "data"})


# ------------------------------------------------------------------------------- the real graphs (TensorFlow)
def _launch(tmp_path, *options):
    return subprocess.run(
        [sys.executable, "-m", "launcher.cli", "word-rnn-tiny", "--micro-batches", "auto", "--costs", "estimate",
         "--no-progress", "--out", str(tmp_path), *options],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**_env(), "TF_CPP_MIN_LOG_LEVEL": "2"})


@pytest.mark.slow
def test_no_m_fitting_ends_untrained_with_the_table(tmp_path):
    proc = _launch(tmp_path, "--batch-size", "2", "--memory", "64KiB", "--iterations", "5", "--window", "1:3")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1
    assert "--micro-batches auto: no M fits the devices' memory at batch 2 (M = 1, 2: " in errors[0]
    assert "; M = 4, 8, 16: does not divide the batch 2); not trained." in errors[0]
    [run] = [path for path in tmp_path.iterdir() if path.is_dir()]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "does_not_fit" and summary["micro_batches"]["chosen"] is None
    assert [(t["micro_batches"], t["status"]) for t in summary["micro_batches"]["trials"]] == [
        (1, "infeasible"), (2, "infeasible"), (4, "skipped"), (8, "skipped"), (16, "skipped")]


@pytest.mark.slow
def test_word_rnn_tiny_chooses_m_and_reports_every_m_tried(tmp_path):
    """A single node on 4 logical CPU devices: M = 1, 2, 4 (batch 4) built, estimated and placed (unless a
    lower bound rules one out); the run trains the chosen M's graph and summary.json lists every M tried
    with its figures."""
    proc = _launch(tmp_path, "--batch-size", "4", "--iterations", "12", "--window", "4:10")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [run] = [path for path in tmp_path.iterdir() if path.is_dir()]
    summary = json.loads((run / "summary.json").read_text())
    table = summary["micro_batches"]
    assert summary["status"] == "complete" and summary["settings"]["micro_batches"] == "auto"
    assert [row["micro_batches"] for row in table["trials"]] == [1, 2, 4, 8, 16]
    assert [row["status"] for row in table["trials"]][3:] == ["skipped", "skipped"]
    placed = [row for row in table["trials"] if row["status"] == "fits"]
    assert placed and all(row["status"] in ("fits", "pruned") for row in table["trials"][:3])
    for row in placed:
        assert row["step_us"] > 0 and row["samples_per_s"] == pytest.approx(4 / row["step_us"] * 1e6)
        assert row["peak_bytes"] > 0 and row["ops"] > 0 and row["replica_devices"] == 4
    for row in table["trials"][:3]:
        if row["status"] == "pruned":  # never faster than the one chosen
            assert row["bound_us"] > min(r["step_us"] for r in placed)
    [chosen] = [row for row in placed if row["micro_batches"] == table["chosen"]]
    assert chosen["samples_per_s"] == pytest.approx(max(row["samples_per_s"] for row in placed), rel=1e-9)
    assert f"micro-batches auto: chose k=4 M={chosen['micro_batches']}: " in proc.stderr
    import csv

    [row] = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert row["micro_batches"] == str(table["chosen"])
    # the placement trained is the chosen M's graph: its ops, its emulated step
    assert summary["placement"]["ops"] == chosen["ops"]
    makespan_us = summary["placement"]["report"]["evaluation"]["makespan_us"]
    assert makespan_us == pytest.approx(chosen["step_us"])
    print("\nword-rnn-tiny auto (estimate, batch 4, K = 4): "
          + ", ".join(f"M = {r['micro_batches']}: {r['status']} {r['step_us'] or r['bound_us'] or 0:.0f} us"
                      for r in table["trials"]) + f"; chose M = {table['chosen']}")


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)
