"""``--replica-devices auto`` and ``--micro-batches auto``: the run plans before it places anything.

:func:`choose_plan` plans on rank 0 as ``pardnn plan`` does (:func:`jobs.plan.job_plan`) and gives every
rank the k and M to go on with; :func:`micro_report` and :func:`no_micro_fits` are the table and the
error of the launcher's own M search (:mod:`launcher.placing.model`), the same
:class:`pardnn.plan.search.Planner`. :func:`hint` is the line a default run logs when plain data
parallelism would be faster. docs/planning.md (At launch) has the rules and the output.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from jobs.schema import AUTO
from launcher.cluster.topology import Topology
from launcher.errors import DoesNotFit
from launcher.rank.agreement import agree
from launcher.settings import Settings
from pardnn.costs.machine import format_bytes
from pardnn.emulation.emulated import strictly_shorter
from pardnn.errors import PardnnError

__all__ = ["NoPlanFits", "choose_plan", "hint", "log_trial", "micro_report", "no_micro_fits"]

logger = logging.getLogger("launcher")


class NoPlanFits(DoesNotFit):
    """No plan's placement fits the devices' memory (exit 3); ``report``: the plans tried."""

    def __init__(self, message: str, report: dict[str, Any]) -> None:
        super().__init__(message)
        self.report = report


def log_trial(what: str) -> Any:
    """A search's ``on_trial`` that logs each plan tried as ``what`` (``plan``, ``micro-batches auto``)."""

    def on_trial(trial: Any) -> None:
        if trial.step_us is None:
            logger.info("%s: %s: %s%s", what, trial.plan.label, trial.status,
                        f" ({trial.reason})" if trial.reason else "")
            return
        logger.info("%s: %s: %.1f samples/s, step %.2f ms = compute %.2f + exposed allreduce %.2f, %d ops, peak %s "
                    "(%s, %.1f s)", what, trial.plan.label, trial.samples_per_s, trial.step_us / 1e3,
                    trial.compute_us / 1e3, trial.exposed_us / 1e3, trial.ops, format_bytes(trial.peak_bytes or 0),
                    trial.status + (f": {trial.reason}" if trial.reason else ""), trial.seconds)

    return on_trial


def micro_report(search: Any) -> dict[str, Any]:
    """``summary.json`` → ``micro_batches`` of ``--micro-batches auto``: the M chosen (``None``: none
    fits), why, and every plan tried (:meth:`pardnn.plan.search.Trial.to_dict`)."""
    chosen = None if search.chosen is None else search.chosen.plan.micro_batches
    return {"mode": AUTO, "chosen": chosen, "why": search.why, "trials": [t.to_dict() for t in search.trials]}


def no_micro_fits(search: Any, batch: int) -> NoPlanFits:
    """The one-line error when no M fits, each reason said once with the M that gave it."""
    reasons: dict[str, list[str]] = {}
    for trial in search.trials:
        reason = f"does not divide the batch {batch}" if trial.status == "skipped" else trial.reason.rstrip(".")
        reasons.setdefault(reason or trial.status, []).append(str(trial.plan.micro_batches))
    message = (f"--micro-batches auto: no M fits the devices' memory at batch {batch} ("
               + "; ".join(f"M = {', '.join(ms)}: {reason}" for reason, ms in reasons.items())
               + "); not trained. Try more devices, a smaller batch or a lower --reserve")
    return NoPlanFits(message, micro_report(search))


def _search(job: Any, settings: Settings, nodes: int, build: Any) -> dict[str, Any]:
    """Rank 0's search (module docstring); the report for ``summary.json``."""
    from jobs.plan import job_plan

    on_trial = log_trial("plan")
    micro = settings.micro_batches
    search, described = job_plan(job, nodes=nodes, node=settings.device_preset,
                                 devices_per_node=settings.devices_per_node, batch_size=settings.batch_size,
                                 memory=settings.memory, reserve=settings.reserve,
                                 micro_batches=None if micro == AUTO else int(micro),
                                 on_note=lambda message: logger.info("plan: %s", message), on_trial=on_trial,
                                 build=build)
    return {"mode": AUTO, "costs": f"estimated ({described['preset']})", **described, **search.to_dict()}


def choose_plan(job: Any, settings: Settings, world: Topology, build: Any) -> tuple[Settings, dict[str, Any]]:
    """Plan on rank 0, the others asleep (collective over ``world``); the run's settings with the chosen
    ``replica_devices`` and ``micro_batches``, and the report. Raises :class:`NoPlanFits` everywhere when
    nothing fits, or the search's error."""
    report: dict[str, Any] | None = None
    error: PardnnError | None = None
    if world.is_root:
        logger.info("--replica-devices auto: planning %d node(s) of %d device(s), batch %d per node",
                    world.node_count, settings.devices_per_node, settings.batch_size)
        try:
            report = _search(job, settings, world.node_count, build)
        except PardnnError as caught:
            error = caught
    world.wait_for_all()  # asleep, not spinning: the search has the node's cores
    agree(world, "choosing a plan", error)
    report = world.bcast(report)
    assert report is not None
    chosen = report["chosen"]
    if chosen is None:
        reasons = "; ".join(f"k={t['replica_devices']} M={t['micro_batches']}: {t['status']}"
                            + (f" ({t['reason']})" if t["reason"] else "") for t in report["trials"])
        raise NoPlanFits(f"--replica-devices auto: no plan fits the devices' memory ({reasons})", report)
    if world.is_root:
        logger.info("plan chosen: %s", report["why"])
    k, micro = int(chosen["replica_devices"]), int(chosen["micro_batches"])
    return dataclasses.replace(settings, replica_devices=k, micro_batches=micro), report


def hint(job: Any, settings: Settings, nodes: int, build: Any) -> str | None:
    """After a run of one replica per node (the default): the one-line hint that plain data parallelism
    (k = 1) would train faster in the emulator, or ``None``. Only k = 1 and k = G are compared, at the
    run's M (M = 1 for k = 1 where the smaller batch does not split), as ``pardnn plan`` costs them (two
    builds, two placements: seconds to a minute); an intermediate k is for ``pardnn plan`` or
    ``--replica-devices auto`` to find."""
    from jobs.plan import job_plan

    gpus = settings.devices_per_node
    micro = int(settings.micro_batches) if settings.micro_batches != AUTO else 1
    searches, cache = {}, {}  # one cache: a step one k builds serves the other
    for k in (1, gpus):
        m = micro if (settings.batch_size * k // gpus) % micro == 0 else 1
        search, _ = job_plan(job, nodes=nodes, node=settings.device_preset, devices_per_node=gpus,
                             batch_size=settings.batch_size, memory=settings.memory, reserve=settings.reserve,
                             replica_devices=[k], micro_batches=m, build=build, cache=cache)
        searches[k] = search.chosen
    data, one = searches[1], searches[gpus]
    if data is None or (one is not None and not strictly_shorter(data.step_us, one.step_us)):
        return None
    faster = "" if one is None else f" {one.step_us / data.step_us:.2f}x faster than one replica per node"
    return (f"hint: the emulator says plain data parallelism (--replica-devices 1, M = {data.plan.micro_batches}) "
            f"would train{faster or ' (one replica per node does not fit there)'}; pardnn plan "
            f"{getattr(job, 'name', 'JOB')} --nodes {nodes} compares every k, --replica-devices auto chooses at launch")
