"""Checkpoints: save every variable of the replica, and resume with the replica they belong to.

With ``--checkpoint-every N`` a :class:`Checkpointer` (:func:`make_checkpointer`) has rank 0 :func:`save`
every N iterations, at the end and on a stop signal; :func:`prune` keeps the ``--keep-checkpoints`` newest;
:func:`load` and :func:`restore` read one back. docs/checkpoints.md has the files, what makes them durable
and what is kept; resuming is :mod:`launcher.rank.resume`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from launcher.errors import LaunchError
from launcher.files import write_atomically, write_json

__all__ = ["FOLDER", "FORMAT", "PLAN", "Checkpointer", "cluster_shape", "graph_ops_digest", "load", "load_meta",
           "make_checkpointer", "prune", "restore", "save"]

logger = logging.getLogger("launcher")

FORMAT = "pardnn-launch-checkpoint"
FOLDER = "checkpoint"
NAME = "ckpt-{iteration:08d}"
PLAN = "placement-{sha}.txt"  # the placement a checkpoint's graph was trained with, by digest
STOP_WAIT_SECONDS = 10.0  # how long a stop signal waits for rank 0 to save at the next iteration boundary


def _sync_folder(folder: Path) -> None:
    """fsync the folder, so the renames into it survive a power loss."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(folder: Path, iteration: int, names: Sequence[str], values: Sequence[np.ndarray],
         info: dict[str, Any], placement_text: str | None = None) -> Path:
    """Write ``ckpt-<iteration>.npz``, the placement file it needs (once per placement), then the ``.json``,
    each durably (module docstring); the ``.json`` path."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = NAME.format(iteration=iteration)
    data = folder / f"{stem}.npz"
    write_atomically(data, lambda handle: np.savez(handle, *values))
    extra: dict[str, Any] = {}
    if placement_text is not None:
        plan = folder / PLAN.format(sha=hashlib.sha256(placement_text.encode("utf-8")).hexdigest()[:16])
        if not plan.exists():
            write_atomically(plan, lambda handle: handle.write(placement_text.encode("utf-8")))
        extra["placement_file"] = plan.name
    _sync_folder(folder)  # the data and the placement are in place before the .json says the checkpoint is whole
    meta = folder / f"{stem}.json"
    write_json(meta, {"format": FORMAT, **info, **extra, "iteration": iteration, "data": data.name,
                      "variables": list(names)})
    _sync_folder(folder)
    return meta


def load(meta_path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A checkpoint's description and its values by variable name."""
    meta = load_meta(meta_path)
    data = meta_path.with_name(str(meta.get("data")))
    try:
        with np.load(data) as arrays:
            values = [arrays[f"arr_{i}"] for i in range(len(meta["variables"]))]
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as error:
        raise LaunchError(f"--resume {meta_path}: cannot read its values {data.name} ({type(error).__name__}: "
                          f"{str(error).splitlines()[0] if str(error) else 'truncated'}); the file is damaged: "
                          "resume from an older checkpoint (--resume PATH/ckpt-<iteration>.json)") from None
    return meta, dict(zip(meta["variables"], values, strict=True))


def load_meta(meta_path: Path) -> dict[str, Any]:
    """A checkpoint's ``.json``, checked to be one."""
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise LaunchError(f"--resume {meta_path}: cannot read the checkpoint ({error})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or not isinstance(meta.get("variables"), list):
        raise LaunchError(f"--resume {meta_path}: not a pardnn-launch checkpoint")
    return meta


def _iteration(meta_path: Path) -> int:
    try:
        return int(meta_path.stem.split("-", 1)[1])
    except (IndexError, ValueError):
        return -1


def prune(folder: Path, keep: int, newest: Path) -> list[Path]:
    """Delete all but the ``keep`` newest checkpoints of ``newest``'s job in ``folder`` (by iteration,
    then time), never ``newest`` (the one just written, whole); the ``.json`` first, so a checkpoint
    being deleted never looks whole, then its values, then placement files no checkpoint left names.
    Other jobs' checkpoints in a shared ``--checkpoint-dir`` are left alone. The files deleted."""
    if keep <= 0:
        return []
    job = json.loads(newest.read_text(encoding="utf-8")).get("job")
    ours: list[tuple[int, float, str, Path, Any]] = []
    for meta in folder.glob("ckpt-*.json"):
        try:
            described = json.loads(meta.read_text(encoding="utf-8"))
            when = meta.stat().st_mtime
        except (OSError, ValueError):
            continue  # being written or deleted by someone else, or not ours to judge
        if isinstance(described, dict) and described.get("job") == job:
            ours.append((_iteration(meta), when, meta.name, meta, described.get("data")))
    ours.sort(key=lambda item: item[:3])
    kept = {item[3] for item in ours[-keep:]} | {newest}
    removed: list[Path] = []
    for _, _, _, meta, data in ours:
        if meta in kept:
            continue
        meta.unlink(missing_ok=True)
        removed.append(meta)
        if isinstance(data, str) and data.startswith("ckpt-"):
            (folder / data).unlink(missing_ok=True)
            removed.append(folder / data)
    named = set()
    for meta in folder.glob("ckpt-*.json"):
        try:
            named.add(json.loads(meta.read_text(encoding="utf-8")).get("placement_file"))
        except (OSError, ValueError):
            return removed  # a checkpoint we cannot read may need any placement file: keep them all
    for plan in folder.glob(PLAN.format(sha="*")):
        if plan.name not in named:
            plan.unlink(missing_ok=True)
            removed.append(plan)
    if removed:
        _sync_folder(folder)
    return removed


class Checkpointer:
    """Saves the session's variables at iteration boundaries (rank 0) and answers a stop signal.

    ``fetch()`` returns the variables' values (a ``Session.run`` in the main thread).
    """

    def __init__(self, folder: Path | None, every: int, names: Sequence[str], info: dict[str, Any], *,
                 saving: bool, keep: int = 0, placement_text: str | None = None) -> None:
        self.folder = folder
        self.every = every
        self.names = list(names)
        self.info = info
        self.keep = keep
        self.placement_text = placement_text
        self.saving = saving and folder is not None
        self.saved: list[Path] = []
        self.active = False  # between the first and the last iteration boundary (the main thread's)
        self._requested = threading.Event()
        self._done = threading.Event()

    def due(self, iteration: int, start: int) -> bool:
        """Whether to save before running ``iteration`` (a multiple of ``every`` past the start)."""
        return bool(self.saving and self.every and iteration > start and iteration % self.every == 0)

    def boundary(self, iteration: int, start: int, fetch: Callable[[], Sequence[np.ndarray]], *,
                 final: bool = False, stopping: bool = False) -> None:
        """Before ``iteration`` (or after the last, ``final``): save if due, at the end, or on a stop."""
        self.active = not final
        if not self.saving:
            return
        stop = stopping or self._requested.is_set()
        already = bool(self.saved) and self.saved[-1].stem == NAME.format(iteration=iteration)
        try:
            if not already and (final or stop or self.due(iteration, start)):
                assert self.folder is not None
                meta = save(self.folder, iteration, self.names, fetch(), self.info, self.placement_text)
                self.saved.append(meta)
                try:
                    prune(self.folder, self.keep, meta)
                except OSError as error:  # the new checkpoint is whole; an old one left behind only takes disk
                    logger.warning("--keep-checkpoints %d: could not delete an older checkpoint in %s (%s)",
                                   self.keep, self.folder, error)
        finally:
            if stop or final:
                self.active = False
                self._done.set()

    def on_stop(self, timeout: float = STOP_WAIT_SECONDS) -> bool:
        """A stop signal (the watcher's thread): ask for a checkpoint at the next boundary and wait for it."""
        if not (self.saving and self.active):
            return False
        self._requested.set()
        return self._done.wait(timeout)


def restore(session: Any, variables: Sequence[Any], values: dict[str, np.ndarray], where: Path) -> None:
    """Load the checkpoint's values into the session's variables (each through its initializer's feed)."""
    names = [v.name for v in variables]
    missing = [n for n in names if n not in values]
    extra = [n for n in values if n not in set(names)]
    if missing or extra:
        raise LaunchError(f"--resume {where}: the checkpoint does not match the graph's variables "
                          f"(missing {missing[:3]}, unknown {extra[:3]}); resume the same job")
    # Each variable's initializer with the checkpoint's value fed for its initial value: what
    # Variable.load does, in one run and without its deprecation warning on every rank.
    session.run([v.initializer for v in variables],
                feed_dict={v.initializer.inputs[1]: values[v.name] for v in variables})


def graph_ops_digest(graph: Any) -> str:
    """SHA-256 of the op names of a built TensorFlow graph, in creation order: what a resumed run compares
    to tell whether the graph changed since its checkpoint (builds of one job name their ops alike)."""
    return hashlib.sha256("\n".join(op.name for op in graph.get_operations()).encode("utf-8")).hexdigest()


def make_checkpointer(state: Any, trained: Any, digest: str, *, graph_digest: str | None = None,
                      placement_text: str | None = None, micro_batches: int | None = None) -> Checkpointer:
    """The run's checkpointer for the built step ``trained``: rank 0 saves when ``--checkpoint-every`` or
    ``--checkpoint-dir`` is given. Each checkpoint names the job file and the model's weights
    (``trained.model``), so ``pardnn export`` can write the model from it.

    A model-parallel run passes what a resumed run needs to rebuild the same replica without profiling
    or placing: ``placement_text`` (the placement file, run order included), ``graph_digest``
    (:func:`graph_ops_digest` of the graph it was computed for) and ``micro_batches`` (the M trained)."""
    settings, topology = state.settings, state.topology
    folder = settings.checkpoint_dir or state.directory / FOLDER
    saving = topology.is_root and (settings.checkpoint_every > 0 or settings.checkpoint_dir is not None)
    info = {"job": str(getattr(state.job, "name", "job")), "nodes": topology.size,
            "batch_size": settings.batch_size, "placement_sha256": digest, "run_dir": str(state.directory),
            "shape": cluster_shape(state), "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
            "job_file": _job_file(state.job), "precision": getattr(state.job, "precision", None),
            "model": getattr(trained, "model", None)}
    if placement_text is not None:
        info.update({"graph_ops_sha256": graph_digest, "micro_batches": micro_batches,
                     "placement": {k: v for k, v in state.placement.items() if k != "apply"}})
    return Checkpointer(folder, settings.checkpoint_every, [v.name for v in trained.variables], info, saving=saving,
                        keep=settings.keep_checkpoints, placement_text=placement_text)


def _job_file(job: Any) -> str | None:
    path = getattr(job, "path", None)
    return None if path is None else str(Path(path).resolve())


def cluster_shape(state: Any) -> dict[str, Any]:
    """What a checkpoint's placement and data order depend on: nodes, devices per node and their kind, the
    GPUs detected, the placer (``None``: data parallelism) and the batch per node."""
    settings = state.settings
    return {"nodes": state.topology.node_count, "ranks": state.topology.size,
            "devices_per_node": settings.devices_per_node, "device_kind": state.devices.get("kind"),
            "gpus": settings.gpus, "placer": state.variant.placer, "batch_size": settings.batch_size}
