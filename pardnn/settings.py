"""The settings schema: every knob a job file, ``pardnn-launch`` and the ``pardnn`` command share.

One :class:`Param` per key (type, default, range or choices, help) in :data:`PLACEMENT`, so a default is
written once; choices come from the registries. :meth:`Param.check` checks a parsed value,
:meth:`Param.parse` text; both raise :class:`ValueError`, and :meth:`Param.expected` says what is accepted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pardnn.costs.machine import DEFAULT_BANDWIDTH_BPS, DEFAULT_LATENCY_US, DEFAULT_RESERVE, parse_bytes
from pardnn.costs.presets import PRESETS
from pardnn.errors import InvalidMachineError
from pardnn.partitioner import MEMORY_HEURISTICS
from pardnn.registry import PLACERS

__all__ = ["ALGORITHMS", "HEURISTIC_CHOICES", "PLACEMENT", "REQUIRED", "RUN", "UNLIMITED", "Param"]

REQUIRED: Any = object()  # default of a key the user must give
UNLIMITED = ("", "none", "unlimited")  # spellings of "no memory limit" for a ``size`` key

ALGORITHMS = tuple(PLACERS)
HEURISTIC_CHOICES = (*MEMORY_HEURISTICS, "none")

_NOUNS = {"int": "a whole number", "float": "a number", "bool": "true or false", "str": "a string",
          "size": "a size > 0 such as '32GiB' (or 'unlimited')", "int_list": "a non-empty list of whole numbers",
          "int_pair": "a pair [start, end] of whole numbers"}


@dataclass(frozen=True)
class Param:
    """One key: its type, default and allowed values.

    ``kind`` is ``int``, ``float``, ``bool``, ``str``, ``size`` (bytes as text, ``'32GiB'``; ``None``
    or ``'unlimited'`` for no limit; kept as text), ``int_list`` (non-empty list of whole numbers,
    each checked against ``low``/``high``) or ``int_pair``. Bounds are inclusive unless ``low_open``
    / ``high_open``.
    """

    kind: str
    default: Any = REQUIRED
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple[Any, ...] | None = None
    help: str = ""
    high_open: bool = False

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def expected(self) -> str:
        """What the key accepts, in words: ``a whole number >= 1``, ``one of 'adam', 'momentum'``."""
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        words = _NOUNS[self.kind]
        if self.low is not None and self.high is not None:
            words += (f" in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}"
                      f"{')' if self.high_open else ']'}")
        elif self.low is not None:
            words += f" {'>' if self.low_open else '>='} {self.low:g}"
        elif self.high is not None:
            words += f" {'<' if self.high_open else '<='} {self.high:g}"
        return words

    def check(self, value: Any) -> Any:
        """The value, normalised (ints to floats for ``float``, lists to tuples); ``ValueError`` if bad."""
        if self.kind == "int_list":
            if not isinstance(value, (list, tuple)) or not value:
                raise ValueError
            return tuple(self._scalar("int", item) for item in value)
        if self.kind == "int_pair":
            if not isinstance(value, (list, tuple)) or len(value) != 2:
                raise ValueError
            return tuple(self._scalar("int", item, bounded=False) for item in value)
        if self.kind == "size":
            return _size(value)
        return self._scalar(self.kind, value)

    def parse(self, text: str) -> Any:
        """:meth:`check` for command-line text (``"4"``, ``"0.1"``, ``"32GiB"``, ``"100:150"``)."""
        text = text.strip()
        if self.kind == "int":
            value: Any = int(text)
        elif self.kind == "float":
            value = float(text)
        elif self.kind == "bool":
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            value = text.lower() in ("true", "1", "yes")
        elif self.kind == "int_list":
            value = [int(part) for part in text.split(",") if part.strip()]
        elif self.kind == "int_pair":
            parts = text.replace("-", ":").replace(",", ":").split(":")
            value = [int(part) for part in parts]
        elif self.kind == "str" and self.choices is not None:
            value = text.lower()
        else:
            value = text
        return self.check(value)

    def _scalar(self, kind: str, value: Any, *, bounded: bool = True) -> Any:
        if kind == "bool":
            if not isinstance(value, bool):
                raise ValueError
            return value
        if kind == "str":
            if not isinstance(value, str):
                raise ValueError
        elif kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError
        elif kind == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError
            value = float(value)
        if self.choices is not None and value not in self.choices:
            raise ValueError
        if bounded and kind in ("int", "float"):
            if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
                raise ValueError
            if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
                raise ValueError
        return value


def _size(value: Any) -> str | None:
    """A memory size kept as the user wrote it; ``None`` for no limit. ``ValueError`` if not > 0 bytes."""
    if value is None or (isinstance(value, str) and value.strip().lower() in UNLIMITED):
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError
    try:
        size = parse_bytes(value, "memory")
    except InvalidMachineError:
        raise ValueError from None
    if size <= 0:
        raise ValueError
    return str(value)


# How a node's replica is placed: the [placement] table of a job file, the launcher's settings and
# the `pardnn` command's options. Ranges are the Machine's own (reserve in [0, 1)).
PLACEMENT: dict[str, Param] = {
    "devices_per_node": Param("int", 4, 1, 64, help="devices (GPUs) per node that share one replica"),
    "memory": Param("size", None, help="memory per device, e.g. '32GiB'; absent = unlimited"),
    "reserve": Param("float", DEFAULT_RESERVE, 0.0, 1.0, high_open=True,
                     help="fraction of each device's memory kept free (fragmentation, workspace)"),
    "memory_heuristic": Param("str", "overflow", choices=HEURISTIC_CHOICES,
                              help="how to meet the memory limit: 'overflow' (heuristic I: emulate and move ops; "
                                   "meets the limits or fails), 'balance' (heuristic II: balance memory shares, no "
                                   "guarantee), 'none' (Step 1 only)"),
    "run_order": Param("bool", True,
                       help="let each device run its ops in a chosen order (upward rank, enforced with control "
                            "dependencies) when that makes the emulated step strictly shorter and still fits; "
                            "false: every device runs in order of readiness, as TensorFlow does by itself"),
    "algorithm": Param("str", "pardnn", choices=ALGORITHMS, help="placer: pardnn (the paper) or a baseline"),
    "placer": Param("str", "pardnn", choices=ALGORITHMS,
                    help="pardnn-launch's placer: any of pardnn place --algorithm's (pardnn-paper: ParDNN without "
                         "guard, refinement and run order)"),
    "costs": Param("str", "profile", choices=("profile", "estimate"),
                   help="'profile' (measure a few steps) or 'estimate' (roofline model of device_preset)"),
    "device_preset": Param("str", "v100-32gb", choices=tuple(PRESETS),
                           help="device model for estimated costs and the interconnect"),
    "profile_steps": Param("int", 5, 1, help="traced steps when costs = 'profile'"),
    "bandwidth": Param("str", f"{DEFAULT_BANDWIDTH_BPS / 1e9:g}GB/s",
                       help="interconnect bandwidth between two devices"),
    "latency": Param("str", f"{DEFAULT_LATENCY_US:g}us", help="latency per transfer"),
}


# How pardnn-launch watches a run: [run] keys a job file may set (jobs/schema.py's RUN adds them to its
# own), the launcher's options and keyword arguments. None: derived from the measured step time.
RUN: dict[str, Param] = {
    "stall_timeout": Param("float", None, 0.0,
                           help="seconds without a completed iteration on any rank before the run ends as stalled; "
                                "unset: max(60, 20 x median step time); 0: never"),
}
