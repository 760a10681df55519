"""The report's PNG plots (matplotlib, Agg backend, imported when a plot is drawn): lines and a scatter.

Every plot is written atomically (a temporary file renamed), 600 × 400 pixels. An x axis of whole
numbers (devices, nodes, batch sizes) has whole-number ticks only.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["plot_lines", "plot_scatter"]

SIZE_INCHES, DPI = (6, 4), 100


@contextmanager
def _figure(path: Path, title: str, xlabel: str, ylabel: str) -> Iterator[Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=SIZE_INCHES)
    try:
        yield axes
        axes.set_title(title)
        axes.set_xlabel(xlabel)
        axes.set_ylabel(ylabel)
        axes.grid(True, alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize="small")
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.tmp.png")
        figure.savefig(temp, dpi=DPI)
        temp.replace(path)
    finally:
        plt.close(figure)


def plot_lines(path: Path, title: str, xlabel: str, ylabel: str, series: Mapping[str, Sequence[tuple[float, float]]],
               *, reference: float | None = None) -> None:
    """One line per series (points sorted by x); ``reference``: a dashed horizontal line at that y."""
    with _figure(path, title, xlabel, ylabel) as axes:
        for label, points in series.items():
            points = sorted(points)
            axes.plot([x for x, _ in points], [y for _, y in points], marker="o", label=label)
        if reference is not None:
            axes.axhline(reference, color="gray", linestyle="--", linewidth=1)
        _whole_numbers(axes, sorted({x for points in series.values() for x, _ in points}))


def _whole_numbers(axes: Any, xs: Sequence[float]) -> None:
    """Whole-number ticks on an x axis of whole numbers; one value alone sits mid-axis (x ± 1) with its
    tick only, instead of matplotlib's fractional span around it (3.80 to 4.20 for one K = 4)."""
    if not xs or any(x != int(x) for x in xs):
        return
    if len(xs) == 1:
        axes.set_xlim(xs[0] - 1, xs[0] + 1)
        axes.set_xticks(list(xs))
        return
    from matplotlib.ticker import MaxNLocator

    axes.xaxis.set_major_locator(MaxNLocator(integer=True))


def plot_scatter(path: Path, title: str, xlabel: str, ylabel: str,
                 series: Mapping[str, Sequence[tuple[float, float, str]]]) -> None:
    """Points ``(x, y, note)`` per series on log-log axes, each note written beside its point, and the
    diagonal ``y = x``."""
    with _figure(path, title, xlabel, ylabel) as axes:
        values = [v for points in series.values() for x, y, _ in points for v in (x, y) if v > 0]
        for label, points in series.items():
            axes.scatter([x for x, _, _ in points], [y for _, y, _ in points], label=label)
            for x, y, note in points:
                axes.annotate(note, (x, y), textcoords="offset points", xytext=(4, 4), fontsize="x-small")
        if values:
            low, high = min(values) / 1.5, max(values) * 1.5
            axes.plot([low, high], [low, high], color="gray", linestyle="--", linewidth=1, label="measured = emulated")
            from matplotlib.ticker import FormatStrFormatter

            axes.set_xscale("log")
            axes.set_yscale("log")
            for axis in (axes.xaxis, axes.yaxis):
                axis.set_major_formatter(FormatStrFormatter("%g"))
                axis.set_minor_formatter(FormatStrFormatter("%g"))
