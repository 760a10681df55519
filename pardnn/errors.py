"""The one exception tree of pardnn.

``PardnnError`` is the root. ``InvalidGraphError`` is bad input (a file, a line, an op, a value that
breaks a rule); ``InfeasibleError`` means the input is fine but memory is not met: raised as itself
only with a proof that no placement can meet it (:mod:`pardnn.steps.feasibility`), and as its subclass
``NoPlacementFoundError`` when the heuristics merely failed. The CLIs turn these into one clear line
on stderr and a non-zero exit (3 for both memory errors).
"""

from __future__ import annotations


class PardnnError(Exception):
    """Base class of every error pardnn raises on purpose."""


class InvalidGraphError(PardnnError, ValueError):
    """Bad input: names the file, line or op, the value, and what was expected."""


class InvalidMachineError(PardnnError, ValueError):
    """A machine description that cannot be used (negative memory, zero bandwidth, ...)."""


class InvalidPlacementError(PardnnError, ValueError):
    """A placement that does not fit its graph or machine (unknown op, device out of range, ...)."""


class InfeasibleError(PardnnError):
    """Memory cannot be met: names the device, op or group, its need, its limit and what to change.

    Raised as this class only with a proof that *no* placement meets memory, named in the message
    (:func:`pardnn.steps.feasibility.check_feasible`). A heuristic that gives up raises the subclass
    :class:`NoPlacementFoundError` instead, so ``except InfeasibleError`` catches "memory not met"
    either way (exit code 3) and ``proven`` (or catching the subclass first) tells the two apart.
    """

    proven: bool = True


class NoPlacementFoundError(InfeasibleError):
    """No placement meeting memory was *found* — not a proof that none exists.

    The message starts with "no placement found", says what was tried (which heuristic, from which
    placements, how many ops moved), names the device still over its limit with its need and its
    limit, and what to change. Callers may try other placements before giving up.
    """

    proven = False


class MissingDependencyError(PardnnError, ImportError):
    """An optional package a feature needs is not installed; the message says what to install."""


class ScalingError(PardnnError):
    """Costs that do not scale with the batch size as :mod:`pardnn.batch.batchscale` needs (names the op)."""
