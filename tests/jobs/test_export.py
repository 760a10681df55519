"""The trained model in Keras' own files (jobs.export): a graph trained a few steps, written as
``.weights.h5`` and ``.keras``, loaded by the user's own ``build()`` in a fresh process, predicts what
the trained weights predict in an inference graph that loads them by variable name (the oracle knows
nothing of pardnn's order of weights); batch norm's moving statistics and dropout included."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from jobs import JobError, build, load_job  # noqa: E402
from jobs.export import check_path, save_model  # noqa: E402
from tests.helpers.usermodels import MODELS  # noqa: E402

pytestmark = pytest.mark.tf

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]

# name: (job file text, the module's folder or None for usernet.py written from MODELS, entry kwargs, suffixes)
CASES = {
    "cnn": (None, ROOT / "examples" / "keras_cnn", {"width": 16, "dropout": 0.25}, (".weights.h5", ".keras")),
    "subclassed": ("[model]\nentry = 'usernet:build'\n[data]\nentry = 'usernet:batches'\n[train]\nbatch_size = 8\n"
                   "loss = 'sparse_categorical_crossentropy'\n", None, {}, (".weights.h5",)),
    "two_heads": ("[model]\nentry = 'usernet:heads'\n[model.args]\noptimizer = 'adam'\n[data]\nentry = "
                  "'usernet:two'\n[train]\nbatch_size = 8\n", None, {"optimizer": "adam"}, (".weights.h5", ".keras")),
    "mixed": ("[model]\nentry = 'usernet:mixed'\n[data]\nentry = 'usernet:batches'\n[train]\nbatch_size = 8\n",
              None, {}, (".h5",)),
}
TWO = "\ndef two(iteration, batch_size, rank, ranks):\n    x, y = batches(iteration, batch_size, rank, ranks)\n" \
      "    return x, {'cls': y, 'reg': x[:, :1]}\n"


def _job(tmp_path, name):
    text, folder, _, _ = CASES[name]
    if folder is not None:
        return load_job(folder / "job.toml"), folder
    work = tmp_path / name
    work.mkdir()
    (work / "usernet.py").write_text(MODELS + TWO)
    (work / "job.toml").write_text(text)
    return load_job(work / "job.toml"), work


def _trained_values(job, steps=3):
    trained = build(job)
    with tf.compat.v1.Session(graph=trained.graph) as session:
        session.run(trained.init_op)
        for i in range(steps):
            session.run(trained.fetches, trained.feed_fn(i))
        values = dict(zip([v.name for v in trained.variables], session.run(trained.variables)))
    return trained, values


def _inference_by_name(job, folder, values, x):
    """The oracle: the user's model made in a fresh graph, called in inference mode, every weight loaded
    from ``values`` by its own variable name."""
    sys.path.insert(0, str(folder))
    try:
        import importlib

        module = importlib.import_module("net" if folder.name.startswith("keras_") else "usernet")
        module = importlib.reload(module)
        function = getattr(module, job.entry.split(":")[1])
        graph = tf.Graph()
        with graph.as_default():
            model = function(**dict(job.model_params))
            tf.keras.mixed_precision.set_global_policy("float32")
            inputs = tf.compat.v1.placeholder(tf.float32, [None, *x.shape[1:]])
            out = model(inputs, training=False)
            outputs = out if isinstance(out, list) else [out]
            with tf.compat.v1.Session(graph=graph) as session:
                session.run([v.initializer for v in model.weights],
                            {v.initializer.inputs[1]: values[v.name] for v in model.weights})
                return [np.asarray(o, np.float32) for o in session.run(outputs, {inputs: x})]
    finally:
        sys.path.remove(str(folder))
        for name in ("net", "usernet"):
            sys.modules.pop(name, None)


LOADER = textwrap.dedent("""\
    import importlib, json, sys
    import numpy as np
    import tensorflow as tf
    cases = json.loads(sys.argv[1])
    out = {}
    for case in cases:
        sys.path.insert(0, case["folder"])
        module = importlib.import_module(case["module"])
        x = np.load(case["x"])
        for path in case["files"]:
            if path.endswith(".keras"):
                model = tf.keras.models.load_model(path)
            else:  # the user's own build(), then Keras' load_weights
                model = getattr(module, case["function"])(**case["kwargs"])
                model(x[:1], training=False)  # a subclassed model has no weights before its first call
                model.load_weights(path)
            got = model.predict(x, verbose=0)
            out[path] = [np.asarray(g, np.float32).tolist() for g in (got if isinstance(got, list) else [got])]
        sys.path.remove(case["folder"])
        sys.modules.pop(case["module"])
    print(json.dumps(out))
""")


def test_saved_weights_predict_in_plain_keras_what_the_trained_graph_predicts(tmp_path):
    cases, expected, trained_cnn = [], {}, None
    for name, (_, _, kwargs, suffixes) in CASES.items():
        job, folder = _job(tmp_path, name)
        trained, values = _trained_values(job)
        if name == "cnn":
            trained_cnn = trained, values
        assert trained.model["kind"] == "keras" and all(w in values for w in trained.model["weights"])
        x = np.random.default_rng(7).normal(size=(6, *trained.model["inputs"][0]["shape"])).astype(np.float32)
        np.save(tmp_path / f"{name}-x.npy", x)
        oracle = _inference_by_name(job, folder, values, x)
        files = []
        for suffix in suffixes:
            path = save_model(job, trained.model, values, tmp_path / "models" / f"{name}{suffix}")
            assert path.is_file() and not list(path.parent.glob(".*partial*"))  # written whole, under its name
            files.append(str(path))
            expected[str(path)] = oracle
        cases.append({"folder": str(folder), "module": "net" if name == "cnn" else "usernet", "files": files,
                      "function": job.entry.split(":")[1], "kwargs": kwargs, "x": str(tmp_path / f"{name}-x.npy")})
    proc = subprocess.run([sys.executable, "-c", LOADER, json.dumps(cases)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(got) == set(expected) and len(got) == 6
    for path, outputs in got.items():
        for out, oracle in zip(outputs, expected[path], strict=True):
            np.testing.assert_allclose(np.asarray(out), oracle, rtol=1e-5, atol=1e-6, err_msg=path)
    # Dropout and batch norm were trained: the moving statistics moved, so inference is not the initial model.
    trained, values = trained_cnn
    means = [name for name in trained.model["weights"] if "moving_mean" in name]
    assert means and all(np.abs(values[name]).max() > 0 for name in means)


def test_a_zoo_model_writes_its_variables_by_name_and_refuses_keras_whole(tmp_path):
    import h5py

    job = load_job("wrn-tiny")
    trained = build(job)
    model = trained.model
    assert model["kind"] == "variables"
    names = [v.name for v in trained.variables]
    slots = [n for n in names if n not in model["weights"]]
    assert model["weights"] and slots and all("Momentum" in n or "momentum" in n.lower() for n in slots)
    rng = np.random.default_rng(0)
    values = {v.name: rng.normal(size=v.shape.as_list()).astype(np.float32) for v in trained.variables}
    path = save_model(job, model, values, tmp_path / "wrn.weights.h5")
    with h5py.File(path) as handle:
        stored = {}
        handle.visititems(lambda key, item: stored.__setitem__(key, item[()]) if isinstance(item, h5py.Dataset)
                          else None)
    assert sorted(stored) == sorted(n.removesuffix(":0") for n in model["weights"])
    for name in model["weights"]:
        np.testing.assert_array_equal(stored[name.removesuffix(":0")], values[name])
    with pytest.raises(JobError, match=r"wrn.keras: .* has no Keras class to save whole; write its weights"):
        save_model(job, model, values, tmp_path / "wrn.keras")


def test_a_model_that_changed_since_training_is_one_line(tmp_path):
    job, folder = _job(tmp_path, "subclassed")
    trained, values = _trained_values(job, steps=0)
    (folder / "usernet.py").write_text(MODELS.replace("Dense(8,", "Dense(8, use_bias=False,") + TWO)
    for module in ("usernet",):
        sys.modules.pop(module, None)
    with pytest.raises(JobError) as caught:
        save_model(job, trained.model, values, tmp_path / "m.weights.h5")
    message = str(caught.value)
    assert "\n" not in message and "now makes" in message and "the trained graph had" in message, message
    missing = dict(values)
    missing.pop(trained.model["weights"][0])
    with pytest.raises(JobError, match="the trained values lack 1 of the model's weights"):
        save_model(job, trained.model, missing, tmp_path / "m.weights.h5")


@pytest.mark.parametrize(("name", "message"), [
    ("model.npz", "expected a file name ending in .weights.h5, .h5, .keras"),
    (".keras", "expected a file name ending in"),
    ("a-file/model.weights.h5", "cannot write into"),
    ("folder.h5", "is a folder"),
])
def test_a_path_pardnn_cannot_write_is_one_line(tmp_path, name, message):
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "folder.h5").mkdir()
    with pytest.raises(JobError, match=message):
        check_path(tmp_path / name)
    assert check_path(tmp_path / "new" / "folder" / "m.weights.h5").name == "m.weights.h5"
