"""Which TensorFlow stack runs, and the environment TensorFlow must see before it is imported.

pardnn supports two stacks (README "Setting up"):

- **pinned**: TensorFlow 2.15.1, whose ``tf.keras`` is Keras 2 (the ``keras`` 2.15 package), with
  Horovod 0.28.1 built against it;
- **latest**: TensorFlow 2.21 with the ``tf-keras`` package (Keras 2 for TensorFlow 2.16 and later),
  gradients averaged through mpi4py, since Horovod 0.28.1 does not build against TensorFlow 2.16 or later.

From TensorFlow 2.16 on, ``tf.keras`` is Keras 3 unless ``TF_USE_LEGACY_KERAS`` is set when
``tf.keras`` is first used; Keras 3 has no ``tf.compat.v1`` graph mode, which pardnn's capture,
placement and training need. :func:`prepare` (called by ``pardnn.tf``, ``jobs`` and ``launcher``
before they import TensorFlow) therefore sets ``TF_USE_LEGACY_KERAS=1`` when the ``tf_keras``
package is installed and the variable is unset. It is not set without ``tf_keras``: TensorFlow 2.15
honours the variable too and then fails to find ``tf_keras``. (The ``pardnn`` commands that import
TensorFlow also hide its INFO lines: :func:`jobs.tfimport.quiet`; ``pardnn-launch`` keeps them in
each rank's log instead and filters its console.)

A user who imported TensorFlow and used ``tf.keras`` before pardnn was imported has Keras 3 fixed
for the process: :func:`prepare` says so in one line, and :func:`check_keras` (called where a graph
is built) raises with what to change. :func:`keras3_model` tells a Keras 3 model object (``import
keras`` 3.x) from a Keras 2 one without importing anything.

This module imports neither TensorFlow nor Keras.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

__all__ = ["KERAS3_FIX", "check_keras", "keras3_model", "keras_in_use", "prepare"]

KERAS3_FIX = ("pardnn needs Keras 2 as tf.keras: pip install tf-keras (the release matching TensorFlow's) and set "
              "TF_USE_LEGACY_KERAS=1 before TensorFlow is imported (importing pardnn, jobs or launcher first sets it)")

_said = False


def _tf_keras_installed() -> bool:
    try:
        return importlib.util.find_spec("tf_keras") is not None
    except (ImportError, ValueError):
        return False


def keras_in_use() -> str | None:
    """``"keras_3"``, ``"tf_keras"`` or ``"keras_2"`` once ``tf.keras`` was first used in this process;
    ``None`` before (or on a TensorFlow without the lazy loader). Triggers no import."""
    tf = sys.modules.get("tensorflow")
    loader = None if tf is None else vars(tf).get("keras")
    if loader is None or not hasattr(loader, "__dict__"):
        return None
    state = vars(loader)
    if not state.get("_initialized", False):
        return None
    version = state.get("_keras_version")
    return version if isinstance(version, str) else None


def prepare() -> None:
    """Set TensorFlow's environment before it is imported (module docstring); idempotent."""
    global _said
    if "TF_USE_LEGACY_KERAS" not in os.environ and _tf_keras_installed():
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
    if keras_in_use() == "keras_3" and not _said:
        _said = True
        print("pardnn: warning: TensorFlow was imported and tf.keras used as Keras 3 before pardnn; "
              f"{KERAS3_FIX}", file=sys.stderr)


def check_keras(where: str = "pardnn") -> None:
    """Raise :class:`~pardnn.errors.MissingDependencyError` naming what to change when ``tf.keras`` is
    (or will be) Keras 3.

    Call after importing TensorFlow, before building a graph with ``tf.keras``. Resolves ``tf.keras``
    if it was not used yet (the environment :func:`prepare` set decides then).
    """
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return
    if keras_in_use() is None:
        loader = vars(tf).get("keras")
        if loader is None:
            return
        try:
            loader.Model  # noqa: B018  (resolves the lazy loader)
        except Exception:
            return
    if keras_in_use() == "keras_3":
        version = getattr(tf, "__version__", "?")
        from pardnn.errors import MissingDependencyError

        raise MissingDependencyError(f"{where}: tf.keras is Keras 3 in this process (TensorFlow {version}); "
                                     f"{KERAS3_FIX}")


def keras3_model(value: Any) -> str | None:
    """The Keras 3 version when ``value`` is an object of Keras 3 (``import keras`` 3.x), else ``None``."""
    module = type(value).__module__ or ""
    if not (module == "keras" or module.startswith("keras.")):
        return None
    keras = sys.modules.get("keras")
    version = str(getattr(keras, "__version__", ""))
    return version if version.startswith("3.") else None
