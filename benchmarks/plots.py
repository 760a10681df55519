"""The suite's plots: ``ratio-<suite>.png`` (makespan / lower bound per placer and K) and
``time-<suite>.png`` (placer time against |V| on log–log axes with the fitted slopes).

matplotlib is imported when a plot is drawn, not with this module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.analysis import fit_power_law, labels, placers, scaling_points, slopes
from benchmarks.suite import LABELS, Run

__all__ = ["plot_ratios", "plot_times"]


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def plot_ratios(runs: Sequence[Run], path: Path, title: str) -> None:
    """Grouped bars: makespan / lower bound per placer (bars) and K (groups), one panel per graph."""
    free = [r for r in runs if r.factor is None]
    graphs = list(dict.fromkeys(r.graph for r in free))
    names = placers(free)
    columns = min(2, len(graphs))
    rows = math.ceil(len(graphs) / columns)
    figure = _figure(6.5 * columns, 3.6 * rows)
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    width = 0.8 / len(names)
    for ax, graph in zip(axes, graphs):
        mine = [r for r in free if r.graph == graph]
        devices = sorted({r.devices for r in mine})
        for i, name in enumerate(names):
            by_k = {r.devices: r for r in mine if r.placer == name}
            heights = [by_k[k].ratio if k in by_k and by_k[k].ratio is not None else 0.0 for k in devices]
            ax.bar(np.arange(len(devices)) + (i - (len(names) - 1) / 2) * width, heights, width, label=LABELS[name])
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(np.arange(len(devices)), [f"K = {k}" for k in devices])
        ax.set_ylabel("makespan / lower bound")
        ax.set_title(f"{graph} ({mine[0].ops:,} ops)")
    for ax in axes[len(graphs):]:
        ax.set_visible(False)
    axes[0].legend(fontsize="small", ncols=2)
    figure.suptitle(title)
    figure.savefig(path, dpi=110)


def plot_times(runs: Sequence[Run], path: Path, devices: int, title: str) -> None:
    """Placer time against |V| on log–log axes at one K, a fitted power law per placer (slope in the legend)."""
    figure = _figure(7.5, 5.0)
    ax = figure.subplots()
    fitted = slopes(runs, labels(runs), devices)
    for label, slope in fitted.items():
        sizes, seconds = scaling_points(runs, label, devices)
        if not sizes:
            continue
        (line,) = ax.plot(sizes, seconds, "o", label=f"{label}: slope {slope:.2f}" if slope is not None else label)
        if slope is not None:
            exponent, coefficient = fit_power_law(sizes, seconds)
            x = np.geomspace(min(sizes), max(sizes), 20)
            ax.plot(x, coefficient * x**exponent, "-", color=line.get_color(), linewidth=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("|V| (ops)")
    ax.set_ylabel("wall time of the placer call (s)")
    ax.grid(True, which="both", linewidth=0.3)
    ax.legend(fontsize="small")
    shown = [f"{label} slope {fitted[label]:.2f}" for label in ("ParDNN", "LC") if fitted.get(label) is not None]
    ax.set_title(title + (f"\n{', '.join(shown)}" if shown else ""))
    figure.savefig(path, dpi=110)
