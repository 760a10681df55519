"""A trained job's model in Keras' own files: ``pardnn-launch --save-model`` and ``pardnn export``.

``describe(...)`` (at build time) records which graph variables are the model's weights, in Keras'
``model.weights`` order, and its inputs; :func:`save_model` rebuilds the user's model eagerly,
loads the values into it and writes ``.weights.h5`` (or ``.h5``) or ``.keras``. A zoo model has no
Keras class: its variables go into an HDF5 file by name. Rules and limits: docs/checkpoints.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jobs.config import Job, JobError
from pardnn.tfstack import keras3_model

__all__ = ["SUFFIXES", "check_path", "describe_keras", "describe_variables", "save_model"]

SUFFIXES = (".weights.h5", ".h5", ".keras")
KERAS, VARIABLES = "keras", "variables"


def describe_keras(model: Any, layout: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """What :func:`save_model` needs of a Keras model built in the job's graph: its weights' graph names
    (``model.weights`` order) and its inputs (name, shape without the batch, dtype) and call form."""
    from jobs.keras3 import graph_variable

    return {"kind": KERAS, "weights": [graph_variable(v).name for v in model.weights], "call": layout.call,
            "inputs": [{"name": name, "shape": inputs[name].shape.as_list()[1:], "dtype": inputs[name].dtype.name}
                       for name in layout.inputs]}


def describe_variables(variables: Sequence[Any]) -> dict[str, Any]:
    """A model without a Keras class (the zoo's, or a step): the variables it made, by graph name."""
    return {"kind": VARIABLES, "weights": [v.name for v in variables]}


def check_path(path: str | Path, what: str = "--save-model") -> Path:
    """``path`` if pardnn can write a model there (a known suffix, a folder it may create or write);
    else one line naming it. Checked before training, so a run never ends without its model."""
    path = Path(path)
    if not any(path.name.endswith(suffix) and len(path.name) > len(suffix) for suffix in SUFFIXES):
        raise JobError(f"{what} {path}: expected a file name ending in {', '.join(SUFFIXES)} (Keras' weights file, "
                       "or its whole-model format)")
    if path.is_dir():
        raise JobError(f"{what} {path}: is a folder; give a file name such as {path / 'model.weights.h5'}")
    folder = path.parent.resolve()
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise JobError(f"{what} {path}: cannot write into {existing} (permission denied or not a folder); choose a "
                       "folder you can write")
    if path.exists() and not os.access(path, os.W_OK):
        raise JobError(f"{what} {path}: the file exists and cannot be overwritten; choose another name")
    return path


def save_model(job: Job, model: Mapping[str, Any], values: Mapping[str, np.ndarray], path: str | Path) -> Path:
    """Write the trained ``values`` (by graph variable name) of the model ``model`` describes to ``path``.

    Raises
    ------
    JobError
        A path pardnn cannot write, a value missing for a weight, a user model that no longer builds or
        whose weights differ in number or shape from the trained graph's, or a format the model cannot take.
    """
    path = check_path(path)
    names = list(model.get("weights", []))
    missing = [name for name in names if name not in values]
    if missing:
        raise JobError(f"{path}: the trained values lack {len(missing)} of the model's weights ({missing[0]}, ...); "
                       "export from a checkpoint of this job")
    path.parent.mkdir(parents=True, exist_ok=True)
    if model.get("kind") == KERAS:
        _save_keras(job, model, [values[name] for name in names], path)
    else:
        _save_variables(job, names, values, path)
    return path


def _save_variables(job: Job, names: list[str], values: Mapping[str, np.ndarray], path: Path) -> None:
    if path.name.endswith(".keras"):
        raise JobError(f"{path}: {job.source} trains the zoo model {job.model!r} (or a step of its own), which has no "
                       "Keras class to save whole; write its weights by name with a .weights.h5 or .h5 name")
    import h5py

    tmp = path.with_name(f".{path.name}.partial{_suffix(path)}")
    with h5py.File(tmp, "w") as handle:
        handle.attrs["format"] = "pardnn-variables"
        handle.attrs["job"] = job.name
        for name in names:
            handle.create_dataset(name.removesuffix(":0"), data=np.asarray(values[name]))
    os.replace(tmp, path)


def keras_model(job: Job, model: Mapping[str, Any]) -> Any:
    """The user's model made anew by its ``[model] entry``, as a user's script makes it (call this outside
    any ``tf.Graph``: eagerly), and called once on zeros shaped like the trained inputs when it has no
    weights yet."""
    from jobs.entrypoints import MODEL_EXPECTED, call, resolve, takes
    from jobs.keras3 import is_model
    from jobs.precision import policy

    assert job.entry is not None
    function = resolve(job, "model.entry", job.entry)
    kwargs = dict(job.model_params)
    if takes(function, "batch_size"):
        kwargs["batch_size"] = job.batch_size
    with policy(job.precision):
        made = call(job, "model.entry", job.entry, function, (), kwargs, MODEL_EXPECTED)
        if not is_model(made):
            raise JobError(f"{job.source}: model.entry = {job.entry!r}: it returned {type(made).__name__} when called "
                           "outside the training graph, not the tf.keras.Model it was trained as")
        if len(made.weights) != len(model["weights"]):
            zeros = [np.zeros([1, *spec["shape"]], spec["dtype"]) for spec in model["inputs"]]
            names = [spec["name"] for spec in model["inputs"]]
            form = model.get("call")
            argument: Any = dict(zip(names, zeros)) if form == "dict" else zeros if form == "list" else zeros[0]
            made(argument, training=False)
    return made


def _save_keras(job: Job, model: Mapping[str, Any], weights: list[np.ndarray], path: Path) -> None:
    made = keras_model(job, model)
    keras3 = keras3_model(made)
    if keras3 and not path.name.endswith((".weights.h5", ".keras")):
        raise JobError(f"{path}: {job.source} trains a Keras {keras3} model, which Keras writes as .weights.h5 (its "
                       "weights) or .keras (the whole model); choose one of those names")
    shapes = [tuple(v.shape) for v in made.weights]
    if len(shapes) != len(weights) or any(s != w.shape for s, w in zip(shapes, weights)):
        first = next((i for i, (s, w) in enumerate(zip(shapes, weights)) if s != w.shape), min(len(shapes),
                                                                                                  len(weights)))
        raise JobError(f"{path}: {job.source}: model.entry = {job.entry!r} now makes {len(shapes)} weights, the "
                       f"trained graph had {len(weights)} (first difference at weight {first}: "
                       f"{made.weights[first].name if first < len(shapes) else '-'}); export with the model and "
                       "[model.args] the run trained")
    made.set_weights(weights)
    tmp = path.with_name(f".{path.name}.partial{_suffix(path)}")
    try:
        if path.name.endswith(".keras"):
            made.save(tmp)
        else:
            made.save_weights(tmp)
    except Exception as error:
        tmp.unlink(missing_ok=True)
        raise JobError(f"{path}: Keras could not save {type(made).__name__} ({type(error).__name__}: "
                       f"{str(error).splitlines()[0] if str(error) else ''}); "
                       + ("write its weights instead (a .weights.h5 name)" if path.name.endswith(".keras")
                          else "choose another path")) from error
    os.replace(tmp, path)


def _suffix(path: Path) -> str:
    return next(suffix for suffix in SUFFIXES if path.name.endswith(suffix))
