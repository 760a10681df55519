"""The native graph file's schema, and what to say when a document breaks it.

msgspec records :class:`Document`, :class:`Node` and :class:`Edge` check what only the file can get
wrong (syntax, header, field types, required and unknown fields); values are the graph's to check.
:func:`decode` and :func:`convert` turn msgspec's error into an :class:`InvalidGraphError` naming the file,
node or edge, field and value, at no cost to a valid file (docs/notes-partitioner.md).
"""

from __future__ import annotations

import codecs
import re
from typing import Any

import msgspec

from pardnn.costs.validation import BYTES, COST, NAME, shown
from pardnn.errors import InvalidGraphError

__all__ = ["COPY_FIELDS", "FORMAT", "VERSION", "VERSIONS", "Document", "Edge", "Node", "check_header", "convert",
           "decode"]

FORMAT = "pardnn-graph"
VERSION = 2  # the newest; the writer writes 1 for a graph without micro-batch copy metadata
VERSIONS = (1, 2)
COPY_FIELDS = ("micro_batch", "copy_of")  # node fields of version 2 (pardnn.costs.copies)


class _NodeV1(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A node of version 1 (also used to say which field a version 1 file may not have)."""

    name: str
    comp_us: float
    out_bytes: int | float
    op: str = ""
    kind: str = "normal"
    colocate: str | None = None
    param_bytes: int | float = 0


class Node(_NodeV1, forbid_unknown_fields=True, gc=False):
    """A node of version 2: version 1's and the copy metadata."""

    micro_batch: int | None = None  # None for an op of no micro-batch
    copy_of: str | None = None  # None for itself


class Edge(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    src: str
    dst: str
    bytes: int | float | None = None  # None: the producer's out_bytes


class Document(msgspec.Struct, forbid_unknown_fields=True):
    format: str
    version: int
    nodes: list[Node]
    edges: list[Edge]
    name: str | msgspec.UnsetType = msgspec.UNSET
    memory_limit_bytes: int | float | None = None


class _DocumentV1(msgspec.Struct):
    nodes: list[_NodeV1]


_DECODER = msgspec.json.Decoder(Document)
_FIELDS = {  # in the order the writer writes them
    None: ("format", "version", "name", "memory_limit_bytes", "nodes", "edges"),
    "nodes": ("name", "op", "comp_us", "out_bytes", "kind", "colocate", "param_bytes"),  # version 2: + COPY_FIELDS
    "edges": ("src", "dst", "bytes"),
}
_EXPECTED: dict[tuple[str | None, str], str] = {
    (None, "format"): repr(FORMAT),
    (None, "version"): " or ".join(map(str, VERSIONS)),
    (None, "name"): "a string",
    (None, "nodes"): "a list",
    (None, "edges"): "a list",
    (None, "memory_limit_bytes"): "a whole number of bytes > 0 or null",
    ("nodes", "name"): NAME,
    ("nodes", "op"): "a string (the op type, e.g. 'MatMul')",
    ("nodes", "comp_us"): COST,
    ("nodes", "out_bytes"): BYTES,
    ("nodes", "param_bytes"): BYTES,
    ("nodes", "kind"): "one of normal, residual, reference",
    ("nodes", "colocate"): "a group label string or null",
    ("nodes", "micro_batch"): "a whole number >= 0 (the micro-batch) or null (an op of no micro-batch)",
    ("nodes", "copy_of"): "the name of the op of micro-batch 0 this op copies, or null (itself)",
    ("edges", "src"): "an op name string",
    ("edges", "dst"): "an op name string",
    ("edges", "bytes"): f"{BYTES} or null",
}
_NUMERIC = frozenset({"memory_limit_bytes", "comp_us", "out_bytes", "param_bytes", "bytes"})
_JSON_TYPES = {"object": "an object", "array": "a list", "str": "a string", "int": "a number",
               "float": "a number", "bool": "a boolean", "null": "null"}
_WHERE = re.compile(r"(?P<problem>.*?)(?: - at `\$(?P<path>[^`]*)`)?", re.DOTALL)
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
_EXPECTED_GOT = re.compile(r"Expected `[^`]*`, got `(?P<got>[^`]*)`")
_FIELD_PROBLEM = re.compile(r"Object (?P<what>contains unknown|missing required) field `(?P<field>.*)`", re.DOTALL)
_SYNTAX = re.compile(r"JSON is malformed: (?P<reason>.*) \(byte (?P<byte>\d+)\)")
_NON_FINITE = re.compile(rb"-?(?:NaN|Infinity)")
_NON_FINITE_VALUE = re.compile(rb"([:\[,]\s*)-?(?:NaN|Infinity)(?=\s*[,\]}])")
_MISSING: Any = object()


# ---------------------------------------------------------------------------------------- entries
def decode(raw: bytes, source: str) -> Document:
    """The document in ``raw`` (JSON bytes), header checked; else InvalidGraphError naming the fault."""
    try:
        document = _DECODER.decode(raw)
    except msgspec.ValidationError as exc:
        raise _translate(str(exc), source, msgspec.Raw(raw)) from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        # msgspec < 0.23 raises UnicodeDecodeError on bytes that are not UTF-8, 0.23 a DecodeError
        # ("invalid UTF-8 encoded string"): either way the message names the first bad byte.
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as bad:
            raise InvalidGraphError(f"{source}: not UTF-8 text (byte {bad.start}: {bad.reason})") from None
        if isinstance(exc, UnicodeDecodeError):  # pragma: no cover (msgspec found what Python did not)
            raise
        raise _syntax_error(str(exc), raw, source) from None
    check_header(document.format, document.version, source)
    if document.version == 1 and any(b'"%s"' % field.encode() in raw for field in COPY_FIELDS):
        _refuse_copy_fields(lambda: msgspec.json.decode(raw, type=_DocumentV1), msgspec.Raw(raw), source)
    return document


def _refuse_copy_fields(decode_v1: Any, root: Any, source: str) -> None:
    """Raise naming the first node of a version 1 document with a field of version 2 (``decode_v1``
    decodes the document by version 1's schema; ``root`` is the document, for the message)."""
    try:
        decode_v1()
    except msgspec.ValidationError as exc:
        raise _translate(str(exc), source, root) from None


def convert(data: Any, source: str) -> Document:
    """The document of already parsed JSON (dicts and lists), header checked, by the same schema."""
    try:
        document = msgspec.convert(data, Document)
    except msgspec.ValidationError as exc:
        raise _translate(str(exc), source, data) from None
    check_header(document.format, document.version, source)
    if document.version == 1 and any(isinstance(node, dict) and not node.keys().isdisjoint(COPY_FIELDS)
                                      for node in data.get("nodes", ())):
        _refuse_copy_fields(lambda: msgspec.convert(data, _DocumentV1), data, source)
    return document


def check_header(form: Any, version: Any, source: str) -> None:
    """Raise unless the ``format`` and ``version`` fields (``_MISSING`` when absent) say pardnn-graph 1 or 2."""
    if form is _MISSING:
        raise InvalidGraphError(
            f'{source}: missing "format" field; expected "format": "{FORMAT}" (not a pardnn graph file?)'
        )
    if form != FORMAT:
        raise InvalidGraphError(f"{source}: format = {form!r}; expected {FORMAT!r}")
    if version is _MISSING:
        raise InvalidGraphError(f'{source}: missing "version" field; expected "version": {VERSION} (or 1)')
    if type(version) is not int or version not in VERSIONS:
        raise InvalidGraphError(
            f"{source}: unsupported version {version!r}; this pardnn reads {FORMAT} versions 1 and {VERSION}"
        )


# ---------------------------------------------------------------------------------------- translation
def _translate(message: str, source: str, root: Any, literal: bytes | None = None) -> InvalidGraphError:
    """The InvalidGraphError for msgspec's ``message`` about the document ``root``.

    ``root`` is the parsed data, or a :class:`msgspec.Raw` of the file. ``literal`` is a non-finite
    number that was replaced by ``{}`` before decoding: the value to report.
    """
    where = _WHERE.fullmatch(message)
    assert where is not None  # the pattern matches any text
    problem, path = where["problem"], where["path"] or ""
    steps: list[str | int] = [key if key else int(number) for key, number in _STEP.findall(path)]
    mismatch = _EXPECTED_GOT.fullmatch(problem)
    got = "NaN" if literal is not None else _JSON_TYPES.get(mismatch["got"], mismatch["got"]) if mismatch else ""
    if not steps and got:
        return InvalidGraphError(f"{source}: expected a JSON object at the top level, got {got}")
    top = _child(root, "")
    if literal is None:  # the header first: a file of another format should be told so, not nitpicked
        check_header(_plain(_child(top, "format")), _plain(_child(top, "version")), source)

    # Where: the document (no steps), one of its fields, a node or edge, or a field of one.
    container: str | None = None
    label, field, value = "", None, _MISSING
    if len(steps) in (2, 3) and steps[0] in ("nodes", "edges") and isinstance(steps[1], int):
        container = str(steps[0])
        record = _child(_child(top, container), steps[1])
        label = _label(container, steps[1], record)
        if len(steps) == 3:
            field = str(steps[2])
            value = _plain(_child(record, field))
    elif len(steps) == 1:
        field = str(steps[0])
        value = _plain(_child(top, field))
    elif steps:
        return InvalidGraphError(f"{source}: {problem} (at ${path})")
    prefix = f"{source}: {label}: " if label else f"{source}: "

    # What.
    if literal is not None:
        if field is None:
            return InvalidGraphError(f"{source}: {label} is {literal.decode()}; expected an object")
        number = float(literal.replace(b"Infinity", b"inf"))
        return InvalidGraphError(f"{prefix}{field} = {number!r}; expected {_expected(container, field)}")
    if (found := _FIELD_PROBLEM.fullmatch(problem)) is not None and field is None:
        name = found["field"]
        if found["what"] == "contains unknown" and container == "nodes" and name in COPY_FIELDS:
            return InvalidGraphError(f'{prefix}field {name!r} in a version 1 file; {" and ".join(COPY_FIELDS)} '
                                     'are fields of version 2 (write "version": 2)')
        if found["what"] == "contains unknown":
            scope = "field" if label else "top-level field"
            known = _FIELDS[container] + (COPY_FIELDS if container == "nodes" and _plain(_child(top, "version")) == 2
                                          else ())
            return InvalidGraphError(f"{prefix}unknown {scope} {name!r}; expected only {', '.join(known)}")
        if not label:
            return InvalidGraphError(f'{prefix}missing "{name}" field; expected a list (may be empty)')
        hint = " (an op name)" if container == "edges" else ""
        return InvalidGraphError(f"{prefix}missing required field {name!r}{hint}")
    if mismatch and field is None:  # a node or edge that is not an object
        shape = "an object" if container == "nodes" else "an object with src, dst and bytes"
        return InvalidGraphError(f"{source}: {label} is {got}; expected {shape}")
    if mismatch and not label and field in ("nodes", "edges"):
        return InvalidGraphError(f"{prefix}{field} is {got}; expected a list")
    if field is not None and (mismatch or problem == "Number out of range"):
        text = "" if value is _MISSING else f" = {shown(value)}"
        if field in _NUMERIC and value is not _MISSING and not _is_number(value):
            text += f" ({_json_type(value)})"
        return InvalidGraphError(f"{prefix}{field}{text}; expected {_expected(container, field)}")
    return InvalidGraphError(f"{prefix}{problem}" + (f" (at ${path})" if path else ""))


def _syntax_error(message: str, raw: bytes, source: str) -> InvalidGraphError:
    found = _SYNTAX.fullmatch(message)
    position = int(found["byte"]) if found else len(raw)
    reason = found["reason"] if found else message[:1].lower() + message[1:]
    start = position - 1 if raw[position - 1 : position] == b"-" else position
    literal = _NON_FINITE.match(raw, start)
    if literal is not None:  # NaN or Infinity: find the field it sits in
        patched = raw[:start] + b"{}" + raw[literal.end() :]
        try:
            _DECODER.decode(patched)
        except msgspec.ValidationError as exc:
            # Names are looked up in a copy without any such literal (more may follow this one).
            lookup = msgspec.Raw(_NON_FINITE_VALUE.sub(rb"\1null", patched))
            return _translate(str(exc), source, lookup, literal[0])
        except msgspec.DecodeError:  # pragma: no cover (the patch is valid JSON where the literal was)
            pass
    if position == 0 and raw.startswith(codecs.BOM_UTF8):
        reason = "the file starts with a byte order mark (BOM); save it as UTF-8 without one"
    line = raw.count(b"\n", 0, position) + 1
    column = len(raw[raw.rfind(b"\n", 0, position) + 1 : position].decode("utf-8", "replace")) + 1
    return InvalidGraphError(f"{source}: invalid JSON at line {line}, column {column}: {reason}")


# ---------------------------------------------------------------------------------------- lookups
class _Literal(str):
    """A number msgspec cannot hold (``1e400``), shown as written."""

    def __repr__(self) -> str:
        return str(self)


def _child(value: Any, key: str | int | None) -> Any:
    """``value[key]`` of parsed data or of a raw JSON slice (decoded one level); ``_MISSING`` if none.

    The key ``""`` is the value itself as a mapping (the document's top level).
    """
    if value is _MISSING or key is None:
        return _MISSING
    if isinstance(value, msgspec.Raw):
        kind = list[msgspec.Raw] if isinstance(key, int) else dict[str, msgspec.Raw]
        try:
            value = msgspec.json.decode(value, type=kind)
        except msgspec.DecodeError:
            return _MISSING
    if key == "":
        return value if isinstance(value, dict) else _MISSING
    try:
        return value[key]
    except (KeyError, IndexError, TypeError):
        return _MISSING


def _plain(value: Any) -> Any:
    if isinstance(value, msgspec.Raw):
        try:
            return msgspec.json.decode(value)
        except msgspec.DecodeError:
            return _Literal(bytes(value).decode("utf-8", "replace"))
    return value


def _label(container: str, k: int, record: Any) -> str:
    if container == "nodes":
        name = _plain(_child(record, "name"))
        return f"node #{k} {name!r}" if isinstance(name, str) and name else f"node #{k}"
    src, dst = _plain(_child(record, "src")), _plain(_child(record, "dst"))
    return f"edge #{k} {src!r} -> {dst!r}" if isinstance(src, str) and isinstance(dst, str) else f"edge #{k}"


def _expected(container: str | None, field: str) -> str:
    return _EXPECTED.get((container, field), "a valid value")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, _Literal)) and not isinstance(value, bool)


def _json_type(value: Any) -> str:
    kinds: list[tuple[type | tuple[type, ...], str]] = [
        (type(None), "null"), (bool, "a boolean"), (str, "a string"), ((int, float), "a number"),
        (list, "a list"), (dict, "an object"),
    ]
    return next((word for kind, word in kinds if isinstance(value, kind)), type(value).__name__)

