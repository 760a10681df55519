"""Atomic writes and the locked results.csv append."""

from __future__ import annotations

import csv
import threading

from launcher.files import append_csv_row, write_json, write_text


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
