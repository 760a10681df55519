"""``import pardnn`` and its core never import TensorFlow; ``pardnn.tf`` exports functions, not modules."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.tf


def test_core_does_not_import_tensorflow():
    code = ("import sys, pardnn, pardnn.costs.graph, pardnn.costs.machine, pardnn.partitioner, "
            "pardnn.emulation.simulate; "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_package_names_are_the_functions():
    tf_adapter = pytest.importorskip("pardnn.tf")
    for name in ("capture", "profile", "estimate", "apply"):
        assert callable(getattr(tf_adapter, name)), name
