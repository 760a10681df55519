"""The compact binary graph file (``.pardnn``): a :class:`~pardnn.costs.graph.CostGraph`'s columns as raw arrays.

:func:`write_binary_graph` and :func:`read_binary_graph` (:func:`is_binary_graph` tells the file): one
file read, one checksum, the graph's own validation. Layout: docs/formats.md ("Binary graph"). Every
error names the file.
"""

from __future__ import annotations

import codecs
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from pardnn.costs.graph import CostGraph
from pardnn.errors import InvalidGraphError
from pardnn.io.files import read_bytes

__all__ = ["BINARY_FORMAT", "BINARY_SUFFIX", "BINARY_VERSION", "MAGIC", "read_binary_graph", "write_binary_graph"]

MAGIC = b"PARDNNGB"
BINARY_FORMAT = "pardnn-graph-binary"
BINARY_VERSION = 1
BINARY_SUFFIX = ".pardnn"
_ALIGN = 64
_PREFIX = struct.Struct("<8sQ")
_EDGE_FIELDS = ("edge_src", "edge_dst", "edge_bytes")  # the constructor's positional edge arguments
_SMALLEST = (np.int8, np.int16, np.int32, np.int64)

PathLike = str | os.PathLike[str]


class _Array(msgspec.Struct, forbid_unknown_fields=True):
    field: str
    dtype: str
    length: int
    offset: int


class _Header(msgspec.Struct, forbid_unknown_fields=True):
    format: str
    version: int
    n: int
    m: int
    data_bytes: int
    crc32: int
    arrays: list[_Array]
    op_types: list[str] = []
    group_names: list[str] = []
    scalars: dict[str, Any] = {}


# ---------------------------------------------------------------------------------------- writing
def write_binary_graph(graph: CostGraph, path: PathLike) -> None:
    """Write ``graph`` as a binary graph file; ``read_binary_graph(path) == graph`` afterwards.

    Deterministic (the same graph gives the same bytes); O(|V| + |E|).
    """
    arrays: list[tuple[str, np.ndarray]] = []
    op_types: list[str] = []
    scalars: dict[str, Any] = {}
    for field in CostGraph._REPLACEABLE:
        value = getattr(graph, field)
        if field == "names":
            arrays.extend(_names_arrays(graph))
        elif field == "ops":
            op_types, codes = _categories(graph.ops)
            arrays.append(("ops", codes))
        elif isinstance(value, np.ndarray):
            arrays.append((field, _compact(value)))
        elif value is not None:
            scalars[field] = value
    chunks, entries, offset = [], [], 0
    for field, array in arrays:
        data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        entries.append(_Array(field, array.dtype.newbyteorder("<").str, int(array.size), offset))
        padded = -len(data) % _ALIGN
        chunks += [data, b"\0" * padded]
        offset += len(data) + padded
    data = b"".join(chunks)
    header = msgspec.json.encode(_Header(BINARY_FORMAT, BINARY_VERSION, graph.n, graph.m, len(data),
                                         zlib.crc32(data), entries, op_types, list(graph.group_names), scalars))
    header += b" " * (-(_PREFIX.size + len(header)) % _ALIGN)
    with open(path, "wb") as out:
        out.write(_PREFIX.pack(MAGIC, len(header)))
        out.write(header)
        out.write(data)


def _names_arrays(graph: CostGraph) -> list[tuple[str, np.ndarray]]:
    """The names as one UTF-8 blob, NUL-separated; when a name holds a NUL, joined without a separator
    and with each name's length in bytes (``name_bytes``)."""
    blob = graph.joined_names.encode("utf-8", "surrogatepass") if graph.n else b""
    if blob.count(b"\0") == max(graph.n - 1, 0):
        return [("names", np.frombuffer(blob, np.uint8))]
    encoded = [name.encode("utf-8", "surrogatepass") for name in graph.names]
    return [("names", np.frombuffer(b"".join(encoded), np.uint8)),
            ("name_bytes", _compact(np.array(list(map(len, encoded)), np.int64)))]


def _categories(values: tuple[str, ...]) -> tuple[list[str], np.ndarray]:
    """Distinct values by first appearance, and each value's code."""
    table = list(dict.fromkeys(values))
    code = dict(zip(table, range(len(table)), strict=True))
    return table, _compact(np.fromiter(map(code.__getitem__, values), np.int64, len(values)))


def _compact(array: np.ndarray) -> np.ndarray:
    """An integer array in the smallest signed type that holds its values; other arrays as they are."""
    if array.dtype.kind not in "iu" or not array.size:
        return array
    low, high = int(array.min()), int(array.max())
    for kind in _SMALLEST:
        info = np.iinfo(kind)
        if info.min <= low and high <= info.max:
            return array.astype(kind, copy=False)
    return array


# ---------------------------------------------------------------------------------------- reading
def read_binary_graph(path: PathLike) -> CostGraph:
    """Read a binary graph file written by :func:`write_binary_graph`.

    Raises
    ------
    InvalidGraphError
        The file is missing, is not a binary graph file, is truncated or corrupt (its checksum does
        not match), or a value breaks a graph rule; the one-line message starts with the file name.
    """
    source = str(path)
    raw = read_bytes(path, InvalidGraphError, "a graph file", source=source)
    header, start = _header(raw, source)
    view = memoryview(raw)[start : start + header.data_bytes]
    if zlib.crc32(view) != header.crc32:
        raise InvalidGraphError(f"{source}: corrupt binary graph file (checksum mismatch in the data section)")
    columns = {entry.field: _array(view, entry, source) for entry in header.arrays}
    try:
        if set(header.scalars) & {"names", "comp_us", "out_bytes", *_EDGE_FIELDS}:
            raise InvalidGraphError(f"{source}: corrupt binary graph file header (an array field among its scalars)")
        names = _names(columns.pop("names", None), columns.pop("name_bytes", None), header.n, source)
        fields: dict[str, Any] = {**header.scalars, **columns}
        if "ops" in fields:
            table = np.array(header.op_types, dtype=object)
            fields["ops"] = tuple(table[_indices(fields["ops"], len(table), "ops", source)].tolist())
        groups = None
        if "colocation" in fields:  # ids into the group names: the graph checks and keeps them
            fields["colocation"] = _indices(fields["colocation"], len(header.group_names), "colocation", source,
                                            allow=1)
            groups = header.group_names
        unknown = sorted(set(fields) - set(CostGraph._REPLACEABLE))
        if unknown:
            raise InvalidGraphError(f"{source}: binary graph file with field(s) {', '.join(unknown)}, which this "
                                    "pardnn does not know (written by a newer pardnn?)")
        edges = [fields.pop(field, None) for field in _EDGE_FIELDS]
        if edges[0] is None or edges[1] is None:
            raise InvalidGraphError(f"{source}: binary graph file without its edge arrays")
        comp_us, out_bytes = fields.pop("comp_us", None), fields.pop("out_bytes", None)
        joined = names if isinstance(names, str) else None
        return CostGraph(() if joined is not None else names, comp_us, out_bytes, *edges,  # type: ignore[arg-type]
                         **fields, _group_names=groups, _joined_names=joined)
    except InvalidGraphError as exc:  # a rule of the graph: name the file too
        if str(exc).startswith(f"{source}: "):
            raise
        raise InvalidGraphError(f"{source}: {exc}") from exc


def _header(raw: bytes, source: str) -> tuple[_Header, int]:
    """The decoded header and where the data section starts; errors name what is wrong."""
    if raw[:8] != MAGIC:
        raise InvalidGraphError(f"{source}: not a binary pardnn graph file (it does not start with {MAGIC.decode()})")
    if len(raw) < _PREFIX.size:
        raise InvalidGraphError(f"{source}: truncated binary graph file ({len(raw)} bytes)")
    _, size = _PREFIX.unpack_from(raw)
    start = _PREFIX.size + size
    if start > len(raw):
        raise InvalidGraphError(f"{source}: truncated binary graph file (header of {size} bytes, file of {len(raw)})")
    try:
        header = msgspec.json.decode(raw[_PREFIX.size : start], type=_Header)
    except msgspec.DecodeError as exc:
        raise InvalidGraphError(f"{source}: corrupt binary graph file header ({exc})") from None
    if header.format != BINARY_FORMAT or header.version != BINARY_VERSION:
        raise InvalidGraphError(f"{source}: {header.format} version {header.version}; this pardnn reads "
                                f"{BINARY_FORMAT} version {BINARY_VERSION}")
    if start + header.data_bytes > len(raw):
        raise InvalidGraphError(f"{source}: truncated binary graph file ({len(raw)} bytes; its header says "
                                f"{start + header.data_bytes})")
    return header, start


def _array(view: memoryview, entry: _Array, source: str) -> np.ndarray:
    try:
        dtype = np.dtype(entry.dtype)
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in "iuf" or entry.length < 0 or entry.offset < 0:
        raise InvalidGraphError(f"{source}: corrupt binary graph file header (array {entry.field!r}: "
                                f"dtype {entry.dtype!r}, length {entry.length}, offset {entry.offset})")
    end = entry.offset + entry.length * dtype.itemsize
    if end > len(view):
        raise InvalidGraphError(f"{source}: corrupt binary graph file (array {entry.field!r} ends past the data)")
    return np.frombuffer(view[entry.offset : end], dtype).astype(dtype.newbyteorder("="), copy=False)


def _names(blob: np.ndarray | None, lengths: np.ndarray | None, n: int, source: str) -> str | tuple[str, ...]:
    """The op names: NUL-joined in one string (the graph splits them when asked), or a tuple when the
    file gives their lengths (a name holds a NUL)."""
    if blob is None:
        raise InvalidGraphError(f"{source}: binary graph file without op names")
    try:
        if lengths is None:  # decoded from the file's buffer: no copy of the blob
            joined = codecs.utf_8_decode(blob, "surrogatepass", True)[0]
            if n and joined.count("\0") == n - 1:
                return joined
            names = joined.split("\0") if n else []
        else:
            data, ends = blob.tobytes(), np.cumsum(lengths).tolist()
            names = [data[a:b].decode("utf-8", "surrogatepass") for a, b in zip([0, *ends], ends, strict=False)]
    except UnicodeDecodeError as exc:
        raise InvalidGraphError(f"{source}: corrupt binary graph file (op names are not UTF-8: {exc.reason})") from None
    if len(names) != n:
        raise InvalidGraphError(f"{source}: corrupt binary graph file ({len(names)} op names for {n} ops)")
    return tuple(names)


def _indices(codes: np.ndarray, size: int, field: str, source: str, allow: int = 0) -> np.ndarray:
    if codes.size and (int(codes.min()) < -allow or int(codes.max()) >= size):
        raise InvalidGraphError(f"{source}: corrupt binary graph file ({field} codes outside the table of {size})")
    return codes.astype(np.intp, copy=False)


def is_binary_graph(path: PathLike) -> bool:
    """Whether ``path`` is named as a binary graph file."""
    return Path(path).name.lower().endswith(BINARY_SUFFIX)
