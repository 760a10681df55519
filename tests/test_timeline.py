"""tests/helpers/timeline.py: the summary .ci/run prints of where a run's time went."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.timeline import main, read, report


def test_per_worker_per_folder_and_the_files_that_took_most(tmp_path: Path, capsys) -> None:
    path = tmp_path / "t.txt"
    path.write_text("gw0 100.00 110.00 9.50 0.00 tests/pardnn/test_a.py::test_x\n"
                    "gw1 100.00 130.00 1.00 50.00 tests/mpi/test_b.py::test_y[2]@mpi\n"
                    "gw0 110.00 112.00 2.00 0.00 tests/pardnn/test_a.py::test_z\n"
                    "gw0 112.00 113.00 1.00 0.00 tests/test_docs.py::test_build\n")
    assert read(path)[1] == ("gw1", 100.0, 130.0, 1.0, 50.0, "tests/mpi/test_b.py::test_y[2]@mpi")
    lines = report(read(path), top=2)
    assert lines[:3] == ["timeline: 4 tests over 30 s", "  gw0: 3 tests, 13 s in tests, its last ended at 13 s",
                         "  gw1: 1 tests, 30 s in tests, its last ended at 30 s"]
    assert lines[4:7] == ["    tests/mpi: 30, 1, 50", "    tests/pardnn: 12, 12, 0", "    tests/test_docs.py: 1, 1, 0"]
    assert lines[7:] == ["  the 2 files that took the most CPU (s):", "    51 tests/mpi/test_b.py",
                         "    12 tests/pardnn/test_a.py"]
    assert main([str(path), "--top", "1"]) == 0 and "51 tests/mpi/test_b.py" in capsys.readouterr().out
