"""The bound on a micro-batched step from its plain step (pardnn.plan.microbound), worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from pardnn import CostGraph
from pardnn.plan.microbound import PlainTerms, launch_bound_us, micro_bound_us, repeated_ops


def plain_step() -> CostGraph:
    """A plain step by hand: input x and variable v (read by r) into the forward op a, the loss, the
    gradient of a (ga) and the variable's gradient g, which the update reads; upd is a batch-norm-like
    update of a that feeds no gradient."""
    names = ["x", "v", "r", "a", "loss", "ga", "g", "apply", "upd"]
    comp = [0.0, 0.0, 1.0, 10.0, 2.0, 10.0, 5.0, 3.0, 4.0]
    edges = [("x", "a"), ("v", "r"), ("r", "a"), ("a", "loss"), ("loss", "ga"), ("r", "ga"), ("ga", "g"),
             ("x", "g"), ("g", "apply"), ("v", "apply"), ("a", "upd")]
    index = {name: i for i, name in enumerate(names)}
    src = [index[s] for s, _ in edges]
    dst = [index[d] for _, d in edges]
    return CostGraph(names, comp, [4] * len(names), src, dst)


def test_the_repeated_ops_depend_on_the_samples_and_feed_a_gradient() -> None:
    graph = plain_step()
    repeated = repeated_ops(graph, ["x"], ["g"])
    assert [graph.names[i] for i in np.flatnonzero(repeated)] == ["x", "a", "loss", "ga", "g"]
    assert not repeated_ops(graph, ["not-here"], ["g"]).any()  # names not in the graph: nothing repeated


@pytest.mark.parametrize(("micro", "devices", "bound"), [
    (4, 2, (35 + 3 * 27) / 2),  # compute 35, repeated 27: (35 + 3 x 27) / 2 = 58
    (2, 1, 35 + 27.0),
    (4, 8, 31.0),  # (35 + 81) / 8 = 14.5 is under the critical path r-a-loss-ga-g-apply: 31
])
def test_the_bound_is_the_compute_of_the_copies_over_k_or_the_critical_path(micro, devices, bound) -> None:
    graph = plain_step()
    terms = PlainTerms.of(graph, repeated_ops(graph, ["x"], ["g"]))
    assert (terms.total_us, terms.repeated_us, terms.critical_us) == (35.0, 27.0, 31.0)
    assert micro_bound_us(terms, micro, devices) == bound


@pytest.mark.parametrize(("micro", "devices", "bound"), [
    (4, 2, 5.0 * (7 + 3 * 4) / 2),  # 7 kernels, 4 of them repeated: 19 launches over 2 devices
    (2, 1, 5.0 * 11),
    (4, 8, 5.0 * 6),  # 19 / 8 launches is under the 6 kernels of r-a-loss-ga-g-apply
])
def test_the_launch_bound_counts_the_kernels_of_the_copies_over_k_or_on_one_path(micro, devices, bound) -> None:
    """The step above with x and v launching no kernel (a placeholder and a variable): 7 kernels, of which
    a, loss, ga and g are repeated; the path with the most kernels is r-a-loss-ga-g-apply (6). At 5 us a
    launch, whatever each op's own time."""
    graph = plain_step()
    kernel = np.array([name not in ("x", "v") for name in graph.names])
    terms = PlainTerms.of(graph, repeated_ops(graph, ["x"], ["g"]), kernel)
    assert terms.shape == (9, 7, 4, 6)
    assert launch_bound_us(terms, micro, devices, 5.0) == bound
    assert PlainTerms.of(graph, repeated_ops(graph, ["x"], ["g"])).shape == (9, 0, 0, 0)  # kernels not known
