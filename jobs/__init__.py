"""The model zoo and job files of pardnn-launch.

::

    from jobs import load_job, build
    job = load_job("trn-tiny")                  # or a path: load_job("jobs/trn-tiny.toml")
    train = build(job)                          # TrainGraph: graph, loss, train_op, feed_fn, ...
    cost = cost_graph(train, job.costs)         # CostGraph, memory_limit_bytes = the job's memory
    jobs.export_graph("trn-2", "trn-2.json.gz") # paper-size graph with estimated V100 costs

Only ``build``, ``TrainGraph``, ``export_graph`` and ``cost_graph`` import TensorFlow (on first use).
"""

from __future__ import annotations

from typing import Any

from pardnn.tfstack import prepare as _prepare

_prepare()  # before anything imports TensorFlow (pardnn.tfstack)

from jobs.config import JOBS_DIR, Job, JobError, job_from_dict, load_job, preset_names, with_setting
from jobs.costing import cost_graph

__all__ = ["JOBS_DIR", "Job", "JobError", "TrainGraph", "build", "cost_graph", "export_graph", "job_from_dict",
           "load_job", "preset_names", "with_setting"]

_NEEDS_TF = ("TrainGraph", "build", "export_graph")


def __getattr__(name: str) -> Any:
    if name in _NEEDS_TF:
        from pardnn.tfstack import import_tensorflow

        import_tensorflow()  # without the garbage collector's passes (pardnn.tfstack)
        from jobs import training

        value = getattr(training, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'jobs' has no attribute {name!r}")
