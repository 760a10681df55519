"""The compact binary graph file (``.pardnn``, pardnn/io/binary.py) and ``pardnn convert`` between the forms."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pardnn.cli import main
from pardnn.cli.options import EXIT_BAD_INPUT, EXIT_OK, EXIT_USAGE
from pardnn.costs.graph import CostGraph
from pardnn.costs.synthetic import dnn_graph
from pardnn.errors import InvalidGraphError
from pardnn.io import read_any_graph, read_binary_graph, read_graph, write_binary_graph, write_graph
from pardnn.io.binary import MAGIC
from tests.helpers.graphs import small_graph

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "mlp-train.json"
HAS_COPIES = "micro_batch" in CostGraph._REPLACEABLE  # graph format version 2's metadata, where the graph has it


def every_field() -> CostGraph:
    """test_io's graph with every field set (kinds, colocation labels, op types, parameter bytes, a memory
    limit, edge bytes other than the producer's), with names and labels that are not ASCII and a byte
    count beyond 32 bits."""
    graph = small_graph()
    names = list(graph.names)
    names[3] = "dënse/BiasAdd ✓"
    labels = [None if g < 0 else graph.group_names[g] for g in graph.colocation.tolist()]
    labels[1] = "group ✓"
    return graph.replace(names=names, out_bytes=[*graph.out_bytes[:2].tolist(), 2**40, *graph.out_bytes[3:].tolist()],
                         colocation=labels, name="every field ✓", memory_limit_bytes=2**34)


def assert_same(a: CostGraph, b: CostGraph) -> None:
    """Equal in every field the graph's construction takes, with the dtypes the graph stores."""
    assert a == b
    for field in CostGraph._REPLACEABLE:
        x, y = getattr(a, field), getattr(b, field)
        if isinstance(x, np.ndarray):
            assert isinstance(y, np.ndarray) and x.dtype == y.dtype and np.array_equal(x, y), field
        else:
            assert x == y, field
    assert a.group_names == b.group_names


def round_trip(graph: CostGraph, path: Path) -> CostGraph:
    write_binary_graph(graph, path)
    return read_binary_graph(path)


@pytest.mark.parametrize("graph", [every_field(), dnn_graph(3000, seed=4), CostGraph([], [], [], [], [], name="e")],
                         ids=["every-field", "synthetic", "empty"])
def test_round_trip_equals_the_graph(graph, tmp_path):
    assert_same(round_trip(graph, tmp_path / "g.pardnn"), graph)


def test_round_trip_of_names_with_nul_and_separators(tmp_path):
    graph = CostGraph(["a\0b", "\0", "x y"], [1.0, 2.0, 3.0], [1, 2, 3], [0, 1], [1, 2])
    assert_same(round_trip(graph, tmp_path / "g.pardnn"), graph)


@pytest.mark.skipif(not HAS_COPIES, reason="this CostGraph has no micro-batch metadata")
def test_round_trip_keeps_the_micro_batch_metadata(tmp_path):
    base = every_field()
    n = base.n
    graph = base.replace(micro_batch=[-1] * n, copy_of=list(range(n)))
    back = round_trip(graph, tmp_path / "g.pardnn")
    assert_same(back, graph)
    assert back.micro_batch is not None and back.copy_of is not None
    assert round_trip(base, tmp_path / "plain.pardnn").micro_batch is None


def test_writing_is_deterministic_and_json_binary_json_gives_the_same_bytes(tmp_path):
    graph = dnn_graph(2000, seed=1)
    write_graph(graph, tmp_path / "a.pardnn")
    write_graph(graph, tmp_path / "b.pardnn")
    assert (tmp_path / "a.pardnn").read_bytes() == (tmp_path / "b.pardnn").read_bytes()
    assert (tmp_path / "a.pardnn").read_bytes()[:8] == MAGIC
    write_graph(graph, tmp_path / "g.json.gz")
    write_graph(read_graph(tmp_path / "a.pardnn"), tmp_path / "back.json.gz")
    assert (tmp_path / "g.json.gz").read_bytes() == (tmp_path / "back.json.gz").read_bytes()
    assert_same(read_any_graph(tmp_path / "a.pardnn"), read_any_graph(tmp_path / "g.json.gz"))


def test_the_binary_form_is_smaller_than_json(tmp_path):
    graph = dnn_graph(5000, seed=0)
    write_graph(graph, tmp_path / "g.json")
    write_graph(graph, tmp_path / "g.pardnn")
    assert (tmp_path / "g.pardnn").stat().st_size * 3 < (tmp_path / "g.json").stat().st_size


# ---------------------------------------------------------------------------------------- broken files
def one_line_error(path: Path) -> str:
    with pytest.raises(InvalidGraphError) as caught:
        read_any_graph(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message


def test_truncated_file_gives_one_line_naming_it(tmp_path):
    path = tmp_path / "g.pardnn"
    write_binary_graph(dnn_graph(500, seed=0), path)
    data = path.read_bytes()
    for size in (0, 5, 12, 40, len(data) // 2, len(data) - 1):
        cut = tmp_path / f"cut-{size}.pardnn"
        cut.write_bytes(data[:size])
        message = one_line_error(cut)
        assert "truncated" in message or "not a binary pardnn graph file" in message or "corrupt" in message


def test_corrupt_data_or_header_gives_one_line_naming_it(tmp_path):
    path = tmp_path / "g.pardnn"
    write_binary_graph(dnn_graph(500, seed=0), path)
    data = bytearray(path.read_bytes())
    flipped = bytearray(data)
    flipped[-100] ^= 0xFF
    (tmp_path / "flip.pardnn").write_bytes(flipped)
    assert "checksum" in one_line_error(tmp_path / "flip.pardnn")
    header = bytearray(data)
    header[20:30] = b"@@@@@@@@@@"
    (tmp_path / "header.pardnn").write_bytes(header)
    assert "corrupt binary graph file header" in one_line_error(tmp_path / "header.pardnn")
    (tmp_path / "json.pardnn").write_bytes(EXAMPLE.read_bytes())
    assert "not a binary pardnn graph file" in one_line_error(tmp_path / "json.pardnn")
    assert "no such file" in one_line_error(tmp_path / "missing.pardnn")


def test_a_graph_rule_broken_inside_a_sound_container_names_the_file(tmp_path):
    # The reader's graph is built by CostGraph, which checks every rule as for any reader: a file whose
    # checksum holds but whose values break a rule (written from a stand-in) is refused naming the file.
    graph = every_field()
    fields = {field: getattr(graph, field)
              for field in (*CostGraph._REPLACEABLE, "group_names", "joined_names", "n", "m")}
    fields["comp_us"] = np.array([0.0, 1.5, -812.0, 3.25, 0.0, 40.0])
    path = tmp_path / "negative.pardnn"
    write_binary_graph(SimpleNamespace(**fields), path)  # type: ignore[arg-type]
    message = one_line_error(path)
    assert "node #2 'dense/MatMul': comp_us = -812.0" in message
    fields["comp_us"] = graph.comp_us
    for names, culprit in ((("w", "w", *graph.names[2:]), "node #1 'w': duplicate name (node #0 has it too)"),
                           (("w", "", *graph.names[2:]), "node #1: name = ''; expected a non-empty string")):
        fields["names"], fields["joined_names"] = names, "\0".join(names)  # the names are split only when asked
        write_binary_graph(SimpleNamespace(**fields), path)  # type: ignore[arg-type]
        assert one_line_error(path) == f"{path}: {culprit}"
    fields["comp_us"] = 1.0  # a column written as a scalar: the header is refused
    write_binary_graph(SimpleNamespace(**fields), path)  # type: ignore[arg-type]
    assert "an array field among its scalars" in one_line_error(path)


# ---------------------------------------------------------------------------------------- pardnn convert
def test_convert_both_ways_on_the_command_line(tmp_path, capsys):
    binary, json_back = tmp_path / "mlp.pardnn", tmp_path / "mlp.json"
    assert main(["convert", str(EXAMPLE), "-o", str(binary)]) == EXIT_OK
    assert main(["convert", str(binary), "-o", str(json_back)]) == EXIT_OK
    assert "wrote" in capsys.readouterr().out
    original = read_any_graph(EXAMPLE)  # a version 1 JSON file, as written before the binary form
    assert_same(read_any_graph(binary), original)
    assert_same(read_any_graph(json_back), original)
    write_graph(original, tmp_path / "direct.json")
    assert json_back.read_bytes() == (tmp_path / "direct.json").read_bytes()
    assert main(["convert", str(binary), "--name", "renamed", "-o", str(tmp_path / "r.pardnn")]) == EXIT_OK
    assert read_any_graph(tmp_path / "r.pardnn").name == "renamed"


def test_convert_refuses_both_inputs_or_neither(tmp_path, capsys):
    out = str(tmp_path / "g.pardnn")
    assert main(["convert", str(EXAMPLE), "--dot", "x.dot", "-o", out]) == EXIT_USAGE
    assert main(["convert", "--dot", "x.dot", "-o", out]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "not both" in err and "--times, --sizes missing" in err
    bad = tmp_path / "bad.pardnn"
    bad.write_bytes(MAGIC)
    assert main(["convert", str(bad), "-o", str(tmp_path / "x.json")]) == EXIT_BAD_INPUT
    assert f"{bad}: truncated" in capsys.readouterr().err


def test_place_reads_the_binary_form_and_writes_the_same_placement(tmp_path):
    shutil.copy(EXAMPLE, tmp_path / "g.json")
    assert main(["convert", str(tmp_path / "g.json"), "-o", str(tmp_path / "g.pardnn")]) == EXIT_OK
    for form in ("json", "pardnn"):
        assert main(["place", str(tmp_path / f"g.{form}"), "-k", "2", "-q", "-o", str(tmp_path / f"{form}.txt")]) == 0
    assert (tmp_path / "json.txt").read_bytes() == (tmp_path / "pardnn.txt").read_bytes()


def test_generate_and_info_take_the_binary_form(tmp_path, capsys):
    path = tmp_path / "g.pardnn"
    assert main(["generate", "--ops", "400", "--seed", "2", "-o", str(path)]) == EXIT_OK
    assert path.read_bytes()[:8] == MAGIC
    assert main(["info", str(path)]) == EXIT_OK
    assert "graph 'dnn-400-s2'" in capsys.readouterr().out
