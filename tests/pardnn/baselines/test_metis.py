"""METIS called through ctypes (the GIL released) against pymetis's own call: the same partitions."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from pardnn import Machine
from pardnn.baselines.metis import _integer_weights, _kway_without_the_gil, contract_groups
from pardnn.costs.synthetic import dnn_graph

pymetis = pytest.importorskip("pymetis")
metis_module = importlib.import_module("pardnn.baselines.metis")


def test_pymetis_exports_the_kway_partitioner_here():
    """On this install the GIL-free call is the one the metis placer makes (else it falls back)."""
    assert _kway_without_the_gil(pymetis) is not None


@pytest.mark.parametrize(("ops", "k", "seed"), [(500, 2, 0), (3000, 5, 1), (8000, 16, 2), (20_000, 8, 3)])
def test_the_gil_free_call_gives_pymetis_partition(ops, k, seed):
    g = dnn_graph(ops, seed=seed)
    _, comp, xadj, adjncy, arc_weight = contract_groups(g, Machine(k, bandwidth="3GB/s").edge_comm_us(g.edge_bytes))
    dtype = pymetis.zero_copy_dtype()
    vweights = np.asarray(_integer_weights(comp, 1), dtype=dtype)
    eweights = np.asarray(_integer_weights(arc_weight, 0), dtype=dtype)
    xadj, adjncy = np.asarray(xadj, dtype=dtype), np.asarray(adjncy, dtype=dtype)
    theirs = pymetis.part_graph(k, adjacency=pymetis.CSRAdjacency(xadj, adjncy), vweights=vweights,
                                eweights=eweights, recursive=False, options=pymetis.Options(seed=seed))
    cut, part = _kway_without_the_gil(pymetis)(k, xadj, adjncy, vweights, eweights, pymetis.Options(seed=seed))
    assert cut == theirs[0]
    assert part.tolist() == list(theirs[1])
    assert len(set(part.tolist())) == k


def test_without_the_exported_function_pymetis_is_called(monkeypatch):
    g, machine = dnn_graph(3000, seed=4), Machine(4, bandwidth="3GB/s")
    fast, details = metis_module.metis_placement(g, machine)
    monkeypatch.setattr(metis_module, "_kway_without_the_gil", lambda _pymetis: None)
    slow, slow_details = metis_module.metis_placement(g, machine)
    assert fast.tobytes() == slow.tobytes() and details == slow_details
