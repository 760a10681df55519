"""benchmarks/refine_sweep.py: the compiled sweep and the Python one give the same placements."""

from __future__ import annotations

from benchmarks.refine_sweep import cases, render, run


def test_the_compiled_and_the_python_sweep_place_alike_and_render_says_so():
    compiled_s, compiled = run(6, True)
    python_s, python = run(6, False)
    assert len(compiled) == 6 and compiled == python
    placed = sum(isinstance(answer, tuple) for answer in compiled)
    assert placed >= 4  # placements compared, not only errors
    assert any(machine.bounded for _, machine, _ in cases(6))  # memory limits among the cases
    text = render(6, python_s, compiled_s, 6, placed, "python -m benchmarks.refine_sweep --graphs 6")
    assert f"identical answers: 6 of 6 ({placed} placed" in text and "| compiled |" in text
