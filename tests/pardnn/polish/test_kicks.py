"""The refinement's kicks in one compiled call (pardnn/polish/kicks.py) against the Python loop they
replace: NumPy's random stream, the memory tracker's peaks, and the whole iterated search, move for move."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pardnn import CostGraph, Machine, partition
from pardnn.emulation.emulated import Emulated, emulate_and_track
from pardnn.emulation.emulator import emulate
from pardnn.emulation.memory import accumulating_ops, track_memory, tracked_peaks
from pardnn.partitioner import PAPER
from pardnn.polish import refine as module
from pardnn.polish.kicks import _choose
from pardnn.polish.refine import evaluations_for
from tests.conftest import most_reach, random_dags, reached


@pytest.mark.parametrize("population", [1, 2, 3, 4, 5, 7, 31, 1000, 9999])
@pytest.mark.parametrize("devices", [2, 3, 8])
def test_a_kick_draws_what_numpy_draws(population, devices):
    """``rng.choice(units, size=min(units, 4), replace=False)`` then one ``rng.integers(devices)`` per
    unit, 200 times from one seed: the compiled draws are NumPy's, in the same order."""
    numpy_rng, compiled_rng = np.random.default_rng(0), np.random.default_rng(0)
    size = min(population, 4)
    for _ in range(200):
        expected = [(u, int(numpy_rng.integers(devices)))
                    for u in numpy_rng.choice(population, size=size, replace=False).tolist()]
        got = [(u, int(compiled_rng.integers(0, devices))) for u in _choose(compiled_rng, population, size).tolist()]
        assert got == expected
    assert numpy_rng.integers(1 << 40) == compiled_rng.integers(1 << 40)  # the streams end in the same state


def with_sums(g: CostGraph) -> CostGraph:
    """``g`` with its last op also reading the three ops before it, whose outputs grow 20-fold (they make
    the peak), those four normal ops, and every op that reads three or more data inputs typed AddN (a sum
    TensorFlow may do in place)."""
    out, kind = g.out_bytes.copy(), g.kind.copy()
    out[-4:-1] *= 20
    kind[-4:] = 0  # normal ops: a residual output is no buffer, a residual sum no candidate
    edges = {(int(a), int(b)): int(out[a]) * (nbytes > 0)
             for a, b, nbytes in zip(g.edge_src, g.edge_dst, g.edge_bytes, strict=True)}
    for a in range(max(0, g.n - 4), g.n - 1):  # ops are numbered in a topological order
        edges[a, g.n - 1] = int(out[a])
    src, dst, nbytes = (np.array(column, np.int64) for column in zip(*((a, b, c) for (a, b), c in edges.items()),
                                                                    strict=True))
    inputs = np.bincount(dst[nbytes > 0], minlength=g.n)
    ops = ["AddN" if count >= 3 else "MatMul" for count in inputs.tolist()]
    return CostGraph(list(g.names), g.comp_us, out, src, dst, nbytes, kind=kind, colocation=g.colocation,
                     ops=ops, name=g.name)


@most_reach
@given(random_dags(max_ops=30, min_ops=6), st.integers(2, 4), st.floats(0.5, 1.2), st.integers(0, 2**32 - 1))
def test_the_compiled_peaks_are_the_memory_trackers(g, k, tight, seed):
    """:func:`tracked_peaks` equals :func:`track_memory`'s peaks for random placements, with limits near
    the transient peaks so that sums are done in place (counted)."""
    g = with_sums(g)
    placement = np.random.default_rng(seed).integers(k, size=g.n).astype(np.int64)
    placement[-4:] = placement[-1]  # the sum with_sums made, on the device of what it adds
    schedule = emulate(g, Machine(k), placement)
    free = track_memory(g, Machine(k), placement, schedule)
    device = placement[-1]  # the sum's: the limit puts it over the rewrite's threshold
    transient = free.peak_bytes[device] - free.residual_bytes[device]
    machine = Machine(k, memory=max(1, int(transient * tight)), reserve=0.0)
    memory = track_memory(g, machine, placement, schedule)
    peaks = tracked_peaks(k, placement, g.succ_ptr, g.succ, g.edge_src, g.edge_dst, g.edge_bytes, g.kind,
                          g.out_bytes, accumulating_ops(g), machine.limits_bytes, schedule.start_us,
                          schedule.finish_us, schedule.edge_arrival_us)
    assert peaks.tolist() == memory.peak_bytes.tolist()
    reached(bool(memory.rewritten.any()), "a sum done in place changed the buffers")


@most_reach
@given(random_dags(max_ops=20), st.integers(2, 4), st.sampled_from(["150GB/s", "1GB/s"]), st.floats(1.0, 1.5),
       st.sampled_from([None, "upward_rank"]))
def test_the_compiled_kicks_make_the_python_search(g, k, bandwidth, slack, order):
    """The whole refinement (a 0.02 s budget: about 1,000 emulations) with the kicks compiled and with them
    in Python: the same answer, emulations, kicks kept and log, move for move, under memory limits up to 1.5
    times the start's peak (trials over them are refused), with AddN sums and in both run orders. Reached:
    kicks were kept."""
    g = with_sums(g)
    placement = partition(g, Machine(k, bandwidth=bandwidth), **PAPER).placement
    peak = emulate_and_track(g, Machine(k), placement, order=order, track=True).memory.peak_bytes.max()
    machine = Machine(k, bandwidth=bandwidth, memory=max(1, int(peak * slack)), reserve=0.0)
    start = emulate_and_track(g, machine, placement, order=order)
    if not start.fits(machine):  # under the limit a sum is done in place, which can raise the peak: use that one
        peak = start.memory.peak_bytes.max()
        machine = Machine(k, bandwidth=bandwidth, memory=max(1, int(peak * slack)), reserve=0.0)
        start = emulate_and_track(g, machine, placement, order=order)
    assume(start.fits(machine))
    runs = []
    for compiled in (True, False):
        search = module._Search(g, machine, Emulated(start.placement, start.schedule, start.memory),
                                evaluations_for(g, 0.02), order)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(module, "COMPILED_KICKS", compiled)
            search.run()
        out = search.out
        runs.append((out.placement.tolist(), out.evaluations, out.restarts, out.moves, out.answer.makespan_us,
                     None if out.memory is None else out.memory.peak_bytes.tolist()))
    reached(runs[0][2] > 0, "kicks were kept (and descended from)")
    assert runs[0] == runs[1]
