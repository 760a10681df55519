"""Checkpoints (launcher.rank.checkpoint), the step comparison (launcher.reporting.timeline), a resumed collector."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from launcher.errors import LaunchError
from launcher.rank.checkpoint import Checkpointer, load, restore, save
from launcher.rank.resume import find, resume_point
from launcher.reporting.collector import Collector
from launcher.reporting.timeline import step_ms, traced_iteration

NAMES = ["w:0", "beta1_power:0"]
VALUES = [np.arange(6, dtype=np.float32).reshape(2, 3), np.float32(0.9)]
INFO = {"job": "tiny", "nodes": 2, "batch_size": 16, "placement_sha256": "ab" * 32}


def test_a_checkpoint_is_written_whole_and_read_back(tmp_path):
    meta = save(tmp_path / "checkpoint", 10, NAMES, VALUES, INFO)
    assert meta.name == "ckpt-00000010.json" and not list(tmp_path.glob("**/*.tmp"))
    described, values = load(meta)
    assert described["iteration"] == 10 and described["placement_sha256"] == INFO["placement_sha256"]
    assert list(values) == NAMES and np.array_equal(values["w:0"], VALUES[0])
    assert values["beta1_power:0"] == np.float32(0.9)


def test_resume_finds_a_folder_a_run_or_the_latest_checkpoint_of_the_job(tmp_path):
    first = save(tmp_path / "run-a" / "checkpoint", 5, NAMES, VALUES, INFO)
    later = save(tmp_path / "run-a" / "checkpoint", 10, NAMES, VALUES, INFO)
    other = save(tmp_path / "run-b" / "checkpoint", 15, NAMES, VALUES, {**INFO, "job": "other"})
    assert find(str(first), tmp_path, "tiny") == first
    assert find(str(tmp_path / "run-a"), tmp_path, "tiny") in (first, later)
    assert find("latest", tmp_path, "other") == other
    assert find("latest", tmp_path, "tiny") in (first, later)
    with pytest.raises(LaunchError, match="no checkpoint of job missing under"):
        find("latest", tmp_path, "missing")
    with pytest.raises(LaunchError, match="no checkpoint there"):
        find(str(tmp_path / "nowhere"), tmp_path, "tiny")


def _state(tmp_path, resume, *, iterations=20, nodes=2):
    settings = SimpleNamespace(resume=resume, out=tmp_path, iterations=iterations, batch_size=16, replace=False)
    return SimpleNamespace(settings=settings, topology=SimpleNamespace(size=nodes), job=SimpleNamespace(name="tiny"))


def test_resume_checks_the_placement_nodes_and_iterations(tmp_path):
    meta = save(tmp_path / "run" / "checkpoint", 10, NAMES, VALUES, INFO)
    start, values, path = resume_point(_state(tmp_path, str(meta)), INFO["placement_sha256"])
    assert (start, path, list(values)) == (10, meta, NAMES)
    assert resume_point(_state(tmp_path, None), "x") is None
    for state, digest, message in [
        (_state(tmp_path, str(meta)), "cd" * 32, "the checkpoint's placement abababababab differs from this run's"),
        (_state(tmp_path, str(meta), nodes=3), INFO["placement_sha256"], "saved with 2 node"),
        (_state(tmp_path, str(meta), iterations=10), INFO["placement_sha256"], "pass more --iterations"),
    ]:
        with pytest.raises(LaunchError, match=message) as caught:
            resume_point(state, digest)
        assert "\n" not in str(caught.value)


def test_the_checkpointer_saves_every_n_at_the_end_and_on_a_stop(tmp_path):
    fetched = []

    def fetch():
        fetched.append(1)
        return VALUES

    saver = Checkpointer(tmp_path, 5, NAMES, INFO, saving=True)
    for index in range(3, 12):
        saver.boundary(index, 3, fetch)
    saver.boundary(12, 3, fetch, final=True)
    assert [p.name for p in saver.saved] == ["ckpt-00000005.json", "ckpt-00000010.json", "ckpt-00000012.json"]
    assert len(fetched) == 3
    # A stop signal: the watcher asks, the main thread saves at its next boundary.
    stopping = Checkpointer(tmp_path / "stop", 100, NAMES, INFO, saving=True)
    stopping.boundary(0, 0, fetch)
    answered = []
    watcher = threading.Thread(target=lambda: answered.append(stopping.on_stop(timeout=30)))
    watcher.start()
    while not stopping._requested.is_set():
        threading.Event().wait(0.01)
    stopping.boundary(7, 0, fetch)
    watcher.join()
    assert answered == [True] and [p.name for p in stopping.saved] == ["ckpt-00000007.json"]
    # Not saving (another rank) or not training: a stop does not wait.
    assert not Checkpointer(tmp_path, 5, NAMES, INFO, saving=False).on_stop(timeout=30)
    assert not Checkpointer(tmp_path, 5, NAMES, INFO, saving=True).on_stop(timeout=30)


def test_restore_loads_every_variable_and_refuses_another_graph(tmp_path):
    tf = pytest.importorskip("tensorflow")
    graph = tf.Graph()
    with graph.as_default():
        w = tf.compat.v1.get_variable("w", [2, 3], use_resource=True)
        power = tf.compat.v1.Variable(0.5, name="beta1_power", trainable=False)
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(init)
        restore(session, [w, power], dict(zip(NAMES, VALUES, strict=True)), tmp_path)
        got_w, got_power = session.run([w, power])
        with pytest.raises(LaunchError, match="does not match the graph's variables"):
            restore(session, [w], {"other:0": VALUES[0]}, tmp_path)
    assert np.array_equal(got_w, VALUES[0]) and got_power == pytest.approx(0.9)


def test_step_ms_compares_the_emulated_and_the_measured_step():
    assert step_ms(2000.0, [4.0, 5.0]) == {"emulated": 2.0, "measured_median": 5.0, "ratio": 2.5}
    assert step_ms(None, [4.0]) == {"emulated": None, "measured_median": 4.0, "ratio": None}
    assert step_ms(2000.0, [None]) == {"emulated": 2.0, "measured_median": None, "ratio": None}


def test_the_traced_iteration_is_outside_the_measured_window():
    assert traced_iteration((100, 150), 160) == 99  # the last warm one before the window
    assert traced_iteration((1, 50), 60) == 50  # iteration 0 is cold: the first after the window
    assert traced_iteration((1, 50), 50) == 0
    assert traced_iteration((0, 50), 60) == 50
    assert traced_iteration((0, 50), 50) is None  # every iteration measured: no trace
    for window, iterations in (((100, 150), 160), ((1, 50), 60), ((1, 50), 50), ((0, 50), 60)):
        traced = traced_iteration(window, iterations)
        assert traced is not None and not window[0] <= traced < window[1] and 0 <= traced < iterations


def test_a_resumed_collector_measures_the_window_by_iteration(tmp_path):
    collector = Collector(None, {"rank": 0})
    collector.first_iteration = 10
    for index in range(10, 20):
        collector.iteration(index, 0.5)
    figures = collector.node_summary((12, 16), 8, None)
    throughput = figures["throughput"]
    assert throughput["window"] == [12, 16] and throughput["steps"] == 4 and throughput["complete"]
    assert throughput["samples_per_s"] == pytest.approx(16.0) and figures["first_iteration"] == 10
    assert collector.progress()[1] == 20
    assert collector.node_summary((5, 15), 8, None)["throughput"]["complete"] is False
    json.dumps(figures)


# ------------------------------------------------------------------ keeping, durability, damage, shapes


def test_ten_saves_keep_the_newest_three_and_the_placement_they_name(tmp_path):
    from launcher.rank.checkpoint import PLAN

    saver = Checkpointer(tmp_path, 1, NAMES, INFO, saving=True, keep=3, placement_text="a 0\nb 1\n")
    for index in range(1, 11):
        saver.boundary(index, 0, lambda: VALUES)
    metas = sorted(p.name for p in tmp_path.glob("ckpt-*.json"))
    assert metas == ["ckpt-00000008.json", "ckpt-00000009.json", "ckpt-00000010.json"]
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.npz")) == [m.replace(".json", ".npz") for m in metas]
    [plan] = tmp_path.glob(PLAN.format(sha="*"))
    assert json.loads((tmp_path / metas[0]).read_text())["placement_file"] == plan.name
    assert plan.read_text() == "a 0\nb 1\n"
    everything = Checkpointer(tmp_path / "all", 1, NAMES, INFO, saving=True, keep=0)
    for index in range(1, 6):
        everything.boundary(index, 0, lambda: VALUES)
    assert len(list((tmp_path / "all").glob("ckpt-*.json"))) == 5  # 0 keeps all


def test_pruning_spares_the_one_just_written_and_placements_still_named(tmp_path):
    from launcher.rank.checkpoint import prune

    older = save(tmp_path, 30, NAMES, VALUES, INFO, "x 0\n")  # a checkpoint a run resumed from
    newer = save(tmp_path, 35, NAMES, VALUES, INFO, "x 1\n")
    older_plan = tmp_path / json.loads(older.read_text())["placement_file"]
    assert prune(tmp_path, 1, newer) == [older, tmp_path / "ckpt-00000030.npz", older_plan]
    assert not older.exists() and newer.exists()
    assert [p.read_text() for p in tmp_path.glob("placement-*.txt")] == ["x 1\n"]
    assert prune(tmp_path, 1, newer) == []


def test_every_file_is_fsynced_before_its_rename_and_the_folder_after(tmp_path, monkeypatch):
    import os

    from launcher.rank import checkpoint

    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append("fsync-dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync-file")
        real_fsync(fd)

    def replace(src, dst):
        events.append(f"rename {Path(dst).suffix}")
        real_replace(src, dst)

    from pathlib import Path

    monkeypatch.setattr(checkpoint.os, "fsync", fsync)
    monkeypatch.setattr(checkpoint.os, "replace", replace)
    import launcher.files

    monkeypatch.setattr(launcher.files.os, "fsync", fsync)
    monkeypatch.setattr(launcher.files.os, "replace", replace)
    save(tmp_path, 5, NAMES, VALUES, INFO, "a 0\n")
    assert events == ["fsync-file", "rename .npz", "fsync-file", "rename .txt", "fsync-dir",
                      "fsync-file", "rename .json", "fsync-dir"]


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_a_damaged_values_file_is_refused_in_one_line(tmp_path, damage):
    meta = save(tmp_path, 10, NAMES, VALUES, INFO)
    data = tmp_path / "ckpt-00000010.npz"
    data.write_bytes(data.read_bytes()[: 40] if damage == "truncated" else b"")
    with pytest.raises(LaunchError) as caught:
        load(meta)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"--resume {meta}: cannot read its values ckpt-00000010.npz")
    assert "resume from an older checkpoint" in message


def test_a_changed_cluster_shape_says_what_differs_and_what_to_do(tmp_path):
    from launcher.rank.resume import shape_change

    saved = {"nodes": 4, "ranks": 4, "devices_per_node": 8, "device_kind": "gpu", "gpus": "8 × NVIDIA A100-SXM4-80GB",
             "placer": "pardnn", "batch_size": 64}
    path = tmp_path / "ckpt-00000100.json"
    assert shape_change(path, saved, dict(saved)) is None
    assert shape_change(path, None, saved) is None  # an older checkpoint without the record
    cases = [
        ({"nodes": 2, "ranks": 2}, "saved by 4 rank(s) on 4 node(s), this run has 2 on 2; resume on the same nodes "
                                   "(sbatch --nodes=4), or pass --replace"),
        ({"devices_per_node": 4, "gpus": "4 × NVIDIA H100 80GB HBM3"},
         "its placement spans 8 8 × NVIDIA A100-SXM4-80GB device(s) per node, this run has 4 4 × NVIDIA H100 80GB "
         "HBM3 device(s); run on the same GPUs"),
        ({"placer": "metis"}, "saved by pardnn, this run is metis; resume with the same placer (--placer pardnn)"),
        ({"batch_size": 32}, "saved with batch 64 per node, this run has 32; resume with --batch-size 64"),
    ]
    for change, words in cases:
        line = shape_change(path, saved, {**saved, **change})
        assert line is not None and "\n" not in line and line.startswith(f"--resume {path}: ") and words in line, line


def test_a_placement_file_reads_back_with_its_order():
    from launcher.rank.resume import parse_placement_text

    assert parse_placement_text("a 0 1\nb 1 0\n") == ({"a": 0, "b": 1}, {"a": 1, "b": 0})
    assert parse_placement_text("# comment\na 0\n\nb 1\n") == ({"a": 0, "b": 1}, None)


@pytest.mark.tf
def test_a_graph_that_changed_is_named_in_one_line(tmp_path):
    tf = pytest.importorskip("tensorflow")
    from launcher.rank.checkpoint import graph_ops_digest
    from launcher.rank.resume import graph_change

    def graph(width):
        g = tf.Graph()
        with g.as_default():
            x = tf.compat.v1.placeholder(tf.float32, (2, 3), name="x")
            w = tf.compat.v1.get_variable("w", (3, width))
            tf.matmul(x, w, name="y")
        return g, [w]

    built, variables = graph(2)
    meta = {"graph_ops_sha256": graph_ops_digest(built), "variables": [v.name for v in variables]}
    placement = {"x": 0, "y": 1}
    again, same = graph(2)
    assert graph_change(tmp_path, meta, again, same, placement) is None  # another build of the same graph
    wider, _ = graph(4)
    with wider.as_default():
        tf.identity(wider.get_tensor_by_name("y:0"), name="z")
    assert graph_change(tmp_path, meta, wider, same, placement) == (
        f"--resume {tmp_path}: the graph changed since the checkpoint: its op names differ from the saved graph's; "
        "pass --replace to place it anew and load the saved values by variable name")
    other, other_vars = graph(2)
    with other.as_default():
        v = tf.compat.v1.get_variable("v", (1,))
    line = graph_change(tmp_path, {**meta, "variables": ["w:0"]}, other, [*other_vars, v], placement)
    assert line == (f"--resume {tmp_path}: the checkpoint's values belong to another model: its variables differ "
                    "(saved only: -; now only: v:0); resume with the model it was saved with, or start a new run "
                    "without --resume")  # not --replace: the saved values could not be loaded into this graph
    line = graph_change(tmp_path, meta, wider, same, {**placement, "gone": 0})
    assert "1 placed op(s) are gone (gone)" in line and line.endswith("pass --replace to place it anew and load the "
                                                                       "saved values by variable name")


def test_pruning_leaves_other_jobs_checkpoints_in_a_shared_folder_alone(tmp_path):
    from launcher.rank.checkpoint import prune

    theirs = save(tmp_path, 5, NAMES, VALUES, {**INFO, "job": "other"})
    for iteration in (10, 20, 30):
        newest = save(tmp_path, iteration, NAMES, VALUES, INFO)
    prune(tmp_path, 1, newest)
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.json")) == ["ckpt-00000005.json", "ckpt-00000030.json"]
    assert theirs.exists() and (tmp_path / "ckpt-00000005.npz").exists()


def test_resume_auto_takes_this_slurm_jobs_newest_checkpoint_or_none(tmp_path):
    assert find("auto", tmp_path, "tiny") is None  # nothing yet: the run starts from the beginning
    other_job = save(tmp_path / "run-a" / "checkpoint", 50, NAMES, VALUES, {**INFO, "slurm_job_id": "41"})
    assert find("auto", tmp_path, "tiny", slurm_job="42") is None  # another Slurm job's checkpoint is not ours
    assert find("auto", tmp_path, "tiny") == other_job  # outside Slurm: the job's newest
    assert find("latest", tmp_path, "tiny", slurm_job="42") == other_job  # asked for explicitly: the newest
    shared = tmp_path / "shared"
    ours = save(shared, 10, NAMES, VALUES, {**INFO, "slurm_job_id": "42"})
    assert find("auto", tmp_path, "tiny", folder=shared, slurm_job="42") == ours  # --checkpoint-dir is searched
    with pytest.raises(LaunchError, match="or --resume auto to start anew when there is none"):
        find("latest", tmp_path, "missing")


def test_a_resume_with_other_micro_batches_is_one_line(tmp_path):
    import hashlib

    from launcher.rank.resume import saved_placement

    digest = hashlib.sha256(b"a 0\n").hexdigest()
    meta = save(tmp_path, 10, NAMES, VALUES, {**INFO, "placement_sha256": digest, "graph_ops_sha256": "g",
                                              "micro_batches": 4}, "a 0\n")
    settings = SimpleNamespace(resume=str(meta), replace=False, out=tmp_path, micro_batches=2, checkpoint_dir=None)
    state = SimpleNamespace(settings=settings, job=SimpleNamespace(name="tiny"))
    with pytest.raises(LaunchError) as caught:
        saved_placement(state)
    assert str(caught.value) == (f"--resume {meta}: saved with 4 micro-batches, this run asks for 2; resume with "
                                 "--micro-batches 4 (or auto), or pass --replace to place 2 anew")
    settings.micro_batches = "auto"
    path, described, text = saved_placement(state)
    assert (path, described["micro_batches"], text) == (meta, 4, "a 0\n")
    (tmp_path / described["placement_file"]).write_text("a 1\n")  # damaged: not the placement the digest names
    with pytest.raises(LaunchError, match="does not match the checkpoint's digest"):
        saved_placement(state)
