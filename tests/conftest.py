"""Shared fixtures and hypothesis strategies: random DAGs with costs, kinds and colocation groups, and
the count of the examples that reach the behaviour a property test is about.

Profiles: ``default`` (60 examples; derandomized in CI, so a CI failure is a regression, not a new
draw), ``nightly`` (600 random examples per test) and ``second-stack`` (30 derandomized examples: CI's second
run of the core, under NumPy 2, beside the pinned stack's run of the default's 60),
chosen by ``--hypothesis-profile nightly`` or ``HYPOTHESIS_PROFILE=nightly``. Collection (which imports
TensorFlow) runs with the garbage collector paused, and what it made is frozen, as pardnn's own processes do.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import resource
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st

from pardnn.costs.graph import CostGraph
from pardnn.tfstack import collector_paused

settings.register_profile("default", deadline=None, max_examples=60, derandomize=bool(os.environ.get("CI")))
settings.register_profile("nightly", deadline=None, max_examples=600, derandomize=False)
# .ci/run runs the second stack's core at the lowest priority beside the pinned tests, where drawing an
# example may wait seconds for a core: the wall-clock check of slow generation means nothing there.
settings.register_profile("second-stack", deadline=None, max_examples=30, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# The tests' mpirun runs put their ranks on this machine's cores beside the other pytest worker. A rank that
# waits in MPI busy-polls its core by default and starves the one it waits for (a 2-rank run: 12 s alone,
# 148 s beside a busy worker); Open MPI's setting for oversubscribed nodes yields instead. Every mpirun,
# sbatch and pardnn-launch child of a test inherits it.
os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")

# Weighted by repetition (hypothesis draws uniformly and shrinks towards the first entry).
_KINDS = st.sampled_from([0] * 7 + [1] * 2 + [2])  # normal, residual, reference
_LABELS = [f"group{i}" for i in range(4)]


@st.composite
def random_dags(draw: st.DrawFn, max_ops: int = 30, kinds: bool = True, groups: bool | float = True,
                min_ops: int = 2) -> CostGraph:
    """A DAG of ``min_ops``..``max_ops`` ops drawn op by op, so that a failure shrinks to a small one.

    Each op after the first reads an earlier one (its *backbone* parent, at most ``reach`` ops back:
    1 makes a chain, more a tree) unless it is drawn as a new source; extra edges join any earlier op
    to a later one; 1 edge in 10 is a control edge (0 bytes). Compute 0-40 µs, outputs 0-5000 B,
    kinds 70 % normal, 20 % residual, 10 % reference, about 30 % of the ops (``groups``, if a share) in one
    of 4 colocation groups, names shuffled (node order is not name order). Everything shrinks towards a
    chain of normal ops without groups, costs and extra edges.
    """
    n = draw(st.integers(min_ops, max_ops))
    reach = draw(st.sampled_from([1, 3, max_ops]))
    back = draw(st.lists(st.integers(0, max_ops), min_size=n - 1, max_size=n - 1))
    sources = draw(st.sets(st.integers(1, max(n - 1, 1)), max_size=n // 4))
    edges = {(i - 1 - back[i - 1] % min(reach, i), i) for i in range(1, n) if i not in sources}
    extra = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=n))
    edges |= {(min(a, b), max(a, b)) for a, b in extra if a != b}
    src, dst = (np.array(ends, dtype=np.int64) for ends in zip(*sorted(edges), strict=True)) if edges else \
        (np.zeros(0, np.int64), np.zeros(0, np.int64))
    comp = np.array(draw(st.lists(st.integers(0, 40_000), min_size=n, max_size=n))) / 1000.0
    out = np.array(draw(st.lists(st.integers(0, 5000), min_size=n, max_size=n)), dtype=np.int64)
    control = np.array(draw(st.lists(st.sampled_from([False] * 9 + [True]), min_size=src.size,
                                     max_size=src.size)), dtype=bool)
    edge_bytes = np.where(control, 0, out[src])
    kind = draw(st.lists(_KINDS, min_size=n, max_size=n)) if kinds else [0] * n
    share = 0.3 if groups is True else float(groups)
    labels = [None] * round(len(_LABELS) * (1 - share) / share) + _LABELS if share else [None]
    coloc = draw(st.lists(st.sampled_from(labels), min_size=n, max_size=n))
    names = [f"layer_{i}/op" for i in draw(st.permutations(range(n)))]
    return CostGraph(names, comp, out, src, dst, edge_bytes, kind=kind, colocation=coloc, name="random")


_reach: Counter[str] = Counter()
_reached_by_test: dict[str, tuple[int, int]] = {}  # test (with its parameters) -> (reached, examples)


def reached(yes: bool, what: str) -> bool:
    """Record whether this example reached the behaviour under test (``what`` is the event hypothesis
    shows with ``--hypothesis-show-statistics``); returns ``yes``."""
    event(what if yes else f"not: {what}")
    _reach["examples"] += 1
    _reach["reached"] += bool(yes)
    return yes


def most_reach(test: Callable[..., Any]) -> Callable[..., Any]:
    """Put above ``@given``: the property test fails unless most of its examples called
    ``reached(True, ...)`` — a property that holds on examples which never get there proves nothing."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        _reach.clear()
        test(*args, **kwargs)
        examples, hits = _reach["examples"], _reach["reached"]
        _reached_by_test["".join([test.__name__, *(f"[{value}]" for value in kwargs.values())])] = hits, examples
        assert 2 * hits > examples, (f"{test.__name__}: only {hits} of {examples} examples reached the behaviour "
                                     "under test")

    return run


WORKER_BYTES = 3 << 30  # a worker's room: TensorFlow, a graph build, and mpirun's ranks beside it


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per CPU this process may use, at most one per WORKER_BYTES of memory
    (``PYTEST_XDIST_AUTO_NUM_WORKERS`` overrides)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "").isdigit():
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(1, min(len(os.sched_getaffinity(0)), memory // WORKER_BYTES))


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Any:
    """Collect (importing TensorFlow, Keras and the test modules) without the cyclic garbage collector, then
    freeze what the imports made, as pardnn's own processes do (pardnn.tfstack.own_process): the tests' graph
    builds then take the CPU they take in ``pardnn-launch``, not the collector's passes over module objects."""
    try:
        with collector_paused():
            return (yield)
    finally:
        gc.freeze()


@pytest.hookimpl(wrapper=True)  # around xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Any:
    """Tests marked ``mpi`` run one after another on one worker (``xdist_group("mpi")`` under
    ``--dist loadgroup``): each starts ranks of its own, two such runs at once on a 2-core machine
    would time out, a module's shared launch (a module fixture) would run once per worker, and the
    local Slurm cluster has fixed ports. Fails when the group did not take (a pytest that xdist's
    loadgroup does not know: pyproject.toml pins pytest below 9.2)."""
    for item in items:
        if item.get_closest_marker("mpi") is not None:
            item.add_marker(pytest.mark.xdist_group("mpi"))
        elif (group := _shared_fixture_group(item)) is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    result = yield
    if getattr(config.option, "loadgroup", False):
        ungrouped = [item.nodeid for item in items if item.get_closest_marker("mpi") and "@" not in item.nodeid]
        if ungrouped:
            raise pytest.UsageError(f"pytest {pytest.__version__} with pytest-xdist ignores xdist_group (e.g. "
                                    f"{ungrouped[0]}): install the pytest pinned in pyproject.toml")
    return result


def _shared_fixture_group(item: pytest.Item) -> str | None:
    """The group of the tests that share a module-, class- or package-scoped fixture (and its parameter):
    each worker running one of them would build the fixture again (the Keras zoo's models were built
    on both workers, 110 s of CPU each time). ``None`` for a test that uses none."""
    definitions = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    for name in sorted(definitions):
        definition = definitions[name][-1]
        if definition.scope in ("module", "class", "package"):
            callspec = getattr(item, "callspec", None)
            index = callspec.indices.get(name) if callspec is not None else None
            where = item.nodeid.split("::")[0]
            # no "]" in a group's name: xdist takes a node id whose last "]" follows its "@" for a parameter
            return f"{where}:{name}" + ("" if index is None else f"-{index}")
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Any:
    """With ``PARDNN_TEST_TIMELINE=FILE``: one line per test appended to FILE, ``worker start end cpu
    children_cpu nodeid`` (seconds; ``children_cpu`` is its subprocesses', mpirun's ranks included), to see
    what each worker ran when and where the CPU went (docs/testing.md)."""
    timeline = os.environ.get("PARDNN_TEST_TIMELINE")
    if not timeline:
        return (yield)
    start, own, children = time.time(), _cpu_seconds(resource.RUSAGE_SELF), _cpu_seconds(resource.RUSAGE_CHILDREN)
    try:
        return (yield)
    finally:
        cpu, child_cpu = _cpu_seconds(resource.RUSAGE_SELF) - own, _cpu_seconds(resource.RUSAGE_CHILDREN) - children
        with open(timeline, "a") as file:
            file.write(f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')} {start:.2f} {time.time():.2f} {cpu:.2f} "
                       f"{child_cpu:.2f} {item.nodeid}\n")


def _cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On an xdist worker: hand the reach counts to the controller, which prints them."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["reached_by_test"] = json.dumps(_reached_by_test)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """On the xdist controller: gather the reach counts of a worker that finished."""
    counts = json.loads(getattr(node, "workeroutput", {}).get("reached_by_test", "{}"))
    _reached_by_test.update({name: (hits, examples) for name, (hits, examples) in counts.items()})


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line per property test run with :func:`most_reach`: how many of its examples reached."""
    if _reached_by_test:
        terminalreporter.section("examples that reached the behaviour under test")
        for name, (hits, examples) in _reached_by_test.items():
            terminalreporter.write_line(f"{name}: {hits} of {examples} ({100 * hits / max(examples, 1):.0f} %)")


@pytest.fixture(scope="session", autouse=True)
def shared_folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Where :func:`tests.helpers.shared.shared` keeps what the run's workers build once."""
    from tests.helpers import shared

    shared.ROOT = shared.run_root(tmp_path_factory.getbasetemp())


@pytest.fixture(autouse=True)
def no_host_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """In this process, GPU detection finds no nvidia-smi: a test sees the GPUs it gives, not the
    machine's (on a GPU machine, settings resolved here would follow its GPUs). Subprocesses see the machine."""
    monkeypatch.setattr("launcher.cluster.gpus.NVIDIA_SMI", ("/nonexistent/nvidia-smi",))


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def cold_first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, list[str], Path]:
    """``benchmarks.speed.first_run(1, seed=0)`` made once per test run: its row, the progress lines it printed
    and its work folder (the graph, the placement, the numba cache it filled). A cold ``pardnn place`` compiles
    every sweep it runs into an empty numba cache (about 50 s of CPU on 2 cores): tests/benchmarks/test_speed.py
    checks it, the quick suite's speed table reports the same row, and ``pardnn warmup``'s test completes the
    cache it began (tests/pardnn/cli/test_cli.py) instead of compiling every kernel a third time."""
    from benchmarks.speed import first_run
    from tests.helpers import shared

    def make() -> tuple[object, list[str], Path]:
        work = (shared.ROOT or tmp_path_factory.getbasetemp()) / "cold-first-run"
        work.mkdir()
        messages: list[str] = []
        row = first_run(1, seed=0, progress=messages.append, work=work)
        return row, messages, work

    return shared.shared(("benchmarks.speed.first_run", 1, 0), make)
