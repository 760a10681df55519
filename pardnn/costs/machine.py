"""Machine: K devices, memory per device, interconnect bandwidth and latency, memory reserve.

A cut edge costs ``latency_us + bytes / bandwidth`` µs; ``limits_bytes`` is ``memory × (1 − reserve)``
(the paper keeps 10 % free). Sizes and rates read as text: ``32GiB``, ``16 GB``, ``900GB/s``, ``25us``,
``0.5ms`` (k, M, G, T powers of 1000; Ki, Mi, Gi, Ti of 1024; a bare number is bytes, bytes/s or µs).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from pardnn.errors import InvalidMachineError

__all__ = ["Machine", "format_bytes", "parse_bandwidth", "parse_bytes", "parse_duration_us"]

DEFAULT_RESERVE = 0.10
DEFAULT_BANDWIDTH_BPS = 150e9  # NVLink 2 / NVSwitch per-direction order of magnitude (DGX-2)
DEFAULT_LATENCY_US = 25.0
_INT64_MAX = 2**63 - 1  # the largest size the int64 arrays hold

_PREFIX = {
    "": 1,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
    "t": 10**12,
    "p": 10**15,
    "ki": 2**10,
    "mi": 2**20,
    "gi": 2**30,
    "ti": 2**40,
    "pi": 2**50,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMgGtTpP]i?)?\s*([bB])?\s*$")
_TIME_UNITS = {"us": 1.0, "µs": 1.0, "ns": 1e-3, "ms": 1e3, "s": 1e6, "": 1.0}
_TIME = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(us|µs|ns|ms|s)?\s*$")


def parse_bytes(value: str | int | float, what: str = "size") -> int:
    """``'32GiB'`` → 34359738368 (a whole number stays exact). Raises :class:`InvalidMachineError` naming ``what``."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if value < 0:
            raise InvalidMachineError(f"{what}: {value!r} must be a finite size >= 0")
        return int(value)
    if isinstance(value, float):
        number = value
    else:
        match = _SIZE.match(str(value))
        if not match:
            raise InvalidMachineError(f"{what}: cannot read {value!r}; write e.g. 32GiB, 16GB, 512MiB or 1000000")
        number = float(match.group(1)) * _PREFIX[(match.group(2) or "").lower()]
    if not np.isfinite(number) or number < 0:
        raise InvalidMachineError(f"{what}: {value!r} must be a finite size >= 0")
    return round(number)


def parse_bandwidth(value: str | int | float, what: str = "bandwidth") -> float:
    """``'900GB/s'`` → 9e11 bytes per second (``/s`` optional)."""
    text = value if not isinstance(value, str) else re.sub(r"\s*/\s*s(ec)?\s*$", "", value)
    rate = float(parse_bytes(text, what)) if isinstance(text, str) else float(text)
    if not np.isfinite(rate) or rate <= 0:
        raise InvalidMachineError(f"{what}: {value!r} must be > 0 bytes per second")
    return rate


def parse_duration_us(value: str | int | float, what: str = "latency") -> float:
    """``'25us'`` → 25.0, ``'0.5ms'`` → 500.0 (microseconds; a bare number is microseconds)."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        number = float(value)
    else:
        match = _TIME.match(str(value))
        if not match:
            raise InvalidMachineError(f"{what}: cannot read {value!r}; write e.g. 25us, 0.5ms or 25")
        number = float(match.group(1)) * _TIME_UNITS[match.group(2) or ""]
    if not np.isfinite(number) or number < 0:
        raise InvalidMachineError(f"{what}: {value!r} must be a finite time >= 0")
    return number


def format_bytes(value: float) -> str:
    """``34359738368`` → ``'32.00 GiB'``."""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Machine:
    """K devices of one node.

    Parameters
    ----------
    devices:
        Number of devices K (>= 1).
    memory:
        Memory per device: one size for all, or a list of K sizes; ``None`` means unlimited.
        Sizes may be ints (bytes) or strings (``"32GiB"``).
    bandwidth:
        Interconnect bandwidth between two devices, bytes per second (or ``"150GB/s"``).
    latency:
        Per-transfer latency in microseconds (or ``"25us"``).
    reserve:
        Fraction of each device's memory kept free (0 <= reserve < 1), default 0.10.

    Examples
    --------
    >>> m = Machine(4, memory="32GiB", bandwidth="150GB/s", latency="25us")
    >>> m.limits_bytes.tolist()[0] == int(32 * 2**30 * 0.9)   # what the placer may use: 90 %
    True
    >>> m.comm_us(1_500_000)   # one transfer of 1.5 MB: 25 µs + 10 µs
    35.0
    """

    devices: int
    memory: int | str | Sequence[int | str] | None = None
    bandwidth: float | str = DEFAULT_BANDWIDTH_BPS
    latency: float | str = DEFAULT_LATENCY_US
    reserve: float = DEFAULT_RESERVE
    memory_bytes: np.ndarray = field(init=False, repr=False, compare=False)
    bandwidth_Bps: float = field(init=False, repr=False, compare=False)
    latency_us: float = field(init=False, repr=False, compare=False)
    _limits: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.devices, bool) or not isinstance(self.devices, (int, np.integer)) or self.devices < 1:
            raise InvalidMachineError(f"devices must be a whole number >= 1, got {self.devices!r}")
        object.__setattr__(self, "devices", int(self.devices))
        if not 0 <= float(self.reserve) < 1:
            raise InvalidMachineError(f"reserve must be in [0, 1), got {self.reserve!r} (0.10 keeps 10 % free)")
        object.__setattr__(self, "reserve", float(self.reserve))
        object.__setattr__(self, "memory_bytes", self._memory_array())
        object.__setattr__(self, "bandwidth_Bps", parse_bandwidth(self.bandwidth))
        object.__setattr__(self, "latency_us", parse_duration_us(self.latency))
        object.__setattr__(self, "_limits", self._limits_array())

    def _memory_array(self) -> np.ndarray:
        k = self.devices
        if self.memory is None:
            sizes = [_INT64_MAX] * k
        elif isinstance(self.memory, str) and "," in self.memory:
            sizes = self._sizes(self.memory.split(","))
        elif isinstance(self.memory, (str, int, float, np.integer)):
            sizes = [parse_bytes(self.memory, "memory")] * k
        else:
            sizes = self._sizes(list(self.memory))
        if not all(0 < size <= _INT64_MAX for size in sizes):
            raise InvalidMachineError(f"memory per device must be > 0 and at most 2**63 - 1 bytes, got {sizes}")
        array = np.array(sizes, np.int64)
        array.flags.writeable = False
        return array

    def _sizes(self, items: Sequence[int | str]) -> list[int]:
        if len(items) != self.devices:
            raise InvalidMachineError(
                f"memory lists {len(items)} sizes for {self.devices} devices; give one size or exactly {self.devices}"
            )
        return [parse_bytes(v.strip() if isinstance(v, str) else v, f"memory of device {i}")
                for i, v in enumerate(items)]

    @property
    def bounded(self) -> bool:
        """Whether a memory size was given."""
        return self.memory is not None

    @property
    def limits_bytes(self) -> np.ndarray:
        """Usable memory per device: ``memory × (1 − reserve)`` (int64; huge when unbounded), at most
        2^63 - 2 bytes: the memory tracker's usage saturates at 2^63 - 1 (:mod:`pardnn.emulation.memory`), which
        must never fit. Read-only."""
        return self._limits

    def _limits_array(self) -> np.ndarray:
        if not self.bounded:
            array = self.memory_bytes.copy()
        else:
            usable = np.floor(self.memory_bytes * (1.0 - self.reserve))
            past = usable >= 2.0**63  # float64 rounds sizes near 2**63 up, past int64: those keep their exact size
            exact = np.where(past, self.memory_bytes, np.where(past, 0.0, usable).astype(np.int64))
            array = np.minimum(exact, _INT64_MAX - 1)
        array.flags.writeable = False
        return array

    def comm_us(self, nbytes: np.ndarray | float) -> np.ndarray | float:
        """Cost of moving ``nbytes`` between two different devices, in microseconds."""
        return self.latency_us + np.asarray(nbytes, dtype=np.float64) * (1e6 / self.bandwidth_Bps)

    def edge_comm_us(self, edge_bytes: np.ndarray) -> np.ndarray:
        """Per-edge cost if the edge's ends sit on different devices (float64 array)."""
        return self.latency_us + edge_bytes.astype(np.float64) * (1e6 / self.bandwidth_Bps)

    def describe(self) -> str:
        if self.bounded:
            sizes = {format_bytes(v) for v in self.memory_bytes.tolist()}
            memory = ", ".join(sorted(sizes)) + f" per device, {self.reserve:.0%} reserve"
        else:
            memory = "unlimited memory"
        return (f"{self.devices} devices, {memory}, {self.bandwidth_Bps / 1e9:g} GB/s, "
                f"{self.latency_us:g} us latency")
