"""Cluster plans for the ten paper models: ``pardnn plan`` on N = 1, 4, 16 nodes of DGX-2 and DGX A100.

    python -m benchmarks.plan [--models NAME ...] [--nodes 1 4 16] [--node dgx-2 dgx-a100]
                              [--json out/plan.json] [--results benchmarks/RESULTS.md] [--no-write]
                              [--against OLD.json]   # then: what differs from an earlier run, cell by cell

Each cell is :func:`jobs.plan.job_plan` for one model, node preset and N; the table gives per k the best
M's cluster samples/s, the plan chosen against k = 1 and k = G, its exposed allreduce and the search's
seconds. Finished cells are appended to ``--json`` at once, so an interrupted run resumes. What a cell
means and what its seconds count: docs/planning.md ("The paper models' plans").
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("word-rnn", "char-crn", "wrn", "trn", "e3d", "word-rnn-2", "char-crn-2", "wrn-2", "trn-2", "e3d-2")
NODES = (1, 4, 16)
PRESETS = ("dgx-2", "dgx-a100")
SECTION = "plan"
TARGET_S = 120.0  # planning one model for one cluster, on the 2 cores of the development machine


def cell(model: str, node: str, nodes: int, search: Any, described: dict[str, Any]) -> dict[str, Any]:
    """One row: per k the best fitting M's samples/s (and the plans pruned, with the samples/s they cannot
    reach), the choice, and its ratio to the simple plans (a lower bound where one of those was pruned)."""
    gpus = described["devices_per_node"]
    best: dict[int, dict[str, Any]] = {}
    for trial in search.trials:
        k = trial.plan.replica_devices
        entry = best.setdefault(k, {"samples_per_s": None, "micro_batches": None, "tried": False, "pruned": 0,
                                    "over": 0, "at_most": None})
        if trial.status != "skipped":
            entry["tried"] = True
        if trial.status in ("does_not_fit", "infeasible"):
            entry["over"] += 1
        if trial.status == "pruned":
            entry["pruned"] += 1
            entry["at_most"] = max(entry["at_most"] or 0.0, described["global_batch"] / (trial.bound_us * 1e-6))
        if trial.fits and (entry["samples_per_s"] is None or trial.samples_per_s > entry["samples_per_s"]):
            entry.update(samples_per_s=trial.samples_per_s, micro_batches=trial.plan.micro_batches)
    chosen = search.chosen
    simple = [best[k]["samples_per_s"] for k in (1, gpus) if k in best and best[k]["samples_per_s"] is not None]
    caps = [best[k]["at_most"] for k in (1, gpus) if k in best and best[k]["at_most"] is not None]
    ceiling = max(simple + caps) if simple + caps else None
    return {"model": model, "node": node, "nodes": nodes, "devices_per_node": gpus,
            "node_batch": described["node_batch"], "per_k": {str(k): v for k, v in best.items()},
            "chosen": None if chosen is None else {"replica_devices": chosen.plan.replica_devices,
                                                   "micro_batches": chosen.plan.micro_batches,
                                                   "samples_per_s": chosen.samples_per_s,
                                                   "exposed_ms": chosen.exposed_us / 1e3,
                                                   "step_ms": chosen.step_us / 1e3},
            "over_simple": None if chosen is None or ceiling is None else chosen.samples_per_s / ceiling,
            "over_simple_at_least": bool(caps) and max(caps) > max(simple, default=0.0),
            "why": search.why, "seconds": search.seconds, "build_seconds": described["build_seconds"],
            "graphs_built": described["graphs_built"], "build_workers": described["build_workers"]}


def run_model(model: str, node: str, nodes_list: Sequence[int], done: set[tuple[str, str, int]],
              save: Any, cache: dict[Any, Any]) -> None:
    from jobs.plan import job_plan

    for nodes in nodes_list:
        if (model, node, nodes) in done:
            continue
        began = time.perf_counter()
        search, described = job_plan(model, nodes=nodes, node=node, cache=cache,
                                     on_note=lambda message: print(f"  {message}", file=sys.stderr, flush=True))
        row = cell(model, node, nodes, search, described)
        save(row)
        chosen = row["chosen"]
        print(f"{model} on {nodes} x {node}: {'nothing fits' if chosen is None else search.why} "
              f"({time.perf_counter() - began:.0f} s)", file=sys.stderr, flush=True)


def _rate(value: float | None) -> str:
    if value is None:
        return "over"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _processes(row: dict[str, Any]) -> int:
    """The processes that built the row's graphs: the search's and its workers (rows of before workers: 1)."""
    return 1 + row.get("build_workers", 0)


def _builds(row: dict[str, Any]) -> str:
    """The graphs built and the processes that built them, where any were."""
    return f"{row['graphs_built']} ({_processes(row)})" if row["graphs_built"] else ""


def _ratio(row: dict[str, Any]) -> str:
    """chosen / max(k = 1, k = G), ``>=`` where a pruned plan's bound stood in for one of those."""
    return f"{'>= ' if row.get('over_simple_at_least') else ''}{row['over_simple']:.2f}"


def _per_k(entry: dict[str, Any]) -> str:
    """A k's cell: its best M's samples/s or ``over``; with the plans pruned (rows of before pruning: none)."""
    pruned = entry.get("pruned", 0)
    if entry["samples_per_s"] is None:
        if not pruned:
            return "over"
        return f"< {_rate(entry['at_most'])} (pruned{', others over' if entry.get('over') else ''})"
    rate = f"{_rate(entry['samples_per_s'])} (M={entry['micro_batches']})"
    return f"{rate}, {pruned} pruned" if pruned else rate


def table(rows: Sequence[dict[str, Any]]) -> str:
    ks = sorted({int(k) for row in rows for k in row["per_k"]})
    head = "| model | node | N | B | " + " | ".join(f"k={k}" for k in ks) + \
        " | chosen | chosen / max(k=1, k=G) | exposed allreduce ms | search s | builds (processes) |"
    lines = [head, "|---|---|---:|---:|" + "---:|" * len(ks) + "---|---:|---:|---:|---:|"]
    for row in rows:
        cells = []
        for k in ks:
            entry = row["per_k"].get(str(k))
            if entry is None:
                cells.append("")  # k does not divide this node's G
            elif not entry["tried"]:
                cells.append("-")
            else:
                cells.append(_per_k(entry))
        chosen = row["chosen"]
        what = "nothing fits" if chosen is None else f"k={chosen['replica_devices']} M={chosen['micro_batches']}"
        ratio = "" if row["over_simple"] is None else _ratio(row)
        exposed = "" if chosen is None else f"{chosen['exposed_ms']:.1f}"
        lines.append(f"| {row['model']} | {row['node']} | {row['nodes']} | {row['node_batch']} | "
                     + " | ".join(cells) + f" | {what} | {ratio} | {exposed} | {row['seconds']:.0f} | {_builds(row)} |")
    return "\n".join(lines)


def summary(rows: Sequence[dict[str, Any]]) -> list[str]:
    ratios = [row["over_simple"] for row in rows if row["over_simple"] is not None]
    below = [row for row in rows if row["over_simple"] is not None and row["over_simple"] < 1 - 1e-9]
    middle = [row for row in rows if row["chosen"] and 1 < row["chosen"]["replica_devices"] < row["devices_per_node"]]
    # the first cell run of each model (its first node preset and N): the one that starts from nothing built
    firsts = [next(row for row in rows if row["model"] == model) for model in dict.fromkeys(r["model"] for r in rows)]
    lines = [f"Cells: {len(rows)}. Chosen below max(k = 1, k = G): {len(below)} (target 0)."
             + (f" Chosen / max(k = 1, k = G): {min(ratios):.2f} to {max(ratios):.2f}." if ratios else "")]
    if middle:
        gains = ", ".join(f"{row['model']} {row['nodes']} x {row['node']}: k={row['chosen']['replica_devices']} "
                          f"{_ratio(row)}x" for row in middle if row["over_simple"])
        lines.append(f"An intermediate k wins in {len(middle)} cells: {gains}.")
    pruned = sum(entry.get("pruned", 0) for row in firsts for entry in row["per_k"].values())
    if pruned:
        lines.append(f"Plans pruned in the first searches (not placed: a lower bound on their step is longer than a "
                     f"fitting plan's): {pruned}.")
    if firsts:
        worst = max(firsts, key=lambda row: row["seconds"])
        within = sum(row["seconds"] <= TARGET_S for row in firsts)
        built = sum(row["build_seconds"] for row in firsts)
        lines.append(f"Planning one model for one cluster (the first cell of each model): "
                     f"{min(row['seconds'] for row in firsts):.0f} to {worst['seconds']:.0f} s "
                     f"({worst['model']} on {worst['node']}); {within} of {len(firsts)} within {TARGET_S:.0f} s. "
                     f"What dominates: building and costing the graphs ({sum(r['graphs_built'] for r in firsts)} "
                     f"builds, {built:.0f} s of build time summed over the processes that built them, against "
                     f"{sum(row['seconds'] for row in firsts):.0f} s of searching).")
        over = [row for row in firsts if row["seconds"] > TARGET_S]
        if over:
            floors = ", ".join(f"{row['model']} on {row['node']} {row['seconds']:.0f} s (builds "
                               f"{row['build_seconds']:.0f} s / {_processes(row)} processes = "
                               f"{row['build_seconds'] / _processes(row):.0f} s)" for row in over)
            lines.append(f"Beyond {TARGET_S:.0f} s, against the builds alone shared by the processes that ran "
                         f"them: {floors}.")
    return lines


def differences(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]], rtol: float = 1e-9) -> list[str]:
    """What changed between two runs' rows, cell by cell (the same model, node preset and N): the plan
    chosen, and per k the best M, its samples/s (beyond ``rtol``), ``over`` or ``-``, and the plans pruned.
    A cell in only one of them is a difference too. Empty: the same tables."""
    def key(row: dict[str, Any]) -> tuple[str, str, int]:
        return row["model"], row["node"], row["nodes"]

    old, new = {key(row): row for row in before}, {key(row): row for row in after}
    found = [f"{' '.join(map(str, cell))}: only in the {'first' if cell in old else 'second'} run"
             for cell in sorted(old.keys() ^ new.keys())]
    for cell in sorted(old.keys() & new.keys()):
        a, b, where = old[cell], new[cell], " ".join(map(str, cell))
        plans = [None if row["chosen"] is None else (row["chosen"]["replica_devices"], row["chosen"]["micro_batches"])
                 for row in (a, b)]
        if plans[0] != plans[1]:
            found.append(f"{where}: chosen (k, M) {plans[0]} -> {plans[1]}")
        for k in sorted(a["per_k"].keys() | b["per_k"].keys(), key=int):
            x, y = a["per_k"].get(k), b["per_k"].get(k)
            if x is None or y is None:
                found.append(f"{where}: k={k} only in the {'first' if y is None else 'second'} run")
                continue
            shapes = [(entry["tried"], entry["micro_batches"], entry.get("pruned", 0)) for entry in (x, y)]
            if shapes[0] != shapes[1]:
                found.append(f"{where}: k={k} (tried, best M, pruned) {shapes[0]} -> {shapes[1]}")
            rates = x["samples_per_s"], y["samples_per_s"]
            if (rates[0] is None) != (rates[1] is None) or (
                    rates[0] is not None and abs(rates[1] - rates[0]) > rtol * abs(rates[0])):
                shown = ["over" if rate is None else f"{rate:.7g}" for rate in rates]
                found.append(f"{where}: k={k} samples/s {shown[0]} -> {shown[1]}")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.plan", description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), metavar="NAME",
                        help="job names (default: the ten paper models)")
    parser.add_argument("--nodes", type=int, nargs="+", default=list(NODES))
    parser.add_argument("--node", nargs="+", default=list(PRESETS), help="node presets (default dgx-2 dgx-a100)")
    parser.add_argument("--json", type=Path, default=ROOT / "out" / "plan.json", help="rows, appended as they finish")
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    parser.add_argument("--render", action="store_true", help="write the section from --json only, planning nothing")
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing it")
    parser.add_argument("--against", type=Path, metavar="OLD.json",
                        help="then list every cell whose plan or per-k figures differ from OLD.json's (exit 1 if any): "
                             "the check that a change to planning leaves the tables as they were")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = json.loads(args.json.read_text()) if args.json.exists() else []
    began = time.perf_counter()
    if not args.render:
        from jobs.tfimport import quiet

        quiet()
        args.json.parent.mkdir(parents=True, exist_ok=True)
        done = {(row["model"], row["node"], row["nodes"]) for row in rows}

        def save(row: dict[str, Any]) -> None:
            rows.append(row)
            args.json.write_text(json.dumps(rows, indent=1))

        for model in args.models:
            cache: dict[Any, Any] = {}  # the model's steps, built once for every node preset
            for node in args.node:
                run_model(model, node, args.nodes, done, save, cache)
            cache.clear()
            gc.collect()
    from benchmarks.report import machine_line, write_section

    typed = " ".join(sys.argv[1:] if argv is None else argv)
    order = {name: i for i, name in enumerate(MODELS)}
    rows.sort(key=lambda row: (order.get(row["model"], 99), row["node"], row["nodes"]))
    body = [f"## Cluster plans for the paper models ({SECTION})", "",
            f"Command: `python -m benchmarks.plan {typed}` (finished "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
            f"this invocation {time.perf_counter() - began:.0f} s). "
            f"Machine: {machine_line()}.", "",
            "Each cell: `pardnn plan MODEL --nodes N --node PRESET` (the job's batch B per node, memory and reserve). "
            "Per k: the cluster's samples/s (N·B / the emulated step, gradient allreduce included) of the best M, "
            "`over` where no M fits, `-` where B does not split over the node's G/k replicas; *n pruned*: plans "
            "of that k not placed because a lower bound on their step (compute / k, or the critical path, of their "
            "own graph or, unbuilt, from the plain step of their micro-batch, or from the kernel launches of the "
            "plain steps built at other batches) was already longer than a fitting "
            "plan's, so they are slower than the plan chosen (`< x (pruned)`: no M of "
            "that k placed fits, and the pruned ones reach at most x samples/s). "
            "*chosen / max(k=1, k=G)*: against plain data parallelism and one replica per node, whichever is faster "
            "and fits (`>=` where one of those was pruned: its bound stands in for it). *search s*: the "
            "first cell of a model builds and places from nothing; the next reuse what it built and placed, and "
            "build and place what it pruned and they cannot prune (a plan pruned without its own step built "
            "may be worth placing with another allreduce). "
            "*builds (processes)*: the graphs built for the cell and the processes that built them "
            "(the search's and its workers, `pardnn plan --build-workers`).", "",
            table(rows), "", *summary(rows)]
    text = "\n".join(body) + "\n"
    if args.no_write:
        print(text)
    else:
        write_section(args.results, SECTION, text, "python -m benchmarks.plan")
        print(f"wrote section {SECTION} of {args.results}", file=sys.stderr)
    if args.against is not None:
        changed = differences(json.loads(args.against.read_text()), rows)
        print("\n".join(changed) if changed else f"the same tables as {args.against} ({len(rows)} cells)")
        return 1 if changed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
