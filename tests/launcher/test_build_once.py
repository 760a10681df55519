"""Building the graph once: the hook's allreduces cost nothing in the placement and follow their variable."""

from __future__ import annotations

import dataclasses

import numpy as np

from launcher.training.dataparallel import HOOK_SCOPE, GradientAverager, local_costs


@dataclasses.dataclass(frozen=True)
class _Graph:
    names: list[str]
    comp_us: np.ndarray

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


def test_the_hooks_ops_take_no_time_in_the_placement():
    graph = _Graph(["dense/MatMul", f"{HOOK_SCOPE}/0/HorovodAllreduce", "apply"], np.array([5.0, 900.0, 2.0]))
    assert local_costs(graph).comp_us.tolist() == [5.0, 0.0, 2.0]
    plain = _Graph(["a", "b"], np.array([1.0, 2.0]))
    assert local_costs(plain) is plain


def test_a_hook_built_before_the_placement_places_its_ops_by_the_placement_given_later():
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        grad = tf.constant([1.0, 2.0], name="grad")
        with tf.compat.v1.name_scope(f"{HOOK_SCOPE}/0/"):
            tf.identity(grad, name="average")
    hook = GradientAverager(hvd=None)
    hook._scopes = {f"{HOOK_SCOPE}/0/": "dense/kernel"}  # what __call__ records: the gradient's variable
    assert hook.placement(graph, {"dense/kernel": 1}) == {f"{HOOK_SCOPE}/0/average": 1}
    assert hook.placement(graph, {}) == {f"{HOOK_SCOPE}/0/average": 0}
