"""``pardnn-report DIR...``: tables and plots of throughput against GPUs, batch size and nodes.

Reads ``results.csv`` of each ``DIR`` (the ``--out`` of ``pardnn-launch``; a CSV file path also
works), and merges the per-rank ``figures-<r>.json`` of every run folder under ``DIR`` that has no
row there (a run whose rank 0 was killed before it wrote one; :func:`recover_rows`). It keeps the
runs whose measured window is complete on every node (complete runs, and runs stopped by a time
limit or a stall after the window), takes the median over repeated runs of one configuration, and
writes ``report.md`` (the tables, also printed) and PNG plots (matplotlib, Agg backend) into
``--out`` (default ``DIR/report`` of the first ``DIR``):

- ``<job>-devices.png``: samples/s against devices per node, one line per batch size (one node count);
- ``<job>-batch.png``: samples/s against batch size per node, one line per devices per node;
- ``<job>-nodes.png``: samples/s against nodes, one line per (devices, batch), when several node
  counts were run.

Exit codes: 0 success; 1 no readable results (one line naming the file); 2 bad command line.
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

from launcher.ending import FIGURES_FILE, merge_figures
from launcher.errors import LaunchError
from launcher.files import write_text
from launcher.summary import RESULTS_COLUMNS

__all__ = ["Result", "main", "read_results", "recover_rows", "tables"]

RESULTS_FILE = "results.csv"
_NEEDED = ("job", "status", "nodes", "devices_per_node", "batch_size", "samples_per_s")


@dataclass(frozen=True)
class Result:
    """One run's row (the columns the report uses)."""

    job: str
    nodes: int
    devices: int
    batch: int
    samples_per_s: float
    tokens_per_s: float | None
    device_kind: str


def read_results(lines: Iterable[str], source: str = "results.csv") -> list[Result]:
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
            rows.append(Result(row["job"], int(row["nodes"]), int(row["devices_per_node"]), int(row["batch_size"]),
                               float(row["samples_per_s"]),
                               float(row["tokens_per_s"]) if row.get("tokens_per_s") else None,
                               row.get("device_kind") or "?"))
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
        figures, absent = merge_figures(folder, int(run["nodes"]))
        statuses = [f["figures_status"] for f in figures]
        ended = [s for s in statuses if s != "running"]
        whole = not absent and all(f["throughput"]["complete"] for f in figures)
        rates = [f["throughput"]["samples_per_s"] for f in figures]
        tokens = [f["throughput"]["tokens_per_s"] for f in figures]
        rows.append({**{k: run.get(k) for k in ("job", "model", "nodes", "devices_per_node", "device_kind",
                                               "batch_size", "iterations", "costs", "memory", "run_dir")},
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


def _median(results: Sequence[Result], key: tuple[int, int, int]) -> float | None:
    values = [r.samples_per_s for r in results if (r.nodes, r.devices, r.batch) == key]
    return statistics.median(values) if values else None


def _table(title: str, corner: str, rows: list[int], columns: list[int], cell: dict[tuple[int, int], float]) -> str:
    head = f"| {corner} | " + " | ".join(str(c) for c in columns) + " |"
    rule = "|---" * (len(columns) + 1) + "|"
    body = ["| " + str(r) + " | " + " | ".join(f"{cell[r, c]:.1f}" if (r, c) in cell else "" for c in columns) + " |"
            for r in rows]
    return "\n".join([f"### {title}", "", head, rule, *body, ""])


def tables(results: Sequence[Result]) -> str:
    """Markdown tables per job: samples/s by devices × batch (per node count), and by nodes."""
    out = []
    for job in sorted({r.job for r in results}):
        mine = [r for r in results if r.job == job]
        out.append(f"## {job}\n")
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


def _plot(path: Path, title: str, xlabel: str, series: dict[str, list[tuple[int, float]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4))
    for label, points in series.items():
        points = sorted(points)
        axes.plot([x for x, _ in points], [y for _, y in points], marker="o", label=label)
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    axes.set_ylabel("samples/s (all nodes)")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp.png")
    figure.savefig(temp, dpi=100)
    plt.close(figure)
    temp.replace(path)


def plots(results: Sequence[Result], directory: Path) -> list[Path]:
    """Write the PNG plots of the module docstring; returns their paths."""
    written = []
    for job in sorted({r.job for r in results}):
        mine = [r for r in results if r.job == job]
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
            path = directory / f"{job}-{name}.png"
            _plot(path, f"{job}, {nodes} node(s)", xlabel, series)
            written.append(path)
        if len({r.nodes for r in mine}) > 1:
            by_config: dict[str, list[tuple[int, float]]] = {}
            for r in sorted({(r.nodes, r.devices, r.batch) for r in mine}):
                value = _median(mine, r)
                if value is not None:
                    by_config.setdefault(f"{r[1]} devices, batch {r[2]}", []).append((r[0], value))
            path = directory / f"{job}-nodes.png"
            _plot(path, f"{job}: scaling over nodes", "nodes", by_config)
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
    results: list[Result] = []
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
    text = tables(results)
    print(text)
    write_text(out / "report.md", "# pardnn-launch results\n\n" + text)
    if not args.no_plots:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("pardnn-report: matplotlib is not installed (pip install matplotlib); tables only", file=sys.stderr)
            return 0
        for path in plots(results, out):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
