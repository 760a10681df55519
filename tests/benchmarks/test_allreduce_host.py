"""benchmarks.allreduce_host: its worker under a real mpirun gives a row per size, and the tables read them."""

from __future__ import annotations

import importlib.util
import shutil

import pytest

from benchmarks import allreduce_host

pytestmark = pytest.mark.mpi


def test_two_ranks_time_the_fused_average_against_one_allreduce():
    if shutil.which("mpirun") is None or importlib.util.find_spec("mpi4py") is None:
        pytest.skip("needs mpirun and mpi4py (scripts/setup.sh)")
    rows = allreduce_host.run_ranks(2, [4096, 1 << 20])
    assert [(row["ranks"], row["bytes"]) for row in rows] == [(2, 4096), (2, 1 << 20)]
    assert all(row["fused_s"] > 0 and row["plain_s"] > 0 for row in rows)
    table = allreduce_host.allreduce_table(rows).splitlines()
    assert len(table) == 4 and table[2].startswith("| 2 | 4 KiB | ") and table[3].startswith("| 2 | 1 MiB | ")


def test_the_copies_table_reads_the_round_trip():
    rows = [{"bytes": 1 << 30, "pinned": True, "d2h_s": 0.02, "h2d_s": 0.02}]
    line = allreduce_host.copies_table(rows).splitlines()[2]
    assert line == "| 1 GiB | pinned | 20.00 ms | 20.00 ms | 40.00 ms | 53.7 |"
