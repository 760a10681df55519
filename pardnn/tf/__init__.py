"""The TensorFlow adapter: capture a training step, cost it, place it (docs/tensorflow.md).

``cost = pardnn.tf.profile(graph, [train_op, loss], feed_fn)`` (or ``capture``, ``estimate``), then
``pardnn.tf.apply(graph, result.placement, pardnn.tf.device_names(K), names=cost.names, order=result.order)``.
Importing this package imports TensorFlow; ``import pardnn`` does not.

May import: TensorFlow (the only package of pardnn that does), :mod:`pardnn.costs`, :mod:`pardnn.batch`,
:mod:`pardnn.tfstack`, :mod:`pardnn.errors`.
"""

from pardnn.tfstack import import_tensorflow as _import_tensorflow

_import_tensorflow()  # its environment first (Keras 2 as tf.keras, no INFO lines), its import without the collector

from pardnn.costs.presets import PRESETS, DevicePreset, machine_for, preset
from pardnn.tf.apply import ApplyReport, apply, device_names, session_config
from pardnn.tf.capture import capture, capture_with_report, colocation_groups, trace_step
from pardnn.tf.estimate import EstimateParts, OpCost, estimate, estimate_parts, estimate_with_report, op_cost, op_flops
from pardnn.tf.profile import ProfileReport, profile, profile_with_report
from pardnn.tf.sizing import SizingReport

__all__ = [
    "PRESETS",
    "ApplyReport",
    "DevicePreset",
    "EstimateParts",
    "OpCost",
    "ProfileReport",
    "SizingReport",
    "apply",
    "capture",
    "capture_with_report",
    "colocation_groups",
    "device_names",
    "estimate",
    "estimate_parts",
    "estimate_with_report",
    "machine_for",
    "op_cost",
    "op_flops",
    "preset",
    "profile",
    "profile_with_report",
    "session_config",
    "trace_step",
]
