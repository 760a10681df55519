"""How a variant ends on its own terms: trained (:func:`finish`), or not before training (:func:`end_untrained`).

:func:`finish` runs after the last iteration: the replicas compare their weights (a mismatch fails
the run), rank 0 gathers every replica's figures and writes ``summary.json``, ``status.json`` and a
row of ``results.csv``. :func:`end_untrained` ends a variant whose step does not fit a device's memory
(``does_not_fit``) or that its placer could not place (``no_placement``); every rank finds it at once
(the placement is the same everywhere): rank 0 writes the summary and the row with the status and
the reason, then the error is raised on every rank, so the run ends with its one line (exit code 3
for ``does_not_fit``); a comparison records it and goes on. Both are collective.
"""

from __future__ import annotations

import logging
from typing import Any, NoReturn

from launcher.errors import AgreedError
from launcher.reporting.timeline import step_ms
from launcher.run.agreement import check_variables, variables_digest
from launcher.run.failure import one_line
from launcher.run.state import SUMMARY_FILE, RunState

__all__ = ["end_untrained", "finish"]

logger = logging.getLogger("launcher")


def finish(state: RunState, digests: dict[str, str]) -> dict[str, Any]:
    """After the last iteration: compare the replicas, gather the figures, write the run's files (collective)."""
    topology, settings = state.topology, state.settings
    state.end_watch("finishing", final=False)
    figures = state.node_figures()
    figures["variables_sha256"] = variables_digest(sorted(digests.items()))
    every = topology.allgather(digests)
    nodes = topology.gather(figures)
    try:
        check_variables(topology.nodes, every)
        status, problem = "complete", None
    except AgreedError as error:
        status, problem = error.status, error
    state.write_figures(status, figures)
    summary = figures
    if topology.is_root:
        assert nodes is not None
        consistency = {
            "placement_sha256_equal": len({n["placement_sha256"] for n in nodes}) == 1,
            "variables_sha256_equal": len({n["variables_sha256"] for n in nodes}) == 1,
            "variables_compared": len(digests),
        }
        makespan = state.placement.get("emulated_makespan_us")
        medians = [n["throughput"]["step_ms_median"] for n in nodes]
        summary = state.write_summary(status, nodes,
                                      {"consistency": consistency,
                                       "step_ms": step_ms(makespan, medians, state.placement.get("allreduce"))})
        if problem is None:
            state.write_status(status, None, 0)
            throughput = summary["throughput"]
            logger.info("throughput over iterations %d-%d: %.1f samples/s%s (%s)", *settings.window,
                        throughput["samples_per_s"],
                        "" if throughput["tokens_per_s"] is None else f", {throughput['tokens_per_s']:.1f} tokens/s",
                        state.directory / SUMMARY_FILE)
    if problem is not None:
        raise problem
    state.collector.flush(status)
    state.end_watch(status)
    return summary


def end_untrained(state: RunState, error: AgreedError) -> NoReturn:
    """Write the summary and row of a variant that ends untrained (status ``error.status``), then raise
    ``error`` (collective: every rank comes here with the same error)."""
    figures = state.node_figures()
    nodes = state.topology.gather(figures)
    if state.topology.is_root:
        assert nodes is not None
        makespan = state.placement.get("emulated_makespan_us")
        emulated = step_ms(makespan, [], state.placement.get("allreduce"))
        state.write_summary(error.status, nodes, {"message": one_line(error), "step_ms": emulated})
    raise error
