"""Users' own tf.keras models for the zoo tests, each built in its own ``tf.Graph`` in graph mode.

Every builder seeds Keras (``tf.keras.utils.set_random_seed``) before it builds, so two builds of one
model start from identical weights, and returns a :class:`KerasModel`: the graph, its feeds (fixed
random data, one dict per step) and the fetches of one training step (``train_op``, ``loss``).
Inputs are small (batch 2, 32×32 images, 3 classes) so the whole zoo trains in seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from tests.tf.models import Step

BATCH = 2
CLASSES = 3
STEPS = 2


@dataclass
class KerasModel(Step):
    name: str
    graph: tf.Graph
    loss: tf.Tensor
    train: tf.Operation
    feeds: list[dict[tf.Tensor, np.ndarray]]
    unknown_dim: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _train_op(loss: tf.Tensor, model: tf.keras.Model, inputs: tf.Tensor, optimizer: str = "v1") -> tf.Operation:
    """Adam on the model's weights, with the model's updates for ``inputs`` (batch-norm moving
    averages of this call; ``model.updates`` would also hold those of the model's own ``Input``)."""
    moving = model.get_updates_for(inputs)
    if optimizer == "keras":  # the Keras (legacy, graph-mode) optimizer's get_updates
        updates = tf.keras.optimizers.legacy.Adam(0.001).get_updates(loss, model.trainable_weights)
        return tf.group(*updates, *moving, name="train")
    step = tf.compat.v1.train.AdamOptimizer(0.001).minimize(loss)
    return tf.group(step, *moving, name="train")


def _data(inputs: list[tuple[tf.Tensor, Callable[[np.random.Generator, list[int]], np.ndarray]]],
          batch: int, seed: int) -> list[dict[tf.Tensor, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{t: make(rng, [batch, *t.shape.as_list()[1:]]) for t, make in inputs} for _ in range(STEPS)]


def _uniform(rng: np.random.Generator, shape: list[int]) -> np.ndarray:
    return rng.random(shape, dtype=np.float32)


def _labels(rng: np.random.Generator, shape: list[int]) -> np.ndarray:
    return rng.integers(0, CLASSES, shape).astype(np.int32)


def application(name: str, size: int = 32, seed: int = 1, call: bool = False, **kwargs: Any) -> KerasModel:
    """``tf.keras.applications.<name>`` (weights=None, no top, average pooling) + Dense(3), cross-entropy.

    Built on the placeholder (``input_tensor``, training mode set for the graph), or with ``call``
    the way users often do: the model built on its own ``Input``, then called on the placeholder
    (which builds the forward pass twice, and what Keras wraps in functions becomes function calls).
    """
    graph = tf.Graph()
    with graph.as_default():
        tf.keras.utils.set_random_seed(seed)
        x = tf.compat.v1.placeholder(tf.float32, [BATCH, size, size, 3], name="x")
        y = tf.compat.v1.placeholder(tf.int32, [BATCH], name="y")
        build = getattr(tf.keras.applications, name)
        if call:
            base = build(weights=None, include_top=False, pooling="avg", input_shape=(size, size, 3), **kwargs)
            features = base(x, training=True)
        else:
            tf.keras.backend.set_learning_phase(1)  # batch norm in training mode, in this graph only
            base = build(weights=None, include_top=False, pooling="avg", input_tensor=x, **kwargs)
            features = base.output
        head = tf.keras.layers.Dense(CLASSES)
        logits = head(features)
        loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True),
                              name="loss")
        train = _train_op(loss, tf.keras.Sequential([base, head]), x)
    return KerasModel(name, graph, loss, train, _data([(x, _uniform), (y, _labels)], BATCH, seed + 100))


def gru(seed: int = 2, steps: int = 6, features: int = 4) -> KerasModel:
    """Keras GRU(8, return_sequences) → GRU(6) → Dense(1), MSE, Keras Adam via ``get_updates``."""
    graph = tf.Graph()
    with graph.as_default():
        tf.keras.utils.set_random_seed(seed)
        x = tf.compat.v1.placeholder(tf.float32, [BATCH, steps, features], name="x")
        y = tf.compat.v1.placeholder(tf.float32, [BATCH, 1], name="y")
        model = tf.keras.Sequential([tf.keras.layers.GRU(8, return_sequences=True), tf.keras.layers.GRU(6),
                                     tf.keras.layers.Dense(1)])
        loss = tf.reduce_mean(tf.square(model(x) - y), name="loss")
        train = _train_op(loss, model, x, "keras")
    return KerasModel("gru", graph, loss, train, _data([(x, _uniform), (y, _uniform)], BATCH, seed + 100),
                      extra={"steps": steps})


def attention(seed: int = 3, steps: int = 5, width: int = 8) -> KerasModel:
    """Self-attention block on a ``None`` batch (``tf.keras.Input``): MultiHeadAttention(2 heads) +
    residual + LayerNormalization → feed-forward → pooled Dense(3), cross-entropy. Costed with
    ``unknown_dim`` = the batch."""
    graph = tf.Graph()
    with graph.as_default():
        tf.keras.utils.set_random_seed(seed)
        inputs = tf.keras.Input((steps, width), name="tokens")
        h = tf.keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)(inputs, inputs)
        h = tf.keras.layers.LayerNormalization()(h + inputs)
        h = tf.keras.layers.Dense(width, activation="relu")(h)
        logits = tf.keras.layers.Dense(CLASSES)(tf.keras.layers.GlobalAveragePooling1D()(h))
        model = tf.keras.Model(inputs, logits)
        y = tf.compat.v1.placeholder(tf.int32, [None], name="y")
        loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, model.output, from_logits=True),
                              name="loss")
        train = _train_op(loss, model, inputs)
    feeds = _data([(inputs, _uniform), (y, _labels)], BATCH, seed + 100)
    return KerasModel("attention", graph, loss, train, feeds, unknown_dim=BATCH)


def dropout_layer_norm(seed: int = 4, features: int = 12) -> KerasModel:
    """Dense → Dropout(0.3, seeded) → LayerNormalization → Dense → Dropout → Dense(1), MSE, Adam.

    Called without ``training``: Keras reads its learning-phase tensor (fed True), so each Dropout is
    a ``StatelessIf`` on it (functional control flow), and so is its gradient."""
    graph = tf.Graph()
    with graph.as_default():
        tf.keras.utils.set_random_seed(seed)
        x = tf.compat.v1.placeholder(tf.float32, [BATCH, features], name="x")
        y = tf.compat.v1.placeholder(tf.float32, [BATCH, 1], name="y")
        model = tf.keras.Sequential([
            tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dropout(0.3, seed=seed),
            tf.keras.layers.LayerNormalization(), tf.keras.layers.Dense(8, activation="tanh"),
            tf.keras.layers.Dropout(0.2, seed=seed + 1), tf.keras.layers.Dense(1)])
        loss = tf.reduce_mean(tf.square(model(x) - y), name="loss")
        train = _train_op(loss, model, x)
        phase = tf.keras.backend.learning_phase()
    feeds = _data([(x, _uniform), (y, _uniform)], BATCH, seed + 100)
    for feed in feeds:
        feed[phase] = True
    return KerasModel("dropout_layer_norm", graph, loss, train, feeds)


def embedding(seed: int = 5, vocabulary: int = 50, length: int = 6) -> KerasModel:
    """Embedding(50, 8) → GlobalAveragePooling1D → Dense(1), MSE, Adam: a sparse gradient, deduplicated
    with ``Unique`` + ``UnsortedSegmentSum`` before the update."""
    graph = tf.Graph()
    with graph.as_default():
        tf.keras.utils.set_random_seed(seed)
        x = tf.compat.v1.placeholder(tf.int32, [BATCH, length], name="ids")
        y = tf.compat.v1.placeholder(tf.float32, [BATCH, 1], name="y")
        model = tf.keras.Sequential([tf.keras.layers.Embedding(vocabulary, 8),
                                     tf.keras.layers.GlobalAveragePooling1D(), tf.keras.layers.Dense(1)])
        loss = tf.reduce_mean(tf.square(model(x) - y), name="loss")
        train = _train_op(loss, model, x)

    def ids(rng: np.random.Generator, shape: list[int]) -> np.ndarray:
        return rng.integers(0, vocabulary, shape).astype(np.int32)

    return KerasModel("embedding", graph, loss, train, _data([(x, ids), (y, _uniform)], BATCH, seed + 100),
                      extra={"ids": BATCH * length})


def mixed_precision(seed: int = 6) -> KerasModel:
    """Conv2D → BatchNormalization → Dense under the ``mixed_float16`` policy (float32 output layer)."""
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        graph = tf.Graph()
        with graph.as_default():
            tf.keras.utils.set_random_seed(seed)
            x = tf.compat.v1.placeholder(tf.float32, [BATCH, 8, 8, 3], name="x")
            y = tf.compat.v1.placeholder(tf.float32, [BATCH, 1], name="y")
            model = tf.keras.Sequential([tf.keras.layers.Conv2D(4, 3, name="conv"),
                                         tf.keras.layers.BatchNormalization(name="bn"), tf.keras.layers.Flatten(),
                                         tf.keras.layers.Dense(1, dtype="float32", name="out")])
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y), name="loss")
            train = _train_op(loss, model, x)
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")
    return KerasModel("mixed_precision", graph, loss, train, _data([(x, _uniform), (y, _uniform)], BATCH, seed))


class _Subclassed(tf.keras.Model):
    """Conv2D → BatchNormalization → ReLU → pooling → Dense(3), made in ``__init__``, applied in ``call``."""

    def __init__(self) -> None:
        super().__init__(name="subclassed")
        self.conv = tf.keras.layers.Conv2D(4, 3, use_bias=False)
        self.norm = tf.keras.layers.BatchNormalization()
        self.pool = tf.keras.layers.GlobalAveragePooling2D()
        self.head = tf.keras.layers.Dense(CLASSES)

    def call(self, x: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        return self.head(self.pool(tf.nn.relu(self.norm(self.conv(x), training=training))))


def subclassed(seed: int = 7) -> KerasModel:
    """A subclassed model (no ``Input``: its variables are made when it is called on the placeholder),
    cross-entropy, Adam."""
    graph = tf.Graph()
    with graph.as_default():
        tf.keras.utils.set_random_seed(seed)
        x = tf.compat.v1.placeholder(tf.float32, [BATCH, 8, 8, 3], name="x")
        y = tf.compat.v1.placeholder(tf.int32, [BATCH], name="y")
        model = _Subclassed()
        logits = model(x, training=True)
        loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True),
                              name="loss")
        train = _train_op(loss, model, x)
    return KerasModel("subclassed", graph, loss, train, _data([(x, _uniform), (y, _labels)], BATCH, seed + 100))


def two_outputs(seed: int = 8, features: int = 6) -> KerasModel:
    """A functional model with two heads on a shared Dense + BatchNormalization trunk, built on its
    ``Input`` and called on the placeholder: softmax cross-entropy (weight 1) + MSE (weight 0.5), as
    ``compile(loss_weights=...)`` sums them."""
    graph = tf.Graph()
    with graph.as_default():
        tf.keras.utils.set_random_seed(seed)
        inputs = tf.keras.Input((features,), name="features")
        trunk = tf.keras.layers.BatchNormalization()(tf.keras.layers.Dense(16, activation="relu")(inputs))
        model = tf.keras.Model(inputs, [tf.keras.layers.Dense(CLASSES, activation="softmax", name="cls")(trunk),
                                        tf.keras.layers.Dense(1, name="reg")(trunk)])
        x = tf.compat.v1.placeholder(tf.float32, [BATCH, features], name="x")
        labels = tf.compat.v1.placeholder(tf.int32, [BATCH], name="labels")
        target = tf.compat.v1.placeholder(tf.float32, [BATCH, 1], name="target")
        cls, reg = model(x, training=True)
        loss = tf.add(tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(labels, cls)),
                      0.5 * tf.reduce_mean(tf.keras.losses.mean_squared_error(target, reg)), name="loss")
        train = _train_op(loss, model, x)
    feeds = _data([(x, _uniform), (labels, _labels), (target, _uniform)], BATCH, seed + 100)
    return KerasModel("two_outputs", graph, loss, train, feeds)
