"""Speed of ``pardnn place`` on a 1,000,000-op graph, from JSON and from the binary form.

M micro-batches multiply a model's op count (a 200,000-op model at M = 5 is a 1,000,000-op graph),
so the placer must take large graphs in stride. This benchmark writes one synthetic graph
(``pardnn.costs.synthetic.dnn_graph``) as ``.json`` and as binary ``.pardnn``, then runs ``pardnn place
GRAPH -k 16 -o placement.txt -q`` (every stage on: the defaults) on each in a fresh interpreter,
the two forms interleaved round by round so that both see the same load, and records each run's
wall time and peak resident memory (the child's own ``ru_maxrss``, from ``wait4``). The two
placement files must be byte-identical (the form changes the reading, not the answer). The
targets: at most 4 s and 1 GB (10^9 bytes) peak RSS. Wall times on a shared
machine follow its load, so the section gives the load average seen at each run's start and the
median over rounds of the binary run's time over its JSON twin's.

Usage: ``python -m benchmarks.speed_large [--ops N] [--devices K] [--repeats R]`` (a few minutes);
writes the section ``speed-large`` of ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.report import machine_line, write_section
from benchmarks.speed import CLI, LinePrinter
from pardnn.errors import PardnnError

__all__ = ["LargeRun", "main", "measure", "render"]

HERE = Path(__file__).resolve().parent
LARGE_OPS, LARGE_DEVICES = 1_000_000, 16
TARGET_S, TARGET_RSS_BYTES = 4.0, 10**9
FORMS = (".json", ".pardnn")  # JSON first: the binary run of a round is compared with it


@dataclass(frozen=True)
class LargeRun:
    """One timed ``pardnn place``: the graph file's form, its wall time, its peak RSS and the 1-minute
    load average when it started."""

    form: str
    seconds: float
    peak_rss_bytes: int
    load: float


def place_once(graph_path: Path, devices: int, placement: Path) -> tuple[float, int]:
    """Wall time and peak RSS (bytes) of one ``pardnn place`` in a fresh interpreter; raises
    :class:`PardnnError` unless it exits 0."""
    argv = [*CLI, "place", str(graph_path), "-k", str(devices), "-o", str(placement), "-q"]
    with tempfile.TemporaryFile() as errors:
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=errors)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - start
        child.returncode = code = os.waitstatus_to_exitcode(status)
        if code != 0:
            errors.seek(0)
            raise PardnnError(f"benchmark command failed (exit {code}): {shlex.join(argv)}: "
                              f"{errors.read().decode(errors='replace').strip()}")
    return seconds, usage.ru_maxrss * 1024  # kilobytes on Linux


def _run(argv: Sequence[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise PardnnError(f"benchmark command failed (exit {done.returncode}): {shlex.join(argv)}: "
                          f"{done.stderr.strip()}")
    return done.stdout


def measure(ops: int, devices: int, repeats: int, seed: int = 0, progress: LinePrinter = print,
            work: Path | None = None) -> tuple[list[LargeRun], dict[str, int], str]:
    """Every run (``repeats`` rounds of the forms in :data:`FORMS`), each form's file size and a line
    naming the graph. Raises :class:`PardnnError` when the forms' placements differ."""
    if work is None:
        with tempfile.TemporaryDirectory() as tmp:
            return measure(ops, devices, repeats, seed, progress, Path(tmp))
    # Written by child processes: a child's ru_maxrss starts from its parent's resident size at the
    # fork (Linux keeps the high-water mark across exec), so this process must never hold the graph.
    name = f"dnn-{ops}-s{seed}"
    paths = {form: work / f"{name}{form}" for form in FORMS}
    wrote = _run([*CLI, "generate", "--ops", str(ops), "--seed", str(seed), "-o", str(paths[FORMS[0]])])
    for form in FORMS[1:]:
        _run([*CLI, "convert", str(paths[FORMS[0]]), "-o", str(paths[form])])
    sizes = {form: path.stat().st_size for form, path in paths.items()}
    about = f"{name}: {wrote.split(': ', 1)[1].strip()}, K = {devices}"
    runs = []
    for _ in range(repeats):
        for form, path in paths.items():
            load = os.getloadavg()[0]
            seconds, peak = place_once(path, devices, work / f"placement{form}.txt")
            runs.append(LargeRun(form, seconds, peak, load))
            progress(f"speed-large: pardnn place GRAPH{form}: {seconds:.2f} s, {peak / 1e6:,.0f} MB (load {load:.2f})")
        placements = {(work / f"placement{form}.txt").read_bytes() for form in FORMS}
        if len(placements) != 1:
            raise PardnnError(f"the placements of {', '.join(FORMS)} differ: reading changed the answer")
    return runs, sizes, about


def render(runs: Sequence[LargeRun], sizes: dict[str, int], about: str, devices: int, seconds: float,
           command: str) -> str:
    first = _markdown(__doc__.split("\n\n")[1])
    lines = ["## Speed of pardnn place on a large graph (speed-large)", "",
             f"Command: `{command}` ({seconds:.0f} s). Machine: {machine_line()}.", "", first, "",
             f"{about}. {len(runs) // len(FORMS)} round(s); medians; the placements of both forms were "
             "byte-identical in every round.", "",
             "| command | file | wall time | peak RSS | load average at the starts | target | met |",
             "|---|---:|---:|---:|---:|---:|:---:|"]
    for form in FORMS:
        mine = [run for run in runs if run.form == form]
        wall = statistics.median(run.seconds for run in mine)
        peak = statistics.median(run.peak_rss_bytes for run in mine)
        loads = [run.load for run in mine]
        met = {(True, True): "yes", (False, True): "memory only", (True, False): "time only",
               (False, False): "no"}[wall <= TARGET_S, peak <= TARGET_RSS_BYTES]
        lines.append(f"| `pardnn place GRAPH{form} -k {devices} -o placement.txt` | {sizes[form] / 1e6:,.0f} MB | "
                     f"{wall:.2f} s | {peak / 1e6:,.0f} MB | {min(loads):.2f}–{max(loads):.2f} | "
                     f"≤ {TARGET_S:g} s, ≤ {TARGET_RSS_BYTES / 1e9:g} GB | {met} |")
    json_runs, binary_runs = ([run for run in runs if run.form == form] for form in FORMS)
    ratio = statistics.median(b.seconds / j.seconds for j, b in zip(json_runs, binary_runs, strict=True))
    memory = statistics.median(b.peak_rss_bytes / j.peak_rss_bytes for j, b in zip(json_runs, binary_runs,
                                                                                   strict=True))
    lines += ["", f"- From the binary form, `pardnn place` takes {ratio:.2f}× the wall time and {memory:.2f}× the "
              "peak memory of the same command on the JSON file (medians over the interleaved rounds of each "
              "round's ratio)."]
    return "\n".join(lines) + "\n"


def _markdown(text: str) -> str:
    # The module docstring's paragraph as Markdown: one line, double backquotes as code.
    return text.replace("``", "`").replace("\n", " ")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.speed_large", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=LARGE_OPS, help="ops of the synthetic graph (default: %(default)s)")
    parser.add_argument("--devices", "-k", type=int, default=LARGE_DEVICES, help="K (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of both forms (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="the graph's seed (default: %(default)s)")
    parser.add_argument("--results", default=str(HERE / "RESULTS.md"), help="the file to write the section into")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    runs, sizes, about = measure(args.ops, args.devices, args.repeats, args.seed)
    command = shlex.join(["python", "-m", "benchmarks.speed_large", *(argv if argv is not None else sys.argv[1:])])
    command = command.replace(f" --results {args.results}", "")
    body = render(runs, sizes, about, args.devices, time.perf_counter() - began, command)
    write_section(Path(args.results), "speed-large", body, "python -m benchmarks.speed_large")
    print(f"wrote {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
