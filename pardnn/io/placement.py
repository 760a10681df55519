"""Placement files: one device index per op of a graph, text or JSON, optionally with a run order.

:func:`read_placement` returns the devices; :func:`read_ordered_placement` also the checked order;
writers are :mod:`pardnn.io.placement_writer`'s (re-exported). Formats: docs/formats.md ("Placement");
choices: docs/notes-partitioner.md.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from pardnn.costs.graph import CostGraph
from pardnn.emulation.checks import check_order
from pardnn.errors import InvalidPlacementError
from pardnn.io.files import read_text
from pardnn.io.placement_writer import COMMENT, format_placement, write_placement

__all__ = ["format_placement", "parse_placement_lines", "read_ordered_placement", "read_placement", "write_placement"]

PathLike = str | os.PathLike[str]

_MAX_LISTED = 8
_INT64_MAX = 2**63 - 1
_INTEGER = re.compile(r"[+-]?[0-9]+")


# ---------------------------------------------------------------------------------------- reading
def read_placement(path: PathLike, graph: CostGraph, devices: int | None = None) -> np.ndarray:
    """Read a placement file for ``graph``.

    Parameters
    ----------
    path:
        A text file of ``op_name device_index`` lines, or a JSON object of name to index (chosen by
        a ``.json`` suffix or a first non-blank character ``{``).
    graph:
        The graph the placement is for; every op must be placed exactly once.
    devices:
        Number of devices K; when given, every index must be in ``0..K-1``.

    Returns
    -------
    numpy.ndarray
        int64 array of length ``graph.n``: the device of each op, in graph order.

    Raises
    ------
    InvalidPlacementError
        File missing or unreadable; and, naming the file and line (the op for JSON): a malformed
        line, an unknown op, an op listed twice, a device that is not an integer or is out of range,
        or ops not placed (up to 8 named, and their count).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from pardnn import CostGraph
    >>> g = CostGraph(["a", "b"], [1.0, 1.0], [0, 0], src=[0], dst=[1])
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "placement.txt"
    >>> write_placement(path, g, [1, 0])
    >>> read_placement(path, g, devices=2).tolist()
    [1, 0]
    >>> write_placement(path, g, [1, 7])
    >>> read_placement(path, g, devices=2)
    Traceback (most recent call last):
    ...
    pardnn.errors.InvalidPlacementError: ...b...7...
    """
    return _read(path, graph, devices)[0]


def _read(path: PathLike, graph: CostGraph, devices: int | None) -> tuple[np.ndarray, list[int] | None]:
    path = Path(path)
    source = str(path)
    text = read_text(path, InvalidPlacementError, "a placement file")
    if path.suffix.lower() == ".json" or text.lstrip().startswith("{"):
        return _parse_placement_json(text, graph, source, devices)
    return _parse_lines(text.splitlines(), graph, source, devices)


def read_ordered_placement(path: PathLike, graph: CostGraph,
                           devices: int | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Read a placement file for ``graph`` with its run order, if it has one.

    Returns ``(placement, order)``: the devices as :func:`read_placement` returns them, and each op's
    position on its device (int64, dense: 0..n_d - 1) or ``None`` for a file without positions.

    Raises
    ------
    InvalidPlacementError
        As :func:`read_placement`; and a line or entry not in the file's form, a position that is
        not a non-negative integer, or an order that contradicts the graph
        (:func:`pardnn.emulation.checks.check_order`).
    """
    placement, position = _read(path, graph, devices)
    if position is None:
        return placement, None
    return placement, check_order(graph, placement, position, str(path))


def parse_placement_lines(
    lines: Iterable[str], graph: CostGraph, source: str = "<string>", *, devices: int | None = None
) -> np.ndarray:
    """Parse the lines of a text placement (``op_name device_index`` per line) for ``graph``.

    Parameters
    ----------
    lines:
        The lines, with or without their line endings (a file object works).
    graph:
        The graph the placement is for.
    source:
        What to call the input in error messages (usually the file name).
    devices:
        Number of devices K; when given, every index must be in ``0..K-1``.

    Returns
    -------
    numpy.ndarray
        int64 device index of each op, in graph order.

    Raises
    ------
    InvalidPlacementError
        See :func:`read_placement`; messages read ``source:line: ...``.

    Notes
    -----
    O(|V| + number of lines). The positions of an ordered file are read and ignored
    (:func:`read_ordered_placement` returns them).
    """
    return _parse_lines(lines, graph, source, devices)[0]


def _parse_lines(lines: Iterable[str], graph: CostGraph, source: str,
                 devices: int | None) -> tuple[np.ndarray, list[int] | None]:
    highest = _highest_device(devices)
    index = graph.index
    placement = [-1] * graph.n
    line_of = [0] * graph.n
    position: list[int] | None = None
    ordered: bool | None = None
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if "#" in line:
            comment = COMMENT.search(line)
            if comment is not None:
                line = line[: comment.start()].rstrip()
        if not line:
            continue
        if ordered is None:  # the first line decides the form: ordered when its first field names an op
            parts = line.split()  # and the line read as 'name device' does not (a name may hold spaces)
            ordered = (len(parts) == 3 and all(_INTEGER.fullmatch(part) for part in parts[1:])
                       and parts[0] in index and line.rsplit(None, 1)[0] not in index)
            position = [-1] * graph.n if ordered else None
        if ordered:
            fields = line.split()
            if len(fields) != 3:
                raise InvalidPlacementError(f"{source}:{number}: expected 'op_name device_index position' "
                                            f"(the file's first line has a position), got {line!r}")
            op_name, device_text, position_text = fields
        else:
            fields = line.rsplit(None, 1)
            if len(fields) != 2:
                raise InvalidPlacementError(f"{source}:{number}: expected 'op_name device_index', got {line!r}")
            op_name, device_text = fields
        v = index.get(op_name)
        if v is None:
            raise InvalidPlacementError(
                f"{source}:{number}: unknown op {op_name!r} (not among the {graph.n} ops of the graph)"
            )
        if line_of[v]:
            raise InvalidPlacementError(f"{source}:{number}: op {op_name!r} listed twice (first on line {line_of[v]})")
        if not (device_text.isascii() and device_text.isdigit()) and not _INTEGER.fullmatch(device_text):
            raise InvalidPlacementError(
                f"{source}:{number}: op {op_name!r}: device {device_text!r} is not an integer (expected a device index)"
            )
        device = int(device_text)
        if not 0 <= device <= highest:
            raise InvalidPlacementError(f"{source}:{number}: op {op_name!r}: {_out_of_range(device, devices)}")
        placement[v] = device
        line_of[v] = number
        if position is not None:
            position[v] = _position(position_text, op_name, f"{source}:{number}")
    return _complete(placement, graph, source), position


def _position(text: str, op_name: str, where: str) -> int:
    if not _INTEGER.fullmatch(text) or int(text) < 0:
        raise InvalidPlacementError(f"{where}: op {op_name!r}: position {text!r} is not an integer >= 0 "
                                    f"(its place in its device's run order)")
    return int(text)


def _parse_placement_json(text: str, graph: CostGraph, source: str,
                          devices: int | None) -> tuple[np.ndarray, list[int] | None]:
    highest = _highest_device(devices)

    def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                raise InvalidPlacementError(f"{source}: op {key!r} listed twice")
            seen[key] = value
        return seen

    try:
        mapping = json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        raise InvalidPlacementError(
            f"{source}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from exc
    if not isinstance(mapping, dict):
        raise InvalidPlacementError(f"{source}: expected a JSON object mapping op name to device index")
    index = graph.index
    placement = [-1] * graph.n
    position: list[int] | None = None
    ordered: bool | None = None
    for op_name, value in mapping.items():
        if op_name not in index:
            raise InvalidPlacementError(f"{source}: unknown op {op_name!r} (not among the {graph.n} ops of the graph)")
        if ordered is None:  # the first entry decides the form
            ordered = isinstance(value, list)
            position = [-1] * graph.n if ordered else None
        if ordered:
            if not isinstance(value, list) or len(value) != 2:
                raise InvalidPlacementError(f"{source}: op {op_name!r}: {value!r}; expected [device_index, position] "
                                            f"(the file's first entry has a position)")
            device, where = value
            if type(where) is not int or where < 0:
                raise InvalidPlacementError(f"{source}: op {op_name!r}: position {where!r} is not an integer >= 0 "
                                            f"(its place in its device's run order)")
            assert position is not None
            position[index[op_name]] = where
        else:
            device = value
        if type(device) is not int:
            raise InvalidPlacementError(
                f"{source}: op {op_name!r}: device {device!r} is not an integer (expected a device index)"
            )
        if not 0 <= device <= highest:
            raise InvalidPlacementError(f"{source}: op {op_name!r}: {_out_of_range(device, devices)}")
        placement[index[op_name]] = device
    return _complete(placement, graph, source), position


def _highest_device(devices: int | None) -> int:
    """The largest valid device index."""
    if devices is None:
        return _INT64_MAX
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise ValueError(f"devices must be a positive integer or None, got {devices!r}")
    return devices - 1


def _out_of_range(device: int, devices: int | None) -> str:
    if devices is not None:
        expected = f"0..{devices - 1} ({devices} devices)"
    else:
        expected = ">= 0" if device < 0 else "an int64 index"
    return f"device {device} out of range; expected {expected}"


def _complete(devices_of: list[int], graph: CostGraph, source: str) -> np.ndarray:
    """``devices_of`` as an int64 array, after checking that no op is left at -1 (unplaced)."""
    placement = np.array(devices_of, dtype=np.int64)
    missing = np.flatnonzero(placement < 0)
    if missing.size:
        names = [graph.names[v] for v in missing[:_MAX_LISTED].tolist()]
        more = f", ... ({missing.size} in all)" if missing.size > _MAX_LISTED else ""
        raise InvalidPlacementError(
            f"{source}: {missing.size} of {graph.n} ops not placed: {', '.join(map(repr, names))}{more}"
        )
    return placement
