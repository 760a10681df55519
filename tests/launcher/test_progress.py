"""The plain progress display logs every tenth of the run; disabled shows nothing."""

from __future__ import annotations

import logging
import sys

import tqdm

from launcher.progress import Progress, progress


def test_plain_progress_logs_each_tenth(caplog):
    caplog.set_level(logging.INFO, logger="launcher.progress")
    bar = Progress(20, "job")
    for _ in range(20):
        bar.update()
    assert [r.getMessage() for r in caplog.records] == [f"job: iteration {i}/20" for i in range(2, 21, 2)]


def test_disabled_progress_is_silent(caplog):
    caplog.set_level(logging.INFO)
    bar = progress(5, "job", enabled=False)
    bar.update(5)
    bar.close()
    assert caplog.records == []


def test_without_tqdm_the_plain_display_says_why(caplog, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm raises ImportError
    caplog.set_level(logging.INFO, logger="launcher.progress")
    bar = progress(10, "job", enabled=True)
    assert type(bar) is Progress
    assert any("tqdm is not installed" in record.getMessage() for record in caplog.records)


def test_with_tqdm_the_bar_is_tqdm():
    bar = progress(10, "job", enabled=True)
    try:
        assert isinstance(bar, tqdm.tqdm)
    finally:
        bar.close()
