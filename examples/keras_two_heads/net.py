"""A compiled two-output Keras model of your own for pardnn-launch: one trunk, two heads.

``build`` returns a functional model with a softmax head ``digit`` (which of 10 patterns) and a
regression head ``brightness`` (the image's mean), compiled with its optimizer, a loss per output and
their weights. ``job.toml`` names only the entries: pardnn trains with what the model was compiled
with (the job file may override any of it). ``batches`` gives ``(images, {"digit": ..., "brightness": ...})``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import tensorflow as tf

IMAGE, CHANNELS, CLASSES = 16, 3, 10


def build(width: int = 16, learning_rate: float = 0.005) -> tf.keras.Model:
    """The compiled model; called inside the graph pardnn-launch builds, so create everything here."""
    layers = tf.keras.layers
    images = tf.keras.Input((IMAGE, IMAGE, CHANNELS), name="images")
    trunk = tf.keras.Sequential([layers.Conv2D(width, 3, strides=2, activation="relu"), layers.BatchNormalization(),
                                 layers.Conv2D(2 * width, 3, strides=2, activation="relu"),
                                 layers.GlobalAveragePooling2D(), layers.Dense(4 * width, activation="relu")],
                                name="trunk")
    x = trunk(images)
    digit = layers.Dense(CLASSES, activation="softmax", name="digit")(x)
    brightness = layers.Dense(1, name="brightness")(x)
    model = tf.keras.Model(images, [digit, brightness], name="two_heads")
    model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate),
                  loss={"digit": "sparse_categorical_crossentropy", "brightness": "mse"},
                  loss_weights={"digit": 1.0, "brightness": 0.5})
    return model


@lru_cache(maxsize=1)
def _patterns() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(CLASSES, IMAGE, IMAGE, CHANNELS)).astype(np.float32)


def batches(iteration: int, batch_size: int, rank: int, ranks: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Batch ``iteration``: a pattern per class plus noise and a random brightness; the labels by output name.

    A pure function of its arguments (pardnn-launch asks node r of N for batch i·N + r at step i).
    """
    rng = np.random.default_rng([4, iteration, rank, ranks])
    digits = rng.integers(0, CLASSES, batch_size)
    shift = rng.normal(size=(batch_size, 1, 1, 1)).astype(np.float32)
    images = _patterns()[digits] + rng.normal(size=(batch_size, IMAGE, IMAGE, CHANNELS)).astype(np.float32) + shift
    return images, {"digit": digits.astype(np.int32), "brightness": images.mean(axis=(1, 2, 3))[:, None]}
