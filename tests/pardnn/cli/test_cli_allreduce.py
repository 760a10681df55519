"""``pardnn simulate`` and ``pardnn place`` with replicas: the step as compute + exposed allreduce."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pardnn import CostGraph, Kind
from pardnn.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_USAGE, main
from pardnn.io import write_graph

MB = 1_000_000


@pytest.fixture
def two_layers(tmp_path: Path) -> Path:
    """g1 (100 µs, 1 MB) -> g2 (100 µs, 1 MB), each feeding its variable's update (1 µs); one device."""
    graph = CostGraph.from_named_edges(
        ["g1", "u1", "g2", "u2"], [100.0, 1.0, 100.0, 1.0], [MB, 0, MB, 0],
        [("g1", "u1"), ("g1", "g2", 8), ("g2", "u2")],
        kind=[Kind.NORMAL, Kind.REFERENCE, Kind.NORMAL, Kind.REFERENCE])
    write_graph(graph, tmp_path / "g.json")
    (tmp_path / "p.txt").write_text("g1 0\nu1 0\ng2 0\nu2 0\n")
    return tmp_path


def test_simulate_splits_the_step_by_hand(two_layers: Path, capsys) -> None:
    """2 nodes of the default preset (10 µs a ring step) at 1 GB/s: b bytes take b / 1000 + 20 µs; Horovod's
    cycles begin every 1 ms from 0. g1 (ready at 100) and g2 (at 200) both wait for the cycle of 1000, which
    fuses them: 2 MB, 2020 µs, and copying them in and out of the fusion buffer at the V100's 900 GB/s,
    4.44 µs: done 3024.44; u1 and u2 run until 3026.44. Alone: 202 µs."""
    assert main(["simulate", str(two_layers / "g.json"), str(two_layers / "p.txt"), "--nodes", "2",
                 "--network", "1GB/s", "--json"]) == EXIT_OK
    allreduce = json.loads(capsys.readouterr().out)["allreduce"]
    copies = 2 * 2 * MB / 900e9 * 1e6
    assert allreduce == {"compute_us": 202.0, "step_us": pytest.approx(3022.0 + copies),
                         "exposed_allreduce_us": pytest.approx(2820.0 + copies),
                         "allreduce_busy_us": pytest.approx(2020.0 + copies), "allreduce_buffers": 1,
                         "gradient_bytes": 2 * MB, "replicas": 2}


def test_simulate_prints_compute_exposed_and_step(two_layers: Path, capsys) -> None:
    assert main(["simulate", str(two_layers / "g.json"), str(two_layers / "p.txt"), "--nodes", "2",
                 "--network", "1GB/s"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "replicas        2 node(s) x 1 = 2" in out
    assert "compute 202.0 us + exposed allreduce 2.824 ms = 3.026 ms" in out
    assert "(allreduce busy 2.024 ms, 0% of it hidden)" in out  # it starts after the step's compute ends


def test_one_replica_reports_no_allreduce(two_layers: Path, capsys) -> None:
    assert main(["simulate", str(two_layers / "g.json"), str(two_layers / "p.txt"), "--json"]) == EXIT_OK
    assert "allreduce" not in json.loads(capsys.readouterr().out)


def test_place_reports_the_step_with_replicas(two_layers: Path, capsys) -> None:
    """A DGX-2 node's network (100 GB/s) and 8 replicas in each of 2 nodes."""
    assert main(["place", str(two_layers / "g.json"), "-k", "1", "-o", str(two_layers / "out.txt"), "--json",
                 "--nodes", "2", "--replicas-per-node", "8", "--node", "dgx-2"]) == EXIT_OK
    allreduce = json.loads(capsys.readouterr().out)["allreduce"]
    assert allreduce["replicas"] == 16 and allreduce["compute_us"] == 202.0
    assert allreduce["step_us"] == pytest.approx(allreduce["compute_us"] + allreduce["exposed_allreduce_us"])
    assert allreduce["run_order"] == ""  # one device: no run order to judge with the allreduce


@pytest.mark.parametrize("args, words, expected", [
    (["--nodes", "0"], "argument --nodes: '0': expected a whole number >= 1", EXIT_USAGE),
    (["--node", "dgx-9"], "argument --node: 'dgx-9': expected a device preset or dgx-2, dgx-a100, dgx-h100",
     EXIT_USAGE),
    (["--nodes", "2", "--network", "fast"], "--network", EXIT_BAD_INPUT),
])
def test_bad_cluster_options_are_one_line(two_layers: Path, capsys, args: list[str], words: str,
                                          expected: int) -> None:
    try:
        code = main(["simulate", str(two_layers / "g.json"), str(two_layers / "p.txt"), *args])
    except SystemExit as stop:  # argparse's own usage error
        code = stop.code
    err = capsys.readouterr().err
    assert code == expected and words in err and "Traceback" not in err
