"""What a step trains with besides the model: each output's loss, their weights, and the optimizer.

Every setting has one source, said in the log (:meth:`Recipe.describe`) as the launcher's settings
say theirs: the job file's ``[train]``, else the model's own ``compile(...)`` when the model entry
returned a compiled ``tf.keras.Model``, else the default. Where Keras and pardnn differ, the choices:

- Key by key: a job file that sets only ``learning_rate`` keeps the compiled optimizer at that rate.
  A job file that sets ``optimizer`` drops the compiled one whole (its rate and hyper-parameters
  belong to it).
- pardnn's optimizers are TensorFlow's ``AdamOptimizer`` and ``MomentumOptimizer``. A compiled Adam
  (``tf.keras.optimizers.Adam`` or ``tf.keras.optimizers.legacy.Adam``) keeps its learning rate,
  ``beta_1``, ``beta_2`` and ``epsilon``; an SGD (either kind) its learning rate, ``momentum`` (0:
  plain SGD) and ``nesterov``; ``global_clipnorm`` becomes ``grad_clip``. What those two cannot do
  the same way (another optimizer, a learning-rate schedule, ``amsgrad``, ``clipnorm``,
  ``clipvalue``, weight decay, EMA, the legacy ``decay``) is a one-line error naming it, never a
  silent change: set ``[train] optimizer`` in the job file to train with pardnn's instead.
- ``loss`` and ``loss_weights`` take Keras' forms: one loss for every output, a list in output
  order, or a dict by output name (:func:`by_output`); a missing weight is 1.
- A custom ``train_step`` (or ``compute_loss``) is not run: pardnn builds the step itself from the
  loss, the optimizer and the model's update ops, and says so in the log (:attr:`Recipe.ignored`).

Zoo models and steps have the optimizer part only (``loss`` is ``None``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from jobs.config import Job, JobError
from jobs.schema import DEFAULT, JOB_FILE

v1 = tf.compat.v1

__all__ = ["COMPILED", "Recipe", "by_output", "loss_name", "recipe"]

COMPILED = "model.compile"

# The Keras optimizers pardnn trains the same way, and the kind (train.optimizer) each becomes.
_KINDS = {tf.keras.optimizers.Adam: "adam", tf.keras.optimizers.legacy.Adam: "adam",
          tf.keras.optimizers.SGD: "momentum", tf.keras.optimizers.legacy.SGD: "momentum"}
# Their settings pardnn's optimizers have no equivalent for, each with the value that means "off".
_UNSUPPORTED = {"amsgrad": False, "clipnorm": None, "clipvalue": None, "weight_decay": None, "use_ema": False,
                "decay": 0.0}
_KERAS = ("keras.", "tf_keras.", "tensorflow.")


@dataclass(frozen=True)
class Recipe:
    """The loss (``None`` for a zoo model or a step) and the optimizer of a job's step, with
    ``sources`` (setting → ``job file``, ``model.compile`` or ``default``) and ``ignored`` (what of the
    model pardnn does not run). ``options`` are the TensorFlow optimizer's other arguments."""

    optimizer: str
    learning_rate: float
    momentum: float
    grad_clip: float
    options: dict[str, Any] = field(default_factory=dict)
    loss: Any = None
    loss_weights: Any = None
    sources: dict[str, str] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()

    def describe(self) -> str:
        """``"loss mse (job file); optimizer adam (model.compile), learning_rate 0.01 (model.compile), ..."``."""
        src = self.sources
        parts = []
        if self.loss is not None:
            parts.append(f"loss {_show(self.loss)} ({src['loss']})")
            if self.loss_weights is not None:
                parts.append(f"loss_weights {_show(self.loss_weights)} ({src['loss_weights']})")
        parts.append(f"optimizer {self.optimizer} ({src['optimizer']})")
        parts.append(f"learning_rate {self.learning_rate:g} ({src['learning_rate']})")
        if self.optimizer == "momentum":
            parts.append(f"momentum {self.momentum:g} ({src['momentum']})")
        parts += [f"{key} {value:g} ({src['optimizer']})" for key, value in self.options.items()]
        parts.append(f"grad_clip {self.grad_clip:g} ({src['grad_clip']})")
        return "; ".join(parts)

    def make_optimizer(self) -> Any:
        """The TensorFlow (v1) optimizer that trains the step."""
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
    sources: dict[str, str] = {}

    def pick(key: str, compiled: Any) -> Any:
        if f"train.{key}" in job.given or compiled is None:
            sources[key] = JOB_FILE if f"train.{key}" in job.given else DEFAULT
            return getattr(job, key)
        sources[key] = COMPILED
        return compiled

    keras_optimizer = None if "train.optimizer" in job.given else getattr(model, "optimizer", None)
    compiled: dict[str, Any] = {} if keras_optimizer is None else _from_keras(job, keras_optimizer)
    kind = pick("optimizer", compiled.get("optimizer"))
    loss = weights = None
    if model is not None:
        loss = pick("loss", getattr(model, "loss", None))
        weights = pick("loss_weights", getattr(model, "loss_weights", None))
    ignored = tuple(f"{owner}.{name}" for name in ("train_step", "compute_loss")
                    if (owner := _custom(model, name)) is not None)
    rate, momentum = pick("learning_rate", compiled.get("learning_rate")), pick("momentum", compiled.get("momentum"))
    clip = pick("grad_clip", compiled.get("grad_clip"))
    return Recipe(kind, float(rate), float(momentum), float(clip), dict(compiled.get("options", {})), loss, weights,
                  sources, ignored)


def _custom(model: Any, name: str) -> str | None:
    """The class that overrides Keras' ``name`` method (``"Net"``), or ``None``."""
    for cls in type(model).__mro__ if model is not None else ():
        if name in vars(cls):
            return None if cls.__module__.startswith(_KERAS) else cls.__name__
    return None


def _hyper(optimizer: Any, name: str) -> Any:
    """A Keras optimizer's setting, new or legacy, as a Python value (the new ones keep the rate in a
    variable: its initial value)."""
    legacy = getattr(optimizer, "_hyper", None)
    if isinstance(legacy, dict) and name in legacy:
        value = legacy[name]
    else:
        value = getattr(optimizer, "_learning_rate" if name == "learning_rate" else name, None)
    if isinstance(value, tf.Variable):
        # float32's shortest repr: 0.01, not 0.009999999776 (the optimizer casts it back to the same float32)
        value = float(str(tf.get_static_value(value.initial_value)))
    return value


def _from_keras(job: Job, optimizer: Any) -> dict[str, Any]:
    """``optimizer``, ``learning_rate`` (unless the job file sets it), ``momentum``, ``grad_clip`` and
    ``options`` of a compiled Keras optimizer; a JobError for one pardnn cannot train the same way."""
    kind = _KINDS.get(type(optimizer))
    name = type(optimizer).__name__
    if kind is None:
        raise _unsupported(job, f"the optimizer {type(optimizer).__module__}.{name}")
    blockers = [f"{key}={value!r}" for key, off in _UNSUPPORTED.items()
                if (value := _hyper(optimizer, key)) is not None and value != off]
    rate = _hyper(optimizer, "learning_rate") if "train.learning_rate" not in job.given else None
    if rate is not None and not isinstance(rate, (int, float)):
        blockers.append(f"learning_rate={type(rate).__name__}(...) (a schedule; pardnn's rate is constant: set "
                        "train.learning_rate)")
    if blockers:
        raise _unsupported(job, f"{name}({', '.join(blockers)})")
    found: dict[str, Any] = {"optimizer": kind, "learning_rate": rate,
                             "grad_clip": _hyper(optimizer, "global_clipnorm")}
    if kind == "adam":
        found["options"] = {"beta1": float(_hyper(optimizer, "beta_1")), "beta2": float(_hyper(optimizer, "beta_2")),
                            "epsilon": float(_hyper(optimizer, "epsilon"))}
    else:
        found["momentum"] = float(_hyper(optimizer, "momentum") or 0.0)
        found["options"] = {"use_nesterov": True} if _hyper(optimizer, "nesterov") else {}
    return found


def _unsupported(job: Job, what: str) -> JobError:
    return JobError(f"{job.source}: model.entry = {job.entry!r}: the model is compiled with {what}, which pardnn "
                    "cannot train the same way; expected Adam or SGD from tf.keras.optimizers (or .legacy) without "
                    "it, or set [train] optimizer = 'adam' or 'momentum' in the job file to train with pardnn's")


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
