"""Costing a step (jobs.costing.cost_graph) as the launcher calls it: the settings' costs and memory limit."""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow")

from jobs.costing import cost_graph
from launcher.settings import resolve
from tests.launcher.standin import Job, build

pytestmark = pytest.mark.tf


def test_launcher_settings_cost_the_step_and_attach_the_memory_limit():
    job = Job(memory="64MiB", costs="estimate")
    settings = resolve(job)
    step = build(job, settings.batch_size)
    cost = cost_graph(step, settings.costs, device_preset=settings.device_preset, memory_bytes=settings.memory_bytes,
                      name=job.name, unknown_dim=settings.batch_size)
    assert cost.memory_limit_bytes == 64 * 2**20 and cost.name == job.name
    assert cost.total_work_us > 0  # estimated, not captured
    unlimited = cost_graph(step, "capture", memory_bytes=None)
    assert unlimited.memory_limit_bytes is None and unlimited.name == "tf-step" and unlimited.total_work_us == 0
    assert unlimited.names == cost.names


def test_unknown_costs_is_a_value_error():
    with pytest.raises(ValueError, match="costs='guess': expected one of estimate, profile, capture"):
        cost_graph(object(), "guess")
