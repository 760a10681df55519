"""Building blocks shared by the models, in ``tf.compat.v1`` graph mode with resource variables.

Plain ops rather than Keras layers, so the graphs look like the TF1 code of the paper's models (one
op per step of a cell, unrolled time steps); variables come from ``get_variable`` under the current
variable scope, so names are deterministic.

Weights used at many time steps are read once (:func:`weights`), as TF1's ``kernel/read`` was, so a
cost graph does not count a copy of the weights at every use.

Blocks (:func:`block`) are built with ``tf.recompute_grad`` inside :func:`recomputing`; layers compute
in float16 or bfloat16 inside :func:`computing`.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial

import tensorflow as tf

v1 = tf.compat.v1

__all__ = [
    "LayerNorm",
    "Net",
    "block",
    "compute",
    "computing",
    "dense",
    "dropout",
    "keras_blocks",
    "layer_norm",
    "lstm_layer",
    "lstm_stack",
    "placeholder",
    "recomputing",
    "recomputing_now",
    "variable",
    "weights",
]

_RECOMPUTE = contextvars.ContextVar("recompute", default=False)


@contextlib.contextmanager
def recomputing() -> Iterator[None]:
    """Within it, every :func:`block` is built with ``tf.recompute_grad``."""
    token = _RECOMPUTE.set(True)
    try:
        yield
    finally:
        _RECOMPUTE.reset(token)


def recomputing_now() -> bool:
    """Whether this build is inside :func:`recomputing`."""
    return _RECOMPUTE.get()


def block(function: Callable[..., object], *tensors: tf.Tensor) -> object:
    """``function(*tensors)``; inside :func:`recomputing` through ``tf.recompute_grad``: the block's
    activations are not kept for the backward pass but recomputed from ``tensors``. The block must read
    everything through ``tensors``, its weights included (gradients reach only them), and create no
    variables."""
    return tf.recompute_grad(function)(*tensors) if _RECOMPUTE.get() else function(*tensors)


# Layers whose call draws random numbers: a recomputation would draw others, so they are not blocks.
_RANDOM_LAYERS = ("Dropout", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D", "GaussianNoise",
                  "GaussianDropout", "AlphaDropout")


def keras_blocks(model: tf.keras.Model) -> int:
    """Inside :func:`recomputing`: make each layer of ``model`` called on one tensor a block (its weights
    are variables, which ``tf.recompute_grad`` differentiates); returns how many may be. Random layers
    (dropout, noise) are left out. Outside :func:`recomputing`, nothing."""
    if not _RECOMPUTE.get():
        return 0
    count = 0
    for layer in model.layers:
        if type(layer).__name__ == "InputLayer" or type(layer).__name__ in _RANDOM_LAYERS:  # tf.keras or Keras 3
            continue
        if not getattr(layer.call, "recomputed", False):  # a model called again (micro-batches) is wrapped once
            layer.call = _recomputed_call(layer.call)
        count += 1
    return count


def _recomputed_call(call: Callable[..., tf.Tensor]) -> Callable[..., tf.Tensor]:
    def recomputed(inputs: object, *args: object, **kwargs: object) -> tf.Tensor:
        if args or not isinstance(inputs, tf.Tensor):  # several inputs: called as it is
            return call(inputs, *args, **kwargs)
        return tf.recompute_grad(lambda x: call(x, **kwargs))(inputs)  # keywords are bound: graph mode takes none

    recomputed.recomputed = True  # type: ignore[attr-defined]
    return recomputed


@dataclass
class Net:
    """What a model's ``build`` returns: the loss, its input placeholders by name, and extra ops
    one training step must run (batch-norm moving averages); a micro-batched step's ``loss`` is the
    mean of its ``micro_losses`` (:mod:`jobs.microbatch`)."""

    loss: tf.Tensor
    inputs: dict[str, tf.Tensor]
    update_ops: list[tf.Operation] = field(default_factory=list)
    tokens_per_step: int | None = None
    micro_losses: list[tf.Tensor] = field(default_factory=list)  # one per micro-batch (jobs.microbatch)


_COMPUTE = [tf.float32]  # the dtype zoo layers compute in (float32 variables are cast to it)


@contextlib.contextmanager
def computing(dtype: tf.DType) -> Iterator[None]:
    """Zoo layers that support it compute in ``dtype`` (float16, bfloat16) over float32 variables,
    as a Keras ``mixed_*`` policy does; norms, softmax and losses stay float32."""
    _COMPUTE.append(dtype)
    try:
        yield
    finally:
        _COMPUTE.pop()


def compute(x: tf.Tensor) -> tf.Tensor:
    """``x`` in the compute dtype (no op in float32)."""
    return tf.cast(x, _COMPUTE[-1]) if x.dtype != _COMPUTE[-1] else x


def placeholder(dtype: tf.DType, shape: Sequence[int], name: str) -> tf.Tensor:
    return v1.placeholder(dtype, list(shape), name=name)


def variable(name: str, shape: Sequence[int], initializer: object = None, *, trainable: bool = True) -> tf.Variable:
    """A float32 resource variable (``initializer`` default: Glorot uniform)."""
    if initializer is None:
        initializer = v1.glorot_uniform_initializer()
    return v1.get_variable(name, list(shape), tf.float32, initializer=initializer, trainable=trainable,
                           use_resource=True)


def dense(x: tf.Tensor, units: int, name: str, *, bias: bool = True, bias_init: float = 0.0) -> tf.Tensor:
    """``x @ W + b`` for a 2-D ``x`` (reshape higher ranks around it)."""
    with v1.variable_scope(name):
        kernel = variable("kernel", [x.shape[-1], units])
        y = tf.matmul(x, kernel)
        if bias:
            y = tf.nn.bias_add(y, variable("bias", [units], v1.constant_initializer(bias_init)))
    return y


def dropout(x: tf.Tensor, rate: float) -> tf.Tensor:
    return x if rate <= 0 else tf.nn.dropout(x, rate=rate)


def weights(name: str, shape: Sequence[int], initializer: object = None) -> tf.Tensor:
    """A trainable variable's value, read once here for all its uses."""
    return variable(name, shape, initializer).value()


@dataclass(frozen=True)
class LayerNorm:
    """Layer normalisation over ``axes`` with a gain and bias per channel (last axis), as
    ``tf.contrib.layers.layer_norm``; its variables are created once and applied at every call."""

    gain: tf.Tensor
    bias: tf.Tensor
    axes: tuple[int, ...] = (-1,)
    epsilon: float = 1e-6

    @classmethod
    def create(cls, name: str, channels: int, axes: Sequence[int] = (-1,)) -> LayerNorm:
        with v1.variable_scope(name):
            return cls(weights("gain", [channels], v1.ones_initializer()),
                       weights("bias", [channels], v1.zeros_initializer()), tuple(axes))

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        given = x.dtype
        x = tf.cast(x, tf.float32) if given != tf.float32 else x  # in float32, as Keras' LayerNormalization
        mean, variance = tf.nn.moments(x, list(self.axes), keepdims=True)
        y = (x - mean) * tf.math.rsqrt(variance + self.epsilon) * self.gain + self.bias
        return tf.cast(y, given) if given != tf.float32 else y


def layer_norm(x: tf.Tensor, name: str, *, axes: Sequence[int] = (-1,)) -> tf.Tensor:
    """Layer normalisation with its own variables (see :class:`LayerNorm`)."""
    return LayerNorm.create(name, int(x.shape[-1]), axes)(x)


@dataclass(frozen=True)
class LSTMWeights:
    kernel: tf.Tensor
    bias: tf.Tensor
    forget_bias: float


def lstm_layer(inputs: int, hidden: int, name: str, forget_bias: float) -> LSTMWeights:
    """The variables of one ``BasicLSTMCell`` layer: kernel ``[inputs + hidden, 4 * hidden]`` and bias."""
    with v1.variable_scope(name):
        return LSTMWeights(weights("kernel", [inputs + hidden, 4 * hidden]),
                           weights("bias", [4 * hidden], v1.zeros_initializer()), forget_bias)


def lstm_step(cell: LSTMWeights, x: tf.Tensor, h: tf.Tensor, c: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """One step of ``tf.nn.rnn_cell.BasicLSTMCell``: gates i, j, f, o from ``[x, h] @ W + b``."""
    gates = tf.nn.bias_add(tf.matmul(tf.concat([x, h], 1), cell.kernel), cell.bias)
    i, j, f, o = tf.split(gates, 4, axis=1)
    new_c = c * tf.sigmoid(f + cell.forget_bias) + tf.sigmoid(i) * tf.tanh(j)
    return tf.tanh(new_c) * tf.sigmoid(o), new_c


def _step(forget_bias: float, x: tf.Tensor, h: tf.Tensor, c: tf.Tensor, kernel: tf.Tensor,
          bias: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """:func:`lstm_step` with the weights as inputs (a :func:`block`)."""
    return lstm_step(LSTMWeights(kernel, bias, forget_bias), x, h, c)


def lstm_stack(inputs: Sequence[tf.Tensor], cells: Sequence[LSTMWeights], *, dropout_rate: float = 0.0,
               scope: str = "rnn") -> list[tf.Tensor]:
    """A statically unrolled multi-layer LSTM (``static_rnn`` over a ``MultiRNNCell``) from zero state.

    Returns the top layer's output at every step. Dropout (``DropoutWrapper`` with
    ``output_keep_prob``) applies to every layer's output.
    """
    batch = int(inputs[0].shape[0])
    with v1.name_scope(scope):
        state = []
        for index, cell in enumerate(cells):
            hidden = int(cell.bias.shape[0]) // 4
            # tf.fill, not tf.zeros: tf.zeros makes a Const below 1,000 elements and a Fill above, so the
            # graph's ops would change with the batch size (pardnn.batch.batchscale needs them not to).
            zeros = tf.fill([batch, hidden], 0.0, name=f"zero_state_{index}")
            state.append((zeros, zeros))
        outputs = []
        for step, x in enumerate(inputs):
            with v1.name_scope(f"step_{step}"):
                for index, cell in enumerate(cells):
                    with v1.name_scope(f"layer_{index}"):
                        h, c = block(partial(_step, cell.forget_bias), x, *state[index], cell.kernel, cell.bias)
                        state[index] = (h, c)
                        x = dropout(h, dropout_rate)
                outputs.append(x)
    return outputs
