"""The one core behind ``pardnn-launch`` and ``launcher.run``: per node, place the replica and train.

Per node (one MPI rank per node, :mod:`launcher.topology`):

0. **set up**: read the job and settings and check the output folder (before Horovod and
   TensorFlow load); ranks agree on the outcome, so an error every rank finds is printed once;
   rank 0 makes the run directory; each rank starts its log, heartbeat and stall watchdog
   (:mod:`launcher.console`, :mod:`launcher.heartbeat`);
1. **build** the job's graph once (``jobs.build``) on the node's devices (:mod:`launcher.devices`),
   with the Horovod gradient hook when there are several nodes (:mod:`launcher.dataparallel`; its
   allreduces get their devices when the placement is applied);
2. **profile** a few steps or **estimate** costs of that graph (:func:`jobs.costing.cost_graph`, which
   also attaches the memory limit; the hook's ops count as taking no time); nodes check they built
   the same graph and average their costs (:mod:`launcher.agreement`);
3. **compile** numba's kernels (:func:`pardnn.warmup.warm_up`: compiled on a first run, loaded from
   the cache later), then **partition** with ParDNN once for the node's K devices and memory (a
   memory heuristic only when the devices have a memory size:
   :func:`pardnn.pipeline.resolve_heuristic`); nodes compare the digests of the placement file
   (:func:`pardnn.io.format_placement`; a mismatch names the nodes); rank 0 writes the emulated step
   (:mod:`launcher.timeline`); ``--resume`` checks the checkpoint's digest (:mod:`launcher.checkpoint`);
4. **apply** the placement by op name, the hook's ops on their variable's device;
5. **initialize** variables (or load a checkpoint) and broadcast rank 0's values; **train** for ``iterations`` steps,
   each node feeding its own share of the data (iteration ``i`` on node ``r`` of ``N`` reads batch
   ``i·N + r``), recording every step (:mod:`launcher.collector`), tracing one and saving checkpoints
   (:mod:`launcher.training`);
6. compare the replicas' weights and optimizer state (a mismatch fails the run); rank 0 gathers
   every node's figures and writes ``summary.json``, ``status.json`` and a row of ``results.csv``.

Outputs go to ``<out>/<run id>/`` (:mod:`launcher.state`): per rank ``rank-<r>.jsonl``,
``rank-<r>.log``, ``figures-<r>.json``, ``heartbeat-<r>.json``; from rank 0 ``placement.txt``,
``summary.json`` and ``status.json``; ``<out>/results.csv`` collects one row per run for sweeps.
Failures end every rank within seconds (:mod:`launcher.failure`); stop signals and stalls end it
with every live rank's files written (:mod:`launcher.ending`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from launcher import console
from launcher.agreement import (
    average_costs,
    check_agreement,
    check_variables,
    placement_digest,
    variables_digest,
)
from launcher.checkpoint import make_checkpointer, resume_point
from launcher.collector import Collector
from launcher.dataparallel import GradientAverager, broadcast_op, find_horovod, init_horovod, local_costs
from launcher.env import launch_size
from launcher.errors import AgreedError, LaunchError, Stalled, Stopped
from launcher.failure import exit_code, fail, one_line, shared, status_of
from launcher.files import check_output_folder, write_text
from launcher.settings import Settings, resolve
from launcher.signals import StopGuard
from launcher.state import RESULTS_FILE, SUMMARY_FILE, RunState
from launcher.timeline import EMULATED_FILE, step_ms, write_emulated
from launcher.topology import Topology, discover
from launcher.training import train
from pardnn.errors import PardnnError

__all__ = ["RESULTS_FILE", "SUMMARY_FILE", "load_job", "run"]

logger = logging.getLogger("launcher")

PLACEMENT_FILE = "placement.txt"
LOG_FILE = "rank-{rank}.log"

BuildFn = Callable[..., Any]


def _zoo(name: str) -> Callable[..., Any]:
    """``jobs.<name>`` (``load_job`` or ``build``) of the model zoo, checked to be a function."""
    try:
        import jobs
    except ImportError as error:
        raise LaunchError(f"the model zoo jobs/ cannot be imported ({error})") from None
    function = getattr(jobs, name, None)
    if not callable(function):
        raise LaunchError(f"the model zoo jobs/ has no function {name}")
    return function


def load_job(job: Any) -> Any:
    """A ``jobs.Job`` from a path or preset name (``jobs.load_job``); a job object passes through."""
    if not isinstance(job, (str, os.PathLike)):
        return job
    return _zoo("load_job")(job)


def _agree(topology: Topology, what: str, error: PardnnError | None) -> None:
    """Raise an :class:`AgreedError` on every rank if ``error`` happened on any (collective).

    The same message from every node is given once; different ones are named by node.
    """
    outcome = None if error is None else (str(error), exit_code(error))
    outcomes = topology.allgather(outcome)
    failed = [(node, o) for node, o in zip(topology.nodes, outcomes, strict=True) if o is not None]
    if not failed:
        return
    code = max(o[1] for _, o in failed)
    messages: dict[str, list[str]] = {}
    for node, (message, _) in failed:
        messages.setdefault(message, []).append(node)
    if len(messages) == 1 and len(failed) == topology.size:
        raise AgreedError(failed[0][1][0], code)
    raise AgreedError(f"{what} failed on " + "; ".join(f"node {', '.join(nodes)}: {message}"
                                                       for message, nodes in messages.items()), code)


def _together(topology: Topology, what: str, action: Callable[[], Any]) -> Any:
    """Run ``action`` on every node; if it raises a PardnnError anywhere, raise it everywhere (collective)."""
    try:
        result, error = action(), None
    except PardnnError as caught:
        result, error = None, caught
    _agree(topology, what, error)
    return result


def _read_settings(job: Any, overrides: dict[str, Any]) -> tuple[Any, Settings | None, PardnnError | None]:
    """The job and its settings, the output folder checked; or the error (ranks agree on it next)."""
    try:
        job = load_job(job)
        settings = resolve(job, overrides)
        check_output_folder(settings.out)
    except PardnnError as error:
        return job, None, error
    return job, settings, None


def _run_directory(topology: Topology, settings: Settings, job_name: str) -> Path:
    """``<out>/<job>-n<N>-k<K>-b<B>-<UTC time>``, made by rank 0, shared, checked writable everywhere (collective)."""
    made: tuple[str | None, str | None] = (None, None)
    if topology.is_root:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        base = f"{job_name}-n{topology.size}-k{settings.devices_per_node}-b{settings.batch_size}-{stamp}"
        made = (None, f"cannot make a run folder under {settings.out}: {base}-* all exist")
        for attempt in range(1, 1000):
            candidate = settings.out / (base if attempt == 1 else f"{base}-{attempt}")
            try:
                candidate.mkdir()
            except FileExistsError:
                continue
            except OSError as error:
                made = (None, f"--out {settings.out}: cannot create the run folder {candidate.name} "
                              f"({error.strerror or error}); pass --out a folder you can write to")
                break
            made = (candidate.name, None)
            break
    name, problem = topology.bcast(made)
    if problem is not None:
        raise AgreedError(problem)
    directory = settings.out / name
    _together(topology, "making the run folder", lambda: check_output_folder(directory))
    return directory


def _attach_log(path: Path, topology: Topology) -> logging.Handler | None:
    """This rank's log file: the console tee's when running under ``pardnn-launch``, else a logging handler."""
    if console.attach(path, topology.rank, topology.node, topology.size > 1):
        return None
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    return handler


def run(job: Any, *, build: BuildFn | None = None, **overrides: Any) -> dict[str, Any]:
    """Place the job's training graph on each node's devices with ParDNN and train it across nodes.

    Parameters
    ----------
    job:
        A job file path, a preset name (both via ``jobs.load_job``), or a ``jobs.Job``.
    build:
        The graph builder (default ``jobs.build``; the signature of the jobs contract).
    **overrides:
        Settings that take precedence over the job file (see :mod:`launcher.settings`):
        ``devices_per_node``, ``iterations``, ``window`` (``"100:150"`` or a pair), ``out``,
        ``memory``, ``costs``, ``batch_size``, ``reserve``, ``memory_heuristic``, ``device_preset``,
        ``profile_steps``, ``progress``, ``stall_timeout``. ``None`` means not given.

    Returns
    -------
    dict
        On rank 0 the summary (as written to ``summary.json``); on other ranks that node's figures.

    Raises
    ------
    PardnnError
        A bad job or setting, an infeasible placement, nodes that disagree or whose replicas ended
        different (reported on stderr first), a stop signal or a stall (:class:`~launcher.errors.Stopped`).
        An error on one rank of several ends every rank with ``MPI_Abort`` instead.
    """
    topology: Topology | None = None
    state: RunState | None = None
    handler: logging.Handler | None = None
    try:
        job, settings, error = _read_settings(job, overrides)
        if error is not None and (launch_size() or 1) == 1:
            raise error  # not started by mpirun or srun: no peer to agree with
        topology = discover()
        _agree(topology, "setting up", error)  # an error every rank finds is raised everywhere, printed once
        assert settings is not None
        topology.check()
        directory = _run_directory(topology, settings, str(getattr(job, "name", "job")))
        handler = _attach_log(directory / LOG_FILE.format(rank=topology.rank), topology)
        collector = Collector(directory / f"rank-{topology.rank}.jsonl", {"rank": topology.rank, "node": topology.node})
        state = RunState(job, settings, topology, directory, collector)
        if topology.is_root:
            state.write_status("running", None, None)
        state.start_watch()
        build = build or _zoo("build")
        with StopGuard(state.stop, exit_now=state.exit_now) as guard:
            hvd = _together(topology, "loading Horovod", lambda: find_horovod(topology.size))  # type: ignore[union-attr]
            if hvd is not None:
                init_horovod(hvd, topology.size)
            return _run_node(state, build, hvd, guard)
    except BaseException as error:
        _end(error, topology, state)
        raise
    finally:
        if handler is not None:
            logging.getLogger().removeHandler(handler)
            handler.close()


def _end(error: BaseException, topology: Topology | None, state: RunState | None) -> None:
    """Report ``error`` once, write the files, and end the other ranks as the error requires."""
    multi = topology is not None and topology.size > 1
    speaker = not (multi and shared(error)) or topology.is_root  # type: ignore[union-attr]
    flush = None
    if state is not None:
        if state.finisher is not None and isinstance(error, Stopped) and not isinstance(error, Stalled):
            # A stop signal: its watcher may be writing the files, or may not have begun (or never will,
            # once the stop guard closed); the finisher does it once, whoever comes first.
            state.end_stopped(status_of(error), one_line(error))
        def flush(status: str, message: str) -> None:
            state.flush(status, message, speaker=speaker, exit_code=exit_code(error))
    fail(error, topology, flush, reported=state is not None and not state.claim_report())
    if multi and isinstance(error, Stopped):
        RunState.exit_now(exit_code(error))  # peers may be gone: MPI's and Horovod's shutdown would wait


def _run_node(state: RunState, build: BuildFn, hvd: Any, guard: StopGuard) -> dict[str, Any]:
    settings, topology, collector = state.settings, state.topology, state.collector
    with collector.phase("import"):
        import tensorflow as tf

        import pardnn.tf as ptf
        from jobs.costing import cost_graph
        from launcher.devices import node_devices, node_machine
        from pardnn import partition
        from pardnn.io import format_placement
        from pardnn.pipeline import resolve_heuristic
        from pardnn.warmup import warm_up
    devices = node_devices(settings.devices_per_node, topology.node)
    state.devices = {"kind": devices.kind, "count": devices.count, "names": list(devices.names)}
    logger.info("%d node(s) × %d %s device(s); job %s, batch %d per node", topology.size, devices.count,
                devices.kind, getattr(state.job, "name", "?"), settings.batch_size)

    with collector.phase("build"):  # once: costed, placed and trained (the hook's devices are set by apply)
        hook = GradientAverager(hvd) if hvd is not None else None
        trained = build(state.job, batch_size=settings.batch_size, gradient_hook=hook,
                        micro_batches=settings.micro_batches)
        broadcast = broadcast_op(hvd, trained.graph, trained.variables) if hvd is not None else None
    state.samples_per_step = int(trained.samples_per_step)
    state.tokens_per_step = None if trained.tokens_per_step is None else int(trained.tokens_per_step)
    guard.check()
    with collector.phase(settings.costs):
        cost = cost_graph(trained, settings.costs, device_preset=settings.device_preset,
                          profile_steps=settings.profile_steps, memory_bytes=settings.memory_bytes,
                          name=str(state.job.name), devices=devices.count, kind=devices.kind,
                          unknown_dim=settings.batch_size)
        cost = average_costs(topology, local_costs(cost))
    guard.check()

    machine = _together(topology, "describing the machine", lambda: node_machine(settings, devices))
    # A memory heuristic needs a memory size: on a machine without one it is "auto" (none).
    heuristic = resolve_heuristic(settings.memory_heuristic if machine.bounded else "auto", machine)
    with collector.phase("compile"):  # numba's kernels compiled or loaded, timed apart from partition
        warm_up()
    with collector.phase("partition"):
        result = _together(topology, "partitioning",
                           lambda: partition(cost, machine, memory_heuristic=heuristic, ordered=settings.run_order))
    # The placement file's bytes, as pardnn.io.write_placement writes them: the run order, if any, is in
    # them, so the nodes' digests agree on it too.
    text = format_placement(cost, result.placement, order=result.order)
    digest = placement_digest(text)
    check_agreement(topology.nodes, topology.allgather(digest), "placements",
                    "ParDNN is deterministic for identical inputs, so check that the nodes run the same versions")
    placement = dict(zip(cost.names, result.placement.tolist(), strict=True))
    state.placement = {"sha256": digest, "ops": cost.n, "machine": machine.describe(), "file": PLACEMENT_FILE,
                       "memory_heuristic": heuristic or "none", "run_order": result.order is not None,
                       "report": result.report.to_dict()}
    if topology.is_root:
        write_text(state.directory / PLACEMENT_FILE, text)
        state.placement["emulated_makespan_us"] = write_emulated(state.directory / EMULATED_FILE, cost, machine,
                                                                 result.placement, result.order)
    logger.info("placement %s: %d ops on %d devices, simulated step %.0f us%s", digest[:12], cost.n, devices.count,
                result.report.evaluation.makespan_us,
                "" if result.order is None else " with each device in its run order (enforced)")
    resume = _together(topology, "resuming", lambda: resume_point(state, digest))

    with collector.phase("apply"):
        hooked = hook.placement(trained.graph, placement) if hook is not None else {}
        wanted = {**placement, **hooked}
        # The hook's allreduces run on their variables' devices, not where the order put them: they stay
        # out of the sequences (Horovod orders its collectives itself).
        order = None if result.order is None else {
            name: position for name, position in zip(cost.names, result.order.tolist(), strict=True)
            if name not in hooked}
        applied = ptf.apply(trained.graph, wanted, devices.names, order=order)
    state.placement["apply"] = dataclasses.asdict(applied)
    guard.check()

    checkpointer = make_checkpointer(state, trained.variables, digest)
    digests = train(state, trained, broadcast, devices, guard, tf, ptf, checkpointer=checkpointer, resume=resume)
    return _finish(state, digests)


def _finish(state: RunState, digests: dict[str, str]) -> dict[str, Any]:
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
                                      {"consistency": consistency, "step_ms": step_ms(makespan, medians)})
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
