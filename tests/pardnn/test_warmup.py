"""pardnn.warmup: every placer's kernels by default, or only the placers named (the launcher's compile
phase names the one it runs)."""

from __future__ import annotations

import pytest

from pardnn import warmup
from pardnn.registry import PLACERS


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every placer warm_up runs, by name, and ``partition`` for each of its own calls (the memory heuristics)."""
    made: list[str] = []

    class Recorded:
        def __init__(self, name: str) -> None:
            self.placer = PLACERS[name]
            self.memory_heuristics = self.placer.memory_heuristics

        def __call__(self, *args, **kwargs):
            made.append(self.placer.name)
            return self.placer(*args, **kwargs)

    real_partition = warmup.partition

    def partition(*args, **kwargs):
        made.append("partition")
        return real_partition(*args, **kwargs)

    monkeypatch.setattr(warmup, "PLACERS", {name: Recorded(name) for name in PLACERS})
    monkeypatch.setattr(warmup, "partition", partition)
    return made


def test_a_baseline_named_warms_that_baseline_alone(calls):
    warmup.warm_up(placers=["metis"])
    assert calls == ["metis"]


def test_pardnn_named_warms_pardnn_and_both_memory_heuristics(calls):
    warmup.warm_up(placers=["pardnn"])
    assert calls == ["pardnn", "partition", "partition"]  # its own placement is reused for the limits


def test_by_default_every_placer_but_the_exact_one(calls):
    steps: list[str] = []
    warmup.warm_up(steps.append)
    assert calls == [name for name in PLACERS if name != "exact"] + ["partition", "partition"]
    assert steps == [name for name in PLACERS if name != "exact"] + [f"memory heuristic {heuristic}"
                                                                      for heuristic in warmup.MEMORY_HEURISTICS]


def test_an_unknown_placer_is_named_with_the_valid_ones():
    with pytest.raises(ValueError, match="fastest") as error:
        warmup.warm_up(placers=["fastest"])
    assert "metis" in str(error.value)
