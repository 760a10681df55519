"""Input data of a job: ``batches(job)`` gives ``batch(iteration) -> {input name: array}``.

``[data] source = "synthetic"`` (the default) draws batches with the shapes and vocabulary sizes
of the real datasets and enough structure to learn from (:mod:`jobs.data.synthetic`); a dataset
name reads the local files at ``[data] path`` (:mod:`jobs.data.text`, :mod:`jobs.data.images`).
Batches are a pure function of the job's seed, the iteration and the shard, so every run and every
rank sees the same data; shard ``(rank, ranks)`` gives each data-parallel rank its own part.
No TensorFlow here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from jobs.config import Job, JobError
from jobs.data import images, synthetic, text
from jobs.data.sampling import DataError

__all__ = ["Batches", "batches"]

Batches = Callable[[int], dict[str, np.ndarray]]


def batches(job: Job, batch_size: int | None = None, *, shard: tuple[int, int] = (0, 1)) -> Batches:
    """The job's batch function (``batch_size`` overrides ``job.batch_size``).

    Raises
    ------
    JobError
        ``[data] path`` missing or not in the dataset's format (names the file and what was expected).
    """
    if job.data_entry is not None:
        raise ValueError(f"{job.source}: data.entry: jobs.build reads it (it checks batches against the inputs)")
    batch = job.batch_size if batch_size is None else batch_size
    index, count = shard
    if not 0 <= index < count:
        raise ValueError(f"shard={shard}: expected (rank, ranks) with 0 <= rank < ranks")
    params = job.model_params
    source = job.data["source"]
    if source == "synthetic":
        return synthetic.SOURCES[job.model](params, batch, job.seed, shard)
    path = Path(job.data["path"])
    where = f"{job.source}: data.path = {str(path)!r}"
    if not path.exists() and source != "iwslt16":  # iwslt16 takes a file prefix; read_parallel checks its files
        raise JobError(f"{where}: no such file or directory (relative paths are taken from the working directory)")
    try:
        if source in ("tiny_shakespeare", "ptb"):
            words = text.read_words(path, source)
            if job.model == "word_rnn":
                return text.word_batches(words, params, batch, job.seed, shard)
            return text.char_word_batches(words, params, batch, job.seed, shard)
        if source == "iwslt16":
            pairs = text.read_parallel(path, job.data["source_lang"], job.data["target_lang"])
            return text.translation_batches(pairs, params, batch, job.seed, shard)
        if source == "cifar100":
            return images.cifar_batches(images.read_cifar100(path), params, batch, job.seed, shard)
        if source == "moving_mnist":
            return images.video_batches(images.read_moving_mnist(path), params, batch, job.seed, shard)
    except DataError as error:
        raise JobError(f"{where}: {error}") from None
    raise AssertionError(f"unhandled data source {source!r}")
