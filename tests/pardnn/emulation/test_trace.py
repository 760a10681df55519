"""pardnn/emulation/trace.py and `pardnn simulate --trace/--memory-plot`: the emulated step as a trace and a plot."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pardnn import CostGraph, Machine
from pardnn.cli import EXIT_OK, main
from pardnn.emulation.emulator import emulate
from pardnn.emulation.memory import track_memory
from pardnn.emulation.trace import chrome_trace, memory_series, plot_memory
from pardnn.io import write_graph
from tests.conftest import random_dags

LINK = dict(bandwidth="1GB/s", latency="1us")


def diamond() -> tuple[CostGraph, Machine, np.ndarray]:
    """a(1) -> b(2), a -> c(3), b -> d(4), c -> d; 1000-byte outputs, d none. b, d on device 0; a, c on 1.
    a 0-1 and c 1-4 on device 1; b waits for a's copy (1 + 1 us): 3-5; d waits for c's (4 + 2): 6-10."""
    g = CostGraph(["a", "b", "c", "d"], [1, 2, 3, 4], [1000, 1000, 1000, 0], [0, 0, 1, 2], [1, 2, 3, 3], name="diamond")
    return g, Machine(2, **LINK), np.array([1, 0, 1, 0])


def test_memory_series_by_hand():
    """Device 1 holds a's output from its start (0) until c finishes (4) and its copy has left (3), and
    c's from 1 until its copy lands on device 0 (6): 1000, 2000 from 1, 1000 from 4, 0 from 6.
    Device 0 receives a's copy from the start of its transfer (1) until b finishes (5), holds b's output
    from 3 until d finishes (10) and c's copy from 4 until 10: 0, 1000, 2000, 3000, 2000, 0."""
    g, machine, placement = diamond()
    schedule = emulate(g, machine, placement)
    memory = track_memory(g, machine, placement, schedule)
    times, level = memory_series(memory, 1)
    assert times.tolist() == [0, 1, 4, 6] and level.tolist() == [1000, 2000, 1000, 0]
    times, level = memory_series(memory, 0)
    assert times.tolist() == [0, 1, 3, 4, 5, 10] and level.tolist() == [0, 1000, 2000, 3000, 2000, 0]
    assert memory.peak_bytes.tolist() == [3000, 2000]


def test_trace_by_hand():
    g, machine, placement = diamond()
    schedule = emulate(g, machine, placement)
    trace = chrome_trace(g, machine, placement, schedule, track_memory(g, machine, placement, schedule))
    events = trace["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert tracks == {0: "device 0", 1: "device 1"}
    ops = {e["name"]: (e["tid"], e["ts"], e["dur"]) for e in events if e["ph"] == "X"}
    assert ops == {"a": (1, 0, 1), "c": (1, 1, 3), "b": (0, 3, 2), "d": (0, 6, 4)}
    starts = sorted((e["tid"], e["args"]["bytes"], e["args"]["arrived_us"]) for e in events if e["ph"] == "s")
    ends = sorted((e["tid"], e["ts"]) for e in events if e["ph"] == "f")
    assert starts == [(1, 1000, 3.0), (1, 1000, 6.0)] and ends == [(0, 3.0), (0, 6.0)]
    counters = [(e["ts"], e["args"]["bytes"]) for e in events if e["ph"] == "C" and e["name"] == "memory device 0"]
    assert counters == [(0, 0), (1, 1000), (3, 2000), (4, 3000), (5, 2000), (10, 0)]
    assert trace["otherData"]["makespan_us"] == 10 and trace["otherData"]["cut_edges"] == 2
    json.dumps(trace)  # plain JSON types only


@given(random_dags(max_ops=40), st.integers(1, 4))
def test_series_peak_is_the_trackers_peak(g, k):
    """The counter track's highest level is the tracker's peak, but for buffers of zero length, which
    the tracker counts at their instant and the series does not show."""
    machine = Machine(k)
    placement = np.arange(g.n) % k
    memory = track_memory(g, machine, placement, emulate(g, machine, placement))
    zero = memory.buffer_free_us == memory.buffer_alloc_us
    for d in range(k):
        _, level = memory_series(memory, d)
        assert level.max() <= memory.peak_bytes[d]
        assert (level >= 0).all()
        if not (zero & (memory.buffer_device == d) & (memory.buffer_bytes > 0)).any():
            assert level.max() == memory.peak_bytes[d]


def test_simulate_writes_trace_and_plot(tmp_path, capsys):
    g, _, _ = diamond()
    write_graph(g, tmp_path / "g.json")
    (tmp_path / "p.txt").write_text("a 1\nb 0\nc 1\nd 0\n")
    args = ["simulate", str(tmp_path / "g.json"), str(tmp_path / "p.txt"), "--bandwidth", "1GB/s", "--latency", "1us"]
    assert main([*args, "--json", "--trace", str(tmp_path / "t.json.gz"), "--memory-plot",
                 str(tmp_path / "m.png"), "--memory", "4KB", "--reserve", "0"]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    trace = json.loads(gzip.decompress((tmp_path / "t.json.gz").read_bytes()))
    assert trace["otherData"]["makespan_us"] == report["makespan_us"] == 10
    assert {e["tid"] for e in trace["traceEvents"] if e["ph"] == "X"} == {0, 1}
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_names_a_missing_folder(tmp_path, capsys):
    g, _, _ = diamond()
    write_graph(g, tmp_path / "g.json")
    (tmp_path / "p.txt").write_text("a 1\nb 0\nc 1\nd 0\n")
    assert main(["simulate", str(tmp_path / "g.json"), str(tmp_path / "p.txt"), "--trace",
                 str(tmp_path / "no" / "t.json")]) != EXIT_OK
    assert "--trace" in capsys.readouterr().err


def test_plot_memory_without_matplotlib_says_what_to_install(monkeypatch, tmp_path):
    import builtins

    from pardnn.errors import MissingDependencyError

    real = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    g, machine, placement = diamond()
    schedule = emulate(g, machine, placement)
    memory = track_memory(g, machine, placement, schedule)
    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(MissingDependencyError, match="pip install matplotlib"):
        plot_memory(tmp_path / "m.png", memory, machine, schedule.makespan_us)
