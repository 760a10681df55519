"""Memory tracker: sums done in place (TensorFlow's AddN rewrite) and zero-length buffers, worked by hand."""

from __future__ import annotations

import numpy as np

from pardnn import CostGraph, Machine
from pardnn.emulation.emulator import emulate
from pardnn.emulation.memory import accumulating_ops, track_memory

SLOW_LINK = {"bandwidth": 1e6, "latency": 1.0}


def profile(g, k, place, **machine):
    m = Machine(k, **machine)
    s = emulate(g, m, np.asarray(place))
    return s, track_memory(g, m, np.asarray(place), s)


def three_term_sum(op: str = "AddN") -> CostGraph:
    """a, b, c (sources, 1 us, 10 B each) -> s (1 us, 10 B), all on one device. FIFO with ties by
    rank runs a [0, 1), b [1, 2), c [2, 3), s [3, 4)."""
    return CostGraph(["a", "b", "c", "s"], [1, 1, 1, 1], [10, 10, 10, 10], [0, 1, 2], [3, 3, 3],
                     ops=["MatMul", "MatMul", "MatMul", op])


def test_sum_kept_whole_when_the_device_has_room():
    """Whole: a, b, c live until s finishes; at t = 3 a + b + c + s = 40 B. Memory 50 B, no reserve:
    the transient peak 40 B is not over 80 % of 50 B = 40 B, so TensorFlow leaves the AddN alone."""
    _, mem = profile(three_term_sum(), 1, [0] * 4, memory=50, reserve=0.0)
    assert mem.peak_bytes.tolist() == [40] and mem.peak_time_us.tolist() == [3.0]
    assert not mem.rewritten.any()


def test_sum_done_in_place_when_the_device_is_tight():
    """Memory 45 B: 40 B > 80 % of 45 B = 36 B, and a, b, c are live at the peak (t = 3), so s is
    rewritten. Each input is freed when its producer finishes (added at once): a [0, 1), b [1, 2),
    c [2, 3); s's accumulator exists from its first input's arrival, t = 1, to its finish: [1, 4).
    At t = 1 a is released, then b and the accumulator allocated: 20 B, the peak."""
    s, mem = profile(three_term_sum(), 1, [0] * 4, memory=45, reserve=0.0)
    assert s.start_us.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert mem.rewritten.tolist() == [False, False, False, True]
    assert mem.peak_bytes.tolist() == [20] and mem.peak_time_us.tolist() == [1.0]
    assert [mem.usage_at(0, t) for t in (0.5, 1.5, 2.5, 3.5)] == [10, 20, 20, 10]
    accumulator = mem.buffer_producer == 3
    assert mem.buffer_alloc_us[accumulator].tolist() == [1.0] and mem.buffer_free_us[accumulator].tolist() == [4.0]


def test_reserve_counts_against_the_threshold():
    """Memory 50 B with a 10 % reserve: limit 45 B, threshold 36 B < 40 B, so the sum is done in place."""
    _, mem = profile(three_term_sum(), 1, [0] * 4, memory=50, reserve=0.1)
    assert mem.peak_bytes.tolist() == [20]


def test_unbounded_machine_and_other_ops_keep_sums_whole():
    """No memory limit: nothing is tight. A two-input AddN, or another op type, is never rewritten."""
    _, mem = profile(three_term_sum(), 1, [0] * 4)
    assert mem.peak_bytes.tolist() == [40]
    _, mem = profile(three_term_sum("ConcatV2"), 1, [0] * 4, memory=45, reserve=0.0)
    assert mem.peak_bytes.tolist() == [40]
    two = CostGraph(["a", "b", "s"], [1, 1, 1], [10, 10, 10], [0, 1], [2, 2], ops=["MatMul", "MatMul", "AddN"])
    assert accumulating_ops(two).tolist() == [False, False, False]
    _, mem = profile(two, 1, [0] * 3, memory=20, reserve=0.0)
    assert mem.peak_bytes.tolist() == [30]
    assert accumulating_ops(three_term_sum()).tolist() == [False, False, False, True]


def test_remote_input_of_a_sum_done_in_place_is_freed_when_it_lands():
    """a (1 us, 10 B) on device 1; b, c (1 us, 10 B) and s (1 us, 10 B) on device 0. The copy of a
    starts at a's finish (t = 1) and lands at 1 + (1 + 10 B / 1e6 B/s = 11 us) = 12; b runs [0, 1),
    c [1, 2), s [12, 13). Whole: device 0 holds b, c and the copy until s finishes, and s: 40 B at
    t = 12. Memory 45 B (threshold 36 B): s is rewritten. b [0, 1), c [1, 2), the copy [1, 12) (freed
    as it lands), the accumulator [1, 13) from b's finish: 30 B at t = 1 (b released, then c, the
    copy and the accumulator allocated). Device 1 keeps a until the copy lands: 10 B."""
    g = CostGraph(["a", "b", "c", "s"], [1, 1, 1, 1], [10, 10, 10, 10], [0, 1, 2], [3, 3, 3],
                  ops=["MatMul", "MatMul", "MatMul", "AddN"])
    place = [1, 0, 0, 0]
    s, whole = profile(g, 2, place, memory=1000, reserve=0.0, **SLOW_LINK)
    assert s.start_us.tolist() == [0.0, 0.0, 1.0, 12.0] and s.edge_arrival_us.tolist()[0] == 12.0
    assert whole.peak_bytes.tolist() == [40, 10] and not whole.rewritten.any()
    _, mem = profile(g, 2, place, memory=45, reserve=0.0, **SLOW_LINK)
    assert mem.rewritten.tolist() == [False, False, False, True]
    assert mem.peak_bytes.tolist() == [30, 10] and mem.peak_time_us.tolist() == [1.0, 0.0]
    copy = (mem.buffer_device == 0) & (mem.buffer_producer == 0)
    assert mem.buffer_alloc_us[copy].tolist() == [1.0] and mem.buffer_free_us[copy].tolist() == [12.0]
    assert mem.usage_at(0, 5.0) == 20 and mem.usage_at(0, 12.5) == 10


def test_only_sums_with_an_input_live_at_the_peak_are_rewritten():
    """s2 = d + e + f (1 B terms, 1 B sum) runs first; a, b, c (10 B each) wait for it (0-byte edges)
    and feed s1 (10 B). FIFO: d, e, f in [0, 3), s2 [3, 4), a [4, 5), b [5, 6), c [6, 7), s1 [7, 8).
    Whole, the peak is a + b + c + s1 = 40 B at t = 7 (s2's output, kept until c finishes, is released
    first). Memory 45 B (threshold 36 B): only s1 has inputs live there, so only s1 is rewritten.
    Then a [4, 5), b [5, 6), c [6, 7), s1's accumulator [5, 8) from a's finish, and s2's 1 B [3, 7):
    the peak is 10 + 10 + 1 = 21 B, first at t = 5."""
    g = CostGraph(["d", "e", "f", "a", "b", "c", "s2", "s1"], [1] * 8, [1, 1, 1, 10, 10, 10, 1, 10],
                  [0, 1, 2, 6, 6, 6, 3, 4, 5], [6, 6, 6, 3, 4, 5, 7, 7, 7], [1, 1, 1, 0, 0, 0, 10, 10, 10],
                  ops=["MatMul"] * 6 + ["AddN", "AddN"])
    assert accumulating_ops(g).tolist() == [False] * 6 + [True, True]
    s, whole = profile(g, 1, [0] * 8, memory=1000, reserve=0.0)
    assert s.start_us.tolist() == [0.0, 1.0, 2.0, 4.0, 5.0, 6.0, 3.0, 7.0]
    assert whole.peak_bytes.tolist() == [40] and whole.peak_time_us.tolist() == [7.0]
    _, mem = profile(g, 1, [0] * 8, memory=45, reserve=0.0)
    assert mem.rewritten.tolist() == [False] * 7 + [True]
    assert mem.peak_bytes.tolist() == [21] and mem.peak_time_us.tolist() == [5.0]


def test_zero_length_buffer_is_live_only_at_its_instant():
    """z (0 us, 10 B, no consumer) is allocated and released at t = 0; y (1 us, 5 B) runs [0, 1).
    In use: 15 B at t = 0 (the peak), 5 B at t = 0.5 — z is not in use after its instant."""
    g = CostGraph(["z", "y"], [0, 1], [10, 5], [], [])
    _, mem = profile(g, 1, [0, 0])
    assert mem.peak_bytes.tolist() == [15] and mem.peak_time_us.tolist() == [0.0]
    assert mem.usage_at(0, 0.0) == 15 and mem.usage_at(0, 0.5) == 5
    assert mem.live(0, 0.5).sum() == 1
