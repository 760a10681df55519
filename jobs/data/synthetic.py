"""Synthetic batches with the shapes and vocabularies of the real datasets, and something to learn.

- Text (Word-RNN, Char-CRN): a Markov chain over the word vocabulary: the next word is a fixed
  successor of the current one with probability 1/2, else a Zipf-distributed draw (exponent 1.1,
  as word frequencies). Char-CRN spells every word with a fixed random string of characters.
- Images (WRN): one fixed random pattern per class plus Gaussian noise of the same scale.
- Translation (Transformer): Zipf-distributed source sentences of random length; the target is
  the source word by word through a fixed random bijection of the vocabulary, then ``<eos>``.
- Video (E3D-LSTM): two bright squares per sequence moving at constant speed and bouncing off
  the borders (the setting of Moving MNIST with squares for digits).

Everything is a pure function of (seed, shard, iteration); the fixed tables come from the seed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from jobs.data.images import reshape_patch
from jobs.data.sampling import generator, scheduled_sampling_flags

__all__ = ["SOURCES"]

Batch = dict[str, np.ndarray]
PAD, UNK, EOS = 0, 1, 2  # transformer ids; text models reserve 0 for <unk>
ZIPF_EXPONENT = 1.1


def _zipf(size: int, start: int = 0) -> np.ndarray:
    weights = 1.0 / np.arange(1, size - start + 1) ** ZIPF_EXPONENT
    return np.concatenate([np.zeros(start), weights / weights.sum()])


def _markov_words(vocab: int, batch: int, length: int, rng: np.random.Generator, successor: np.ndarray,
                  unigram: np.ndarray) -> np.ndarray:
    words = np.empty((batch, length), np.int32)
    words[:, 0] = rng.choice(vocab, batch, p=unigram)
    for t in range(1, length):
        follow = rng.random(batch) < 0.5
        words[:, t] = np.where(follow, successor[words[:, t - 1]], rng.choice(vocab, batch, p=unigram))
    return words


def word_rnn(params: dict[str, Any], batch: int, seed: int, shard: tuple[int, int]) -> Callable[[int], Batch]:
    vocab, steps = params["vocab_size"], params["seq_length"]
    successor = generator(seed, 1).permutation(vocab)
    unigram = _zipf(vocab)

    def make(iteration: int) -> Batch:
        words = _markov_words(vocab, batch, steps + 1, generator(seed, 2, iteration, *shard), successor, unigram)
        return {"tokens": words[:, :-1], "targets": words[:, 1:]}

    return make


def spellings(vocab: int, chars: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """``[vocab, width]`` character ids: start (1), 1 to ``width - 2`` letters (ids 4+), end (2), padding (0)."""
    table = np.zeros((vocab, width), np.int32)
    lengths = rng.integers(1, width - 1, vocab)
    letters = rng.integers(4, chars, (vocab, width - 2), dtype=np.int32)
    table[:, 0] = 1
    inside = np.arange(width - 2)[None, :] < lengths[:, None]
    table[:, 1:-1] = np.where(inside, letters, 0)
    table[np.arange(vocab), lengths + 1] = 2
    return table


def char_crn(params: dict[str, Any], batch: int, seed: int, shard: tuple[int, int]) -> Callable[[int], Batch]:
    vocab, steps = params["word_vocab_size"], params["seq_length"]
    successor = generator(seed, 1).permutation(vocab)
    unigram = _zipf(vocab)
    spelled = spellings(vocab, params["char_vocab_size"], params["max_word_length"], generator(seed, 3))

    def make(iteration: int) -> Batch:
        words = _markov_words(vocab, batch, steps + 1, generator(seed, 2, iteration, *shard), successor, unigram)
        return {"chars": spelled[words[:, :-1]], "targets": words[:, 1:]}

    return make


def wrn(params: dict[str, Any], batch: int, seed: int, shard: tuple[int, int]) -> Callable[[int], Batch]:
    size, classes = params["image_size"], params["num_classes"]
    patterns = generator(seed, 1).standard_normal((classes, size, size, 3), dtype=np.float32)

    def make(iteration: int) -> Batch:
        rng = generator(seed, 2, iteration, *shard)
        labels = rng.integers(0, classes, batch).astype(np.int32)
        noise = rng.standard_normal((batch, size, size, 3), dtype=np.float32)
        return {"images": patterns[labels] + noise, "labels": labels}

    return make


def transformer(params: dict[str, Any], batch: int, seed: int, shard: tuple[int, int]) -> Callable[[int], Batch]:
    vocab, source_length, target_length = params["vocab_size"], params["source_length"], params["target_length"]
    words = generator(seed, 1).permutation(np.arange(3, vocab))
    translate = np.concatenate([np.arange(3), words]).astype(np.int32)
    unigram = _zipf(vocab, start=3)
    longest = min(source_length, target_length) - 1

    def make(iteration: int) -> Batch:
        rng = generator(seed, 2, iteration, *shard)
        lengths = rng.integers(max(1, longest // 2), longest + 1, batch)
        tokens = rng.choice(vocab, (batch, longest), p=unigram).astype(np.int32)
        source = np.zeros((batch, source_length), np.int32)
        target = np.zeros((batch, target_length), np.int32)
        for row, length in enumerate(lengths):
            source[row, :length] = tokens[row, :length]
            source[row, length] = EOS
            target[row, :length] = translate[tokens[row, :length]]
            target[row, length] = EOS
        return {"source": source, "target": target}

    return make


def moving_squares(count: int, length: int, size: int, rng: np.random.Generator, *, objects: int = 2) -> np.ndarray:
    """``[count, length, size, size]`` float32 videos of ``objects`` bouncing squares of side ``size // 4``."""
    side = max(1, size // 4)
    span = size - side
    videos = np.zeros((count, length, size, size), np.float32)
    start = rng.uniform(0, span, (count, objects, 2))
    velocity = rng.uniform(-0.08, 0.08, (count, objects, 2)) * size
    for t in range(length):
        # Reflect the straight path off the borders: position mod 2·span, folded back into [0, span].
        folded = np.abs((start + velocity * t) % (2 * span) - span) if span else np.zeros_like(start)
        corner = np.rint(span - folded).astype(int)
        for n in range(count):
            for k in range(objects):
                y, x = corner[n, k]
                videos[n, t, y:y + side, x:x + side] = 1.0
    return videos


def e3d_lstm(params: dict[str, Any], batch: int, seed: int, shard: tuple[int, int]) -> Callable[[int], Batch]:
    size, channels, patch = params["image_size"], params["image_channels"], params["patch_size"]
    total, observed = params["total_length"], params["input_length"]

    def make(iteration: int) -> Batch:
        videos = moving_squares(batch, total, size, generator(seed, 2, iteration, *shard))
        frames = reshape_patch(np.repeat(videos[..., None], channels, axis=-1), patch)
        flag_shape = (batch, total - observed - 1, *frames.shape[2:])
        return {"frames": frames,
                "real_input_flag": scheduled_sampling_flags(flag_shape, iteration, params["sampling_decay"], seed,
                                                            shard)}

    return make


SOURCES: dict[str, Callable[[dict[str, Any], int, int, tuple[int, int]], Callable[[int], Batch]]] = {
    "word_rnn": word_rnn,
    "char_crn": char_crn,
    "wrn": wrn,
    "transformer": transformer,
    "e3d_lstm": e3d_lstm,
}
