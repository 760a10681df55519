from __future__ import annotations

import numpy as np
import pytest

from pardnn import InvalidMachineError, Machine
from pardnn.costs.machine import format_bytes, parse_bandwidth, parse_bytes, parse_duration_us


@pytest.mark.parametrize("text, expected", [
    ("32GiB", 32 * 2**30), ("16GB", 16 * 10**9), ("512 MiB", 512 * 2**20), ("1000", 1000),
    ("1.5KiB", 1536), ("2k", 2000), (4096, 4096), ("1e3B", 1000),
])
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text, expected", [("900GB/s", 9e11), ("150 GB/s", 1.5e11), ("1GiB/s", 2**30), (5e9, 5e9)])
def test_parse_bandwidth(text, expected):
    assert parse_bandwidth(text) == expected


@pytest.mark.parametrize("text, expected", [("25us", 25.0), ("0.5ms", 500.0), ("2s", 2e6), ("10", 10.0),
                                             ("100ns", 0.1)])
def test_parse_duration(text, expected):
    assert parse_duration_us(text) == pytest.approx(expected)


@pytest.mark.parametrize("bad", ["32 gigs", "-1GB", "", "GB"])
def test_bad_sizes_are_named(bad):
    with pytest.raises(InvalidMachineError, match="memory"):
        parse_bytes(bad, "memory")


def test_comm_cost_is_latency_plus_bytes_over_bandwidth():
    m = Machine(2, bandwidth="1GB/s", latency="10us")
    assert m.comm_us(1000) == pytest.approx(10 + 1.0)
    assert m.edge_comm_us(np.array([0, 2000])).tolist() == pytest.approx([10.0, 12.0])


def test_reserve_and_heterogeneous_memory():
    m = Machine(4, "32GiB,32GiB,16GiB,16GiB")
    assert m.limits_bytes.tolist() == [int(32 * 2**30 * 0.9)] * 2 + [int(16 * 2**30 * 0.9)] * 2
    assert Machine(2, [100, 200], reserve=0.0).limits_bytes.tolist() == [100, 200]
    assert not Machine(2).bounded


@pytest.mark.parametrize("kwargs, message", [
    ({"devices": 0}, "devices must be a whole number >= 1"),
    ({"devices": 2, "memory": "1GB,2GB,3GB"}, "3 sizes for 2 devices"),
    ({"devices": 2, "reserve": 1.0}, r"reserve must be in \[0, 1\)"),
    ({"devices": 2, "bandwidth": 0}, "must be > 0 bytes per second"),
    ({"devices": 2, "memory": 0}, "memory per device must be > 0"),
    ({"devices": 2, "latency": "fast"}, "latency: cannot read 'fast'"),
])
def test_bad_machines(kwargs, message):
    with pytest.raises(InvalidMachineError, match=message):
        Machine(**kwargs)


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(32 * 2**30) == "32.00 GiB"
