"""Memory tracker (Eq. 3): hand-worked peaks, potentials, and invariants over random DAGs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pardnn import CostGraph, Machine
from pardnn.emulation.emulator import emulate
from pardnn.emulation.memory import track_memory
from pardnn.emulation.peaks import SMALL_BUFFERS, peaks, peaks_compiled, stable_order
from tests.conftest import random_dags

SLOW_LINK = {"bandwidth": 1e6, "latency": 1.0}


def profile(g, k, place, **machine):
    m = Machine(k, **machine)
    s = emulate(g, m, np.asarray(place))
    return s, track_memory(g, m, np.asarray(place), s)


def test_chain_frees_each_output_after_its_consumer():
    """a(1, 10 B) -> b(1, 20 B) -> c(1, 30 B): live a+b during b (30), b+c during c (50)."""
    g = CostGraph(["a", "b", "c"], [1, 1, 1], [10, 20, 30], [0, 1], [1, 2])
    _, mem = profile(g, 1, [0, 0, 0])
    assert mem.peak_bytes.tolist() == [50] and mem.peak_time_us.tolist() == [2.0]
    assert mem.usage_at(0, 0.5) == 10 and mem.usage_at(0, 1.5) == 30


def test_residual_ops_hold_memory_all_step_and_reference_ops_none():
    """v (residual, 100 B) -> read (10 B) -> apply (reference, 999 B declared, holds nothing)."""
    g = CostGraph(["v", "read", "apply"], [0, 1, 1], [100, 10, 999], [0, 1], [1, 2], [0, 10],
                  kind=["residual", "normal", "reference"], colocation=["v", None, "v"])
    _, mem = profile(g, 1, [0, 0, 0])
    assert mem.residual_bytes.tolist() == [100]
    assert mem.peak_bytes.tolist() == [110]


def test_cross_device_tensor_is_held_by_both_sides():
    """a(1, 10 B) on 0 -> b(2, 0 B) on 1. The transfer costs 1 us + 10 B / 1e6 B/s = 11 us: it starts
    when a finishes (t = 1) and lands at 1 + 11 = 12. The sender keeps a's output [0, 12); the
    receiver allocates the landing buffer when the copy starts and holds it [1, 14) (b runs [12, 14)),
    so during the flight [1, 12) both ends hold the 10 B."""
    g = CostGraph(["a", "b"], [1, 2], [10, 0], [0], [1])
    s, mem = profile(g, 2, [0, 1], **SLOW_LINK)
    assert s.edge_arrival_us.tolist() == [12.0] and s.start_us.tolist() == [0.0, 12.0]
    assert mem.peak_bytes.tolist() == [10, 10]
    assert mem.peak_time_us.tolist() == [0.0, 1.0]  # the receiver's peak starts with the transfer
    assert mem.usage_at(1, 0.5) == 0 and mem.usage_at(1, 1.0) == 10 and mem.usage_at(1, 6.0) == 10
    assert mem.usage_all_at(6.0).tolist() == [10, 10]  # in flight: counted on both ends
    assert mem.usage_at(0, 11.9) == 10 and mem.usage_at(0, 12.1) == 0
    assert mem.usage_at(1, 13.0) == 10 and mem.usage_at(1, 14.1) == 0


def test_bytes_in_flight_raise_the_receivers_peak():
    """a(1 us, 10 B) on 0 -> c(1 us, 0 B) on 1; b(5 us, 30 B) on 1 stands alone and runs [0, 5).
    a's copy starts at a's finish, t = 1, and lands at 1 + (1 + 10 B / 1e6 B/s = 11 us) = 12; c runs
    [12, 13). Device 1 holds b's 30 B during [0, 5) and the copy's 10 B during [1, 13): 30 + 10 = 40 B
    at t = 1. Counted from its arrival (t = 12) the copy would never meet b's output: peak 30 B."""
    g = CostGraph(["a", "b", "c"], [1, 5, 1], [10, 30, 0], [0], [2])
    s, mem = profile(g, 2, [0, 1, 1], **SLOW_LINK)
    assert s.start_us.tolist() == [0.0, 0.0, 12.0] and s.finish_us.tolist() == [1.0, 5.0, 13.0]
    assert mem.peak_bytes.tolist() == [10, 40]  # device 0: a's 10 B, kept [0, 12) until the copy lands
    assert mem.peak_time_us.tolist() == [0.0, 1.0]
    assert mem.usage_at(1, 0.5) == 30 and mem.usage_at(1, 4.0) == 40
    assert mem.usage_at(1, 6.0) == 10 and mem.usage_at(1, 13.5) == 0


def test_one_copy_per_producer_and_device():
    """a (8 B) on 0 feeds b and c, both on device 1: one 8-byte copy there, not two. Both transfers
    start at a's finish (t = 1) and land at 1 + (1 + 8 B / 1e6 B/s = 9 us) = 10; b runs [10, 11),
    c [11, 12): the one copy is held [1, 12) on device 1, 8 B at its peak (two copies would be 16 B)."""
    g = CostGraph(["a", "b", "c"], [1, 1, 1], [8, 0, 0], [0, 0], [1, 2])
    _, mem = profile(g, 2, [0, 1, 1], **SLOW_LINK)
    assert mem.peak_bytes.tolist() == [8, 8]
    assert mem.peak_time_us.tolist() == [0.0, 1.0]
    assert mem.usage_at(1, 11.5) == 8 and mem.usage_at(1, 12.5) == 0


def test_potentials_count_running_output_and_inputs_last_consumed():
    """x (10 B) and y (20 B) feed z (5 B); all on one device. While z runs, M_pot(z) = 10 + 20 + 5."""
    g = CostGraph(["x", "y", "z"], [1, 1, 1], [10, 20, 5], [0, 1], [2, 2])
    s, mem = profile(g, 1, [0, 0, 0])
    t = float(s.start_us[2]) + 0.5
    pot = mem.potentials(g, s, np.zeros(3, int), 0, t)
    assert pot.tolist() == [0, 0, 35]
    assert mem.usage_at(0, t) == 35


@given(random_dags(), st.integers(1, 4), st.integers(0, 2**31))
def test_peak_holds_the_largest_output_and_the_residuals(g, k, seed):
    place = np.random.default_rng(seed).integers(0, k, g.n)
    _, mem = profile(g, k, place, bandwidth=1e8, latency=1.0)
    for d in range(k):
        on = (place == d) & (g.kind != 2)
        largest = int(g.out_bytes[on].max(initial=0))
        assert mem.peak_bytes[d] >= largest
        assert mem.peak_bytes[d] >= mem.residual_bytes[d]
    assert np.all(mem.buffer_free_us >= mem.buffer_alloc_us)


@given(random_dags(), st.integers(2, 4), st.integers(0, 2**31))
def test_every_cut_edge_has_its_copy_from_the_start_of_its_transfer(g, k, seed):
    """A cut edge u -> w of b > 0 bytes: w's device holds a copy of u of at least b bytes from u's
    finish (the transfer starts) until w finishes: one copy per producer and receiving device."""
    place = np.random.default_rng(seed).integers(0, k, g.n)
    s, mem = profile(g, k, place, bandwidth=1e8, latency=1.0)
    copy = mem.buffer_device != place[mem.buffer_producer]
    assert np.array_equal(mem.buffer_alloc_us[copy], s.finish_us[mem.buffer_producer[copy]])
    for u, w, b in zip(g.edge_src, g.edge_dst, g.edge_bytes):
        if place[u] == place[w] or b == 0:
            continue
        mine = copy & (mem.buffer_producer == u) & (mem.buffer_device == place[w])
        assert mine.sum() == 1
        assert mem.buffer_bytes[mine][0] >= b and mem.buffer_free_us[mine][0] >= s.finish_us[w]


@given(random_dags())
def test_single_device_peak_is_at_least_the_largest_output(g):
    _, mem = profile(g, 1, np.zeros(g.n, int))
    assert mem.peak_bytes[0] >= int(g.out_bytes[g.kind != 2].max(initial=0))


@pytest.mark.parametrize("k", [1, 3])
def test_usage_at_peak_time_equals_peak(k):
    rng = np.random.default_rng(7)
    n = 40
    src, dst = np.nonzero(np.triu(rng.random((n, n)) < 0.1, 1))
    g = CostGraph([f"n{i}" for i in range(n)], rng.random(n) * 10, rng.integers(1, 100, n), src, dst)
    place = np.arange(n) % k
    _, mem = profile(g, k, place)
    for d in range(k):
        assert mem.usage_at(d, mem.peak_time_us[d]) == mem.peak_bytes[d]


@given(st.lists(st.integers(0, 6), max_size=300), st.integers(1, 4))
def test_the_compiled_peaks_are_numpys_stable_sweep(times, k):
    """Few buffers take one compiled call (its own merge sort), many NumPy's stable sort: the same
    order (ties included: few distinct times) and the same peaks and instants."""
    key = np.array(times, dtype=float)
    np.testing.assert_array_equal(stable_order(key), np.argsort(key, kind="stable"))
    rng = np.random.default_rng(len(times))
    b = len(times) // 2
    alloc = key[:b]
    free = alloc + rng.integers(0, 3, b)  # some freed at their allocation
    device, nbytes = rng.integers(0, k, b), rng.integers(0, 1000, b)
    residual = rng.integers(0, 100, k)
    compiled = peaks_compiled(k, residual, device, alloc, free, nbytes)
    assert b <= SMALL_BUFFERS
    big = np.full(SMALL_BUFFERS + 1, 0.0), np.zeros(SMALL_BUFFERS + 1, np.int64)
    # the NumPy path, reached by padding with empty buffers of device 0 at time 0 (no bytes: no peak change)
    numpy_path = peaks(k, residual, np.concatenate([device, big[1]]), np.concatenate([alloc, big[0]]),
                        np.concatenate([free, big[0]]), np.concatenate([nbytes, big[1]]))
    np.testing.assert_array_equal(compiled[0], numpy_path[0])
    np.testing.assert_array_equal(compiled[1], numpy_path[1])
