"""``python -m benchmarks.plan``: the cells of the cluster-plan table, on a tiny job (two cluster sizes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.plan import main

pytestmark = [pytest.mark.tf]


def test_each_cell_is_a_search_and_the_next_cluster_size_reuses_its_graphs(tmp_path: Path, capsys) -> None:
    rows_file = tmp_path / "plan.json"
    assert main(["--models", "word-rnn-tiny", "--node", "dgx-a100", "--nodes", "1", "2", "--json", str(rows_file),
                 "--no-write"]) == 0
    first, second = json.loads(rows_file.read_text())
    assert (first["nodes"], second["nodes"]) == (1, 2) and first["graphs_built"] > 0 == second["graphs_built"]
    for row in (first, second):
        assert set(row["per_k"]) == {"1", "2", "4", "8"}  # every k dividing the A100 node's 8 GPUs
        best = max(v["samples_per_s"] for v in row["per_k"].values() if v["samples_per_s"] is not None)
        assert row["chosen"]["samples_per_s"] == pytest.approx(best, rel=1e-6)  # near-ties keep the simpler plan
        assert row["over_simple"] >= 1 - 1e-9  # never slower than k = 1 or k = G
    assert first["chosen"]["exposed_ms"] >= 0
    out = capsys.readouterr().out
    assert "| word-rnn-tiny | dgx-a100 | 1 | 16 |" in out and "Chosen below max(k = 1, k = G): 0 (target 0)" in out
    # A rerun plans nothing: both cells are in the file.
    assert main(["--models", "word-rnn-tiny", "--node", "dgx-a100", "--nodes", "1", "2", "--json", str(rows_file),
                 "--no-write"]) == 0
    assert len(json.loads(rows_file.read_text())) == 2
