"""Tests of pardnn.io: native JSON graphs, placement files, the reference-ParDNN file set."""

from __future__ import annotations

import copy
import gzip
import json
import logging
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pardnn.costs.graph import KIND_NAMES, CostGraph, Kind
from pardnn.errors import InvalidGraphError, InvalidPlacementError
from pardnn.io import (
    format_placement,
    graph_from_dict,
    graph_to_dict,
    parse_placement_lines,
    read_any_graph,
    read_graph,
    read_ordered_placement,
    read_placement,
    read_reference,
    schema,
    write_graph,
    write_placement,
    write_reference,
)
from pardnn.io.reference import reference_colocation
from tests.helpers.graphs import small_graph

# ---------------------------------------------------------------------------------------- helpers
TF_NAME = st.from_regex(r"[A-Za-z0-9.][A-Za-z0-9_./\-]{0,14}", fullmatch=True)
ANY_NAME = st.text(min_size=1, max_size=8)
COSTS = st.one_of(
    st.just(0.0),
    st.integers(0, 10**7).map(float),
    st.floats(min_value=0.0, max_value=1e300, allow_nan=False, allow_infinity=False),
)
BYTES = st.one_of(st.just(0), st.integers(0, 2**62))




def write_text(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def naive_reference_colocation(names: list[str], kinds: list[str], edges: list[tuple[int, int]]) -> list[str | None]:
    """Oracle for the reference colocation rule: merge sets until nothing changes."""
    groups: list[set[int]] = [{s, d} for s, d in edges if kinds[s] == "residual" and kinds[d] == "reference"]
    merged = True
    while merged:
        merged = False
        for i in range(len(groups)):
            for j in range(i + 1, len(groups)):
                if groups[i] & groups[j]:
                    groups[i] |= groups.pop(j)
                    merged = True
                    break
            if merged:
                break
    labels: list[str | None] = [None] * len(names)
    for group in groups:
        label = names[min(v for v in group if kinds[v] == "residual")]
        for v in group:
            labels[v] = label
    return labels


@st.composite
def graphs(draw: st.DrawFn, *, names: st.SearchStrategy[str] = TF_NAME, reference_set: bool = False) -> CostGraph:
    """Random DAGs whose node order is not topological; ``reference_set`` keeps to what that set holds."""
    op_names = draw(st.lists(names, max_size=12, unique=True))
    n = len(op_names)
    order = draw(st.permutations(range(n)))
    pairs = [(order[i], order[j]) for i in range(n) for j in range(i + 1, n)]
    edges = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=24)) if pairs else []
    comp = draw(st.lists(COSTS, min_size=n, max_size=n))
    out = draw(st.lists(BYTES, min_size=n, max_size=n))
    kinds = draw(st.lists(st.sampled_from(KIND_NAMES), min_size=n, max_size=n))
    if reference_set:
        return CostGraph(
            op_names,
            comp,
            out,
            [s for s, _ in edges],
            [d for _, d in edges],
            kind=kinds,
            colocation=naive_reference_colocation(op_names, kinds, edges),
            name=draw(TF_NAME),
        )
    return CostGraph(
        op_names,
        comp,
        out,
        [s for s, _ in edges],
        [d for _, d in edges],
        draw(st.lists(BYTES, min_size=len(edges), max_size=len(edges))),
        kind=kinds,
        colocation=draw(st.lists(st.none() | st.sampled_from(["g0", "loc:@w", "", "-1"]), min_size=n, max_size=n)),
        ops=draw(st.lists(st.text(max_size=6), min_size=n, max_size=n)),
        param_bytes=draw(st.lists(BYTES, min_size=n, max_size=n)),
        name=draw(st.text(max_size=10)),
        memory_limit_bytes=draw(st.none() | st.integers(1, 2**62)),
    )


ROUND_TRIP = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------------------- native
def test_read_graph_contract_example(tmp_path: Path) -> None:
    path = write_text(
        tmp_path / "trn-2.json",
        """{"format": "pardnn-graph", "version": 1, "name": "trn-2",
 "nodes": [{"name": "dense/MatMul", "op": "MatMul", "comp_us": 812.0, "out_bytes": 33554432,
            "kind": "normal", "colocate": null},
           {"name": "dense/BiasAdd", "op": "BiasAdd", "comp_us": 10, "out_bytes": 1e3,
            "kind": "residual", "colocate": "g", "param_bytes": 64}],
 "edges": [{"src": "dense/MatMul", "dst": "dense/BiasAdd", "bytes": 33554432}],
 "memory_limit_bytes": 1073741824}""",
    )
    graph = read_graph(path)
    assert graph.name == "trn-2"
    assert graph.names == ("dense/MatMul", "dense/BiasAdd")
    assert graph.ops == ("MatMul", "BiasAdd")
    assert graph.comp_us.tolist() == [812.0, 10.0]
    assert graph.out_bytes.tolist() == [33554432, 1000]
    assert graph.param_bytes.tolist() == [0, 64]
    assert graph.kind.tolist() == [Kind.NORMAL, Kind.RESIDUAL]
    assert graph.colocation.tolist() == [-1, 0] and graph.group_names == ("g",)
    assert graph.edge_bytes.tolist() == [33554432]
    assert graph.memory_limit_bytes == 2**30


def test_read_graph_defaults(tmp_path: Path) -> None:
    path = write_text(
        tmp_path / "defaults.json",
        json.dumps(
            {
                "format": "pardnn-graph",
                "version": 1,
                "nodes": [{"name": "a", "comp_us": 1, "out_bytes": 8}, {"name": "b", "comp_us": 0, "out_bytes": 0}],
                "edges": [{"src": "a", "dst": "b"}],
            }
        ),
    )
    graph = read_graph(path)
    assert graph.name == "defaults"  # the file name without suffix
    assert graph.ops == ("", "")
    assert graph.kind.tolist() == [0, 0]
    assert graph.colocation.tolist() == [-1, -1]
    assert graph.param_bytes.tolist() == [0, 0]
    assert graph.edge_bytes.tolist() == [8]  # the producer's out_bytes
    assert graph.memory_limit_bytes is None


def test_read_graph_edge_bytes_null_means_producer_bytes() -> None:
    document = {
        "format": "pardnn-graph",
        "version": 1,
        "nodes": [{"name": "a", "comp_us": 1, "out_bytes": 8}, {"name": "b", "comp_us": 0, "out_bytes": 3}],
        "edges": [{"src": "a", "dst": "b", "bytes": None}],
    }
    assert graph_from_dict(document).edge_bytes.tolist() == [8]


def test_read_graph_parallel_edges_merge() -> None:
    document = {
        "format": "pardnn-graph",
        "version": 1,
        "nodes": [{"name": "a", "comp_us": 1, "out_bytes": 8}, {"name": "b", "comp_us": 0, "out_bytes": 3}],
        "edges": [{"src": "a", "dst": "b", "bytes": 5}, {"src": "a", "dst": "b"}],
    }
    graph = graph_from_dict(document)
    assert graph.m == 1 and graph.edge_bytes.tolist() == [13]


def test_write_graph_layout(tmp_path: Path) -> None:
    graph = CostGraph.from_named_edges(
        ["a", "b/é"], [1.0, 0.1], [8, 0], [("a", "b/é", 2)], ops=["Const", ""], param_bytes=[0, 3], name="tiny"
    )
    write_graph(graph, tmp_path / "tiny.json")
    assert (tmp_path / "tiny.json").read_text() == (
        '{"format": "pardnn-graph", "version": 1, "name": "tiny",\n'
        ' "nodes": [\n'
        '  {"name": "a", "op": "Const", "comp_us": 1.0, "out_bytes": 8, "kind": "normal", "colocate": null},\n'
        '  {"name": "b/\\u00e9", "op": "", "comp_us": 0.1, "out_bytes": 0, "kind": "normal", "colocate": null,'
        ' "param_bytes": 3}\n'
        " ],\n"
        ' "edges": [\n'
        '  {"src": "a", "dst": "b/\\u00e9", "bytes": 2}\n'
        " ]}\n"
    )


def test_write_graph_empty_graph(tmp_path: Path) -> None:
    graph = CostGraph([], [], [], [], [], name="empty")
    write_graph(graph, tmp_path / "empty.json")
    assert json.loads((tmp_path / "empty.json").read_text()) == {
        "format": "pardnn-graph",
        "version": 1,
        "name": "empty",
        "nodes": [],
        "edges": [],
    }
    assert read_graph(tmp_path / "empty.json") == graph


def test_graph_to_dict_is_what_write_graph_writes(tmp_path: Path) -> None:
    graph = small_graph()
    write_graph(graph, tmp_path / "small.json")
    assert json.loads((tmp_path / "small.json").read_text()) == graph_to_dict(graph)
    assert graph_from_dict(graph_to_dict(graph)) == graph


@ROUND_TRIP
@given(graph=graphs(names=ANY_NAME) | graphs(), data=st.data())
def test_file_and_dict_readers_agree(graph: CostGraph, data: st.DataObject) -> None:
    """read_graph (msgspec.json) and graph_from_dict (msgspec.convert) go through one schema and build
    the same graph, also with edge ``bytes`` left out or null and fields left at their defaults."""
    document = graph_to_dict(graph)
    expected_bytes = graph.edge_bytes.tolist()
    for k, edge in enumerate(document["edges"]):
        choice = data.draw(st.sampled_from(["keep", "null", "drop"]))
        if choice == "null":
            edge["bytes"] = None
        elif choice == "drop":
            del edge["bytes"]
        if choice != "keep":
            expected_bytes[k] = int(graph.out_bytes[graph.edge_src[k]])
    for node in document["nodes"]:
        for field, default in (("op", ""), ("kind", "normal"), ("colocate", None)):
            if node.get(field) == default and data.draw(st.booleans()):
                del node[field]
    raw = json.dumps(document).encode()
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "g.json"
        path.write_bytes(raw)
        from_file = read_graph(path)
    from_dict = graph_from_dict(json.loads(raw), str(path), default_name="g")
    assert from_file == from_dict
    assert from_file.edge_bytes.tolist() == expected_bytes
    assert from_file == graph.replace(edge_bytes=np.array(expected_bytes, dtype=np.int64))


@pytest.mark.parametrize(
    ("mutate", "check"),
    [
        (lambda d: d["nodes"][0].__setitem__("out_bytes", 1e6), lambda g: g.out_bytes[0] == 10**6),
        (lambda d: d["nodes"][0].__setitem__("param_bytes", 4096.0), lambda g: g.param_bytes[0] == 4096),
        (lambda d: d["edges"][2].__setitem__("bytes", 2.0e3), lambda g: g.edge_bytes[2] == 2000),
        (lambda d: d.__setitem__("memory_limit_bytes", 1e9), lambda g: g.memory_limit_bytes == 10**9),
        (lambda d: d["nodes"][2].__setitem__("out_bytes", 2**62 + 1), lambda g: g.out_bytes[2] == 2**62 + 1),
    ],
    ids=["out_bytes", "param_bytes", "edge_bytes", "memory_limit", "exact-large-int"],
)
def test_whole_numbers_written_as_floats_read(
    tmp_path: Path, mutate: Callable[[dict[str, Any]], None], check: Callable[[CostGraph], bool]
) -> None:
    document = graph_to_dict(small_graph())
    document["nodes"][1]["out_bytes"] = 4096.0  # a whole float among ints: exact ints must stay exact
    mutate(document)
    raw = json.dumps(document).encode()
    path = tmp_path / "g.json"
    path.write_bytes(raw)
    graph = read_graph(path)
    assert check(graph)
    assert graph.out_bytes.dtype == graph.param_bytes.dtype == graph.edge_bytes.dtype == np.int64
    assert isinstance(graph.memory_limit_bytes, int)
    assert graph == graph_from_dict(json.loads(raw), str(path), default_name="g")


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_native_round_trip_small(tmp_path: Path, suffix: str) -> None:
    graph = small_graph()
    write_graph(graph, tmp_path / f"small{suffix}")
    assert read_graph(tmp_path / f"small{suffix}") == graph


@ROUND_TRIP
@given(graph=graphs(names=ANY_NAME) | graphs())
def test_native_round_trip_is_exact(graph: CostGraph) -> None:
    with tempfile.TemporaryDirectory() as directory:
        for file_name in ("g.json", "g.json.gz"):
            write_graph(graph, Path(directory) / file_name)
            assert read_graph(Path(directory) / file_name) == graph
    assert graph_from_dict(graph_to_dict(graph)) == graph


def test_gzip_writes_are_byte_identical(tmp_path: Path) -> None:
    graph = small_graph()
    write_graph(graph, tmp_path / "first.json.gz")
    write_graph(graph, tmp_path / "second.json.gz")
    write_graph(graph, tmp_path / "plain.json")
    first = (tmp_path / "first.json.gz").read_bytes()
    assert first == (tmp_path / "second.json.gz").read_bytes()
    # RFC 1952 header: no file name (FLG bit 3 clear) and MTIME 0, so neither name nor clock leaks in.
    assert first[:3] == b"\x1f\x8b\x08" and not first[3] & 0x08 and first[4:8] == bytes(4)
    assert gzip.decompress(first) == (tmp_path / "plain.json").read_bytes()


def _base_document() -> dict[str, Any]:
    return {
        "format": "pardnn-graph",
        "version": 1,
        "name": "bad",
        "nodes": [
            {"name": "a", "op": "MatMul", "comp_us": 1.0, "out_bytes": 8},
            {"name": "b", "comp_us": 2, "out_bytes": 4},
            {"name": "c", "comp_us": 0.5, "out_bytes": 0},
        ],
        "edges": [{"src": "a", "dst": "b"}, {"src": "b", "dst": "c", "bytes": 4}, {"src": "a", "dst": "c"}],
    }


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation setting ``document[k1][k2]...`` (``nodes.1.comp_us``) to ``value``."""

    def mutate(document: dict[str, Any]) -> None:
        *parents, last = [int(key) if key.isdigit() else key for key in path.split(".")]
        target: Any = document
        for key in parents:
            target = target[key]
        target[last] = value

    return mutate


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(document: dict[str, Any]) -> None:
        *parents, last = [int(key) if key.isdigit() else key for key in path.split(".")]
        target: Any = document
        for key in parents:
            target = target[key]
        del target[last]

    return mutate


def _append_edge(edge: Any) -> Callable[[dict[str, Any]], None]:
    return lambda document: document["edges"].append(edge)


NATIVE_ERRORS = [
    ("missing-format", _delete("format"), 'missing "format" field'),
    ("wrong-format", _set("format", "tf-graph"), "format = 'tf-graph'; expected 'pardnn-graph'"),
    ("missing-version", _delete("version"), 'missing "version" field'),
    ("unsupported-version", _set("version", 3),
     "unsupported version 3; this pardnn reads pardnn-graph versions 1 and 2"),
    ("version-string", _set("version", "1"), "unsupported version '1'"),
    ("unknown-top-field", _set("metadata", {}), "unknown top-level field 'metadata'"),
    ("graph-name-type", _set("name", 7), "name = 7; expected a string"),
    (
        "memory-limit-zero",
        _set("memory_limit_bytes", 0),
        "graph 'bad': memory_limit_bytes = 0; expected a whole number of bytes > 0",
    ),
    (
        "memory-limit-text",
        _set("memory_limit_bytes", "1GB"),
        r"memory_limit_bytes = '1GB' \(a string\); expected a whole number of bytes > 0 or null",
    ),
    ("nodes-missing", _delete("nodes"), 'missing "nodes" field'),
    ("nodes-not-list", _set("nodes", {}), "nodes is an object; expected a list"),
    ("edges-missing", _delete("edges"), 'missing "edges" field'),
    ("node-not-object", _set("nodes.1", ["b", 2, 4]), "node #1 is a list; expected an object"),
    ("node-missing-name", _delete("nodes.1.name"), "node #1: missing required field 'name'"),
    ("node-empty-name", _set("nodes.1.name", ""), "node #1: name = ''; expected a non-empty string"),
    ("node-name-type", _set("nodes.1.name", 5), "node #1: name = 5; expected a non-empty string"),
    ("node-missing-comp", _delete("nodes.1.comp_us"), "node #1 'b': missing required field 'comp_us'"),
    ("node-missing-out", _delete("nodes.2.out_bytes"), "node #2 'c': missing required field 'out_bytes'"),
    (
        "comp-string",
        _set("nodes.1.comp_us", "812"),
        r"node #1 'b': comp_us = '812' \(a string\); expected a finite number >= 0",
    ),
    (
        "comp-bool",
        _set("nodes.1.comp_us", True),
        r"node #1 'b': comp_us = True \(a boolean\); expected a finite number >= 0",
    ),
    ("comp-negative", _set("nodes.1.comp_us", -1.0), "node #1 'b': comp_us = -1.0; expected a finite number >= 0"),
    ("comp-nan", _set("nodes.1.comp_us", float("nan")), "node #1 'b': comp_us = nan; expected a finite number"),
    ("comp-inf", _set("nodes.2.comp_us", float("inf")), "node #2 'c': comp_us = inf; expected a finite number"),
    ("comp-huge-int", _set("nodes.2.comp_us", 10**400), "node #2 'c': comp_us = 1000.*; expected a finite number"),
    ("out-fraction", _set("nodes.0.out_bytes", 1.5), "node #0 'a': out_bytes = 1.5; expected a whole number of bytes"),
    ("out-negative", _set("nodes.0.out_bytes", -8), "node #0 'a': out_bytes = -8; expected a whole number of bytes"),
    ("out-string", _set("nodes.0.out_bytes", "8"), r"node #0 'a': out_bytes = '8' \(a string\); expected a whole"),
    ("out-too-large", _set("nodes.0.out_bytes", 2**64), "node #0 'a': out_bytes = 18446744073709551616; expected"),
    ("out-nan", _set("nodes.0.out_bytes", float("nan")), "node #0 'a': out_bytes = nan; expected a whole number"),
    ("param-negative", _set("nodes.0.param_bytes", -1), "node #0 'a': param_bytes = -1; expected a whole number"),
    ("op-type", _set("nodes.0.op", 3), "node #0 'a': op = 3; expected a string"),
    ("kind-unknown", _set("nodes.0.kind", "variable"), "node #0 'a': kind = 'variable'; expected one of normal,"),
    (
        "colocate-number",
        _set("nodes.0.colocate", 3),
        "node #0 'a': colocate = 3; expected a group label string or null",
    ),
    ("node-unknown-field", _set("nodes.2.colocation", "g"), "node #2 'c': unknown field 'colocation'; expected only"),
    ("duplicate-name", _set("nodes.2.name", "a"), r"node #2 'a': duplicate name \(node #0 has it too\)"),
    ("edge-not-object", _append_edge(["a", "b"]), "edge #3 is a list; expected an object"),
    ("edge-missing-src", _delete("edges.1.src"), "edge #1: missing required field 'src'"),
    ("edge-src-type", _set("edges.1.src", 1), "edge #1: src = 1; expected an op name string"),
    ("edge-unknown-dst", _append_edge({"src": "a", "dst": "zz"}), "edge #3 'a' -> 'zz': unknown op 'zz'"),
    ("edge-unknown-src", _append_edge({"src": "zz", "dst": "a"}), "edge #3 'zz' -> 'a': unknown op 'zz'"),
    ("edge-bytes-negative", _set("edges.0.bytes", -1), "edge #0 'a' -> 'b': bytes = -1; expected a whole number"),
    ("edge-bytes-string", _set("edges.0.bytes", "4"), r"edge #0 'a' -> 'b': bytes = '4' \(a string\); expected"),
    ("edge-unknown-field", _set("edges.0.weight", 1), "edge #0 'a' -> 'b': unknown field 'weight'"),
    ("self-loop", _append_edge({"src": "c", "dst": "c"}), "graph 'bad' has a cycle: op 'c' feeds itself"),
    ("cycle", _append_edge({"src": "c", "dst": "a"}), "graph 'bad' has a cycle: '[abc]', '[abc]', "),
]


@pytest.mark.parametrize(("mutate", "message"), [case[1:] for case in NATIVE_ERRORS], ids=[c[0] for c in NATIVE_ERRORS])
def test_read_graph_rejects(tmp_path: Path, mutate: Callable[[dict[str, Any]], None], message: str) -> None:
    document = copy.deepcopy(_base_document())
    mutate(document)
    path = write_text(tmp_path / "bad.json", json.dumps(document))  # NaN/Infinity become JSON literals
    with pytest.raises(InvalidGraphError, match=f"^{re.escape(str(path))}: {message}"):
        read_graph(path)


# msgspec stops at the first fault and names its JSON path ($.nodes[12].comp_us); the reader turns that
# into the file, the op (index and name, looked up only then), the field, the value and the expectation.
def _chain_document(n: int = 20) -> dict[str, Any]:
    return {
        "format": "pardnn-graph",
        "version": 1,
        "nodes": [{"name": f"op{i}", "comp_us": float(i), "out_bytes": 8 * i} for i in range(n)],
        "edges": [{"src": f"op{i}", "dst": f"op{i + 1}"} for i in range(n - 1)],
    }


TRANSLATED = [
    ("wrong-type", _set("nodes.12.comp_us", "fast"),
     r"node #12 'op12': comp_us = 'fast' \(a string\); expected a finite number >= 0$"),
    ("wrong-type-list", _set("nodes.12.out_bytes", [8]),
     r"node #12 'op12': out_bytes = \[8\] \(a list\); expected a whole number of bytes >= 0$"),
    ("wrong-type-edge", _set("edges.5.bytes", {"n": 1}),
     r"edge #5 'op5' -> 'op6': bytes = \{'n': 1\} \(an object\); expected a whole number of bytes >= 0 or null$"),
    ("unknown-field", _set("nodes.12.colocation", "g"),
     r"node #12 'op12': unknown field 'colocation'; expected only name, op, comp_us, out_bytes, kind, colocate,"
     r" param_bytes$"),
    ("unknown-edge-field", _set("edges.5.weight", 3),
     r"edge #5 'op5' -> 'op6': unknown field 'weight'; expected only src, dst, bytes$"),
    ("missing-field", _delete("nodes.12.out_bytes"), r"node #12 'op12': missing required field 'out_bytes'$"),
    ("missing-edge-field", _delete("edges.5.dst"), r"edge #5: missing required field 'dst' \(an op name\)$"),
    ("out-of-range", _set("nodes.12.comp_us", 10**400),
     r"node #12 'op12': comp_us = 1000000000.*\.\.\. \(401 characters\); expected a finite number >= 0$"),
    ("header-before-body", lambda d: (_set("format", "onnx")(d), _set("nodes.3.weird", 1)(d)),
     r"format = 'onnx'; expected 'pardnn-graph'$"),
    ("version-before-body", lambda d: (_set("version", 3)(d), _set("nodes.3.comp_us", "x")(d)),
     r"unsupported version 3; this pardnn reads pardnn-graph versions 1 and 2$"),
    ("version-float", _set("version", 1.0),
     r"unsupported version 1\.0; this pardnn reads pardnn-graph versions 1 and 2$"),
]


@pytest.mark.parametrize(("mutate", "message"), [c[1:] for c in TRANSLATED], ids=[c[0] for c in TRANSLATED])
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_msgspec_errors_name_file_op_field_value_and_expectation(
    tmp_path: Path, suffix: str, mutate: Callable[[dict[str, Any]], None], message: str
) -> None:
    document = _chain_document()
    mutate(document)
    raw = json.dumps(document).encode()
    path = tmp_path / f"chain{suffix}"
    path.write_bytes(gzip.compress(raw) if suffix == ".json.gz" else raw)
    with pytest.raises(InvalidGraphError, match=f"^{re.escape(str(path))}: {message}"):
        read_graph(path)
    # graph_from_dict goes through the same schema (msgspec.convert) and says the same.
    with pytest.raises(InvalidGraphError, match=f"^parsed: {message}"):
        graph_from_dict(json.loads(raw), "parsed")


def test_nan_literal_names_the_op_when_more_follow(tmp_path: Path) -> None:
    text = json.dumps(_chain_document()).replace('"comp_us": 12.0', '"comp_us": NaN')
    text = text.replace('"comp_us": 15.0', '"comp_us": -Infinity')
    path = write_text(tmp_path / "nan.json", text)
    message = f"^{re.escape(str(path))}: node #12 'op12': comp_us = nan; expected a finite number >= 0$"
    with pytest.raises(InvalidGraphError, match=message):
        read_graph(path)
    text = json.dumps(_chain_document()).replace('"dst": "op6"}', '"dst": "op6", "bytes": Infinity}')
    path = write_text(tmp_path / "edge.json", text)
    message = f"^{re.escape(str(path))}: edge #5 'op5' -> 'op6': bytes = inf; expected a whole number of bytes"
    with pytest.raises(InvalidGraphError, match=message):
        read_graph(path)


def test_invalid_json_in_gzip_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.json.gz"
    path.write_bytes(gzip.compress(b'{"format": "pardnn-graph",\n "version": 1,,\n}'))
    with pytest.raises(InvalidGraphError, match=f"^{re.escape(str(path))}: invalid JSON at line 2, column 15: "):
        read_graph(path)


def test_byte_order_mark_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(_chain_document(2)).encode())
    with pytest.raises(InvalidGraphError, match="line 1, column 1: the file starts with a byte order mark"):
        read_graph(path)


def test_schema_field_lists_match_the_records() -> None:
    """The fields named in "expected only ..." messages are exactly the schema's."""
    assert set(schema._FIELDS[None]) == set(schema.Document.__struct_fields__)
    assert set(schema._FIELDS["nodes"]) | set(schema.COPY_FIELDS) == set(schema.Node.__struct_fields__)
    assert set(schema._FIELDS["nodes"]) == set(schema._NodeV1.__struct_fields__)  # version 1's
    assert set(schema._FIELDS["edges"]) == set(schema.Edge.__struct_fields__)
    assert all(key in schema._EXPECTED for key in (("nodes", f) for f in schema.Node.__struct_fields__))
    assert all(key in schema._EXPECTED for key in (("edges", f) for f in schema.Edge.__struct_fields__))


def test_read_graph_nan_literal_in_file(tmp_path: Path) -> None:
    text = json.dumps(_base_document()).replace('"comp_us": 2', '"comp_us": NaN')
    path = write_text(tmp_path / "nan.json", text)
    with pytest.raises(InvalidGraphError, match=f"^{re.escape(str(path))}: node #1 'b': comp_us = nan; expected"):
        read_graph(path)


def test_read_graph_rejects_top_level_list(tmp_path: Path) -> None:
    path = write_text(tmp_path / "list.json", "[]")
    with pytest.raises(InvalidGraphError, match=f"^{re.escape(str(path))}: expected a JSON object at the top level"):
        read_graph(path)


def test_read_graph_invalid_json_names_line_and_column(tmp_path: Path) -> None:
    path = write_text(tmp_path / "broken.json", '{"format": "pardnn-graph",\n "version": 1,,\n}')
    with pytest.raises(InvalidGraphError, match=f"^{re.escape(str(path))}: invalid JSON at line 2, column 15: "):
        read_graph(path)


def test_read_graph_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.json"
    with pytest.raises(InvalidGraphError, match=f"^{re.escape(str(path))}: no such file"):
        read_graph(path)


def test_read_graph_directory(tmp_path: Path) -> None:
    with pytest.raises(InvalidGraphError, match="is a directory"):
        read_graph(tmp_path)


def test_read_graph_not_gzip(tmp_path: Path) -> None:
    path = write_text(tmp_path / "fake.json.gz", "{}")
    with pytest.raises(InvalidGraphError, match=f"^{re.escape(str(path))}: not a valid gzip file"):
        read_graph(path)


def test_read_graph_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"format": "\xff"}')
    with pytest.raises(InvalidGraphError, match=f"^{re.escape(str(path))}: not UTF-8 text"):
        read_graph(path)


@pytest.mark.slow
def test_read_graph_200k_ops_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(20240521)
    n = 200_000
    chain = np.arange(n - 1)
    skip_src = rng.integers(0, n - 2, 100_001)
    skip_dst = np.minimum(skip_src + rng.integers(2, 200, skip_src.size), n - 1)
    src = np.concatenate([chain, skip_src])
    graph = CostGraph(
        [f"block_{i // 1000}/layer_{i % 1000 // 10}/MatMul_{i}" for i in range(n)],
        rng.random(n) * 1000.0,
        rng.integers(0, 2**26, n),
        src,
        np.concatenate([chain + 1, skip_dst]),
        rng.integers(0, 2**26, src.size),
        kind=rng.choice(np.array(KIND_NAMES), n).tolist(),
        colocation=[f"g{i % 97}" if i % 13 == 0 else None for i in range(n)],
        ops=["MatMul"] * n,
        name="big",
    )
    assert graph.m > 290_000
    path = tmp_path / "big.json"
    write_graph(graph, path)
    # Correctness at scale only: the reader's speed is measured by the benchmarks (pardnn bench, speed rows),
    # never asserted in a test (a shared CI machine makes any wall-time threshold fail at random).
    assert read_graph(path) == graph


# ---------------------------------------------------------------------------------------- read_any_graph
@pytest.mark.parametrize("file_name", ["g.json", "g.json.gz", "G.JSON"])
def test_read_any_graph_native(tmp_path: Path, file_name: str) -> None:
    write_graph(small_graph(), tmp_path / file_name)
    assert read_any_graph(tmp_path / file_name) == small_graph()


def test_read_any_graph_points_to_convert(tmp_path: Path) -> None:
    path = write_text(tmp_path / "g.dot", 'digraph {\n"a"->"b"\n}\n')
    with pytest.raises(InvalidGraphError, match=r"g\.dot: not a native graph file .*`pardnn convert`"):
        read_any_graph(path)
    with pytest.raises(InvalidGraphError, match=r"g\.pb: not a native graph file .*`pardnn convert`"):
        read_any_graph(tmp_path / "g.pb")


# ---------------------------------------------------------------------------------------- placement
def lettered_graph(n: int) -> CostGraph:
    return CostGraph([f"op{i:02d}" for i in range(n)], np.ones(n), np.zeros(n, np.int64), [], [])


def test_parse_placement_lines_comments_blanks_and_spaces() -> None:
    graph = CostGraph(["a", "my op", "b#1", "c"], np.ones(4), np.zeros(4, np.int64), [], [])
    lines = [
        "# placement of 4 ops",
        "",
        "a 1",
        "  my op\t 2  ",
        "b#1 0   # '#' inside a name is not a comment",
        "c 3\n",
    ]
    assert parse_placement_lines(lines, graph, devices=4).tolist() == [1, 2, 0, 3]


def test_read_placement_text_and_json(tmp_path: Path) -> None:
    graph = small_graph()
    text = write_text(tmp_path / "p.txt", "".join(f"{name} {i % 2}\n" for i, name in enumerate(graph.names)))
    as_json = write_text(tmp_path / "p.json", json.dumps({name: i % 2 for i, name in enumerate(graph.names)}))
    sniffed = write_text(tmp_path / "p.place", "\n " + json.dumps({name: 1 for name in graph.names}))
    assert read_placement(text, graph).tolist() == [0, 1, 0, 1, 0, 1]
    assert read_placement(as_json, graph, devices=2).tolist() == [0, 1, 0, 1, 0, 1]
    assert read_placement(sniffed, graph).tolist() == [1] * 6


def test_write_placement_text_layout_and_determinism(tmp_path: Path) -> None:
    graph = small_graph()
    placement = np.array([0, 1, 1, 1, 0, 0])
    write_placement(tmp_path / "a.txt", graph, placement)
    write_placement(tmp_path / "b.txt", graph, placement.tolist())
    expected = "w 0\nw/read 1\ndense/MatMul 1\ndense/BiasAdd 1\nw/Adam 0\nw/ApplyAdam 0\n"
    assert (tmp_path / "a.txt").read_text() == expected
    assert (tmp_path / "a.txt").read_bytes() == (tmp_path / "b.txt").read_bytes()


def test_write_placement_json_layout(tmp_path: Path) -> None:
    graph = CostGraph(["a", "é"], [1, 1], [0, 0], [], [])
    write_placement(tmp_path / "p.json", graph, [1, 0])
    assert (tmp_path / "p.json").read_text() == '{\n "a": 1,\n "\\u00e9": 0\n}\n'
    write_placement(tmp_path / "p.txt", graph, [1, 0], format="json")
    assert (tmp_path / "p.txt").read_text() == (tmp_path / "p.json").read_text()
    assert read_placement(tmp_path / "p.txt", graph).tolist() == [1, 0]
    assert format_placement(CostGraph([], [], [], [], []), [], "json") == "{}\n"


@ROUND_TRIP
@given(data=st.data(), graph=graphs())
def test_placement_round_trip_is_exact(data: st.DataObject, graph: CostGraph) -> None:
    devices = data.draw(st.integers(1, 16))
    placement = np.array(data.draw(st.lists(st.integers(0, devices - 1), min_size=graph.n, max_size=graph.n)), np.int64)
    with tempfile.TemporaryDirectory() as directory:
        for file_name in ("p.txt", "p.json"):
            path = Path(directory) / file_name
            write_placement(path, graph, placement)
            read = read_placement(path, graph, devices=devices)
            assert read.dtype == np.int64
            assert np.array_equal(read, placement)
            before = path.read_bytes()
            write_placement(path, graph, read)
            assert path.read_bytes() == before


@given(graph=graphs(names=ANY_NAME))
@settings(max_examples=40, deadline=None)
def test_placement_json_holds_any_name(graph: CostGraph) -> None:
    placement = np.arange(graph.n) % 3
    with tempfile.TemporaryDirectory() as directory:
        write_placement(Path(directory) / "p.json", graph, placement)
        assert np.array_equal(read_placement(Path(directory) / "p.json", graph), placement)


@pytest.mark.parametrize("bad_name", ["trailing ", " leading", "line\nbreak", "#hash", "a #b", "x\u2028y"])
def test_write_placement_text_refuses_unreadable_names(tmp_path: Path, bad_name: str) -> None:
    graph = CostGraph(["ok", bad_name], [1, 1], [0, 0], [], [])
    with pytest.raises(InvalidPlacementError, match=r"cannot be written to a text placement file.*json"):
        write_placement(tmp_path / "p.txt", graph, [0, 0])
    write_placement(tmp_path / "p.json", graph, [0, 1])
    assert read_placement(tmp_path / "p.json", graph).tolist() == [0, 1]


@pytest.mark.parametrize(
    ("placement", "message"),
    [
        ([0, 1], r"placement has shape \(2,\); expected \(6,\)"),
        ([0, 0, 0, 0, 0, 0.5], "placement has dtype float64; expected integer"),
        ([0, 0, -1, 0, 0, 0], "op 'dense/MatMul': device -1 out of range; expected >= 0"),
    ],
    ids=["length", "float", "negative"],
)
def test_write_placement_rejects(tmp_path: Path, placement: list[float], message: str) -> None:
    with pytest.raises(InvalidPlacementError, match=message):
        write_placement(tmp_path / "p.txt", small_graph(), placement)


def test_write_placement_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="format must be one of text, json, got 'yaml'"):
        write_placement(tmp_path / "p.yaml", small_graph(), [0] * 6, format="yaml")


TEXT_PLACEMENT_ERRORS = [
    ("malformed", "op00 0\nop01\n", 2, "expected 'op_name device_index', got 'op01'"),
    ("unknown-op", "op00 0\nzz 1\n", 2, r"unknown op 'zz' \(not among the 3 ops of the graph\)"),
    ("twice", "op00 0\nop01 1\nop00 0\n", 3, r"op 'op00' listed twice \(first on line 1\)"),
    ("not-integer", "op00 gpu:1\n", 1, "op 'op00': device 'gpu:1' is not an integer"),
    ("float-device", "op00 1.0\n", 1, "op 'op00': device '1.0' is not an integer"),
    ("out-of-range", "op00 0\nop01 4\n", 2, r"op 'op01': device 4 out of range; expected 0..3 \(4 devices\)"),
    ("negative", "op00 -1\n", 1, "op 'op00': device -1 out of range; expected 0..3"),
]


@pytest.mark.parametrize(
    ("text", "line", "message"), [c[1:] for c in TEXT_PLACEMENT_ERRORS], ids=[c[0] for c in TEXT_PLACEMENT_ERRORS]
)
def test_read_placement_text_rejects(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = write_text(tmp_path / "p.txt", text)
    with pytest.raises(InvalidPlacementError, match=f"^{re.escape(str(path))}:{line}: {message}"):
        read_placement(path, lettered_graph(3), devices=4)


def test_read_placement_negative_device_without_devices(tmp_path: Path) -> None:
    path = write_text(tmp_path / "p.txt", "op00 -2\n")
    with pytest.raises(
        InvalidPlacementError, match=f"^{re.escape(str(path))}:1: op 'op00': device -2 out of range; expected >= 0"
    ):
        read_placement(path, lettered_graph(1))


def test_read_placement_missing_ops_named_and_counted(tmp_path: Path) -> None:
    path = write_text(tmp_path / "p.txt", "".join(f"op{i:02d} 0\n" for i in range(8)))
    names = ", ".join(f"'op{i:02d}'" for i in range(8, 16))
    with pytest.raises(
        InvalidPlacementError,
        match=f"^{re.escape(str(path))}: 12 of 20 ops not placed: {names}, \\.\\.\\. \\(12 in all\\)$",
    ):
        read_placement(path, lettered_graph(20))
    short = write_text(tmp_path / "short.txt", "op00 0\n")
    with pytest.raises(InvalidPlacementError, match=r"short\.txt: 1 of 2 ops not placed: 'op01'$"):
        read_placement(short, lettered_graph(2))


def test_parse_placement_lines_names_its_source() -> None:
    with pytest.raises(InvalidPlacementError, match=r"^job\.place:2: unknown op 'nope'"):
        parse_placement_lines(["op00 0", "nope 1"], lettered_graph(1), "job.place")


JSON_PLACEMENT_ERRORS = [
    ("invalid-json", '{"op00": 0,', "invalid JSON at line 1, column 12"),
    ("not-object", "[0, 1]", "expected a JSON object mapping op name to device index"),
    ("unknown-op", '{"op00": 0, "zz": 1}', "unknown op 'zz'"),
    ("twice", '{"op00": 0, "op01": 1, "op00": 1}', "op 'op00' listed twice"),
    ("string-device", '{"op00": "1"}', "op 'op00': device '1' is not an integer"),
    ("float-device", '{"op00": 1.5}', "op 'op00': device 1.5 is not an integer"),
    ("bool-device", '{"op00": true}', "op 'op00': device True is not an integer"),
    ("out-of-range", '{"op00": 0, "op01": 9}', r"op 'op01': device 9 out of range; expected 0..3 \(4 devices\)"),
    ("missing", '{"op00": 0}', "2 of 3 ops not placed: 'op01', 'op02'"),
]


@pytest.mark.parametrize(
    ("text", "message"), [c[1:] for c in JSON_PLACEMENT_ERRORS], ids=[c[0] for c in JSON_PLACEMENT_ERRORS]
)
def test_read_placement_json_rejects(tmp_path: Path, text: str, message: str) -> None:
    path = write_text(tmp_path / "p.json", text)
    with pytest.raises(InvalidPlacementError, match=f"^{re.escape(str(path))}: {message}"):
        read_placement(path, lettered_graph(3), devices=4)


def test_read_placement_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "none.txt"
    with pytest.raises(InvalidPlacementError, match=f"^{re.escape(str(path))}: no such file"):
        read_placement(path, lettered_graph(1))


def test_read_placement_bad_devices_argument(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="devices must be a positive integer"):
        parse_placement_lines(["op00 0"], lettered_graph(1), devices=0)


# ---------------------------------------------------------------------------------------- reference
def reference_set(tmp_path: Path, **texts: str) -> dict[str, Path]:
    """Write the reference file set, defaulting to a small valid one; returns paths by role."""
    defaults = {
        "graph": (
            "digraph {\n"
            "  node [shape=box];\n"
            "  rankdir=LR\n"
            '  "w" -> "w/read";\n'
            '  "w/read"->"matmul" [label="x"]\n'
            "\n"
            "  // an isolated op\n"
            '  "lonely"\n'
            "  matmul -> loss\n"
            '  "w" -> "w/ApplyAdam"\n'
            '  "w/m" -> "w/ApplyAdam"\n'
            '  "w/v" -> "w/ApplyAdam"\n'
            '  "loss" -> "w/ApplyAdam"\n'
            '  "w" -> "w/read"\n'
            '  "init" -> "w/read"\n'
            "}\n"
        ),
        "times": "w::0\nw/read::1\nmatmul::812.5\nloss::3\nw/ApplyAdam::40\nlonely::7\n",
        "sizes": "w::4096\nw/read::4096\nmatmul::1000\nloss::4\nw/m::4096\nw/v::4096\ninit::64\n",
        "variables": "w\nw/m\n\nw/v\n",
        "references": "w/ApplyAdam\n",
        "noops": "init\n",
    }
    defaults.update(texts)
    return {role: write_text(tmp_path / f"set.{role}", text) for role, text in defaults.items()}


def read_set(files: dict[str, Path], **kwargs: Any) -> CostGraph:
    return read_reference(
        files["graph"],
        files["times"],
        files["sizes"],
        variables=files["variables"],
        references=files["references"],
        noops=files["noops"],
        **kwargs,
    )


def test_read_reference_hand_made(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="pardnn.io.reference"):
        graph = read_set(reference_set(tmp_path))
    assert graph.names == ("w", "w/read", "matmul", "lonely", "loss", "w/ApplyAdam", "w/m", "w/v", "init")
    assert graph.name == "set"  # no graph ID: the DOT file's name without suffix
    assert graph.comp_us.tolist() == [0.0, 1.0, 812.5, 7.0, 3.0, 40.0, 0.0, 0.0, 0.0]
    assert graph.out_bytes.tolist() == [4096, 4096, 1000, 0, 4, 0, 4096, 4096, 0]  # init is a no-op
    edges = {(graph.names[s], graph.names[d]): b for s, d, b in zip(graph.edge_src, graph.edge_dst, graph.edge_bytes)}
    assert edges == {
        ("w", "w/read"): 4096,  # listed twice, one edge
        ("w/read", "matmul"): 4096,
        ("matmul", "loss"): 1000,
        ("w", "w/ApplyAdam"): 4096,
        ("w/m", "w/ApplyAdam"): 4096,
        ("w/v", "w/ApplyAdam"): 4096,
        ("loss", "w/ApplyAdam"): 4,
        ("init", "w/read"): 0,  # out of a no-op
    }
    assert [KIND_NAMES[k] for k in graph.kind] == [
        "residual", "normal", "normal", "normal", "normal", "reference", "residual", "residual", "normal",
    ]  # fmt: skip
    # ApplyAdam and the three variables feeding it form one group, labelled by the first variable.
    assert graph.group_names == ("w",)
    assert graph.colocation.tolist() == [0, -1, -1, -1, -1, 0, 0, 0, -1]
    # Missing timings (w/m, w/v, init) and sizes (lonely, w/ApplyAdam) are warned about, with counts.
    assert "no timing for 3 of 9 ops ('w/m', 'w/v', 'init'); they get 0 µs" in caplog.text
    assert "no size for 2 of 9 ops ('lonely', 'w/ApplyAdam'); they get 0 bytes" in caplog.text


def test_read_reference_edges_into_noops_carry_no_bytes(tmp_path: Path) -> None:
    files = reference_set(
        tmp_path,
        graph='"a" -> "deps"\n"deps" -> "b"\n',
        times="",
        sizes="a::8\ndeps::8\nb::8\n",
        variables="",
        references="",
        noops="deps\n",
    )
    graph = read_set(files)
    assert graph.edge_bytes.tolist() == [0, 0]
    assert graph.out_bytes.tolist() == [8, 0, 8]


def test_read_reference_name_from_header_or_argument(tmp_path: Path) -> None:
    files = reference_set(
        tmp_path, graph='digraph "trn-2" {\n"w" -> "w/ApplyAdam"\n}\n', times="", sizes="", variables="w\n", noops=""
    )
    assert read_set(files).name == "trn-2"
    assert read_set(files, name="given").name == "given"


def test_read_reference_reference_op_without_variable_has_no_group(tmp_path: Path) -> None:
    files = reference_set(
        tmp_path, graph='"x" -> "assign"\n"w"\n', times="", sizes="", variables="w\n", references="assign\n", noops=""
    )
    graph = read_set(files)
    assert graph.colocation.tolist() == [-1, -1, -1]


def test_read_reference_dot_chains_attributes_and_bare_ids(tmp_path: Path) -> None:
    files = reference_set(
        tmp_path,
        graph='strict digraph G {\ngraph [rankdir=LR];\na -> "b c" -> d>e [color=red];\n"x" [shape=box];\nd>e->x\n}\n',
        times="",
        sizes="",
        variables="",
        references="",
        noops="",
    )
    graph = read_set(files)
    assert graph.name == "G"
    assert graph.names == ("a", "b c", "d>e", "x")
    assert [(graph.names[s], graph.names[d]) for s, d in zip(graph.edge_src, graph.edge_dst)] == [
        ("a", "b c"),
        ("b c", "d>e"),
        ("d>e", "x"),
    ]


def test_reference_colocation_is_transitive() -> None:
    names = ["v1", "r1", "v2", "r2", "v3", "other"]
    kind = np.array([1, 2, 1, 2, 1, 0], np.int8)
    # v1 -> r1 <- v2 -> r2 <- v3: one chain of updates links all three variables.
    src = np.array([0, 2, 2, 4, 4])
    dst = np.array([1, 1, 3, 3, 5])
    assert reference_colocation(names, kind, src, dst) == ["v1", "v1", "v1", "v1", "v1", None]


def test_read_reference_not_strict_skips_unknown_ops(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    files = reference_set(tmp_path, times="w::1\nghost::5\nRecvTensor::2\n")
    with caplog.at_level(logging.WARNING, logger="pardnn.io.reference"):
        graph = read_set(files, strict=False)
    assert graph.comp_us[graph.index["w"]] == 1.0
    assert "skipped 2 entries for ops not in" in caplog.text and "'ghost', 'RecvTensor'" in caplog.text


@ROUND_TRIP
@given(graph=graphs(reference_set=True))
def test_reference_round_trip_is_exact(graph: CostGraph) -> None:
    with tempfile.TemporaryDirectory() as directory:
        files = write_reference(graph, Path(directory) / "set", "g")
        first = {role: path.read_bytes() for role, path in files.items()}
        read = read_reference(
            files["graph"], files["times"], files["sizes"], variables=files["variables"], references=files["references"]
        )
        assert read == graph
        write_reference(read, Path(directory) / "set", "g")
        assert {role: path.read_bytes() for role, path in files.items()} == first


def test_write_reference_layout(tmp_path: Path) -> None:
    graph = CostGraph.from_named_edges(
        ["w", "a\"b", "upd"], [0.0, 2.5, 1e20], [8, 4, 0], [("w", "upd"), ("a\"b", "upd")],
        kind=["residual", "normal", "reference"], colocation=["w", None, "w"], name="tiny",
    )  # fmt: skip
    files = write_reference(graph, tmp_path, "tiny")
    assert sorted(files) == ["graph", "references", "sizes", "times", "variables"]
    assert files["graph"].read_text() == 'digraph "tiny" {\n"w"\n"a\\"b"\n"upd"\n"w"->"upd"\n"a\\"b"->"upd"\n}\n'
    assert files["times"].read_text() == 'w::0\na"b::2.5\nupd::100000000000000000000\n'
    assert files["sizes"].read_text() == 'w::8\na"b::4\nupd::0\n'
    assert files["variables"].read_text() == "w\n"
    assert files["references"].read_text() == "upd\n"


def test_write_reference_warns_about_what_it_drops(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="pardnn.io.reference"):
        files = write_reference(small_graph(), tmp_path, "small")
    assert "cannot hold op types, parameter bytes, the memory limit, edge bytes" in caplog.text
    assert "colocation" not in caplog.text  # small_graph's group is the one the reference implies
    graph = read_reference(
        files["graph"], files["times"], files["sizes"], variables=files["variables"], references=files["references"]
    )
    assert graph.names == small_graph().names and graph.colocation.tolist() == small_graph().colocation.tolist()


def test_write_reference_refuses_line_breaks(tmp_path: Path) -> None:
    graph = CostGraph(["a\nb"], [1], [0], [], [])
    with pytest.raises(InvalidGraphError, match="has a line break or surrounding whitespace"):
        write_reference(graph, tmp_path, "g")


REFERENCE_ERRORS = [
    ("dot-malformed", "graph", 'digraph {\n"a" -> "b"\n"a" => "b"\n}\n', 3, r"cannot read '\"a\" => \"b\"'; expected"),
    ("dot-subgraph", "graph", 'digraph {\nsubgraph cluster_0 {\n"a"\n}\n}\n', 2, "cannot read 'subgraph cluster_0 {'"),
    ("dot-self-loop", "graph", '"a" -> "b"\n"b" -> "b"\n', 2, "edge 'b' -> 'b' is a self-loop"),
    ("times-no-separator", "times", "a::1\nb 2\n", 2, "expected 'name::microseconds', got 'b 2'"),
    ("times-no-value", "times", "a::\n", 1, "expected 'name::microseconds', got 'a::'"),
    ("times-not-number", "times", "a::fast\n", 1, "op 'a': time 'fast' is not a number"),
    ("times-negative", "times", "a::-3\n", 1, "op 'a': time '-3'; expected a finite number >= 0"),
    ("times-nan", "times", "a::nan\n", 1, "op 'a': time 'nan'; expected a finite number >= 0"),
    ("times-inf", "times", "a::inf\n", 1, "op 'a': time 'inf'; expected a finite number >= 0"),
    ("times-twice", "times", "a::1\nb::2\na::1\n", 3, r"op 'a' listed twice \(first on line 1\)"),
    ("times-unknown", "times", "a::1\nzz::2\n", 2, r"unknown op 'zz' \(not in .*set\.graph\)"),
    ("sizes-fraction", "sizes", "a::1.5\n", 1, "op 'a': size '1.5'; expected a whole number of bytes"),
    ("sizes-negative", "sizes", "a::-8\n", 1, "op 'a': size '-8'; expected a whole number of bytes >= 0"),
    ("sizes-not-number", "sizes", "a::8MB\n", 1, "op 'a': size '8MB' is not a number"),
    ("sizes-twice", "sizes", "b::1\nb::1\n", 2, r"op 'b' listed twice \(first on line 1\)"),
    ("sizes-unknown", "sizes", "zz::1\n", 1, "unknown op 'zz'"),
    ("variables-unknown", "variables", "a\nzz\n", 2, "unknown op 'zz'"),
    ("variables-twice", "variables", "a\na\n", 2, r"op 'a' listed twice \(first on line 1\)"),
    ("references-unknown", "references", "zz\n", 1, "unknown op 'zz'"),
    ("noops-unknown", "noops", "\nzz\n", 2, "unknown op 'zz'"),
    ("variable-and-reference", "references", "b\na\n", 2, r"op 'a' is also listed in .*set\.variables:1; an op is"),
]


@pytest.mark.parametrize(
    ("role", "text", "line", "message"), [c[1:] for c in REFERENCE_ERRORS], ids=[c[0] for c in REFERENCE_ERRORS]
)
def test_read_reference_rejects(tmp_path: Path, role: str, text: str, line: int, message: str) -> None:
    valid = {
        "graph": '"a" -> "b"\n',
        "times": "a::1\n",
        "sizes": "a::1\n",
        "variables": "a\n",
        "references": "",
        "noops": "",
    }
    files = reference_set(tmp_path, **{**valid, role: text})
    with pytest.raises(InvalidGraphError, match=f"^{re.escape(str(files[role]))}:{line}: {message}"):
        read_set(files)


def test_read_reference_cycle_names_file(tmp_path: Path) -> None:
    files = reference_set(
        tmp_path,
        graph='"a" -> "b"\n"b" -> "c"\n"c" -> "a"\n',
        times="",
        sizes="",
        variables="",
        references="",
        noops="",
    )
    with pytest.raises(
        InvalidGraphError,
        match=f"^{re.escape(str(files['graph']))}: graph 'set' has a cycle: '[abc]', '[abc]', '[abc]', '[abc]'$",
    ):
        read_set(files)


def test_read_reference_missing_file(tmp_path: Path) -> None:
    files = reference_set(tmp_path)
    missing = tmp_path / "nowhere.times"
    with pytest.raises(InvalidGraphError, match=f"^{re.escape(str(missing))}: no such file \\(the timings file\\)"):
        read_reference(files["graph"], missing, files["sizes"])


# ---------------------------------------------------------------------------------- ordered placements
def _fork() -> CostGraph:
    return CostGraph(["a", "b", "c", "d"], [1.0, 10.0, 10.0, 100.0], [0, 0, 1000, 0], [0, 0, 2], [1, 2, 3])


@pytest.mark.parametrize("suffix", [".txt", ".json"])
def test_an_ordered_placement_round_trips(tmp_path, suffix):
    g, placement, order = _fork(), np.array([0, 0, 0, 1]), np.array([0, 2, 1, 0])
    path = tmp_path / f"p{suffix}"
    write_placement(path, g, placement, order=order)
    read, position = read_ordered_placement(path, g, devices=2)
    assert read.tolist() == placement.tolist() and position.tolist() == order.tolist()
    assert read_placement(path, g).tolist() == placement.tolist()  # the plain reader ignores the order
    write_placement(path, g, placement)
    assert read_ordered_placement(path, g)[1] is None


def test_the_first_line_decides_the_form(tmp_path):
    g = _fork()
    path = tmp_path / "p.txt"
    path.write_text("a 0 0\nb 0\nc 0 1\nd 1 0\n")
    with pytest.raises(InvalidPlacementError, match=r"p.txt:2: expected 'op_name device_index position'"):
        read_ordered_placement(path, g)
    path.write_text("a 0\nb 0 2\nc 0\nd 1\n")
    with pytest.raises(InvalidPlacementError, match=r"p.txt:2: unknown op 'b 0'"):
        read_ordered_placement(path, g)
    path.write_text("a 0 0\nb 0 -2\nc 0 1\nd 1 0\n")
    with pytest.raises(InvalidPlacementError, match=r"p.txt:2: op 'b': position '-2' is not an integer >= 0"):
        read_ordered_placement(path, g)
    json_path = tmp_path / "p.json"
    json_path.write_text('{"a": [0, 0], "b": 0, "c": [0, 1], "d": [1, 0]}')
    with pytest.raises(InvalidPlacementError, match=r"op 'b': 0; expected \[device_index, position\]"):
        read_ordered_placement(json_path, g)


def test_an_order_against_the_graph_is_refused_naming_the_file(tmp_path):
    g = _fork()
    path = tmp_path / "p.txt"
    path.write_text("a 0 1\nb 0 0\nc 0 2\nd 1 0\n")
    with pytest.raises(InvalidPlacementError, match=r"p.txt: op 'b' \(position 0\) runs before its input 'a'"):
        read_ordered_placement(path, g)
    with pytest.raises(InvalidPlacementError, match="both at position 1 on device 0"):
        format_placement(g, np.array([0, 0, 0, 1]), order=np.array([0, 1, 1, 0]))


def test_a_plain_file_whose_first_name_holds_a_space_still_reads(tmp_path):
    """'layer 3 0' is op 'layer 3' on device 0, not op 'layer' at position 0: the graph decides."""
    g = CostGraph(["layer 3", "layer"], [1.0, 1.0], [8, 8], [0], [1])
    path = tmp_path / "p.txt"
    write_placement(path, g, np.array([0, 1]))
    assert path.read_text().splitlines()[0] == "layer 3 0"
    placement, order = read_ordered_placement(path, g)
    assert placement.tolist() == [0, 1] and order is None
    with pytest.raises(InvalidPlacementError, match="whitespace cannot be written to an ordered text placement"):
        write_placement(path, g, np.array([0, 1]), order=np.array([0, 0]))
    write_placement(tmp_path / "p.json", g, np.array([0, 0]), order=np.array([0, 1]))
    placement, order = read_ordered_placement(tmp_path / "p.json", g)
    assert placement.tolist() == [0, 0] and order.tolist() == [0, 1]


# ---------------------------------------------------------------------------------------- version 2: copies
def _two_copies() -> CostGraph:
    """Two micro-batches of a 2-op chain (x -> y), their outputs summed by a shared op."""
    return CostGraph(["x", "y", "m1/x", "m1/y", "sum"], [1.0, 2.0, 1.0, 2.0, 0.5], [4, 8, 4, 8, 8],
                     [0, 2, 1, 3], [1, 3, 4, 4], ops=["X", "Y", "X", "Y", "AddN"],
                     micro_batch=[0, 0, 1, 1, None], copy_of=[None, None, 0, 1, None], name="copies")


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_version_2_round_trip(tmp_path: Path, suffix: str) -> None:
    graph = _two_copies()
    path = tmp_path / f"copies{suffix}"
    write_graph(graph, path)
    back = read_graph(path)
    assert back == graph and back.micro_batches == 2
    assert back.micro_batch.tolist() == [0, 0, 1, 1, -1] and back.copy_of.tolist() == [0, 1, 0, 1, 4]
    assert graph_from_dict(graph_to_dict(graph)) == graph
    document = graph_to_dict(graph)
    assert document["version"] == 2
    assert document["nodes"][2]["micro_batch"] == 1 and document["nodes"][2]["copy_of"] == "x"
    assert document["nodes"][4]["micro_batch"] is None and document["nodes"][4]["copy_of"] is None
    assert graph != graph.replace(micro_batch=None)  # metadata takes part in equality
    assert graph.replace(comp_us=np.ones(5)).copy_of.tolist() == graph.copy_of.tolist()  # replace keeps it


def test_graph_without_metadata_writes_version_1_byte_identical(tmp_path: Path) -> None:
    """A version 1 file still reads (no metadata) and writes back byte for byte."""
    graph = small_graph()
    path = tmp_path / "v1.json"
    write_graph(graph, path)
    raw = path.read_bytes()
    assert raw.startswith(b'{"format": "pardnn-graph", "version": 1,') and b"micro_batch" not in raw
    back = read_graph(path)
    assert back.micro_batch is None and back.copy_of is None and back.micro_batches == 1
    write_graph(back, tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == raw


def _mutated(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    document = graph_to_dict(_two_copies())
    change(document)
    return document


COPY_ERRORS = [
    ("v1-has-field", lambda d: d.update(version=1),
     r"node #0 'x': field 'micro_batch' in a version 1 file; micro_batch and copy_of are fields of version 2"),
    ("unknown-copy", lambda d: d["nodes"][2].update(copy_of="nope"),
     r"node #2 'm1/x': copy_of = 'nope'; expected the name of an op of micro-batch 0"),
    ("copy-not-in-0", lambda d: d["nodes"][3].update(copy_of="m1/y"),
     r"node #3 'm1/y': copy_of = node #3 'm1/y', which is in micro-batch 1; expected an op of micro-batch 0"),
    ("copy-of-shared", lambda d: d["nodes"][2].update(copy_of="sum", op="AddN"),
     r"node #2 'm1/x': copy_of = node #4 'sum', which is in no micro-batch; expected an op of micro-batch 0"),
    ("other-type", lambda d: d["nodes"][2].update(copy_of="y"),
     r"node #2 'm1/x': copy_of = node #1 'y', an op of type 'Y'; expected an op of this op's type 'X'"),
    ("first-copies-other", lambda d: d["nodes"][1].update(copy_of="x", op="X"),
     r"node #1 'y': copy_of = node #0 'x'; an op of micro-batch 0 copies itself \(expected null\)"),
    ("micro-batch-type", lambda d: d["nodes"][2].update(micro_batch="1"),
     r"node #2 'm1/x': micro_batch = '1'; expected a whole number >= 0"),
    ("micro-batch-negative", lambda d: d["nodes"][2].update(micro_batch=-2),
     r"node #2 'm1/x': micro_batch = -2; expected a whole number >= 0"),
    ("copy-of-type", lambda d: d["nodes"][2].update(copy_of=0), r"node #2 'm1/x': copy_of = 0; expected the name"),
]


@pytest.mark.parametrize(("change", "message"), [case[1:] for case in COPY_ERRORS], ids=[c[0] for c in COPY_ERRORS])
def test_bad_copy_metadata_names_file_node_field_value(tmp_path: Path, change: Any, message: str) -> None:
    document = _mutated(change)
    path = write_text(tmp_path / "bad.json", json.dumps(document))
    with pytest.raises(InvalidGraphError, match=rf"^{re.escape(str(path))}: (graph 'copies': )?{message}"):
        read_graph(path)
    with pytest.raises(InvalidGraphError, match=rf"^bad\.json: (graph 'copies': )?{message}"):
        graph_from_dict(document, "bad.json")


# ------------------------------------------------------ the compiled text writer (pardnn.io.placement_writer)
def _text_by_hand(names: list[str], devices: list[int], positions: list[int] | None) -> str:
    """The text placement format spelled out line by line (docs/formats.md, "Placement")."""
    if positions is None:
        return "".join(f"{name} {device}\n" for name, device in zip(names, devices, strict=True))
    return "".join(f"{name} {device} {position}\n"
                   for name, device, position in zip(names, devices, positions, strict=True))


def _writable(name: str) -> bool:
    return name == name.strip() and len(name.splitlines()) == 1 and re.search(r"(?:^|\s)#", name) is None


def _positions(devices: list[int]) -> list[int]:
    """Each op's position on its device: its ops numbered 0, 1, ... in graph order."""
    counts: dict[int, int] = {}
    positions = []
    for device in devices:
        positions.append(counts.get(device, 0))
        counts[device] = positions[-1] + 1
    return positions


WRITABLE_NAME = TF_NAME | st.text(min_size=1, max_size=6)  # mostly TensorFlow-style, some not
NUMBERS = st.sampled_from([0, 1, 9, 10, 99, 100, 12345, 2**62, 2**63 - 1]) | st.integers(0, 2**63 - 1)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(WRITABLE_NAME, min_size=1, max_size=12, unique=True), data=st.data())
def test_text_writer_writes_every_line_as_spelled_out(names: list[str], data: st.DataObject) -> None:
    # Devices of any width: the compiled writer (TensorFlow-style names) and the line-by-line one (the
    # rest) give the bytes the format spells out, or refuse a name the text form cannot hold.
    n = len(names)
    graph = CostGraph(names, [1.0] * n, [0] * n, [], [])
    devices = data.draw(st.lists(NUMBERS, min_size=n, max_size=n))
    for order in (None, _positions(devices)):
        try:
            written = format_placement(graph, devices, order=order)
        except InvalidPlacementError:
            assert not all(_writable(name) and (order is None or len(name.split()) == 1) for name in names)
        else:
            assert written == _text_by_hand(names, devices, order)


def test_text_writer_compiled_and_line_by_line_paths_both_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same check over seeded random graphs, counting which writer ran (the line-by-line one is
    # watched): graphs of TensorFlow-style names must all take the compiled one, the others (a space,
    # a non-ASCII character, a tab) the line-by-line one. A graph read from a binary file (its names
    # still joined) writes the same bytes, ordered or not, without splitting its names.
    from pardnn.io import placement_writer

    line_by_line_calls: list[int] = []
    line_by_line = placement_writer._lines

    def watched(*args: Any) -> str:
        line_by_line_calls.append(1)
        return line_by_line(*args)

    monkeypatch.setattr(placement_writer, "_lines", watched)
    rng = np.random.default_rng(0)
    alphabet = list("abcXYZ019_./-:>")
    compiled = 0
    for trial in range(200):
        names = sorted({"".join(rng.choice(alphabet, size=int(rng.integers(1, 8))))
                        for _ in range(int(rng.integers(1, 12)))})
        tf_style = trial % 4 != 0
        if not tf_style:
            names.append(("a b", "é", "x\ty")[trial % 3])
        graph = CostGraph(names, [1.0] * len(names), [0] * len(names), [], [])
        devices = rng.integers(0, 2**40, graph.n) // (10 ** rng.integers(0, 12, graph.n))
        positions = _positions(devices.tolist())
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / "g.pardnn"
            write_graph(graph, path)
            from_binary = read_any_graph(path)
        assert from_binary._names is None  # the binary reader's names stay joined
        for order in (None, positions if len(names[-1].split()) == 1 else None):
            expected = _text_by_hand(names, devices.tolist(), order)
            line_by_line_calls.clear()
            assert format_placement(graph, devices, order=order) == expected
            assert format_placement(from_binary, devices, order=order) == expected
            assert len(line_by_line_calls) == (0 if tf_style else 2)
        assert from_binary._names is None or not tf_style
        compiled += tf_style
    assert compiled == 150


def test_text_writer_keeps_a_lone_surrogate_as_before() -> None:
    # A name with a lone surrogate (JSON allows "\ud800") cannot be UTF-8 encoded: format_placement
    # gives the text as before, write_placement refuses it as before (the encoder's error).
    graph = CostGraph(["a", "b\ud800"], [1.0, 1.0], [0, 0], [], [])
    assert format_placement(graph, [0, 1]) == "a 0\nb\ud800 1\n"
    with tempfile.TemporaryDirectory() as directory, pytest.raises(UnicodeEncodeError):
        write_placement(Path(directory) / "p.txt", graph, [0, 1])
