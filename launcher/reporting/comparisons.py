"""What ``pardnn-report`` says when runs compare variants: ParDNN against the alternatives, and the emulator.

:func:`comparison_tables` and :func:`comparison_plots` take a job's rows by variant (the median over
repeats): ParDNN's speed-up over each alternative (``<job>-speedup.png``), each variant's over one device
(``<job>-over-one.png``), throughput over nodes (``<job>-scaling.png``) and measured / emulated step
(``<job>-fidelity.png``). :func:`fidelity_warnings` warns where those ratios spread beyond
:data:`FIDELITY_SPREAD`. docs/launcher.md (What pardnn-report draws); rules: docs/notes-launcher.md.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from launcher.reporting.plotting import plot_lines, plot_scatter

__all__ = ["FIDELITY_SPREAD", "comparison_plots", "comparison_tables", "fidelity_warnings"]

PARDNN = "pardnn"
FIDELITY_SPREAD = 1.5  # largest / smallest ratio of one job and device kind: beyond it, no one factor fits


def _rate(results: Sequence[Any], variant: str, nodes: int, devices: int, batch: int | None = None) -> float | None:
    values = [r.samples_per_s for r in results if (r.variant, r.nodes, r.devices) == (variant, nodes, devices)
              and batch in (None, r.batch)]
    return statistics.median(values) if values else None


def _ordered(results: Sequence[Any]) -> list[str]:
    return sorted({r.variant for r in results}, key=lambda v: (v != PARDNN, v))


def _speedups(mine: Sequence[Any]) -> dict[str, list[tuple[int, int, float]]]:
    """``{alternative: [(K, batch, ParDNN's samples/s over the alternative's)]}`` on the fewest nodes."""
    nodes = min(r.nodes for r in mine)
    out: dict[str, list[tuple[int, int, float]]] = {other: [] for other in _ordered(mine) if other != PARDNN}
    for devices, batch in sorted({(r.devices, r.batch) for r in mine if r.nodes == nodes}):
        ours = _rate(mine, PARDNN, nodes, devices, batch)
        for other, points in out.items():
            theirs = _rate(mine, other, nodes, devices, batch)
            if ours is not None and theirs:
                points.append((devices, batch, ours / theirs))
    return {other: points for other, points in out.items() if points}


def _over_one(mine: Sequence[Any]) -> dict[str, list[tuple[int, int, float]]]:
    """``{variant: [(K, batch, samples/s on one node of K devices over one device's)]}``."""
    one = [r.samples_per_s for r in mine if (r.nodes, r.devices) == (1, 1)]
    if not one:
        return {}
    base = statistics.median(one)
    out: dict[str, list[tuple[int, int, float]]] = {}
    for variant in _ordered(mine):
        for devices, batch in sorted({(r.devices, r.batch) for r in mine if r.variant == variant and r.nodes == 1}):
            rate = _rate(mine, variant, 1, devices, batch)
            if rate is not None:
                out.setdefault(variant, []).append((devices, batch, rate / base))
    return out


def _scaling(mine: Sequence[Any]) -> tuple[int, dict[str, list[tuple[int, float]]]]:
    """The largest K run on several node counts, and ``{variant: [(nodes, samples/s)]}`` at it."""
    several = [k for k in {r.devices for r in mine} if len({r.nodes for r in mine if r.devices == k}) > 1]
    if not several:
        return 0, {}
    devices = max(several)
    out: dict[str, list[tuple[int, float]]] = {}
    for variant in _ordered(mine):
        for nodes in sorted({r.nodes for r in mine if (r.variant, r.devices) == (variant, devices)}):
            rate = _rate(mine, variant, nodes, devices)
            if rate is not None:
                out.setdefault(variant, []).append((nodes, rate))
    return devices, out


def _ratios(mine: Sequence[Any]) -> list[tuple[Any, float]]:
    return [(r, r.measured_ms / r.emulated_ms) for r in mine if r.measured_ms and r.emulated_ms]


def _grid(title: str, corner: str, series: dict[str, list[tuple[Any, ...]]], cell_format: str = "{:.2f}×") -> str:
    """A table: one column per series, one row per point key (every field but the last, the value)."""
    columns = list(series)
    rows = sorted({point[:-1] for points in series.values() for point in points})
    cell = {(name, point[:-1]): point[-1] for name, points in series.items() for point in points}
    lines = [f"### {title}", "", f"| {corner} | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for key in rows:
        values = [cell_format.format(cell[name, key]) if (name, key) in cell else "" for name in columns]
        label = f"{key[0]} ({key[1]})" if len(key) == 2 else str(key[0])
        lines.append(f"| {label} | " + " | ".join(values) + " |")
    return "\n".join([*lines, ""])


def _jobs(results: Sequence[Any]) -> list[tuple[str, list[Any]]]:
    return [(job, [r for r in results if r.job == job]) for job in sorted({r.job for r in results})]


def comparison_tables(results: Sequence[Any]) -> str:
    """Markdown: per job with several variants, the speed-ups and scaling; per job, the fidelity table."""
    out = []
    for job, mine in _jobs(results):
        parts = []
        if len(_ordered(mine)) > 1:
            if PARDNN in _ordered(mine) and (speedups := _speedups(mine)):
                parts.append(_grid("speed-up of pardnn over each alternative (samples/s ratio)", "K (batch)", speedups))
            if over := _over_one(mine):
                parts.append(_grid("speed-up over one device (samples/s ratio, one node)", "K (batch)", over))
            devices, scaling = _scaling(mine)
            if scaling:
                parts.append(_grid(f"samples/s over nodes at {devices} devices per node", "nodes", dict(scaling),
                                   "{:.1f}"))
        if ratios := _ratios(mine):
            parts.append(_fidelity_table(ratios))
        if parts:
            out.append(f"## {job}: comparison\n\n" + "\n".join(parts))
    return "\n".join(out)


def _fidelity_table(ratios: list[tuple[Any, float]]) -> str:
    """Per variant and K: the runs' measured / emulated step, and the allreduce's share of the emulated
    step (its exposed part; runs of several replicas)."""
    lines = ["### the emulator's fidelity: measured / emulated step", "",
             "| variant | K | runs | median | min | max | allreduce share of emulated |",
             "|---|---|---|---|---|---|---|"]
    for variant, devices in sorted({(r.variant, r.devices) for r, _ in ratios}, key=lambda k: (k[0] != PARDNN, k)):
        runs = [(r, q) for r, q in ratios if (r.variant, r.devices) == (variant, devices)]
        values = [q for _, q in runs]
        shares = [r.allreduce_ms / r.emulated_ms for r, _ in runs if r.allreduce_ms is not None]
        share = f"{statistics.median(shares):.0%}" if shares else ""
        lines.append(f"| {variant} | {devices} | {len(values)} | {statistics.median(values):.2f} | {min(values):.2f} "
                     f"| {max(values):.2f} | {share} |")
    return "\n".join([*lines, ""])


def fidelity_warnings(results: Sequence[Any]) -> list[str]:
    """One line per job and device kind whose measured / emulated ratios spread beyond :data:`FIDELITY_SPREAD`."""
    warnings = []
    for job, mine in _jobs(results):
        for kind in sorted({r.device_kind for r in mine}):
            ratios = _ratios([r for r in mine if r.device_kind == kind])
            if len(ratios) < 2:
                continue
            (low, smallest), (high, largest) = min(ratios, key=lambda x: x[1]), max(ratios, key=lambda x: x[1])
            if largest / smallest > FIDELITY_SPREAD:
                warnings.append(
                    f"{job} on {kind}: measured / emulated step ranges from {smallest:.2f} ({low.variant}, K = "
                    f"{low.devices}) to {largest:.2f} ({high.variant}, K = {high.devices}), {largest / smallest:.1f}× "
                    f"apart (more than {FIDELITY_SPREAD}×): no single calibration of the costs fixes that, so the "
                    "emulator misjudges some placements against others here")
    return warnings


def comparison_plots(results: Sequence[Any], directory: Path) -> list[Path]:
    """The PNG plots of the module docstring; returns their paths."""
    written = []
    for job, mine in _jobs(results):
        def path(name: str, job: str = job) -> Path:
            written.append(directory / f"{job}-{name}.png")
            return written[-1]

        if len(_ordered(mine)) > 1:
            if PARDNN in _ordered(mine) and (speedups := _speedups(mine)):
                plot_lines(path("speedup"), f"{job}: pardnn's speed-up over each alternative", "devices per node (K)",
                           "pardnn samples/s ÷ theirs", {v: [(k, x) for k, _, x in pts] for v, pts in speedups.items()},
                           reference=1.0)
            if over := _over_one(mine):
                plot_lines(path("over-one"), f"{job}: speed-up over one device", "devices per node (K)",
                           "samples/s ÷ one device's", {v: [(k, x) for k, _, x in pts] for v, pts in over.items()},
                           reference=1.0)
            devices, scaling = _scaling(mine)
            if scaling:
                plot_lines(path("scaling"), f"{job}: throughput over nodes, {devices} devices per node", "nodes",
                           "samples/s (all nodes)", scaling)
        if ratios := _ratios(mine):
            series: dict[str, list[tuple[float, float, str]]] = {}
            for r, _ in ratios:
                series.setdefault(r.variant, []).append((r.emulated_ms, r.measured_ms, f"K={r.devices}"))
            plot_scatter(path("fidelity"), f"{job}: measured against emulated step", "emulated step (ms)",
                         "measured step (ms)", series)
    return written
