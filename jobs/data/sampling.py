"""Deterministic sampling shared by the loaders: epochs of shuffled sample indices, split by shard."""

from __future__ import annotations

from functools import lru_cache

import numpy as np


class DataError(ValueError):
    """A dataset file that is missing or not in the expected format."""


def generator(seed: int, *keys: int) -> np.random.Generator:
    """A generator that depends only on ``seed`` and ``keys`` (iteration, shard, purpose...)."""
    return np.random.default_rng([seed, *keys])


@lru_cache(maxsize=4)
def _permutation(count: int, seed: int, epoch: int) -> np.ndarray:
    return generator(seed, 0x5EED, epoch).permutation(count)


def sample_indices(count: int, batch: int, iteration: int, seed: int, shard: tuple[int, int]) -> np.ndarray:
    """Indices of the ``batch`` samples of ``iteration`` for rank ``shard[0]`` of ``shard[1]``.

    The ranks' batches of one iteration are consecutive slices of one global batch drawn from a
    fresh permutation of the ``count`` samples every epoch, so ranks see disjoint samples when the
    global batch fits the dataset.
    """
    rank, ranks = shard
    positions = (iteration * ranks + rank) * batch + np.arange(batch, dtype=np.int64)
    epochs, offsets = np.divmod(positions, count)
    out = np.empty(batch, np.int64)
    for epoch in np.unique(epochs):
        mask = epochs == epoch
        out[mask] = _permutation(count, seed, int(epoch))[offsets[mask]]
    return out


def scheduled_sampling_flags(shape: tuple[int, ...], iteration: int, decay: float, seed: int,
                             shard: tuple[int, int]) -> np.ndarray:
    """E3D-LSTM's ``real_input_flag``: 1 (feed the true frame) with probability ``1 - decay · iteration``.

    ``shape`` is ``[batch, predicted steps, ...frame]``; one draw per sample and step.
    """
    probability = max(0.0, 1.0 - decay * iteration)
    draws = generator(seed, 0xF1A6, iteration, *shard).random(shape[:2]) < probability
    return np.broadcast_to(draws.reshape(shape[:2] + (1,) * (len(shape) - 2)), shape).astype(np.float32)
