"""A job's ``[data] dataset``: the user's ``tf.data.Dataset`` read inside the step's graph.

``fn(batch_size, rank, ranks)`` returns a dataset of batches shaped as ``[data] entry``'s
(``(x, y)`` or ``{name: ..., "labels": ...}``). :func:`first_batch` reads its first batch
(the model's placeholders and checks come from it, as from the function form's batch 0);
:class:`Stream` makes it again in the graph, repeated and prefetched, behind an iterator whose
batches are the defaults of the model's placeholders, so a step needs no ``feed_dict``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from jobs.config import Job, JobError
from jobs.entrypoints import user_error
from jobs.userbatch import Layout, as_dict

v1 = tf.compat.v1

__all__ = ["Stream", "first_batch", "numpy_batches"]


def _dataset(job: Job, function: Callable[..., Any], batch: int, shard: tuple[int, int], key: str = "data.dataset",
             entry: str | None = None) -> tf.data.Dataset:
    rank, ranks = shard
    entry = job.dataset if entry is None else entry
    try:
        made = function(batch, rank, ranks)
    except JobError:
        raise
    except Exception as error:
        raise JobError(f"{job.source}: {key} = {entry!r}: fn({batch}, {rank}, {ranks}) raised "
                       f"{user_error(error, job)}") from error
    if not isinstance(made, tf.data.Dataset):
        raise JobError(f"{job.source}: {key} = {entry!r}: fn({batch}, {rank}, {ranks}) returned "
                       f"{type(made).__name__}; expected a tf.data.Dataset of batches ((x, y) or a dict)")
    return made


def numpy_batches(job: Job, function: Callable[..., Any], batch: int, shard: tuple[int, int], count: int,
                  key: str = "data.dataset") -> list[Any]:
    """The dataset's first ``count`` batches as NumPy arrays, read in a graph and session of their own
    (so whatever graph the caller builds, and eager or not); fewer when the dataset ends first."""
    entry = getattr(job, "dataset", None) if key == "data.dataset" else (job.evaluation or {}).get("dataset")
    graph = tf.Graph()
    with graph.as_default():
        dataset = _dataset(job, function, batch, shard, key, entry)
        iterator = v1.data.make_initializable_iterator(dataset.take(count))
        element = iterator.get_next()
    out: list[Any] = []
    with v1.Session(graph=graph, config=v1.ConfigProto(device_count={"GPU": 0})) as session:
        session.run(iterator.initializer)
        for _ in range(count):
            try:
                out.append(session.run(element))
            except tf.errors.OutOfRangeError:
                break
            except Exception as error:
                raise JobError(f"{job.source}: {key} = {entry!r}: reading batch {len(out)} raised "
                               f"{user_error(error, job)}") from error
    return out


def first_batch(job: Job, function: Callable[..., Any], batch: int, shard: tuple[int, int]) -> Any:
    """The dataset's first batch as NumPy arrays."""
    found = numpy_batches(job, function, batch, shard, 1)
    if not found:
        raise JobError(f"{job.source}: data.dataset = {job.dataset!r}: the dataset is empty; expected batches "
                       "of batch_size samples")
    return found[0]


class Stream:
    """The dataset in the current graph: ``skip`` batches skipped (a resumed run's), repeated,
    prefetched; ``initializer`` starts it (in the step's ``init_op``, and again on a resume);
    ``wait`` is the seconds a step waited for its batch (the iterator's ``get_next``)."""

    def __init__(self, job: Job, function: Callable[..., Any], batch: int, shard: tuple[int, int]) -> None:
        self.job, self.batch = job, batch
        with v1.name_scope("input_pipeline"):
            self.skip = v1.placeholder_with_default(tf.constant(0, tf.int64), [], name="skip")
            dataset = _dataset(job, function, batch, shard).skip(self.skip).repeat().prefetch(tf.data.AUTOTUNE)
            iterator = v1.data.make_initializable_iterator(dataset)
            self.initializer = iterator.initializer
            began = tf.timestamp(name="began")
            self.element = iterator.get_next(name="next_batch")
            with tf.control_dependencies(tf.nest.flatten(self.element)):
                got = tf.timestamp(name="got")
            self.wait = tf.subtract(got, began, name="wait_seconds")

    def tensors(self, layout: Layout | None) -> dict[str, tf.Tensor]:
        """The batch by placeholder name (:func:`jobs.userbatch.as_dict`'s rules, on tensors)."""
        return as_dict(self.job, 0, self.element, layout, self.batch, arrays=False)

    def default(self, name: str, value: tf.Tensor, dtype: tf.DType, shape: list[int]) -> tf.Tensor:
        """A placeholder ``name`` whose value is the stream's ``value`` (cast to ``dtype``, checked to be ``shape``)."""
        with v1.name_scope("input_pipeline/"):
            value = value if value.dtype == dtype else tf.cast(value, dtype)
            value = tf.ensure_shape(value, shape)
        return v1.placeholder_with_default(value, shape, name=name)

