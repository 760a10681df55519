"""Comparing variants: the --compare table, and pardnn-report's speed-ups, scaling and the emulator's fidelity,
every expected value worked out by hand."""

from __future__ import annotations

import pytest

from launcher.compare import table
from launcher.report import main, read_results
from launcher.reporting.comparisons import comparison_plots, comparison_tables, fidelity_warnings
from launcher.reporting.summary import RESULTS_COLUMNS, summarize
from tests.launcher.standin import Job

HEADER = ",".join(RESULTS_COLUMNS)


def _row(variant: str, nodes: int, devices: int, rate: float, *, batch: int = 8, emulated: float = 10.0,
         measured: float = 10.0, kind: str = "gpu", **extra: object) -> str:
    """A results.csv line; ``batch`` per node (a data-parallel replica trains batch / devices of it)."""
    data = variant.startswith("data")
    per_replica = batch // devices if data else batch
    values = {"job": "trn", "status": "complete", "nodes": nodes, "devices_per_node": devices,
              "batch_size": per_replica, "global_batch_size": batch * nodes, "samples_per_s": rate,
              "device_kind": kind, "placer": "" if data else variant, "parallelism": "data" if data else "model",
              "recompute": str(variant == "data+recompute").lower(), "emulated_step_ms": emulated,
              "step_ms_median": measured, **extra}
    return ",".join(str(values.get(column, "")) for column in RESULTS_COLUMNS)


def test_the_compare_table_has_a_line_per_variant_and_the_speed_up_over_the_first():
    rows = [{"status": "complete", "samples_per_s": 200.0, "emulated_step_ms": 10.0, "step_ms_median": 12.5,
             "step_ratio": 1.25, "peak_memory_bytes": 3 * 2**30, "fits": "true"},
            {"status": "complete", "samples_per_s": 150.0, "emulated_step_ms": 11.0, "step_ms_median": 16.5,
             "step_ratio": 1.5, "peak_memory_bytes": 2**30, "fits": "true"},
            {"status": "does_not_fit", "samples_per_s": None, "emulated_step_ms": 9.0, "step_ms_median": None,
             "step_ratio": None, "peak_memory_bytes": None, "fits": "false"}]
    lines = table(["pardnn", "metis", "single"], [*rows, None][:3]).splitlines()
    assert lines[0].startswith("| variant | status | samples/s | speed-up | emulated step ms |")
    rows[1]["emulated_allreduce_ms"] = 1.5
    lines = table(["pardnn", "metis", "single"], [*rows, None][:3]).splitlines()
    assert lines[2] == "| pardnn | complete | 200.0 | 1.00× | 10.00 |  | 12.50 | 1.25 | 3.00 GiB | yes |"
    assert lines[3] == "| metis | complete | 150.0 | 0.75× | 11.00 | 1.50 | 16.50 | 1.50 | 1.00 GiB | yes |"
    assert lines[4] == "| single | does_not_fit |  |  | 9.00 |  |  |  |  | no |"
    assert table(["pardnn", "data"], [rows[0], None]).splitlines()[3] == "| data | missing | | | | | | | | |"


def test_a_data_parallel_summary_counts_replicas_and_nodes_apart():
    """4 ranks, 2 per node, each a replica of batch 4: 2 nodes × 2 devices, global batch 16, rates summed."""
    node = {"throughput": {"samples_per_s": 10.0, "tokens_per_s": None, "complete": True, "steps": 5,
                           "step_ms_median": 2.0}}
    summary = summarize(status="complete", job=Job(), settings={"batch_size": 8, "window": [1, 6]},
                        nodes=[node] * 4, devices={"count": 1, "kind": "cpu", "names": ["/device:CPU:0"]},
                        placement={}, extra={}, replicas_per_node=2, batch_size=4)
    assert (summary["nodes"], summary["replicas"], summary["devices_per_node"]) == (2, 4, 2)
    assert (summary["batch_size"], summary["global_batch_size"]) == (4, 16)
    assert summary["throughput"]["samples_per_s"] == 40.0


def test_a_run_that_never_trained_has_no_throughput():
    node = {"throughput": {"samples_per_s": 0.0, "tokens_per_s": None, "complete": False, "steps": 0,
                           "step_ms_median": None}}
    summary = summarize(status="does_not_fit", job=Job(), settings={"batch_size": 8, "window": [1, 6]},
                        nodes=[node, node], devices={"count": 2, "kind": "cpu", "names": []}, placement={}, extra={})
    assert summary["throughput"]["samples_per_s"] is None and summary["throughput"]["complete"] is False


LINES = [HEADER,
         _row("pardnn", 1, 1, 10.0), _row("metis", 1, 1, 10.0),
         _row("pardnn", 1, 2, 30.0, emulated=10.0, measured=12.0), _row("metis", 1, 2, 20.0),
         _row("data", 1, 2, 24.0, emulated=8.0, measured=8.0),
         _row("pardnn", 1, 4, 50.0), _row("pardnn", 1, 4, 70.0), _row("data", 1, 4, 40.0),
         _row("pardnn", 2, 4, 110.0), _row("data", 2, 4, 60.0)]


def test_speed_ups_over_each_alternative_and_one_device_and_scaling_over_nodes():
    """One node: pardnn at K=2 does 30 samples/s, metis 20 and data 24: 1.50× and 1.25×; at K=4 pardnn's median of
    50 and 70 (60) over data's 40: 1.50×. Over one device (median of 10 and 10): pardnn 1.00×, 3.00×, 6.00×;
    data 2.40× and 4.00×. Over nodes at K=4: pardnn 60 → 110, data 40 → 60."""
    text = comparison_tables(read_results(LINES))
    assert "| K (batch) | data | metis |" in text
    assert "| 2 (8) | 1.25× | 1.50× |" in text and "| 4 (8) | 1.50× |  |" in text
    assert "| K (batch) | pardnn | data | metis |" in text
    assert "| 1 (8) | 1.00× |  | 1.00× |" in text and "| 4 (8) | 6.00× | 4.00× |  |" in text
    assert "| nodes | pardnn | data |" in text and "| 2 | 110.0 | 60.0 |" in text and "| 1 | 60.0 | 40.0 |" in text


def test_the_fidelity_table_gives_measured_over_emulated_by_variant_and_k():
    """pardnn at K=2: 12 / 10 = 1.20; every other run 10 / 10 and data at K=2 8 / 8: 1.00."""
    text = comparison_tables(read_results(LINES))
    assert "| pardnn | 2 | 1 | 1.20 | 1.20 | 1.20 |" in text
    assert "| pardnn | 4 | 3 | 1.00 | 1.00 | 1.00 |" in text and "| data | 2 | 1 | 1.00 | 1.00 | 1.00 |" in text


def test_plans_are_variants_of_their_own_with_the_allreduce_share_of_their_emulated_step():
    """Two nodes of 4: pardnn on replicas of 2 devices (emulated 10 ms, 2.5 of it the allreduce, measured 11)
    and of 1 (8 ms, 2 of it; measured 8); one replica per node (k = 4) is plain pardnn."""
    lines = [HEADER, _row("pardnn", 2, 4, 50.0, emulated=10.0, measured=11.0, replica_devices=2,
                          emulated_allreduce_ms=2.5),
             _row("pardnn", 2, 4, 60.0, emulated=8.0, measured=8.0, replica_devices=1, emulated_allreduce_ms=2.0),
             _row("pardnn", 2, 4, 40.0, replica_devices=4)]
    assert [r.variant for r in read_results(lines)] == ["pardnn k=2", "pardnn k=1", "pardnn"]
    text = comparison_tables(read_results(lines))
    assert "| pardnn k=2 | 4 | 1 | 1.10 | 1.10 | 1.10 | 25% |" in text
    assert "| pardnn k=1 | 4 | 1 | 1.00 | 1.00 | 1.00 | 25% |" in text
    assert "| pardnn | 4 | 1 | 1.00 | 1.00 | 1.00 |  |" in text


def test_a_warning_only_where_the_ratio_spreads_beyond_what_one_calibration_fixes():
    """Ratios 1.00 to 1.20 are 1.2× apart: one factor comes within 10 %. 0.5 to 1.2 (2.4×) is not."""
    assert fidelity_warnings(read_results(LINES)) == []
    spread = read_results([*LINES, _row("metis", 1, 2, 20.0, emulated=20.0, measured=10.0)])
    [warning] = fidelity_warnings(spread)
    assert warning.startswith("trn on gpu: measured / emulated step ranges from 0.50 (metis, K = 2) to 1.20 (pardnn, "
                              "K = 2), 2.4× apart")
    assert fidelity_warnings(read_results([*LINES, _row("metis", 1, 2, 20.0, emulated=20.0, measured=10.0,
                                                         kind="cpu")])) == []  # one cpu run: nothing to compare


def _drawn(path) -> tuple[tuple[int, ...], int]:
    """The PNG's shape, and how many of its pixels are coloured (neither grey nor white: lines and markers)."""
    from matplotlib import image

    pixels = image.imread(path)[..., :3]
    return pixels.shape, int(((pixels.max(axis=-1) - pixels.min(axis=-1)) > 0.2).sum())


def test_the_comparison_plots_are_drawn(tmp_path):
    pytest.importorskip("matplotlib")
    paths = comparison_plots(read_results(LINES), tmp_path)
    assert [p.name for p in paths] == ["trn-speedup.png", "trn-over-one.png", "trn-scaling.png", "trn-fidelity.png"]
    for path in paths:
        shape, coloured = _drawn(path)
        assert shape == (400, 600, 3) and coloured > 100, path.name


def test_the_report_warns_on_stderr_and_in_report_md(tmp_path, capsys):
    lines = [*LINES, _row("metis", 1, 2, 20.0, emulated=20.0, measured=10.0)]
    (tmp_path / "results.csv").write_text("\n".join(lines) + "\n")
    assert main([str(tmp_path), "--no-plots"]) == 0
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## trn: comparison" in report and "## warnings" in report and "## trn, metis" in report
    assert "pardnn-report: warning: trn on gpu" in capsys.readouterr().err
