"""The hint after a run of one replica per node: plain data parallelism named only where the emulator
says it trains faster, at the run's M; checked against ``pardnn plan``'s own table."""

from __future__ import annotations

import json

import pytest

from jobs.config import load_job
from launcher.placing.planning import hint
from launcher.settings import resolve
from pardnn.cli import EXIT_OK, main

pytestmark = [pytest.mark.tf]


def _plan_steps(capsys, job: str, *options: str) -> dict[int, float]:
    assert main(["plan", job, "--nodes", "2", "--devices-per-node", "2", "--json", "-q",
                 "--micro-batches", "1", *options]) == EXIT_OK
    trials = json.loads(capsys.readouterr().out)["trials"]
    return {t["replica_devices"]: t["step_us"] for t in trials if t["status"] == "fits"}


def test_the_hint_names_data_parallelism_when_pardnn_plan_finds_it_faster(capsys) -> None:
    """wrn-tiny at 768 samples per node on 2 devices: 2 replicas of 384 (4.07 ms a step) beat one of 768
    across both devices (5.05 ms in order of readiness, its run order judged slower with the allreduce).
    (word-rnn-tiny, launch-bound, trains faster as one replica per node once that order is judged.)"""
    job = load_job("wrn-tiny")
    settings = resolve(job, {"devices_per_node": 2, "costs": "estimate", "micro_batches": 1, "batch_size": 768})
    steps = _plan_steps(capsys, "wrn-tiny", "--node", settings.device_preset, "--batch-size", "768")
    assert steps[1] < steps[2] * (1 - 1e-6)
    line = hint(job, settings, 2, None)
    assert line is not None and line.startswith("hint: the emulator says plain data parallelism")
    assert f"{steps[2] / steps[1]:.2f}x faster than one replica per node" in line
    assert "pardnn plan wrn-tiny --nodes 2" in line


def test_no_hint_where_the_batch_does_not_split_over_the_devices() -> None:
    job = load_job("word-rnn-tiny")
    settings = resolve(job, {"devices_per_node": 2, "costs": "estimate", "batch_size": 15, "micro_batches": 1})
    assert hint(job, settings, 2, None) is None
