"""The steps a plan search builds: which ones (worked by hand), how many workers, and the same search
whether the steps are built here or in worker processes."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
from types import SimpleNamespace

import pytest

from jobs.plansteps import WORKER_BYTES, Steps, needed_steps, worker_count
from tests.helpers.builds import ZOO_STEPS, built


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


def test_the_workers_start_while_the_first_step_is_still_building(monkeypatch) -> None:
    """The rest go to workers when they would take PARALLEL_AFTER_S at the first build's pace: a timer
    opens the workers once the first build has run PARALLEL_AFTER_S / steps left, while it still runs.
    Here the first build waits until the workers are opened: they are, with the steps left."""
    import threading

    import jobs.plansteps

    opened: list[tuple[int, list[tuple[int, int]]]] = []
    done = threading.Event()

    def open_workers(self, workers, todo) -> None:
        opened.append((workers, list(todo)))
        done.set()

    def slow_build(job, preset, batch, micro, build):
        assert done.wait(60), "the workers were not opened while the first step was building"
        return SimpleNamespace(graph=SimpleNamespace(n=1)), 2.0

    monkeypatch.setattr(Steps, "_open", open_workers)
    monkeypatch.setattr(jobs.plansteps, "build_step", slow_build)
    monkeypatch.setattr(jobs.plansteps, "worker_count", lambda steps_left: 3)
    monkeypatch.setattr(jobs.plansteps, "PARALLEL_AFTER_S", 0.2)  # 0.05 s for the 4 steps left
    steps = Steps(SimpleNamespace(name="a job"), SimpleNamespace(name="dgx-2"), len, {})
    steps.start([(2, 1), (4, 1), (8, 1), (2, 2), (4, 2)])
    assert opened == [(3, [(4, 1), (8, 1), (2, 2), (4, 2)])] and steps.builds == 1

    opened.clear()
    monkeypatch.setattr(jobs.plansteps, "PARALLEL_AFTER_S", 1e9)  # the rest would not take long enough
    monkeypatch.setattr(jobs.plansteps, "build_step", lambda *args: (SimpleNamespace(graph=SimpleNamespace(n=1)), 0.1))
    fast = Steps(SimpleNamespace(name="a job"), SimpleNamespace(name="dgx-2"), len, {})
    fast.start([(2, 1), (4, 1)])
    assert opened == [] and fast.builds == 1 and fast.pool is None


def test_nothing_is_built_ahead_once_the_steps_every_search_places_are_built(monkeypatch) -> None:
    """A search for another number of nodes: the M = 1 plans' steps (certain: placed whatever the bounds)
    are built, and only a plain step of 1 sample (for a bound) and an M = 2 step are left, which the
    bounds may prune: none is built up front and no worker starts. With one certain step left, it is
    built here first, as before."""
    import jobs.plansteps

    opened: list[int] = []
    monkeypatch.setattr(Steps, "_open", lambda self, workers, todo: opened.append(workers))
    monkeypatch.setattr(jobs.plansteps, "worker_count", lambda steps_left: 1)
    monkeypatch.setattr(jobs.plansteps, "PARALLEL_AFTER_S", 0.0)
    monkeypatch.setattr(jobs.plansteps, "build_step", lambda *args: (SimpleNamespace(graph=SimpleNamespace(n=1)), 0.1))
    built = {("dgx-2", 2, 1): SimpleNamespace(graph=SimpleNamespace(n=1)),
             ("dgx-2", 4, 1): SimpleNamespace(graph=SimpleNamespace(n=1))}
    later = Steps(SimpleNamespace(name="a job"), SimpleNamespace(name="dgx-2"), len, dict(built))
    later.start([(2, 1), (4, 1), (1, 1), (4, 2)], certain=[(2, 1), (4, 1)])
    assert later.builds == 0 and opened == [] and later.pool is None
    one = {("dgx-2", 2, 1): built["dgx-2", 2, 1]}
    first = Steps(SimpleNamespace(name="a job"), SimpleNamespace(name="dgx-2"), len, one)
    first.start([(2, 1), (4, 1), (1, 1), (4, 2)], certain=[(2, 1), (4, 1)])
    assert first.builds == 1 and ("dgx-2", 4, 1) in first.parts


def _plain_parts(functional_us: float):
    """A plain step of two ops: a kernel (1 GFLOP, 1 MB moved) and an op without one (a functional op's
    body time when ``functional_us`` > 0); every op repeated by each micro-batch."""
    import numpy as np

    from pardnn import CostGraph
    from pardnn.batch.batchscale import CostParts

    graph = CostGraph(["matmul", "body"], [3.0, functional_us], [8, 8], src=[0], dst=[1])
    return CostParts(graph, np.array([0, 1, 1]), np.array([1e9]), np.array([1e6, 0.0]), np.array([True, False]),
                     repeated=np.array([True, True]))


@pytest.mark.parametrize("functional_us, ready", [(0.0, True), (5.0, False)])
def test_a_step_built_for_another_preset_is_ready_only_when_it_recosts(functional_us: float, ready: bool) -> None:
    """A plain step built and costed for a DGX-2 serves a DGX A100 search without a build when all its
    time is kernels' (costed again on the A100); one with a functional op's body needs a build there,
    so the bound that waits for ready steps has none and builds nothing."""
    from pardnn.costs.presets import preset

    built = {("v100-32gb", 4, 1): _plain_parts(functional_us)}
    steps = Steps(SimpleNamespace(name="a job"), preset("a100-80gb"), len, built)
    steps._build_here = lambda batch, micro: pytest.fail(f"built {batch, micro}")  # type: ignore[method-assign]
    bound = steps.bound_for(8, 2, 1, ready_only=True)
    assert (bound is not None) is ready and (("a100-80gb", 4, 1) in steps.parts) is ready
    if ready:  # the kernel's time on the A100, twice (each micro-batch repeats it), on one device
        assert bound.us == pytest.approx(2 * preset("a100-80gb").kernel_us(1e9, 1e6))
        assert bound.basis.startswith("from the plain step at batch 4: ")


def test_a_plan_is_bounded_from_the_launches_of_the_plain_steps_at_other_batches() -> None:
    """Plain steps of one kernel (repeated) and one functional op are built at batches 4 and 8; the plan of
    4 micro-batches of 1 sample on one device launches at least 1 + 3 x 1 kernels of 5 us each (the
    V100's launch): 20 us, without building its plain step of 1 sample. With one plain step built, or
    two with different op counts (a model whose ops change with its batch), there is no such bound."""
    import dataclasses

    from pardnn.costs.presets import preset

    steps = Steps(SimpleNamespace(name="a job"), preset("v100-32gb"), len, {("v100-32gb", 4, 1): _plain_parts(5.0)})
    steps._build_here = lambda batch, micro: pytest.fail(f"built {batch, micro}")  # type: ignore[method-assign]
    assert steps.bound_for(4, 4, 1, ready_only=True) is None  # one batch: the same ops are not shown
    steps.parts["a100-80gb", 8, 1] = _plain_parts(5.0)  # built for another preset: its counts serve
    bound = steps.bound_for(4, 4, 1, ready_only=True)
    assert bound.us == pytest.approx(20.0)
    assert bound.basis == ("5 us for each launch of its 4 kernels, over k, or of the 1 on one path; counted in the "
                           "plain steps at batches 4, 8, which have the same ops")
    assert steps.bound_for(4, 4, 2, ready_only=True).us == pytest.approx(10.0)  # 4 launches over 2 devices

    other = Steps(SimpleNamespace(name="a job"), preset("v100-32gb"), len, dict(steps.parts))
    two = _plain_parts(5.0)
    other.parts["v100-32gb", 16, 1] = dataclasses.replace(two, repeated=two.repeated & ~two.kernel)
    assert other.bound_for(4, 4, 1, ready_only=True) is None  # batch 16 repeats no kernel: not the same ops


class _Pool:
    """A stand-in for the worker pool: records what it was handed; the test finishes the builds."""

    def __init__(self) -> None:
        self.submitted: list[tuple[int, int]] = []
        self.futures: dict[tuple[int, int], cf.Future] = {}

    def submit(self, fn, job, preset, batch, micro, build) -> cf.Future:
        self.submitted.append((batch, micro))
        self.futures[batch, micro] = future = cf.Future()
        future.set_running_or_notify_cancel()  # a worker took it: it can no longer be cancelled
        return future


def _steps(workers: int) -> tuple[Steps, _Pool]:
    steps = Steps(None, SimpleNamespace(name="dgx-2"), None, {})
    steps.pool = pool = _Pool()
    steps.workers = workers
    return steps, pool


def test_a_step_goes_to_a_worker_only_when_one_is_free() -> None:
    """One worker, three plain steps queued: the first is handed out, the others wait in the queue
    (this process may still take them) until a build ends, and then the next goes at once."""
    steps, pool = _steps(1)
    steps.queue = [(4, 1), (8, 1), (16, 1)]
    steps._pump()
    assert pool.submitted == [(4, 1)] and steps.queue == [(8, 1), (16, 1)]
    pool.futures[4, 1].set_result(("parts", 1.0))  # the worker's build ends: the pool's thread hands out the next
    assert pool.submitted == [(4, 1), (8, 1)] and steps.queue == [(16, 1)]
    steps.workers = 3
    steps._pump()
    assert pool.submitted == [(4, 1), (8, 1), (16, 1)] and steps.queue == []


def test_ahead_queues_an_m2_step_once_its_plan_is_bounded_and_drops_what_no_plan_needs() -> None:
    """Plans left: M = 1 at batch 8; M = 4 at batch 16 (4 samples each: the M = 2 step of 8 samples,
    bounded by the plain step of 4, not built yet); M = 2 at batch 32 and at batch 64 (bounded by the
    plain steps of 16 and 32, both built: bounds 9 and 5 ms). Nothing no plan needs stays queued or
    deferred; the M = 2 steps of bounded plans are queued, the lowest bound first; the M = 2 step of 8
    samples waits for its bound."""
    steps, pool = _steps(0)  # no worker free: the queue is what this test reads
    steps.parts.update({("dgx-2", 16, 1): None, ("dgx-2", 32, 1): None})  # the plain steps built
    steps.bounding = {(4, 1), (16, 1), (32, 1), (2, 1)}
    steps.queue = [(4, 1), (2, 1)]
    steps.deferred = [(8, 2), (4, 2), (32, 2), (64, 2)]
    steps.ahead([(8, 1, None), (16, 4, None), (32, 2, 9e3), (64, 2, 5e3)])
    assert steps.queue == [(4, 1), (64, 2), (32, 2)]  # (2, 1): no plan left needs it
    assert steps.deferred == [(8, 2)] and pool.submitted == []
    steps.parts[("dgx-2", 4, 1)] = None  # its bound's plain step is built: it joins the queue
    steps.queue.remove((4, 1))
    steps.ahead([(16, 4, 7e3), (64, 2, 5e3)])  # the plan at batch 32 was pruned meanwhile
    assert steps.queue == [(64, 2), (8, 2)] and steps.deferred == []


def _dies_in_a_worker(job, batch_size, micro_batches):  # a builder killed in any worker, as the OOM killer would
    if multiprocessing.parent_process() is not None:
        os._exit(9)
    from jobs.training import build

    return build(job, batch_size=batch_size, micro_batches=micro_batches)


@pytest.mark.tf
@pytest.mark.slow
def test_a_search_is_the_same_with_its_steps_built_in_workers(monkeypatch) -> None:
    """word-rnn-tiny, 2 nodes of 4 devices, every k and M: the steps built in a worker (the first one here,
    the workers started once its build said the rest take long enough) give the search built all here,
    trial for trial; only a pruned plan's bound may differ, by what was built when it was tried (from
    the launches of the plain steps at other batches, or from the plain step of its micro-batch, which
    is at least as long), and either is longer than the step chosen."""
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
    first = next(note for note in notes if note.startswith("built and costed word-rnn-tiny"))
    assert "in a worker" not in first  # the first step is built here, the workers started meanwhile
    assert sum("in a worker" in note for note in notes) >= 1  # the others: some in the worker, some stolen here
    def table(search):
        return [t.to_dict() | {"seconds": 0} | ({"bound_us": 0, "reason": ""} if t.status == "pruned" else {})
                for t in search.trials]

    assert table(there) == table(here)
    assert there.chosen.plan == here.chosen.plan
    assert all(t.bound_us > here.chosen.step_us for search in (here, there) for t in search.trials
               if t.status == "pruned")


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
@pytest.mark.xdist_group(ZOO_STEPS)
@pytest.mark.parametrize("model", ["word-rnn-tiny", "char-crn-tiny", "wrn-tiny", "trn-tiny", "e3d-tiny", "keras"])
def test_the_plain_step_bounds_the_micro_batched_steps(model: str) -> None:
    """The bound from the plain step of 2 samples (:mod:`pardnn.plan.microbound`) is at most the bound the
    steps of 2 micro-batches of 2 samples (built) and of 4 (written down from it) give themselves on k
    devices (their compute / k or critical path), and close to it (at least 70 %: not a bound of 0).
    Before the plain step of 2 samples is built, the plain steps of 1 and 3 samples have the same ops
    (the bound from their launches assumes it of the model), and the bound from their launches is at
    most the steps' own too, and at least half of it (these small models' ops are mostly launches:
    72 to 99 %)."""
    from pathlib import Path

    from jobs.config import load_job
    from pardnn.costs.presets import preset
    from pardnn.emulation.simulate import lower_bound_us

    job = load_job(Path(__file__).resolve().parents[2] / "examples" / "keras_transformer" / "job.toml"
                   if model == "keras" else model)
    steps = Steps(job, preset("dgx-2"), built, {})  # each step read only: built once in this worker
    assert steps.built(1, 1).graph.n == steps.built(3, 1).graph.n
    for micro in (2, 4):
        graph = steps.graph_for(2 * micro, micro)
        for k in (1, 2, 8):
            launches, exact = steps.bound_for(2 * micro, micro, k, ready_only=True).us, lower_bound_us(graph, k)[0]
            assert 0.5 * exact <= launches <= exact * (1 + 1e-9), (micro, k)
    assert steps.built(2, 1).repeated.any()
    for micro in (2, 4):
        graph = steps.graph_for(2 * micro, micro)
        for k in (1, 2, 8):
            bound, exact = steps.bound_for(2 * micro, micro, k).us, lower_bound_us(graph, k)[0]
            assert 0.7 * exact <= bound <= exact * (1 + 1e-9), (micro, k)
