"""A Keras 3 model of your own (``import keras``) for pardnn-launch on the latest stack.

``job.toml`` names ``net:build`` (the model, compiled with its optimizer and schedule) and
``net:batches`` (the data); pardnn-launch imports this file from the job file's folder.
"""

from __future__ import annotations

import keras
import numpy as np

FEATURES, CLASSES = 16, 4


def build(width: int = 32) -> keras.Model:
    """The model; called inside the graph pardnn-launch builds, so create everything here."""
    features = keras.Input((FEATURES,), name="features")
    h = keras.layers.Dense(width, activation="gelu", kernel_regularizer=keras.regularizers.l2(1e-4))(features)
    h = keras.layers.LayerNormalization()(h)
    h = keras.layers.Dense(width, activation="gelu")(h)
    model = keras.Model(features, keras.layers.Dense(CLASSES, activation="softmax", name="classes")(h))
    schedule = keras.optimizers.schedules.CosineDecay(0.0, 100, warmup_target=3e-3, warmup_steps=10)
    model.compile(keras.optimizers.AdamW(schedule, weight_decay=0.01, global_clipnorm=1.0),
                  "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def batches(iteration: int, batch_size: int, rank: int, ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """Batch ``iteration`` of this rank's share: features, and the class of the largest of the first four."""
    rng = np.random.default_rng([iteration, rank, ranks])
    x = rng.normal(size=(batch_size, FEATURES)).astype(np.float32)
    return x, x[:, :CLASSES].argmax(axis=1)
