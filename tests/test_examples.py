"""The public API's examples run, as doctests (networkx-style): an example that no longer does what
it shows fails here.

Each module listed must hold at least one example, so that deleting them all fails too.
"""

from __future__ import annotations

import doctest
import importlib

import pytest

# The public API: partition, the graph and the machine, reading and writing files, evaluating a
# placement, the placer registry.
WITH_EXAMPLES = (
    "pardnn",
    "pardnn.partitioner",
    "pardnn.costs.graph",
    "pardnn.costs.machine",
    "pardnn.emulation.simulate",
    "pardnn.emulation.allreduce",
    "pardnn.costs.presets",
    "pardnn.registry",
    "pardnn.io",
    "pardnn.io.placement",
    "pardnn.io.native",
)


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_the_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.attempted > 0, f"{name} has no example"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed (printed above)"


def test_no_example_of_the_library_is_skipped() -> None:
    """An example marked ``+SKIP`` shows what nobody checks."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "pardnn"
    skipped = [f"{path.relative_to(root.parent)}:{n}" for path in sorted(root.rglob("*.py"))
               for n, line in enumerate(path.read_text().splitlines(), 1) if "doctest: +SKIP" in line]
    assert not skipped, "skipped examples:\n" + "\n".join(skipped)


@pytest.mark.tf
def test_the_tensorflow_adapters_examples_run() -> None:
    pytest.importorskip("tensorflow")
    test_the_examples_run("pardnn.tf.capture")
