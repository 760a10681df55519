"""The large-graph row of the speed benchmark (benchmarks/speed_large.py), on a small graph.

Structure only: both forms ran, each run has a wall time and a peak RSS, their placements were the
same, and the section lands in the results file. No wall time or memory is asserted on: they follow
the machine's load (RESULTS.md reports them).
"""

from __future__ import annotations

from benchmarks.speed_large import FORMS, main, measure, render


def test_both_forms_place_the_same_and_the_section_is_written(tmp_path):
    messages: list[str] = []
    runs, sizes, about = measure(1500, 4, 1, seed=3, progress=messages.append, work=tmp_path)
    assert [run.form for run in runs] == list(FORMS) and len(messages) == len(FORMS)
    assert all(run.seconds > 0 and run.peak_rss_bytes > 10**6 for run in runs)
    assert sizes[".pardnn"] < sizes[".json"] and "K = 4" in about
    assert (tmp_path / "placement.json.txt").read_bytes() == (tmp_path / "placement.pardnn.txt").read_bytes()
    text = render(runs, sizes, about, 4, 1.0, "python -m benchmarks.speed_large --ops 1500")
    assert text.count("| `pardnn place GRAPH.") == 2 and "× the wall time" in text


def test_main_writes_its_section(tmp_path):
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n## Kept\n")
    assert main(["--ops", "800", "-k", "2", "--repeats", "1", "--results", str(results)]) == 0
    text = results.read_text()
    assert "## Kept" in text and "<!-- section: speed-large" in text
    assert "Command: `python -m benchmarks.speed_large --ops 800 -k 2 --repeats 1`" in text
