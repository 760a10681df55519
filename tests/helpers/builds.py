"""A zoo or user job's step built by TensorFlow and costed by estimates, once per test run.

    parts = costed(load_job("wrn-tiny"), batch=4, micro=2)   # a CostParts; .graph is the CostGraph

The build is :func:`jobs.maxbatch.build_parts` (what ``pardnn max-batch`` builds for a probe), shared by
every test of the run that asks for the same job, batch, micro-batches and preset
(:func:`tests.helpers.shared.shared`). Tests of building itself call ``jobs.build``.
"""

from __future__ import annotations

from jobs.config import Job
from jobs.maxbatch import build_parts  # bound here: a test may replace jobs.maxbatch's with costed
from pardnn.batch.batchscale import CostParts
from tests.helpers.shared import shared


def costed(job: Job, batch: int, micro: int = 1, preset: str | None = None) -> CostParts:
    """The costed step of ``job`` at ``batch`` (``micro`` micro-batches), ``preset`` (default the job's)."""
    preset = preset or job.device_preset
    return shared(("costed step", repr(job), batch, micro, preset), lambda: build_parts(job, batch, micro, preset))
