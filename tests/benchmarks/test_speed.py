"""The first-run row of the speed benchmark: a cold `pardnn place` into an empty numba cache.

Structure only: the command ran and exited 0, and the empty cache got numba's cache files. Its wall
time is what the benchmark reports (benchmarks/RESULTS.md); it is never asserted on, since wall
times on shared machines vary too much.
"""

from __future__ import annotations

import pytest

from benchmarks.speed import FIRST_RUN_DEVICES, FIRST_RUN_OPS
from pardnn.io import read_any_graph, read_placement


@pytest.mark.slow
def test_first_run_compiles_into_an_empty_numba_cache(cold_first_run):
    """`pardnn place` on a fresh machine (an empty NUMBA_CACHE_DIR) compiles every sweep and places the
    graph: the benchmark's first-run row, and the CLI's first run (one compile for both; the quick
    suite of test_bench.py reports this same row)."""
    row, messages, work = cold_first_run
    assert row.command == f"pardnn place GRAPH -k {FIRST_RUN_DEVICES} -o placement.txt"
    assert row.note.startswith("first run: empty numba cache") and row.seconds > 0 and not row.infeasible
    assert row.target_s is not None
    assert len(messages) == 1 and row.note in messages[0]
    # It ran to the end (exit 0, checked by first_run): a placement of every op of its graph.
    graph = read_any_graph(next(work.glob("*.json.gz")))
    assert abs(graph.n - FIRST_RUN_OPS) <= 0.05 * FIRST_RUN_OPS
    placement = read_placement(work / "placement.txt", graph, FIRST_RUN_DEVICES)
    assert placement.shape == (graph.n,) and set(placement.tolist()) <= set(range(FIRST_RUN_DEVICES))
    # The empty cache holds the compiled sweeps now: it measured a compilation.
    assert [p.name for p in work.iterdir() if p.name.startswith("numba-cache")] == ["numba-cache-0"]
    assert len(list((work / "numba-cache-0").rglob("*.nbi"))) >= 10, "the sweeps were not compiled"
