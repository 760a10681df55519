"""Atomic writes that honour the umask, the locked results.csv append, and the output folder check."""

from __future__ import annotations

import csv
import os
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from launcher.errors import LaunchError
from launcher.files import append_csv_row, check_output_folder, file_mode, read_umask, write_json, write_text

ROOT = Path(__file__).resolve().parents[2]


def test_write_text_replaces_whole_and_leaves_no_temp(tmp_path):
    path = tmp_path / "sub" / "out.txt"
    write_text(path, "first\n")
    write_text(path, "second\n")
    assert path.read_text() == "second\n"
    assert [p.name for p in path.parent.iterdir()] == ["out.txt"]


def test_write_json_rejects_nan_without_touching_the_old_file(tmp_path):
    path = tmp_path / "s.json"
    write_json(path, {"a": 1})
    try:
        write_json(path, {"a": float("nan")})
    except ValueError:
        pass
    assert path.read_text() == '{\n  "a": 1\n}\n'


def test_append_csv_row_writes_header_once_and_keeps_an_old_header(tmp_path):
    path = tmp_path / "results.csv"
    append_csv_row(path, ["a", "b"], {"a": 1, "b": 0.5})
    append_csv_row(path, ["a", "b", "c"], {"a": 2, "c": 3})
    rows = list(csv.DictReader(path.read_text().splitlines()))
    assert rows == [{"a": "1", "b": "0.5"}, {"a": "2", "b": ""}]


def test_append_csv_row_from_many_threads_loses_nothing(tmp_path):
    path = tmp_path / "results.csv"
    threads = [threading.Thread(target=append_csv_row, args=(path, ["i"], {"i": i})) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(int(r["i"]) for r in csv.DictReader(path.read_text().splitlines())) == list(range(20))


def _mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_files_get_the_mode_open_would_give(tmp_path):
    write_text(tmp_path / "a.txt", "x")
    append_csv_row(tmp_path / "results.csv", ["a"], {"a": 1})
    umask = os.umask(0o022)
    os.umask(umask)
    assert read_umask() == umask and file_mode() == 0o666 & ~umask
    assert _mode(tmp_path / "a.txt") == _mode(tmp_path / "results.csv") == 0o666 & ~umask


@pytest.mark.parametrize(("umask", "mode"), [(0o027, 0o640), (0o002, 0o664), (0o077, 0o600)])
def test_files_follow_the_process_umask(tmp_path, umask, mode):
    program = textwrap.dedent(f"""
        import os, sys
        from pathlib import Path
        os.umask({umask:#o})
        from launcher.files import write_json
        write_json(Path(sys.argv[1]), {{"a": 1}})
    """)
    subprocess.run([sys.executable, "-c", program, str(tmp_path / "s.json")], cwd=ROOT, check=True, timeout=60)
    assert _mode(tmp_path / "s.json") == mode


def test_output_folder_is_made_or_refused_in_one_line(tmp_path):
    check_output_folder(tmp_path / "new" / "runs")
    assert (tmp_path / "new" / "runs").is_dir()
    (tmp_path / "file").write_text("")
    with pytest.raises(LaunchError, match=r"^--out .*file: exists and is not a folder; pass --out a folder"):
        check_output_folder(tmp_path / "file")
    with pytest.raises(LaunchError, match=r"^--out .*file/runs: cannot create the folder \(Not a directory\)"):
        check_output_folder(tmp_path / "file" / "runs")
