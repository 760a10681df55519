"""The one core behind ``pardnn-launch`` and ``launcher.run``: per node, place the replica and train.

Per node (one MPI rank per node, :mod:`launcher.topology`):

1. **build** the job's graph (``jobs.build``, no hook) on the node's devices (:mod:`launcher.devices`);
2. **profile** a few steps or **estimate** costs (:func:`jobs.costing.cost_graph`, which also
   attaches the memory limit); nodes check they built the same graph and average their costs
   (:mod:`launcher.agreement`);
3. **partition** with ParDNN once for the node's K devices and memory (a memory heuristic only when
   the devices have a memory size: :func:`pardnn.pipeline.resolve_heuristic`); nodes compare the
   digests of the placement file (:func:`pardnn.io.format_placement`; a mismatch names the nodes);
4. **build_hooked**: build the graph again with the Horovod gradient hook
   (:mod:`launcher.dataparallel`; one node: no hook) and **apply** the placement by op name, the
   hook's ops on their variable's device;
5. **initialize** variables and broadcast rank 0's values; **train** for ``iterations`` steps,
   each node feeding its own share of the data (iteration ``i`` on node ``r`` of ``N`` reads batch
   ``i·N + r``), recording every step (:mod:`launcher.collector`);
6. gather every node's figures on rank 0, which writes ``summary.json`` and a row of ``results.csv``.

Outputs go to ``<out>/<run id>/``: ``rank-<r>.jsonl`` (every rank), ``placement.txt`` and
``summary.json`` (rank 0); ``<out>/results.csv`` collects one row per run for sweeps. Failures end
every rank within seconds (:mod:`launcher.failure`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from launcher.agreement import average_costs, check_agreement, placement_digest, variables_digest
from launcher.collector import Collector
from launcher.dataparallel import GradientAverager, broadcast_op, find_horovod, init_horovod
from launcher.env import slurm_context
from launcher.errors import AgreedError, LaunchError
from launcher.failure import StopGuard, exit_code, fail
from launcher.files import append_csv_row, write_json, write_text
from launcher.progress import progress
from launcher.settings import Settings, resolve
from launcher.summary import RESULTS_COLUMNS, results_row, summarize
from launcher.topology import Topology, discover
from pardnn.errors import PardnnError

__all__ = ["RESULTS_FILE", "SUMMARY_FILE", "load_job", "run"]

logger = logging.getLogger("launcher")

SUMMARY_FILE = "summary.json"
RESULTS_FILE = "results.csv"
PLACEMENT_FILE = "placement.txt"

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


def _together(topology: Topology, what: str, action: Callable[[], Any]) -> Any:
    """Run ``action`` on every node; if it raises a PardnnError anywhere, raise it everywhere (collective)."""
    try:
        result, outcome = action(), None
    except PardnnError as error:
        result, outcome = None, (str(error), exit_code(error))
    outcomes = topology.allgather(outcome)
    failed = [(node, o) for node, o in zip(topology.nodes, outcomes, strict=True) if o is not None]
    if failed:
        code = max(o[1] for _, o in failed)
        if topology.size == 1:
            raise AgreedError(failed[0][1][0], code)
        raise AgreedError(f"{what} failed on " + "; ".join(f"node {node}: {o[0]}" for node, o in failed), code)
    return result


def _run_directory(topology: Topology, settings: Settings, job_name: str) -> Path:
    """``<out>/<job>-n<N>-k<K>-b<B>-<UTC time>``, made by rank 0 and shared (collective)."""
    name = None
    if topology.is_root:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        base = f"{job_name}-n{topology.size}-k{settings.devices_per_node}-b{settings.batch_size}-{stamp}"
        settings.out.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, 1000):
            candidate = settings.out / (base if attempt == 1 else f"{base}-{attempt}")
            try:
                candidate.mkdir()
            except FileExistsError:
                continue
            name = candidate.name
            break
        else:
            raise LaunchError(f"cannot make a run directory under {settings.out}: {base}-* all exist")
    return settings.out / topology.bcast(name)


@dataclasses.dataclass
class _Run:
    """What the run knows so far; the flush callback writes from it at any moment."""

    job: Any
    settings: Settings
    topology: Topology
    directory: Path
    collector: Collector
    devices: dict[str, Any] = dataclasses.field(default_factory=dict)
    placement: dict[str, Any] = dataclasses.field(default_factory=dict)
    samples_per_step: int = 0
    tokens_per_step: int | None = None
    training: bool = False

    def node_figures(self) -> dict[str, Any]:
        figures = self.collector.node_summary(self.settings.window, self.samples_per_step, self.tokens_per_step)
        figures["placement_sha256"] = self.placement.get("sha256")
        return figures

    def write_summary(self, status: str, nodes: list[dict[str, Any]], extra: dict[str, Any]) -> dict[str, Any]:
        summary = summarize(status=status, job=self.job, settings=self.settings.to_dict(), nodes=nodes,
                            devices=self.devices, placement=self.placement,
                            extra={"run_dir": str(self.directory), "emulated_nodes": self.topology.emulated,
                                   "slurm": slurm_context(), **extra})
        write_json(self.directory / SUMMARY_FILE, summary)
        return summary

    def flush(self, status: str, message: str | None = None) -> None:
        """Write this rank's records; rank 0 also writes a summary of what it has if training began."""
        self.collector.flush(status, message)
        if status != "complete" and self.training and self.topology.is_root:
            self.write_summary(status, [self.node_figures()], {"message": message, "partial": True})


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
        ``profile_steps``, ``progress``. ``None`` means not given.

    Returns
    -------
    dict
        On rank 0 the summary (as written to ``summary.json``); on other ranks that node's figures.

    Raises
    ------
    PardnnError
        A bad job or setting, an infeasible placement, nodes that disagree (reported on stderr
        first). An error on one rank of several ends every rank with ``MPI_Abort`` instead.
    """
    topology: Topology | None = None
    state: _Run | None = None
    try:
        job = load_job(job)
        settings = resolve(job, overrides)
        topology = discover()
        topology.check()
        if not topology.is_root and logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)  # rank 0 speaks for the job
        build = build or _zoo("build")
        hvd = _together(topology, "loading Horovod", lambda: find_horovod(topology.size))  # type: ignore[union-attr]
        if hvd is not None:
            init_horovod(hvd, topology.size)
        directory = _run_directory(topology, settings, str(getattr(job, "name", "job")))
        collector = Collector(directory / f"rank-{topology.rank}.jsonl",
                              {"rank": topology.rank, "node": topology.node})
        state = _Run(job, settings, topology, directory, collector)
        with StopGuard(state.flush) as guard:
            return _run_node(state, build, hvd, guard)
    except BaseException as error:
        fail(error, topology, state.flush if state is not None else None)
        raise


def _run_node(state: _Run, build: BuildFn, hvd: Any, guard: StopGuard) -> dict[str, Any]:
    settings, topology, collector = state.settings, state.topology, state.collector
    with collector.phase("import"):
        import tensorflow as tf

        import pardnn.tf as ptf
        from jobs.costing import cost_graph
        from launcher.devices import node_devices, node_machine
        from pardnn import partition
        from pardnn.io import format_placement
        from pardnn.pipeline import resolve_heuristic
    devices = node_devices(settings.devices_per_node, topology.node)
    state.devices = {"kind": devices.kind, "count": devices.count, "names": list(devices.names)}
    logger.info("%d node(s) × %d %s device(s); job %s, batch %d per node", topology.size, devices.count,
                devices.kind, getattr(state.job, "name", "?"), settings.batch_size)

    with collector.phase("build"):
        plain = build(state.job, batch_size=settings.batch_size)
    guard.check()
    with collector.phase(settings.costs):
        cost = cost_graph(plain, settings.costs, device_preset=settings.device_preset,
                          profile_steps=settings.profile_steps, memory_bytes=settings.memory_bytes,
                          name=str(state.job.name), devices=devices.count, kind=devices.kind,
                          unknown_dim=settings.batch_size)
        cost = average_costs(topology, cost)
    del plain
    guard.check()

    machine = _together(topology, "describing the machine", lambda: node_machine(settings, devices))
    # A memory heuristic needs a memory size: on a machine without one it is "auto" (none).
    heuristic = resolve_heuristic(settings.memory_heuristic if machine.bounded else "auto", machine)
    with collector.phase("partition"):
        result = _together(topology, "partitioning",
                           lambda: partition(cost, machine, memory_heuristic=heuristic))
    text = format_placement(cost, result.placement)  # the placement file's bytes, as pardnn.io.write_placement
    digest = placement_digest(text)
    check_agreement(topology.nodes, topology.allgather(digest), "placements",
                    "ParDNN is deterministic for identical inputs, so check that the nodes run the same versions")
    placement = dict(zip(cost.names, result.placement.tolist(), strict=True))
    state.placement = {"sha256": digest, "ops": cost.n, "machine": machine.describe(), "file": PLACEMENT_FILE,
                       "memory_heuristic": heuristic or "none", "report": result.report.to_dict()}
    if topology.is_root:
        write_text(state.directory / PLACEMENT_FILE, text)
    logger.info("placement %s: %d ops on %d devices, simulated step %.0f us", digest[:12], cost.n, devices.count,
                result.report.evaluation.makespan_us)

    with collector.phase("build_hooked"):
        hook = GradientAverager(hvd, placement, devices.names) if hvd is not None else None
        trained = build(state.job, batch_size=settings.batch_size, gradient_hook=hook)
        broadcast = broadcast_op(hvd, trained.graph, trained.variables) if hvd is not None else None
    state.samples_per_step = int(trained.samples_per_step)
    state.tokens_per_step = None if trained.tokens_per_step is None else int(trained.tokens_per_step)
    with collector.phase("apply"):
        wanted = {**placement, **(hook.placement(trained.graph) if hook is not None else {})}
        applied = ptf.apply(trained.graph, wanted, devices.names)
    state.placement["apply"] = dataclasses.asdict(applied)
    guard.check()

    variables_sha = _train(state, trained, broadcast, devices, guard, tf, ptf)

    figures = state.node_figures()
    figures["variables_sha256"] = variables_sha
    nodes = topology.gather(figures)
    summary = figures
    if topology.is_root:
        assert nodes is not None
        consistency = {
            "placement_sha256_equal": len({n["placement_sha256"] for n in nodes}) == 1,
            "variables_sha256_equal": len({n["variables_sha256"] for n in nodes}) == 1,
        }
        summary = state.write_summary("complete", nodes, {"consistency": consistency})
        finished = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        append_csv_row(settings.out / RESULTS_FILE, RESULTS_COLUMNS, results_row(summary, finished, state.directory))
        throughput = summary["throughput"]
        logger.info("throughput over iterations %d-%d: %.1f samples/s%s (%s)", *settings.window,
                    throughput["samples_per_s"],
                    "" if throughput["tokens_per_s"] is None else f", {throughput['tokens_per_s']:.1f} tokens/s",
                    state.directory / SUMMARY_FILE)
    collector.flush("complete")
    return summary


def _train(state: _Run, trained: Any, broadcast: Any, devices: Any, guard: StopGuard, tf: Any, ptf: Any) -> str:
    """Initialise, broadcast, run the iterations; the digest of the variables' final values."""
    settings, topology, collector = state.settings, state.topology, state.collector
    config = ptf.session_config(devices.count, devices.kind)
    step = {"step": trained.fetches, "loss": trained.loss}
    with tf.compat.v1.Session(graph=trained.graph, config=config) as session:
        with collector.phase("initialize"):
            session.run(trained.init_op)
            if broadcast is not None:
                session.run(broadcast)
        devices.reset_peaks()
        probe, source = devices.memory_probe()
        collector.watch_memory(probe, source, settings.window)
        state.training = True
        bar = progress(settings.iterations, str(state.job.name), settings.progress and topology.is_root)
        try:
            with collector.phase("train"):
                for index in range(settings.iterations):
                    guard.check()
                    feed = trained.feed_fn(index * topology.size + topology.rank)
                    collector.before_iteration(index)
                    start = time.perf_counter()
                    out = session.run(step, feed_dict=feed)
                    collector.iteration(index, time.perf_counter() - start, float(out["loss"]))
                    bar.update(1)
        finally:
            bar.close()
        values = session.run(list(trained.variables))
    return variables_digest([(v.name, value) for v, value in zip(trained.variables, values, strict=True)])
