"""Small graphs with answers worked out by hand, and names, shared by several test modules."""

from __future__ import annotations

import numpy as np

from pardnn.costs.graph import CostGraph

CHEAP = ("single", "topological", "round_robin", "critical_path", "linear_clustering", "metis", "etf", "pipeline")


def small_graph() -> CostGraph:
    """A variable, its read and update, an optimizer slot and two compute ops; every field set."""
    return CostGraph.from_named_edges(
        ["w", "w/read", "dense/MatMul", "dense/BiasAdd", "w/Adam", "w/ApplyAdam"],
        [0.0, 1.5, 812.0, 3.25, 0.0, 40.0],
        [4096, 4096, 33554432, 33554432, 4096, 0],
        [
            ("w", "w/read"),
            ("w/read", "dense/MatMul"),
            ("dense/MatMul", "dense/BiasAdd", 1000),
            ("w", "w/ApplyAdam"),
            ("w/Adam", "w/ApplyAdam"),
            ("dense/BiasAdd", "w/ApplyAdam", 0),
        ],
        kind=["residual", "normal", "normal", "normal", "residual", "reference"],
        colocation=["w", None, None, None, "w", "w"],
        ops=["VariableV2", "Identity", "MatMul", "BiasAdd", "VariableV2", "ApplyAdam"],
        param_bytes=[4096, 0, 0, 0, 0, 0],
        name="small",
        memory_limit_bytes=2**30,
    )


def g1() -> tuple[CostGraph, np.ndarray]:
    """a(1) -> b(3) -> d(1); a -> c(1) -> d; c -> e(2). Edge weights: c->e 5, the others 1.

        tl: a 0, b 2, c 2, d 6, e 8      bl: a 10, b 5, c 8, d 1, e 2      w_lvl: a 10, b 7, c 10, d 7, e 10
    """
    g = CostGraph(list("abcde"), [1, 3, 1, 1, 2], [0] * 5, [0, 0, 1, 2, 2], [1, 2, 3, 3, 4])
    weight = np.array([1.0, 1.0, 1.0, 1.0, 5.0])  # edges sorted (a,b) (a,c) (b,d) (c,d) (c,e)
    return g, weight
