"""Largest batch search: doubling + bisection against brute force, data parallelism by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pardnn import CostGraph, InfeasibleError, Machine
from pardnn.batch.maxbatch import ProbeCache, max_batch, search_largest


@given(st.integers(0, 3000), st.integers(1, 4096), st.one_of(st.none(), st.integers(1, 5000)))
def test_search_matches_brute_force(answer, limit, guess):
    calls: list[int] = []

    def fits(b: int) -> bool:
        calls.append(b)
        return b <= answer

    expected = min(answer, limit)
    assert search_largest(fits, limit=limit, guess=guess) == expected
    assert len(set(calls)) <= 4 * max(limit, 2).bit_length() + 5  # O(log B) probes


@given(st.sets(st.integers(1, 300), max_size=40), st.integers(1, 300))
def test_search_answer_is_followed_by_three_failures(fitting, limit):
    """With a non-monotone ``fits`` the answer fits and the next three sizes (within the limit) fail."""
    def fits(b: int) -> bool:
        return b in fitting or b == 1

    answer = search_largest(fits, limit=limit)
    assert fits(answer) or answer == 0
    assert not any(fits(b) for b in range(answer + 1, min(answer + 4, limit + 1)))


def model(batch: int) -> CostGraph:
    """Two layers: weights w1, w2 (residual, 100 B each, constant) and activations a1 -> a2 -> loss,
    each holding 10 B per sample. On one device the peak is 200 + a1 + a2 = 200 + 20 b."""
    names = ["w1", "w2", "a1", "a2", "loss"]
    out = [100, 100, 10 * batch, 10 * batch, 0]
    return CostGraph(names, [0, 0, batch, batch, 1], out, [0, 1, 2, 3], [2, 3, 3, 4],
                     kind=["residual", "residual", "normal", "normal", "normal"])


def test_data_parallel_by_hand_and_pardnn_against_brute_force():
    """Memory 400 B, no reserve. One device holds 200 + 20 b <= 400, so b <= 10 per replica: data
    parallelism gives 10 K. ParDNN on 2 devices must do at least as well, and its answer must be the
    brute-force largest batch whose placement fits."""
    machine = lambda k: Machine(k, memory=400, reserve=0.0)  # noqa: E731
    rows = max_batch(model, [1, 2], machine, fingerprint="toy")
    assert [r.data_parallel_batch for r in rows] == [10, 20]
    assert rows[0].pardnn_batch == 10
    from pardnn import partition

    def fits(b: int, k: int) -> bool:
        try:
            partition(model(b), machine(k), memory_heuristic="overflow")
        except InfeasibleError:
            return False
        return True

    best = rows[1].pardnn_batch
    assert best >= 10
    assert all(fits(b, 2) for b in range(1, best + 1))
    assert not fits(best + 1, 2) and not fits(best + 2, 2)


def test_cache_makes_a_rerun_instant(tmp_path):
    built: list[int] = []

    def counting(batch: int) -> CostGraph:
        built.append(batch)
        return model(batch)

    path = tmp_path / "cache.json"
    machine = lambda k: Machine(k, memory=400, reserve=0.0)  # noqa: E731
    first = max_batch(counting, [2], machine, fingerprint="toy", cache=ProbeCache(path))
    assert built
    built.clear()
    again = max_batch(counting, [2], machine, fingerprint="toy", cache=ProbeCache(path))
    assert built == [] and [r.pardnn_batch for r in again] == [r.pardnn_batch for r in first]
    assert all(p.cached for p in again[0].probes)


def test_not_even_batch_one_fits():
    """Devices of 90 B hold less than one 100-byte weight: nothing fits at any K."""
    with pytest.raises(InfeasibleError, match=r"does not fit even at batch 1 on 2 devices: .* short"):
        max_batch(model, [1, 2], lambda k: Machine(k, memory=90, reserve=0.0), fingerprint="toy")


def test_rows_report_ratio():
    rows = max_batch(model, [1, 2, 4], lambda k: Machine(k, memory=400, reserve=0.0), fingerprint="toy")
    assert rows[0].ratio == pytest.approx(1.0)
    assert all(np.isfinite(r.ratio) for r in rows)


# ------------------------------------------------------------------------------- micro-batches
def test_with_m_micro_batches_only_multiples_of_m_are_probed_and_the_answer_is_brute_force():
    """The toy model split into M micro-batches (its sizes at the batch; the search must keep to multiples of M):
    the answer is the largest multiple of M that fits, data parallelism's too."""
    from pardnn import partition

    machine = lambda k: Machine(k, memory=400, reserve=0.0)  # noqa: E731
    probed: list[int] = []

    def graph(batch: int) -> CostGraph:
        probed.append(batch)
        return model(batch)

    for micro in (3, 4):
        probed.clear()
        rows = max_batch(graph, [1, 2], machine, fingerprint="toy", micro_batches=micro)
        assert probed and all(batch % micro == 0 for batch in probed)
        assert {row.micro_batches for row in rows} == {micro}
        assert rows[0].data_parallel_batch == 10 // micro * micro  # 200 + 20 b <= 400 on one device

        def fits(b: int) -> bool:
            try:
                partition(model(b), machine(2), memory_heuristic="overflow")
            except InfeasibleError:
                return False
            return True

        assert rows[1].pardnn_batch == max(b for b in range(micro, 60, micro) if fits(b))


def test_the_cache_keeps_each_m_apart(tmp_path):
    path = tmp_path / "cache.json"
    machine = lambda k: Machine(k, memory=400, reserve=0.0)  # noqa: E731
    plain = max_batch(model, [1], machine, fingerprint="toy", cache=ProbeCache(path))
    split = max_batch(model, [1], machine, fingerprint="toy", cache=ProbeCache(path), micro_batches=4)
    assert (plain[0].pardnn_batch, split[0].pardnn_batch) == (10, 8)
    alone = max_batch(model, [1], machine, fingerprint="toy", cache=ProbeCache(tmp_path / "alone.json"),
                      micro_batches=4)
    # M = 4's probes hit the shared cache only where they hit a cache of their own: never M = 1's entries
    assert [p.cached for p in split[0].probes] == [p.cached for p in alone[0].probes]


def test_best_micro_batches_keeps_per_k_the_largest_batch_and_a_tie_to_the_smaller_m():
    from pardnn.batch.maxbatch import BatchRow, best_micro_batches

    rows = {1: [BatchRow(1, 16, 16), BatchRow(2, 40, 32)],
            2: [BatchRow(1, 10, 10, micro_batches=2), BatchRow(2, 40, 20, micro_batches=2)],
            4: [BatchRow(1, 0, 0, micro_batches=4), BatchRow(2, 44, 16, micro_batches=4)]}
    best = best_micro_batches(rows)
    assert [(row.devices, row.micro_batches, row.pardnn_batch) for row in best] == [(1, 1, 16), (2, 4, 44)]
    rows[4][1] = BatchRow(2, 40, 16, micro_batches=4)
    assert best_micro_batches(rows)[1].micro_batches == 1  # 40 for M = 1, 2 and 4: the smallest M
