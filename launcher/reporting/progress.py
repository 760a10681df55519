"""A progress bar over training iterations: tqdm on a terminal, else a log line every 10 %.

A bar redraws itself with carriage returns, which a terminal shows in place; a Slurm output file, a
pipe or a CI log would keep every redraw. So the bar is drawn only when the console (the standard
error :mod:`launcher.reporting.console` found before it redirected it, else ``sys.stderr``) is a terminal and
tqdm is installed (the ``dist`` extra brings it); otherwise each tenth of the run is one log line.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

__all__ = ["IterationProgress", "on_a_terminal", "progress"]

logger = logging.getLogger(__name__)


class IterationProgress:
    """Plain progress: logs ``iteration i/N`` at every tenth of the run."""

    def __init__(self, total: int, description: str) -> None:
        self._total = total
        self._description = description
        self._done = 0
        self._next = max(total // 10, 1)

    def update(self, count: int = 1) -> None:
        self._done += count
        if self._done >= self._next or self._done == self._total:
            logger.info("%s: iteration %d/%d", self._description, self._done, self._total)
            self._next += max(self._total // 10, 1)

    def close(self) -> None:
        """Nothing to release."""


class _Silent(IterationProgress):
    def update(self, count: int = 1) -> None:
        """Shows nothing."""


def progress(total: int, description: str, enabled: bool) -> Any:
    """A bar with ``update`` and ``close``."""
    if not enabled:
        return _Silent(total, description)
    if not on_a_terminal():
        return IterationProgress(total, description)
    try:
        from tqdm import tqdm
    except ImportError:
        logger.info("tqdm is not installed (pip install -e \".[dist]\" brings it): progress as a log line every 10 %%")
        return IterationProgress(total, description)
    return tqdm(total=total, desc=description, unit="it", mininterval=1.0, dynamic_ncols=True)


def on_a_terminal() -> bool:
    """Whether the console is a terminal: the original standard error of an active
    :class:`launcher.reporting.console.Console`, else ``sys.stderr``."""
    from launcher.reporting import console

    active = console.active()
    return active.terminal if active is not None else sys.stderr.isatty()
