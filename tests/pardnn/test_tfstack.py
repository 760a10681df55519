"""TensorFlow's environment before import: Keras 2 as tf.keras where tf-keras is installed, a Keras 3
process told what to do, Keras 3 model objects recognised (no TensorFlow import needed here)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import types

import pytest

from pardnn import tfstack
from pardnn.errors import MissingDependencyError


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "")  # recorded, so the value prepare() sets is undone after the test
    monkeypatch.delenv("TF_USE_LEGACY_KERAS")
    monkeypatch.setattr(tfstack, "_said", False)
    return monkeypatch


def _loader(initialized: bool, version: str | None = None) -> types.ModuleType:
    """Stands for TensorFlow's lazy ``tf.keras`` loader (a module whose ``__dict__`` holds its state)."""
    loader = types.ModuleType("keras")
    loader._initialized = initialized
    if version is not None:
        loader._keras_version = version
    return loader


def _fake_tensorflow(monkeypatch, loader: types.ModuleType) -> None:
    module = types.ModuleType("tensorflow")
    module.keras = loader
    module.__version__ = "2.21.0"
    monkeypatch.setitem(sys.modules, "tensorflow", module)


def test_legacy_keras_is_chosen_only_where_tf_keras_is_installed(clean_env):
    clean_env.setattr(tfstack, "_tf_keras_installed", lambda: False)
    tfstack.prepare()
    assert "TF_USE_LEGACY_KERAS" not in os.environ  # TensorFlow 2.15 would look for tf_keras and fail
    clean_env.setattr(tfstack, "_tf_keras_installed", lambda: True)
    tfstack.prepare()
    assert os.environ["TF_USE_LEGACY_KERAS"] == "1"


def test_a_users_own_choice_is_kept(clean_env):
    clean_env.setenv("TF_USE_LEGACY_KERAS", "0")
    clean_env.setattr(tfstack, "_tf_keras_installed", lambda: True)
    tfstack.prepare()
    assert os.environ["TF_USE_LEGACY_KERAS"] == "0"


def test_which_keras_is_read_without_resolving_the_loader(clean_env):
    assert tfstack.keras_in_use() is None or "tensorflow" in sys.modules
    untouched = _loader(False)
    _fake_tensorflow(clean_env, untouched)
    assert tfstack.keras_in_use() is None and untouched._initialized is False
    _fake_tensorflow(clean_env, _loader(True, "tf_keras"))
    assert tfstack.keras_in_use() == "tf_keras"


def test_tensorflow_imported_first_with_keras_3_is_said_once_and_refused_where_a_graph_is_built(clean_env, capsys):
    _fake_tensorflow(clean_env, _loader(True, "keras_3"))
    tfstack.prepare()
    tfstack.prepare()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pardnn: warning: TensorFlow was imported and tf.keras used as "
                                                    "Keras 3 before pardnn; pardnn needs Keras 2 as tf.keras: "
                                                    "pip install tf-keras")
    with pytest.raises(MissingDependencyError) as caught:
        tfstack.check_keras("jobs.build")
    message = str(caught.value)
    assert message.startswith("jobs.build: tf.keras is Keras 3 in this process (TensorFlow 2.21.0); ")
    assert "TF_USE_LEGACY_KERAS=1" in message and "\n" not in message


def test_keras_2_passes_the_check(clean_env):
    _fake_tensorflow(clean_env, _loader(True, "keras_2"))
    tfstack.check_keras()


def test_keras_3_model_objects_are_told_from_keras_2_ones(monkeypatch):
    class Functional:
        pass

    Functional.__module__ = "keras.src.models.functional"
    monkeypatch.setitem(sys.modules, "keras", types.SimpleNamespace(__version__="3.11.3"))
    assert tfstack.keras3_model(Functional()) == "3.11.3"
    assert tfstack.keras3_model(type("Net", (Functional,), {})()) == "3.11.3"  # a user's subclass
    monkeypatch.setitem(sys.modules, "keras", types.SimpleNamespace(__version__="2.15.0"))  # TensorFlow 2.15's keras
    assert tfstack.keras3_model(Functional()) is None
    Functional.__module__ = "tf_keras.src.engine.functional"
    monkeypatch.setitem(sys.modules, "keras", types.SimpleNamespace(__version__="3.11.3"))
    assert tfstack.keras3_model(Functional()) is None
    assert tfstack.keras3_model(3) is None


def test_importing_pardnn_tf_jobs_or_launcher_sets_the_environment_before_tensorflow():
    """In a fresh interpreter: after ``import jobs`` TensorFlow is not imported yet, and the choice is made."""
    code = ("import os, sys; import jobs, launcher; "
            "print('tensorflow' in sys.modules, os.environ.get('TF_USE_LEGACY_KERAS'))")
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                         check=True).stdout.split()
    assert out[0] == "False"
    assert out[1] == ("1" if tfstack._tf_keras_installed() else "None")


def test_tensorflow_is_imported_with_the_collector_paused_and_restored(monkeypatch):
    """import_tensorflow pauses the cyclic collector during the import and restores its state after it, also
    when the import fails; once imported it returns the module without importing again."""
    seen, failing = [], []

    def fake_import(name):
        seen.append((name, gc.isenabled()))
        if failing:
            raise ImportError("no tensorflow here")
        return types.SimpleNamespace(__name__=name)

    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    monkeypatch.setattr(tfstack.importlib, "import_module", fake_import)
    monkeypatch.setattr(tfstack, "_own", False)
    assert gc.isenabled()
    assert tfstack.import_tensorflow().__name__ == "tensorflow"
    assert seen == [("tensorflow", False)] and gc.isenabled()
    failing.append(True)
    with pytest.raises(ImportError):
        tfstack.import_tensorflow()
    assert seen[-1] == ("tensorflow", False) and gc.isenabled()
    failing.clear()
    gc.disable()
    try:
        tfstack.import_tensorflow()
        assert not gc.isenabled()  # a collector the caller had paused stays paused
    finally:
        gc.enable()
    monkeypatch.setitem(sys.modules, "tensorflow", "imported")
    assert tfstack.import_tensorflow() == "imported" and len(seen) == 3


def test_only_pardnns_own_processes_freeze_what_the_import_made(monkeypatch):
    """After own_process() the import is frozen (gc.freeze) right after it is made, in no other process."""
    frozen = []
    monkeypatch.setattr(tfstack.gc, "freeze", lambda: frozen.append(gc.isenabled()))
    monkeypatch.setattr(tfstack.importlib, "import_module", lambda name: types.SimpleNamespace(__name__=name))
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    monkeypatch.setattr(tfstack, "_own", False)
    tfstack.import_tensorflow()
    assert frozen == []
    tfstack.own_process()
    tfstack.import_tensorflow()
    assert frozen == [False]  # during the pause, before anything else is made
    monkeypatch.setitem(sys.modules, "tensorflow", "imported")
    tfstack.import_tensorflow()
    assert frozen == [False]  # an import made before (a user's, the test run's) is never frozen


def test_the_zoo_imports_tensorflow_with_the_collector_paused_and_leaves_it_on():
    """In a fresh interpreter, the launcher's path to TensorFlow (``jobs.build``, imported on first use)
    imports it with the cyclic collector off, and the collector is on again afterwards."""
    code = ("import gc, sys\n"
            "class Watch:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'tensorflow':\n"
            "            print('collector-during-import', gc.isenabled())\n"
            "sys.meta_path.insert(0, Watch())\n"
            "import jobs\n"
            "jobs.build\n"
            "print('collector-after', gc.isenabled(), 'frozen', gc.get_freeze_count())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         check=True).stdout.split()
    assert out == ["collector-during-import", "False", "collector-after", "True", "frozen", "0"]  # a library: no freeze
