"""The suite's build-once cache (tests/helpers/shared.py): two processes asking at once build once."""

from __future__ import annotations

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
