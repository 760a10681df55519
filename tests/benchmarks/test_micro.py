"""The micro-batch benchmark (benchmarks/micro.py) end to end on a tiny zoo job: it builds every
step it needs (resuming past the ones there), places each (K, M), checks the replication against
a step built whole, and writes its section. The table's ratios and auto's picks are checked against
the saved rows, recomputed here."""

from __future__ import annotations

import json

import pytest

from benchmarks.micro import DEVICES, builds, main, step_path

pytestmark = [pytest.mark.tf, pytest.mark.slow]


def test_builds_cover_every_micro_batch_size_and_data_parallel_replica():
    # batch 16: M = 2 steps of micro-batches 8, 4, 2, 1 (built as 2 x b); plain steps at 16 / K
    assert builds(16, checked=True) == [(16, 1), (16, 2), (8, 2), (4, 2), (2, 2), (8, 1), (4, 1), (2, 1), (1, 1),
                                        (16, 4)]
    assert builds(2, checked=True) == [(2, 1), (2, 2), (1, 1)]  # M = 4 does not divide 2: no check build


def test_build_run_and_section_on_a_tiny_job(tmp_path):
    out, results, rows = tmp_path / "micro", tmp_path / "RESULTS.md", tmp_path / "rows.json"
    results.write_text("# Benchmark results\n\n## Kept\n")
    assert main(["build", "--models", "word-rnn-tiny", "--out", str(out), "--check", "word-rnn-tiny"]) == 0
    assert step_path(out, "word-rnn-tiny", 4, 2).exists() and step_path(out, "word-rnn-tiny", 16, 4).exists()
    assert main(["build", "--models", "word-rnn-tiny", "--out", str(out)]) == 0  # all there: nothing rebuilt
    assert main(["run", "--models", "word-rnn-tiny", "--graphs", str(out), "--json", str(rows),
                 "--results", str(results)]) == 0
    saved = json.loads(rows.read_text())
    (row,) = saved["rows"]
    assert row["check"] == "equal" and row["batch"] == 16
    assert len(row["cells"]) == len(DEVICES) * 5 and set(row["dp"]) == {"2", "4", "8", "16"}
    text = results.read_text()
    assert "## Kept" in text and "<!-- section: micro-batches" in text and "word-rnn-tiny: equal" in text
    for k in DEVICES:
        rates = {c["micro_batches"]: 16 / (c["step_us"] * 1e-6) for c in row["cells"]
                 if c["devices"] == k and c["fits"]}
        line = next(line for line in text.splitlines() if line.startswith(f"| word-rnn-tiny | 16 | {k} |"))
        cells = [part.strip() for part in line.split("|")[1:-1]]
        shown = [float(cell.replace(",", "")) for cell in cells[3:8]]
        assert shown == [pytest.approx(rates[m], rel=5e-3, abs=0.5) for m in (1, 2, 4, 8, 16)]
        assert cells[8] == f"{max(rates.values()) / rates[1]:.2f}"
        best = min(m for m in rates if rates[m] == max(rates.values()))
        assert int(cells[10]) == best  # auto: the fastest, the smaller M on a tie; never below M = 1
    again = tmp_path / "again.md"
    assert main(["render", "--json", str(rows), "--results", str(again)]) == 0  # the section from saved rows
    table = [line for line in text.splitlines() if line.startswith("| word-rnn-tiny")]
    assert [line for line in again.read_text().splitlines() if line.startswith("| word-rnn-tiny")] == table
