"""The benchmarks' tests share one cold first run: ``benchmarks.speed.first_run`` compiles every sweep
into an empty numba cache (about 45 s on 2 cores); test_speed checks it, and the quick suite's speed
table reports the same row instead of compiling again."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import shared


@pytest.fixture(scope="session")
def cold_first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, list[str], Path]:
    """``first_run(1, seed=0)`` made once per test run: its row, the progress lines it printed and its
    work folder (the graph, the placement, the numba cache it filled)."""
    from benchmarks.speed import first_run

    def make() -> tuple[object, list[str], Path]:
        work = (shared.ROOT or tmp_path_factory.getbasetemp()) / "cold-first-run"
        work.mkdir()
        messages: list[str] = []
        row = first_run(1, seed=0, progress=messages.append, work=work)
        return row, messages, work

    return shared.shared(("benchmarks.speed.first_run", 1, 0), make)
