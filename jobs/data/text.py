"""Text datasets: Tiny Shakespeare and Penn Treebank (language models), IWSLT'16 De–En (translation).

- **Tiny Shakespeare** (``input.txt`` of char-rnn): words are the whitespace-separated tokens, as
  in word-rnn-tensorflow. **PTB** (``ptb.train.txt``): whitespace-separated words with ``<eos>``
  closing every line, as in the TensorFlow PTB tutorial.
- **IWSLT'16**: two aligned files ``<path>.<source_lang>`` and ``<path>.<target_lang>`` (``path`` a
  file prefix such as ``data/iwslt16/train``, or a directory holding ``train.de`` and ``train.en``),
  one sentence per line, whitespace-tokenized.

Vocabularies keep the most frequent words (ties: first seen first) and map the rest to ``<unk>``,
so the graph's shapes come from the job alone. Language-model batches follow the usual PTB
batching: the token stream is cut into ``batch × ranks`` rows and each step reads the next
``seq_length`` tokens of every row, wrapping around at the end.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jobs.data.sampling import DataError, sample_indices

logger = logging.getLogger(__name__)

Batch = dict[str, np.ndarray]
WORD_UNK = 0
CHAR_PAD, CHAR_START, CHAR_END, CHAR_UNK = 0, 1, 2, 3
PAD, UNK, EOS = 0, 1, 2


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    except OSError as error:
        raise DataError(f"{path}: cannot read: {error.strerror or error}") from None


def read_words(path: Path, dataset: str) -> list[str]:
    """The word stream of a Tiny Shakespeare or PTB file (a directory: its ``input.txt``/``ptb.train.txt``)."""
    if path.is_dir():
        path = path / ("input.txt" if dataset == "tiny_shakespeare" else "ptb.train.txt")
    content = _read_text(path)
    if dataset == "ptb":
        words = [word for line in content.splitlines() if line.strip() for word in (*line.split(), "<eos>")]
    else:
        words = content.split()
    if len(words) < 2:
        raise DataError(f"{path}: {len(words)} words; a language model needs at least 2")
    return words


def vocabulary(tokens: Sequence[str], size: int, reserved: Sequence[str]) -> dict[str, int]:
    """Token → id for ``reserved`` (ids 0, 1, ...) and then the most frequent tokens, ``size`` in all."""
    ids = {token: index for index, token in enumerate(reserved)}
    for token, _ in Counter(tokens).most_common():  # stable: equal counts keep first-seen order
        if len(ids) >= size:
            break
        ids.setdefault(token, len(ids))
    return ids


def encode(tokens: Sequence[str], ids: dict[str, int], unknown: int) -> np.ndarray:
    return np.fromiter((ids.get(token, unknown) for token in tokens), np.int32, len(tokens))


def stream_batches(stream: np.ndarray, batch: int, steps: int, shard: tuple[int, int]) -> Callable[[int], np.ndarray]:
    """``[batch, steps + 1]`` windows of ``stream`` cut into ``batch × ranks`` rows (PTB batching)."""
    rank, ranks = shard
    rows = batch * ranks
    if stream.size < rows * (steps + 1):
        logger.warning("the corpus has %d tokens, fewer than %d rows x %d steps: repeating it",
                       stream.size, rows, steps + 1)
        stream = np.resize(stream, rows * (steps + 1))
    table = stream[: stream.size // rows * rows].reshape(rows, -1)[rank * batch:(rank + 1) * batch]
    windows = (table.shape[1] - 1) // steps

    def window(iteration: int) -> np.ndarray:
        start = (iteration % windows) * steps
        return table[:, start:start + steps + 1]

    return window


def word_batches(words: Sequence[str], params: dict[str, Any], batch: int, seed: int,
                 shard: tuple[int, int]) -> Callable[[int], Batch]:
    """Word-RNN batches: ``tokens`` and next-word ``targets``."""
    ids = vocabulary(words, params["vocab_size"], ["<unk>"])
    window = stream_batches(encode(words, ids, WORD_UNK), batch, params["seq_length"], shard)

    def make(iteration: int) -> Batch:
        rows = window(iteration)
        return {"tokens": rows[:, :-1], "targets": rows[:, 1:]}

    return make


def spell(words: Sequence[str], chars: dict[str, int], width: int) -> np.ndarray:
    """``[len(words), width]`` ids: start marker, the word's characters (cut to ``width - 2``), end, padding."""
    table = np.full((len(words), width), CHAR_PAD, np.int32)
    for row, word in enumerate(words):
        letters = [chars.get(c, CHAR_UNK) for c in word[: width - 2]]
        table[row, : len(letters) + 2] = [CHAR_START, *letters, CHAR_END]
    return table


def char_word_batches(words: Sequence[str], params: dict[str, Any], batch: int, seed: int,
                      shard: tuple[int, int]) -> Callable[[int], Batch]:
    """Char-CRN batches: ``chars`` (every input word spelled) and next-word ``targets``."""
    ids = vocabulary(words, params["word_vocab_size"], ["<unk>"])
    chars = vocabulary([c for word in ids for c in word], params["char_vocab_size"], ["", "{", "}", "<unk>"])
    spelled = spell(list(ids), chars, params["max_word_length"])
    window = stream_batches(encode(words, ids, WORD_UNK), batch, params["seq_length"], shard)

    def make(iteration: int) -> Batch:
        rows = window(iteration)
        return {"chars": spelled[rows[:, :-1]], "targets": rows[:, 1:]}

    return make


def read_parallel(path: Path, source_lang: str, target_lang: str) -> list[tuple[list[str], list[str]]]:
    """Aligned sentence pairs of ``<path>.<source_lang>`` and ``<path>.<target_lang>`` (blank pairs dropped)."""
    prefix = path / "train" if path.is_dir() else path
    files = [prefix.with_name(f"{prefix.name}.{lang}") for lang in (source_lang, target_lang)]
    for file in files:
        if not file.is_file():
            raise DataError(f"no file {file} (expected {prefix}.{source_lang} and {prefix}.{target_lang})")
    source, target = (_read_text(file).splitlines() for file in files)
    if len(source) != len(target):
        raise DataError(f"{files[0]} has {len(source)} lines but {files[1]} has {len(target)}; "
                        "the files must be aligned line by line")
    pairs = [(s.split(), t.split()) for s, t in zip(source, target) if s.strip() and t.strip()]
    if not pairs:
        raise DataError(f"{files[0]}: no sentence pairs")
    return pairs


def _padded(sentences: Sequence[Sequence[str]], ids: dict[str, int], length: int) -> np.ndarray:
    out = np.full((len(sentences), length), PAD, np.int32)
    for row, words in enumerate(sentences):
        encoded = [ids.get(word, UNK) for word in words[: length - 1]]
        out[row, : len(encoded) + 1] = [*encoded, EOS]
    return out


def translation_batches(pairs: Sequence[tuple[list[str], list[str]]], params: dict[str, Any], batch: int, seed: int,
                        shard: tuple[int, int]) -> Callable[[int], Batch]:
    """Transformer batches: ``source`` and ``target`` ids (a shared vocabulary), ``<eos>``-terminated, padded."""
    ids = vocabulary([w for pair in pairs for side in pair for w in side], params["vocab_size"],
                     ["<pad>", "<unk>", "<eos>"])
    source = _padded([s for s, _ in pairs], ids, params["source_length"])
    target = _padded([t for _, t in pairs], ids, params["target_length"])

    def make(iteration: int) -> Batch:
        rows = sample_indices(len(pairs), batch, iteration, seed, shard)
        return {"source": source[rows], "target": target[rows]}

    return make
