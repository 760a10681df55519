"""`pardnn plan`: how a job should use each node's GPUs, offline: replicas of k devices × M micro-batches.

For each k dividing the node's G GPUs and each M dividing the replica's batch, the replica is built at
its real batch and M, costed with the device preset, placed by ParDNN on k devices and emulated with
the gradient allreduce across the cluster's replicas (:class:`pardnn.plan.search.Planner`); the
steps are built in worker processes (:mod:`jobs.plansteps`), M >= 4 written down from the M = 2 step
(:func:`pardnn.batch.replicate.replicate`). The table is what ``pardnn-launch --replica-devices k
--micro-batches M`` would train, and :func:`train_commands` the commands that train the plan chosen.
How the search spends its time: docs/planning.md and docs/internals.md, "The job's graph".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from jobs.config import Job, load_job
from jobs.plansteps import Steps, needed_steps
from jobs.schema import AUTO, micro_batches_arg
from jobs.tfimport import quiet
from pardnn.cli.options import EXIT_OK, add_parser, param_type, positive_int
from pardnn.costs.machine import format_bytes, parse_bandwidth
from pardnn.costs.presets import preset
from pardnn.emulation.allreduce import cluster_for
from pardnn.errors import MissingDependencyError, PardnnError
from pardnn.plan.search import MICRO_BATCHES, Plan, Planner, PlanSearch, Trial, replica_options
from pardnn.settings import PLACEMENT
from pardnn.tfstack import own_process

CPUS_PER_DEVICE = 8  # cores a task asks for each GPU it drives, as slurm/pardnn.sbatch does (32 for 4 GPUs)

__all__ = ["CPUS_PER_DEVICE", "cmd_plan", "format_search", "job_plan", "register_plan", "train_commands"]


def job_plan(job: Job | str, *, nodes: int, node: str | None = None, devices_per_node: int | None = None,
             batch_size: int | None = None, memory: str | int | None = None, reserve: float | None = None,
             replica_devices: Sequence[int] | None = None, micro_batches: int | str | None = None,
             network_Bps: float | None = None, on_note: Callable[[str], None] | None = None,
             on_trial: Callable[[Trial], None] | None = None,
             cache: dict[Any, Any] | None = None, build: Callable[..., Any] | None = None,
             build_workers: int | None = None) -> tuple[PlanSearch, dict[str, Any]]:
    """The plans of ``job`` on ``nodes`` nodes of preset ``node`` (default the job's ``device_preset``).

    ``devices_per_node`` defaults to the preset's node (16 for ``dgx-2``), ``batch_size`` (per node) to
    the job's; ``micro_batches`` an M to try alone, or ``"auto"``/``None`` for 1, 2, 4, 8, 16. Returns the
    search and a description of what was planned for. ``cache`` (a dict the caller keeps, one per job,
    preset, memory and batch): the graphs built and the placements made, reused when the same node is
    planned for another number of nodes. ``build``: the graph builder (default ``jobs.training.build``).
    ``build_workers``: processes building the steps beside this one (:mod:`jobs.plansteps`; ``None``:
    as many as pay off, 0: none).
    """
    from jobs.maxbatch import job_machine  # imports nothing of TensorFlow

    job = job if isinstance(job, Job) else load_job(job)
    spec = preset(node or job.device_preset)
    gpus = devices_per_node or spec.gpus_per_node
    batch = batch_size or job.batch_size
    micro = (*MICRO_BATCHES,) if micro_batches in (None, AUTO) else (int(micro_batches),)  # type: ignore[arg-type]
    ks = list(replica_devices or replica_options(gpus))
    wrong = [k for k in ks if k < 1 or gpus % k]
    if wrong:
        raise PardnnError(f"--replica-devices {','.join(map(str, wrong))} does not divide the node's {gpus} devices; "
                          f"choose among {', '.join(map(str, replica_options(gpus)))}")
    if build is None:
        from jobs.training import build  # TensorFlow, once the input is known to be good
    memory = memory if memory is not None else job.memory
    reserve = job.reserve if reserve is None else reserve
    note = on_note or (lambda message: None)
    cache = {} if cache is None else cache
    steps = cache.setdefault(("graphs", spec.name), Steps(job, spec, build, cache.setdefault("parts", {})))
    steps.reset(note)
    began = time.perf_counter()
    try:
        certain = needed_steps(batch, gpus, ks, micro[:1])  # the first M's plans are placed, whatever the bounds
        steps.start(needed_steps(batch, gpus, ks, micro), build_workers, certain)  # may build the first step here
        planner = Planner(steps, lambda k: job_machine(spec.name, k, memory, reserve),
                          lambda r: cluster_for(spec, nodes, r, network_Bps=network_Bps), node_devices=gpus,
                          nodes=nodes, node_batch=batch, placements=cache.setdefault(("placements", spec.name), {}))
        search = planner.search(ks, micro, on_trial=on_trial)
    finally:
        steps.stop(wait=False)
    search = dataclasses.replace(search, seconds=time.perf_counter() - began)  # the builds before it began too
    machine = job_machine(spec.name, 1, memory, reserve)
    described = {"job": job.name, "nodes": nodes, "devices_per_node": gpus, "preset": spec.name,
                 "memory_per_device": format_bytes(int(machine.memory_bytes[0])) if machine.bounded else None,
                 "reserve": reserve, "node_batch": batch, "global_batch": nodes * batch,
                 "network_Bps": network_Bps or spec.network_Bps, "build_seconds": steps.seconds,
                 "graphs_built": steps.builds, "build_workers": steps.workers}
    return search, described


def format_search(search: PlanSearch, described: dict[str, Any]) -> str:
    """The table of every plan tried, the chosen one marked ``*``, and why it won (a pruned plan: its
    step's lower bound and the samples/s it cannot reach)."""
    lines = [f"{described['job']} on {described['nodes']} node(s) of {described['devices_per_node']} x "
             f"{described['preset']} ({described['network_Bps'] / 1e9:g} GB/s network), batch "
             f"{described['node_batch']} per node ({described['global_batch']} per step)",
             f"{'':1}{'k':>3} {'replicas':>8} {'M':>3} {'batch':>6} {'ops':>8} {'compute':>11} {'exposed':>11} "
             f"{'step':>11} {'samples/s':>10}  status"]
    for trial in search.trials:
        mark = "*" if trial is search.chosen else " "
        if trial.bound_us is not None:  # not placed: at most this fast
            at_most = f"<{described['global_batch'] / (trial.bound_us * 1e-6):.1f}"
            ops = f"{trial.ops:>8,}" if trial.ops else f"{'-':>8}"  # -: its graph was not built
            cells = f"{ops} {'':>11} {'at least':>11} {trial.bound_us / 1e3:>8.2f} ms {at_most:>10}"
        elif trial.step_us is None:
            cells = f"{'':>8} {'':>11} {'':>11} {'':>11} {'over' if trial.status != 'skipped' else '':>10}"
            if trial.ops:
                cells = f"{trial.ops:>8,} {'':>11} {'':>11} {'':>11} {'over':>10}"
        else:
            cells = (f"{trial.ops:>8,} {trial.compute_us / 1e3:>8.2f} ms {trial.exposed_us / 1e3:>8.2f} ms "
                     f"{trial.step_us / 1e3:>8.2f} ms {trial.samples_per_s:>10.1f}")
        status = trial.status + (f": {trial.reason}" if trial.reason else "")
        if trial.run_order is False:
            status += ": in order of readiness (its run order is slower with the allreduce)"
        lines.append(f"{mark}{trial.plan.replica_devices:>3} {trial.plan.replicas_per_node:>8} "
                     f"{trial.plan.micro_batches:>3} {trial.replica_batch:>6} {cells}  {status}")
    lines.append(f"chosen: {search.why}")
    workers = described.get("build_workers") or 0
    beside = f", {workers} worker process(es) beside this one" if workers else ""
    lines.append(f"search: {search.seconds:.1f} s; building and costing {described['graphs_built']} graphs took "
                 f"{described['build_seconds']:.1f} s of build time{beside}")
    return "\n".join(lines)


def train_commands(job: str, plan: Plan, *, nodes: int, options: Sequence[str] = ()) -> dict[str, str]:
    """The commands that train ``plan`` of ``job`` on ``nodes`` nodes of G = ``plan.node_devices`` GPUs,
    G/k ranks per node: ``sbatch`` (``slurm/pardnn.sbatch``, each task :data:`CPUS_PER_DEVICE` cores per
    GPU it drives) and ``mpirun`` (inside an allocation, or with its ``--hostfile``). ``options``: more
    ``pardnn-launch`` options (the batch, memory and reserve the plan was made for)."""
    k, ranks = plan.replica_devices, plan.replicas_per_node
    launch = [job, "--devices-per-node", str(plan.node_devices), "--replica-devices", str(k), "--micro-batches",
              str(plan.micro_batches), *options]
    sbatch = ["sbatch", f"--nodes={nodes}", f"--ntasks-per-node={ranks}", f"--gpus-per-node={plan.node_devices}",
              f"--cpus-per-task={CPUS_PER_DEVICE * k}", "slurm/pardnn.sbatch", *launch]
    mpirun = ["mpirun", "-np", str(nodes * ranks), "--map-by", f"ppr:{ranks}:node", "--bind-to", "none",
              "pardnn-launch", *launch]
    return {"sbatch": shlex.join(sbatch), "mpirun": shlex.join(mpirun)}


def _launch_options(args: argparse.Namespace) -> list[str]:
    """The options of ``pardnn plan`` that ``pardnn-launch`` needs to train what was planned."""
    given = [("--batch-size", args.batch_size), ("--memory", args.memory), ("--reserve", args.reserve)]
    return [word for option, value in given if value is not None for word in (option, str(value))]


def cmd_plan(args: argparse.Namespace) -> int:
    quiet()  # no TensorFlow INFO lines on the console
    own_process()  # TensorFlow's import, when it comes, is kept out of the garbage collector's passes
    job = load_job(args.job)  # a bad job file fails here, before TensorFlow loads

    def on_trial(trial: Trial) -> None:
        if not args.quiet:
            what = trial.status if trial.samples_per_s is None else f"{trial.samples_per_s:.1f} samples/s"
            print(f"pardnn plan: {trial.plan.label}: {what} ({trial.seconds:.1f} s)", file=sys.stderr, flush=True)

    try:
        search, described = _plan(args, job, on_trial)
    except ImportError as exc:
        raise MissingDependencyError(f"pardnn plan needs TensorFlow ({exc}): pip install -e '.[tf]'") from None
    commands = None if search.chosen is None else train_commands(args.job, search.chosen.plan, nodes=args.nodes,
                                                                  options=_launch_options(args))
    if args.json:
        print(json.dumps({**described, **search.to_dict(), "commands": commands}, indent=2))
    else:
        print(format_search(search, described))
        if commands is not None:
            print(f"train it:\n  {commands['sbatch']}\n  {commands['mpirun']}")
    return EXIT_OK


def _plan(args: argparse.Namespace, job: Job, on_trial: Callable[[Trial], None]) -> tuple[PlanSearch, dict[str, Any]]:
    return job_plan(
        job, nodes=args.nodes, node=args.node, devices_per_node=args.devices_per_node, batch_size=args.batch_size,
        memory=args.memory, reserve=args.reserve, replica_devices=args.replica_devices,
        micro_batches=args.micro_batches, build_workers=args.build_workers,
        network_Bps=None if args.network is None else parse_bandwidth(args.network, "--network"),
        on_note=None if args.quiet else (lambda message: print(f"pardnn plan: {message}", file=sys.stderr, flush=True)),
        on_trial=on_trial)


def _counts(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected whole numbers >= 1, comma-separated (e.g. 1,2,4)")
    return values


def _workers(text: str) -> int | None:
    if text == AUTO:
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected auto or a whole number >= 0 (0: build every step here)")
    return value


def register_plan(sub: Any) -> None:
    """Add ``pardnn plan`` to the ``pardnn`` sub-parsers ``sub``."""
    plan = add_parser(
        sub, "plan", help="how a job should use each node's GPUs: replicas of k devices x M micro-batches",
        description="For each k dividing the node's GPUs G and each M dividing the replica's batch, build the job's "
                    "replica at its batch (the node's over G/k replicas) and M, cost it with the preset, place it "
                    "with ParDNN on k devices and emulate its step with the gradient allreduce across every replica "
                    "of the cluster; print every plan's samples/s and the one chosen (the fastest that fits, a tie "
                    "to more replicas, then fewer micro-batches). Offline: no GPU, no cluster. Needs TensorFlow.")
    plan.add_argument("job", help="job file or preset name (e.g. jobs/word-rnn.toml, word-rnn)")
    plan.add_argument("--nodes", type=positive_int, required=True, help="nodes of the cluster")
    plan.add_argument("--node", "--preset", dest="node", default=None, metavar="PRESET",
                      help="the node: dgx-2, dgx-a100, dgx-h100 or a device preset (default: the job's device_preset)")
    plan.add_argument("--devices-per-node", type=positive_int, default=None, metavar="G",
                      help="GPUs per node (default: the preset's node, e.g. 16 for dgx-2)")
    plan.add_argument("--batch-size", type=positive_int, default=None, help="batch per node (default: the job's)")
    plan.add_argument("--replica-devices", type=_counts, default=None, metavar="K,K",
                      help="the k to try (default: every divisor of G)")
    plan.add_argument("--micro-batches", type=micro_batches_arg, default=None, metavar="M|auto",
                      help="one M to try, or auto (default): 1, 2, 4, 8, 16")
    plan.add_argument("--memory", default=None, help="memory per device (default: the job's, else the preset's)")
    plan.add_argument("--reserve", type=param_type("reserve"), default=None,
                      help=f"memory kept free: {PLACEMENT['reserve'].expected()} (default: the job's)")
    plan.add_argument("--network", default=None, metavar="RATE",
                      help="the node's network, its NICs together (default: the preset's)")
    plan.add_argument("--build-workers", type=_workers, default=None, metavar="N|auto",
                      help="processes that build the replica's steps beside this one (default auto: when the first "
                           "build says the rest take 30 s or more, the CPUs this process may use less one, as "
                           "memory allows at 4 GiB each; 0 builds every step here)")
    plan.add_argument("--json", action="store_true", help="print JSON")
    plan.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    plan.set_defaults(func=cmd_plan)
