"""A small Keras CNN of your own for pardnn-launch: Conv2D + BatchNormalization + Dropout + Dense.

``job.toml`` names ``net:build`` (the model) and ``net:batches`` (the data); pardnn-launch imports
this file from the job file's folder.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import tensorflow as tf

IMAGE, CHANNELS, CLASSES = 16, 3, 10


def build(width: int = 16, dropout: float = 0.25) -> tf.keras.Model:
    """The model; called inside the graph pardnn-launch builds, so create everything here."""
    layers = tf.keras.layers
    images = tf.keras.Input((IMAGE, IMAGE, CHANNELS), name="images")
    x = images
    for scale in (1, 2):
        x = layers.Conv2D(width * scale, 3, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization()(x)
        x = layers.ReLU()(x)
        x = layers.MaxPooling2D()(x)
    x = layers.Flatten()(x)
    x = layers.Dropout(dropout)(x)
    x = layers.Dense(4 * width, activation="relu")(x)
    probabilities = layers.Dense(CLASSES, activation="softmax")(x)
    return tf.keras.Model(images, probabilities, name="cnn")


@lru_cache(maxsize=1)
def _patterns() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(CLASSES, IMAGE, IMAGE, CHANNELS)).astype(np.float32)


def batches(iteration: int, batch_size: int, rank: int, ranks: int) -> dict[str, np.ndarray]:
    """Batch ``iteration``: one fixed random pattern per class plus as much noise.

    A pure function of its arguments (pardnn-launch asks node r of N for batch i·N + r at step i,
    and profiling reads a few batches first).
    """
    rng = np.random.default_rng([1, iteration, rank, ranks])
    labels = rng.integers(0, CLASSES, batch_size)
    noise = rng.normal(size=(batch_size, IMAGE, IMAGE, CHANNELS)).astype(np.float32)
    return {"images": _patterns()[labels] + noise, "labels": labels.astype(np.int32)}


def dataset(batch_size: int, rank: int, ranks: int) -> tf.data.Dataset:
    """The same kind of images as a tf.data pipeline (``[data] dataset = "net:dataset"``): 4,096
    samples, this rank's shard of them, shuffled each epoch, batched, a random flip in a parallel map."""
    rng = np.random.default_rng(2)
    labels = rng.integers(0, CLASSES, 4096).astype(np.int32)
    images = (_patterns()[labels] + rng.normal(size=(4096, IMAGE, IMAGE, CHANNELS))).astype(np.float32)

    def flip(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return tf.image.random_flip_left_right(x, seed=3), y

    return (tf.data.Dataset.from_tensor_slices((images, labels)).shard(ranks, rank)
            .shuffle(1024, seed=4).batch(batch_size, drop_remainder=True)
            .map(flip, num_parallel_calls=tf.data.AUTOTUNE))


def validation(batch_size: int, rank: int, ranks: int) -> tf.data.Dataset:
    """Held-out images (``[eval] dataset = "net:validation"``): 512 others, this rank's shard, in order."""
    rng = np.random.default_rng(3)
    labels = rng.integers(0, CLASSES, 512).astype(np.int32)
    images = (_patterns()[labels] + rng.normal(size=(512, IMAGE, IMAGE, CHANNELS))).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices((images, labels)).shard(ranks, rank).batch(batch_size,
                                                                                       drop_remainder=True)
