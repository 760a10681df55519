"""A zoo or user job's step built by TensorFlow (and costed by estimates) once per test run.

    parts = costed(load_job("wrn-tiny"), batch=4, micro=2)   # a CostParts; .graph is the CostGraph
    train = built(load_job("wrn-tiny"), 4, micro_batches=2)  # the TrainGraph, to read, once per worker

:func:`costed` is :func:`jobs.maxbatch.build_parts` (what ``pardnn max-batch`` builds for a probe), shared by
every test of the run that asks for the same job, batch, micro-batches and preset
(:func:`tests.helpers.shared.shared`). :func:`built` keeps TensorFlow's graph itself, which does not pickle, in
the worker that built it: the tests that read one step (its ops, its costs on several presets) share an
``xdist_group`` (:data:`ZOO_STEPS`) so that they run in one worker, and a :func:`costed` made there takes
the step from it instead of building it again. Tests of building itself call ``jobs.build``.
"""

from __future__ import annotations

from typing import Any

from jobs.config import Job
from jobs.maxbatch import build_parts  # bound here: a test may replace jobs.maxbatch's with costed
from pardnn.batch.batchscale import CostParts
from tests.helpers.shared import shared

# The xdist_group of the tests that read the zoo's plain and micro-batched steps through :func:`built`.
ZOO_STEPS = "zoo steps built once"

_BUILT: dict[tuple[str, int, int], Any] = {}  # (repr(job), batch, micro) -> TrainGraph, in this worker


def built(job: Job, batch_size: int, *, micro_batches: int = 1) -> Any:
    """``jobs.build(job, batch_size, micro_batches=...)``, built once in this worker and kept: the caller only
    reads it (its ops, :func:`pardnn.tf.estimate.estimate_parts`), never sets devices or trains it. Called as
    ``jobs.training.build`` is by ``jobs.plansteps.Steps`` and ``jobs.maxbatch.build_parts``."""
    key = (repr(job), batch_size, micro_batches)
    if key not in _BUILT:
        _BUILT[key] = _kept_or_built(job, batch_size, micro_batches)
    return _BUILT[key]


def _kept_or_built(job: Job, batch_size: int, micro_batches: int) -> Any:
    """The step :func:`built` keeps in this worker, else a build of its own (not kept)."""
    kept = _BUILT.get((repr(job), batch_size, micro_batches))
    if kept is not None:
        return kept
    from jobs.training import build

    return build(job, batch_size=batch_size, micro_batches=micro_batches)


def costed(job: Job, batch: int, micro: int = 1, preset: str | None = None) -> CostParts:
    """The costed step of ``job`` at ``batch`` (``micro`` micro-batches), ``preset`` (default the job's)."""
    preset = preset or job.device_preset
    return shared(("costed step", repr(job), batch, micro, preset),
                  lambda: build_parts(job, batch, micro, preset, build=_kept_or_built))
