"""The training and validation loss of each run against iterations: ``<run>-loss.png`` (``pardnn-report``).

A run folder whose ``summary.json`` lists validations (``[eval]``) gets a plot of rank 0's training
loss per iteration (its ``rank-0.jsonl``) and the validation loss (every rank's batches) after each.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from launcher.reporting.plotting import plot_lines

__all__ = ["loss_curves", "loss_series"]


def loss_series(run: Path) -> tuple[list[tuple[float, float]], list[tuple[float, float]]] | None:
    """``(training, validation)`` points (iterations done, loss) of the run folder ``run``; ``None`` when it
    has no summary or no validation."""
    try:
        summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    validation = [(float(v["iteration"]), float(v["loss"])) for v in summary.get("validation") or []
                  if v.get("loss") is not None]
    if not validation:
        return None
    training: list[tuple[float, float]] = []
    try:
        lines = (run / "rank-0.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut by a crash
        if record.get("event") == "iteration" and record.get("loss") is not None:
            training.append((float(record["index"]) + 1, float(record["loss"])))
    return training, validation


def loss_curves(directories: Iterable[Path], out: Path) -> list[Path]:
    """Write ``<run>-loss.png`` into ``out`` for every run folder under ``directories`` with validations."""
    written = []
    for directory in directories:
        if not directory.is_dir():
            continue
        for summary in sorted(directory.glob("*/summary.json")):
            found = loss_series(summary.parent)
            if found is None:
                continue
            training, validation = found
            path = out / f"{summary.parent.name}-loss.png"
            series = {"validation (every rank's batches)": validation}
            if training:
                series = {"training (rank 0's batch)": training, **series}
            plot_lines(path, f"{summary.parent.name}: loss", "iterations done", "loss", series)
            written.append(path)
    return written
