"""The plain progress display logs every tenth of the run; disabled shows nothing."""

from __future__ import annotations

import logging

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
