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
    # the second reuses the first's steps; it builds only those of plans the first pruned unbuilt and it cannot
    assert (first["nodes"], second["nodes"]) == (1, 2) and first["graphs_built"] > second["graphs_built"]
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


def test_a_pruned_plan_shows_what_it_cannot_reach() -> None:
    """k = 1: M = 1 fits at 50 samples/s, M = 2 pruned; k = 2: both M pruned, at most 70 samples/s (the
    larger of their caps); the chosen k = 4 at 100 over max(50, 70): at least 1.43 (the cap stands in)."""
    from benchmarks.plan import table

    row = {"model": "m", "node": "dgx-a100", "nodes": 1, "node_batch": 8, "devices_per_node": 4,
           "per_k": {"1": {"samples_per_s": 50.0, "micro_batches": 1, "tried": True, "pruned": 1, "at_most": 40.0},
                     "2": {"samples_per_s": None, "micro_batches": None, "tried": True, "pruned": 2, "at_most": 70.0},
                     "4": {"samples_per_s": 100.0, "micro_batches": 2, "tried": True, "pruned": 0, "at_most": None}},
           "chosen": {"replica_devices": 4, "micro_batches": 2, "samples_per_s": 100.0, "exposed_ms": 0.0},
           "over_simple": 100.0 / 50.0, "over_simple_at_least": False, "seconds": 3.0, "graphs_built": 2,
           "build_workers": 0}
    assert table([row]).splitlines()[2] == ("| m | dgx-a100 | 1 | 8 | 50 (M=1), 1 pruned | < 70 (pruned) | 100 (M=2) "
                                            "| k=4 M=2 | 2.00 | 0.0 | 3 | 2 (1) |")
    assert "| >= 1.43 |" in table([row | {"over_simple": 100 / 70, "over_simple_at_least": True}])
    over = row["per_k"] | {"2": row["per_k"]["2"] | {"over": 1}}  # one M of k = 2 placed and over its memory
    assert "| < 70 (pruned, others over) |" in table([row | {"per_k": over}])


def test_against_an_earlier_run_names_each_cell_that_changed(tmp_path: Path, capsys) -> None:
    """The check that a change to planning leaves the tables as they were: the same rows are no difference;
    another plan chosen, another best M, a rate beyond the tolerance, a k now over, a missing cell each are."""
    from benchmarks.plan import differences

    def row(nodes: int, chosen: tuple[int, int], rates: dict[str, tuple[float | None, int | None]]) -> dict:
        return {"model": "m", "node": "dgx-2", "nodes": nodes, "node_batch": 8, "devices_per_node": 2,
                "per_k": {k: {"samples_per_s": rate, "micro_batches": m, "tried": True, "pruned": 0, "at_most": None}
                          for k, (rate, m) in rates.items()},
                "chosen": {"replica_devices": chosen[0], "micro_batches": chosen[1], "samples_per_s": 100.0,
                           "exposed_ms": 1.0, "step_ms": 2.0},
                "over_simple": 1.0, "over_simple_at_least": False, "seconds": 1.0, "build_seconds": 1.0,
                "graphs_built": 1, "build_workers": 0, "why": ""}

    before = [row(1, (2, 1), {"1": (90.0, 1), "2": (100.0, 1)}), row(4, (1, 1), {"1": (400.0, 1), "2": (390.0, 2)})]
    assert differences(before, before) == []
    assert differences(before, [row(1, (2, 1), {"1": (90.0 * (1 + 1e-12), 1), "2": (100.0, 1)}), before[1]]) == []
    after = [row(1, (1, 1), {"1": (101.0, 1), "2": (100.0, 2)}), row(16, (1, 1), {"1": (1.0, 1), "2": (None, None)})]
    assert differences(before, after) == [
        "m dgx-2 4: only in the first run", "m dgx-2 16: only in the second run",
        "m dgx-2 1: chosen (k, M) (2, 1) -> (1, 1)", "m dgx-2 1: k=1 samples/s 90 -> 101",
        "m dgx-2 1: k=2 (tried, best M, pruned) (True, 1, 0) -> (True, 2, 0)"]
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(before))
    new.write_text(json.dumps(after))
    assert main(["--render", "--json", str(old), "--no-write", "--against", str(old)]) == 0
    assert capsys.readouterr().out.endswith(f"the same tables as {old} (2 cells)\n")
    assert main(["--render", "--json", str(new), "--no-write", "--against", str(old)]) == 1
    assert "m dgx-2 1: chosen (k, M) (2, 1) -> (1, 1)" in capsys.readouterr().out
