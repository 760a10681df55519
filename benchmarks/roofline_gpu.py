"""The device presets' roofline against kernels timed on a real GPU, and the GPU detection there.

    python -m benchmarks.roofline_gpu [--preset NAME] [--no-write]   # needs PyTorch with CUDA

``--costs estimate`` costs every op with a preset's roofline (``max(flops / peak, bytes / bandwidth)
+ launch``, FP32 without tensor cores); this times the same kernels on the GPU this runs on, with
PyTorch (TF32 off, CUDA events, the median of ``--repeats`` after a warm-up): FP32 matmuls n × n × n,
elementwise adds of n floats, and a step of layers (matmul, bias add, ReLU) whose estimate is the
emulated step of that chain on one device. It also runs the launcher's GPU detection (nvidia-smi) and
says which preset it picks. Writes the section ``roofline-gpu`` of ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MATMULS = (512, 1024, 2048, 4096, 8192)
ADDS = (1 << 16, 1 << 20, 1 << 24, 1 << 27)
LAYERS, WIDTH, BATCH = 24, 4096, 2048


def _timed_ms(torch, run, repeats: int) -> float:
    """Median milliseconds of ``run()`` on the current CUDA stream (one warm-up)."""
    run()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def measure(preset_name: str | None, repeats: int) -> tuple[list[dict], dict]:
    """Rows (kernel, estimated µs, measured µs) and what the detection saw."""
    import torch

    from launcher.cluster.gpus import detect_gpus
    from pardnn import CostGraph
    from pardnn.costs.presets import machine_for, preset
    from pardnn.emulation.emulator import emulate

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gpus = detect_gpus()
    detected = {"gpus": None, "model": None, "memory_mib": None, "preset": None,
                "torch_device": torch.cuda.get_device_name(0)}
    if gpus is not None:
        detected |= {"gpus": gpus.count, "model": gpus.model, "memory_mib": gpus.memory_mib, "preset": gpus.preset}
    spec = preset(preset_name or detected["preset"] or "h100-80gb")
    detected["compared_with"] = spec.name
    rows: list[dict] = []
    for n in MATMULS:
        a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
        ms = _timed_ms(torch, lambda a=a, b=b: torch.mm(a, b), repeats)
        rows.append({"kernel": f"matmul {n}×{n}×{n}", "estimated_us": float(spec.kernel_us(2.0 * n**3, 12.0 * n * n)),
                     "measured_us": 1000 * ms, "flops": 2.0 * n**3})
    for n in ADDS:
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        ms = _timed_ms(torch, lambda x=x, y=y: torch.add(x, y), repeats)
        rows.append({"kernel": f"add of {n:,} floats", "estimated_us": float(spec.kernel_us(n, 12.0 * n)),
                     "measured_us": 1000 * ms, "flops": float(n)})
    # A step: LAYERS × (matmul, bias add, ReLU) on a [BATCH, WIDTH] activation, emulated as a chain on one device.
    weights = [torch.randn(WIDTH, WIDTH, device="cuda") / WIDTH**0.5 for _ in range(LAYERS)]
    biases = [torch.randn(WIDTH, device="cuda") for _ in range(LAYERS)]
    x0 = torch.randn(BATCH, WIDTH, device="cuda")

    def step():
        h = x0
        for w, bias in zip(weights, biases, strict=True):
            h = torch.relu(torch.mm(h, w) + bias)
        return h

    act = 4.0 * BATCH * WIDTH
    per_layer = [spec.kernel_us(2.0 * BATCH * WIDTH * WIDTH, act + 4.0 * WIDTH * WIDTH + act),
                 spec.kernel_us(BATCH * WIDTH, 3 * act), spec.kernel_us(BATCH * WIDTH, 2 * act)]
    comp = np.array([float(t) for _ in range(LAYERS) for t in per_layer])
    n_ops = comp.size
    chain = CostGraph([f"op{i}" for i in range(n_ops)], comp, np.full(n_ops, int(act)), np.arange(n_ops - 1),
                      np.arange(1, n_ops), name="chain")
    emulated = emulate(chain, machine_for(spec, 1), np.zeros(n_ops, dtype=np.int64)).makespan_us
    rows.append({"kernel": f"step: {LAYERS} × (matmul, bias add, ReLU), [{BATCH}, {WIDTH}]",
                 "estimated_us": float(emulated), "measured_us": 1000 * _timed_ms(torch, step, repeats),
                 "flops": 2.0 * BATCH * WIDTH * WIDTH * LAYERS})
    return rows, detected


def render(rows: list[dict], detected: dict, command: str) -> str:
    from benchmarks.report import machine_line

    lines = [f"Command: `{command}` on {machine_line()}, {platform.node() or 'a GPU machine'}.", "",
             f"GPU detection (nvidia-smi): {detected['gpus']} × {detected['model']}, {detected['memory_mib']} MiB; "
             f"preset picked: {detected['preset'] or 'none'}; PyTorch sees {detected['torch_device']}. "
             f"Estimates below use `{detected['compared_with']}`.", "",
             "| kernel | estimated µs | measured µs | measured / estimated | measured TFLOP/s |",
             "|---|---:|---:|---:|---:|"]
    for row in rows:
        ratio = row["measured_us"] / row["estimated_us"]
        lines.append(f"| {row['kernel']} | {row['estimated_us']:,.1f} | {row['measured_us']:,.1f} | {ratio:.2f} | "
                     f"{row['flops'] / row['measured_us'] / 1e6:,.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.roofline_gpu", description=__doc__.split("\n")[0])
    parser.add_argument("--preset", help="the preset to compare with (default: the one the detection picks)")
    parser.add_argument("--repeats", type=int, default=20, help="timed runs per kernel (default 20)")
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    parser.add_argument("--no-write", action="store_true", help="print the section instead of writing it")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        parser.error("needs PyTorch with CUDA (pip install -e '.[gpu-bench]')")
    if not torch.cuda.is_available():
        parser.error("PyTorch sees no CUDA GPU: run this on a GPU machine")
    rows, detected = measure(args.preset, args.repeats)
    command = "python -m benchmarks.roofline_gpu" + (f" --preset {args.preset}" if args.preset else "")
    text = render(rows, detected, command)
    print(text)
    if not args.no_write:
        from benchmarks.report import write_section

        write_section(args.results, "roofline-gpu", "## The presets' roofline against a real GPU\n\n" + text, command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
