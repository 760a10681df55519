"""The steps a plan search builds: which ones (worked by hand), how many workers, and the same search
whether the steps are built here or in worker processes."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
from types import SimpleNamespace

import pytest

from jobs.plansteps import WORKER_BYTES, Steps, needed_steps, worker_count


def test_needed_steps_of_word_rnn_2_on_a_dgx_2() -> None:
    """Batch 32 over 16 GPUs: k = 1, 2, 4, 8, 16 train replicas of 2, 4, 8, 16, 32 samples. Each needs its
    M = 1 and M = 2 step; M = 4 of 4 samples is 4 copies of the M = 2 step of 2 samples (already
    needed), and so on. The plain steps come first, with the plain step of 1 sample that bounds k = 1 at
    M = 2 (and k = 2 at M = 4, ...): eleven builds at most, each group in the search's order (M, then k)."""
    assert needed_steps(32, 16, [1, 2, 4, 8, 16], [1, 2, 4, 8, 16]) == [
        (2, 1), (4, 1), (8, 1), (16, 1), (32, 1), (1, 1), (2, 2), (4, 2), (8, 2), (16, 2), (32, 2)]
    assert needed_steps(32, 16, [1, 2], [2]) == [(2, 2), (4, 2)]  # one M alone: no plain step to bound it


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


def test_ahead_sends_the_workers_what_the_plans_left_need_and_drops_the_rest() -> None:
    """Plans left: M = 1 at batch 8, and M = 4 at batch 16 (4 samples each: the M = 2 step of 8 samples,
    bounded by the plain step of 4). A pending step no plan needs is cancelled; a deferred M = 2 step
    goes to the workers once a plan needs it, the other stays deferred."""
    class Pool:
        def __init__(self) -> None:
            self.submitted: list[tuple[int, int]] = []

        def submit(self, fn, job, preset, batch, micro, build) -> cf.Future:
            self.submitted.append((batch, micro))
            return cf.Future()

    steps = Steps(None, SimpleNamespace(name="dgx-2"), None, {})
    steps.pool = pool = Pool()
    steps.pending = {(4, 1): cf.Future(), (2, 1): cf.Future(), (16, 2): cf.Future()}
    steps.deferred = [(8, 2), (4, 2)]
    steps.ahead([(8, 1), (16, 4)])
    assert pool.submitted == [(8, 2)] and steps.deferred == [(4, 2)]
    assert set(steps.pending) == {(4, 1), (8, 2)}


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
    needed = len(needed_steps(16, 4, [1, 2, 4], [1, 2, 4, 8, 16]))
    assert described_here["graphs_built"] <= needed and described["graphs_built"] <= needed
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


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.parametrize("model", ["word-rnn-tiny", "char-crn-tiny", "wrn-tiny", "trn-tiny", "e3d-tiny", "keras"])
def test_the_plain_step_bounds_the_micro_batched_steps(model: str) -> None:
    """The bound from the plain step of 2 samples (:mod:`pardnn.batch.microbound`) is at most the bound the
    steps of 2 micro-batches of 2 samples (built) and of 4 (written down from it) give themselves on k
    devices (their compute / k or critical path), and close to it (at least 70 %: not a bound of 0)."""
    from pathlib import Path

    from jobs.config import load_job
    from jobs.training import build
    from pardnn.costs.presets import preset
    from pardnn.emulation.simulate import lower_bound_us

    job = load_job(Path(__file__).resolve().parents[2] / "examples" / "keras_transformer" / "job.toml"
                   if model == "keras" else model)
    steps = Steps(job, preset("dgx-2"), build, {})
    assert steps.built(2, 1).repeated.any()
    for micro in (2, 4):
        graph = steps.graph_for(2 * micro, micro)
        for k in (1, 2, 8):
            bound, exact = steps.bound_for(2 * micro, micro, k), lower_bound_us(graph, k)[0]
            assert 0.7 * exact <= bound <= exact * (1 + 1e-9), (micro, k)
