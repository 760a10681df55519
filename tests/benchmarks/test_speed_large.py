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


def test_the_met_column_says_which_target_is_met():
    from benchmarks.speed_large import LargeRun

    # JSON: 5 s and 0.9 GB (memory only); binary: 3 s and 1.2 GB (time only).
    runs = [LargeRun(".json", 5.0, 900_000_000, 0.5), LargeRun(".pardnn", 3.0, 1_200_000_000, 0.5)]
    text = render(runs, {".json": 10, ".pardnn": 5}, "g", 16, 1.0, "cmd")
    rows = [line for line in text.splitlines() if line.startswith("| `pardnn place")]
    assert rows[0].endswith("| memory only |") and rows[1].endswith("| time only |")
    both = render([LargeRun(".json", 2.0, 10**8, 0.5), LargeRun(".pardnn", 9.0, 2 * 10**9, 0.5)],
                  {".json": 10, ".pardnn": 5}, "g", 16, 1.0, "cmd")
    assert "| yes |" in both and both.rstrip().splitlines()[-3].endswith("| no |")
