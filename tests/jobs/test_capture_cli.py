"""``pardnn capture`` and ``jobs.export_graph``: job files and MODULE:FUNCTION to native graph files."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from jobs import build, export_graph, load_job  # noqa: E402
from pardnn.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_USAGE, main  # noqa: E402
from pardnn.io import read_graph  # noqa: E402
from pardnn.tf import capture, estimate  # noqa: E402
from tests.tf import models  # noqa: E402

pytestmark = pytest.mark.tf


def two_layer_model():
    """A MODULE:FUNCTION target: the adapter tests' two-layer net, with a feed function."""
    model = models.two_layer()
    feeds = models.batches(model, 8)
    model.feed_fn = lambda step: feeds[step % len(feeds)]
    return model


def test_capture_a_job_with_estimated_costs(tmp_path, capsys):
    out = tmp_path / "trn-tiny.json.gz"
    assert main(["capture", "trn-tiny", "-o", str(out), "--estimate", "a100"]) == EXIT_OK
    assert "ops" in capsys.readouterr().out
    graph = read_graph(out)
    job = load_job("trn-tiny")
    trained = build(job)
    expected = estimate(trained.graph, trained.fetches, "a100-80gb", name="trn-tiny")
    assert graph.name == "trn-tiny" and graph.names == expected.names
    np.testing.assert_allclose(graph.comp_us, expected.comp_us)
    np.testing.assert_array_equal(graph.out_bytes, expected.out_bytes)
    assert graph.memory_limit_bytes is None


def test_capture_a_job_file_profiled_with_a_memory_limit_and_batch(tmp_path):
    job_file = tmp_path / "small.toml"
    job_file.write_text((load_job("wrn-tiny").path.read_text()).replace("[placement]", "[placement]\nmemory = '2GiB'"))
    out = tmp_path / "small.json"
    assert main(["capture", str(job_file), "-o", str(out), "--profile", "2", "--batch-size", "4"]) == EXIT_OK
    graph = read_graph(out)
    assert graph.name == "small" and graph.memory_limit_bytes == 2 * 2**30
    assert graph.comp_us.sum() > 0
    images = graph.names.index("images")
    assert graph.out_bytes[images] == 4 * 16 * 16 * 3 * 4


def test_capture_module_function(tmp_path):
    out = tmp_path / "two.json"
    assert main(["capture", "tests.jobs.test_capture_cli:two_layer_model", "-o", str(out)]) == EXIT_OK
    graph = read_graph(out)
    model = models.two_layer()
    assert graph.name == "two_layer_model" and graph.names == capture(model.graph, model.fetches).names
    assert graph.comp_us.sum() > 0
    assert main(["capture", "tests.jobs.test_capture_cli:two_layer_model", "-o", str(out), "--profile", "2",
                 "--name", "profiled"]) == EXIT_OK
    assert read_graph(out).name == "profiled"


@pytest.mark.parametrize(("argv", "message"), [
    (["no-such-job"], "no job file 'no-such-job': not a file, and not a preset"),
    (["tests.jobs.nope:f"], "cannot import module 'tests.jobs.nope'"),
    (["tests.jobs.test_capture_cli:nothing"], "has no function 'nothing'"),
    (["tests.jobs.test_capture_cli:two_layer_model", "--batch-size", "2"], "--batch-size applies to job files only"),
    (["trn-tiny", "--estimate", "k80"], "unknown device preset 'k80'"),
])
def test_capture_errors_are_one_line(tmp_path, capsys, argv, message):
    assert main(["capture", *argv, "-o", str(tmp_path / "x.json")]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_capture_usage_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["capture", "trn-tiny", "-o", str(tmp_path / "x.json"), "--profile", "0"])
    assert exit_info.value.code == EXIT_USAGE and "'0': expected a whole number >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["capture", "trn-tiny", "-o", "x.json", "--profile", "2", "--estimate", "v100"])


def test_export_graph_costs(tmp_path):
    captured = export_graph("word-rnn-tiny", tmp_path / "a.json", costs="capture")
    assert captured.comp_us.sum() == 0 and read_graph(tmp_path / "a.json") == captured
    estimated = export_graph(load_job("word-rnn-tiny"), tmp_path / "b.json.gz", preset="h100-80gb", batch_size=2)
    assert estimated.names == captured.names and estimated.comp_us.sum() > 0
    assert estimated.out_bytes[estimated.names.index("tokens")] == 2 * 10 * 4
    with pytest.raises(ValueError, match="costs='guess'"):
        export_graph("word-rnn-tiny", tmp_path / "c.json", costs="guess")


def test_capture_prints_no_tensorflow_notice(tmp_path):
    """As a user runs it, TensorFlow's log level unset, profiled on this machine's CPUs (one run for both):
    its load-time notices (oneDNN, CPU features, CUDA probe, absl's) are not on the console, nor the
    profiler's warning, once a profiled step, that it collected no GPU trace; the summary lines are."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-m", "pardnn", "capture", "trn-tiny", "-o", str(tmp_path / "g.json"),
                           "--profile", "3"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = (proc.stdout + proc.stderr).splitlines()
    info = [line for line in lines if ": I " in line or line.startswith(("I0", "I1"))
            or "absl::InitializeLog" in line or "oneDNN" in line]
    assert not info, "\n".join(lines)
    assert "GPU trace was not collected" not in proc.stderr, proc.stderr
    assert "profiled 3 steps on this machine" in proc.stdout
    assert any(line.startswith("wrote ") for line in lines)
