"""benchmarks.allreduce_model: the fit recovers a known network, the model's rows by hand, and a real
Horovod run under mpirun gives a row per size and mode."""

from __future__ import annotations

import shutil

import pytest

from benchmarks import allreduce_model


def _rows(network_Bps: float, latency_us: float) -> list[dict]:
    """2-rank single rows as the model with these constants would time them: b / B + 2 a."""
    return [{"ranks": 2, "bytes": b, "mode": "single", "tensors": 1,
             "seconds": (b / network_Bps * 1e6 + 2 * latency_us + 1000) / 1e6} for b in (4096, 1 << 20, 1 << 24)]


def test_the_fit_recovers_the_network_and_the_latency() -> None:
    bandwidth, latency = allreduce_model.fit(_rows(2e9, 40.0))
    assert bandwidth == pytest.approx(2e9, rel=1e-6) and latency == pytest.approx(40.0, rel=1e-6)


def test_the_model_of_a_row_by_hand() -> None:
    """4 ranks, 64 tensors of 16 KiB = 1 MiB, one buffer: 2·3/4 · 1 MiB / 1 GB/s + 2·3 · 10 µs, its copies in
    and out of the fusion buffer at the CPU preset's 19 GB/s, after a cycle of 1 ms."""
    row = {"ranks": 4, "bytes": 1 << 20, "mode": "fused", "tensors": 64, "seconds": 0.002}
    expected = 1.5 * (1 << 20) / 1e9 * 1e6 + 60.0 + 2 * (1 << 20) / 19e9 * 1e6 + 1000.0
    assert allreduce_model.model_us(row, 1e9, 10.0) == pytest.approx(expected)
    table, ratios = allreduce_model.table([row], 1e9, 10.0)
    assert ratios == [pytest.approx(expected / 2000.0)]
    assert table.splitlines()[2] == f"| 4 | 1 MiB | 64 | 2.000 ms | {expected / 1e3:.3f} ms | {expected / 2000:.2f} |"


def test_the_fit_needs_the_two_rank_single_rows() -> None:
    with pytest.raises(SystemExit, match="the fit needs the -np 2 single rows"):
        allreduce_model.fit([{**row, "ranks": 4} for row in _rows(1e9, 1.0)])


@pytest.mark.mpi
@pytest.mark.slow
def test_two_ranks_of_horovod_time_each_size_single_and_fused() -> None:
    if shutil.which("mpirun") is None:
        pytest.skip("needs mpirun (scripts/setup.sh)")
    pytest.importorskip("horovod.tensorflow")
    rows = allreduce_model.run_ranks(2, [4096, 1 << 20])
    assert [(row["bytes"], row["mode"], row["tensors"]) for row in rows] == [
        (4096, "single", 1), (4096, "fused", 64), (1 << 20, "single", 1), (1 << 20, "fused", 64)]
    assert all(row["ranks"] == 2 and row["seconds"] > 0 for row in rows)
