"""The model zoo: one module per model, each with ``build(params, batch_size) -> Net``.

``params`` are a job's validated ``model_params`` (schemas in :mod:`jobs.config`); ``build`` runs
inside the caller's ``tf.Graph`` and returns the loss, the input placeholders by name and extra
update ops (:class:`jobs.models.layers.Net`). Importing this package does not import TensorFlow;
:func:`model_module` does.
"""

from __future__ import annotations

import importlib
from types import ModuleType

MODELS = ("word_rnn", "char_crn", "wrn", "transformer", "e3d_lstm")


def model_module(name: str) -> ModuleType:
    """The module that builds model ``name`` (one of :data:`MODELS`)."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; expected one of {', '.join(MODELS)}")
    return importlib.import_module(f"jobs.models.{name}")
