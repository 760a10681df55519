"""pardnn-launch trains the user's own models (examples/keras_*) under ``mpirun -np 2``, each rank
standing for a node: the same placement on both, identical replicas after training, a results row.
And three users' models (subclassed; two outputs; compiled) from job files that name only
their entry points (and, for the uncompiled ones, the loss).

Outside CI these tests skip when horovod or mpirun is missing; in CI (``CI`` set) that fails.
"""

from __future__ import annotations

import csv
import json

import pytest

from tests.helpers.mpi import LAUNCH, ROOT, mpirun_launch, output, read_records

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

# The examples' job files; keras_cnn/dataset reads a tf.data pipeline and validates every 10 iterations.
EXAMPLES = ["keras_cnn", "keras_transformer", "keras_subclassed", "keras_two_heads", "keras_cnn/dataset"]


@pytest.mark.parametrize("case", EXAMPLES)
def test_two_nodes_train_a_users_keras_model(tmp_path, case):
    # Run from another folder: the job file's own folder is where its module net.py is found.
    work = tmp_path / "elsewhere"
    work.mkdir()
    example, _, name = case.partition("/")
    job = ROOT / "examples" / example / f"{name or 'job'}.toml"
    out = tmp_path / "runs"
    saved = tmp_path / f"{example}.weights.h5"
    proc, seconds = mpirun_launch([*LAUNCH, str(job), "--out", str(out), "--no-progress", "--save-model", str(saved),
                                   "--checkpoint-every", "30"], timeout=400, cwd=work)
    assert proc.returncode == 0, output(proc)
    assert "Traceback" not in proc.stderr, output(proc)
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    _loads_the_last_checkpoint(example, saved, run_dir / "checkpoint" / "ckpt-00000030.json")  # written at the end

    assert summary["status"] == "complete" and summary["nodes"] == 2 and summary["emulated_nodes"] is True
    data = {"dataset": "net:dataset"} if name else {"entry": "net:batches"}
    assert summary["job"]["model"] == "net:build" and summary["job"]["data"] == data
    assert summary["window"] == [10, 30] and summary["devices_per_node"] == 4
    nodes = summary["per_node"]
    assert [n["rank"] for n in nodes] == [0, 1]
    for node in nodes:
        assert node["iterations_run"] == 30 and node["throughput"]["steps"] == 20
    # Data parallelism worked: the same placement everywhere, and identical variables after training.
    assert nodes[0]["placement_sha256"] == nodes[1]["placement_sha256"] == summary["placement"]["sha256"]
    assert nodes[0]["variables_sha256"] == nodes[1]["variables_sha256"]
    assert summary["consistency"]["placement_sha256_equal"] is True
    assert summary["consistency"]["variables_sha256_equal"] is True
    for rank in (0, 1):
        records = read_records(run_dir / f"rank-{rank}.jsonl")
        assert records[-1]["status"] == "complete"
        losses = [r["loss"] for r in records if r["event"] == "iteration"]
        assert len(losses) == 30 and all(loss == loss for loss in losses)  # no NaN
    placed = (run_dir / "placement.txt").read_text().splitlines()
    assert len(placed) == summary["placement"]["ops"]
    [row] = list(csv.DictReader((out / "results.csv").read_text().splitlines()))
    assert (row["job"], row["model"], row["nodes"], row["devices_per_node"], row["status"]) == (
        example.replace("_", "-") + ("-" + name if name else ""), "net:build", "2", "4", "complete")
    assert all(node["input"]["source"] == ("dataset" if name else "function") for node in nodes)
    if name:
        _validated_as_keras_evaluates(summary, saved, row, job)
    print(f"\n{example}: {seconds:.1f} s wall, {summary['throughput']['samples_per_s']:.1f} samples/s")


def _loads_the_last_checkpoint(example, saved, checkpoint):
    """--save-model's file, loaded by the example's own build() in plain Keras (eager), holds the
    weights of the last checkpoint, by the names the trained graph gave them."""
    import sys

    import numpy as np
    import tensorflow as tf

    meta = json.loads(checkpoint.read_text())
    with np.load(checkpoint.with_suffix(".npz")) as arrays:
        values = {name: arrays[f"arr_{i}"] for i, name in enumerate(meta["variables"])}
    folder = str(ROOT / "examples" / example)
    sys.path.insert(0, folder)
    sys.modules.pop("net", None)
    try:
        import net

        from jobs import load_job

        model = net.build(**dict(load_job(meta["job_file"]).model_params))
        x = [np.zeros([1, *spec["shape"]], spec["dtype"]) for spec in meta["model"]["inputs"]]
        model(x[0] if len(x) == 1 else x, training=False)
        model.load_weights(saved)
        assert len(model.weights) == len(meta["model"]["weights"])
        for variable, name in zip(model.weights, meta["model"]["weights"], strict=True):
            np.testing.assert_array_equal(variable.numpy(), values[name], err_msg=name)
    finally:
        sys.path.remove(folder)
        sys.modules.pop("net", None)
        tf.keras.backend.clear_session()


def _validated_as_keras_evaluates(summary, saved, row, job):
    """Validation after iterations 10, 20 and 30, every rank's batches averaged; the saved weights, loaded into
    the example's own model in a fresh process, give Keras' evaluate the loss and accuracy the run reported last
    (on both ranks' validation batches)."""
    import subprocess
    import sys

    reported = summary["validation"]
    assert [v["iteration"] for v in reported] == [10, 20, 30] and all(v["samples"] == 2 * 4 * 16 for v in reported)
    last = reported[-1]
    assert set(last["metrics"]) == {"accuracy"} and json.loads(row["val_metrics"]) == pytest.approx(last["metrics"])
    assert float(row["val_loss"]) == pytest.approx(last["loss"], rel=1e-5)  # the CSV keeps 6 digits
    program = (
        "import sys, json; sys.path.insert(0, sys.argv[1]); import numpy as np, tensorflow as tf, net\n"
        "model = net.build(width=16, dropout=0.25); model.load_weights(sys.argv[2])\n"
        "model.compile(loss='sparse_categorical_crossentropy', metrics=['accuracy'])\n"
        "batches = [b for rank in (0, 1) for b in net.validation(16, rank, 2).take(4)]\n"
        "x = np.concatenate([b[0] for b in batches]); y = np.concatenate([b[1] for b in batches])\n"
        "print(json.dumps(model.evaluate(x, y, batch_size=16, verbose=0, return_dict=True)))\n")
    proc = subprocess.run([sys.executable, "-c", program, str(job.parent), str(saved)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    keras = json.loads(proc.stdout.strip().splitlines()[-1])
    # Each rank updates batch norm's moving statistics from its own batches; the ranks average them before
    # validating, so both validate the model rank 0 saves (without it: 3e-4 apart).
    assert keras["loss"] == pytest.approx(last["loss"], rel=1e-5)
    assert keras["accuracy"] == pytest.approx(last["metrics"]["accuracy"], rel=1e-6)


# The job files of the three users' models: the entries, the batch size (a job file's one required
# setting), and the loss of the uncompiled ones; nothing else.
ISSUE_JOBS = {
    "subclassed": ("build", "batches", "loss = 'sparse_categorical_crossentropy'\n",
                   "trains with loss 'sparse_categorical_crossentropy' (job file); optimizer adam (default)"),
    "two_outputs": ("heads", "two", "loss = { cls = 'sparse_categorical_crossentropy', reg = 'mse' }\n",
                    "reg: 'mse'} (job file); optimizer adam (default)"),
    "compiled": ("compiled", "two", "", "loss_weights {cls: 1, reg: 0.5} (model.compile); optimizer Adam "
                                        "(model.compile); learning_rate 0.01 (model.compile)"),
}


@pytest.mark.parametrize("name", list(ISSUE_JOBS))
def test_two_nodes_train_issue_29s_models_from_their_entry_points(tmp_path, name):
    from tests.helpers.usermodels import MODELS

    model, data, train, logged = ISSUE_JOBS[name]
    (tmp_path / "usernet.py").write_text(MODELS + "\ndef compiled():\n    return heads('adam')\n")
    job = tmp_path / "job.toml"
    job.write_text(f"[model]\nentry = 'usernet:{model}'\n[data]\nentry = 'usernet:{data}'\n[train]\nbatch_size = 8\n"
                   + train)
    out = tmp_path / "runs"
    settings = ["--iterations", "12", "--window", "4:12", "--devices-per-node", "2"]
    proc, seconds = mpirun_launch([*LAUNCH, str(job), *settings, "--out", str(out), "--no-progress"], timeout=300)
    assert proc.returncode == 0, output(proc)
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["nodes"] == 2
    nodes = summary["per_node"]
    assert nodes[0]["placement_sha256"] == nodes[1]["placement_sha256"]
    assert nodes[0]["variables_sha256"] == nodes[1]["variables_sha256"]
    for rank in (0, 1):
        losses = [r["loss"] for r in read_records(run_dir / f"rank-{rank}.jsonl") if r["event"] == "iteration"]
        assert len(losses) == 12 and all(loss == loss for loss in losses)  # no NaN
    assert logged in (run_dir / "rank-0.log").read_text()  # where the loss and the optimizer came from
    print(f"\n{name}: {seconds:.1f} s wall")
