"""benchmarks.roofline_gpu: its table from measured rows, and a clear refusal where no CUDA GPU is."""

from __future__ import annotations

import importlib.util

import pytest

from benchmarks.roofline_gpu import main, render


def test_the_table_gives_each_kernels_ratio_and_rate():
    rows = [{"kernel": "matmul 1024×1024×1024", "estimated_us": 40.0, "measured_us": 80.0, "flops": 2.0 * 1024**3}]
    detected = {"gpus": 1, "model": "NVIDIA H200", "memory_mib": 143771, "preset": "h200-141gb",
                "torch_device": "NVIDIA H200", "compared_with": "h200-141gb"}
    text = render(rows, detected, "python -m benchmarks.roofline_gpu")
    assert "1 × NVIDIA H200, 143771 MiB; preset picked: h200-141gb" in text
    # 2 × 1024³ flops in 80 µs: 26.84 TFLOP/s; measured twice the estimate.
    assert "| matmul 1024×1024×1024 | 40.0 | 80.0 | 2.00 | 26.84 |" in text


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="PyTorch is installed here")
def test_without_pytorch_it_says_what_it_needs(capsys):
    with pytest.raises(SystemExit) as ended:
        main(["--no-write"])
    assert ended.value.code == 2 and "needs PyTorch with CUDA" in capsys.readouterr().err
