"""The benchmark suite (``python -m benchmarks``, ``pardnn bench``): the quick suite end to end, the
slope fit on hand-made timings, the ParDNN-versus-baseline accounting, clear errors for bad graph
paths, and the ``bench`` sub-command that :func:`benchmarks.cli.register` adds."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.analysis import comparisons, fit_power_law, slopes
from benchmarks.cli import EXIT_BAD_INPUT, EXIT_OK, build_parser, command_line, main, register
from benchmarks.report import CSV_COLUMNS, render_markdown
from benchmarks.suite import (
    OK,
    PAPER,
    QUICK,
    SKIPPED_SIZE,
    TIMEOUT,
    BenchResults,
    Run,
    SuiteConfig,
    bench_graph,
    graph_paths,
)
from pardnn.costs.synthetic import dnn_graph
from pardnn.errors import PardnnError
from pardnn.io import write_graph

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory, cold_first_run) -> Path:
    """The quick suite, run once through the command line into a temporary directory. Its first-run
    row is the run's one cold compile (``cold_first_run``, tests/conftest.py), reported, not made again."""
    row, messages, _ = cold_first_run

    def first_run(repeats, seed, progress, work=None):
        assert (repeats, seed, work) == (1, 0, None)  # what the quick suite asks for
        for line in messages:
            progress(line)
        return row

    out = tmp_path_factory.mktemp("bench")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("benchmarks.speed.first_run", first_run)
        assert main(["--quick", "--out", str(out)]) == EXIT_OK
    return out


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as stream:
        return list(csv.DictReader(stream))


@pytest.mark.slow
def test_quick_suite_writes_results_csv_and_plots(quick):
    assert sorted(p.name for p in quick.iterdir()) == ["RESULTS.md", "ratio-synthetic.png", "results.csv",
                                                       "time-synthetic.png"]
    for png in ("ratio-synthetic.png", "time-synthetic.png"):
        assert (quick / png).read_bytes().startswith(PNG_MAGIC)
    text = (quick / "RESULTS.md").read_text()
    lines = text.splitlines()
    assert lines[0] == "# Benchmark results"
    assert lines[2].startswith(f"Command: `python -m benchmarks --quick --out {quick}`")
    assert lines[4].startswith("Machine: ") and all(word in lines[4] for word in ("cores", "Python", "NumPy", "numba"))
    for heading in ("## Summary", "## Speed of the command line", "## Suite: synthetic", "### Without a memory limit",
                    "### Under memory limits", "### Placer time against graph size"):
        assert heading in lines
    assert "| graph | ops | K | ParDNN | ParDNN (paper) | CP | LC | topological | round robin |" in lines
    # The first run (an empty numba cache) is a row of the speed table and a line of the summary.
    first_run = [line for line in lines if "(first run: empty numba cache, " in line]
    assert len(first_run) == 2 and first_run[0].startswith("- `pardnn place GRAPH -k 4 -o placement.txt`")
    assert first_run[1].startswith("| `pardnn place GRAPH -k 4 -o placement.txt` (first run: ")
    assert "| < 10 s |" in first_run[1]
    assert "Log–log slope of placer time against |V|" in text and "the paper reports 8 % on average" in text


@pytest.mark.slow
def test_quick_suite_csv_has_every_run(quick):
    rows = read_csv(quick / "results.csv")
    assert tuple(rows[0]) == CSV_COLUMNS
    placers = 2 + len(QUICK.baselines)  # ParDNN, the paper's algorithm alone and the baselines
    per_k = placers + len(QUICK.factors) * (placers + 2)  # + ParDNN I and II under each limit
    assert len(rows) == len(QUICK.sizes) * len(QUICK.devices) * per_k
    assert {r["status"] for r in rows} <= {OK, TIMEOUT, "infeasible"}
    free = [r for r in rows if r["memory_factor"] == ""]
    assert all(float(r["makespan_over_lower_bound"]) >= 1 - 1e-9 for r in free)
    assert {r["placer"] for r in free} == {"pardnn", PAPER, *QUICK.baselines}
    assert all(float(r["budget_seconds"]) == 0.0 for r in free if r["placer"] == PAPER)
    limited = [r for r in rows if r["memory_factor"] != ""]
    assert {r["heuristic"] for r in limited} == {"", "overflow", "balance"}
    for r in limited:
        if r["heuristic"] == "" and r["status"] in (OK, TIMEOUT):  # the placement made without a limit
            assert r["memory_fits"] == str(int(r["max_peak_bytes"]) <= int(r["limit_bytes"])).lower()
        if r["heuristic"] == "overflow" and r["status"] == OK:
            assert r["memory_fits"] == "true"  # heuristic I meets the limits or raises


def test_results_md_is_the_default_next_to_the_csv_only_in_quick_mode(tmp_path):
    args = build_parser().parse_args(["--quick", "--out", str(tmp_path)])
    from benchmarks.report import output_paths

    assert output_paths(args) == (tmp_path, tmp_path / "RESULTS.md")
    full = build_parser().parse_args([])
    assert output_paths(full) == (Path("benchmarks/out"), Path("benchmarks/RESULTS.md"))


def test_the_full_suite_picks_up_the_model_graphs_when_they_exist(tmp_path, monkeypatch):
    from benchmarks.cli import config_from_args
    from benchmarks.suite import MODEL_GRAPHS

    monkeypatch.chdir(tmp_path)
    parse = build_parser().parse_args
    assert config_from_args(parse([])).graph_files == ()
    (tmp_path / MODEL_GRAPHS).mkdir(parents=True)
    (tmp_path / MODEL_GRAPHS / "trn.json.gz").write_bytes(b"")
    assert config_from_args(parse([])).graph_files == (MODEL_GRAPHS / "trn.json.gz",)
    assert config_from_args(parse(["--quick"])).graph_files == ()
    (tmp_path / "mine.json").write_text("")
    assert config_from_args(parse(["mine.json"])).graph_files == (Path("mine.json"),)


def test_graph_files_run_as_their_own_suite(tmp_path, capsys):
    graphs = tmp_path / "zoo"
    graphs.mkdir()
    write_graph(dnn_graph(300, seed=5, name="tiny-model"), graphs / "tiny-model.json.gz")
    out = tmp_path / "out"
    argv = ["--quick", "--sizes", "--no-speed", "--devices", "2", "--factors", "1.2", "--graphs",
            str(graphs), "--out", str(out)]
    assert main(argv) == EXIT_OK
    rows = read_csv(out / "results.csv")
    assert {r["suite"] for r in rows} == {"graph files"} and {r["graph"] for r in rows} == {"tiny-model"}
    text = (out / "RESULTS.md").read_text()
    assert "## Suite: graph files" in text and "| tiny-model |" in text
    assert (out / "ratio-graph-files.png").read_bytes().startswith(PNG_MAGIC)
    assert not (out / "time-graph-files.png").exists()  # one size: no slope to fit


# ------------------------------------------------------------------------------ slope fit
@pytest.mark.parametrize("exponent", [1.0, 1.5, 2.0])
def test_fit_power_law_recovers_a_known_exponent(exponent):
    sizes = [10_000, 50_000, 200_000, 1_000_000]
    seconds = [3e-7 * n**exponent for n in sizes]
    slope, coefficient = fit_power_law(sizes, seconds)
    assert slope == pytest.approx(exponent, abs=1e-9)
    assert coefficient == pytest.approx(3e-7, rel=1e-6)


def test_fit_power_law_by_hand():
    """Times 1, 4, 16 s at sizes 1, 2, 4 thousand: doubling the size quadruples the time, slope 2;
    times 1, 2 and 4 s at the same sizes: slope 1."""
    assert fit_power_law([1000, 2000, 4000], [1.0, 4.0, 16.0])[0] == pytest.approx(2.0)
    assert fit_power_law([1000, 2000, 4000], [1.0, 2.0, 4.0])[0] == pytest.approx(1.0)


def test_fit_power_law_least_squares_through_noise():
    """log2 times 0, 1.1, 1.9, 3 at log2 sizes 0, 1, 2, 3: the least-squares slope in log2–log2 (the
    same as in ln–ln) is Σ(x - 1.5)(y - 1.5) / Σ(x - 1.5)² = (1.5·1.5 + 0.5·0.4 + 0.5·0.4 + 1.5·1.5) / 5
    = 4.9 / 5 = 0.98."""
    assert fit_power_law([1, 2, 4, 8], [1.0, 2**1.1, 2**1.9, 8.0])[0] == pytest.approx(0.98)


def test_fit_power_law_needs_two_sizes_and_positive_times():
    with pytest.raises(ValueError, match="two distinct sizes"):
        fit_power_law([1000, 1000], [1.0, 2.0])
    with pytest.raises(ValueError, match="> 0"):
        fit_power_law([1000, 2000], [0.0, 1.0])


def run(placer: str, ops: int, seconds: float, *, k: int = 2, status: str = OK, makespan: float = 100.0,
        heuristic: str = "", factor: float | None = None) -> Run:
    return Run("synthetic", f"dnn-{ops}", ops, 2 * ops, k, placer, heuristic, factor, None, status,
               makespan_us=makespan, lower_bound_us=50.0, memory_fits=True, peak_bytes=1, seconds=seconds)


def test_slopes_leave_out_timeouts_and_other_k():
    """LC: 1 s at 1k, 4 s at 2k (slope 2); the 4k run hit its budget at 5 s and must not flatten it.
    ParDNN's K = 4 runs are another line."""
    runs = [run("linear_clustering", 1000, 1.0), run("linear_clustering", 2000, 4.0),
            run("linear_clustering", 4000, 5.0, status=TIMEOUT),
            run("pardnn", 1000, 0.1), run("pardnn", 2000, 0.2), run("pardnn", 4000, 0.4),
            run("pardnn", 1000, 9.0, k=4), run("pardnn", 2000, 1.0, k=4),
            run("pardnn", 1000, 0.2, heuristic="overflow", factor=1.0),
            run("pardnn", 2000, 0.8, heuristic="overflow", factor=1.0)]
    found = slopes(runs, ["LC", "ParDNN", "ParDNN I", "CP"], 2)
    assert found["LC"] == pytest.approx(2.0) and found["ParDNN"] == pytest.approx(1.0)
    assert found["ParDNN I"] == pytest.approx(2.0) and found["CP"] is None


# ---------------------------------------------------------------------- ParDNN vs baselines
def results_of(runs: list[Run]) -> BenchResults:
    config = dataclasses.replace(QUICK, sizes=(1000, 2000), devices=(2,), factors=(), speed_ops=0)
    return BenchResults(config, runs, [], "", 1.0, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0))


def test_a_loss_to_a_baseline_is_listed_with_its_margin(tmp_path):
    """ParDNN 102 µs against CP's 100 µs on the 2k graph: slower by 2 %, listed; the 1k case is a win."""
    runs = [run("pardnn", 1000, 0.1, makespan=90.0), run("critical_path", 1000, 0.1, makespan=100.0),
            run("pardnn", 2000, 0.2, makespan=102.0), run("critical_path", 2000, 0.2, makespan=100.0)]
    found = {c.ops: c.relative for c in comparisons(runs)}
    assert found == {1000: pytest.approx(0.9), 2000: pytest.approx(1.02)}
    text = render_markdown(results_of(runs), "pardnn bench", tmp_path / "out", tmp_path / "RESULTS.md")
    assert "**ParDNN is slower than a baseline** in 1 of 2 comparisons" in text
    assert "| dnn-2000 | 2,000 | 2 | CP | 1.0200 | 2.0 % |" in text
    assert "| CP | 2 | 1 | 0 | 1 |" in text


def test_strict_wins_are_counted_and_never_slower_is_said_to_hold_by_construction(tmp_path):
    """ParDNN 90 us against round robin 100 (a strict win), topological 90 (a tie) and the paper's own
    Steps 1 and 2 at 120: one strict win of two, geometric mean sqrt(0.9 × 1) = 0.949; 0.75 against
    the paper row, which is not a baseline."""
    runs = [run("pardnn", 1000, 0.1, makespan=90.0), run(PAPER, 1000, 0.1, makespan=120.0),
            run("round_robin", 1000, 0.1, makespan=100.0), run("topological", 1000, 0.1, makespan=90.0)]
    text = render_markdown(results_of(runs), "pardnn bench", tmp_path / "out", tmp_path / "RESULTS.md")
    assert "| round robin | 1 | 1 | 0 | 0 | 0.900 |" in text and "| topological | 1 | 0 | 1 | 0 | 1.000 |" in text
    assert "| ParDNN (paper) | 1 | 1 | 0 | 0 | 0.750 |" in text
    assert "never slower than the cheap baselines *by construction*, not as a finding" in text
    assert ("ParDNN is strictly faster in 1 of 2 comparisons with a baseline, and faster than every baseline "
            "at once in 0 of 1 cases (graph × K).") in text
    assert "Against the paper's algorithm alone: strictly faster in 1 of 1 cases, geometric mean 0.750" in text
    assert "≤ every baseline's in all" not in text


def test_the_slope_leaves_out_the_fixed_refinement_budget():
    """ParDNN took 0.2 s at 1k ops and 0.3 s at 2k, 0.1 s of each in its fixed-budget stages: 0.1 and
    0.2 s of work, slope 1 (with the budget: log2(1.5) = 0.58)."""
    runs = [dataclasses.replace(run("pardnn", 1000, 0.2), budget_seconds=0.1),
            dataclasses.replace(run("pardnn", 2000, 0.3), budget_seconds=0.1)]
    assert slopes(runs, ["ParDNN"], 2)["ParDNN"] == pytest.approx(1.0)


def test_lc_is_skipped_above_its_size_limit():
    config = SuiteConfig(sizes=(), devices=(2,), factors=(1.2,), baselines=("linear_clustering", "round_robin"),
                         lc_max_ops=100, speed_ops=0)
    runs = bench_graph("synthetic", dnn_graph(300, seed=1), config, progress=lambda message: None)
    lc = [r for r in runs if r.placer == "linear_clustering"]
    assert len(lc) == 2 and all(r.status == SKIPPED_SIZE and r.makespan_us is None for r in lc)
    assert all(r.status == OK for r in runs if r.placer == "round_robin")


# ------------------------------------------------------------------------------- errors, CLI
def test_a_missing_graph_path_exits_1_with_one_line(tmp_path, capsys):
    missing = tmp_path / "nope.json.gz"
    assert main(["--quick", str(missing)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nope.json.gz" in err and "no such graph file" in err


def test_an_invalid_graph_file_fails_before_any_benchmark_runs(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "pardnn-graph", "version": 1, "nodes": [{"name": "a"}], "edges": []}')
    assert main(["--quick", "--graphs", str(bad), "--out", str(tmp_path / "out")]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "bad.json" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_python_m_benchmarks_reports_bad_paths_the_same_way(tmp_path):
    argv = [sys.executable, "-m", "benchmarks", "--quick", "--graphs", str(tmp_path / "missing")]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == EXIT_BAD_INPUT
    assert done.stderr.startswith("benchmarks: error: ") and "missing: no such graph file or directory" in done.stderr
    assert done.stderr.count("\n") == 1


def test_graph_paths_expand_directories_and_reject_empty_ones(tmp_path):
    (tmp_path / "b.json.gz").write_bytes(b"")
    (tmp_path / "a.json").write_text("")
    (tmp_path / "notes.txt").write_text("")
    assert [p.name for p in graph_paths([tmp_path])] == ["a.json", "b.json.gz"]
    assert [p.name for p in graph_paths([tmp_path, tmp_path / "a.json"])] == ["a.json", "b.json.gz"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PardnnError, match="no graph files"):
        graph_paths([empty])


def pardnn_parser() -> argparse.ArgumentParser:
    """A ``pardnn``-like parser with the ``bench`` sub-command that :func:`register` adds."""
    parser = argparse.ArgumentParser(prog="pardnn")
    register(parser.add_subparsers(dest="command", required=True))
    return parser


@pytest.mark.parametrize("argv", [
    [],
    ["--quick", "--out", "o d", "--results", "r.md"],
    ["g1.json.gz", "--sizes", "--devices", "2", "16", "--factors", "1.2", "0.8", "--placers", "metis",
     "single", "--lc-budget", "2.5", "--lc-max-ops", "1000", "--seed", "3", "--no-speed", "--graphs", "zoo"],
])
def test_recorded_command_parses_back_to_the_same_options(argv):
    args = build_parser().parse_args(argv)
    recorded = command_line("python -m benchmarks", args)
    assert recorded.startswith("python -m benchmarks")
    assert build_parser().parse_args(shlex.split(recorded)[3:]) == args
    # The same through `pardnn bench`: the sub-command's options are the module's.
    sub_args = pardnn_parser().parse_args(["bench", *argv])
    recorded = command_line("pardnn bench", sub_args)
    assert recorded.startswith("pardnn bench")
    assert pardnn_parser().parse_args(shlex.split(recorded)[1:]) == sub_args
    assert {**vars(sub_args)} == {**vars(args), "command": "bench", "func": sub_args.func}


@pytest.mark.parametrize("option", [["--sizes", "10k"], ["--factors", "0"], ["--lc-budget", "-1"],
                                    ["--placers", "pardnn"], ["--devices", "0"]])
def test_bad_options_are_usage_errors(option, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(option)
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        pardnn_parser().parse_args(["bench", *option])
    assert exc.value.code == 2


def test_register_adds_a_working_bench_sub_command(tmp_path, capsys):
    """`register` on a fresh parser's sub-parsers: `bench --quick` parses to the module's options and a
    func that runs the suite, records `pardnn bench` as the command, and returns exit code 0."""
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["bench", "--quick"])
    assert callable(args.func)
    assert args.quick and not args.no_speed and args.out is None and args.results is None
    assert args.graph_files == [] and args.graphs == [] and args.sizes is None and args.devices is None
    assert {k: v for k, v in vars(args).items() if k != "func"} == vars(build_parser().parse_args(["--quick"]))
    out = tmp_path / "out"
    args = parser.parse_args(["bench", "--quick", "--sizes", "300", "--devices", "2", "--factors", "--no-speed",
                              "--placers", "round_robin", "--out", str(out)])
    assert args.func(args) == EXIT_OK
    assert "wrote " in capsys.readouterr().out
    assert (out / "RESULTS.md").read_text().startswith(
        "# Benchmark results\n\nCommand: `pardnn bench --quick --sizes 300 --devices 2 --factors --placers round_robin "
        f"--out {out} --no-speed`")
    assert {r["placer"] for r in read_csv(out / "results.csv")} == {"pardnn", PAPER, "round_robin"}
    # Bad input raises PardnnError, which `pardnn`'s main turns into one line and exit 1.
    args = parser.parse_args(["bench", "--quick", str(tmp_path / "nope.json.gz")])
    with pytest.raises(PardnnError, match="no such graph file"):
        args.func(args)
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["bench", "--help"])
    assert exc.value.code == 0
    help_text = capsys.readouterr().out
    assert "Run ParDNN and the baseline placers" in help_text and "exit codes" in help_text
    assert all(option in help_text for option in ("--quick", "--graphs", "--lc-budget", "--no-speed", "--results"))


def test_an_infeasible_timed_command_is_a_result_and_a_crash_is_an_error():
    from benchmarks.speed import _median_wall

    seconds, infeasible = _median_wall([sys.executable, "-c", "import sys; sys.exit(3)"], 1)
    assert infeasible and seconds > 0
    assert _median_wall([sys.executable, "-c", "pass"], 1)[1] is False
    with pytest.raises(PardnnError, match="exit 1"):
        _median_wall([sys.executable, "-c", "import sys; sys.exit('boom')"], 1)


def test_sections_of_other_benchmarks_survive_a_rewrite(tmp_path):
    from benchmarks.report import kept_sections, write_section

    results = tmp_path / "RESULTS.md"
    write_section(results, "max-batch", "## Largest batch\n\nfirst\n", "python -m benchmarks.maxbatch")
    write_section(results, "other", "## Other\n", "somebody")
    write_section(results, "max-batch", "## Largest batch\n\nsecond\n", "python -m benchmarks.maxbatch")
    text = results.read_text()
    assert "first" not in text and text.count("## Largest batch") == 1
    assert text.index("## Largest batch") < text.index("## Other")  # replaced where it stood
    # `pardnn bench` rewrites its own part and keeps both sections.
    argv = ["--quick", "--sizes", "--devices", "2", "--no-speed", "--out", str(tmp_path / "out"),
            "--results", str(results), "--graphs", str(write_tiny(tmp_path)), "--placers", "round_robin"]
    assert main(argv) == EXIT_OK
    rewritten = results.read_text()
    assert rewritten.startswith("# Benchmark results\n\nCommand: `python -m benchmarks")
    assert kept_sections(rewritten) == kept_sections(text)


def write_tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json.gz"
    write_graph(dnn_graph(300), path)
    return path


def test_the_guard_cost_is_the_median_paired_ratio_and_ignores_the_first_run_row():
    """The twins ran round by round, so the cost is the median of their per-round ratios; the first
    run's row may show the same command (its own graph, `note` set) and must not be taken as the base."""
    from types import SimpleNamespace

    from benchmarks.report import _guard_cost_lines
    from benchmarks.speed import SpeedRow

    rows = [SpeedRow("pardnn place GRAPH -k 4 -o placement.txt", 1.30, None),
            SpeedRow("pardnn place GRAPH -k 4 -a pardnn-paper -o placement.txt", 1.00, None,
                     twin_of="pardnn place GRAPH -k 4 -o placement.txt", paired_ratio=1.20),
            SpeedRow("pardnn place GRAPH -k 4 -o placement.txt", 11.0, 10.0, note="first run")]
    [line] = [line for line in _guard_cost_lines(SimpleNamespace(speed=rows)) if line]
    assert line.startswith("- The guard, the refinement and the run order add +20% to "
                           "`pardnn place GRAPH -k 4 -o placement.txt`")
    assert "1.30 s against 1.00 s, +30%" in line and line.endswith("target ≤ +25%: met).")
