"""The rules of a :class:`~pardnn.costs.graph.CostGraph`, each checked in one place.

Each function takes one column as the caller has it and returns it as the graph stores it, or raises
:class:`InvalidGraphError` naming the node or edge, the field, the value and what was expected. The
rules: docs/notes-partitioner.md. O(n) per column.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from numba import njit

from pardnn.errors import InvalidGraphError

__all__ = [
    "BYTES",
    "COST",
    "KIND_NAMES",
    "NAME",
    "Label",
    "byte_column",
    "check_joined_names",
    "check_names",
    "cost_column",
    "edge_bytes_column",
    "edge_indices",
    "edge_label",
    "group_column",
    "kind_column",
    "memory_limit",
    "name_index",
    "node_label",
    "shown",
]

KIND_NAMES: tuple[str, ...] = ("normal", "residual", "reference")

# What each rule expects, in the words every message uses (the file reader's too).
COST = "a finite number >= 0"
BYTES = "a whole number of bytes >= 0"
NAME = "a non-empty string"
KIND = f"one of {', '.join(KIND_NAMES)}"

INT64_MAX = 2**63 - 1
_EXACT = 2**53  # floats below this hold every whole number exactly
_KIND_CODES: dict[Any, int] = {**{name: code for code, name in enumerate(KIND_NAMES)}, 0: 0, 1: 1, 2: 2}

Label = Callable[[int], str]


def shown(value: Any) -> str:
    """``repr(value)``, cut short when long (a 400-digit number)."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


class Names(Protocol):
    """What the labels read of a graph's names: their count and one by index."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int, /) -> Any: ...


def node_label(names: Names) -> Label:
    """``node #i 'name'`` (just ``node #i`` when the name is not a usable string)."""

    def label(i: int) -> str:
        name = names[i] if i < len(names) else None
        return f"node #{i} {name!r}" if isinstance(name, str) and name else f"node #{i}"

    return label


def edge_label(names: Names, src: np.ndarray, dst: np.ndarray) -> Label:
    """``edge #k 'src' -> 'dst'`` for edges given by node index."""
    return lambda k: f"edge #{k} {names[src[k]]!r} -> {names[dst[k]]!r}"


def name_index(names: Sequence[Any], *, typed: bool = False) -> dict[str, int]:
    """``{name: index}`` of unique, non-empty string names.

    ``typed``: the caller's decoder made every name a ``str`` (the file schema does), so the pass
    checking types (10 ms for 200,000 names) is skipped; uniqueness and non-emptiness are checked.
    """
    n = len(names)
    try:
        index = dict(zip(names, range(n), strict=True))
    except TypeError:  # an unhashable name
        index = {}
    if len(index) == n and "" not in index and (typed or set(map(type, index)) <= {str}):
        return index
    seen: dict[str, int] = {}  # something is wrong: find the first culprit and name it
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name:
            raise InvalidGraphError(f"node #{i}: name = {shown(name)}; expected {NAME}")
        if name in seen:
            raise InvalidGraphError(f"node #{i} {name!r}: duplicate name (node #{seen[name]} has it too)")
        seen[name] = i
    return seen  # string subclasses (numpy's str_)


def check_names(names: Sequence[Any]) -> None:
    """Raise unless ``names`` are unique non-empty strings, as :func:`name_index` does, without building
    the index (a set of 1,000,000 names costs a third of the dict)."""
    try:
        unique = set(names)
    except TypeError:  # an unhashable name
        unique = set()
    # The types over the names in order (over the set, scattered in memory, it is five times slower).
    if len(unique) != len(names) or "" in unique or not set(map(type, names)) <= {str}:
        name_index(names)  # names the culprit (or accepts string subclasses)


def check_joined_names(joined: str) -> None:
    """:func:`check_names` for names joined by NUL into one string (a binary graph file's form) without
    splitting them: a 64-bit hash of each name's UTF-8 bytes, sorted; only when two hashes collide or
    a name is empty are the names split and checked one by one (naming the culprit, or passing on a
    mere hash collision). On 1,000,000 names: about 0.1 s against 0.3 s to split and check them."""
    blob = np.frombuffer(joined.encode("utf-8", "surrogatepass"), np.uint8)
    hashes, empty = _name_hashes(blob, joined.count("\0") + 1)
    hashes.sort()
    if empty or (hashes[1:] == hashes[:-1]).any():
        check_names(joined.split("\0"))


_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


@njit(cache=True, nogil=True)
def _name_hashes(blob: np.ndarray, n: int) -> tuple[np.ndarray, bool]:
    """FNV-1a of each of the ``n`` NUL-separated names in ``blob``, and whether any name is empty."""
    hashes = np.empty(n, np.uint64)
    empty = False
    i = 0
    h = _FNV_OFFSET
    length = 0
    for b in blob:
        if b == 0:
            hashes[i] = h
            empty |= length == 0
            i += 1
            h = _FNV_OFFSET
            length = 0
        else:
            h = (h ^ np.uint64(b)) * _FNV_PRIME
            length += 1
    hashes[i] = h
    empty |= length == 0
    return hashes, empty


def edge_indices(index: dict[str, int], src: Sequence[Any], dst: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Node indices of edges given by op name; an unknown name raises, naming the edge."""
    try:
        return (np.fromiter(map(index.__getitem__, src), np.int64, len(src)),
                np.fromiter(map(index.__getitem__, dst), np.int64, len(dst)))
    except (KeyError, TypeError):
        pass
    for k, (s, d) in enumerate(zip(src, dst, strict=True)):
        for end in (s, d):
            if not isinstance(end, str) or end not in index:
                raise InvalidGraphError(
                    f"edge #{k} {s!r} -> {d!r}: unknown op {end!r} (not among the {len(index)} ops)"
                )
    raise InvalidGraphError(f"{len(src)} edge sources for {len(dst)} destinations")


def _shaped(array: np.ndarray, field: str, n: int, graph: str) -> np.ndarray:
    if array.shape != (n,):
        raise InvalidGraphError(f"graph {graph!r}: {field} has {array.size} values for {n} ops")
    return array


def cost_column(values: npt.ArrayLike, field: str, n: int, label: Label, graph: str) -> np.ndarray:
    """float64 column of finite numbers >= 0 (microseconds)."""
    try:
        array = np.array(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError, OverflowError):  # a value that is no number, or beyond the float range
        items = values.tolist() if isinstance(values, np.ndarray) else list(values)  # type: ignore[union-attr]
        array = np.array([_float(v) for v in items], dtype=np.float64)
    _shaped(array, field, n, graph)
    bad = ~np.isfinite(array) | (array < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InvalidGraphError(f"{label(i)}: {field} = {shown(_original(values, i, array))}; expected {COST}")
    return array


def byte_column(values: npt.ArrayLike, field: str, n: int, label: Label, graph: str) -> np.ndarray:
    """int64 column of whole numbers in 0..2**63-1 (bytes); whole floats (``4096.0``) are converted."""
    listed = not isinstance(values, np.ndarray)
    try:
        array = np.array(values).reshape(-1)  # a list of ints gives int64; a float among them, float64
    except (TypeError, ValueError, OverflowError):
        array = np.array(list(values), dtype=object)  # type: ignore[arg-type]
    _shaped(array, field, n, graph)
    if array.dtype.kind in "ib":
        out = array.astype(np.int64)
    elif array.dtype.kind == "f" and (not listed or _below_exact(array)):
        bad = ~np.isfinite(array) | (array != np.floor(array)) | (array < 0) | (array >= 2.0**63)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise _bytes_error(label(i), field, _original(values, i, array))
        out = array.astype(np.int64)
    else:  # uint64 beyond int64, ints beyond uint64, big ints among floats, strings: one by one
        items = list(values) if listed and len(values) == n else array.tolist()  # type: ignore[arg-type]
        whole = [_whole(v) for v in items]
        for i, value in enumerate(whole):
            if value is None or not 0 <= value <= INT64_MAX:
                raise _bytes_error(label(i), field, items[i])
        out = np.array(whole, dtype=np.int64)
    negative = out < 0
    if negative.any():
        i = int(np.flatnonzero(negative)[0])
        raise _bytes_error(label(i), field, int(out[i]))
    return out


def _below_exact(array: np.ndarray) -> bool:
    """Whether a float column gathered from Python values converts exactly (no int lost precision)."""
    finite = array[np.isfinite(array)]
    return not finite.size or float(np.abs(finite).max()) < _EXACT


def _bytes_error(label: str, field: str, value: Any) -> InvalidGraphError:
    if isinstance(value, int) and value > INT64_MAX:
        return InvalidGraphError(f"{label}: {field} = {shown(value)}; expected {BYTES} and < 2**63")
    return InvalidGraphError(f"{label}: {field} = {shown(value)}; expected {BYTES}")


def edge_bytes_column(
    values: npt.ArrayLike | None, src: np.ndarray, out_bytes: np.ndarray, label: Label, graph: str
) -> np.ndarray:
    """Bytes of each edge; ``None`` (for all, or for one edge) means the producer's ``out_bytes``."""
    if values is None:
        return out_bytes[src]
    if isinstance(values, np.ndarray):
        values = values.reshape(-1)
    else:
        values = _listed(values)
        if None in values and len(values) == src.size:
            producer = out_bytes[src].tolist()
            values = [producer[k] if value is None else value for k, value in enumerate(values)]
    if len(values) != src.size:
        raise InvalidGraphError(f"graph {graph!r}: {len(values)} edge byte counts for {src.size} edges")
    return byte_column(values, "bytes", src.size, label, graph)


def kind_column(kind: npt.ArrayLike | Sequence[str] | None, n: int, label: Label, graph: str) -> np.ndarray:
    """int8 codes of :class:`~pardnn.costs.graph.Kind` from names or codes; default all normal."""
    if kind is None:
        return np.zeros(n, np.int8)
    if isinstance(kind, np.ndarray) and kind.dtype.kind in "iu" and kind.shape == (n,):  # codes: one pass
        bad = (kind < 0) | (kind > 2)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InvalidGraphError(f"{label(i)}: kind = {kind[i].item()!r}; expected 0, 1 or 2 ({KIND})")
        return kind.astype(np.int8)
    values = kind.tolist() if isinstance(kind, np.ndarray) else kind if isinstance(kind, Sequence) else list(kind)
    if len(values) != n or (isinstance(kind, np.ndarray) and kind.ndim != 1):
        raise InvalidGraphError(f"graph {graph!r}: kind has {np.size(kind)} values for {n} ops")
    try:
        codes = np.fromiter(map(_KIND_CODES.__getitem__, values), np.int8, n)
    except (KeyError, TypeError):  # an unknown or unhashable value: find it
        codes = np.array([_KIND_CODES.get(v, -1) if isinstance(v, (str, int)) else -1 for v in values], np.int8)
    bad = codes < 0
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        codes = "" if isinstance(values[i], str) else " (or 0, 1, 2)"
        raise InvalidGraphError(f"{label(i)}: kind = {shown(values[i])}; expected {KIND}{codes}")
    return codes


def group_column(
    colocation: Sequence[Any] | npt.ArrayLike | None, n: int, label: Label, graph: str,
    labels: Sequence[str] | None = None,
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Group ids (-1: none) numbered by first appearance, and each group's label.

    Labels are strings with ``None`` for no group, or integer ids with -1 for none (labelled by
    their number); anything else is labelled by ``str``. With ``labels``, ``colocation`` holds ids
    into them (-1: none), and the answer is that of the labels they pick; when the ids are already
    numbered by first appearance and the labels distinct (as a graph's own columns are), the ids are
    kept as they are (no million label strings looked up again).
    """
    if colocation is None:
        return np.full(n, -1, np.int64), ()
    if labels is not None:
        kept = _numbered_ids(colocation, n, labels)
        if kept is not None:
            return kept, tuple(labels)
        colocation = np.array([*labels, None], dtype=object)[np.asarray(colocation, dtype=np.intp)].tolist()
    values = colocation.tolist() if isinstance(colocation, np.ndarray) else _listed(colocation)
    if len(values) != n or (isinstance(colocation, np.ndarray) and colocation.ndim != 1):
        raise InvalidGraphError(f"graph {graph!r}: colocation has {np.size(colocation)} values for {n} ops")
    kinds = set(map(type, values))
    if kinds <= {str, type(None)}:  # labels and None: all C-level passes
        labels = [g for g in dict.fromkeys(values) if g is not None]  # by first appearance
        ids = np.fromiter(map(dict(zip(labels, range(len(labels)))).get, values, repeat(-1)), np.int64, n)
        return ids, tuple(labels)
    if all(issubclass(k, (int, np.integer)) for k in kinds):
        ids = np.array(values, dtype=np.int64)
        if (ids < -1).any():
            i = int(np.flatnonzero(ids < -1)[0])
            raise InvalidGraphError(f"{label(i)}: colocation = {int(ids[i])}; expected a group id >= 0 or -1")
        grouped = np.flatnonzero(ids >= 0)
        numbers, first = np.unique(ids[grouped], return_index=True)
        by_appearance = numbers[np.argsort(first, kind="stable")]
        renumber = np.empty(by_appearance.size, np.int64)
        renumber[np.searchsorted(numbers, by_appearance)] = np.arange(by_appearance.size)
        out = np.full(n, -1, np.int64)
        out[grouped] = renumber[np.searchsorted(numbers, ids[grouped])]
        return out, tuple(str(g) for g in by_appearance.tolist())
    group_ids: dict[str, int] = {}
    out = np.full(n, -1, np.int64)
    for i, value in enumerate(values):
        if value is not None and value != -1:
            out[i] = group_ids.setdefault(str(value), len(group_ids))
    return out, tuple(group_ids)


def _numbered_ids(ids: Any, n: int, labels: Sequence[str]) -> np.ndarray | None:
    """``ids`` as int64 when they are n group ids into ``labels`` numbered by first appearance, every
    label used and every label a distinct string; ``None`` otherwise."""
    if not isinstance(ids, np.ndarray) or ids.shape != (n,) or ids.dtype.kind not in "iu":
        return None
    if len(set(labels)) != len(labels) or not all(isinstance(g, str) for g in labels):
        return None
    out = ids.astype(np.int64)
    if out.min(initial=-1) < -1:
        return None
    grouped = out[out >= 0]
    if not grouped.size:
        return None if labels else out
    seen = np.maximum.accumulate(grouped)  # the largest id so far: a new group is exactly one more
    if grouped[0] != 0 or seen[-1] != len(labels) - 1 or (grouped[1:] > seen[:-1] + 1).any():
        return None
    return out


def memory_limit(value: Any, graph: str) -> int | None:
    """A per-device memory limit: None, or a whole number of bytes > 0."""
    if value is None:
        return None
    whole = None if isinstance(value, (bool, np.bool_)) else _whole(value)
    if whole is None or not 0 < whole <= INT64_MAX:
        raise InvalidGraphError(
            f"graph {graph!r}: memory_limit_bytes = {shown(value)}; expected a whole number of bytes > 0 or None"
        )
    return whole


def _listed(values: Any) -> list[Any]:
    return values if isinstance(values, list) else list(values)


def _whole(value: Any) -> int | None:
    """``value`` as an int if it is a whole number (``3``, ``3.0``, ``np.int64(3)``), else None."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    return None


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return math.nan


def _original(values: Any, i: int, array: np.ndarray) -> Any:
    """The value at ``i`` as the caller gave it (a list's own element), else the array's."""
    if isinstance(values, (list, tuple)) and len(values) == array.size:
        return values[i]
    return array[i].item()
