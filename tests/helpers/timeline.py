"""Where a run's time went, from the file ``PARDNN_TEST_TIMELINE`` names (tests/conftest.py writes it):

    python -m tests.helpers.timeline FILE [--top N]

Per worker: its tests, the seconds they took and when its last one ended (an idle worker at the end is a
tail to cut); per folder: wall seconds, the CPU of the tests' own process and of the processes they
started (an ``mpirun``'s ranks; not a Slurm job's, which ``slurmd`` starts); the N files that took the
most CPU. ``.ci/run`` prints it after each pytest run.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path


def read(path: Path) -> list[tuple[str, float, float, float, float, str]]:
    """``(worker, start, end, cpu, children_cpu, nodeid)`` per line."""
    rows = []
    for line in path.read_text().splitlines():
        worker, start, end, cpu, children, nodeid = line.split(" ", 5)
        rows.append((worker, float(start), float(end), float(cpu), float(children), nodeid))
    return rows


def report(rows: Sequence[tuple[str, float, float, float, float, str]], top: int = 15) -> list[str]:
    if not rows:
        return ["timeline: no tests recorded"]
    began = min(row[1] for row in rows)
    lines = [f"timeline: {len(rows)} tests over {max(row[2] for row in rows) - began:.0f} s"]
    workers: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for worker, start, end, *_ in rows:
        entry = workers[worker]
        entry[0] += 1
        entry[1] += end - start
        entry[2] = max(entry[2], end - began)
    for worker, (count, busy, last) in sorted(workers.items()):
        lines.append(f"  {worker}: {count:.0f} tests, {busy:.0f} s in tests, its last ended at {last:.0f} s")
    folders: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    files: dict[str, float] = defaultdict(float)
    for _, start, end, cpu, children, nodeid in rows:
        path = nodeid.split("::")[0]
        folder = "/".join(path.split("/")[:2]) if path.count("/") > 1 else path
        entry = folders[folder]
        entry[0] += end - start
        entry[1] += cpu
        entry[2] += children
        files[path] += cpu + children
    lines.append("  by folder: wall s, CPU s of the tests' process, CPU s of the processes they started")
    for folder, (wall, cpu, children) in sorted(folders.items(), key=lambda item: -(item[1][1] + item[1][2])):
        lines.append(f"    {folder}: {wall:.0f}, {cpu:.0f}, {children:.0f}")
    lines.append(f"  the {top} files that took the most CPU (s):")
    for path, cpu in sorted(files.items(), key=lambda item: -item[1])[:top]:
        lines.append(f"    {cpu:.0f} {path}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.helpers.timeline", description=__doc__.split("\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    print("\n".join(report(read(args.file), args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
