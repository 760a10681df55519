"""pardnn-report's loss plot: rank 0's training loss per iteration and the validations of summary.json,
against iterations done, for the run folders that validated."""

from __future__ import annotations

import json

import pytest

from launcher.report import main
from launcher.reporting.losses import loss_series


def _run(folder, validation, losses):
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({"validation": validation}))
    lines = [json.dumps({"event": "iteration", "index": i, "loss": loss}) for i, loss in enumerate(losses)]
    lines.insert(1, json.dumps({"event": "eval", "iteration": 1, "loss": 9.0}))
    (folder / "rank-0.jsonl").write_text("\n".join([*lines, '{"event": "iteration", "ind']))  # a cut last line


def test_the_series_are_rank_0s_iterations_and_the_summarys_validations(tmp_path):
    run = tmp_path / "out" / "cnn-pardnn-n2-k4-b16-20261129T000000Z"
    _run(run, [{"iteration": 2, "loss": 1.5, "metrics": {}}, {"iteration": 4, "loss": 1.25, "metrics": {}}],
         [2.0, 1.75, 1.5, 1.0])
    training, validation = loss_series(run)
    assert training == [(1, 2.0), (2, 1.75), (3, 1.5), (4, 1.0)]
    assert validation == [(2, 1.5), (4, 1.25)]
    _run(tmp_path / "out" / "no-validation", [], [1.0])
    assert loss_series(tmp_path / "out" / "no-validation") is None
    assert loss_series(tmp_path / "out" / "missing") is None


def test_pardnn_report_draws_the_loss_of_each_run_that_validated(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    _run(out / "cnn-run", [{"iteration": 2, "loss": 1.5, "metrics": {}}], [2.0, 1.75])
    _run(out / "plain-run", [], [2.0])
    (out / "results.csv").write_text("job,status,nodes,devices_per_node,batch_size,samples_per_s,window_complete\n"
                                     "cnn,complete,1,2,16,100.0,true\n")
    assert main([str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out / 'report' / 'cnn-run-loss.png'}" in printed and "plain-run-loss" not in printed
    assert (out / "report" / "cnn-run-loss.png").stat().st_size > 1000
