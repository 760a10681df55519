"""The TensorFlow adapter: capture a training step, cost it, place it.

::

    cost = pardnn.tf.profile(graph, [train_op, loss], feed_fn)     # or capture(...) / estimate(...)
    result = pardnn.partition(cost, pardnn.Machine(4))
    pardnn.tf.apply(graph, result.placement, pardnn.tf.device_names(4), names=cost.names)
    session = tf.compat.v1.Session(graph=graph, config=pardnn.tf.session_config(4))

Importing this package imports TensorFlow; ``import pardnn`` does not import it. The functions are
imported here by name, so ``pardnn.tf.profile`` is the function (its module is
``pardnn.tf.profile`` in ``sys.modules``).
"""

from pardnn.presets import PRESETS, DevicePreset, machine_for, preset
from pardnn.tf.apply import ApplyReport, apply, device_names, session_config
from pardnn.tf.capture import capture, colocation_groups, trace_step
from pardnn.tf.estimate import OpCost, estimate, estimate_parts, op_cost, op_flops
from pardnn.tf.profile import ProfileReport, profile, profile_with_report

__all__ = [
    "PRESETS",
    "ApplyReport",
    "DevicePreset",
    "OpCost",
    "ProfileReport",
    "apply",
    "capture",
    "colocation_groups",
    "device_names",
    "estimate",
    "estimate_parts",
    "machine_for",
    "op_cost",
    "op_flops",
    "preset",
    "profile",
    "profile_with_report",
    "session_config",
    "trace_step",
]
