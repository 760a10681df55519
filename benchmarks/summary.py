"""The summary of the suite's results: ParDNN against every placer, and the memory heuristics.

Both are ratios and counts within one run (:mod:`benchmarks.analysis` computes the comparisons);
:mod:`benchmarks.report` puts them at the top of ``RESULTS.md``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

from benchmarks.analysis import comparisons, geomean
from benchmarks.suite import HEURISTICS, INFEASIBLE, LABELS, OK, PAPER, Run, secs

__all__ = ["BY_CONSTRUCTION", "memory_summary", "percent", "table", "wins_section"]


def percent(share: float) -> str:
    return f"{100 * share:.2f} %" if abs(share) < 0.01 else f"{100 * share:.1f} %"


def table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "|".join({"l": "---", "r": "---:", "c": ":---:"}[a]
                                                             for a in align) + "|",
            *("| " + " | ".join(row) + " |" for row in rows)]


def _mean(values: Sequence[float]) -> str:
    return f"{statistics.mean(values):.3f}" if values else "n/a"


BY_CONSTRUCTION = (
    "ParDNN is never slower than the cheap baselines *by construction*, not as a finding: its guard emulates "
    "those same placers (all of these but exact and the paper row) on the same emulator and keeps the fastest, "
    "so a loss to one of them would be a bug. What the table measures is the margin: how often ParDNN is "
    "strictly faster, and the geometric mean of its makespan over each placer's. The *ParDNN (paper)* row is "
    "Steps 1 and 2 alone (no guard, refinement or run order): against it, the ratio is what the stages after "
    "Step 2 buy.")


def wins_section(runs: Sequence[Run], what: str) -> list[str]:
    found = comparisons(runs)
    if not found:
        return []
    rows = []
    for name in dict.fromkeys(c.baseline for c in found):
        mine = [c for c in found if c.baseline == name]
        rel = [c.relative for c in mine]
        timeouts = sum(c.baseline_timeout for c in mine)
        rows.append([LABELS[name], str(len(mine)), str(sum(x < 1 for x in rel)), str(sum(x == 1 for x in rel)),
                     str(sum(x > 1 for x in rel)), f"{geomean(rel):.3f}", f"{min(rel):.3f} – {max(rel):.3f}",
                     f"{timeouts} (LC stopped at its budget)" if timeouts else "-"])
    losses = [c for c in found if c.relative > 1 and c.baseline != PAPER]
    baselines = [c for c in found if c.baseline != PAPER]
    cases = {(c.graph, c.devices) for c in baselines}
    beaten_all = sum(all(c.relative < 1 for c in baselines if (c.graph, c.devices) == case) for case in cases)
    lines = [f"ParDNN's makespan / the placer's on the same {what} and K, no memory limit (below 1: ParDNN is "
             "faster; *ParDNN faster* counts strict wins).", "",
             *table(["placer", "cases", "ParDNN faster", "equal", "ParDNN slower", "geometric mean",
                      "range", "baseline timeouts"], rows, "lrrrrrrl"), "", BY_CONSTRUCTION, ""]
    if losses:
        lines += [f"**ParDNN is slower than a baseline** in {len(losses)} of {len(baselines)} comparisons (a bug, "
                  "given the guard):", "",
                  *table(["graph", "ops", "K", "baseline", "ParDNN / baseline", "ParDNN slower by"],
                          ([c.graph, f"{c.ops:,}", str(c.devices), LABELS[c.baseline] + (" †" if c.baseline_timeout
                                                                                         else ""),
                            f"{c.relative:.4f}", percent(c.relative - 1)]
                           for c in sorted(losses, key=lambda c: (c.ops, c.devices, c.baseline))), "lrrlrr"), ""]
    wins = sum(c.relative < 1 for c in baselines)
    lines.append(f"ParDNN is strictly faster in {wins} of {len(baselines)} comparisons with a baseline, and "
                 f"faster than every baseline at once in {beaten_all} of {len(cases)} cases (graph × K).")
    pair = [c for c in found if c.baseline in ("round_robin", "topological")]
    if {c.baseline for c in pair} == {"round_robin", "topological"}:
        both = sum(all(c.relative < 1 for c in pair if (c.graph, c.devices) == case) for case in cases)
        lines.append(f"ParDNN beats both round robin and topological in {both} of {len(cases)} cases.")
    paper = [c.relative for c in found if c.baseline == PAPER]
    if paper:
        lines.append(f"Against the paper's algorithm alone: strictly faster in {sum(x < 1 for x in paper)} of "
                     f"{len(paper)} cases, geometric mean {geomean(paper):.3f}, best {min(paper):.3f}.")
    return [*lines, ""]


def memory_summary(runs: Sequence[Run]) -> list[str]:
    limited = [r for r in runs if r.factor is not None]
    if not limited:
        return []
    step1 = {(r.graph, r.devices, r.factor): r for r in limited if r.placer == "pardnn" and not r.heuristic}
    lines = []
    for heuristic, numeral in HEURISTICS.items():
        mine = [r for r in limited if r.heuristic == heuristic]
        fits = [r for r in mine if r.status == OK and r.memory_fits]
        overflowed = [r for r in mine if not step1[(r.graph, r.devices, r.factor)].memory_fits]
        rescued = [r for r in overflowed if r.status == OK and r.memory_fits]
        shares = [r.moved_share or 0.0 for r in fits]
        moved_mean = percent(statistics.mean(shares)) if shares else "n/a"
        moved_max = percent(max(shares)) if shares else "n/a"
        lines.append(
            f"- ParDNN with heuristic {numeral} ({heuristic}): fits in {len(fits)} of {len(mine)} cases; "
            f"Step 1 alone overflowed in {len(overflowed)} of them and heuristic {numeral} made "
            f"{len(rescued)} of those feasible ({percent(len(rescued) / len(overflowed)) if overflowed else 'n/a'}); "
            f"ops moved where it fits: mean {moved_mean}, max {moved_max} (the paper reports 8 % on "
            f"average); makespan cost (makespan / Step 1 makespan) where it fits: mean "
            f"{_mean([r.makespan_cost for r in fits if r.makespan_cost])}, max "
            f"{max((r.makespan_cost or 0 for r in fits), default=0):.3f}; time: mean "
            f"{secs(statistics.mean(r.seconds or 0 for r in mine)) if mine else '-'}, max "
            f"{secs(max((r.seconds or 0 for r in mine), default=0))}.")
    overflow = {(r.graph, r.devices, r.factor): r for r in limited if r.heuristic == "overflow"}
    baselines = [r for r in limited if r.placer != "pardnn"]
    for name in dict.fromkeys(r.placer for r in baselines):
        mine = [r for r in baselines if r.placer == name and r.measured]
        fitting = [(r, overflow[(r.graph, r.devices, r.factor)]) for r in mine if r.memory_fits]
        ours = [(r, o) for r, o in fitting if o.status == OK]
        faster = sum(o.makespan_us is not None and r.makespan_us is not None and o.makespan_us < r.makespan_us
                     for r, o in ours)
        if mine:
            lines.append(f"- {LABELS[name]} (no heuristic) fits in {len(fitting)} of {len(mine)} cases"
                         + (f"; in those, ParDNN I fits in {len(ours)} and has the shorter makespan in {faster}."
                            if fitting else "."))
    step1_fits = sum(bool(r.memory_fits) for r in step1.values())
    lines.append(f"- ParDNN without a memory heuristic fits in {step1_fits} of {len(step1)} cases.")
    fitting_cases = {(r.graph, r.devices, r.factor) for r in baselines if r.measured and r.memory_fits}
    for heuristic, numeral in HEURISTICS.items():
        gave_up = [r for r in limited if r.heuristic == heuristic and r.status == INFEASIBLE
                   and (r.graph, r.devices, r.factor) in fitting_cases]
        lines.append(f"- Exit 3 (infeasible or no placement found) with heuristic {numeral} while a baseline's "
                     f"placement fits: {len(gave_up)} of {len(fitting_cases)} such cases (target 0).")
    return [*lines, ""]
