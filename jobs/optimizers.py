"""Keras optimizers in a job's training graph: made from a compiled model or the job file, and their
update built as Keras' own training step builds it (:func:`keras_update`).

The update of a Keras optimizer is its own ``apply_gradients`` in pardnn's graph, so every op stays
placeable. Keras runs it inside a ``tf.function``, which orders stateful ops; here the slots are made
first and the update is built under TensorFlow's automatic control dependencies, behind a barrier on
all gradients (the ``tf.function`` call's inputs). Keras' eager ``train_on_batch`` is the oracle.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from jobs.config import Job, JobError
from pardnn.tfstack import keras3_model

v1 = tf.compat.v1

__all__ = ["KERAS_OPTIMIZERS", "SCHEDULES", "check_compiled", "config_of", "from_job", "keras_update",
           "order_initializers", "rate_of", "schedule_name"]

# train.optimizer names that are Keras classes (adam and momentum are pardnn's fused TensorFlow ones,
# unless a schedule or weight decay asks for Keras' Adam and SGD).
KERAS_OPTIMIZERS = {"sgd": "SGD", "adamw": "AdamW", "adamax": "Adamax", "nadam": "Nadam", "rmsprop": "RMSprop",
                    "adagrad": "Adagrad", "adadelta": "Adadelta", "ftrl": "Ftrl", "lion": "Lion"}
SCHEDULES = ("constant", "cosine", "cosine_restarts", "step", "exponential", "polynomial", "inverse_time")
# The methods that make the update: a subclass overriding one is not Keras' update.
_UPDATE_METHODS = ("apply_gradients", "update_step", "_internal_apply_gradients", "_resource_apply_dense",
                   "_resource_apply_sparse", "_distributed_apply", "minimize")
_KERAS = ("keras.", "tf_keras.")


def _schedule(job: Job, keras: Any = None) -> Any:
    """The job file's learning rate: a float, or a schedule of ``keras`` (default tf.keras; docs/training.md
    has the table)."""
    rate, kind, steps = job.learning_rate, job.schedule, job.decay_steps or job.iterations
    schedules = (keras or tf.keras).optimizers.schedules
    if kind == "constant":
        return rate
    if kind == "cosine":
        if job.warmup_steps:
            return schedules.CosineDecay(0.0, steps, alpha=job.min_learning_rate / rate, warmup_target=rate,
                                         warmup_steps=job.warmup_steps)
        return schedules.CosineDecay(rate, steps, alpha=job.min_learning_rate / rate)
    if kind == "cosine_restarts":
        return schedules.CosineDecayRestarts(rate, steps, alpha=job.min_learning_rate / rate)
    if kind in ("step", "exponential"):
        return schedules.ExponentialDecay(rate, steps, job.decay_rate, staircase=kind == "step")
    if kind == "polynomial":
        return schedules.PolynomialDecay(rate, steps, end_learning_rate=job.min_learning_rate)
    return schedules.InverseTimeDecay(rate, steps, job.decay_rate)


def from_job(job: Job, keras: bool = False, module: Any = None) -> Callable[[], Any] | None:
    """A maker of the Keras optimizer the job file names, or ``None`` for pardnn's fused Adam or momentum
    (``train.optimizer`` adam or momentum on a constant rate without weight decay, unless ``keras``:
    loss scaling gates a Keras update, not a fused one)."""
    name = job.optimizer
    if job.warmup_steps and job.schedule != "cosine":
        raise JobError(f"{job.source}: train.warmup_steps = {job.warmup_steps} with train.schedule = "
                       f"{job.schedule!r}: expected schedule = 'cosine' (Keras' CosineDecay has the warmup)")
    if name in ("adam", "momentum") and job.schedule == "constant" and not job.weight_decay and not keras:
        return None
    if name == "adam" and job.weight_decay:
        name = "adamw"
    settings: dict[str, Any] = {"learning_rate": None}
    if name in ("momentum", "sgd"):
        name, settings["momentum"] = "sgd", job.momentum if name == "momentum" else 0.0
    if job.weight_decay:
        settings["weight_decay"] = job.weight_decay
    cls = getattr((module or tf.keras).optimizers, "Adam" if name == "adam" else KERAS_OPTIMIZERS[name])

    def make() -> Any:
        return cls(**{**settings, "learning_rate": _schedule(job, module)})

    return make


def check_compiled(job: Job, optimizer: Any, rate: float | None, gated: bool = False) -> Callable[[], Any]:
    """A maker of a fresh copy of a model's compiled Keras optimizer (``rate``: the job file's constant
    rate in place of its own; a ``LossScaleOptimizer``'s inner one); a JobError for one that is not
    Keras' update. ``gated`` (dynamic loss scaling): a legacy optimizer becomes the new class of its
    name, whose update is assignments that a skipped step can gate (the legacy ones are fused kernels)."""
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)
    cls = type(optimizer)
    if not cls.__module__.startswith(_KERAS):
        users = list(itertools.takewhile(lambda c: not c.__module__.startswith(_KERAS), cls.__mro__))
        own = [m for m in _UPDATE_METHODS if any(m in vars(c) for c in users)]
        if len(users) == len(cls.__mro__) or own:  # not a Keras optimizer at all, or its own update
            raise JobError(f"{job.source}: model.entry = {job.entry!r}: the model is compiled with "
                           f"{cls.__module__}.{cls.__name__}, whose own {own[0] if own else 'update'} pardnn does "
                           "not run as Keras would; compile with a tf.keras.optimizers class (or .legacy), or set "
                           "[train] optimizer in the job file")
    config = config_of(optimizer)
    if config.get("ema_overwrite_frequency") and keras3_model(optimizer) is not None:
        raise JobError(f"{job.source}: model.entry = {job.entry!r}: the model is compiled with {cls.__name__}("
                       f"ema_overwrite_frequency={config['ema_overwrite_frequency']}), whose overwriting of the "
                       "weights by their moving averages pardnn does not build for Keras 3 models; compile with "
                       "ema_overwrite_frequency=None (the averages are still kept)")
    if rate is not None:
        config["learning_rate"] = rate
    if gated and _legacy(optimizer):
        if config.pop("decay", 0.0):
            raise JobError(f"{job.source}: model.entry = {job.entry!r}: the model is compiled with "
                           f"{cls.__name__}(decay={optimizer.decay:g}) under dynamic loss scaling, which gates Keras' "
                           "new optimizers only; give the decay as a schedule (tf.keras.optimizers.schedules."
                           "InverseTimeDecay)")
        cls = getattr(tf.keras.optimizers, cls.__name__)

    def make() -> Any:
        return cls.from_config(dict(config))

    return make


def config_of(optimizer: Any) -> dict[str, Any]:
    """A Keras optimizer's ``get_config()`` in graph mode, with its rate as :func:`rate_of` says it (a
    schedule as the object itself: a user's schedule needs no ``get_config``)."""
    rate = rate_of(optimizer)
    holder, key = (optimizer._hyper, "learning_rate") if _legacy(optimizer) else (vars(optimizer), "_learning_rate")
    kept, holder[key] = holder[key], 0.0  # the new ones would call .numpy() on the rate's variable
    try:
        config = optimizer.get_config()
    finally:
        holder[key] = kept
    config["learning_rate"] = rate
    config.pop("is_legacy_optimizer", None)
    return config


def _legacy(optimizer: Any) -> bool:
    """A ``tf.keras.optimizers.legacy`` optimizer (its settings in ``_hyper``, fused update kernels)."""
    return isinstance(getattr(optimizer, "_hyper", None), dict)


def rate_of(optimizer: Any) -> Any:
    """What the log shows of a Keras optimizer's rate: a float, or the schedule object."""
    learning = optimizer._hyper["learning_rate"] if _legacy(optimizer) else optimizer._learning_rate
    if type(learning).__module__.startswith("keras.") and isinstance(getattr(learning, "value", None), tf.Variable):
        learning = learning.value  # a Keras 3 variable
    if isinstance(learning, tf.Variable):
        return float(str(tf.get_static_value(learning.initial_value)))
    return learning


def schedule_name(rate: Any) -> str:
    """``"constant"`` or the schedule's class name (``"CosineDecay"``)."""
    return "constant" if isinstance(rate, (int, float)) else type(rate).__name__


class _OncePerStep:
    """Nadam's cache of its momentum product, updated by the first variable of each step (as Keras'
    Nadam intends, and as its eager and legacy forms do): Keras conditions on ``counter ==
    iterations + 2``, a Python int that a ``tf.function`` fixes when it traces, once per variable."""

    def __init__(self) -> None:
        self.first = True

    def __eq__(self, other: Any) -> Any:
        first, self.first = self.first, False
        return tf.constant(not first)

    __hash__ = object.__hash__

    def __add__(self, other: Any) -> _OncePerStep:
        return self


def order_initializers(variables: list[tf.Variable]) -> None:
    """Make a variable whose initial value reads another (EMA's averages copy their weight, a
    schedule's current rate reads the step) read it once it is initialised: one initializer runs
    every variable's at once, in no order."""
    initializers = {var.handle.op: var.initializer for var in variables if hasattr(var, "handle")}
    for var in variables:
        seen, stack = set(), [var.initializer]
        while stack:
            op = stack.pop()
            for tensor in op.inputs:
                source = tensor.op
                if source in seen or source in initializers:
                    continue
                seen.add(source)
                if source.type == "ReadVariableOp" and source.inputs[0].op in initializers \
                        and source.inputs[0].op is not var.handle.op:
                    source._add_control_input(initializers[source.inputs[0].op])
                stack.append(source)


def keras_update(optimizer: Any, grads_and_vars: list[tuple[tf.Tensor, tf.Variable]],
                 name: str = "apply_gradients") -> tuple[tf.Operation, tf.Tensor]:
    """The Keras ``optimizer``'s update of ``grads_and_vars`` in the current graph, ordered as Keras
    orders it: ``(update op, the learning rate it applied)`` (see the module docstring)."""
    from tensorflow.python.framework import auto_control_deps

    variables = [var for _, var in grads_and_vars]
    legacy = _legacy(optimizer)
    if legacy:
        optimizer._create_all_weights(variables)
    else:
        optimizer.build(variables)
    if isinstance(getattr(optimizer, "_u_product_counter", None), int):
        optimizer._u_product_counter = _OncePerStep()
    ready = tf.group(*(grad for grad, _ in grads_and_vars), name=f"{name}/gradients_ready")
    with v1.name_scope(name), tf.control_dependencies([ready]):
        with auto_control_deps.AutomaticControlDependencies() as ordered:
            if legacy:  # the rate at the step, before apply_gradients counts it
                rate = optimizer._decayed_lr(tf.float32)
            optimizer.apply_gradients(grads_and_vars)
            if not legacy:  # the rate apply_gradients set (a schedule's, at the step)
                rate = tf.cast(optimizer.learning_rate, tf.float32)
            rate = tf.identity(rate, name="learning_rate")
            done = ordered.mark_as_return(tf.identity(rate, name="applied"))
    return done.op, done
