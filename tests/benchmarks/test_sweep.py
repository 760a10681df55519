"""benchmarks/sweep.py on one small graph: the comparison with the cheap placements and the order rows."""

from __future__ import annotations

from benchmarks.sweep import main
from pardnn.costs.synthetic import dnn_graph
from pardnn.io import write_graph


def test_sweep_writes_its_section_with_the_order_table(tmp_path):
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    write_graph(dnn_graph(300, seed=2), graphs / "small.json.gz")
    results = tmp_path / "RESULTS.md"
    assert main([str(graphs), "--devices", "2", "4", "--bandwidths", "150", "1", "--out", str(results)]) == 0
    text = results.read_text()
    assert "<!-- section: sweep" in text and "<!-- end section: sweep -->" in text
    assert "ParDNN is never slower than a cheap placement *by construction*" in text
    assert "(slower here in 0 of " in text  # the guard's promise
    assert "What it buys is the margin: strictly faster in " in text
    # The order table's rows: bandwidth, cases, order kept, geomean, best, shorter by > 5 %.
    order_rows = [line for line in text.splitlines() if line.startswith(("| 150 GB/s | 2 |", "| 1 GB/s | 2 |"))
                  and len(line.split("|")) == 8]
    assert len(order_rows) == 2, text
    for row in order_rows:
        kept = int(row.split("|")[3])
        geomean, best = (float(cell) for cell in row.split("|")[4:6])
        assert 0 < best <= geomean <= 1.0 and 0 <= kept <= 2
        assert (best < 1.0) == (kept > 0)  # an order is kept exactly when it shortens the step
    assert "Over all 4 cases: an order kept in" in text
