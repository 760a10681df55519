"""Resuming a run from a checkpoint (:mod:`launcher.rank.checkpoint` writes them) with the command it started with.

:func:`find` and :func:`locate` pick the checkpoint of ``--resume DIR`` (alone: the job's newest under
``--out``); :func:`shape_change` stops a resume whose cluster shape differs, :func:`graph_change` one whose
graph changed; :func:`saved_placement` applies the saved placement instead of profiling and placing, and
:func:`resume_point` gives the iteration and values to go on from. docs/checkpoints.md has the rules.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from launcher.errors import LaunchError
from launcher.rank.checkpoint import FOLDER, cluster_shape, graph_ops_digest, load, load_meta

__all__ = ["AUTO", "find", "graph_change", "locate", "parse_placement_text", "resume_point", "saved_placement",
           "shape_change"]

logger = logging.getLogger("launcher")

AUTO = "auto"  # --resume auto: the newest checkpoint if there is one, else from the beginning


def _newest(paths: Sequence[Path]) -> Path | None:
    return max(paths, key=lambda p: (p.stat().st_mtime, p.name), default=None)


def find(resume: str, out: Path, job: str, *, folder: Path | None = None,
         slurm_job: str | None = None) -> Path | None:
    """The ``.json`` of the checkpoint ``resume`` names: a ``.json``, a checkpoint or run folder (its
    newest checkpoint), ``"latest"``: the newest checkpoint of ``job`` under ``out`` (and in ``folder``,
    the ``--checkpoint-dir``), those of the Slurm job ``slurm_job`` first; or ``"auto"`` (what the batch
    scripts pass on a requeue): as ``latest``, but within a Slurm job only its own checkpoints, and
    ``None`` when there is none (the run starts from the beginning)."""
    if resume in ("latest", AUTO):
        found: list[tuple[Path, dict[str, Any]]] = []
        paths = list(out.glob(f"*/{FOLDER}/ckpt-*.json")) + (list(folder.glob("ckpt-*.json")) if folder else [])
        for path in dict.fromkeys(p.resolve() for p in paths):
            try:
                meta = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(meta, dict) and meta.get("job") == job:
                found.append((path, meta))
        mine = [path for path, meta in found if slurm_job and str(meta.get("slurm_job_id")) == slurm_job]
        pool = mine if mine or (resume == AUTO and slurm_job) else [path for path, _ in found]
        newest = _newest(pool)
        if newest is None and resume == AUTO:
            return None
        if newest is None:
            where = f"{out}" + (f" or {folder}" if folder else "")
            raise LaunchError(f"--resume: no checkpoint of job {job} under {where}; pass --resume DIR "
                              "(a run's checkpoint folder), or --resume auto to start anew when there is none")
        return newest
    path = Path(resume)
    if path.is_file():
        return path
    for folder in (path, path / FOLDER):
        newest = _newest(list(folder.glob("ckpt-*.json"))) if folder.is_dir() else None
        if newest is not None:
            return newest
    raise LaunchError(f"--resume {resume}: no checkpoint there (expected ckpt-*.json in it or in {FOLDER}/)")


def shape_change(path: Path, saved: dict[str, Any] | None, now: dict[str, Any]) -> str | None:
    """One line saying how this run's cluster shape differs from the checkpoint's and what to do; ``None``
    when it does not (or the checkpoint predates the record)."""
    if not saved:
        return None

    def differs(key: str) -> bool:
        return key in saved and saved[key] != now.get(key)

    where = f"--resume {path}"
    if differs("placer"):
        return (f"{where}: saved by {saved['placer'] or 'data parallelism'}, this run is "
                f"{now['placer'] or 'data parallelism'}; resume with the same placer (--placer "
                f"{saved['placer']}) or --parallelism, or pass --replace to start this one from the saved weights")
    if differs("devices_per_node") or differs("device_kind") or differs("gpus"):
        before = f"{saved.get('devices_per_node')} {saved.get('gpus') or saved.get('device_kind')} device(s)"
        after = f"{now.get('devices_per_node')} {now.get('gpus') or now.get('device_kind')} device(s)"
        return (f"{where}: its placement spans {before} per node, this run has {after}; run on the same GPUs "
                "(sbatch --gpus-per-node, --devices-per-node), or pass --replace to place the graph anew on these "
                "with the saved weights")
    if differs("nodes") or differs("ranks"):
        return (f"{where}: saved by {saved.get('ranks')} rank(s) on {saved.get('nodes')} node(s), this run has "
                f"{now.get('ranks')} on {now.get('nodes')}; resume on the same nodes (sbatch --nodes="
                f"{saved.get('nodes')}), or pass --replace to go on from the saved weights with this shape (the "
                "batches then differ from an uninterrupted run)")
    if differs("batch_size"):
        return (f"{where}: saved with batch {saved['batch_size']} per node, this run has {now['batch_size']}; "
                f"resume with --batch-size {saved['batch_size']}, or pass --replace to go on with this batch")
    return None


def locate(state: Any) -> None:
    """``--resume``: the checkpoint every rank resumes from, chosen once by rank 0 and sent to the others
    (collective), kept in ``state.resume_from`` (``None`` with ``--resume auto`` and no checkpoint)."""
    from launcher.rank.agreement import raise_everywhere

    settings, topology = state.settings, state.topology
    if settings.resume is None:
        return
    job = str(getattr(state.job, "name", "job"))
    found = raise_everywhere(topology, "finding the checkpoint", lambda: find(
        str(settings.resume), settings.out, job, folder=settings.checkpoint_dir,
        slurm_job=os.environ.get("SLURM_JOB_ID")) if topology.is_root else None)
    chosen = topology.bcast(None if found is None else str(found))
    state.resume_from, state.resume_located = (None if chosen is None else Path(chosen)), True
    if chosen is None and topology.is_root:
        logger.info("--resume %s: no checkpoint of job %s yet: starting from the beginning", settings.resume, job)


def _checkpoint(state: Any) -> Path | None:
    """The checkpoint :func:`locate` chose (or, called alone, the one ``--resume`` names on this rank)."""
    if getattr(state, "resume_located", False):
        return state.resume_from
    settings = state.settings
    return find(str(settings.resume), settings.out, str(getattr(state.job, "name", "job")),
                folder=getattr(settings, "checkpoint_dir", None), slurm_job=os.environ.get("SLURM_JOB_ID"))


def saved_placement(state: Any) -> tuple[Path, dict[str, Any], str] | None:
    """``--resume`` of a model-parallel run (not ``--replace``): the checkpoint, its description and its
    placement file's text, so the run rebuilds that replica without profiling or placing; ``None`` when
    not resuming, with ``--replace``, or for a checkpoint that holds no placement (then the run places as
    before and :func:`resume_point` checks the digest). Raises when the cluster shape changed."""
    settings = state.settings
    if settings.resume is None or settings.replace:
        return None
    path = _checkpoint(state)
    if path is None:
        return None
    meta = load_meta(path)
    change = shape_change(path, meta.get("shape"), cluster_shape(state)) if meta.get("shape") else None
    if change is not None:
        raise LaunchError(change)
    name = meta.get("placement_file")
    if not isinstance(name, str) or not meta.get("graph_ops_sha256"):
        return None
    asked, saved_m = settings.micro_batches, meta.get("micro_batches")
    if isinstance(asked, int) and saved_m is not None and asked != saved_m:
        raise LaunchError(f"--resume {path}: saved with {saved_m} micro-batches, this run asks for {asked}; resume "
                          f"with --micro-batches {saved_m} (or auto), or pass --replace to place {asked} anew")
    try:
        text = (path.parent / name).read_text(encoding="utf-8")
    except OSError as error:
        raise LaunchError(f"--resume {path}: cannot read its placement {name} ({error.strerror or error}); "
                          "pass --replace to place the graph anew with the saved weights") from None
    if hashlib.sha256(text.encode("utf-8")).hexdigest() != meta.get("placement_sha256"):
        raise LaunchError(f"--resume {path}: its placement file {name} does not match the checkpoint's digest (a "
                          "damaged file); pass --replace to place the graph anew with the saved weights")
    return path, meta, text


def graph_change(path: Path, meta: dict[str, Any], graph: Any, variables: Sequence[Any],
                 placement: dict[str, int]) -> str | None:
    """One line naming what changed in the graph since the checkpoint (``None``: nothing)."""
    if graph_ops_digest(graph) == meta.get("graph_ops_sha256"):
        return None
    names = {op.name for op in graph.get_operations()}
    saved_vars, now_vars = list(meta.get("variables", [])), [v.name for v in variables]
    missing = [name for name in placement if name not in names]
    what = []
    if sorted(saved_vars) != sorted(now_vars):
        gone = [v for v in saved_vars if v not in set(now_vars)]
        new = [v for v in now_vars if v not in set(saved_vars)]
        return (f"--resume {path}: the checkpoint's values belong to another model: its variables differ (saved "
                f"only: {', '.join(gone[:3]) or '-'}; now only: {', '.join(new[:3]) or '-'}); resume with the model "
                "it was saved with, or start a new run without --resume")
    if missing:
        what.append(f"{len(missing)} placed op(s) are gone ({', '.join(missing[:3])})")
    if not what:
        what.append("its op names differ from the saved graph's")
    return (f"--resume {path}: the graph changed since the checkpoint: {'; '.join(what)}; pass --replace to place "
            "it anew and load the saved values by variable name")


def parse_placement_text(text: str) -> tuple[dict[str, int], dict[str, int] | None]:
    """A placement file's ``op device [position]`` lines as ``{op: device}`` and ``{op: position}`` (or
    ``None`` without a run order)."""
    placement: dict[str, int] = {}
    order: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        placement[parts[0]] = int(parts[1])
        if len(parts) > 2:
            order[parts[0]] = int(parts[2])
    return placement, order or None


def resume_point(state: Any, digest: str | None) -> tuple[int, dict[str, np.ndarray], Path] | None:
    """``--resume``: (the iteration to start at, the values, the checkpoint), checked against this run.

    ``digest`` is the placement (model parallelism) or graph digest (data parallelism) the checkpoint
    must have; ``None`` skips that check: the run took the checkpoint's own placement, or ``--replace``
    placed anew (then the values load by variable name and the shape may differ)."""
    settings = state.settings
    if settings.resume is None:
        return None
    path = _checkpoint(state)
    if path is None:
        return None  # --resume auto without a checkpoint: from the beginning
    meta, values = load(path)
    if not settings.replace:
        change = shape_change(path, meta.get("shape"), cluster_shape(state)) if meta.get("shape") else None
        if change is not None:
            raise LaunchError(change)
        if digest is not None and meta.get("placement_sha256") != digest:
            raise LaunchError(f"--resume {path}: the checkpoint's placement {str(meta.get('placement_sha256'))[:12]} "
                              f"differs from this run's {digest[:12]}; resume with the same job and settings, or "
                              "pass --replace to place anew and load the saved values by variable name")
        if meta.get("nodes") != state.topology.size or meta.get("batch_size") != settings.batch_size:
            raise LaunchError(f"--resume {path}: saved with {meta.get('nodes')} node(s) and batch "
                              f"{meta.get('batch_size')}, this run has {state.topology.size} and "
                              f"{settings.batch_size}; resume with the same ones, or pass --replace")
    iteration = int(meta["iteration"])
    if iteration >= settings.iterations:
        raise LaunchError(f"--resume {path}: the checkpoint is at iteration {iteration}, at or past --iterations "
                          f"{settings.iterations}; pass more --iterations")
    return iteration, values, path
