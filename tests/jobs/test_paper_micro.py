"""``python -m jobs.paper --micro-batches M`` writes the micro-batched graph beside the plain one:
``NAME-mM.json.gz``, with one forward and backward copy per micro-batch (``benchmarks.micro``
reads these files)."""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow")

from jobs.paper import main
from pardnn.io import read_any_graph

pytestmark = [pytest.mark.tf]


def test_micro_batched_paper_graph_is_written_beside_the_plain_one(tmp_path, capsys):
    assert main(["word-rnn-tiny", "--out", str(tmp_path)]) == 0
    assert main(["word-rnn-tiny", "--out", str(tmp_path), "--micro-batches", "2"]) == 0
    plain = read_any_graph(tmp_path / "word-rnn-tiny.json.gz")
    micro = read_any_graph(tmp_path / "word-rnn-tiny-m2.json.gz")
    # Two copies of the forward and backward ops share one set of variables and updates: more ops
    # than one copy, fewer than two whole graphs.
    assert plain.n < micro.n < 2 * plain.n
    # Half the batch per copy: every op's output is at most as large as in the one-copy step.
    assert micro.out_bytes.max() <= plain.out_bytes.max()
    assert "| word-rnn-tiny |" in capsys.readouterr().out
