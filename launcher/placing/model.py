"""Model parallelism on one node: build and cost the replica's graph, place it with a placer, apply, train.

:func:`run_model` runs the phases on each node (or each node's leader in a comparison): **build** the
job's graph with the gradient hook, **profile** or **estimate** its costs (the nodes averaged), **compile**
numba's kernels, **place** it (:func:`launcher.variants.place`), **apply** the placement by op name and
**train** (:mod:`launcher.training.loop`). :class:`Costed` is a graph built and costed once, for a
comparison to place with each placer. Rules: docs/notes-launcher.md.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from jobs.schema import AUTO
from launcher.errors import UNTRAINED, AgreedError, DoesNotFit, LaunchError, NotPlaced
from launcher.files import write_text
from launcher.placing.planning import log_trial, micro_report, no_micro_fits
from launcher.rank.agreement import average_costs, check_agreement, placement_digest, raise_everywhere
from launcher.rank.checkpoint import graph_ops_digest, make_checkpointer
from launcher.rank.failure import status_of
from launcher.rank.outcome import end_untrained, finish
from launcher.rank.resume import graph_change, locate, parse_placement_text, resume_point, saved_placement
from launcher.rank.signals import StopGuard
from launcher.rank.state import RunState
from launcher.reporting.timeline import EMULATED_FILE, allreduce_share, run_cluster, write_emulated
from launcher.training.dataparallel import local_costs
from launcher.training.loop import train
from launcher.variants import SharedByVariants, check_fits, dataset_shard, place, replica_batch
from pardnn.errors import InfeasibleError, PardnnError

__all__ = ["PLACEMENT_FILE", "Costed", "run_model"]

logger = logging.getLogger("launcher")

PLACEMENT_FILE = "placement.txt"


@dataclasses.dataclass
class Costed:
    """The node's graph, built and costed once for every placer of a comparison."""

    trained: Any
    hook: Any
    broadcast: Any
    cost: Any
    machine: Any
    heuristic: str | None
    ordered: bool = False  # a placement's run order is in the graph: build it again before the next


def _build(state: RunState, shared: SharedByVariants, micro: int) -> tuple[Any, Any, Any]:
    """The job's graph in ``micro`` micro-batches with the allreduce hook (several nodes), and the initial
    broadcast."""
    backend, among = shared.allreduce if state.topology.size > 1 else None, shared.training_set
    hook = backend.averager(among) if backend is not None else None
    # micro_batches is passed only when > 1, so builders without micro-batches still serve
    trained = shared.build(state.job, batch_size=state.replica_batch, gradient_hook=hook, **dataset_shard(state),
                           **({} if micro == 1 else {"micro_batches": micro}))
    broadcast = backend.broadcast(trained.graph, trained.variables, among) if backend is not None else None
    return trained, hook, broadcast


def _costed(state: RunState, shared: SharedByVariants, devices: Any, guard: StopGuard,
            micro: int | None = None) -> Costed:
    """Build and cost the graph, or take the comparison's (built again when a run order is in it);
    ``micro`` (``--micro-batches auto`` trying an M) builds and costs that M's graph afresh."""
    from jobs.costing import cost_graph
    from launcher.training.devices import node_machine
    from pardnn.partitioner import resolve_heuristic

    settings, topology, collector = state.settings, state.topology, state.collector
    costed = shared.costed if micro is None else None
    if costed is not None and not costed.ordered:
        return costed
    with collector.phase("build"):  # the hook's devices are set by apply
        trained, hook, broadcast = _build(state, shared, settings.micro_batches if micro is None else micro)
    state.count(trained)  # known before placing, so a step that does not fit reports them
    guard.check()
    if costed is not None:
        costed = dataclasses.replace(costed, trained=trained, hook=hook, broadcast=broadcast, ordered=False)
    else:
        with collector.phase(settings.costs):
            cost = cost_graph(trained, settings.costs, device_preset=settings.device_preset,
                              profile_steps=settings.profile_steps, memory_bytes=settings.memory_bytes,
                              name=str(state.job.name), devices=devices.count, kind=devices.kind,
                              unknown_dim=state.replica_batch)
            cost = average_costs(topology, local_costs(cost))
        guard.check()
        machine = raise_everywhere(topology, "describing the machine", lambda: node_machine(settings, devices))
        # A memory heuristic needs a memory size: on a machine without one it is "auto" (none).
        heuristic = resolve_heuristic(settings.memory_heuristic if machine.bounded else "auto", machine)
        costed = Costed(trained, hook, broadcast, cost, machine, heuristic)
    shared.costed = costed
    return costed


def _placed(state: RunState, costed: Costed) -> Any:
    """The variant's placement, the same on every node; :class:`DoesNotFit` on every node when the
    placer finds none that fits, :class:`NotPlaced` when it gives none for another reason (e.g. a graph
    too large for it)."""
    label = state.variant.label

    def placed() -> Any:
        try:
            return place(str(state.variant.placer), costed.cost, costed.machine, costed.heuristic,
                         ordered=state.settings.run_order)
        except InfeasibleError as error:
            raise DoesNotFit(f"{label}: {error}") from None
        except PardnnError as error:
            raise NotPlaced(f"{label}: {error}") from None

    return raise_everywhere(state.topology, "placing", placed)


def _place(state: RunState, costed: Costed) -> Any:
    """:func:`_placed`; a variant without a placement ends untrained (``does_not_fit``, ``no_placement``)."""
    try:
        return _placed(state, costed)
    except AgreedError as error:
        if status_of(error) in UNTRAINED:
            end_untrained(state, error)
        raise


def _costed_and_placed(state: RunState, shared: SharedByVariants, devices: Any, guard: StopGuard,
                       warm_up: Any) -> tuple[Costed, tuple[Any, str, Any]]:
    """The graph built and costed, and its placement with its run order judged (:func:`_judged_order`);
    with ``--micro-batches auto`` those of the M chosen."""
    collector = state.collector
    if state.settings.micro_batches == AUTO:
        with collector.phase("compile"):
            warm_up(placers=[str(state.variant.placer)])
        return _auto_micro_batches(state, shared, devices, guard)
    costed = _costed(state, shared, devices, guard)
    with collector.phase("compile"):  # the placer's numba kernels compiled or loaded, timed apart from placing
        warm_up(placers=[str(state.variant.placer)])
    with collector.phase("partition"):
        result = _place(state, costed)
    return costed, _judged_order(state, costed.cost, costed.machine, result, devices.kind)


def _auto_micro_batches(state: RunState, shared: SharedByVariants, devices: Any,
                        guard: StopGuard) -> tuple[Costed, tuple[Any, str, Any]]:
    """``--micro-batches auto``: the run's k fixed, each M of :data:`pardnn.plan.search.MICRO_BATCHES`
    dividing the replica's batch is built, costed and placed in turn (collective) by the run's placer, and
    judged with the run's gradient allreduce by :class:`pardnn.plan.search.Planner`, the search of
    ``pardnn plan``; the graph and judged placement of the M chosen are kept, the others dropped."""
    from pardnn.emulation.allreduce import Cluster
    from pardnn.plan.search import MICRO_BATCHES, Planner, Unplaced

    built: dict[int, Costed] = {}

    def graph_for(batch: int, micro: int) -> Any:
        built[micro] = _costed(state, shared, devices, guard, micro)
        guard.check()
        return built[micro].cost

    def place(graph: Any, machine: Any) -> Any:
        [costed] = [c for c in built.values() if c.cost is graph]
        try:
            with state.collector.phase("partition"):
                return _placed(state, costed)
        except AgreedError as error:
            if status_of(error) not in UNTRAINED:
                raise
            line = str(error).splitlines()[0]
            raise (InfeasibleError(line) if status_of(error) == "does_not_fit" else Unplaced(line)) from None

    k, replicas = devices.count, state.settings.replicas_per_node
    cluster = run_cluster(state.topology, state.settings.device_preset, devices.kind) or Cluster()
    planner = Planner(graph_for, lambda _: next(reversed(built.values())).machine, lambda _: cluster,
                      node_devices=k * replicas, nodes=state.topology.node_count,
                      node_batch=state.replica_batch * replicas, place=place)
    search = planner.search([k], MICRO_BATCHES, on_trial=log_trial("micro-batches auto"))
    state.micro_batches = micro_report(search)
    if search.chosen is None:
        end_untrained(state, no_micro_fits(search, state.replica_batch))
    micro = search.chosen.plan.micro_batches
    logger.info("micro-batches auto: chose %s", search.why)
    check_agreement(state.topology.nodes, state.topology.allgather(str(micro)), "micro-batch choices",
                    "every node tries the same M on the same averaged costs, so check that they run the same versions")
    costed = shared.costed = built[micro]
    built.clear()  # the other Ms' graphs
    judged = planner.judged[(state.replica_batch, micro, k)]  # as _judged_order judges it, emulated once
    return costed, (judged.result, judged.why, judged.step if cluster.replicas > 1 else None)


def run_model(state: RunState, shared: SharedByVariants, guard: StopGuard) -> dict[str, Any]:
    """Place the node's replica with ``state.variant.placer`` and train it (module docstring); a resumed
    run takes its checkpoint's placement instead (:func:`_resumed`)."""
    settings, topology, collector = state.settings, state.topology, state.collector
    with collector.phase("import"):
        import tensorflow as tf

        import pardnn.tf as ptf
        from launcher.training.devices import node_devices
        from pardnn.warmup import warm_up
    k = settings.replica_devices
    first = None if k is None else topology.local_rank * k  # this rank's replica's devices
    devices = node_devices(k or settings.devices_per_node, topology.node, first)
    state.devices = {"kind": devices.kind, "count": devices.count, "names": list(devices.names)}
    state.batch_size = replica_batch(settings, state.variant, devices.count)
    replicas = "" if k is None else f", {settings.replicas_per_node} replicas of {k} per node"
    logger.info("%d node(s) × %d %s device(s)%s; job %s, batch %d per replica; placer %s", topology.node_count,
                devices.count, devices.kind, replicas, getattr(state.job, "name", "?"), state.replica_batch,
                state.variant.label)
    locate(state)  # --resume: one checkpoint for every rank
    saved = raise_everywhere(topology, "reading the checkpoint", lambda: saved_placement(state))
    if saved is not None:
        placed = _resumed(state, shared, saved)
    else:
        placed = _placed_anew(state, shared, devices, guard, warm_up)
    resume = raise_everywhere(topology, "resuming", lambda: resume_point(state, None if saved is not None or
                                                                  settings.replace else placed.digest))

    trained, hook = placed.trained, placed.hook
    with collector.phase("apply"):
        graph_digest = graph_ops_digest(trained.graph)  # before apply: the names a resumed build must have
        hooked = hook.placement(trained.graph, placed.placement) if hook is not None else {}
        wanted = {**placed.placement, **hooked}
        # The hook's allreduces run on their variables' devices, not where the order put them: they stay
        # out of the sequences (Horovod orders its collectives itself).
        order = None if placed.order is None else {
            name: position for name, position in placed.order.items() if name not in hooked}
        applied = ptf.apply(trained.graph, wanted, devices.names, order=order)
    if shared.costed is not None:
        shared.costed.ordered = applied.ordered > 0
    state.placement["apply"] = dataclasses.asdict(applied)
    guard.check()

    checkpointer = make_checkpointer(state, trained, placed.digest, graph_digest=graph_digest,
                                     placement_text=placed.text, micro_batches=placed.micro_batches)
    digests = train(state, trained, placed.broadcast, devices, guard, tf, ptf, checkpointer=checkpointer,
                    resume=resume)
    return finish(state, digests)


@dataclasses.dataclass
class _Placed:
    """The replica to train: its graph and hook, the placement (by op name) and its file's text."""

    trained: Any
    hook: Any
    broadcast: Any
    text: str
    digest: str
    placement: dict[str, int]
    order: dict[str, int] | None
    micro_batches: int


def _placed_anew(state: RunState, shared: SharedByVariants, devices: Any, guard: StopGuard, warm_up: Any) -> _Placed:
    """Build, cost and place the replica (every node the same), write the placement and the emulated step."""
    from pardnn.io import format_placement

    topology = state.topology
    costed, (result, judged, step) = _costed_and_placed(state, shared, devices, guard, warm_up)
    trained, cost, machine = costed.trained, costed.cost, costed.machine
    state.count(trained)  # the chosen M's (the same for every M: the node's batch)
    # The placement file's bytes, as pardnn.io.write_placement writes them: the run order, if any, is in
    # them, so the nodes' digests agree on it too.
    text = format_placement(cost, result.placement, order=result.order)
    digest = placement_digest(text)
    check_agreement(topology.nodes, topology.allgather(digest), "placements",
                    "the placers are deterministic for identical inputs, so check that the nodes run the same versions")
    evaluation = result.report.evaluation
    state.placement = {"sha256": digest, "placer": state.variant.placer, "ops": cost.n, "machine": machine.describe(),
                       "file": PLACEMENT_FILE, "memory_heuristic": costed.heuristic or "none",
                       "run_order": result.order is not None, "report": result.report.to_dict()}
    if judged:
        state.placement["run_order_judged"] = judged
        logger.info("%s", judged)
    if topology.is_root:
        write_text(state.directory / PLACEMENT_FILE, text)
        state.placement["emulated_makespan_us"] = write_emulated(
            state.directory / EMULATED_FILE, cost, machine, result.placement, result.order,
            schedule=result.schedule, memory=result.memory)  # the placer's own emulation, not a second one
        state.placement["allreduce"] = allreduce_share(topology, state.settings.device_preset, devices.kind, cost,
                                                       machine, result.placement, result.order, result.schedule,
                                                       step=step)
    logger.info("placement %s by %s: %d ops on %d devices, simulated step %.0f us%s", digest[:12], state.variant.label,
                cost.n, devices.count, evaluation.makespan_us,
                "" if result.order is None else " with each device in its run order (enforced)")
    try:
        check_fits(state.variant.label, evaluation.peak_memory_bytes, evaluation.limit_bytes, machine)
    except DoesNotFit as error:
        end_untrained(state, error)
    micro = state.settings.micro_batches
    chosen = int(state.micro_batches["chosen"]) if micro == AUTO and state.micro_batches else int(micro)
    order = None if result.order is None else dict(zip(cost.names, result.order.tolist(), strict=True))
    return _Placed(trained, costed.hook, costed.broadcast, text, digest,
                   dict(zip(cost.names, result.placement.tolist(), strict=True)), order, chosen)


def _resumed(state: RunState, shared: SharedByVariants, saved: tuple[Path, dict[str, Any], str]) -> _Placed:
    """The checkpoint's replica: the graph of its M built (with the hook), checked to be the saved graph,
    and its placement; no profiling, no placing (:mod:`launcher.rank.checkpoint`)."""
    path, meta, text = saved
    topology = state.topology
    micro = int(meta.get("micro_batches") or 1)
    with state.collector.phase("build"):
        trained, hook, broadcast = _build(state, shared, micro)
    state.count(trained)
    placement, order = parse_placement_text(text)
    def check() -> None:
        change = graph_change(path, meta, trained.graph, trained.variables, placement)
        if change is not None:
            raise LaunchError(change)

    raise_everywhere(topology, "checking the graph", check)  # a change on any node stops every node
    digest = str(meta["placement_sha256"])
    check_agreement(topology.nodes, topology.allgather(digest), "placements",
                    "every node read the same checkpoint, so check that they see the same files")
    state.placement = {**meta.get("placement", {}), "sha256": digest, "resumed_from": str(path)}
    if state.settings.micro_batches == AUTO:
        state.micro_batches = {"mode": AUTO, "chosen": micro, "why": f"resumed from {path.name}"}
    if topology.is_root:
        write_text(state.directory / PLACEMENT_FILE, text)
    logger.info("resuming %s: the saved placement %s (%d ops, M = %d), no profiling or placing", path, digest[:12],
                len(placement), micro)
    return _Placed(trained, hook, broadcast, text, digest, placement, order, micro)


def _judged_order(state: RunState, cost: Any, machine: Any, result: Any, kind: str) -> tuple[Any, str, Any]:
    """``result`` with its run order kept only where the step with the run's gradient allreduce is not
    longer in it than in order of readiness (:mod:`pardnn.placement.allreduce_order`; the same on every
    node: the same averaged costs), one line saying which (``""`` when there was nothing to judge), and
    that step with the allreduce (``None`` for one replica)."""
    cluster = run_cluster(state.topology, state.settings.device_preset, kind)
    if cluster is None:
        return result, "", None
    from pardnn.placement.allreduce_order import judge_order

    judged = judge_order(cost, machine, result, cluster)
    return judged.result, judged.why, judged.step
