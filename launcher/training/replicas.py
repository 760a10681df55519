"""Plain data parallelism: one rank per device, the whole model on each, every gradient averaged.

:func:`run_data` trains what a user would run instead of ParDNN over the same window, into the same files
and ``results.csv`` row (``parallelism`` = ``data``): build the replica's graph (with ``--recompute``:
:mod:`launcher.training.recompute`), cost and emulate it on one device (over the limit: ``does_not_fit``),
put every op on the rank's device, train and finish. docs/launcher.md (Plain data parallelism); the steps:
docs/notes-launcher.md.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np

from launcher.errors import DoesNotFit
from launcher.rank.agreement import average_costs, graph_digest, raise_everywhere
from launcher.rank.checkpoint import make_checkpointer
from launcher.rank.outcome import end_untrained, finish
from launcher.rank.resume import locate, resume_point
from launcher.rank.signals import StopGuard
from launcher.rank.state import RunState
from launcher.reporting.timeline import EMULATED_FILE, allreduce_share, write_emulated
from launcher.training.dataparallel import local_costs
from launcher.training.loop import train
from launcher.training.recompute import check_blocks, check_wrappable, recomputed
from launcher.variants import SharedByVariants, check_fits, dataset_shard, replica_batch
from pardnn.costs.machine import format_bytes

__all__ = ["run_data"]

logger = logging.getLogger("launcher")


def run_data(state: RunState, shared: SharedByVariants, guard: StopGuard) -> dict[str, Any]:
    """Train the job with one replica per device (module docstring)."""
    settings, topology, collector, variant = state.settings, state.topology, state.collector, state.variant
    with collector.phase("import"):
        import tensorflow as tf

        import pardnn.tf as ptf
        from jobs.costing import cost_graph
        from launcher.training.devices import node_machine, replica_devices
        from pardnn.emulation.simulate import evaluate_step
    devices = raise_everywhere(topology, "choosing the devices",
                               lambda: replica_devices(topology.local_rank, topology.node))
    state.devices = {"kind": devices.kind, "count": devices.count, "names": list(devices.names)}
    batch = raise_everywhere(topology, "splitting the batch",
                     lambda: replica_batch(settings, variant, topology.ranks_per_node))
    state.batch_size = batch
    logger.info("%d node(s) × %d %s device(s), one replica each; job %s, batch %d per replica (%d in all); %s",
                topology.node_count, topology.ranks_per_node, devices.kind, getattr(state.job, "name", "?"), batch,
                batch * topology.size, variant.label)

    with collector.phase("build"):
        backend = shared.allreduce
        hook = backend.averager() if backend is not None else None
        with recomputed(variant.recompute):
            trained = shared.build(state.job, batch_size=batch, gradient_hook=hook, **dataset_shard(state))
        broadcast = backend.broadcast(trained.graph, trained.variables) if backend is not None else None
    if variant.recompute:
        blocks = raise_everywhere(topology, "recomputing", lambda: check_blocks(state.job, trained.graph))
        logger.info("%s: %d blocks recomputed in the backward pass (%s)", variant.label, blocks,
                    check_wrappable(state.job))
    state.count(trained)
    guard.check()
    with collector.phase(settings.costs):
        cost = cost_graph(trained, settings.costs, device_preset=settings.device_preset,
                          profile_steps=settings.profile_steps, memory_bytes=settings.memory_bytes,
                          name=str(state.job.name), devices=1, kind=devices.kind, unknown_dim=batch)
        cost = average_costs(topology, local_costs(cost))
    guard.check()

    machine = raise_everywhere(topology, "describing the machine", lambda: node_machine(settings, devices))
    placement = np.zeros(cost.n, dtype=np.int64)
    evaluation, schedule, memory = evaluate_step(cost, machine, placement)
    digest = graph_digest(cost)  # what every replica shares: the graph (there is no placement to compare)
    state.placement = {"sha256": digest, "placer": None, "ops": cost.n, "machine": machine.describe(),
                       "recompute": variant.recompute, "report": {"evaluation": evaluation.to_dict()}}
    if topology.is_root:
        state.placement["emulated_makespan_us"] = write_emulated(state.directory / EMULATED_FILE, cost, machine,
                                                                 placement, schedule=schedule, memory=memory)
        state.placement["allreduce"] = allreduce_share(topology, settings.device_preset, devices.kind, cost, machine,
                                                       placement, schedule=schedule)
    logger.info("%s: %d ops on one device per replica, simulated step %.0f us, peak memory %s", variant.label, cost.n,
                evaluation.makespan_us, format_bytes(max(evaluation.peak_memory_bytes)))
    try:
        check_fits(variant.label, evaluation.peak_memory_bytes, evaluation.limit_bytes, machine)
    except DoesNotFit as error:
        end_untrained(state, error)
    locate(state)  # --resume: one checkpoint for every rank
    resume = raise_everywhere(topology, "resuming", lambda: resume_point(state, digest))

    with collector.phase("apply"):
        applied = ptf.apply(trained.graph, dict.fromkeys(cost.names, 0), devices.names)
    state.placement["apply"] = dataclasses.asdict(applied)
    guard.check()

    checkpointer = make_checkpointer(state, trained, digest)
    digests = train(state, trained, broadcast, devices, guard, tf, ptf, checkpointer=checkpointer, resume=resume)
    return finish(state, digests)
