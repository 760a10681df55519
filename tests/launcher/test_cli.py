"""pardnn-launch's command line: a bad job file or setting is one line and exit 1, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cli import build_parser
from launcher.settings import OVERRIDABLE

ROOT = Path(__file__).resolve().parents[2]


def _launch(*args: str, cwd: Path = ROOT, emulate: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("PARDNN_EMULATE_NODES", None)
    if emulate is not None:
        env["PARDNN_EMULATE_NODES"] = emulate
    return subprocess.run([sys.executable, "-m", "launcher.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("pardnn-launch: error: ")
    return lines[0]


def test_bad_job_file_is_one_line_and_exit_1(tmp_path):
    job = tmp_path / "bad.toml"
    job.write_text('[model]\ntype = "perceptron"\n[train]\nbatch_size = 4\n')
    proc = _launch(str(job), "--out", str(tmp_path / "out"))
    assert proc.returncode == 1
    line = _one_error_line(proc)
    assert "bad.toml" in line and "model.type" in line and "perceptron" in line
    assert not (tmp_path / "out").exists()


def test_missing_job_file_is_one_line(tmp_path):
    proc = _launch(str(tmp_path / "nowhere.toml"))
    assert proc.returncode == 1
    assert "nowhere" in _one_error_line(proc)


def test_window_outside_the_iterations_is_one_line(tmp_path):
    proc = _launch("trn-tiny", "--iterations", "20", "--window", "100:150", "--out", str(tmp_path))
    assert proc.returncode == 1
    line = _one_error_line(proc)
    assert "window 100:150 (command line)" in line and "iterations = 20 (command line)" in line


def test_an_output_folder_that_cannot_be_made_is_one_line_before_tensorflow_loads(tmp_path):
    (tmp_path / "taken").write_text("a file, not a folder")
    program = ("import sys; from launcher.cli import main; code = main(sys.argv[1:]); "
               "print('tensorflow' in sys.modules, 'horovod' in sys.modules, code)")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("PARDNN_EMULATE_NODES", None)
    proc = subprocess.run([sys.executable, "-c", program, "word-rnn-tiny", "--out", str(tmp_path / "taken" / "runs")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    line = _one_error_line(proc)
    assert f"--out {tmp_path / 'taken' / 'runs'}: cannot create the folder (Not a directory)" in line
    assert proc.stdout.split() == ["False", "False", "1"]


def test_a_bad_command_line_is_printed_by_the_launchers_rank_0_only():
    env = {**os.environ, "OMPI_COMM_WORLD_RANK": "1"}
    proc = subprocess.run([sys.executable, "-m", "launcher.cli", "trn-tiny", "--window", "soon"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (2, "")


def test_bad_option_is_exit_2():
    proc = _launch("trn-tiny", "--window", "soon")
    assert proc.returncode == 2
    assert "window" in proc.stderr


def test_help_shows_replica_devices_k_or_auto():
    assert "--replica-devices K|auto" in build_parser().format_help()


@pytest.mark.parametrize("value", ["2", "yes", "on"])
def test_emulate_nodes_other_than_0_or_1_is_one_line(tmp_path, value):
    proc = _launch("word-rnn-tiny", "--out", str(tmp_path / "out"), emulate=value)
    assert proc.returncode == 1
    assert _one_error_line(proc) == (f"pardnn-launch: error: PARDNN_EMULATE_NODES={value!r}: expected 0 or 1 (1: "
                                     "every rank stands for a node of its own, for testing on one machine; 0 or "
                                     "unset on a cluster)")
    assert not (tmp_path / "out").exists()


def test_parser_maps_options_to_settings():
    args = build_parser().parse_args(["job.toml", "--devices-per-node", "8", "--iterations", "160", "--window",
                                      "100:150", "--memory", "32GiB", "--costs", "estimate", "--no-progress",
                                      "--stall-timeout", "20"])
    assert (args.devices_per_node, args.iterations, args.window, args.memory, args.costs, args.progress) == (
        8, 160, "100:150", "32GiB", "estimate", False)
    assert args.stall_timeout == 20.0
    assert build_parser().parse_args(["job.toml"]).progress is None  # not given: the job file or default decides
    data = build_parser().parse_args(["job.toml", "--parallelism", "data", "--recompute"])
    assert (data.parallelism, data.recompute) == ("data", True)  # trained under mpirun as a --compare variant


def test_precision_on_the_command_line_overrides_the_job_files(tmp_path):
    from launcher.core import _read_settings

    args = build_parser().parse_args(["trn-tiny", "--precision", "mixed_float16", "--out", str(tmp_path)])
    overrides = {key: getattr(args, key) for key in (*OVERRIDABLE, "precision")}  # as main() passes them
    job, settings, error = _read_settings(args.job, overrides)
    assert error is None and settings is not None
    assert (job.precision, "train.precision" in job.given) == ("mixed_float16", True)


@pytest.mark.tf
@pytest.mark.slow
def test_one_node_run_of_a_tiny_job(tmp_path):
    import json

    import h5py
    import numpy as np

    saved = tmp_path / "model" / "word-rnn.weights.h5"
    proc = _launch("word-rnn-tiny", "--iterations", "30", "--window", "10:30", "--devices-per-node", "2",
                   "--out", str(tmp_path), "--no-progress", "--save-model", str(saved), "--checkpoint-every", "20")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    assert summary["nodes"] == 1 and summary["devices_per_node"] == 2
    assert summary["throughput"]["tokens_per_s"] == pytest.approx(summary["throughput"]["samples_per_s"] * 10)
    assert summary["settings"]["sources"]["iterations"] == "command line"
    assert (tmp_path / "results.csv").read_text().count("\n") == 2
    # --save-model: the zoo model's variables by name, as the last checkpoint (iteration 30) holds them;
    # pardnn export writes the same file from that checkpoint.
    assert summary["saved_model"]["path"] == str(saved) and "saved the trained model to" in proc.stderr
    [run] = [p for p in tmp_path.iterdir() if p.name.startswith("word-rnn-tiny")]
    last = json.loads((run / "checkpoint" / "ckpt-00000030.json").read_text())
    assert last["model"]["kind"] == "variables" and last["job_file"].endswith("jobs/word-rnn-tiny.toml")
    with np.load(run / "checkpoint" / "ckpt-00000030.npz") as arrays:
        values = {name: arrays[f"arr_{i}"] for i, name in enumerate(last["variables"])}
    exported = tmp_path / "exported.h5"
    export = subprocess.run([sys.executable, "-m", "pardnn", "export", str(run), "-o", str(exported)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert export.returncode == 0 and f"wrote {exported} from {run / 'checkpoint' / 'ckpt-00000030.json'}" in (
        export.stderr), export.stderr
    for path in (saved, exported):
        with h5py.File(path) as handle:
            for name in last["model"]["weights"]:
                np.testing.assert_array_equal(handle[name.removesuffix(":0")][()], values[name])
            assert handle.attrs["job"] == "word-rnn-tiny"


@pytest.mark.tf
@pytest.mark.slow
def test_infeasible_memory_is_exit_3_with_one_error_line(tmp_path):
    proc = _launch("word-rnn-tiny", "--memory", "100KiB", "--costs", "estimate", "--out", str(tmp_path))
    assert proc.returncode == 3, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("pardnn-launch: error")]
    assert len(errors) == 1 and "limit" in errors[0]
    assert "Traceback" not in proc.stderr
