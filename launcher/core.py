"""The one core behind ``pardnn-launch`` and ``launcher.run``: per node, place the replica and train.

:func:`run` reads the job and settings on every rank before TensorFlow loads, trains the run's variant
(:mod:`launcher.variants`; ``--compare``: :mod:`launcher.compare`; ``--replica-devices auto``:
:mod:`launcher.placing.planning`) and returns the summary. Failures, stop signals and stalls end every rank
with its files written (:mod:`launcher.rank.failure`). docs/launcher.md describes the outputs.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from typing import Any

from jobs.schema import AUTO
from launcher.cluster.topology import Topology, discover
from launcher.compare import RunningVariant, compare
from launcher.env import emulate_nodes, launch_size
from launcher.errors import LaunchError
from launcher.files import check_output_folder
from launcher.lifecycle import detach_log, open_run, run_variant, start_allreduce
from launcher.placing.planning import NoPlanFits, choose_plan, hint
from launcher.rank.agreement import agree
from launcher.rank.failure import end, exit_code
from launcher.rank.outcome import end_untrained
from launcher.rank.signals import StopGuard
from launcher.rank.state import RESULTS_FILE, SUMMARY_FILE
from launcher.settings import Settings, resolve
from launcher.training.recompute import check_wrappable
from launcher.variants import BuildFn, SharedByVariants, ranks_per_node, ranks_why, variants_of
from pardnn.errors import PardnnError

__all__ = ["RESULTS_FILE", "SUMMARY_FILE", "load_job", "run"]

logger = logging.getLogger("launcher")



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


def _eval_every(job: Any, every: int) -> Any:
    """``job`` validating every ``every`` iterations (``--eval-every``); one line when it has no ``[eval]``."""
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        raise LaunchError(f"--eval-every {every!r}: expected a whole number >= 0 (0: after the last iteration only)")
    if getattr(job, "evaluation", None) is None:
        raise LaunchError(f"--eval-every {every}: {getattr(job, 'source', 'the job')} has no [eval] table; add one "
                          "naming the validation batches (entry = 'module:fn' or dataset = 'module:fn')")
    return dataclasses.replace(job, evaluation={**job.evaluation, "every": every})


def _read_settings(job: Any, overrides: dict[str, Any]) -> tuple[Any, Settings | None, PardnnError | None]:
    """The job and its settings, the output folder checked; or the error (ranks agree on it next)."""
    try:
        emulate_nodes()  # a bad PARDNN_EMULATE_NODES is one line, agreed like a bad setting
        job = load_job(job)
        precision = overrides.pop("precision", None)
        if precision is not None:  # a [train] key: the job file's, overridden
            job = _zoo("with_setting")(job, "precision", precision)
        every = overrides.pop("eval_every", None)
        if every is not None:  # [eval] every, overridden
            job = _eval_every(job, every)
        settings = resolve(job, overrides)
        check_output_folder(settings.out)
        if any(variant.recompute for variant in variants_of(settings)):
            check_wrappable(job)
    except PardnnError as error:
        return job, None, error
    return job, settings, None


def _hint(job: Any, settings: Settings, state: Any, shared: SharedByVariants) -> None:
    """One replica per node on GPUs: log :func:`launcher.placing.planning.hint`'s line, if any (never fails
    the run: it has trained). On logical CPU devices the device preset does not describe the hardware,
    so no hint."""
    if state.devices.get("kind") != "gpu" or settings.devices_per_node < 2:
        return
    try:
        line = hint(job, settings, state.topology.node_count, shared.build)
    except Exception as error:  # a hint is advice: the run is done
        logger.warning("no plan hint: %s", error)
        return
    if line:
        logger.warning("%s", line)


def _planned(job: Any, settings: Settings, world: Topology, shared: SharedByVariants,
             where: RunningVariant) -> dict[str, Any]:
    """``--replica-devices auto`` (:mod:`launcher.placing.planning`): plan, then train the plan on every
    k-th rank of each node while the others wait; nothing fits: the run ends ``does_not_fit``."""
    [variant] = variants_of(settings)
    try:
        planned, report = choose_plan(job, settings, world, shared.build)
    except NoPlanFits as error:
        where.state, _ = open_run(job, settings, world, variant, log=False)
        where.state.plan = error.report
        end_untrained(where.state, error)
    k = int(planned.replica_devices)  # type: ignore[arg-type]
    start_allreduce(shared, world, planned.allreduce, replica_devices=[k])
    shared.train_on(k)
    topology = world.replicas(k)
    summary: dict[str, Any] = {}
    if topology is not None:
        where.topology = topology
        where.state, handler = open_run(job, planned, topology, variant)
        where.state.plan = report
        try:
            with StopGuard(where.state.stop, exit_now=where.state.exit_now) as guard:
                summary = run_variant(where.state, shared, guard)
        finally:
            detach_log(handler)
    world.wait_for_all()  # the ranks the plan does not use wait here, asleep, until the replicas are done
    return summary


def run(job: Any, *, build: BuildFn | None = None, **overrides: Any) -> dict[str, Any]:
    """Place the job's training graph on each node's devices and train it across nodes.

    Parameters
    ----------
    job:
        A job file path, a preset name (both via ``jobs.load_job``), or a ``jobs.Job``.
    build:
        The graph builder (default ``jobs.build``; the signature of the jobs contract).
    **overrides:
        Settings that take precedence over the job file, as the options of ``pardnn-launch --help`` do:
        the names of :data:`launcher.settings.OVERRIDABLE`, which are ``batch_size``, ``micro_batches``
        (a number or ``"auto"``), ``iterations``, ``window`` (``"100:150"`` or a pair), ``stall_timeout``,
        ``devices_per_node``, ``memory``, ``reserve``, ``memory_heuristic``, ``run_order``, ``costs``,
        ``device_preset``, ``profile_steps``, ``placer``, ``out``, ``progress``, ``parallelism``,
        ``recompute``, ``compare``, ``allreduce``, ``replica_devices`` (a number or ``"auto"``),
        ``checkpoint_every``, ``checkpoint_dir``, ``keep_checkpoints``, ``resume``, ``replace`` and
        ``save_model``; plus ``precision`` (``[train]``) and ``eval_every`` (``[eval] every``).
        ``None`` means not given; an unknown name is an error.

    Returns
    -------
    dict
        On rank 0 the summary (as written to ``summary.json``; with ``compare``, the comparison's
        summaries by variant); on other ranks that replica's figures.

    Raises
    ------
    PardnnError
        A bad job or setting, an infeasible placement or one that does not fit, nodes that disagree
        or whose replicas ended different (reported on stderr first), a stop signal or a stall
        (:class:`~launcher.errors.Stopped`). An error on one rank of several ends every rank with
        ``MPI_Abort`` instead.
    """
    world: Topology | None = None
    where = RunningVariant()  # the topology and state of what runs now (a comparison's variant)
    handler: logging.Handler | None = None
    try:
        job, settings, error = _read_settings(job, overrides)
        if error is not None and (launch_size() or 1) == 1:
            raise error  # not started by mpirun or srun: no peer to agree with
        world = where.topology = discover(1 if settings is None else ranks_per_node(settings))
        agree(world, "setting up", error)  # an error every rank finds is raised everywhere, printed once
        assert settings is not None
        world.check(ranks_why(settings))
        shared = SharedByVariants(build or _zoo("build"))
        if settings.compare:
            return compare(job, settings, world, shared, where)
        if settings.replica_devices == AUTO:
            return _planned(job, settings, world, shared, where)
        [variant] = variants_of(settings)
        where.state, handler = open_run(job, settings, world, variant)
        with StopGuard(where.state.stop, exit_now=where.state.exit_now) as guard:
            start_allreduce(shared, world, settings.allreduce)  # every rank trains
            summary = run_variant(where.state, shared, guard)
        if world.is_root and variant.placer is not None and settings.replica_devices is None:
            _hint(job, settings, where.state, shared)
        return summary
    except BaseException as error:
        end(error, where.topology, where.state)
        if world is not None and where.topology is not world:
            world.abort(exit_code(error))  # the ranks waiting for the node leaders' variant would wait forever
        raise
    finally:
        detach_log(handler)
