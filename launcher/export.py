"""``pardnn export RUN_OR_CHECKPOINT -o PATH``: a pardnn-launch checkpoint written as the user's Keras model.

The checkpoint names its job file and which variables are the model's weights, so the command needs
nothing else (``--job`` for a checkpoint that does not name its job file, or a job file that moved);
a checkpoint without that description (made before it was recorded) builds the job's graph once to
learn it. What is written, and how it is loaded back: docs/checkpoints.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from pardnn.cli.options import EXIT_OK, add_parser
from pardnn.errors import PardnnError

__all__ = ["cmd_export", "export", "register"]


def export(source: str | Path, path: str | Path, *, job_file: str | Path | None = None) -> tuple[Path, Path]:
    """Write the model of the checkpoint ``source`` (a ``ckpt-*.json``, a checkpoint folder or a run folder:
    its newest) to ``path``; the checkpoint used and the file written.

    Raises
    ------
    PardnnError
        No checkpoint there, a damaged one, no job file to rebuild the model with, or what
        :func:`jobs.export.save_model` refuses; one line.
    """
    from jobs.config import JobError, load_job, with_setting
    from jobs.export import check_path, save_model
    from launcher.errors import LaunchError
    from launcher.rank.checkpoint import load
    from launcher.rank.resume import find

    try:
        check_path(path, "-o")
        meta_path = find(str(source), Path("."), "")
        meta, values = load(meta_path)
    except (JobError, LaunchError) as error:
        raise PardnnError(str(error).replace("--resume ", "")) from None
    named = job_file if job_file is not None else meta.get("job_file")
    if named is None:
        raise PardnnError(f"{meta_path}: the checkpoint does not name its job file; pass --job FILE (the job the run "
                          f"trained, {meta.get('job')!r})")
    try:
        job = load_job(named)
        if meta.get("precision") not in (None, job.precision):  # a run's --precision
            job = with_setting(job, "precision", meta["precision"])
        model: dict[str, Any] | None = meta.get("model")
        if model is None:  # a checkpoint from before models were described: the job's graph says
            from jobs import build

            model = build(job).model
        assert model is not None
        save_model(job, model, values, path)
    except JobError as error:
        raise PardnnError(str(error)) from None
    except FileNotFoundError as error:
        raise PardnnError(f"{meta_path}: its job file {named} is gone ({error.strerror}); pass --job FILE") from None
    return meta_path, Path(path)


def cmd_export(args: argparse.Namespace) -> int:
    from jobs.tfimport import quiet

    quiet()  # no TensorFlow INFO lines on the console
    started = time.perf_counter()
    used, written = export(args.source, args.output, job_file=args.job)
    print(f"wrote {written} from {used} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``pardnn export`` to the ``pardnn`` sub-parsers ``sub``."""
    command = add_parser(
        sub, "export", help="write a pardnn-launch checkpoint as the job's Keras model (needs TensorFlow)",
        description="Write the model weights of a pardnn-launch checkpoint in Keras' own files: PATH.weights.h5 "
                    "(load it with model.load_weights(PATH) after your model's build()) or PATH.keras (the whole "
                    "model, where Keras can save it). A zoo model's weights go into an HDF5 file by variable name. "
                    "The checkpoint names the job file; the model is made by its [model] entry, as your own script "
                    "makes it.")
    command.add_argument("source", metavar="RUN_OR_CHECKPOINT",
                         help="a checkpoint's ckpt-*.json, a checkpoint folder or a run folder (its newest checkpoint)")
    command.add_argument("-o", "--output", required=True, metavar="PATH",
                         help="the file to write: NAME.weights.h5, NAME.h5 or NAME.keras")
    command.add_argument("--job", default=None, metavar="FILE",
                         help="the job file (default: the one the checkpoint names)")
    command.set_defaults(func=cmd_export)
