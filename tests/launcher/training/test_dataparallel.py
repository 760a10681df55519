"""The Horovod gradient hook keeps each averaged gradient on its variable's device after apply."""

from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")

from launcher.training.dataparallel import HOOK_SCOPE, GradientAverager, find_horovod  # noqa: E402
from pardnn.tf import apply, capture, colocation_groups, device_names  # noqa: E402
from tests.launcher.standin import Job, build  # noqa: E402

pytestmark = pytest.mark.tf


class FakeHorovod:
    """Stands for ``horovod.tensorflow``: an "allreduce" of two ops on ``device_dense``."""

    Average = "average"

    def __init__(self) -> None:
        self.devices: list[str] = []

    def allreduce(self, tensor, op, device_dense, device_sparse):
        assert op == self.Average and device_dense == device_sparse
        self.devices.append(device_dense)
        with tf.device(device_dense):
            return tf.identity(tensor, name="HorovodAllreduce") * 1.0


def _split_placement(graph, names):
    """Colocation groups and lone ops alternate between two devices by a stable hash of their label."""
    groups = colocation_groups(graph)
    return {name: sum(map(ord, groups.get(name, name))) % 2 for name in names}


def test_averaged_gradients_and_their_clipped_values_sit_on_their_variables_device():
    job = Job()
    plain = build(job)
    names = capture(plain.graph, plain.fetches).names
    placement = _split_placement(plain.graph, names)
    devices = device_names(2)

    hvd = FakeHorovod()
    hook = GradientAverager(hvd, placement, devices)
    trained = build(job, gradient_hook=hook)
    added = hook.placement(trained.graph)
    apply(trained.graph, {**placement, **added}, devices)

    variables = {v.op.name: v for v in trained.variables}
    hooked = [op for op in trained.graph.get_operations() if op.name.startswith(HOOK_SCOPE + "/")]
    assert len(hooked) == 3 * 6  # identity, constant, multiply per gradient of 3 kernels and 3 biases
    by_scope = {}
    for op in hooked:
        by_scope.setdefault(op.name.split("/")[1], []).append(op)
    for ops in by_scope.values():
        assert len({op.device for op in ops}) == 1
    # Horovod was asked for each variable's device, in the order of the gradients.
    trainable = trained.graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
    assert hvd.devices == [devices[placement[v.op.name]] for v in trainable]
    for op in trained.graph.get_operations():
        if op.type == "ResourceApplyAdam":
            handle = op.inputs[0].op
            gradient = op.inputs[-1].op  # the clipped gradient
            assert gradient.device == handle.device == devices[placement[handle.name]], op.name
    assert {devices[placement[v]] for v in variables} == set(devices)  # the test splits variables


def test_one_node_needs_no_horovod():
    assert find_horovod(1) is None
