"""The suite's build-once cache (tests/helpers/shared.py): two processes asking at once build once; and a
module fixture's tests on one worker (tests/conftest.py), so two workers build it once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASK = """\
import sys, time
from pathlib import Path
from tests.helpers import shared
shared.ROOT = Path(sys.argv[1])

def make():
    with open(Path(sys.argv[1]) / "builds", "a") as log:
        log.write("built\\n")
    time.sleep(1.0)  # long enough for the other process to ask meanwhile
    return {"value": 42}

print(shared.shared(("a key", 1), make)["value"], shared.shared(("a key", 1), make)["value"])
"""


def test_the_first_process_to_ask_builds_and_the_others_read(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", ASK, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outputs = [proc.communicate(timeout=120)[0].split() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0]
    assert outputs == [["42", "42"], ["42", "42"]]
    assert (tmp_path / "builds").read_text() == "built\n"


MODULE = """\
import os
import pytest

@pytest.fixture(scope="module", params=["a", "b", "c"])
def built(request):
    with open(os.environ["BUILDS"], "a") as log:
        log.write(f"{request.param} {os.environ.get('PYTEST_XDIST_WORKER', 'main')}\\n")
    return request.param

@pytest.mark.parametrize("case", range(4))
def test_one(built, case):
    assert built in "abc"

def test_two(built):
    assert built in "abc"
"""


def test_a_module_fixture_is_built_once_for_each_parameter_on_two_workers(tmp_path):
    """tests/conftest.py groups the tests of a module-scoped fixture (per parameter) on one worker: with two
    workers each parameter's fixture is built once (before, every worker that ran one of them built it)."""
    (tmp_path / "test_grouped.py").write_text(MODULE)
    builds = tmp_path / "builds"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                           "-n", "2", "--dist", "loadgroup", "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**{k: v for k, v in os.environ.items() if k != "PARDNN_TEST_TIMELINE"},
                               "BUILDS": str(builds)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "15 passed" in done.stdout, done.stdout
    built = sorted(line.split()[0] for line in builds.read_text().splitlines())
    assert built == ["a", "b", "c"], builds.read_text()
