"""The steps a plan search builds: which ones (worked by hand), how many workers, and the same search
whether the steps are built here or in worker processes."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from jobs.plansteps import WORKER_BYTES, Steps, needed_steps, worker_count


def test_needed_steps_of_word_rnn_2_on_a_dgx_2() -> None:
    """Batch 32 over 16 GPUs: k = 1, 2, 4, 8, 16 train replicas of 2, 4, 8, 16, 32 samples. Each needs its
    M = 1 and M = 2 step; M = 4 of 4 samples is 4 copies of the M = 2 step of 2 samples (already
    needed), and so on: ten builds, in the order the search asks (M first, then k)."""
    assert needed_steps(32, 16, [1, 2, 4, 8, 16], [1, 2, 4, 8, 16]) == [
        (2, 1), (4, 1), (8, 1), (16, 1), (32, 1), (2, 2), (4, 2), (8, 2), (16, 2), (32, 2)]


def test_needed_steps_skip_what_does_not_split() -> None:
    """Batch 4 over 16 GPUs: 16 and 8 replicas do not split 4 samples; k = 4 trains 1 sample (M = 1 only),
    k = 8 two (M = 1, 2), k = 16 four (M = 4 from the M = 2 step of 2 samples, which k = 8 needs)."""
    assert needed_steps(4, 16, [1, 2, 4, 8, 16], [1, 2, 4, 8, 16]) == [(1, 1), (2, 1), (4, 1), (2, 2), (4, 2)]
    assert needed_steps(4, 16, [16], [4]) == [(2, 2)]  # one plan of 4 micro-batches: its template only
    assert needed_steps(3, 2, [1], [1, 2]) == []  # 3 samples over 2 replicas: nothing to build


def test_worker_count_leaves_this_process_its_core_and_fits_memory() -> None:
    assert worker_count(10, cpus=2, available_bytes=64 * WORKER_BYTES) == 1
    assert worker_count(10, cpus=1, available_bytes=64 * WORKER_BYTES) == 0
    assert worker_count(3, cpus=64, available_bytes=64 * WORKER_BYTES) == 3  # no more than the steps left
    assert worker_count(10, cpus=64, available_bytes=4 * WORKER_BYTES + 1) == 4  # what memory holds
    assert worker_count(10, cpus=64, available_bytes=WORKER_BYTES - 1) == 0
    assert worker_count(10) >= 0  # this machine's own CPUs and memory


def _dies_in_a_worker(job, batch_size, micro_batches):  # a builder killed in any worker, as the OOM killer would
    if multiprocessing.parent_process() is not None:
        os._exit(9)
    from jobs.training import build

    return build(job, batch_size=batch_size, micro_batches=micro_batches)


@pytest.mark.tf
@pytest.mark.slow
def test_a_search_is_the_same_with_its_steps_built_in_workers(monkeypatch) -> None:
    """word-rnn-tiny, 2 nodes of 4 devices, every k and M: the steps built in a worker (the first one here,
    the workers started once it said the rest take long enough) give the search built all here, trial
    for trial."""
    import jobs.plansteps
    from jobs.config import load_job
    from jobs.plan import job_plan

    job = load_job("word-rnn-tiny")
    here, described_here = job_plan(job, nodes=2, node="dgx-a100", devices_per_node=4, build_workers=0)
    assert described_here["build_workers"] == 0

    monkeypatch.setattr(jobs.plansteps, "PARALLEL_AFTER_S", 0.0)  # every job is long enough
    monkeypatch.setattr(jobs.plansteps, "worker_count", lambda steps_left: 1)
    notes: list[str] = []
    there, described = job_plan(job, nodes=2, node="dgx-a100", devices_per_node=4, on_note=notes.append)
    assert described["build_workers"] == 1
    assert described["graphs_built"] == described_here["graphs_built"] == len(needed_steps(16, 4, [1, 2, 4],
                                                                                           [1, 2, 4, 8, 16]))
    assert notes[0].startswith("built and costed word-rnn-tiny") and "in a worker" not in notes[0]
    assert sum("in a worker" in note for note in notes) >= 1  # the others: some in the worker, some stolen here
    assert [t.to_dict() | {"seconds": 0} for t in there.trials] == [t.to_dict() | {"seconds": 0} for t in here.trials]
    assert there.chosen.plan == here.chosen.plan


@pytest.mark.tf
@pytest.mark.slow
def test_a_worker_that_dies_leaves_its_steps_to_this_process() -> None:
    from jobs.config import load_job
    from pardnn.costs.presets import preset

    job = load_job("word-rnn-tiny")
    notes: list[str] = []
    steps = Steps(job, preset("dgx-a100"), _dies_in_a_worker, {})
    steps.reset(notes.append)
    steps.start([(8, 1), (16, 1)], workers=1)
    try:
        assert steps.graph_for(8, 1).n > 0 and steps.graph_for(16, 1).n > 0
    finally:
        steps.stop()
    assert any(note.startswith("a build worker stopped") for note in notes), notes
    assert steps.builds == 2 and not any("in a worker" in note for note in notes)
