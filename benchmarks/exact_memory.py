"""How far from optimal is ParDNN when memory binds? ParDNN against the exact CP-SAT optimum under limits.

    python -m benchmarks.exact_memory                 # 294 cases, 5 s per solve: section "exact-memory"
    python -m benchmarks.exact_memory --graphs 42     # fewer

294 seeded training-shaped DAGs (:func:`pardnn.costs.synthetic.dnn_graph` in three shapes, 20-40 ops,
CCR 0.1-100 by scaled compute, K = 2, 3, limits 0.3-0.9 of the one-device peak), each solved exactly
(:mod:`pardnn.baselines.exact`, a model blind to transient buffers), searched by a plain local search
with the emulator (:func:`search_fit`, what fits as the emulator counts memory) and placed by ParDNN,
with and without memory repair and the refinement's cluster moves. The measures: section "exact-memory"
of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.report import machine_line, write_section
from pardnn import partition
from pardnn.baselines import exact
from pardnn.costs.graph import CostGraph, Kind
from pardnn.costs.machine import Machine
from pardnn.costs.synthetic import dnn_graph
from pardnn.emulation.simulate import evaluate
from pardnn.errors import InfeasibleError, NoPlacementFoundError
from pardnn.placement.result import communication_ratio
from pardnn.polish import guard as guard_module
from pardnn.polish import refine as refine_module
from pardnn.steps.units import units_of

HERE = Path(__file__).resolve().parent
CCRS = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
FRACTIONS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
DEVICES = (2, 3)
SHAPES = {"default": {}, "chain": {"block_share": 0.0, "skip_share": 0.3}, "wide": {"branches": 4, "block_share": 0.9}}
BANDWIDTH, LATENCY = 1e9, 0.5
TARGET_MEAN, TARGET_MAX, TARGET_FREE_MAX = 1.01, 1.15, 1.10
DRAWS, SPREAD = 200, 0.8  # graphs drawn until no group holds more than SPREAD x the limit
RESTARTS = 6  # random starts of the reference local search, besides ParDNN's placements


def scaled_to_ccr(graph: CostGraph, ccr: float, machine: Machine) -> CostGraph:
    """``graph`` with every op's compute time scaled by one factor so that its CCR on ``machine`` is
    ``ccr``: the bytes, and so the memory, stay the graph's own (scaling the activations instead cannot
    go below the floor the variables' edges set, and makes memory mostly transient at high CCR)."""
    now = communication_ratio(graph, machine)
    return graph.replace(comp_us=graph.comp_us * (now / ccr))


def case_graph(index: int, seed: int) -> tuple[CostGraph, dict[str, Any]]:
    """Case ``index``'s graph and what it is (ops, shape, CCR target, K, limit fraction)."""
    rng = np.random.default_rng([seed, index])
    fraction = FRACTIONS[index % len(FRACTIONS)]
    shape = list(SHAPES)[(index // len(FRACTIONS)) % len(SHAPES)]
    target = CCRS[(index // (len(FRACTIONS) * len(SHAPES))) % len(CCRS)]
    k = DEVICES[(index // (len(FRACTIONS) * len(SHAPES) * len(CCRS))) % len(DEVICES)]
    machine = Machine(k, bandwidth=BANDWIDTH, latency=LATENCY)
    draws = 0
    while True:
        draws += 1
        graph = scaled_to_ccr(dnn_graph(int(rng.integers(20, 41)), seed=int(rng.integers(2**31)), **SHAPES[shape]),
                              target, machine)
        if draws == DRAWS or largest_unit(graph) <= SPREAD * fraction * one_device_peak(graph):
            return graph, {"shape": shape, "target": target, "fraction": fraction, "k": k, "draws": draws}


def largest_unit(graph: CostGraph) -> int:
    """The most residual bytes one colocation group (or one op outside every group) holds: no device
    can hold less, whatever the placement."""
    residual = np.where(graph.kind == Kind.RESIDUAL, graph.out_bytes, 0)
    grouped = graph.colocation >= 0
    loose = int(residual[~grouped].max(initial=0))
    groups = np.bincount(graph.colocation[grouped], weights=residual[grouped]) if grouped.any() else np.zeros(0)
    return max(loose, int(groups.max(initial=0)))


def one_device_peak(graph: CostGraph) -> float:
    """The emulated peak of ``graph`` all on one device."""
    return float(max(evaluate(graph, Machine(1, bandwidth=BANDWIDTH, latency=LATENCY),
                              np.zeros(graph.n, np.int64)).peak_memory_bytes))


def _score(graph: CostGraph, machine: Machine, placement: np.ndarray) -> tuple[int, float]:
    evaluation = evaluate(graph, machine, placement)
    limits = evaluation.limit_bytes or [0] * machine.devices
    return sum(max(0, p - q) for p, q in zip(evaluation.peak_memory_bytes, limits)), evaluation.makespan_us


def search_fit(graph: CostGraph, machine: Machine, starts: Sequence[np.ndarray], seed: int) -> float | None:
    """The reference: the shortest emulated step of a fitting placement that a plain local search finds
    (every colocation unit moved to every other device, every pair on two devices swapped, first
    improvement of (bytes over the limits, step) until none, from ``starts`` (the exact solver's and
    ParDNN's placements) and :data:`RESTARTS` random ones); ``None`` when it finds none. Independent of
    ParDNN's own search."""
    rng = np.random.default_rng(seed)
    ids, unit = np.unique(units_of(graph), return_inverse=True)
    count, k = ids.size, machine.devices
    firsts = []
    for start in starts:
        where = np.zeros(count, np.int64)
        where[unit] = start
        firsts.append(where)
    best: tuple[int, float] | None = None
    for where in [*firsts, *(rng.integers(0, k, count) for _ in range(RESTARTS))]:
        score = _score(graph, machine, where[unit])
        improved = True
        while improved:
            improved = False
            tries = [(a, d) for a in rng.permutation(count) for d in range(k) if d != where[a]]
            tries += [(a, -1 - b) for a in range(count) for b in range(a + 1, count) if where[a] != where[b]]
            for a, d in tries:
                trial = where.copy()
                if d >= 0:
                    trial[a] = d
                else:
                    trial[a], trial[-1 - d] = where[-1 - d], where[a]
                s = _score(graph, machine, trial[unit])
                if s < score:
                    where, score, improved = trial, s, True
        if best is None or score < best:
            best = score
    return best[1] if best is not None and best[0] == 0 else None


def _pardnn(graph: CostGraph, machine: Machine, repair: bool, clusters: bool = True) -> dict[str, Any]:
    """ParDNN's answer, with memory repair or without it, with the refinement's cluster moves or without
    them (the versions before each)."""
    started = time.perf_counter()
    kept, moves = guard_module.REPAIR_STARTS, refine_module.CLUSTER_MOVES
    guard_module.REPAIR_STARTS = kept if repair else 0
    refine_module.CLUSTER_MOVES = clusters
    try:
        result = partition(graph, machine)
        evaluation = result.report.evaluation
        record = {"pardnn": evaluation.makespan_us, "fits": bool(evaluation.memory_fits), "infeasible": False,
                  "placement": result.placement}
    except InfeasibleError as error:
        record = {"pardnn": None, "fits": False, "infeasible": True, "message": str(error).splitlines()[0],
                  "proven": not isinstance(error, NoPlacementFoundError)}  # a proof, not the heuristics giving up
    finally:
        guard_module.REPAIR_STARTS, refine_module.CLUSTER_MOVES = kept, moves
    record["pardnn_seconds"] = time.perf_counter() - started
    return record


def run_case(index: int, seed: int, time_limit_s: float, search: bool = True) -> dict[str, Any]:
    graph, meta = case_graph(index, seed)
    k = meta["k"]
    peak = one_device_peak(graph)
    limit = max(int(meta["fraction"] * peak), 1)
    free_machine = Machine(k, bandwidth=BANDWIDTH, latency=LATENCY)
    machine = Machine(k, memory=limit, reserve=0.0, bandwidth=BANDWIDTH, latency=LATENCY)
    out: dict[str, Any] = {"index": index, "n": graph.n, **meta, "limit": limit, "peak": peak}
    for label, where in (("free", free_machine), ("bound", machine)):
        solved = exact(graph, where, time_limit_s=time_limit_s)
        details = solved.report.details
        record: dict[str, Any] = {"status": details["status"], "optimum": details["objective_us"],
                                  "bound": details["bound_us"], "seconds": details["solve_seconds"],
                                  "exact_fits": bool(solved.report.evaluation.memory_fits),
                                  "exact_makespan": solved.report.evaluation.makespan_us}
        ours = _pardnn(graph, where, repair=True)
        placed = ours.pop("placement", None)
        record.update(ours)
        record["unclustered"] = _pardnn(graph, where, repair=True, clusters=False)
        record["unclustered"].pop("placement", None)
        if label == "bound":
            before = _pardnn(graph, where, repair=False, clusters=False)
            before.pop("placement", None)
            record["before"] = before
            if search:
                starts = [solved.placement] + ([placed] if placed is not None else [])
                record["search"] = search_fit(graph, where, starts, seed * 100_003 + index)
        out[label] = record
    return out


def _stats(values: Sequence[float]) -> tuple[str, str, str]:
    if not values:
        return "-", "-", "-"
    return f"{statistics.mean(values):.3f}", f"{float(np.percentile(values, 95)):.3f}", f"{max(values):.3f}"


def gaps(cases: list[dict[str, Any]], label: str, *, loose: bool = False, version: str | None = None) -> list[float]:
    """ParDNN / optimum of the cases proven optimal where ParDNN's placement fits and (unless ``loose``) the
    exact placement fits the emulator's memory too: the model drops transient buffers, so where they
    decide what fits, its optimum is a loose bound, not a gap. ``version``: an earlier ParDNN's record
    (``"unclustered"``: before the cluster moves) instead of today's."""
    ours = (lambda c: c[label]) if version is None else (lambda c: c[label][version])
    return [ours(c)["pardnn"] / c[label]["optimum"] for c in cases
            if c[label]["status"] == "optimal" and c[label]["optimum"] and ours(c)["fits"]
            and (loose or c[label]["exact_fits"])]


def best_known(case: dict[str, Any]) -> float | None:
    """The shortest step of a placement known to fit under the limit: the exact solver's when it fits
    the emulator's memory, the reference search's (:func:`search_fit`); ``None``: none known."""
    bound = case["bound"]
    known = [bound["exact_makespan"]] if bound["exact_fits"] else []
    known += [bound["search"]] if bound.get("search") else []
    return min(known) if known else None


def _versions(cases: list[dict[str, Any]]) -> list[str]:
    """The table of ParDNN before memory repair, with it and with the cluster moves, against the fitting
    placements known."""
    rows = []
    for name, pick in (("heuristic I alone", lambda c: c["bound"]["before"]),
                       ("with memory repair, before cluster moves", lambda c: c["bound"]["unclustered"]),
                       ("**with cluster moves (now)**", lambda c: c["bound"])):
        known = [(pick(c), best_known(c)) for c in cases]
        fits = sum(r["fits"] for r, _ in known)
        refused = sum(r["infeasible"] for r, _ in known)
        false = sum(r["infeasible"] and b is not None for r, b in known)
        over = sum(not r["fits"] and not r["infeasible"] for r, _ in known)
        ratios = [r["pardnn"] / b for r, b in known if r["fits"] and b]
        mean, p95, top = _stats(ratios)
        rows.append(f"| {name} | {fits} | {refused} | {false} | {over} | {mean} | {p95} | {top} | {len(ratios)} |")
    return ["| ParDNN | fits | \"infeasible\" | of which a fitting placement is known | over the limit | "
            "/ best known: mean | p95 | max | cases |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|", *rows]


def _largest_against_known(cases: list[dict[str, Any]], count: int = 5) -> list[str]:
    """The cases where ParDNN before the cluster moves was furthest from the best fitting placement known,
    before and now."""
    def ratio(record: dict[str, Any], known: float | None) -> float | None:
        return record["pardnn"] / known if known and record["fits"] else None

    rows = [(ratio(c["bound"]["unclustered"], best_known(c)), ratio(c["bound"], best_known(c)), c) for c in cases]
    rows = sorted((r for r in rows if r[0] is not None), key=lambda r: -r[0])[:count]
    lines = ["", f"The {count} largest gaps to the best known before the cluster moves, and now:", "",
             "| case | shape | ops | K | CCR | limit | before / best known | now / best known |",
             "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for before, now, c in rows:
        shown = "-" if now is None else f"{now:.3f}"
        lines.append(f"| {c['index']} | {c['shape']} | {c['n']} | {c['k']} | {c['target']:g} | {c['fraction']:g} | "
                     f"{before:.3f} | {shown} |")
    return lines


def render(cases: list[dict[str, Any]], seconds: float, command: str, time_limit_s: float) -> str:
    bound = [c["bound"] for c in cases]
    counts = {s: sum(b["status"] == s for b in bound) for s in ("optimal", "feasible", "infeasible", "unknown")}
    over = [c for c in cases if c["bound"]["fits"] is False and not c["bound"]["infeasible"]]
    false_infeasible = [c for c in cases if c["bound"]["infeasible"] and c["bound"]["exact_fits"]]
    gave_up = [c for c in cases if not c["bound"]["fits"] and c["bound"]["exact_fits"]]
    lines = ["## ParDNN against the exact optimum under memory limits (exact-memory)", "",
             f"Command: `{command}` ({seconds:.0f} s). Machine: {machine_line()}.", "",
             f"{len(cases)} training-shaped DAGs of 20-40 ops (`benchmarks/exact_memory.py`: `dnn_graph` in three "
             f"shapes), CCR 0.1-100, K = 2, 3, a per-device limit of 0.3-0.9 × the graph's peak on one device, "
             f"{BANDWIDTH / 1e9:g} GB/s, {LATENCY:g} µs. CP-SAT ({time_limit_s:g} s deterministic time per solve) "
             f"under the limit: **{counts['optimal']}** proven optimal, {counts['feasible']} a solution without "
             f"proof, {counts['infeasible']} proven infeasible, {counts['unknown']} unknown. Ratios: ParDNN's emulated "
             "makespan / the optimum over the cases proven optimal where ParDNN's placement fits.", "",
             "| | mean | p95 | max | ≤ 1.001 | cases |", "|---|---:|---:|---:|---:|---:|"]
    versions = _versions(cases) if all("before" in c["bound"] for c in cases) else []
    rows = (("bound", "under the limit, the exact placement fitting too", False, None),
            ("bound", "the same, before cluster moves", False, "unclustered"),
            ("bound", "under the limit, every proven case (a loose bound where transients decide)", True, None),
            ("bound", "the same, before cluster moves", True, "unclustered"),
            ("free", "no limit (the same graphs)", False, None),
            ("free", "the same, before cluster moves", False, "unclustered"))
    for label, name, loose, version in rows:
        ratios = gaps(cases, label, loose=loose, version=version)
        mean, p95, top = _stats(ratios)
        lines.append(f"| {name} | {mean} | {p95} | {top} | {sum(r <= 1.001 for r in ratios)} | {len(ratios)} |")
    ratios, free = gaps(cases, "bound"), gaps(cases, "free")
    if ratios and free:
        verdict = lambda ok: "met" if ok else "**missed**"  # noqa: E731
        lines += ["", f"Targets (issue), on the {len(ratios)} cases whose gap is measurable (the exact placement "
                  f"fits the emulator's memory): under the limit mean ≤ {TARGET_MEAN} — "
                  f"{verdict(statistics.mean(ratios) <= TARGET_MEAN)}, max ≤ {TARGET_MAX} — "
                  f"{verdict(max(ratios) <= TARGET_MAX)}; without a limit max ≤ {TARGET_FREE_MAX} — "
                  f"{verdict(max(free) <= TARGET_FREE_MAX)}. ParDNN over the limit: {len(over)}; "
                  f"a false \"infeasible\" (the exact placement fits): {len(false_infeasible)}; ParDNN not fitting "
                  f"where the exact placement fits: {len(gave_up)}."]
    if versions:
        lines += ["", "Against every placement known to fit as the emulator counts memory (the exact solver's when it "
                  "fits, and a plain local search's: every unit moved, every pair swapped, from the exact solver's "
                  f"and ParDNN's placements and {RESTARTS} random ones, `search_fit`), ParDNN with heuristic I "
                  "alone, with memory repair, and with the refinement's cluster moves too (a ratio below 1: "
                  "ParDNN's run order beats the placements found, which run in order of readiness):", "",
                  *versions]
        lines += _largest_against_known(cases)
    loose = [c for c in cases
             if c["bound"]["status"] == "optimal" and c["bound"]["fits"] and not c["bound"]["exact_fits"]]
    refused = [c for c in cases if c["bound"]["infeasible"]]
    if loose or refused:
        lines += ["", f"In {len(loose)} proven cases where ParDNN fits, the exact placement does not fit once the "
                  "emulator counts the transient buffers (Eq. 3) that the model leaves out: there the optimum bounds "
                  "ParDNN from below, but no placement that fits need reach it, so those ratios (the second row) "
                  f"are not gaps. ParDNN called {len(refused)} cases infeasible (by limit: "
                  + ", ".join(f"{f:g}: {sum(c['fraction'] == f for c in refused)}" for f in FRACTIONS)
                  + f"); {sum(c['bound'].get('proven', False) for c in refused)} "
                  "of them by a proof before placing (an op that cannot fit any device, or the residual bytes over "
                  f"the devices' total), and in {sum(best_known(c) is not None for c in refused)} of them a "
                  "placement that fits is known."]
    lines += ["", "By limit (fraction of the one-device peak) and by CCR, under the limit (mean / max, cases):", "",
              "| limit | mean | max | cases |", "|---:|---:|---:|---:|"]
    for fraction in FRACTIONS:
        part = gaps([c for c in cases if c["fraction"] == fraction], "bound")
        lines.append(f"| {fraction:g} | " + " | ".join(_stats(part)[::2]) + f" | {len(part)} |")
    lines += ["", "| CCR | mean | max | cases |", "|---:|---:|---:|---:|"]
    for target in CCRS:
        part = gaps([c for c in cases if c["target"] == target], "bound")
        lines.append(f"| {target:g} | " + " | ".join(_stats(part)[::2]) + f" | {len(part)} |")
    worst = sorted((c for c in cases if c["bound"]["status"] == "optimal" and c["bound"]["fits"]
                    and c["bound"]["exact_fits"] and c["bound"]["optimum"]),
                   key=lambda c: -c["bound"]["pardnn"] / c["bound"]["optimum"])[:10]
    if worst:
        lines += ["", "The ten largest gaps under the limit:", "",
                  "| case | shape | ops | K | CCR | limit | ParDNN / optimum | without a limit |",
                  "|---:|---|---:|---:|---:|---:|---:|---:|"]
        for c in worst:
            free_ratio = (f"{c['free']['pardnn'] / c['free']['optimum']:.3f}" if c["free"]["status"] == "optimal"
                          and c["free"]["optimum"] and c["free"]["pardnn"] else "-")
            lines.append(f"| {c['index']} | {c['shape']} | {c['n']} | {c['k']} | {c['target']:g} | {c['fraction']:g} | "
                         f"{c['bound']['pardnn'] / c['bound']['optimum']:.3f} | {free_ratio} |")
    placed = [c["bound"]["pardnn_seconds"] for c in cases]
    lines += ["", f"ParDNN's time per case (wall, 2 shared cores): median {statistics.median(placed):.2f} s, "
              f"max {max(placed):.1f} s; CP-SAT's: median {statistics.median(b['seconds'] for b in bound):.2f} s."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.exact_memory", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", type=int, default=294, help="cases (default 294)")
    parser.add_argument("--time-limit", type=float, default=5.0, help="CP-SAT deterministic seconds per solve")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--results", default=str(HERE / "RESULTS.md"), help="the file to write the section into")
    parser.add_argument("--json", default=None, help="also write every case's figures to this file")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    command = "python -m benchmarks.exact_memory" + (f" --graphs {args.graphs}" if args.graphs != 294 else "")
    cases = []
    for index in range(args.graphs):
        case = run_case(index, args.seed, args.time_limit)
        cases.append(case)
        if not args.quiet:
            b = case["bound"]
            ratio = (f"{b['pardnn'] / b['optimum']:.3f}" if b["status"] == "optimal" and b["optimum"] and b["fits"]
                     else "-")
            print(f"[{index + 1}/{args.graphs}] {case['n']} ops, K = {case['k']}, {case['shape']}, CCR "
                  f"{case['target']:g}, limit {case['fraction']:g}: {b['status']}, ParDNN / optimum {ratio}"
                  + (" (ParDNN: infeasible)" if b["infeasible"] else "" if b["fits"] else " (ParDNN over)"),
                  flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(cases, indent=1, default=float), encoding="utf-8")
    write_section(Path(args.results), "exact-memory", render(cases, time.perf_counter() - started, command,
                                                             args.time_limit), "python -m benchmarks.exact_memory")
    print(f"wrote {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
