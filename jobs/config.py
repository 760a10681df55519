"""Job files: what to train and how to place it, read from TOML and validated in one place.

A job file has a top-level ``name`` and the tables ``[model]`` (a zoo ``type`` and its
hyperparameters, or ``entry = "module:function"`` and ``[model.args]``), ``[train]``, ``[run]``,
``[placement]`` and ``[data]``; every key is in :mod:`jobs.schema`. :func:`load_job` reads one; a bad
key or value raises :class:`JobError` naming the file, the dotted key, the value and what is
allowed. Precedence: ``overrides`` (the command line), then the file, then the defaults.

This module does not import TensorFlow.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs.schema import (
    DATASETS,
    ENTRY,
    MODEL_PARAMS,
    PLACEMENT_TABLE,
    RUN_TABLE,
    TOP,
    TRAIN,
    BadOutput,
    check_model,
    is_entry,
    normalise,
    window_fits,
)
from pardnn.costs.machine import parse_bytes
from pardnn.errors import PardnnError
from pardnn.settings import REQUIRED, Param

__all__ = [
    "DATASETS",
    "JOBS_DIR",
    "MODEL_PARAMS",
    "PLACEMENT_TABLE",
    "RUN_TABLE",
    "TRAIN",
    "Job",
    "JobError",
    "Param",
    "job_from_dict",
    "load_job",
    "preset_names",
]

JOBS_DIR = Path(__file__).resolve().parent


class JobError(PardnnError, ValueError):
    """A bad job file: names the file, the dotted key, the bad value and what is allowed."""


@dataclass(frozen=True)
class Job:
    """A validated job: the model and its hyperparameters, training, run, placement and data settings.

    ``model`` is a zoo model type, or for the user's own model its ``[model] entry``
    (``"mypkg.net:build"``, also :attr:`entry`). ``model_params`` holds every key of a zoo model's
    schema (defaults filled in; lists as tuples), or the ``[model.args]`` of an entry. ``data`` is
    ``{"source", "path", ...}``, ``{"entry": "mypkg.net:batches"}`` (:attr:`data_entry`) or
    ``{"dataset": "mypkg.net:dataset"}`` (:attr:`dataset`).
    ``loss`` is one Keras loss name or a table by output name; ``given`` lists the dotted keys the
    file (or the overrides) set, so that what the file leaves out can come from a compiled model.
    Build it with :func:`load_job` or :func:`job_from_dict`.
    """

    name: str
    path: Path | None
    model: str
    model_params: dict[str, Any]
    batch_size: int
    optimizer: str = TRAIN["optimizer"].default
    learning_rate: float = TRAIN["learning_rate"].default
    seed: int = TRAIN["seed"].default
    momentum: float = TRAIN["momentum"].default
    weight_decay: float = TRAIN["weight_decay"].default
    schedule: str = TRAIN["schedule"].default
    warmup_steps: int = TRAIN["warmup_steps"].default
    decay_steps: int | None = TRAIN["decay_steps"].default
    decay_rate: float = TRAIN["decay_rate"].default
    min_learning_rate: float = TRAIN["min_learning_rate"].default
    precision: str = TRAIN["precision"].default
    grad_clip: float = TRAIN["grad_clip"].default
    micro_batches: int | str = TRAIN["micro_batches"].default  # or "auto" (pardnn-launch, max-batch)
    loss: str | dict[str, str] = TRAIN["loss"].default
    loss_weights: dict[str, float] | None = TRAIN["loss_weights"].default
    iterations: int = RUN_TABLE["iterations"].default
    window: tuple[int, int] = RUN_TABLE["window"].default
    stall_timeout: float | None = RUN_TABLE["stall_timeout"].default
    devices_per_node: int = PLACEMENT_TABLE["devices_per_node"].default
    memory: str | None = PLACEMENT_TABLE["memory"].default
    reserve: float = PLACEMENT_TABLE["reserve"].default
    memory_heuristic: str = PLACEMENT_TABLE["memory_heuristic"].default
    run_order: bool = PLACEMENT_TABLE["run_order"].default
    costs: str = PLACEMENT_TABLE["costs"].default
    device_preset: str = PLACEMENT_TABLE["device_preset"].default
    profile_steps: int = PLACEMENT_TABLE["profile_steps"].default
    placer: str = PLACEMENT_TABLE["placer"].default
    data: dict[str, Any] = field(default_factory=lambda: {"source": "synthetic", "path": None})
    evaluation: dict[str, Any] | None = None  # [eval]: validation while training (jobs.evaluation)
    given: tuple[str, ...] = ()

    @property
    def memory_bytes(self) -> int | None:
        """``memory`` in bytes (``None`` = unlimited)."""
        return None if self.memory is None else parse_bytes(self.memory, "placement.memory")

    @property
    def source(self) -> str:
        return self.path.as_posix() if self.path is not None else f"<job {self.name}>"

    @property
    def entry(self) -> str | None:
        """The ``[model] entry`` of the user's own model (``None`` for a zoo model)."""
        return self.model if ":" in self.model else None

    @property
    def data_entry(self) -> str | None:
        """The ``[data] entry`` giving the batches (``None``: the zoo's data, or a dataset)."""
        return self.data.get("entry")

    @property
    def dataset(self) -> str | None:
        """The ``[data] dataset`` making a ``tf.data.Dataset`` of batches (``None``: none)."""
        return self.data.get("dataset")

    def describe(self) -> str:
        params = ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in self.model_params.items())
        loss = f", loss {self.loss}" if self.entry else ""
        return (f"{self.name}: {self.model}({params}); batch {self.batch_size}, {self.optimizer} "
                f"lr {self.learning_rate:g}{loss}; data {self.data_entry or self.dataset or self.data.get('source')}")


def with_setting(job: Job, key: str, value: Any) -> Job:
    """``job`` with ``[train] key = value``, as if its file had said so (a command line's override)."""
    return dataclasses.replace(job, **{key: value}, given=tuple(dict.fromkeys((*job.given, f"train.{key}"))))


def preset_names() -> list[str]:
    """Names of the job files in :data:`JOBS_DIR` (``load_job`` accepts them)."""
    return sorted(path.stem for path in JOBS_DIR.glob("*.toml"))


def _resolve(path_or_name: str | Path) -> Path:
    path = Path(path_or_name)
    if path.suffix == ".toml" or path.exists() or len(path.parts) > 1:
        return path
    return JOBS_DIR / f"{path}.toml"


def load_job(path_or_name: str | Path, overrides: Mapping[str, Any] | None = None) -> Job:
    """Read and validate a job file, or a preset by name (``"trn-tiny"`` → ``jobs/trn-tiny.toml``).

    Parameters
    ----------
    path_or_name:
        A ``.toml`` path, or the stem of a file in :data:`JOBS_DIR`.
    overrides:
        Dotted keys to values that replace the file's (``{"train.batch_size": 8}``), validated the
        same way; errors name them as overrides.

    Raises
    ------
    JobError
        An unreadable file, invalid TOML, an unknown preset, or any bad key (see the module docstring).
    """
    path = _resolve(path_or_name)
    if not path.is_file():
        if path.parent == JOBS_DIR and Path(path_or_name).suffix != ".toml":
            raise JobError(f"no job file {str(path_or_name)!r}: not a file, and not a preset; presets are "
                           + ", ".join(preset_names()))
        raise JobError(f"{path}: no such job file")
    try:
        with path.open("rb") as stream:
            data = tomllib.load(stream)
    except tomllib.TOMLDecodeError as error:
        raise JobError(f"{path}: invalid TOML: {error}") from None
    except OSError as error:
        raise JobError(f"{path}: cannot read: {error.strerror or error}") from None
    return job_from_dict(data, path=path, overrides=overrides)


def _apply_overrides(data: dict[str, Any], overrides: Mapping[str, Any], source: str) -> dict[str, Any]:
    merged = {key: dict(value) if isinstance(value, dict) else value for key, value in data.items()}
    for dotted, value in overrides.items():
        table, _, key = dotted.rpartition(".")
        if not table:
            merged[key] = value
            continue
        if "." in table:
            raise JobError(f"{source}: override {dotted!r}: expected 'table.key' or 'key'")
        section = merged.setdefault(table, {})
        if not isinstance(section, dict):
            raise JobError(f"{source}: override {dotted!r}: {table!r} is not a table")
        section[key] = value
    return merged


class _Validator:
    def __init__(self, source: str, overridden: set[str]) -> None:
        self.source = source
        self.overridden = overridden

    def fail(self, key: str, value: Any, expected: str) -> None:
        origin = " (override)" if key in self.overridden else ""
        raise JobError(f"{self.source}: {key} = {_show(value)}{origin}: expected {expected}")

    def table(self, data: dict[str, Any], name: str, schema: Mapping[str, Param], *, what: str = "") -> dict[str, Any]:
        raw = data.get(name, {})
        if not isinstance(raw, dict):
            self.fail(name, raw, f"a table [{name}]")
        return self.keys(raw, schema, prefix=f"{name}.", where=what or f"[{name}]", skip=())

    def keys(self, raw: Mapping[str, Any], schema: Mapping[str, Param], *, prefix: str, where: str,
             skip: tuple[str, ...]) -> dict[str, Any]:
        for key in raw:
            if key not in schema and key not in skip:
                allowed = ", ".join(sorted([*schema, *skip]))
                raise JobError(f"{self.source}: unknown key {prefix}{key}; {where} allows: {allowed}")
        values: dict[str, Any] = {}
        for key, param in schema.items():
            if key not in raw:
                if param.required:
                    raise JobError(f"{self.source}: missing key {prefix}{key}: expected {param.expected()}"
                                   + (f"; {param.help}" if param.help else ""))
                values[key] = param.default
                continue
            try:
                values[key] = param.check(normalise(key, raw[key]))
            except BadOutput as bad:
                self.fail(f"{prefix}{key}.{bad.output}", bad.value, Param.expected(param))
            except ValueError:
                self.fail(prefix + key, raw[key], param.expected())
        return values


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{...}"
    return repr(value)


def job_from_dict(data: Mapping[str, Any], *, path: Path | None = None, name: str | None = None,
                  overrides: Mapping[str, Any] | None = None) -> Job:
    """Validate a parsed job document (as :func:`tomllib.load` returns it) into a :class:`Job`."""
    source = path.as_posix() if path is not None else f"<job {name or 'dict'}>"
    raw = _apply_overrides(dict(data), overrides or {}, source)
    check = _Validator(source, set(overrides or {}))
    sections = {"model", "train", "run", "placement", "data", "eval"}
    for key in raw:
        if key not in TOP and key not in sections:
            raise JobError(f"{source}: unknown key {key}; a job file has the key name and the tables "
                           + ", ".join(f"[{s}]" for s in sorted(sections)))
    top = check.keys({k: v for k, v in raw.items() if k in TOP}, TOP, prefix="", where="the top level", skip=())
    job_name = top["name"] or name or (path.stem if path is not None else "job")

    model_type, params = _model(raw.get("model"), check)
    train = check.table(raw, "train", TRAIN)
    for key in ("loss", "loss_weights"):
        if ":" not in model_type and key in raw.get("train", {}):
            check.fail(f"train.{key}", raw["train"][key], f"no train.{key}: the zoo model {model_type!r} has its own "
                       f"loss (train.{key} is for a [model] entry returning a tf.keras.Model)")
    run = check.table(raw, "run", RUN_TABLE)
    start, end = run["window"]
    if not window_fits(run["window"], run["iterations"]):
        default = "" if "window" in raw.get("run", {}) else " (the default)"
        raise JobError(f"{source}: run.window = [{start}, {end}]{default} does not fit run.iterations = "
                       f"{run['iterations']}: expected 0 <= start < end <= {run['iterations']}")
    placement = check.table(raw, "placement", PLACEMENT_TABLE)
    data_section = _data(raw.get("data", {}), model_type, check)
    evaluation = _eval(raw["eval"], model_type, check) if "eval" in raw else None
    given = tuple(f"{table}.{key}" for table in sorted(sections) if isinstance(raw.get(table), dict)
                  for key in raw[table])
    return Job(name=job_name, path=path, model=model_type, model_params=params, **train, **run, **placement,
               data=data_section, evaluation=evaluation, given=given)


_ZOO = ", ".join(repr(m) for m in MODEL_PARAMS)
_EITHER = f"type = one of {_ZOO} (a zoo model), or entry = {ENTRY} (your own model)"


def _model(raw: Any, check: _Validator) -> tuple[str, dict[str, Any]]:
    """``(type, hyperparameters)`` of a zoo model, or ``(entry, args)`` of the user's own."""
    if not isinstance(raw, dict):
        raise JobError(f"{check.source}: missing table [model]: give type = " + " | ".join(map(repr, MODEL_PARAMS))
                       + f" (a zoo model), or entry = {ENTRY} (your own model)")
    if "type" in raw and "entry" in raw:
        raise JobError(f"{check.source}: model.type = {_show(raw['type'])} and model.entry = "
                       f"{_show(raw['entry'])}: expected one of them: {_EITHER}")
    if "entry" in raw:
        return _user_model(raw, check)
    model_type = raw.get("type", REQUIRED)
    if model_type is REQUIRED:
        raise JobError(f"{check.source}: missing key model.type: expected one of {_ZOO} (a zoo model), "
                       f"or give model.entry = {ENTRY} (your own model)")
    if model_type not in MODEL_PARAMS:
        check.fail("model.type", model_type, f"one of {_ZOO}; or [model] entry = {ENTRY} for your own model")
    schema = MODEL_PARAMS[model_type]
    params = check.keys(raw, schema, prefix="model.", where=f"[model] of type {model_type!r}", skip=("type",))
    check_model(model_type, params, lambda key, value, expected: check.fail(f"model.{key}", value, expected))
    return model_type, params


def _user_model(raw: dict[str, Any], check: _Validator) -> tuple[str, dict[str, Any]]:
    for key in raw:
        if key not in ("entry", "args"):
            raise JobError(f"{check.source}: unknown key model.{key}; [model] with entry allows: args, entry "
                           "(your function's keyword arguments go in the table [model.args])")
    entry, args = raw["entry"], raw.get("args", {})
    if not is_entry(entry):
        check.fail("model.entry", entry, f"{ENTRY}: a function returning a tf.keras.Model, or a step with loss "
                   "and inputs")
    if not isinstance(args, dict):
        check.fail("model.args", args, "a table [model.args] of keyword arguments for the entry function")
    if "batch_size" in args:
        check.fail("model.args.batch_size", args["batch_size"], "no batch_size here: set train.batch_size (the "
                   "function gets batch_size= when it takes a parameter of that name)")
    return entry, dict(args)


EVAL: dict[str, Param] = {
    "entry": Param("str", None, help="fn(iteration, batch_size, rank, ranks) giving validation batch i ([data] entry's "
                                     "form)"),
    "dataset": Param("str", None, help="fn(batch_size, rank, ranks) returning a tf.data.Dataset of validation batches"),
    "every": Param("int", 0, 0, help="validate every N iterations, and after the last (0: after the last only)"),
    "batches": Param("int", 4, 1, help="validation batches per rank each time"),
    "batch_size": Param("int", None, 1, help="samples per validation batch (default: [train] batch_size)"),
}


def _eval(raw: Any, model: str, check: _Validator) -> dict[str, Any]:
    """``[eval]``: a validation source (``entry`` or ``dataset``), how often, how many batches, and the
    metrics (default: the model's compiled ones)."""
    if not isinstance(raw, dict):
        check.fail("eval", raw, "a table [eval]")
    if ":" not in model:
        raise JobError(f"{check.source}: [eval]: validation is for a [model] entry (a Keras model); the zoo model "
                       f"{model!r} has no inference step")
    metrics = raw.get("metrics")
    values = check.keys(raw, EVAL, prefix="eval.", where="[eval]", skip=("metrics",))
    sources = [key for key in ("entry", "dataset") if values[key] is not None]
    if len(sources) != 1:
        raise JobError(f"{check.source}: [eval]: expected one of entry = {ENTRY} (validation batches from a function, "
                       f"as [data] entry) or dataset = {ENTRY} (a tf.data.Dataset), "
                       + ("got both" if sources else "got neither"))
    if not is_entry(values[sources[0]]):
        check.fail(f"eval.{sources[0]}", values[sources[0]], ENTRY)
    if metrics is not None and (not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics)):
        check.fail("eval.metrics", metrics, "a list of Keras metric names, e.g. ['accuracy']")
    return {**values, "metrics": None if metrics is None else list(metrics)}


def _data(raw: Any, model: str, check: _Validator) -> dict[str, Any]:
    if not isinstance(raw, dict):
        check.fail("data", raw, "a table [data]")
    if "dataset" in raw:
        others = sorted(set(raw) - {"dataset"})
        if others:
            raise JobError(f"{check.source}: data.dataset and data.{others[0]}: expected one of them: dataset = "
                           f"{ENTRY} making a tf.data.Dataset, entry = {ENTRY} giving NumPy batches, or source "
                           "(and path) of the zoo's data")
        if not is_entry(raw["dataset"]):
            check.fail("data.dataset", raw["dataset"], f"{ENTRY}: a function fn(batch_size, rank, ranks) returning "
                       "a tf.data.Dataset of batches")
        if ":" not in model:
            raise JobError(f"{check.source}: data.dataset = {_show(raw['dataset'])}: the zoo model {model!r} reads "
                           "its own data ([data] source); a tf.data.Dataset feeds a [model] entry")
        return {"dataset": raw["dataset"]}
    if "entry" in raw:
        others = sorted(set(raw) - {"entry"})
        if others:
            raise JobError(f"{check.source}: data.entry and data.{others[0]}: expected one of them: entry = "
                           f"{ENTRY} giving the batches, or source (and path) of the zoo's data")
        if not is_entry(raw["entry"]):
            check.fail("data.entry", raw["entry"], f"{ENTRY}: a function fn(iteration, batch_size, rank, ranks) "
                       "returning a batch")
        return {"entry": raw["entry"]}
    if ":" in model:
        raise JobError(f"{check.source}: missing key data.entry: expected {ENTRY}, a function "
                       "fn(iteration, batch_size, rank, ranks) giving the batches of model.entry = "
                       f"{_show(model)} (or data.dataset = {ENTRY}, a function fn(batch_size, rank, ranks) "
                       "returning a tf.data.Dataset)")
    sources = ["synthetic", *(name for name, (models, _) in DATASETS.items() if model in models)]
    source = raw.get("source", "synthetic")
    if source not in sources:
        check.fail("data.source", source, f"for model type {model!r} one of " + ", ".join(map(repr, sources)))
    extra = DATASETS[source][1] if source in DATASETS else {}
    schema = {"source": Param("str", "synthetic"), "path": Param("str", None), **extra}
    values = check.keys(raw, schema, prefix="data.", where=f"[data] with source {source!r}", skip=())
    if source != "synthetic" and values["path"] is None:
        raise JobError(f"{check.source}: missing key data.path: the local path of the {source} files "
                       "(relative paths are taken from the working directory)")
    return values
