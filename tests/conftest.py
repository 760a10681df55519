"""Shared fixtures and hypothesis strategies: random DAGs with costs, kinds and colocation groups."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st

from pardnn.graph import CostGraph

# In CI the examples are derived from each test's source (derandomize), so a run is repeatable and a
# failure there is a real regression, not a new random draw; locally they are random.
settings.register_profile("default", deadline=None, max_examples=60, derandomize=bool(os.environ.get("CI")))
settings.load_profile("default")


@st.composite
def random_dags(draw: st.DrawFn, max_ops: int = 30, kinds: bool = True, groups: bool = True) -> CostGraph:
    """A DAG whose edges go from lower to higher index (any DAG can be numbered so), shuffled names."""
    n = draw(st.integers(1, max_ops))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    density = draw(st.sampled_from([0.05, 0.15, 0.4]))
    upper = np.triu(rng.random((n, n)) < density, k=1)
    src, dst = np.nonzero(upper)
    comp = np.round(rng.exponential(10.0, n), 3) * (rng.random(n) > 0.1)
    out = rng.integers(0, 5000, n) * (rng.random(n) > 0.1)
    edge_bytes = np.where(rng.random(src.size) < 0.1, 0, out[src])
    kind = rng.choice(3, n, p=[0.7, 0.2, 0.1]) if kinds else np.zeros(n, int)
    coloc: list[object] = [None] * n
    if groups:
        for i in range(n):
            if rng.random() < 0.3:
                coloc[i] = f"group{rng.integers(0, 4)}"
    names = [f"layer_{i}/op" for i in rng.permutation(n)]
    return CostGraph(names, comp, out, src, dst, edge_bytes, kind=kind.tolist(), colocation=coloc, name="random")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
