"""What a step trains with besides the model: each output's loss, their weights, the optimizer and
the precision (:func:`recipe`, :class:`Recipe`).

Every setting has one source, said in the log (:meth:`Recipe.describe`): the job file's ``[train]``,
else the model's own ``compile(...)`` (or dtype policy), else the default. A compiled Keras optimizer
trains with Keras' own update (:mod:`jobs.optimizers`); the job file's ``adam`` and ``momentum`` on a
constant rate are TensorFlow's fused ones. docs/user-models.md and docs/training.md have the rules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from jobs.config import Job, JobError
from jobs.keras3 import flavour, is_keras3
from jobs.optimizers import check_compiled, config_of, from_job, schedule_name
from jobs.precision import LossScale
from jobs.schema import DEFAULT, JOB_FILE
from pardnn.tfstack import keras3_module

v1 = tf.compat.v1

__all__ = ["COMPILED", "Recipe", "by_output", "loss_name", "recipe"]

COMPILED = "model.compile"

_KERAS = ("keras.", "tf_keras.", "tensorflow.")


@dataclass(frozen=True)
class Recipe:
    """The loss (``None`` for a zoo model or a step), the optimizer and the precision of a job's step,
    with ``sources`` (setting → ``job file``, ``model.compile`` or ``default``) and ``ignored`` (what of
    the model pardnn does not run). ``keras`` makes the Keras optimizer (``None``: TensorFlow's fused
    one); ``options`` are its settings as its config says them (``learning_rate``: the rate or the
    schedule object), or the fused one's other arguments; ``loss_scale``: float16's loss scaling."""

    optimizer: str
    learning_rate: float
    momentum: float
    grad_clip: float
    options: dict[str, Any] = field(default_factory=dict)
    loss: Any = None
    loss_weights: Any = None
    sources: dict[str, str] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()
    keras: Callable[[], Any] | None = None
    precision: str = "float32"
    loss_scale: LossScale | None = None
    keras3: bool = False  # the model is a Keras 3 one: its losses, its optimizer's variables

    @property
    def losses(self) -> Any:
        """The Keras losses module the step's losses come from (the model's Keras)."""
        return keras3_module().losses if self.keras3 else tf.keras.losses

    @property
    def schedule(self) -> str:
        """``"constant"`` or the Keras schedule's class name."""
        return "constant" if self.keras is None else schedule_name(self.options.get("learning_rate"))

    def describe(self) -> str:
        """``"loss mse (job file); optimizer adam (model.compile), learning_rate 0.01 (model.compile), ..."``."""
        src = self.sources
        parts = []
        if self.loss is not None:
            parts.append(f"loss {_show(self.loss)} ({src['loss']})")
            if self.loss_weights is not None:
                parts.append(f"loss_weights {_show(self.loss_weights)} ({src['loss_weights']})")
        if self.precision != "float32":
            parts.append(f"precision {self.precision} ({src['precision']})")
        if self.loss_scale is not None:
            parts.append(self.loss_scale.describe())
        parts.append(f"optimizer {self.optimizer} ({src['optimizer']})")
        if self.keras is not None:
            rate = self.options.get("learning_rate")
            shown = f"{rate:g}" if isinstance(rate, (int, float)) else _schedule(rate)
            parts.append(f"learning_rate {shown} ({src['learning_rate']})")
            parts += [f"{key} {_setting(value)}" for key, value in self.options.items() if key != "learning_rate"]
            parts.append(f"grad_clip {self.grad_clip:g} ({src['grad_clip']})")
            return "; ".join(parts)
        parts.append(f"learning_rate {self.learning_rate:g} ({src['learning_rate']})")
        if self.optimizer == "momentum":
            parts.append(f"momentum {self.momentum:g} ({src['momentum']})")
        parts += [f"{key} {value:g} ({src['optimizer']})" for key, value in self.options.items()]
        parts.append(f"grad_clip {self.grad_clip:g} ({src['grad_clip']})")
        return "; ".join(parts)

    def make_optimizer(self) -> Any:
        """The optimizer that trains the step: a fresh Keras one (:attr:`keras`), else TensorFlow's (v1)."""
        if self.keras is not None:
            return self.keras()
        if self.optimizer == "adam":
            return v1.train.AdamOptimizer(self.learning_rate, **self.options)
        return v1.train.MomentumOptimizer(self.learning_rate, self.momentum, **self.options)


def recipe(job: Job, model: Any = None) -> Recipe:
    """The job's recipe; with ``model`` (a ``tf.keras.Model``), what it was compiled with fills what the
    job file leaves out (see the module docstring).

    Raises
    ------
    JobError
        The compiled optimizer is one pardnn cannot train with the same way, and the job file sets no
        ``[train] optimizer``.
    """
    made = _recipe(job, model)
    return dataclasses.replace(made, keras3=True) if is_keras3(model) else made


def _recipe(job: Job, model: Any) -> Recipe:
    sources: dict[str, str] = {}

    def pick(key: str, compiled: Any) -> Any:
        if f"train.{key}" in job.given or compiled is None:
            sources[key] = JOB_FILE if f"train.{key}" in job.given else DEFAULT
            return getattr(job, key)
        sources[key] = COMPILED
        return compiled

    keras_optimizer = None if "train.optimizer" in job.given else getattr(model, "optimizer", None)
    loss = weights = None
    if model is not None:
        loss = pick("loss", getattr(model, "loss", None))
        compiled_weights = (getattr(getattr(model, "_compile_loss", None), "_user_loss_weights", None)
                            if is_keras3(model) else getattr(model, "loss_weights", None))
        weights = pick("loss_weights", compiled_weights)
    ignored = tuple(f"{owner}.{name}" for name in ("train_step", "compute_loss")
                    if (owner := _custom(model, name)) is not None)
    clip = float(pick("grad_clip", None))
    model_policy = getattr(getattr(model, "dtype_policy", None), "name", None)
    precision = pick("precision", None if model_policy is None or job.precision != "auto" else model_policy)
    precision = "float32" if precision == "auto" else precision
    if sources["precision"] == COMPILED:
        sources["precision"] = "the model's dtype policy"
    scale = LossScale.of(keras_optimizer)
    if scale is None and precision == "mixed_float16":
        scale = LossScale(keras3=is_keras3(model))  # never float16 without loss scaling
    gated = scale is not None and scale.dynamic
    if keras_optimizer is not None:
        own = [key for key in _JOB_OPTIMIZER_KEYS if f"train.{key}" in job.given]
        if own:
            raise JobError(f"{job.source}: train.{own[0]} is a setting of the job file's optimizer, but the model is "
                           f"compiled with its own ({type(keras_optimizer).__name__}); set [train] optimizer too, or "
                           "give the setting to the optimizer the model compiles")
        own_rate = "train.learning_rate" in job.given
        make = check_compiled(job, keras_optimizer, job.learning_rate if own_rate else None, gated)
        sources.update(optimizer=COMPILED, learning_rate=JOB_FILE if own_rate else COMPILED)
        name = type(getattr(keras_optimizer, "inner_optimizer", keras_optimizer)).__name__
        return _keras_recipe(name, make, clip, loss, weights, sources, ignored, precision, scale)
    kind = pick("optimizer", None)
    rate, momentum = pick("learning_rate", None), pick("momentum", None)
    make = from_job(job, keras=gated, module=flavour(model) if is_keras3(model) else None)  # the model's Keras
    if make is not None:
        return _keras_recipe(kind, make, clip, loss, weights, sources, ignored, precision, scale)
    return Recipe(kind, float(rate), float(momentum), clip, {}, loss, weights, sources, ignored,
                  precision=precision, loss_scale=scale)


def _keras_recipe(name: str, make: Callable[[], Any], clip: float, loss: Any, weights: Any,
                  sources: dict[str, str], ignored: tuple[str, ...], precision: str,
                  scale: LossScale | None) -> Recipe:
    """A recipe of a Keras optimizer: its settings (as its ``get_config`` says, the rate or schedule
    as given) for the log, read from one made outside any graph."""
    with tf.Graph().as_default():
        made = make()
        config = {key: value for key, value in config_of(made).items() if key not in _QUIET and value is not None
                  and not (key in _OFF and value == _OFF[key])}
    rate = config["learning_rate"]
    return Recipe(name, float(rate) if isinstance(rate, (int, float)) else float("nan"), 0.0, clip, config, loss,
                  weights, sources, ignored, keras=make, precision=precision, loss_scale=scale)


# The job file's optimizer settings that a compiled optimizer has its own of (learning_rate may replace its rate).
_JOB_OPTIMIZER_KEYS = ("momentum", "weight_decay", "schedule", "warmup_steps", "decay_steps", "decay_rate",
                       "min_learning_rate")
# Settings of a Keras optimizer's config the log leaves out: names and internals, and off switches.
_QUIET = ("name", "is_legacy_optimizer", "jit_compile", "ema_overwrite_frequency", "decay")
_OFF = {"use_ema": False, "amsgrad": False, "nesterov": False, "centered": False, "momentum": 0.0,
        "ema_momentum": 0.99}


def _schedule(rate: Any) -> str:
    """A schedule as the log shows it: ``CosineDecay(initial_learning_rate=0, decay_steps=1000, ...)``."""
    try:
        config = rate.get_config()
    except (AttributeError, NotImplementedError):
        return type(rate).__name__
    shown = ", ".join(f"{k}={_setting(v)}" for k, v in config.items() if k != "name" and v is not None)
    return f"{type(rate).__name__}({shown})"


def _setting(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _custom(model: Any, name: str) -> str | None:
    """The class that overrides Keras' ``name`` method (``"Net"``), or ``None``."""
    for cls in type(model).__mro__ if model is not None else ():
        if name in vars(cls):
            return None if cls.__module__.startswith(_KERAS) else cls.__name__
    return None


def loss_name(loss: Any) -> str:
    """A loss as the log shows it: its name, a Loss object's class, a function's name."""
    if isinstance(loss, str):
        return loss
    if isinstance(loss, tf.keras.losses.Loss):
        return type(loss).__name__
    return getattr(loss, "__name__", type(loss).__name__)


def _show(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Sequence) and not isinstance(value, str):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, str):
        return repr(value)
    return f"{value:g}" if isinstance(value, float) else loss_name(value)


def _where(job: Job, made: Recipe, key: str) -> str:
    value = _show(getattr(made, key))
    if made.sources[key] == COMPILED:
        return f"{job.source}: model.entry = {job.entry!r}: model.compile({key}={value})"
    return f"{job.source}: train.{key} = {value}"


def _per_output(job: Job, made: Recipe, key: str, names: list[str], missing: Any) -> list[Any]:
    """``made.loss`` or ``made.loss_weights`` as one value per output (``missing`` where a dict has none)."""
    value = getattr(made, key)
    shown = ", ".join(map(repr, names))
    if isinstance(value, Mapping):
        unknown = [k for k in value if k not in names]
        if unknown:
            raise JobError(f"{_where(job, made, key)}: the model has no output {unknown[0]!r}; expected keys among "
                           f"its outputs {shown}")
        if missing is None and (absent := [n for n in names if n not in value]):
            raise JobError(f"{_where(job, made, key)}: no loss for the output {absent[0]!r}; expected one for each "
                           f"of the outputs {shown}")
        return [value.get(name, missing) for name in names]
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != len(names):
            raise JobError(f"{_where(job, made, key)}: {len(value)} values for the model's {len(names)} outputs "
                           f"{shown}; expected one per output, in that order (or a table by output name)")
        return list(value)
    return [missing if value is None else value] * len(names)


def by_output(job: Job, made: Recipe, names: list[str]) -> list[tuple[Any, float]]:
    """``(loss, weight)`` for each of the outputs ``names``, in order.

    Raises
    ------
    JobError
        A loss or weight for an output the model does not have, an output without a loss, or a list of
        another length than the outputs; the message names the output and where the value came from.
    """
    losses = _per_output(job, made, "loss", names, None)
    weights = _per_output(job, made, "loss_weights", names, 1.0)
    return [(loss, float(weight)) for loss, weight in zip(losses, weights, strict=True)]
