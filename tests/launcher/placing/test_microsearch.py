"""``--micro-batches auto`` (:mod:`launcher.placing.microsearch`): which M are tried, which one is kept, the
table and the one-line errors. A stand-in ``measure`` gives each M's emulated step and peak memory,
so the choice is known by construction; the real graphs are in the slow test at the end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.errors import DoesNotFit, LaunchError
from launcher.placing.microsearch import (
    Measured,
    NoMicroBatchFits,
    candidates,
    decide,
    failed,
    report,
    search,
)
from launcher.rank.failure import exit_code, status_of
from launcher.reporting.summary import results_row
from launcher.settings import check_auto, resolve
from tests.launcher.standin import Job

ROOT = Path(__file__).resolve().parents[3]
MIB = 1 << 20


def standin(steps_us: dict[int, float], peaks: dict[int, int] | None = None, limit: int | None = 100 * MIB):
    """A ``measure`` giving M its step (µs) and peak (bytes); the Ms it was asked for, in order."""
    asked: list[int] = []

    def measure(micro: int) -> Measured:
        asked.append(micro)
        peak = (peaks or {}).get(micro, 10 * MIB)
        return Measured(micro, 100 * micro, steps_us[micro], peak, limit, limit is None or peak <= limit)

    return measure, asked


def test_the_candidates_are_the_powers_of_two_up_to_the_batch_that_divide_it():
    assert candidates(16) == ([1, 2, 4, 8, 16], [])
    assert candidates(12) == ([1, 2, 4], [8])
    assert candidates(6) == ([1, 2], [4])
    assert candidates(1) == ([1], [])


def test_the_highest_samples_per_second_that_fits_is_chosen():
    measure, asked = standin({1: 800.0, 2: 500.0, 4: 300.0, 8: 200.0, 16: 400.0}, peaks={8: 200 * MIB})
    kept = []
    trials, chosen, why = search(16, measure, keep=kept.append)
    assert asked == [1, 2, 4, 8, 16]  # no early stop: 16 is tried after 8 failed
    assert chosen.micro_batches == 4 and chosen.status == "chosen"
    assert kept == [1, 2, 4]  # each new best fitting M, so the caller keeps only its graph
    status = {t.micro_batches: t.status for t in trials}
    assert status == {1: "slower", 2: "slower", 4: "chosen", 8: "does_not_fit", 16: "slower"}
    assert chosen.samples_per_s == pytest.approx(16 / 300e-6) and chosen.emulated_step_ms == pytest.approx(0.3)
    assert chosen.peak_memory_bytes == 10 * MIB and chosen.limit_bytes == 100 * MIB and chosen.fits
    assert "M = 4: the highest emulated samples/s that fits" in why and "2.67× M = 1's" in why
    assert "M = 1, 2, 16 slower" in why and "M = 8 did not fit" in why
    [eight] = [t for t in trials if t.micro_batches == 8]
    assert eight.reason == "peak 200.00 MiB over the limit of 100.00 MiB" and eight.fits is False


def test_a_tie_keeps_the_smaller_m():
    measure, _ = standin({1: 500.0, 2: 500.0, 4: 500.0 * (1 - 1e-12)})
    _, chosen, _ = search(4, measure)
    assert chosen.micro_batches == 1


def test_m_not_dividing_the_batch_is_skipped_and_listed():
    measure, asked = standin({1: 900.0, 2: 400.0, 4: 300.0})
    trials, chosen, why = search(12, measure)
    assert asked == [1, 2, 4] and chosen.micro_batches == 4
    [eight] = [t for t in trials if t.micro_batches == 8]
    assert eight.status == "skipped" and eight.reason == "does not divide the batch 12"
    assert [t.micro_batches for t in trials] == [1, 2, 4, 8]
    assert "M = 8 do not divide the batch" in why


def test_a_placer_that_finds_no_placement_counts_as_not_fitting():
    from launcher.errors import AgreedError

    def measure(micro: int) -> Measured:
        if micro == 2:
            return failed(2, DoesNotFit("pardnn: no placement found: device 1 needs 3 GiB"))
        if micro == 4:
            error = AgreedError("exact: the graph has 900 ops")
            error.status = "no_placement"
            return failed(4, error)
        return Measured(micro, 10, 100.0 * micro, 1, None, True)

    trials, chosen, _ = search(4, measure)
    assert chosen.micro_batches == 1
    assert [(t.status, t.reason) for t in trials[1:]] == [
        ("does_not_fit", "pardnn: no placement found: device 1 needs 3 GiB"),
        ("no_placement", "exact: the graph has 900 ops")]


def test_no_m_fits_is_one_does_not_fit_line_naming_every_m():
    measure, _ = standin({1: 100.0, 2: 90.0, 4: 80.0}, peaks={1: 300 * MIB, 2: 200 * MIB, 4: 150 * MIB})
    with pytest.raises(NoMicroBatchFits) as caught:
        search(4, measure)
    error = caught.value
    assert exit_code(error) == 3 and status_of(error) == "does_not_fit"
    message = str(error)
    assert "\n" not in message
    assert message.startswith("--micro-batches auto: no M fits the devices' memory at batch 4 (M = 1: peak 300.00 "
                              "MiB over the limit of 100.00 MiB; M = 2: peak 200.00 MiB")
    assert error.report["chosen"] is None and [t["micro_batches"] for t in error.report["tried"]] == [1, 2, 4]
    same = lambda micro: failed(micro, DoesNotFit("pardnn: 3 GiB short."))  # noqa: E731
    with pytest.raises(NoMicroBatchFits, match=r"at batch 2 \(M = 1, 2: pardnn: 3 GiB short\); not trained"):
        search(2, same)


def test_the_report_lists_every_m_with_its_figures():
    measure, _ = standin({1: 800.0, 2: 500.0})
    trials, chosen, why = search(2, measure)
    table = json.loads(json.dumps(report(trials, chosen, why)))
    assert table["mode"] == "auto" and table["chosen"] == 2 and table["why"] == why
    fields = {"micro_batches", "status", "reason", "ops", "emulated_step_ms", "samples_per_s", "peak_memory_bytes",
              "limit_bytes", "fits"}
    assert [set(row) for row in table["tried"]] == [fields, fields]
    assert decide([Measured(1, 1, 5.0, 1, None, True)], 1)[1].micro_batches == 1  # unlimited memory fits


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
    [run] = [path for path in tmp_path.iterdir() if path.is_dir()]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "does_not_fit" and summary["micro_batches"]["chosen"] is None
    assert [(t["micro_batches"], t["status"]) for t in summary["micro_batches"]["tried"]] == [
        (1, "does_not_fit"), (2, "does_not_fit")]


@pytest.mark.slow
def test_word_rnn_tiny_chooses_m_and_reports_every_m_tried(tmp_path):
    """A single node on 4 logical CPU devices: M = 1, 2, 4 (batch 4) built, estimated and placed; the run
    trains the chosen M's graph and summary.json lists every M tried with its figures."""
    proc = _launch(tmp_path, "--batch-size", "4", "--iterations", "12", "--window", "4:10")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [run] = [path for path in tmp_path.iterdir() if path.is_dir()]
    summary = json.loads((run / "summary.json").read_text())
    table = summary["micro_batches"]
    assert summary["status"] == "complete" and summary["settings"]["micro_batches"] == "auto"
    assert [row["micro_batches"] for row in table["tried"]] == [1, 2, 4]
    for row in table["tried"]:
        assert row["status"] in ("chosen", "slower") and row["fits"] is True
        assert row["emulated_step_ms"] > 0 and row["samples_per_s"] == pytest.approx(4 / row["emulated_step_ms"] * 1e3)
        assert row["peak_memory_bytes"] > 0 and row["ops"] > 0
    [chosen] = [row for row in table["tried"] if row["status"] == "chosen"]
    assert table["chosen"] == chosen["micro_batches"]
    assert chosen["samples_per_s"] == max(row["samples_per_s"] for row in table["tried"])
    assert f"micro-batches auto: chose M = {chosen['micro_batches']}: the highest emulated samples/s" in proc.stderr
    import csv

    [row] = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert row["micro_batches"] == str(table["chosen"])
    # the placement trained is the chosen M's graph: its ops, its emulated step
    assert summary["placement"]["ops"] == chosen["ops"]
    makespan_us = summary["placement"]["report"]["evaluation"]["makespan_us"]
    assert makespan_us == pytest.approx(chosen["emulated_step_ms"] * 1e3)
    print("\nword-rnn-tiny auto (estimate, batch 4, K = 4): "
          + ", ".join(f"M = {r['micro_batches']}: {r['emulated_step_ms']:.3f} ms" for r in table["tried"])
          + f"; chose M = {table['chosen']}")


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)
