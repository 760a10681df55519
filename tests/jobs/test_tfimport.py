"""``pardnn`` commands import TensorFlow without its INFO lines (jobs.tfimport)."""

from __future__ import annotations

import os
import sys
import types

from jobs import tfimport


def test_quiet_hides_info_lines_unless_the_user_set_a_level(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow", types.ModuleType("tensorflow"))  # imported: nothing to catch
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "")
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL")
    tfimport.quiet()
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "1"
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    tfimport.quiet()
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0"


def test_quiet_drops_tensorflows_load_time_info_lines_and_keeps_the_rest(monkeypatch, capfd):
    """``import tensorflow`` stood for by a module that writes TensorFlow's lines to fd 2 as it loads."""
    import importlib.machinery

    lines = ["2026-11-27 09:48:00.535119: I tensorflow/core/util/port.cc:113] oneDNN custom operations are on.\n",
             "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
             "I0000 00:00:1795773953.940092   13375 cudart_stub.cc:31] Could not find cuda drivers\n",
             "W0000 00:00:1795773954.061420   13375 xplane.cc:84] a warning stays\n",
             "E0000 00:00:1795773953.940092   13375 cuda_platform.cc:52] an error stays\n"]

    class Loader(importlib.machinery.SourceFileLoader):
        def __init__(self) -> None:
            pass

        def create_module(self, spec):
            return types.ModuleType("tensorflow")

        def exec_module(self, module):
            os.write(2, "".join(lines).encode())

    class Finder:
        @staticmethod
        def find_spec(name, path=None, target=None):
            return importlib.machinery.ModuleSpec("tensorflow", Loader()) if name == "tensorflow" else None

    # The real TensorFlow, if imported, comes back afterwards; if not, the stand-in must not stay in
    # sys.modules (monkeypatch.delitem records nothing for a missing key, so a later test would import it).
    real = sys.modules.pop("tensorflow", None)
    monkeypatch.setattr(sys, "meta_path", [Finder(), *sys.meta_path])
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")
    try:
        tfimport.quiet()
        assert "tensorflow" in sys.modules
    finally:
        sys.modules.pop("tensorflow", None)
        if real is not None:
            sys.modules["tensorflow"] = real
    assert capfd.readouterr().err == lines[3] + lines[4]


def test_hushed_drops_info_lines_and_the_cpu_profilers_gpu_trace_warning_and_keeps_the_rest(monkeypatch, capfd):
    """What TensorFlow writes to fd 2 while ``pardnn capture`` profiles on CPUs: one warning per step."""
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")
    trace = "2026-11-29 01:05:53.80: W tensorflow/core/profiler/convert/xplane_to_step_stats.cc:78] GPU trace was " \
            "not collected.\n"
    kept = ["W0000 00:00:1795773954.061420   13375 xplane.cc:84] another warning stays\n", "a line of our own\n"]
    with tfimport.hushed():
        os.write(2, (trace * 3 + "I0000 00:00:1795773953.940092   13375 x.cc:31] info\n" + "".join(kept)).encode())
    assert capfd.readouterr().err == "".join(kept)
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")  # the user asked for every line
    with tfimport.hushed():
        os.write(2, trace.encode())
    assert capfd.readouterr().err == trace


def test_hushed_writes_the_lines_back_when_the_block_raises(monkeypatch, capfd):
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")
    try:
        with tfimport.hushed():
            os.write(2, b"E0000 00:00:1795773953.940092   13375 x.cc:52] an error stays\n")
            raise RuntimeError("profiling failed")
    except RuntimeError:
        pass
    assert capfd.readouterr().err == "E0000 00:00:1795773953.940092   13375 x.cc:52] an error stays\n"
