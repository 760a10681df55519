"""The launcher's errors, in pardnn's one exception tree (``pardnn.errors.PardnnError``).

The CLI turns every :class:`~pardnn.errors.PardnnError` (a job file ``jobs.JobError`` included) into
one line on stderr and a non-zero exit; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from pardnn.errors import PardnnError


class LaunchError(PardnnError, ValueError):
    """A setting, topology or run that cannot go on: names the value, the rule, and the fix."""


class Terminated(PardnnError):
    """The run was asked to stop (SIGTERM: Slurm's time limit, ``scancel``) and stopped cleanly."""


class AgreedError(LaunchError):
    """An error every rank raises at the same point (found through a collective): no rank is waiting.

    ``exit_code`` keeps the exit code of the error it stands for (3 for an infeasible placement).
    """

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
