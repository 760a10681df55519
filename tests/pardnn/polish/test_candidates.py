"""The guard's promise, tested on the guard itself: 200-2,000-op graphs of four shapes.

:func:`pardnn.polish.guard.guard` is called directly on ParDNN's own placement (Steps 1 and 2, no guard), and
``partition(..., refine_seconds=0, ordered=False)`` runs the pipeline with nothing after the guard that
could make up for it. The oracle is not the guard's candidate list: every cheap placer is run through
the placer registry (:data:`pardnn.registry.PLACERS`), which evaluates its placement with the emulator,
and the report must account for each of them: emulated (with that very makespan), ruled out by a lower
bound that really reaches the kept makespan, or ruled out because its residual state overflows.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pardnn import CostGraph, Machine, partition
from pardnn.costs.graph import Kind
from pardnn.costs.levels import critical_path_us
from pardnn.costs.synthetic import chain_graph, dnn_graph
from pardnn.emulation.emulator import emulate
from pardnn.emulation.simulate import Evaluation, evaluate
from pardnn.partitioner import PAPER
from pardnn.polish.candidates import makespan_bound as compiled_bound
from pardnn.polish.guard import GuardDetails, guard
from pardnn.registry import PLACERS
from tests.conftest import random_dags
from tests.helpers.graphs import CHEAP

# The cheap placers, written out here (not read from the guard, nor from the registry's ``cheap`` flags:
# the oracle must not be the code's own list); each is run through the registry.
MEMORY_AWARE = ("critical_path", "etf", "pipeline")  # under a limit the guard also tries them blind to it
PRUNED = re.compile(r"^pruned: its makespan is at least (?P<bound>[0-9.]+) us$")
RESIDUAL = "does not fit the memory limits: its residual state alone overflows device "
TOLERANCE = 1e-9


def wide_graph(ops: int, seed: int) -> CostGraph:
    """A source feeding ``ops // 25`` independent chains of about 25 ops, joined by one sink: compute
    1-100 us, outputs 1 KB-1 MB, so cutting a chain costs about what running it does."""
    rng = np.random.default_rng(seed)
    chains = max(2, ops // 25)
    length = (ops - 2) // chains
    n = 2 + chains * length
    src, dst = [], []
    for c in range(chains):
        first = 1 + c * length
        src += [0, *range(first, first + length - 1), first + length - 1]
        dst += [first, *range(first + 1, first + length), n - 1]
    return CostGraph([f"op{i}" for i in range(n)], rng.uniform(1, 100, n), rng.integers(1000, 1_000_000, n),
                     src, dst, name=f"wide-{n}")


def random_graph(ops: int, seed: int) -> CostGraph:
    """Each op reads 1-3 of the 30 ops before it; a fifth of the ops are residual (variables)."""
    rng = np.random.default_rng(seed)
    src, dst = [], []
    for v in range(1, ops):
        for u in set(rng.integers(max(0, v - 30), v, rng.integers(1, 4)).tolist()):
            src.append(u)
            dst.append(v)
    kind = np.where(rng.random(ops) < 0.2, Kind.RESIDUAL, Kind.NORMAL)
    return CostGraph([f"op{i}" for i in range(ops)], rng.exponential(50.0, ops), rng.integers(0, 4_000_000, ops),
                     src, dst, kind=kind.tolist(), name=f"random-{ops}")


SHAPES = {
    "dnn": lambda ops, seed: dnn_graph(ops, seed=seed),
    "chain": lambda ops, seed: chain_graph(ops, out_bytes=200_000 * (seed + 1)),
    "wide": wide_graph,
    "random": random_graph,
}
CASES = [("dnn", 2000, 4, "2GB/s"), ("dnn", 800, 2, "150GB/s"), ("dnn", 1200, 8, "0.1GB/s"),
         ("chain", 300, 4, "150GB/s"), ("chain", 200, 2, "1GB/s"),
         ("wide", 1000, 4, "150GB/s"), ("wide", 600, 8, "1GB/s"), ("wide", 400, 2, "0.1GB/s"),
         ("random", 1500, 4, "150GB/s"), ("random", 500, 8, "2GB/s"), ("random", 1000, 2, "0.1GB/s")]


def registry_evaluations(g: CostGraph, machine: Machine, ordered: bool = True) -> dict[str, Evaluation]:
    """Each cheap placer's placement for ``machine``, made and evaluated through the registry (in its own
    run order, if it has one, the pipeline's; in order of readiness when not ``ordered``: the guard of
    ``partition(..., ordered=False)``); under a limit also the memory-aware placers' placements made as
    if there were none (the guard's memory-blind try)."""
    free = Machine(machine.devices, bandwidth=machine.bandwidth, latency=machine.latency)
    made = {name: PLACERS[name](g, machine) for name in CHEAP}
    made.update({f"{name}, memory-blind": PLACERS[name](g, free) for name in MEMORY_AWARE if machine.bounded})
    return {name: evaluate(g, machine, result.placement, order=result.order if ordered else None)
            for name, result in made.items()}


def makespan_bound(g: CostGraph, machine: Machine, placement: np.ndarray) -> float:
    """No schedule of ``placement`` beats its busiest device's compute, nor its longest path with the
    transfer time of every cut edge."""
    busiest = np.bincount(placement, weights=g.comp_us, minlength=machine.devices).max()
    cut = placement[g.edge_src] != placement[g.edge_dst]
    return max(float(busiest), critical_path_us(g, np.where(cut, machine.edge_comm_us(g.edge_bytes), 0.0)))


def check_report(report: GuardDetails, kept_us: float, theirs: dict[str, Evaluation]) -> dict[str, str]:
    """Every cheap placer is accounted for in the guard's report: emulated with the makespan the registry
    measured, pruned by a bound that is a true lower bound and reaches the kept makespan, or ruled out
    by its residual bytes. Returns each placer's fate."""
    fate = {}
    for name, evaluation in theirs.items():
        assert name in report.candidates, f"the guard did not try {name}"
        value, note = report.candidates[name], report.notes.get(name, "")
        pruned = PRUNED.match(note)
        if value is not None:
            fate[name] = "emulated"
            assert value == pytest.approx(evaluation.makespan_us, rel=TOLERANCE), name
        elif pruned:
            fate[name] = "pruned"
            bound = float(pruned["bound"])
            assert bound >= kept_us - 0.05, f"{name} pruned at {bound} us, below the kept {kept_us} us"
            assert bound <= evaluation.makespan_us + 0.05, f"{name}'s bound {bound} us is above its makespan"
        else:
            fate[name] = "residual"
            assert note.startswith(RESIDUAL) and not evaluation.memory_fits, (name, note)
    return fate


def limited_by(g: CostGraph, k: int, bandwidth: str, witness: str) -> Machine:
    """A machine whose every device holds exactly the largest peak of the ``witness`` placer's placement:
    that placement fits, so the guard must return one that fits and is no slower."""
    peaks = PLACERS[witness](g, Machine(k, bandwidth=bandwidth)).report.evaluation.peak_memory_bytes
    return Machine(k, bandwidth=bandwidth, memory=max(1, max(peaks)), reserve=0.0)


def test_the_registry_offers_the_cheap_placers_this_file_expects():
    """Every cheap placer named here is in the registry and marked cheap, and no other is: a placer added
    or dropped from the guard's candidates must be added or dropped here too, on purpose."""
    assert {name for name, placer in PLACERS.items() if placer.cheap} == set(CHEAP)
    assert {name for name in CHEAP if PLACERS[name].memory_aware} == set(MEMORY_AWARE)


@pytest.mark.parametrize(("shape", "ops", "k", "bandwidth"), CASES)
def test_the_guard_is_never_slower_than_a_registry_placer(shape, ops, k, bandwidth):
    g = SHAPES[shape](ops, k)
    machine = Machine(k, bandwidth=bandwidth)
    paper = partition(g, machine, **PAPER).placement
    schedule = emulate(g, machine, paper)
    kept = guard(g, machine, paper, schedule, None, machine.edge_comm_us(g.edge_bytes))
    theirs = registry_evaluations(g, machine)
    assert kept.makespan_us <= schedule.makespan_us
    for name, evaluation in theirs.items():
        assert kept.makespan_us <= evaluation.makespan_us * (1 + TOLERANCE), f"slower than {name}"
    report = kept.details()
    fate = check_report(report, kept.makespan_us, theirs)
    # A candidate whose lower bound reaches ParDNN's own makespan cannot win: it is never emulated.
    for name in CHEAP:
        if makespan_bound(g, machine, PLACERS[name](g, machine).placement) >= schedule.makespan_us:
            assert fate[name] == "pruned", f"{name} was emulated although its bound reaches ParDNN's makespan"
    assert report.winner == "pardnn" or kept.makespan_us < schedule.makespan_us
    assert emulate(g, machine, kept.placement, order=kept.order).makespan_us == pytest.approx(kept.makespan_us)


@pytest.mark.parametrize(("shape", "ops", "k", "bandwidth"), CASES[::2])
def test_partition_without_refinement_or_order_keeps_the_guards_promise(shape, ops, k, bandwidth):
    """Nothing after the guard: the pipeline's makespan is the guard's, ≤ every registry placer's."""
    g = SHAPES[shape](ops, k)
    machine = Machine(k, bandwidth=bandwidth)
    result = partition(g, machine, refine_seconds=0, ordered=False)
    report = result.report.details["guard"]
    ours = result.report.evaluation.makespan_us
    assert result.order is None and report.makespan_us == pytest.approx(ours)
    theirs = registry_evaluations(g, machine, ordered=False)
    for name, evaluation in theirs.items():
        assert ours <= evaluation.makespan_us * (1 + TOLERANCE), f"slower than {name}"
    check_report(report, ours, theirs)


@pytest.mark.parametrize(("shape", "ops", "k", "bandwidth", "witness"),
                         [("dnn", 1500, 4, "2GB/s", "metis"), ("dnn", 1000, 2, "150GB/s", "round_robin"),
                          ("random", 800, 4, "150GB/s", "topological"), ("wide", 500, 2, "1GB/s", "critical_path")])
def test_under_a_limit_the_guard_keeps_the_fastest_fitting_placement(shape, ops, k, bandwidth, witness):
    g = SHAPES[shape](ops, k)
    machine = limited_by(g, k, bandwidth, witness)
    result = partition(g, machine, memory_heuristic="overflow", refine_seconds=0, ordered=False)
    ours = result.report.evaluation
    assert ours.memory_fits
    report = result.report.details["guard"]
    theirs = registry_evaluations(g, machine, ordered=False)
    assert theirs[witness].memory_fits
    for name, evaluation in theirs.items():
        if evaluation.memory_fits:
            assert ours.makespan_us <= evaluation.makespan_us * (1 + TOLERANCE), f"slower than {name}, which fits"
    check_report(report, ours.makespan_us, theirs)


@given(random_dags(max_ops=40, min_ops=1), st.integers(1, 6), st.integers(0, 2**31))
def test_the_compiled_bound_is_the_bound_to_the_last_bit(g, k, seed):
    """The guard's bound (one compiled pass) equals this file's, made of NumPy and the levels, exactly."""
    machine = Machine(k, bandwidth="1MB/s", latency="3us")
    placement = np.random.default_rng(seed).integers(0, k, g.n)
    ours = compiled_bound(g, machine, placement, machine.edge_comm_us(g.edge_bytes))
    assert ours == makespan_bound(g, machine, placement)


def test_the_compiled_bound_names_a_placement_off_the_devices():
    g, machine = chain_graph(4), Machine(2)
    weight = machine.edge_comm_us(g.edge_bytes)
    for bad in ([0, 1, 2, 0], [0, -1, 0, 0], [0, 1, 0]):
        with pytest.raises(ValueError, match="for 4 ops on 2 devices"):
            compiled_bound(g, machine, np.array(bad), weight)
