"""A run's life on one rank: its folder, log, state and watch; the allreduce; how it ends on an error.

:func:`open_run` makes the run's folder (rank 0 names it ``<job>-<variant>-n<N>-k<K>-b<B>-<UTC time>``),
attaches this rank's log, starts its collector, status and stall watch; :func:`start_allreduce` starts the
backend; :func:`run_variant` trains the variant (:mod:`launcher.placing.model` or
:mod:`launcher.training.replicas`); :func:`launcher.rank.failure.end` reports an error once. A standalone
run (:func:`launcher.core.run`) opens one run, ``--compare`` (:mod:`launcher.compare`) one per variant.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from launcher.cluster.topology import Topology
from launcher.errors import AgreedError
from launcher.files import check_output_folder
from launcher.rank.agreement import check_agreement, raise_everywhere
from launcher.rank.signals import StopGuard
from launcher.rank.state import RunState
from launcher.reporting import console
from launcher.reporting.collector import Collector
from launcher.settings import Settings
from launcher.training.dataparallel import HorovodBackend, Mpi4pyBackend, pick_backend
from launcher.variants import SharedByVariants, Variant

__all__ = ["LOG_FILE", "attach_log", "detach_log", "make_folder", "open_run", "run_variant", "start_allreduce"]

LOG_FILE = "rank-{rank}.log"

logger = logging.getLogger("launcher")

def make_folder(topology: Topology, settings: Settings, job_name: str, label: str) -> Path:
    """``<out>/<job>-<label>-n<N>-k<K>-b<B>-<UTC time>``, made by rank 0, shared, checked writable
    everywhere (collective)."""
    made: tuple[str | None, str | None] = (None, None)
    if topology.is_root:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        nodes = topology.node_count
        base = f"{job_name}-{label}-n{nodes}-k{settings.devices_per_node}-b{settings.batch_size}-{stamp}"
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
    raise_everywhere(topology, "making the run folder", lambda: check_output_folder(directory))
    return directory


def attach_log(path: Path, topology: Topology) -> logging.Handler | None:
    """This rank's log file: the console tee's when running under ``pardnn-launch``, else a logging handler."""
    if console.attach(path, topology.rank, topology.node, topology.size > 1):
        return None
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    return handler


def detach_log(handler: logging.Handler | None) -> None:
    if handler is not None:
        logging.getLogger().removeHandler(handler)
        handler.close()


def open_run(job: Any, settings: Settings, topology: Topology, variant: Variant, *,
             log: bool = True) -> tuple[RunState, logging.Handler | None]:
    """The variant's folder, this rank's log (``log``), collector, status and watch (collective)."""
    directory = make_folder(topology, settings, str(getattr(job, "name", "job")), variant.slug)
    handler = attach_log(directory / LOG_FILE.format(rank=topology.rank), topology) if log else None
    collector = Collector(directory / f"rank-{topology.rank}.jsonl", {"rank": topology.rank, "node": topology.node})
    state = RunState(job, settings, topology, directory, collector, variant=variant)
    if topology.is_root:
        state.write_status("running", None, None)
    state.start_watch()
    return state, handler


def start_allreduce(shared: SharedByVariants, topology: Topology, choice: str = "auto", *,
                    replica_devices: Sequence[int] = ()) -> None:
    """Choose and start the allreduce backend when several ranks run (collective;
    :mod:`launcher.training.dataparallel`). ``replica_devices``: the k of the model-parallel runs that
    run on every k-th rank of a node while the others wait (a comparison's placers on the node leaders,
    k = G; a planned or compared ``--replica-devices k``); each gets a group of its ranks
    (``shared.groups[k]``), made here because Horovod makes its process sets when it starts. The log
    names the backend."""
    name = raise_everywhere(topology, "choosing the allreduce", lambda: pick_backend(choice, topology.size))
    if name is None:
        return
    # Ranks that chose differently would wait in different collectives (hvd.init against MPI_Comm_dup).
    check_agreement(topology.nodes, topology.allgather(name), "allreduce backends",
                    "install the same stack on every node (Horovod on all of them or on none), or pass "
                    "--allreduce mpi4py")
    backend = HorovodBackend() if name == "horovod" else Mpi4pyBackend()
    groups: dict[int, list[int]] = {}
    for k in replica_devices:
        ranks = topology.replica_ranks(k)
        if 1 < len(ranks) < topology.size and ranks not in groups.values():
            groups[k] = ranks
    handles = raise_everywhere(topology, f"starting {name}", lambda: backend.start(topology, list(groups.values())))
    shared.groups = dict(zip(groups, handles, strict=True))
    shared.allreduce = backend
    if topology.is_root:
        logger.info("gradients averaged across %d ranks by %s%s", topology.size, name,
                    "" if choice == name else f" (--allreduce {choice})")


def run_variant(state: RunState, shared: SharedByVariants, guard: StopGuard) -> dict[str, Any]:
    """Train ``state.variant``: a placer's model parallelism or data parallelism."""
    state.allreduce = shared.allreduce.name if shared.allreduce is not None and state.topology.size > 1 else None
    if state.variant.placer is None:
        from launcher.training.replicas import run_data

        return run_data(state, shared, guard)
    from launcher.placing.model import run_model

    return run_model(state, shared, guard)
