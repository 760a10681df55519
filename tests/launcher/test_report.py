"""pardnn-report: results.csv lines and per-rank figures files in, tables (by hand) and PNG plots out."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.errors import LaunchError
from launcher.rank.ending import write_figures
from launcher.report import main, plots, read_results, recover_rows, tables
from launcher.reporting.summary import RESULTS_COLUMNS

HEADER = ",".join(RESULTS_COLUMNS)


def _row(job: str, nodes: int, devices: int, batch: int, rate: float, status: str = "complete",
         window_complete: str = "") -> str:
    values = {"job": job, "status": status, "nodes": nodes, "devices_per_node": devices, "batch_size": batch,
              "samples_per_s": rate, "device_kind": "gpu", "window_complete": window_complete}
    return ",".join(str(values.get(column, "")) for column in RESULTS_COLUMNS)


LINES = [HEADER,
         _row("trn", 1, 1, 1, 10.0), _row("trn", 1, 2, 8, 30.0), _row("trn", 1, 2, 8, 50.0),
         _row("trn", 1, 2, 8, 40.0), _row("trn", 2, 2, 8, 70.0), _row("trn", 1, 4, 8, 999.0, status="failed")]


def test_read_results_keeps_complete_runs():
    results = read_results(LINES)
    assert len(results) == 5
    assert (results[0].job, results[0].nodes, results[0].devices, results[0].batch) == ("trn", 1, 1, 1)


def test_tables_take_the_median_of_repeats_and_show_node_scaling():
    text = tables(read_results(LINES))
    assert "| 2 |  | 40.0 |" in text  # devices 2, batch 1 empty, batch 8: median of 30, 50, 40
    assert "| 1 | 10.0 |  |" in text
    assert "| 2 | 8 | 40.0 (1.00×) | 70.0 (1.75×) |" in text
    assert "999" not in text


def test_read_results_errors_name_the_file_and_line():
    with pytest.raises(LaunchError, match="no column"):
        read_results(["a,b", "1,2"], "x.csv")
    with pytest.raises(LaunchError, match=r"x\.csv, line 2"):
        read_results([HEADER, _row("trn", 1, 1, 1, 10.0).replace(",10.0,", ",fast,")], "x.csv")


def test_main_writes_report_and_plots(tmp_path, capsys):
    (tmp_path / "results.csv").write_text("\n".join(LINES) + "\n")
    assert main([str(tmp_path)]) == 0
    out = tmp_path / "report"
    assert "## trn" in (out / "report.md").read_text()
    for name in ("trn-devices.png", "trn-batch.png", "trn-nodes.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote" in capsys.readouterr().out


def test_main_without_results_is_one_line(tmp_path, capsys):
    assert main([str(tmp_path)]) == 1
    assert capsys.readouterr().err.startswith("pardnn-report: error: ")


def test_runs_stopped_after_a_complete_window_count():
    lines = [HEADER, _row("trn", 1, 1, 1, 10.0, status="time_limit", window_complete="true"),
             _row("trn", 1, 1, 1, 99.0, status="stalled", window_complete="false")]
    assert [(r.samples_per_s) for r in read_results(lines)] == [10.0]


def _figures(folder, rank, nodes, rate, status, complete=True):
    run = {"job": "trn", "model": "transformer", "nodes": nodes, "devices_per_node": 2, "device_kind": "gpu",
           "batch_size": 8, "iterations": 200, "window": [100, 150], "costs": "profile", "memory": None,
           "run_dir": str(folder)}
    figures = {"rank": rank, "throughput": {"samples_per_s": rate, "tokens_per_s": None, "complete": complete}}
    folder.mkdir(exist_ok=True)
    write_figures(folder, rank, status, run, figures)


def test_runs_without_a_row_are_merged_from_their_per_rank_files(tmp_path, capsys):
    listed = tmp_path / "listed"  # has a row: not merged again
    _figures(listed, 0, 2, 1000.0, "complete")
    _figures(listed, 1, 2, 1000.0, "complete")
    row = _row("trn", 2, 2, 8, 70.0).split(",")
    row[RESULTS_COLUMNS.index("run_dir")] = str(listed)
    (tmp_path / "results.csv").write_text("\n".join([HEADER, ",".join(row)]) + "\n")
    killed = tmp_path / "killed"  # rank 0 killed before its row; both nodes measured the window
    _figures(killed, 0, 2, 40.0, "running")
    _figures(killed, 1, 2, 50.0, "time_limit")
    partial = tmp_path / "partial"  # rank 1 never wrote figures: no throughput for the run
    _figures(partial, 0, 2, 40.0, "stalled")
    rows = recover_rows(tmp_path, {"listed"})
    assert [(r["run_dir"], r["status"], r["samples_per_s"], r["window_complete"]) for r in rows] == [
        (str(killed), "time_limit", 90.0, "true"), (str(partial), "stalled", None, "false")]
    assert main([str(tmp_path), "--no-plots"]) == 0
    out, err = capsys.readouterr()
    assert "2 run(s) without a results.csv row" in err
    assert "| 2 | 80.0 |" in out  # devices 2, batch 8: the median of 70 (results.csv) and 90 (merged)


def test_plots_of_plan_variants_have_no_spaces_in_their_names_and_whole_number_axes(tmp_path, monkeypatch):
    """A plan's variant is ``pardnn k=1``: its files are ``trn-pardnn-k1-*.png``; a speed-up measured at
    one K is drawn at that K on whole-number ticks, not on a fractional span around it."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from launcher.reporting.comparisons import comparison_plots

    seen: dict[str, tuple[tuple[float, float], list[float]]] = {}
    savefig = Figure.savefig

    def recording(figure, path, *args, **kwargs):
        [axes] = figure.axes
        seen[Path(path).name] = (tuple(axes.get_xlim()), [float(t) for t in axes.get_xticks()])
        savefig(figure, path, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", recording)

    def row(nodes: int, devices: int, rate: float, k: int | str = "") -> str:
        cells = {"job": "trn", "status": "complete", "nodes": nodes, "devices_per_node": devices, "batch_size": 8,
                 "samples_per_s": rate, "device_kind": "gpu", "placer": "pardnn", "replica_devices": k}
        return ",".join(str(cells.get(column, "")) for column in RESULTS_COLUMNS)

    results = read_results([HEADER, row(1, 4, 100.0), row(1, 4, 80.0, k=1), row(1, 2, 60.0)])
    assert sorted({r.variant for r in results}) == ["pardnn", "pardnn k=1"]
    written = [p.name for p in plots(results, tmp_path) + comparison_plots(results, tmp_path)]
    assert "trn-pardnn-k1-devices.png" in written and "trn-speedup.png" in written
    assert not [name for name in written if " " in name] and all((tmp_path / name).exists() for name in written)
    assert seen[".trn-speedup.png.tmp.png"] == ((3.0, 5.0), [4.0])  # over k=1: measured at K = 4 only
    _, ticks = seen[".trn-devices.png.tmp.png"]  # K = 2 and 4
    assert ticks and all(t == int(t) for t in ticks)
