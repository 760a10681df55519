"""The one exception tree of pardnn.

``PardnnError`` is the root. ``InvalidGraphError`` is bad input (a file, a line, an op, a value that
breaks a rule); ``InfeasibleError`` means the input is fine but no placement meets memory. The CLIs
turn both into one clear line on stderr and a non-zero exit.
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
    """No placement meets memory: names the device, its need, its limit and what to change."""


class MissingDependencyError(PardnnError, ImportError):
    """An optional package a feature needs is not installed; the message says what to install."""


class ScalingError(PardnnError):
    """Costs that do not scale with the batch size as :mod:`pardnn.batchscale` needs (names the op)."""
