"""The plain progress display logs every tenth of the run; disabled shows nothing."""

from __future__ import annotations

import logging
import sys

import tqdm

import launcher.reporting.progress
from launcher.reporting.progress import IterationProgress, progress


def test_plain_progress_logs_each_tenth(caplog):
    caplog.set_level(logging.INFO, logger="launcher.reporting.progress")
    bar = IterationProgress(20, "job")
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
    monkeypatch.setattr(launcher.reporting.progress, "on_a_terminal", lambda: True)
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm raises ImportError
    caplog.set_level(logging.INFO, logger="launcher.reporting.progress")
    bar = progress(10, "job", enabled=True)
    assert type(bar) is IterationProgress
    assert any("tqdm is not installed" in record.getMessage() for record in caplog.records)


def test_on_a_terminal_with_tqdm_the_bar_is_tqdm(monkeypatch):
    monkeypatch.setattr(launcher.reporting.progress, "on_a_terminal", lambda: True)
    bar = progress(10, "job", enabled=True)
    try:
        assert isinstance(bar, tqdm.tqdm)
    finally:
        bar.close()


def test_off_a_terminal_each_tenth_is_a_line_even_with_tqdm(monkeypatch):
    """A Slurm output file or a pipe would keep every carriage-return redraw of a bar."""
    monkeypatch.setattr(launcher.reporting.progress, "on_a_terminal", lambda: False)
    assert type(progress(10, "job", enabled=True)) is IterationProgress


def test_the_console_remembers_whether_standard_error_was_a_terminal():
    from launcher.reporting.console import Console

    assert Console().terminal is False  # before start(): nothing known, no bar
