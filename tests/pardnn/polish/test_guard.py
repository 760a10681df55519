"""The guard after Step 2 (pardnn/polish/guard.py): never slower than a cheap placement that also fits.

The probes are worked by hand: K = 2, 150 GB/s, 25 us per transfer.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import pardnn.polish.candidates as candidates_module
from pardnn import CostGraph, Machine, partition
from pardnn import partitioner as pipeline
from pardnn.costs.synthetic import dnn_graph
from pardnn.emulation import emulated
from pardnn.emulation.checks import colocation_violations
from pardnn.emulation.emulated import Emulated
from pardnn.emulation.emulator import emulate
from pardnn.emulation.simulate import evaluate
from pardnn.errors import MissingDependencyError, PardnnError
from pardnn.partitioner import PAPER, THREADS_VARIABLE, available_cores
from pardnn.polish.guard import Prepared, candidates, first_fold, fold_communicating_devices, guard, prepare_candidates
from pardnn.registry import PLACERS
from tests.conftest import most_reach, random_dags, reached
from tests.helpers.graphs import CHEAP

GIB = 1 << 30
MACHINE = dict(bandwidth="150GB/s", latency="25us")


def heavy_single_op_primary() -> CostGraph:
    """Residual variables v1, v2 of 6 GiB; v1 -> a -> b, v2 -> b; a and b 1000 us, v1 and v2 1 us.

    On one device the step is 1 + 1 + 1000 + 1000 = 2002 us. Step 1 makes v2 alone the second
    primary path, so its 6 GiB edge to b is cut: 25 us + 6 GiB / 150 GB/s = 25 + 42,949.7 us.
    """
    names = ["v1", "v2", "a", "b"]
    return CostGraph(names, [1.0, 1.0, 1000.0, 1000.0], [6 * GIB, 6 * GIB, 4, 4], [0, 2, 1], [2, 3, 3],
                     kind=["residual", "residual", "normal", "normal"], name="heavy-primary")


def fork_of_big_outputs() -> CostGraph:
    """x -> x1..x4 -> y, every output 2 GiB, every op 10 us: 6 x 10 = 60 us on one device; any cut
    edge costs 25 + 2 GiB / 150 GB/s = 14,341.6 us."""
    names = ["x", "x1", "x2", "x3", "x4", "y"]
    src = [0, 0, 0, 0, 1, 2, 3, 4]
    dst = [1, 2, 3, 4, 5, 5, 5, 5]
    return CostGraph(names, [10.0] * 6, [2 * GIB] * 6, src, dst, name="fork")


def test_heavy_single_op_primary_runs_on_one_device():
    machine = Machine(2, **MACHINE)
    paper = partition(heavy_single_op_primary(), machine, **PAPER).report.evaluation
    assert paper.makespan_us > 40_000  # the paper's answer: the 6 GiB edge is cut
    result = partition(heavy_single_op_primary(), machine)
    assert result.report.evaluation.makespan_us == pytest.approx(2002.0)
    guard = result.report.details["guard"]
    assert guard.winner != "pardnn"
    assert guard.pardnn_makespan_us == pytest.approx(paper.makespan_us)
    assert guard.speedup_over_pardnn == pytest.approx(paper.makespan_us / 2002.0)


def test_fork_of_big_outputs_stays_whole():
    machine = Machine(2, **MACHINE)
    assert partition(fork_of_big_outputs(), machine, **PAPER).report.evaluation.makespan_us > 14_000
    assert partition(fork_of_big_outputs(), machine).report.evaluation.makespan_us == pytest.approx(60.0)


def test_the_guard_keeps_pardnn_on_ties_and_when_it_is_faster():
    # Two independent chains of 100 us: ParDNN puts one on each device (100 us); one device takes 200.
    g = CostGraph(["a", "b", "c", "d"], [50.0] * 4, [4] * 4, [0, 2], [1, 3], name="two-chains")
    result = partition(g, Machine(2, **MACHINE))
    assert result.report.evaluation.makespan_us == pytest.approx(100.0)
    assert result.report.details["guard"].winner == "pardnn"
    assert result.report.details["guard"].candidates["single"] is None  # pruned: 200 us >= 100 us


def test_fold_moves_the_most_communicating_device_into_its_partner():
    # Device 1 holds b (1 us) between a and c on device 0 with 1000 us edges each way: pressure 1999.
    g = CostGraph(["a", "b", "c"], [10.0, 1.0, 10.0], [0, 0, 0], [0, 1], [1, 2], [5, 5])
    weight = np.array([1000.0, 1000.0])
    folded, device = fold_communicating_devices(g, Machine(3), np.array([0, 1, 0]), weight)
    assert device == 1 and folded.tolist() == [0, 0, 0]
    # No cut edge: nothing to fold.
    same, device = fold_communicating_devices(g, Machine(3), np.array([0, 0, 0]), weight)
    assert device == -1 and same.tolist() == [0, 0, 0]


@most_reach
@given(random_dags(max_ops=40, min_ops=4, groups=False), st.integers(2, 6),
       st.sampled_from(["0.01GB/s", "0.1GB/s"]), st.integers(0, 2**31))
def test_the_first_fold_made_ahead_changes_nothing(g, k, bandwidth, seed):
    """The guard's first fold, made while the worker finishes (pardnn.polish.guard.first_fold), gives the
    guard's answer and report made without it, whatever placement it starts from: here a random one,
    which talks across devices enough to be folded, judged with the cheap candidates and without
    them (unavailable: then the fold competes with that placement alone; reached when it wins)."""
    machine = Machine(k, bandwidth=bandwidth)
    weight = machine.edge_comm_us(g.edge_bytes)
    placement = np.random.default_rng(seed).integers(0, k, g.n)
    schedule = emulate(g, machine, placement)
    first = first_fold(g, machine, Emulated(placement, schedule, None), weight)
    none = {candidate.label: Prepared(None, "unavailable: not in this test") for candidate in candidates(machine)}
    for prepared in (None, none):
        lazy = guard(g, machine, placement, schedule, None, weight, prepared)
        ahead = guard(g, machine, placement, schedule, None, weight, prepared, folded=first)
        assert ahead.details() == lazy.details()
        assert ahead.placement.tobytes() == lazy.placement.tobytes()
    reached(lazy.winner == "folded", "the fold made ahead wins")


def test_the_guard_is_deterministic_and_keeps_groups_whole():
    from pardnn.costs.synthetic import dnn_graph

    g = dnn_graph(1500, seed=4)
    machine = Machine(4, bandwidth="2GB/s")
    first, second = partition(g, machine), partition(g, machine)
    assert first.placement.tobytes() == second.placement.tobytes()
    assert first.report.details["guard"] == second.report.details["guard"]
    assert colocation_violations(g, first.placement) == []


def _cheap_makespans(graph: CostGraph, machine: Machine) -> dict[str, float]:
    """The emulated makespan of every cheap registry placer's placement that fits: each made for
    ``machine``, and each made as the benchmarks make the baselines, for the machine without its limits.
    Not the guard's own candidate list: the registry's placers (CHEAP), evaluated by the emulator."""
    out = {}
    free = Machine(machine.devices, bandwidth=machine.bandwidth, latency=machine.latency)
    for name in CHEAP:
        for target in {machine, free}:
            try:
                placement = PLACERS[name](graph, target).placement
            except MissingDependencyError:
                continue
            evaluation = evaluate(graph, machine, placement)
            if evaluation.memory_fits:
                key = name if target == machine else f"{name}, made without a limit"
                out[key] = evaluation.makespan_us
    return out


@most_reach
@given(random_dags(max_ops=25, min_ops=4), st.integers(2, 4), st.sampled_from(["150GB/s", "2GB/s", "0.1GB/s"]))
def test_pardnn_is_never_slower_than_a_cheap_placement(g, k, bandwidth):
    """With the refinement and the run order (which could hide a broken guard) and without them."""
    machine = Machine(k, bandwidth=bandwidth)
    cheap = _cheap_makespans(g, machine)
    paper = partition(g, machine, **PAPER).report.evaluation.makespan_us
    guarded = partition(g, machine, refine_seconds=0, ordered=False)
    emulated = any(v is not None for name, v in guarded.report.details["guard"].candidates.items() if name != "pardnn")
    as_fast = min(cheap.values()) <= paper
    event(f"a cheap placement is as fast as ParDNN's Steps 1 and 2: {as_fast}")
    reached(as_fast or emulated, "the guard had to emulate a candidate, or one is as fast as ParDNN's own")
    ours = partition(g, machine).report.evaluation.makespan_us
    for name, theirs in cheap.items():
        assert guarded.report.evaluation.makespan_us <= theirs * (1 + 1e-12), name
        assert ours <= theirs * (1 + 1e-12), name


@pytest.mark.parametrize("k", [2, 4, 16])
@pytest.mark.parametrize("bandwidth", ["150GB/s", "1GB/s"])
def test_pardnn_is_never_slower_than_linear_clustering_on_a_large_graph(k, bandwidth):
    """Linear clustering is one of the guard's candidates at every size (its levels are recomputed
    incrementally), not only on small graphs: 12,000 ops, where the full recomputation took seconds."""
    g = dnn_graph(12_000, seed=5)
    machine = Machine(k, bandwidth=bandwidth)
    result = partition(g, machine)
    lc = PLACERS["linear_clustering"](g, machine)
    assert lc.report.details["timeout"] is False
    assert result.report.evaluation.makespan_us <= lc.report.evaluation.makespan_us * (1 + 1e-12)
    assert result.report.details["guard"].candidates["linear_clustering"] is None or \
        result.report.details["guard"].candidates["linear_clustering"] == lc.report.evaluation.makespan_us


@pytest.mark.parametrize("heuristic", ["overflow", "balance"])
@given(random_dags(max_ops=25, min_ops=4), st.integers(2, 4), st.floats(1.0, 1.4))
def test_under_memory_limits_pardnn_is_never_slower_and_never_gives_up_while_one_fits(heuristic, g, k, factor):
    """The limit: ``factor`` × the smallest of the cheap placements' largest peaks, so at least one of
    them fits (every example reaches the promise: exit 3 would break it) and the limit is tight for
    most; ParDNN's own Step 1 overflows it in part of the examples (the event says how many)."""
    lowest = min(max(PLACERS[name](g, Machine(k)).report.evaluation.peak_memory_bytes) for name in CHEAP)
    machine = Machine(k, memory=max(1, int(factor * lowest)), reserve=0.0)
    cheap = _cheap_makespans(g, machine)  # linear clustering's among them
    assert cheap, "the placement of the smallest peak fits"
    step1 = partition(g, machine, memory_heuristic=None, **PAPER).report.evaluation
    event(f"ParDNN's Step 1 overflows: {not step1.memory_fits}")
    result = partition(g, machine, memory_heuristic=heuristic)  # never InfeasibleError: a cheap placement fits
    assert result.report.evaluation.memory_fits
    for name, theirs in cheap.items():
        assert result.report.evaluation.makespan_us <= theirs * (1 + 1e-12), name


def test_under_a_limit_the_guard_also_tries_the_memory_blind_critical_path():
    """The benchmark's CP baseline ignores memory; under a limit the guard's own CP skips devices its
    greedy deems full. On this graph (K = 4, 1.2 x demand / K) the memory-blind CP fits the tracker's
    peaks and was 1.2 % faster than ParDNN with heuristic II until the guard tried it too."""
    g = dnn_graph(50_000, seed=0)
    free = Machine(4)
    demand = sum(partition(g, free, memory_heuristic=None).report.evaluation.peak_memory_bytes)
    machine = Machine(4, memory=int(1.2 * demand / 4), reserve=0.0)
    blind = evaluate(g, machine, PLACERS["critical_path"](g, free).placement)
    assert blind.memory_fits
    result = partition(g, machine, memory_heuristic="balance")
    assert "critical_path, memory-blind" in result.report.details["guard"].candidates
    assert result.report.evaluation.makespan_us <= blind.makespan_us


def test_a_candidate_whose_residual_state_overflows_is_ruled_out_before_emulation():
    """Two 6 GiB variables on 10 GiB devices: one device cannot hold both, so ``single`` (no transfers,
    so its makespan bound cannot prune it) is ruled out by its residual bytes, with no emulation."""
    names = ["v1", "v2", "a", "b", "c"]
    g = CostGraph(names, [1.0, 1.0, 100.0, 100.0, 1.0], [6 * GIB, 6 * GIB, GIB, GIB, 1], [0, 1, 2, 3],
                  [2, 3, 4, 4], kind=[1, 1, 0, 0, 0])
    machine = Machine(2, memory=10 * GIB, reserve=0.0, bandwidth="1GB/s")
    guard = partition(g, machine).report.details["guard"]
    assert guard.candidates["single"] is None
    assert guard.notes["single"] == ("does not fit the memory limits: its residual state alone overflows "
                                        "device 0 by 2.00 GiB")
    assert guard.winner is not None


def _one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(THREADS_VARIABLE, "1")


@pytest.mark.parametrize("heuristic", ["overflow", "balance", None])
@pytest.mark.parametrize(("ops", "k", "bandwidth"), [(3000, 4, "2GB/s"), (2000, 8, "150GB/s"), (800, 2, "0.1GB/s")])
def test_candidates_made_ahead_in_a_thread_give_the_same_answer(monkeypatch, heuristic, ops, k, bandwidth):
    """On two or more cores the guard's candidates are made and emulated in a worker thread while
    Steps 1 and 2 run, and the memory of the ordering stage's starting answer is tracked beside that
    stage; the placement and the whole report (pruned candidates included, and the evaluation) are
    the same as in one thread, with and without memory limits."""
    g = dnn_graph(ops, seed=ops)
    machine = Machine(k, bandwidth=bandwidth)
    if heuristic is not None:
        demand = sum(partition(g, machine, memory_heuristic=None).report.evaluation.peak_memory_bytes)
        machine = Machine(k, bandwidth=bandwidth, memory=int(1.1 * demand / k), reserve=0.0)
    monkeypatch.setattr(pipeline, "available_cores", lambda: 2)
    ahead = partition(g, machine, memory_heuristic=heuristic)
    _one_thread(monkeypatch)
    monkeypatch.setattr(pipeline, "available_cores", lambda: 1)
    alone = partition(g, machine, memory_heuristic=heuristic)
    assert ahead.placement.tobytes() == alone.placement.tobytes()
    assert ahead.report.details == alone.report.details
    assert ahead.report.evaluation == alone.report.evaluation


@pytest.mark.parametrize(("ops", "k", "order_kept"),
                         [(2000, 4, True), pytest.param(50_000, 8, False, marks=pytest.mark.slow)])
def test_the_evaluation_takes_the_memory_tracked_beside_the_ordering_stage(monkeypatch, ops, k, order_kept):
    """With two cores the memory of the answer the ordering stage starts from is tracked in a second
    thread while that stage runs; the evaluation takes it when the stage keeps nothing, and tracks
    its own answer's when the stage keeps one; the report is what evaluate() says of the placement.
    (No memory sizes: no stage tracks memory, so every tracking is the evaluation's or that thread's.)"""
    tracked: list[str] = []

    def spy(real):
        def track(*args, **kwargs):
            tracked.append(threading.current_thread().name)
            return real(*args, **kwargs)
        return track

    monkeypatch.setattr(pipeline, "track_memory", spy(pipeline.track_memory))
    monkeypatch.setattr(emulated, "track_memory", spy(emulated.track_memory))
    monkeypatch.setattr(pipeline, "available_cores", lambda: 2)
    g, machine = dnn_graph(ops, seed=0), Machine(k)
    result = partition(g, machine)
    assert result.report.details["order"].kept is order_kept
    assert tracked == (["pardnn-memory", "MainThread"] if order_kept else ["pardnn-memory"])
    monkeypatch.undo()
    assert result.report.evaluation == evaluate(g, machine, result.placement, order=result.order)


def _paper_step(bandwidth: str):
    """A 2,500-op graph on 4 devices at ``bandwidth``, the paper's placement of it, the edge costs and
    its emulation: what the guard judges candidates against."""
    g = dnn_graph(2500, seed=3)
    machine = Machine(4, bandwidth=bandwidth)
    paper = partition(g, machine, **PAPER)
    weight = machine.edge_comm_us(g.edge_bytes)
    return g, machine, paper, weight, emulate(g, machine, paper.placement)


def test_the_guard_judges_prepared_candidates_as_it_judges_its_own():
    g, machine, paper, weight, schedule = _paper_step("4GB/s")
    prepared = prepare_candidates(g, machine, weight)
    cheap = {name for name, placer in PLACERS.items() if placer.cheap}  # the registry's, not the guard's list
    made = [p for p in prepared.values() if p.placement is not None]
    assert set(prepared) == cheap and all(p.bound is not None for p in made)
    # Only the fastest keeps its whole emulation (memory); the others their makespan.
    emulated = [p for p in made if p.makespan_us is not None]
    kept = [p for p in made if p.schedule is not None]
    assert len(kept) == 1 and kept[0].makespan_us == min(p.makespan_us for p in emulated)
    lazy = guard(g, machine, paper.placement, schedule, None, weight)
    judged = guard(g, machine, paper.placement, schedule, None, weight, prepared)
    assert judged.details() == lazy.details()
    assert judged.placement.tobytes() == lazy.placement.tobytes()
    # Not emulated ahead: only what the guard prunes (without ParDNN's makespan: by an emulated
    # candidate the guard judges before it).
    skipped = {label for label, p in prepared.items() if p.placement is not None and p.makespan_us is None}
    assert skipped
    assert all(lazy.notes[label].startswith("pruned") for label in skipped)


def test_candidates_made_ahead_skip_what_parDNNs_makespan_prunes():
    """Once Step 2 publishes ParDNN's makespan, the worker emulates no candidate whose bound reaches
    it, and the guard, judging what the worker made, gives the report it gives alone."""
    g, machine, paper, weight, schedule = _paper_step("150GB/s")
    blind = prepare_candidates(g, machine, weight)
    told = prepare_candidates(g, machine, weight, start=lambda: schedule.makespan_us)
    bounds = {label: p.bound for label, p in told.items() if p.placement is not None}
    reach = [label for label, bound in bounds.items() if bound >= schedule.makespan_us]
    # 'single' is judged first, so nothing but ParDNN's makespan prunes it; its bound is the whole compute.
    assert "single" in reach, bounds
    assert blind["single"].makespan_us is not None
    assert all(told[label].makespan_us is None for label in reach)
    lazy = guard(g, machine, paper.placement, schedule, None, weight)
    for prepared in (blind, told):
        judged = guard(g, machine, paper.placement, schedule, None, weight, prepared)
        assert judged.details() == lazy.details()
        assert judged.placement.tobytes() == lazy.placement.tobytes()


@pytest.mark.parametrize("bandwidth", ["4GB/s", "150GB/s"])
def test_two_threads_emulating_the_candidates_give_the_guards_answer(monkeypatch, bandwidth):
    """The candidates' emulations taken by two threads at once (the worker, and the pipeline's main
    thread once it waits for them) leave the guard the answer and report it gives alone. Each
    emulation is slowed here so that both threads take some (checked)."""
    g, machine, paper, weight, schedule = _paper_step(bandwidth)
    real, who = candidates_module.emulate, []

    def slow(*args, **kwargs):
        who.append(threading.current_thread().name)
        time.sleep(0.05)
        return real(*args, **kwargs)

    monkeypatch.setattr(candidates_module, "emulate", slow)
    shared = candidates_module.CandidateEmulations(g, machine, candidates_module.make_candidates(g, machine, weight))
    helper = threading.Thread(target=shared.run, name="helper")
    helper.start()
    shared.run()
    helper.join()
    assert "helper" in who and threading.current_thread().name in who, who
    lazy = guard(g, machine, paper.placement, schedule, None, weight)
    judged = guard(g, machine, paper.placement, schedule, None, weight, shared.prepared)
    assert judged.details() == lazy.details()
    assert judged.placement.tobytes() == lazy.placement.tobytes()
    kept = [label for label, made in shared.prepared.items() if made.schedule is not None]
    assert len(kept) <= 1  # the fastest alone keeps its schedule whole

@pytest.mark.parametrize("where", ["making", "emulating"])
def test_an_error_in_the_worker_thread_reaches_the_caller(monkeypatch, where):
    """Whether the candidates' placements break (the worker alone) or an emulation does (the worker's,
    or the caller's while it helps): the caller raises the error, and returns."""
    def broken(*_args, **_kwargs):
        raise RuntimeError("candidate broke")

    monkeypatch.setattr(pipeline, "available_cores", lambda: 2)
    if where == "making":
        monkeypatch.setattr(pipeline, "make_candidates", broken)
    else:
        monkeypatch.setattr(candidates_module, "emulate", broken)
    with pytest.raises(RuntimeError, match="candidate broke"):
        partition(dnn_graph(300, seed=1), Machine(2))


@pytest.mark.parametrize(("value", "cores"), [("1", 1), ("64", None), (" 2 ", None)])
def test_pardnn_threads_caps_the_cores(monkeypatch, value, cores):
    monkeypatch.delenv(THREADS_VARIABLE, raising=False)
    every = available_cores()
    monkeypatch.setenv(THREADS_VARIABLE, value)
    assert available_cores() == (cores if cores is not None else min(every, int(value)))


@pytest.mark.parametrize("value", ["0", "two", "-3", "1.5"])
def test_a_bad_pardnn_threads_is_named(monkeypatch, value):
    monkeypatch.setenv(THREADS_VARIABLE, value)
    with pytest.raises(PardnnError, match=rf"\$PARDNN_THREADS = {value!r}: expected a whole number"):
        available_cores()
