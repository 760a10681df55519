"""Checkpoints: save every variable of the replica, resume from them with the same placement.

With ``--checkpoint-every N`` rank 0 saves, every N iterations, at the end, and when a stop signal
(SIGTERM, SIGUSR1) arrives, the values of every global variable (weights, Adam's slots and beta
powers, counters) into ``OUT/<run>/checkpoint/`` (or ``--checkpoint-dir``):
``ckpt-<iteration>.npz`` (the arrays, in variable order) and ``ckpt-<iteration>.json`` (the next
iteration to run, the job, the nodes, the placement digest, the variable names). Each file is
written under a temporary name and renamed, the ``.json`` last, so a checkpoint whose ``.json``
exists is whole.

``--resume DIR`` (a checkpoint folder, a run folder or a ``.json``; alone: the newest checkpoint of
the same job under ``--out``) continues the run: every rank reads the checkpoint, checks that the
placement computed now has the saved digest (a different placement is an error: the saved state
belongs to that placement's graph), loads the values after initialisation and before the
broadcast, and starts at the saved iteration, so node ``r`` of ``N`` goes on reading batch
``i·N + r`` and the losses continue as in an uninterrupted run (given the job's seed).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from launcher.errors import LaunchError
from launcher.files import write_json

__all__ = ["FOLDER", "FORMAT", "Checkpointer", "find", "load", "make_checkpointer", "restore", "resume_point", "save"]

FORMAT = "pardnn-launch-checkpoint"
FOLDER = "checkpoint"
NAME = "ckpt-{iteration:08d}"
STOP_WAIT_SECONDS = 10.0  # how long a stop signal waits for rank 0 to save at the next iteration boundary


def save(folder: Path, iteration: int, names: Sequence[str], values: Sequence[np.ndarray],
         info: dict[str, Any]) -> Path:
    """Write ``ckpt-<iteration>.npz`` then ``.json`` into ``folder`` atomically; the ``.json`` path."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = NAME.format(iteration=iteration)
    data = folder / f"{stem}.npz"
    temporary = folder / f".{stem}.npz.{os.getpid()}.tmp"
    with open(temporary, "wb") as handle:
        np.savez(handle, *values)
    os.replace(temporary, data)
    meta = folder / f"{stem}.json"
    write_json(meta, {"format": FORMAT, **info, "iteration": iteration, "data": data.name,
                      "variables": list(names)})
    return meta


def load(meta_path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A checkpoint's description and its values by variable name."""
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        with np.load(meta_path.with_name(meta["data"])) as arrays:
            values = [arrays[f"arr_{i}"] for i in range(len(meta["variables"]))]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise LaunchError(f"--resume {meta_path}: cannot read the checkpoint ({error})") from None
    if meta.get("format") != FORMAT:
        raise LaunchError(f"--resume {meta_path}: not a pardnn-launch checkpoint")
    return meta, dict(zip(meta["variables"], values, strict=True))


def _newest(paths: Sequence[Path]) -> Path | None:
    return max(paths, key=lambda p: (p.stat().st_mtime, p.name), default=None)


def find(resume: str, out: Path, job: str) -> Path:
    """The ``.json`` of the checkpoint ``resume`` names: a ``.json``, a checkpoint or run folder (its
    newest checkpoint), or ``"latest"``: the newest checkpoint of ``job`` under ``out``."""
    if resume == "latest":
        found = []
        for path in out.glob(f"*/{FOLDER}/ckpt-*.json"):
            try:
                if json.loads(path.read_text(encoding="utf-8")).get("job") == job:
                    found.append(path)
            except (OSError, ValueError):
                continue
        newest = _newest(found)
        if newest is None:
            raise LaunchError(f"--resume: no checkpoint of job {job} under {out}; pass --resume DIR "
                              "(a run's checkpoint folder)")
        return newest
    path = Path(resume)
    if path.is_file():
        return path
    for folder in (path, path / FOLDER):
        newest = _newest(list(folder.glob("ckpt-*.json"))) if folder.is_dir() else None
        if newest is not None:
            return newest
    raise LaunchError(f"--resume {resume}: no checkpoint there (expected ckpt-*.json in it or in {FOLDER}/)")


class Checkpointer:
    """Saves the session's variables at iteration boundaries (rank 0) and answers a stop signal.

    ``fetch()`` returns the variables' values (a ``Session.run`` in the main thread).
    """

    def __init__(self, folder: Path | None, every: int, names: Sequence[str], info: dict[str, Any], *,
                 saving: bool) -> None:
        self.folder = folder
        self.every = every
        self.names = list(names)
        self.info = info
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
                self.saved.append(save(self.folder, iteration, self.names, fetch(), self.info))
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


def make_checkpointer(state: Any, variables: Sequence[Any], digest: str) -> Checkpointer:
    """The run's checkpointer: rank 0 saves when ``--checkpoint-every`` or ``--checkpoint-dir`` is given."""
    settings, topology = state.settings, state.topology
    folder = settings.checkpoint_dir or state.directory / FOLDER
    saving = topology.is_root and (settings.checkpoint_every > 0 or settings.checkpoint_dir is not None)
    info = {"job": str(getattr(state.job, "name", "job")), "nodes": topology.size,
            "batch_size": settings.batch_size, "placement_sha256": digest, "run_dir": str(state.directory)}
    return Checkpointer(folder, settings.checkpoint_every, [v.name for v in variables], info, saving=saving)


def resume_point(state: Any, digest: str) -> tuple[int, dict[str, np.ndarray], Path] | None:
    """``--resume``: (the iteration to start at, the values, the checkpoint), checked against this run."""
    settings, topology = state.settings, state.topology
    if settings.resume is None:
        return None
    path = find(settings.resume, settings.out, str(getattr(state.job, "name", "job")))
    meta, values = load(path)
    if meta.get("placement_sha256") != digest:
        raise LaunchError(f"--resume {path}: the checkpoint's placement {str(meta.get('placement_sha256'))[:12]} "
                          f"differs from this run's {digest[:12]}; resume with the same job, settings and versions "
                          "(profiled costs vary between runs: use --costs estimate for runs you resume)")
    if meta.get("nodes") != topology.size or meta.get("batch_size") != settings.batch_size:
        raise LaunchError(f"--resume {path}: saved with {meta.get('nodes')} node(s) and batch "
                          f"{meta.get('batch_size')}, "
                          f"this run has {topology.size} and {settings.batch_size}; resume with the same ones")
    iteration = int(meta["iteration"])
    if iteration >= settings.iterations:
        raise LaunchError(f"--resume {path}: the checkpoint is at iteration {iteration}, at or past --iterations "
                          f"{settings.iterations}; pass more --iterations")
    return iteration, values, path
