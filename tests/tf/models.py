"""Small training graphs for the adapter's tests, built in their own ``tf.Graph`` (no global state
but the seed set by ``tf.keras.utils.set_random_seed``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf


class Step:
    """What every test model offers: the fetches of one training step and an initializer."""

    graph: tf.Graph
    train: tf.Operation
    loss: tf.Tensor

    @property
    def fetches(self) -> list[Any]:
        return [self.train, self.loss]

    def initializer(self) -> tf.Operation:
        with self.graph.as_default():
            return tf.compat.v1.global_variables_initializer()


def sparse_rows() -> tf.Tensor:
    """In the current graph: ids [4, 6] → ``unique`` → an unsorted segment sum ``summed`` of data
    [24, 8] over the distinct ids (a data-dependent row count, at most 24)."""
    ids = tf.compat.v1.placeholder(tf.int32, [4, 6], name="ids")
    unique, idx = tf.unique(tf.reshape(ids, [-1]), name="unique")
    data = tf.compat.v1.placeholder(tf.float32, [24, 8], name="data")
    return tf.math.unsorted_segment_sum(data, idx, tf.shape(unique)[0], name="summed"), unique


@dataclass
class Model(Step):
    graph: tf.Graph
    inputs: list[tf.Tensor]
    loss: tf.Tensor
    train: tf.Operation
    extra: dict[str, Any] = field(default_factory=dict)


def tiny(batch: int | None = 4) -> Model:
    """``loss = sum(x @ w)``, x [batch, 3], w [3, 5] a resource variable, plain gradient descent."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [batch, 3], name="x")
        w = tf.compat.v1.get_variable("w", [3, 5], use_resource=True)
        mm = tf.matmul(x, w, name="mm")
        loss = tf.reduce_sum(mm, name="loss")
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss, name="train")
        tf.add(mm, tf.constant(1.0, name="one"), name="unused")
    return Model(graph, [x], loss, train)


def two_layer(optimizer: str = "adam", *, batch: int = 4, resource: bool = True, seed: int = 7) -> Model:
    """A 2-layer dense net (3 → 5 → 2, ReLU) with a squared loss and ``optimizer`` (adam | sgd)."""
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(seed)
        x = tf.compat.v1.placeholder(tf.float32, [batch, 3], name="x")
        y = tf.compat.v1.placeholder(tf.float32, [batch, 2], name="y")

        def variable(name: str, shape: list[int]) -> Any:
            return tf.compat.v1.get_variable(name, shape, use_resource=resource)

        w1, b1 = variable("w1", [3, 5]), variable("b1", [5])
        w2, b2 = variable("w2", [5, 2]), variable("b2", [2])
        hidden = tf.nn.relu(tf.matmul(x, w1, name="mm1") + b1, name="hidden")
        out = tf.add(tf.matmul(hidden, w2, name="mm2"), b2, name="out")
        loss = tf.reduce_mean(tf.square(out - y), name="loss")
        opt = (tf.compat.v1.train.AdamOptimizer(0.01) if optimizer == "adam"
               else tf.compat.v1.train.GradientDescentOptimizer(0.1))
        train = opt.minimize(loss, name="train")
    return Model(graph, [x, y], loss, train)


def lstm_dense(seed: int = 11, *, batch: int = 8, steps: int = 5, features: int = 4) -> Model:
    """Keras LSTM(12) → LSTM(8) → Dense(16, relu) → Dense(8, tanh) → Dense(1), MSE, Adam."""
    graph = tf.Graph()
    with graph.as_default():
        tf.keras.utils.set_random_seed(seed)
        x = tf.compat.v1.placeholder(tf.float32, [batch, steps, features], name="x")
        y = tf.compat.v1.placeholder(tf.float32, [batch, 1], name="y")
        h = tf.keras.layers.LSTM(12, return_sequences=True)(x)
        h = tf.keras.layers.LSTM(8)(h)
        h = tf.keras.layers.Dense(16, activation="relu")(h)
        h = tf.keras.layers.Dense(8, activation="tanh")(h)
        out = tf.keras.layers.Dense(1)(h)
        loss = tf.reduce_mean(tf.square(out - y), name="loss")
        train = tf.compat.v1.train.AdamOptimizer(0.01).minimize(loss, name="train")
    return Model(graph, [x, y], loss, train)


def batches(model: Model, count: int, seed: int = 3) -> list[dict[tf.Tensor, np.ndarray]]:
    """``count`` feed dicts of uniform random data for ``model``'s placeholders."""
    rng = np.random.default_rng(seed)
    return [{t: rng.random(t.shape.as_list(), dtype=np.float32) for t in model.inputs} for _ in range(count)]


def train_losses(model: Model, feeds: list[dict[tf.Tensor, np.ndarray]], config: tf.compat.v1.ConfigProto,
                 *, trace_last: bool = False) -> tuple[np.ndarray, Any]:
    """Losses of one training step per feed; with ``trace_last``, the last step's RunMetadata too (its trace
    and the partition graphs TensorFlow ran)."""
    init = model.initializer()
    losses = []
    metadata = tf.compat.v1.RunMetadata()
    with tf.compat.v1.Session(graph=model.graph, config=config) as session:
        session.run(init)
        for index, feed in enumerate(feeds):
            if trace_last and index == len(feeds) - 1:
                options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE,
                                                  output_partition_graphs=True)
                _, loss = session.run(model.fetches, feed, options=options, run_metadata=metadata)
            else:
                _, loss = session.run(model.fetches, feed)
            losses.append(loss)
    return np.array(losses), metadata
