"""The launcher's errors, in pardnn's one exception tree (``pardnn.errors.PardnnError``).

The CLI turns every :class:`~pardnn.errors.PardnnError` (a job file ``jobs.JobError`` included) into
one line on stderr and a non-zero exit; anything else is a bug and keeps its traceback.

A run that is told to stop, or stops making progress, ends with a :class:`Stopped` subclass; each
names the run's status (``summary.json``, ``status.json``, ``results.csv``) and its exit code.
"""

from __future__ import annotations

from pardnn.errors import PardnnError

__all__ = ["UNTRAINED", "AgreedError", "DoesNotFit", "Inconsistent", "Interrupted", "LaunchError", "NotPlaced",
           "Stalled", "Stopped", "Terminated"]


class LaunchError(PardnnError, ValueError):
    """A setting, topology or run that cannot go on: names the value, the rule, and the fix."""


class Stopped(PardnnError):
    """The run ended before its last iteration; ``status`` and ``exit_code`` say why."""

    status = "stopped"
    exit_code = 1


class Terminated(Stopped):
    """Asked to stop (SIGTERM: Slurm's time limit, ``scancel``; SIGUSR1 forwarded by ``mpirun``)."""

    status = "time_limit"
    exit_code = 143  # 128 + SIGTERM, what a shell reports for a process killed by SIGTERM


class Interrupted(Stopped):
    """Interrupted from the keyboard (SIGINT, Ctrl-C)."""

    status = "interrupted"
    exit_code = 130  # 128 + SIGINT


class Stalled(Stopped):
    """No iteration completed on any rank within the stall timeout (:mod:`launcher.rank.heartbeat`)."""

    status = "stalled"
    exit_code = 4


class AgreedError(LaunchError):
    """An error every rank raises at the same point (found through a collective): no rank is waiting.

    ``exit_code`` keeps the exit code of the error it stands for (3 for an infeasible placement).
    """

    status = "failed"

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Inconsistent(AgreedError):
    """The nodes' replicas ended training with different weights or optimizer state (found by all ranks)."""

    status = "inconsistent"


class DoesNotFit(AgreedError):
    """The step needs more memory than a device has (the emulated placement, or TensorFlow running out):
    the run ends before training, with a ``results.csv`` row. Exit code 3, as an infeasible placement."""

    status = "does_not_fit"

    def __init__(self, message: str) -> None:
        super().__init__(message, 3)


class NotPlaced(AgreedError):
    """The placer gave no placement (a graph too large for it, a dependency missing): the run ends
    before training, with a ``results.csv`` row."""

    status = "no_placement"


# The statuses of a run that ended before training on its own terms (a comparison goes on after them).
UNTRAINED = (DoesNotFit.status, NotPlaced.status)
