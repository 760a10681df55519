"""Job files: what to train and how to place it, read from TOML and validated in one place.

A job file has a top-level ``name`` (default: the file's stem) and the tables ``[model]`` (``type``
and the model's hyperparameters), ``[train]``, ``[run]``, ``[placement]`` and ``[data]``. Every key
is listed in a schema below with its type, default and allowed values; an unknown key, a value of
the wrong type or out of range raises :class:`JobError` naming the file, the dotted key, the value
and what is allowed. Precedence: ``overrides`` (the command line), then the file, then the defaults.

This module does not import TensorFlow.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pardnn.errors import PardnnError
from pardnn.machine import parse_bytes

__all__ = [
    "DATASETS",
    "JOBS_DIR",
    "MODEL_PARAMS",
    "Job",
    "JobError",
    "Param",
    "job_from_dict",
    "load_job",
    "preset_names",
]

JOBS_DIR = Path(__file__).resolve().parent
_REQUIRED = object()
_DERIVED = None  # default of a key whose value follows from others (documented per key)


class JobError(PardnnError, ValueError):
    """A bad job file: names the file, the dotted key, the bad value and what is allowed."""


@dataclass(frozen=True)
class Param:
    """One key of a job file: its type, default and allowed values.

    ``kind`` is ``int``, ``float``, ``bool``, ``str``, ``int_list`` (non-empty list of whole numbers,
    each checked against ``low``/``high``) or ``int_pair``. Bounds are inclusive, except ``low`` when
    ``low_open``.
    """

    kind: str
    default: Any = _REQUIRED
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple[Any, ...] | None = None
    help: str = ""

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    def expected(self) -> str:
        """What the key accepts, in words: ``a whole number >= 1``, ``one of 'adam', 'momentum'``."""
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        noun = {"int": "a whole number", "float": "a number", "bool": "true or false", "str": "a string",
                "int_list": "a non-empty list of whole numbers", "int_pair": "a pair [start, end] of whole numbers"}
        words = noun[self.kind]
        if self.low is not None and self.high is not None:
            words += f" in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"
        elif self.low is not None:
            words += f" {'>' if self.low_open else '>='} {self.low:g}"
        elif self.high is not None:
            words += f" <= {self.high:g}"
        return words

    def check(self, value: Any) -> Any:
        """The value, normalised (ints to floats for ``float``, lists to tuples); ``ValueError`` if bad."""
        if self.kind == "int_list":
            if not isinstance(value, list) or not value:
                raise ValueError
            return tuple(self._scalar("int", item) for item in value)
        if self.kind == "int_pair":
            if not isinstance(value, list) or len(value) != 2:
                raise ValueError
            return tuple(self._scalar("int", item, bounded=False) for item in value)
        return self._scalar(self.kind, value)

    def _scalar(self, kind: str, value: Any, *, bounded: bool = True) -> Any:
        if kind == "bool":
            if not isinstance(value, bool):
                raise ValueError
            return value
        if kind == "str":
            if not isinstance(value, str):
                raise ValueError
        elif kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError
        elif kind == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError
            value = float(value)
        if self.choices is not None and value not in self.choices:
            raise ValueError
        if bounded and kind in ("int", "float"):
            if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
                raise ValueError
            if self.high is not None and value > self.high:
                raise ValueError
        return value


def _int(default: Any = _REQUIRED, low: float | None = 1, high: float | None = None, help: str = "") -> Param:
    return Param("int", default, low, high, help=help)


def _float(default: Any = _REQUIRED, low: float | None = None, high: float | None = None, *,
           low_open: bool = False, help: str = "") -> Param:
    return Param("float", default, low, high, low_open, help=help)


def _choice(default: Any, *choices: str, help: str = "") -> Param:
    return Param("str", default, choices=choices, help=help)


TOP = {"name": Param("str", _DERIVED, help="job name (default: the file's stem)")}

TRAIN = {
    "batch_size": _int(help="samples per step on one node (the launcher may override it)"),
    "optimizer": _choice("adam", "adam", "momentum"),
    "learning_rate": _float(1e-3, 0.0, low_open=True),
    "momentum": _float(0.9, 0.0, 1.0, help="momentum optimizer's momentum"),
    "grad_clip": _float(0.0, 0.0, help="clip gradients by their global norm; 0 = off"),
    "seed": _int(0, 0, help="graph-level random seed: weights, dropout and synthetic data"),
}

RUN = {
    "iterations": _int(150, 1),
    "window": Param("int_pair", (100, 150), help="measured iterations [start, end): inclusive start, exclusive end"),
}

PLACEMENT = {
    "devices_per_node": _int(4, 1),
    "memory": Param("str", None, help="memory per device, e.g. '32GiB'; absent = unlimited"),
    "reserve": _float(0.1, 0.0, 0.99),
    "memory_heuristic": _choice("overflow", "overflow", "balance", "none"),
    "costs": _choice("profile", "profile", "estimate"),
    "device_preset": Param("str", "v100-32gb", help="pardnn.presets name (v100-32gb, a100-80gb, h100-80gb)"),
    "profile_steps": _int(5, 1),
}

# dataset name -> (models it feeds, extra [data] keys besides ``source`` and ``path``)
DATASETS: dict[str, tuple[tuple[str, ...], dict[str, Param]]] = {
    "tiny_shakespeare": (("word_rnn", "char_crn"), {}),
    "ptb": (("word_rnn", "char_crn"), {}),
    "cifar100": (("wrn",), {}),
    "moving_mnist": (("e3d_lstm",), {}),
    "iwslt16": (("transformer",), {
        "source_lang": Param("str", "de", help="source file suffix: <path>.<source_lang>"),
        "target_lang": Param("str", "en", help="target file suffix: <path>.<target_lang>"),
    }),
}

_LSTM = {
    "layers": _int(2),
    "hidden_size": _int(256),
    "seq_length": _int(25, help="unrolled time steps"),
    "dropout": _float(0.0, 0.0, 0.95, help="dropout rate on each LSTM layer's output"),
    "forget_bias": _float(1.0),
}

MODEL_PARAMS: dict[str, dict[str, Param]] = {
    # Defaults follow the original code of each model (see the model modules).
    "word_rnn": {
        "vocab_size": _int(25_000, 2, help="words; a real dataset keeps its vocab_size - 1 most frequent + <unk>"),
        "embedding_size": _int(_DERIVED, help="default: hidden_size"),
        **_LSTM,
    },
    "char_crn": {
        "word_vocab_size": _int(10_000, 2),
        "char_vocab_size": _int(51, 5, help="characters incl. padding, start/end of word and unknown"),
        "max_word_length": _int(21, 3, help="characters per word incl. start and end markers"),
        "char_embed_size": _int(15),
        "kernel_widths": Param("int_list", (1, 2, 3, 4, 5, 6, 7), 1),
        "kernel_features": Param("int_list", (50, 100, 150, 200, 200, 200, 200), 1),
        "highway_layers": _int(2, 0),
        **_LSTM,
        "hidden_size": _int(650),
        "seq_length": _int(35, help="unrolled time steps"),
        "dropout": _float(0.5, 0.0, 0.95, help="dropout rate on each LSTM layer's output"),
        "forget_bias": _float(0.0),
    },
    "wrn": {
        "units": _int(4, help="residual units per group; depth = 6 * units + 4"),
        "widen_factor": _int(10),
        "num_classes": _int(100, 2),
        "image_size": _int(32, 4),
        "dropout": _float(0.0, 0.0, 0.95, help="dropout rate between a unit's two convolutions"),
        "weight_decay": _float(5e-4, 0.0),
        "bn_momentum": _float(0.9, 0.0, 1.0, help="decay of the batch-norm moving averages"),
    },
    "transformer": {
        "encoder_layers": _int(6),
        "decoder_layers": _int(6),
        "model_dim": _int(512),
        "inner_dim": _int(2048, help="feed-forward inner dimension"),
        "heads": _int(8),
        "vocab_size": _int(32_000, 4, help="shared source/target vocabulary incl. <pad>, <unk>, <eos>"),
        "source_length": _int(64),
        "target_length": _int(64),
        "dropout": _float(0.1, 0.0, 0.95),
        "share_embeddings": Param("bool", True, help="one matrix for source, target embedding and softmax"),
    },
    "e3d_lstm": {
        "layers": _int(4),
        "hidden": _int(64, help="hidden state channels of every layer"),
        "filter_size": _int(5, help="spatial kernel size; the temporal kernel is window_length"),
        "window_length": _int(2, 2, help="frames per 3D input window (stride 1)"),
        "patch_size": _int(4, help="frames are cut into patch_size x patch_size patches stacked as channels"),
        "image_size": _int(64),
        "image_channels": _int(1),
        "input_length": _int(10, help="observed frames"),
        "total_length": _int(20, 2, help="observed + predicted frames"),
        "layer_norm": Param("bool", True),
        "forget_bias": _float(1.0),
        "sampling_decay": _float(2e-5, 0.0, 1.0, help="scheduled sampling: P(true frame) = 1 - decay * step"),
    },
}


def _check_model(model: str, params: dict[str, Any], fail: Callable[[str, Any, str], None]) -> None:
    """Rules between keys of one model."""
    if model == "word_rnn" and params["embedding_size"] is None:
        params["embedding_size"] = params["hidden_size"]
    elif model == "char_crn":
        if len(params["kernel_widths"]) != len(params["kernel_features"]):
            fail("kernel_features", list(params["kernel_features"]),
                 f"one count per kernel width ({len(params['kernel_widths'])} widths)")
        if max(params["kernel_widths"]) > params["max_word_length"]:
            fail("kernel_widths", list(params["kernel_widths"]),
                 f"widths <= max_word_length = {params['max_word_length']}")
    elif model == "transformer" and params["model_dim"] % params["heads"]:
        fail("heads", params["heads"], f"a divisor of model_dim = {params['model_dim']}")
    elif model == "e3d_lstm":
        if params["image_size"] % params["patch_size"]:
            fail("patch_size", params["patch_size"], f"a divisor of image_size = {params['image_size']}")
        if not 1 <= params["input_length"] < params["total_length"]:
            fail("input_length", params["input_length"], f"1 <= input_length < total_length = {params['total_length']}")


@dataclass(frozen=True)
class Job:
    """A validated job: the model and its hyperparameters, training, run, placement and data settings.

    ``model_params`` holds every key of the model's schema (defaults filled in; lists as tuples).
    Build it with :func:`load_job` or :func:`job_from_dict`.
    """

    name: str
    path: Path | None
    model: str
    model_params: dict[str, Any]
    batch_size: int
    optimizer: str = "adam"
    learning_rate: float = 1e-3
    seed: int = 0
    momentum: float = 0.9
    grad_clip: float = 0.0
    iterations: int = 150
    window: tuple[int, int] = (100, 150)
    devices_per_node: int = 4
    memory: str | None = None
    reserve: float = 0.1
    memory_heuristic: str = "overflow"
    costs: str = "profile"
    device_preset: str = "v100-32gb"
    profile_steps: int = 5
    data: dict[str, Any] = field(default_factory=lambda: {"source": "synthetic", "path": None})

    @property
    def memory_bytes(self) -> int | None:
        """``memory`` in bytes (``None`` = unlimited)."""
        return None if self.memory is None else parse_bytes(self.memory, "placement.memory")

    @property
    def source(self) -> str:
        return self.path.as_posix() if self.path is not None else f"<job {self.name}>"

    def describe(self) -> str:
        params = ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in self.model_params.items())
        return (f"{self.name}: {self.model}({params}); batch {self.batch_size}, {self.optimizer} "
                f"lr {self.learning_rate:g}; data {self.data['source']}")


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
                values[key] = param.check(raw[key])
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
    sections = {"model", "train", "run", "placement", "data"}
    for key in raw:
        if key not in TOP and key not in sections:
            raise JobError(f"{source}: unknown key {key}; a job file has the key name and the tables "
                           + ", ".join(f"[{s}]" for s in sorted(sections)))
    top = check.keys({k: v for k, v in raw.items() if k in TOP}, TOP, prefix="", where="the top level", skip=())
    job_name = top["name"] or name or (path.stem if path is not None else "job")

    model_raw = raw.get("model")
    if not isinstance(model_raw, dict):
        raise JobError(f"{source}: missing table [model]: give type = " + " | ".join(repr(m) for m in MODEL_PARAMS))
    model_type = model_raw.get("type", _REQUIRED)
    if model_type is _REQUIRED:
        raise JobError(f"{source}: missing key model.type: expected one of "
                       + ", ".join(repr(m) for m in MODEL_PARAMS))
    if model_type not in MODEL_PARAMS:
        check.fail("model.type", model_type, "one of " + ", ".join(repr(m) for m in MODEL_PARAMS))
    schema = MODEL_PARAMS[model_type]
    params = check.keys(model_raw, schema, prefix="model.", where=f"[model] of type {model_type!r}", skip=("type",))
    _check_model(model_type, params, lambda key, value, expected: check.fail(f"model.{key}", value, expected))

    train = check.table(raw, "train", TRAIN)
    run = check.table(raw, "run", RUN)
    start, end = run["window"]
    if not 0 <= start < end <= run["iterations"]:
        default = "" if "window" in raw.get("run", {}) else " (the default)"
        raise JobError(f"{source}: run.window = [{start}, {end}]{default} does not fit run.iterations = "
                       f"{run['iterations']}: expected 0 <= start < end <= {run['iterations']}")
    placement = check.table(raw, "placement", PLACEMENT)
    if placement["memory"] is not None:
        try:
            if parse_bytes(placement["memory"], "placement.memory") <= 0:
                raise ValueError
        except (PardnnError, ValueError):
            check.fail("placement.memory", placement["memory"], "a size > 0 such as '32GiB', '16GB' or '512MiB'")
    from pardnn.presets import PRESETS, preset

    try:
        placement["device_preset"] = preset(placement["device_preset"]).name
    except PardnnError:
        check.fail("placement.device_preset", placement["device_preset"], "one of " + ", ".join(map(repr, PRESETS)))
    data_section = _data(raw.get("data", {}), model_type, check)
    return Job(name=job_name, path=path, model=model_type, model_params=params, **train, **run, **placement,
               data=data_section)


def _data(raw: Any, model: str, check: _Validator) -> dict[str, Any]:
    if not isinstance(raw, dict):
        check.fail("data", raw, "a table [data]")
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
