"""Which TensorFlow stack runs (pinned 2.15 with Horovod, or latest with ``tf-keras``), and its environment.

:func:`prepare` (called before TensorFlow is imported) sets ``TF_USE_LEGACY_KERAS=1`` when ``tf_keras`` is
installed; :func:`check_keras` raises when Keras 3 is already fixed; :func:`keras3_model` tells a Keras 3
object without importing anything (Keras 3 models train through jobs.keras3). :func:`import_tensorflow`
imports it with the cyclic garbage collector paused, and in pardnn's own processes (:func:`own_process`)
keeps the collector off what the import made. Imports neither TensorFlow nor Keras on its own import.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

__all__ = ["KERAS3_FIX", "check_keras", "collector_paused", "import_tensorflow", "keras3_model", "keras3_module",
           "keras_in_use", "own_process", "prepare"]

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


def own_process() -> None:
    """Say that this process is pardnn's own (``pardnn-launch``, ``pardnn capture``/``max-batch``/``plan``): when
    :func:`import_tensorflow` then imports TensorFlow, it freezes what the import made (:func:`gc.freeze`), so the
    collector's later passes, which a graph build's millions of objects set off, no longer walk the modules'
    objects (a word-rnn build: 7.6 -> 6.6 s of CPU). Freezing right after the import keeps no garbage alive;
    a library call never freezes (it would keep its user's cyclic garbage), nor does a process whose TensorFlow
    was imported before this call."""
    global _own
    _own = True


_own = False


def import_tensorflow() -> ModuleType:
    """``tensorflow``, imported after :func:`prepare` with Python's cyclic garbage collector paused (then
    restored as it was), and frozen in pardnn's own processes (:func:`own_process`); the module at once when
    already imported.

    The import makes about a million objects and next to no garbage, and the collector's passes over them
    were a quarter of its CPU time: 6.5 -> 4.9 s on the 2-core development machine, once per process
    (every ``pardnn-launch`` rank imports TensorFlow)."""
    module = sys.modules.get("tensorflow")
    if module is not None:
        return module
    prepare()
    with collector_paused():
        module = importlib.import_module("tensorflow")
        if _own:
            gc.freeze()
    return module


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off inside the block, then as it was (also when the block raises)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


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


def keras3_module() -> Any:
    """The ``keras`` module when it is imported and is Keras 3, else ``None`` (imports nothing)."""
    keras = sys.modules.get("keras")
    return keras if str(getattr(keras, "__version__", "")).startswith("3.") else None


def keras3_model(value: Any) -> str | None:
    """The Keras 3 version when ``value`` is an object of Keras 3 (``import keras`` 3.x) or of a subclass of
    one, else ``None``."""
    modules = [getattr(cls, "__module__", "") or "" for cls in type(value).__mro__]  # a user's subclass too
    if not any(module == "keras" or module.startswith("keras.") for module in modules):
        return None
    keras = keras3_module()
    return None if keras is None else str(keras.__version__)
