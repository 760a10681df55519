"""A subclassed Keras model of your own for pardnn-launch: layers made in ``__init__``, applied in ``call``.

No ``tf.keras.Input``: pardnn builds the model in the job's graph by calling it on placeholders
shaped like the first batch (batch dimension = the node's batch). Its variables, its
regularisation losses (``model.losses``) and its batch-norm updates are then found as for a
functional model. ``job.toml`` names ``net:build`` (the model) and ``net:batches`` (the data).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import tensorflow as tf

IMAGE, CHANNELS, CLASSES = 16, 3, 10


class Block(tf.keras.layers.Layer):
    """Conv → BatchNormalization → ReLU, twice, plus the input: a residual block."""

    def __init__(self, width: int, **kwargs: object) -> None:
        super().__init__(**kwargs)
        layers = tf.keras.layers
        self.convs = [layers.Conv2D(width, 3, padding="same", use_bias=False) for _ in range(2)]
        self.norms = [layers.BatchNormalization() for _ in range(2)]

    def call(self, x: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        h = x
        for conv, norm in zip(self.convs, self.norms):
            h = tf.nn.relu(norm(conv(h), training=training))
        return x + h


class ResNet(tf.keras.Model):
    """A stem convolution, ``blocks`` residual blocks, pooling, Dropout and a softmax over the classes."""

    def __init__(self, width: int, blocks: int, dropout: float, weight_decay: float) -> None:
        super().__init__(name="resnet")
        layers = tf.keras.layers
        self.stem = layers.Conv2D(width, 3, padding="same", activation="relu")
        self.blocks = [Block(width) for _ in range(blocks)]
        self.pool = layers.GlobalAveragePooling2D()
        self.dropout = layers.Dropout(dropout)
        self.head = layers.Dense(CLASSES, activation="softmax",
                                 kernel_regularizer=tf.keras.regularizers.l2(weight_decay))

    def call(self, images: tf.Tensor, training: bool | None = None) -> tf.Tensor:
        x = self.stem(images)
        for block in self.blocks:
            x = block(x, training=training)
        return self.head(self.dropout(self.pool(x), training=training))


def build(width: int = 16, blocks: int = 2, dropout: float = 0.25, weight_decay: float = 1e-4) -> tf.keras.Model:
    """The model; called inside the graph pardnn-launch builds, so create everything here."""
    return ResNet(width, blocks, dropout, weight_decay)


@lru_cache(maxsize=1)
def _patterns() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(CLASSES, IMAGE, IMAGE, CHANNELS)).astype(np.float32)


def batches(iteration: int, batch_size: int, rank: int, ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """Batch ``iteration`` as ``(images, labels)``: one fixed random pattern per class plus as much noise.

    A pure function of its arguments (pardnn-launch asks node r of N for batch i·N + r at step i).
    """
    rng = np.random.default_rng([3, iteration, rank, ranks])
    labels = rng.integers(0, CLASSES, batch_size)
    noise = rng.normal(size=(batch_size, IMAGE, IMAGE, CHANNELS)).astype(np.float32)
    return _patterns()[labels] + noise, labels.astype(np.int32)
