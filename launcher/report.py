"""``pardnn-report DIR...``: tables and plots of throughput against GPUs, batch size and nodes, per variant.

:func:`main` reads each ``DIR``'s ``results.csv`` (:func:`read_results`; a CSV path works too) and the
figures of runs without a row (:func:`recover_rows`), keeps the runs whose window is complete on every
node, takes the median over repeats and writes ``report.md`` (:func:`tables`, also printed) and the PNG
plots (``<job>-devices``, ``-batch``, ``-nodes`` per variant; ``<run>-loss``) into ``--out``
(default ``DIR/report``). Exit codes: 0 success; 1 no readable results; 2 bad command line.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.errors import LaunchError
from launcher.files import write_text
from launcher.rank.ending import FIGURES_FILE, merge_figures
from launcher.reporting.comparisons import comparison_plots, comparison_tables, fidelity_warnings
from launcher.reporting.losses import loss_curves
from launcher.reporting.plotting import plot_lines
from launcher.reporting.summary import RESULTS_COLUMNS
from launcher.variants import DATA, RECOMPUTE, slug

__all__ = ["RunRow", "main", "read_results", "recover_rows", "tables"]

RESULTS_FILE = "results.csv"
_NEEDED = ("job", "status", "nodes", "devices_per_node", "batch_size", "samples_per_s")


@dataclass(frozen=True)
class RunRow:
    """One run's row (the columns the report uses). ``batch``: samples per step on one node (all its
    replicas). ``variant``: the placer, ``data`` or ``data+recompute`` (``pardnn`` in results files
    from before placers could be chosen)."""

    job: str
    nodes: int
    devices: int
    batch: int
    samples_per_s: float
    tokens_per_s: float | None
    device_kind: str
    variant: str = "pardnn"
    emulated_ms: float | None = None
    measured_ms: float | None = None
    allreduce_ms: float | None = None  # the gradient allreduce's exposed share of ``emulated_ms``


def _variant(row: dict[str, str]) -> str:
    """The placer, ``data`` or ``data+recompute``; a placer's replicas of fewer devices than the node's
    (``--replica-devices k``, a plan) are ``<placer> k=<k>``."""
    if row.get("parallelism") == "data":
        return RECOMPUTE if row.get("recompute") == "true" else DATA
    placer = row.get("placer") or "pardnn"
    k = row.get("replica_devices")
    return f"{placer} k={k}" if k and k != row.get("devices_per_node") else placer


def _float(text: str | None) -> float | None:
    return float(text) if text else None


def read_results(lines: Iterable[str], source: str = "results.csv") -> list[RunRow]:
    """Runs whose window is complete, from the lines of a ``results.csv``; a bad row raises naming ``source``
    and the line."""
    reader = csv.DictReader(lines)
    missing = [c for c in _NEEDED if c not in (reader.fieldnames or [])]
    if missing:
        raise LaunchError(f"{source}: not a pardnn-launch results file (no column {', '.join(missing)})")
    rows = []
    for line, row in enumerate(reader, start=2):
        if (row["status"] != "complete" and row.get("window_complete") != "true") or not row["samples_per_s"]:
            continue  # no throughput over the whole window on every node
        try:
            nodes, per_replica = int(row["nodes"]), int(row["batch_size"])
            # batch per node: a data-parallel replica's batch is a device's, its node trains K of them
            batch = int(row["global_batch_size"]) // nodes if row.get("global_batch_size") else per_replica
            rows.append(RunRow(row["job"], nodes, int(row["devices_per_node"]), batch,
                               float(row["samples_per_s"]), _float(row.get("tokens_per_s")),
                               row.get("device_kind") or "?", _variant(row), _float(row.get("emulated_step_ms")),
                               _float(row.get("step_ms_median")), _float(row.get("emulated_allreduce_ms"))))
        except (TypeError, ValueError) as error:
            raise LaunchError(f"{source}, line {line}: {error}") from None
    return rows


def recover_rows(directory: Path, known: set[str]) -> list[dict[str, object]]:
    """``results.csv`` rows merged from the figures files of run folders under ``directory`` whose
    name is not in ``known`` (the folders ``results.csv`` has rows for)."""
    rows: list[dict[str, object]] = []
    for folder in sorted(p for p in directory.iterdir() if p.is_dir() and p.name not in known):
        found = _figures(folder)
        if not found:
            continue
        run = found[0]["run"]
        figures, absent = merge_figures(folder, int(run.get("replicas") or run["nodes"]))
        statuses = [f["figures_status"] for f in figures]
        ended = [s for s in statuses if s != "running"]
        whole = not absent and all(f["throughput"]["complete"] for f in figures)
        rates = [f["throughput"]["samples_per_s"] for f in figures]
        tokens = [f["throughput"]["tokens_per_s"] for f in figures]
        rows.append({**{k: run.get(k) for k in ("job", "model", "nodes", "devices_per_node", "device_kind",
                                               "batch_size", "iterations", "costs", "memory", "run_dir", "placer",
                                               "parallelism")},
                     "recompute": str(bool(run.get("recompute"))).lower(),
                     "status": max(set(ended), key=ended.count) if ended else "running",
                     "window": "{}:{}".format(*run["window"]),
                     "samples_per_s": sum(rates) if whole else None,
                     "tokens_per_s": sum(tokens) if whole and None not in tokens else None,
                     "window_complete": str(whole).lower()})
    return rows


def _figures(folder: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(folder.glob(FIGURES_FILE.format(rank="*"))):
        try:
            out.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return [f for f in out if isinstance(f, dict) and isinstance(f.get("run"), dict)]


def _as_lines(rows: list[dict[str, object]]) -> list[str]:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(RESULTS_COLUMNS), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows([{k: "" if v is None else v for k, v in row.items()} for row in rows])
    return out.getvalue().splitlines()


def _median(results: Sequence[RunRow], key: tuple[int, int, int]) -> float | None:
    values = [r.samples_per_s for r in results if (r.nodes, r.devices, r.batch) == key]
    return statistics.median(values) if values else None


def _table(title: str, corner: str, rows: list[int], columns: list[int], cell: dict[tuple[int, int], float]) -> str:
    head = f"| {corner} | " + " | ".join(str(c) for c in columns) + " |"
    rule = "|---" * (len(columns) + 1) + "|"
    body = ["| " + str(r) + " | " + " | ".join(f"{cell[r, c]:.1f}" if (r, c) in cell else "" for c in columns) + " |"
            for r in rows]
    return "\n".join([f"### {title}", "", head, rule, *body, ""])


def _groups(results: Sequence[RunRow]) -> list[tuple[str, str, list[RunRow]]]:
    """``(title, file stem, runs)`` per job and variant: ``trn`` for ParDNN's runs, else ``trn, metis``
    (``trn-metis``)."""
    out = []
    for job, variant in sorted({(r.job, r.variant) for r in results}, key=lambda k: (k[0], k[1] != "pardnn", k[1])):
        mine = [r for r in results if (r.job, r.variant) == (job, variant)]
        plain = variant == "pardnn"
        out.append((job if plain else f"{job}, {variant}", job if plain else f"{job}-{slug(variant)}", mine))
    return out


def tables(results: Sequence[RunRow]) -> str:
    """Markdown tables per job and variant: samples/s by devices × batch (per node count), and by nodes."""
    out = []
    for title, _, mine in _groups(results):
        out.append(f"## {title}\n")
        for nodes in sorted({r.nodes for r in mine}):
            at = [r for r in mine if r.nodes == nodes]
            devices, batches = sorted({r.devices for r in at}), sorted({r.batch for r in at})
            cell = {(d, b): v for d in devices for b in batches if (v := _median(at, (nodes, d, b))) is not None}
            out.append(_table(f"samples/s, {nodes} node(s): devices per node (rows) × batch per node (columns)",
                              "devices \\ batch", devices, batches, cell))
        node_counts = sorted({r.nodes for r in mine})
        if len(node_counts) > 1:
            configs = sorted({(r.devices, r.batch) for r in mine})
            lines = ["### scaling over nodes (samples/s; speed-up over the fewest nodes)", "",
                     "| devices | batch | " + " | ".join(f"{n} node(s)" for n in node_counts) + " |",
                     "|---" * (len(node_counts) + 2) + "|"]
            for per_node, batch in configs:
                values = [_median(mine, (n, per_node, batch)) for n in node_counts]
                base = next((v for v in values if v), None)
                cells = ["" if v is None else f"{v:.1f} ({v / base:.2f}×)" if base else f"{v:.1f}" for v in values]
                lines.append(f"| {per_node} | {batch} | " + " | ".join(cells) + " |")
            out.append("\n".join([*lines, ""]))
    return "\n".join(out)


def plots(results: Sequence[RunRow], directory: Path) -> list[Path]:
    """Write the PNG plots of the module docstring; returns their paths."""
    written = []
    for job, stem, mine in _groups(results):
        nodes = min(r.nodes for r in mine)
        at = [r for r in mine if r.nodes == nodes]
        by_batch: dict[str, list[tuple[int, float]]] = {}
        by_devices: dict[str, list[tuple[int, float]]] = {}
        for devices, batch in sorted({(r.devices, r.batch) for r in at}):
            value = _median(at, (nodes, devices, batch))
            if value is not None:
                by_batch.setdefault(f"batch {batch}", []).append((devices, value))
                by_devices.setdefault(f"{devices} devices", []).append((batch, value))
        for name, xlabel, series in (("devices", "devices per node", by_batch), ("batch", "batch size per node",
                                                                                  by_devices)):
            path = directory / f"{stem}-{name}.png"
            plot_lines(path, f"{job}, {nodes} node(s)", xlabel, "samples/s (all nodes)", series)
            written.append(path)
        if len({r.nodes for r in mine}) > 1:
            by_config: dict[str, list[tuple[int, float]]] = {}
            for r in sorted({(r.nodes, r.devices, r.batch) for r in mine}):
                value = _median(mine, r)
                if value is not None:
                    by_config.setdefault(f"{r[1]} devices, batch {r[2]}", []).append((r[0], value))
            path = directory / f"{stem}-nodes.png"
            plot_lines(path, f"{job}: scaling over nodes", "nodes", "samples/s (all nodes)", by_config)
            written.append(path)
    return written


def _results_file(path: Path) -> Path:
    return path / RESULTS_FILE if path.is_dir() else path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pardnn-report", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="pardnn-launch --out directory or CSV file")
    parser.add_argument("--out", type=Path, help="where report.md and the plots go (default DIR/report)")
    parser.add_argument("--no-plots", action="store_true", help="tables only")
    args = parser.parse_args(argv)
    results: list[RunRow] = []
    try:
        for directory in args.dirs:
            path = _results_file(directory)
            known: set[str] = set()
            if path.exists() or not directory.is_dir():
                try:
                    text = path.read_text(encoding="utf-8")
                except OSError as error:
                    raise LaunchError(f"{path}: cannot read ({error.strerror})") from None
                results += read_results(text.splitlines(), str(path))
                known = {Path(row.get("run_dir") or "").name for row in csv.DictReader(text.splitlines())}
            if directory.is_dir():
                recovered = recover_rows(directory, known)
                if recovered:
                    print(f"pardnn-report: {directory}: {len(recovered)} run(s) without a results.csv row, merged "
                          "from their per-rank figures files", file=sys.stderr)
                    results += read_results(_as_lines(recovered), f"{directory} (per-rank files)")
        if not results:
            where = ", ".join(str(_results_file(d)) for d in args.dirs)
            raise LaunchError(f"no runs with a complete window in {where}")
    except LaunchError as error:
        print(f"pardnn-report: error: {error}", file=sys.stderr)
        return 1
    out = args.out or (args.dirs[0] if args.dirs[0].is_dir() else args.dirs[0].parent) / "report"
    warnings = fidelity_warnings(results)
    text = "\n".join(part for part in (tables(results), comparison_tables(results)) if part)
    if warnings:
        text += "\n## warnings\n\n" + "\n".join(f"- {line}" for line in warnings) + "\n"
    print(text)
    for line in warnings:
        print(f"pardnn-report: warning: {line}", file=sys.stderr)
    write_text(out / "report.md", "# pardnn-launch results\n\n" + text)
    if not args.no_plots:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("pardnn-report: matplotlib is not installed (pip install matplotlib); tables only", file=sys.stderr)
            return 0
        for path in [*plots(results, out), *comparison_plots(results, out), *loss_curves(args.dirs, out)]:
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
