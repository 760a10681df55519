"""What the mpi4py allreduce backend costs: its fused host-side average against one plain MPI_Allreduce.

``pardnn-launch --allreduce mpi4py`` averages a step's gradients in one host op
(:func:`launcher.training.dataparallel.average_arrays`): it packs the gradients into one buffer, makes one
``MPI_Allreduce`` (sum) in place, divides by the ranks and unpacks. This benchmark times that op on
``GRADIENTS`` float32 arrays that together hold 4 KiB to 1 GiB, under ``mpirun -np N`` on this
machine (N = 2 and 4 by default; each rank stands for a node), against one ``MPI_Allreduce`` of a
buffer of the same bytes (what the packing and unpacking add). Each cell is the median of
``REPEATS`` timed calls after one warm-up, ranks lined up by a barrier before each call, the time
of rank 0. ``GB/s`` is the algorithm bandwidth (bytes / time), as NCCL's tests report it.

On a GPU the backend also copies every gradient to the host and back: ``--copies`` (needs PyTorch
with CUDA: the `gpu-bench` extra) times those copies for the same sizes, pageable and pinned.

Usage: ``python -m benchmarks.allreduce_host [--ranks 2 4] [--copies]`` (about a minute here);
writes the section ``allreduce-host`` of ``benchmarks/RESULTS.md`` (``--results FILE`` elsewhere).
``--worker`` is the part mpirun runs on every rank.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SIZES = tuple(4 << (10 + 2 * i) for i in range(10))  # 4 KiB, 16 KiB, ..., 1 GiB (x4)
GRADIENTS = 8
REPEATS = 7
MPIRUN_FLAGS = ("--allow-run-as-root", "--oversubscribe", "--bind-to", "none")


def _size(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):g} {unit}"
    return f"{nbytes} B"


def worker(sizes: Sequence[int]) -> None:
    """On every rank: time the fused average and the plain allreduce; rank 0 prints one JSON line per size."""
    from mpi4py import MPI

    from launcher.training.dataparallel import average_arrays

    comm = MPI.COMM_WORLD.Dup()

    def timed(call, *args) -> float:
        call(*args)
        times = []
        for _ in range(REPEATS):
            comm.Barrier()
            began = time.perf_counter()
            call(*args)
            times.append(time.perf_counter() - began)
        return statistics.median(times)

    for nbytes in sizes:
        per = max(1, nbytes // 4 // GRADIENTS)
        arrays = [np.full(per, comm.Get_rank() + 1, np.float32) for _ in range(GRADIENTS)]
        flat = np.ones(per * GRADIENTS, np.float32)
        workspace: dict = {}  # kept across steps, as the backend's hook keeps it
        fused = timed(average_arrays, comm, arrays, workspace)
        plain = timed(comm.Allreduce, MPI.IN_PLACE, flat, MPI.SUM)
        got = average_arrays(comm, arrays)[0][0]
        assert got == (comm.Get_size() + 1) / 2, got
        if comm.Get_rank() == 0:
            print(json.dumps({"ranks": comm.Get_size(), "bytes": per * GRADIENTS * 4, "fused_s": fused,
                              "plain_s": plain}), flush=True)


def run_ranks(ranks: int, sizes: Sequence[int], module: str = "benchmarks.allreduce_host",
              timeout: float = 1800) -> list[dict]:
    """The JSON rows of ``python -m module --worker --sizes ...`` under ``mpirun -np ranks``."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise SystemExit("mpirun not on PATH (scripts/setup.sh installs openmpi-bin)")
    env = dict(os.environ)
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    argv = [mpirun, *MPIRUN_FLAGS, "-np", str(ranks), sys.executable, "-m", module, "--worker",
            "--sizes", *map(str, sizes)]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def host_copies(sizes: Sequence[int]) -> list[dict]:
    """Device-to-host then host-to-device copies of one float32 buffer per size (PyTorch, CUDA)."""
    import torch

    device = torch.device("cuda")
    rows = []
    for nbytes in sizes:
        gradient = torch.ones(nbytes // 4, device=device)
        for pinned in (False, True):
            host = torch.empty(nbytes // 4, pin_memory=pinned)
            times = []
            for _ in range(REPEATS + 1):
                torch.cuda.synchronize()
                began = time.perf_counter()
                host.copy_(gradient)
                torch.cuda.synchronize()
                middle = time.perf_counter()
                gradient.copy_(host)
                torch.cuda.synchronize()
                times.append((middle - began, time.perf_counter() - middle))
            d2h = statistics.median(t[0] for t in times[1:])
            h2d = statistics.median(t[1] for t in times[1:])
            rows.append({"bytes": nbytes, "pinned": pinned, "d2h_s": d2h, "h2d_s": h2d})
    return rows


def allreduce_table(rows: list[dict]) -> str:
    lines = ["| ranks | gradients' bytes | fused host average | GB/s | one MPI_Allreduce | GB/s | fused / plain |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        fused, plain, nbytes = row["fused_s"], row["plain_s"], row["bytes"]
        lines.append(f"| {row['ranks']} | {_size(nbytes)} | {fused * 1e3:.3f} ms | {nbytes / fused / 1e9:.2f} | "
                     f"{plain * 1e3:.3f} ms | {nbytes / plain / 1e9:.2f} | {fused / plain:.2f} |")
    return "\n".join(lines)


def copies_table(rows: list[dict]) -> str:
    lines = ["| bytes | host memory | device → host | host → device | round trip | GB/s (round trip) |",
             "|---:|---|---:|---:|---:|---:|"]
    for row in rows:
        both = row["d2h_s"] + row["h2d_s"]
        lines.append(f"| {_size(row['bytes'])} | {'pinned' if row['pinned'] else 'pageable'} | "
                     f"{row['d2h_s'] * 1e3:.2f} ms | {row['h2d_s'] * 1e3:.2f} ms | {both * 1e3:.2f} ms | "
                     f"{2 * row['bytes'] / both / 1e9:.1f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.allreduce_host", description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4], help="mpirun -np for each run (default 2 4)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="total gradient bytes per step")
    parser.add_argument("--copies", action="store_true", help="also time the GPU<->host copies (PyTorch with CUDA)")
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    parser.add_argument("--section", default="allreduce-host",
                        help="the section's name (default allreduce-host; another machine's figures: another name)")
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing it")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.sizes)
        return 0
    from benchmarks.report import machine_line, write_section

    began = time.perf_counter()
    rows = [row for ranks in args.ranks for row in run_ranks(ranks, args.sizes)]
    copies = host_copies(args.sizes) if args.copies else []
    command = "python -m benchmarks.allreduce_host" + (" --copies" if args.copies else "") + (
        "" if args.ranks == [2, 4] else " --ranks " + " ".join(map(str, args.ranks))) + (
        "" if args.section == "allreduce-host" else f" --section {args.section}")
    gpu = ""
    if copies:
        import torch

        gpu = f", GPU {torch.cuda.get_device_name(0)}"
    body = [
        f"## The mpi4py allreduce backend on the host ({args.section})", "",
        f"Command: `{command}` ({time.perf_counter() - began:.0f} s, finished "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}). Machine: {machine_line()}{gpu}.", "",
        f"{GRADIENTS} float32 gradients per step, together the bytes of each row, averaged by the backend's one host "
        "op (pack, one MPI_Allreduce, divide, unpack) and, for comparison, one MPI_Allreduce of a buffer of the same "
        f"bytes; medians of {REPEATS} calls on rank 0 after a warm-up, the ranks on this one machine (shared "
        "memory). *fused / plain* is what the packing adds.", "",
        allreduce_table(rows)]
    if copies:
        body += ["", "Every gradient also goes to the host and back on a GPU; the copies of one buffer of each size "
                 "(PyTorch, CUDA):", "", copies_table(copies)]
    text = "\n".join(body) + "\n"
    if args.no_write:
        print(text)
    else:
        write_section(args.results, args.section, text, command)
        print(f"wrote section {args.section} of {args.results}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
