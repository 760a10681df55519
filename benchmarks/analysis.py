"""What the runs say: the empirical complexity of each placer and ParDNN against each baseline.

The complexity is the slope of a least-squares power-law fit of placer time against |V| on log–log
axes (1 is linear, 2 quadratic); ParDNN against a baseline is the ratio of their makespans on the
same graph and K. Both are ratios within one run of the suite: seconds from different runs on a
shared machine do not compare.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.suite import OK, TIMEOUT, Run

__all__ = ["Comparison", "comparisons", "fit_power_law", "slopes"]


def fit_power_law(sizes: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """Least-squares fit of ``seconds ≈ coefficient × size ** exponent`` on log–log axes.

    Returns ``(exponent, coefficient)``: the exponent is the slope of log(seconds) against
    log(size), the empirical complexity. Raises ``ValueError`` with fewer than two distinct sizes
    or a value that is not positive.
    """
    x, y = np.asarray(sizes, dtype=np.float64), np.asarray(seconds, dtype=np.float64)
    if x.shape != y.shape or np.unique(x).size < 2:
        raise ValueError(f"a slope needs at least two distinct sizes with a time each, got {x.size} sizes")
    if (x <= 0).any() or (y <= 0).any() or not np.isfinite(np.concatenate((x, y))).all():
        raise ValueError("sizes and times must be finite and > 0 to fit a power law")
    slope, intercept = np.polyfit(np.log(x), np.log(y), 1)
    return float(slope), float(math.exp(intercept))


def scaling_points(runs: Sequence[Run], label: str, k: int) -> tuple[list[int], list[float]]:
    """Sizes and times of one placer at one K: ParDNN's heuristics under every memory limit, the
    others without one; runs stopped by a budget, skipped or infeasible do not count. A ParDNN time
    leaves out its fixed-budget stages (``budget_seconds``): a constant would flatten the slope."""
    points = [(r.ops, float(r.seconds) - (r.budget_seconds or 0.0)) for r in runs
              if r.label == label and r.devices == k and (r.factor is not None) == bool(r.heuristic)
              and r.status == OK and r.seconds and r.seconds > (r.budget_seconds or 0.0)]
    return [p[0] for p in points], [p[1] for p in points]


def slopes(runs: Sequence[Run], labels: Sequence[str], k: int) -> dict[str, float | None]:
    """The fitted exponent of each placer's time against |V| at K = ``k`` (None: fewer than two sizes)."""
    out: dict[str, float | None] = {}
    for label in labels:
        try:
            out[label] = fit_power_law(*scaling_points(runs, label, k))[0]
        except ValueError:
            out[label] = None
    return out


@dataclass(frozen=True)
class Comparison:
    """ParDNN's makespan over a baseline's on one graph and K, neither under a memory limit."""

    graph: str
    ops: int
    devices: int
    baseline: str
    relative: float
    baseline_timeout: bool


def comparisons(runs: Sequence[Run]) -> list[Comparison]:
    cases: dict[tuple[str, int], dict[str, Run]] = {}
    for r in runs:
        if r.factor is None and r.measured:
            cases.setdefault((r.graph, r.devices), {})[r.placer] = r
    out = []
    for (graph, k), placed in cases.items():
        ours = placed.get("pardnn")
        if ours is None or ours.makespan_us is None:
            continue
        for name, theirs in placed.items():
            if name != "pardnn" and theirs.makespan_us:
                out.append(Comparison(graph, ours.ops, k, name, ours.makespan_us / theirs.makespan_us,
                                      theirs.status == TIMEOUT))
    return out


# ---------------------------------------------------------------------------------- aggregates
def labels(runs: Sequence[Run]) -> list[str]:
    """The placers' labels (ParDNN I and II apart), in the order they ran."""
    return list(dict.fromkeys(r.label for r in runs))


def placers(runs: Sequence[Run]) -> list[str]:
    """The placers' names (no heuristics), in the order they ran."""
    return list(dict.fromkeys(r.placer for r in runs if not r.heuristic))


def grouped(runs: Sequence[Run], key: Callable[[Run], Any], keep: Callable[[Run], bool]) -> list[tuple[Any, list[Run]]]:
    """The runs ``keep`` accepts, grouped by ``key`` in the order the groups first appear."""
    groups: dict[Any, list[Run]] = {}
    for r in runs:
        if keep(r):
            groups.setdefault(key(r), []).append(r)
    return list(groups.items())


def geomean(values: Sequence[float]) -> float:
    return float(np.exp(np.mean(np.log(values))))
