"""The copy metadata of a micro-batched step: the capture of a job built with M
micro-batches says which micro-batch each op belongs to and which op of micro-batch 0 it copies
(native graph format version 2), and the pipeline placer runs on it."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from jobs import load_job
from pardnn.costs.graph import Kind
from pardnn.costs.machine import Machine

ROOT = Path(__file__).resolve().parents[2]


def _check_copies(graph, micro):
    assert graph.has_copies and graph.micro_batches == micro
    batch, source = graph.micro_batch, graph.copy_of
    first = np.flatnonzero(batch == 0)
    copies = np.bincount(source[batch > 0], minlength=graph.n)
    assert (copies[first] == micro - 1).all()  # every op of micro-batch 0 has one copy in each other one
    assert (batch[graph.kind == Kind.RESIDUAL] == -1).all()  # variables are shared
    for v in np.flatnonzero(batch > 0)[:200].tolist():  # copy m of micro_0/x is micro_m/x
        m, original = int(batch[v]), graph.names[source[v]]
        assert graph.names[v] == original.replace("micro_0", f"micro_{m}") and graph.ops[v] == graph.ops[source[v]]


@pytest.mark.tf
@pytest.mark.slow
def test_capture_of_word_rnn_tiny_at_four_micro_batches_has_the_copies_and_the_pipeline_places_it(tmp_path):
    from pardnn.cli import EXIT_OK, main
    from pardnn.io import read_graph
    from pardnn.registry import PLACERS

    out = tmp_path / "micro.json"
    assert main(["capture", "word-rnn-tiny", "-o", str(out), "--estimate", "v100", "--micro-batches", "4"]) == EXIT_OK
    assert out.read_bytes().startswith(b'{"format": "pardnn-graph", "version": 2,')
    graph = read_graph(out)
    _check_copies(graph, 4)
    assert graph.micro_batch[graph.index["micro_batches/loss"]] == -1  # the mean loss belongs to no copy
    for k in (2, 4):
        result = PLACERS["pipeline"](graph, Machine(k))
        place = result.placement
        assert (place == place[graph.copy_of]).all()
        assert all(np.unique(place[members]).size == 1 for members in graph.group_members())
        assert result.report.details["stages"] >= 2 and result.report.details["micro_batches"] == 4
    plain = tmp_path / "plain.json"
    assert main(["capture", "word-rnn-tiny", "-o", str(plain), "--estimate", "v100"]) == EXIT_OK
    assert plain.read_bytes().startswith(b'{"format": "pardnn-graph", "version": 1,')  # M = 1: no metadata


@pytest.mark.tf
@pytest.mark.slow
def test_a_keras_models_copies_are_marked_too(tmp_path):
    from jobs import build
    from jobs.costing import cost_graph

    folder = tmp_path / "keras_transformer"
    shutil.copytree(ROOT / "examples" / "keras_transformer", folder)
    graph = cost_graph(build(load_job(folder / "job.toml"), micro_batches=2), "capture")
    _check_copies(graph, 2)
