"""A small Keras transformer language model of your own for pardnn-launch.

Embedding + learned positions, causal MultiHeadAttention blocks with LayerNormalization and a
Dense feed-forward, then a softmax over the vocabulary at every position. ``job.toml`` names
``net:build`` (the model) and ``net:batches`` (the data).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import tensorflow as tf

VOCAB, LENGTH = 64, 16


class AddPositions(tf.keras.layers.Layer):
    """Adds a learned embedding of each position."""

    def build(self, input_shape: tf.TensorShape) -> None:
        self.positions = self.add_weight(name="positions", shape=input_shape[1:], initializer="random_normal")

    def call(self, x: tf.Tensor) -> tf.Tensor:
        return x + self.positions


def build(dim: int = 32, heads: int = 2, layers: int = 2, inner: int = 64, dropout: float = 0.1) -> tf.keras.Model:
    """The model; called inside the graph pardnn-launch builds, so create everything here."""
    keras = tf.keras.layers
    tokens = tf.keras.Input((LENGTH,), dtype="int32", name="tokens")
    x = AddPositions()(keras.Embedding(VOCAB, dim)(tokens))
    for _ in range(layers):
        attended = keras.MultiHeadAttention(heads, dim // heads, dropout=dropout)(x, x, use_causal_mask=True)
        x = keras.LayerNormalization()(x + attended)
        inner_x = keras.Dense(dim)(keras.Dense(inner, activation="relu")(x))
        x = keras.LayerNormalization()(x + keras.Dropout(dropout)(inner_x))
    probabilities = keras.Dense(VOCAB, activation="softmax")(x)
    return tf.keras.Model(tokens, probabilities, name="transformer_lm")


@lru_cache(maxsize=1)
def _successor() -> np.ndarray:
    return np.random.default_rng(0).permutation(VOCAB)


def batches(iteration: int, batch_size: int, rank: int, ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """Batch ``iteration`` as ``(x, y)``: token sequences where the next token is a fixed successor of
    the current one half the time, and y is x shifted by one (the next token at every position).

    A pure function of its arguments (pardnn-launch asks node r of N for batch i·N + r at step i).
    """
    rng = np.random.default_rng([2, iteration, rank, ranks])
    words = np.empty((batch_size, LENGTH + 1), np.int32)
    words[:, 0] = rng.integers(0, VOCAB, batch_size)
    for t in range(1, LENGTH + 1):
        follow = rng.random(batch_size) < 0.5
        words[:, t] = np.where(follow, _successor()[words[:, t - 1]], rng.integers(0, VOCAB, batch_size))
    return words[:, :-1], words[:, 1:]
