"""The package structure of docs/design.md "Layout", checked from the source.

- The project's layers: ``benchmarks`` may import ``launcher``, ``jobs`` and ``pardnn``; ``launcher``
  may import ``jobs`` and ``pardnn``; ``jobs`` may import ``pardnn``; never the other way.
- Inside ``pardnn`` and ``launcher``, the sub-packages form layers too (:data:`LAYERS`): a module
  imports only from its own layer or the ones below it.
- ``pardnn/`` is a closed library: no module under it imports ``jobs``, ``launcher``,
  ``benchmarks``, ``tensorflow`` or ``horovod``, except TensorFlow and horovod inside ``pardnn/tf/``.
- No import cycle among the library's modules. Every import counts, a function-local one too
  (hiding a cycle inside a function only moves the failure to run time).
- No file over 400 lines under ``pardnn/`` and ``launcher/``.
- No function over 80 lines under ``pardnn/``, from its ``def`` line through the last line of its body
  (docstring included, decorators not); methods and nested functions count on their own.

The imports and functions are read with :mod:`ast`, so nothing is imported to check them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "pardnn"
FORBIDDEN = ("jobs", "launcher", "benchmarks", "tensorflow", "horovod")
TF_ONLY = ("tensorflow", "horovod")  # allowed inside pardnn/tf/
MAX_LINES = 400
MAX_FUNCTION_LINES = 80


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def library_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(LIBRARY.rglob("*.py"))}


def imports_of(path: Path, modules: dict[str, Path]) -> list[tuple[int, str]]:
    """``(line, module)`` for every import in ``path``; ``from package import name`` counts as
    ``package.name`` when that is a module of the library, else as ``package``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                found.append((node.lineno, full if full in modules else target))
    return found


def test_the_library_imports_no_zoo_launcher_benchmarks_or_tensorflow() -> None:
    modules = library_modules()
    bad = []
    for name, path in modules.items():
        inside_tf = name == "pardnn.tf" or name.startswith("pardnn.tf.")
        for line, target in imports_of(path, modules):
            top = target.split(".")[0]
            if top in FORBIDDEN and not (inside_tf and top in TF_ONLY):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not bad, "the library must stay closed (docs/design.md, Layout):\n" + "\n".join(bad)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (or a self-import), by Tarjan."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the library modules it imports. A package's ``__init__`` is an edge only when the
    import names the package itself (``from pardnn import partition``), as Python runs it then."""
    modules = library_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph[name] = {target for _, target in imports_of(path, modules) if target in modules and target != name}
    return graph


# Bottom to top. A module belongs to the longest prefix that names it (a package's modules, or one module).
LAYERS: dict[str, list[tuple[str, ...]]] = {
    "pardnn": [
        ("pardnn.errors", "pardnn.heap", "pardnn.tfstack"),
        ("pardnn.costs",),  # the cost model: graph, machine, presets
        ("pardnn.emulation",),  # what a placement does when it runs
        ("pardnn.io", "pardnn.placement", "pardnn.steps"),  # files; what a placer returns; the paper's steps
        ("pardnn.baselines",),  # the other placers
        ("pardnn.polish",),  # guard, refinement, run order
        ("pardnn.partitioner",),  # partition(): every step and stage in order
        ("pardnn", "pardnn.registry"),  # the public API; every placer by name
        ("pardnn.settings", "pardnn.warmup", "pardnn.batch", "pardnn.plan"),
        ("pardnn.tf", "pardnn.cli", "pardnn.__main__"),
    ],
    "launcher": [
        ("launcher.errors", "launcher.env", "launcher.files"),
        ("launcher.cluster", "launcher.reporting"),
        ("launcher.variants", "launcher.settings"),  # what the user asked for
        ("launcher.rank",),  # one rank's run: state, agreement, checkpoints, every way it ends
        ("launcher.training",),
        ("launcher.placing",),
        ("launcher.lifecycle",),
        ("launcher.compare",),
        ("launcher.core",),
        ("launcher", "launcher.cli", "launcher.report"),
    ],
}
PROJECT = ("pardnn", "jobs", "launcher", "benchmarks")  # bottom to top


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for top in PROJECT for path in sorted((ROOT / top).rglob("*.py"))}


def layer_of(module: str, layers: list[tuple[str, ...]]) -> int:
    """The index of the layer whose longest prefix names ``module``."""
    best = (-1, -1)
    for index, prefixes in enumerate(layers):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best[0]:
                best = (len(prefix), index)
    assert best[1] >= 0, f"{module} is in no layer of tests/test_layers.py LAYERS: add it"
    return best[1]


def test_the_layer_of_a_module_is_its_longest_prefix() -> None:
    layers = [("a",), ("a.b",), ("a.b.c", "d")]
    assert [layer_of(m, layers) for m in ("a", "a.x", "a.b", "a.b.y", "a.b.c.z", "d")] == [0, 0, 1, 1, 2, 2]


def upward_imports(modules: dict[str, Path]) -> list[str]:
    bad = []
    for name, path in modules.items():
        top = name.split(".")[0]
        for line, target in imports_of(path, modules):
            if target not in modules or target == name:
                continue
            target_top = target.split(".")[0]
            if PROJECT.index(target_top) > PROJECT.index(top):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target} (a layer above {top})")
            elif target_top == top and top in LAYERS and layer_of(target, LAYERS[top]) > layer_of(name, LAYERS[top]):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target}, a layer above {name}")
    return bad


def test_no_module_imports_a_layer_above_its_own() -> None:
    modules = all_modules()
    for top in LAYERS:
        for name in modules:
            if name.split(".")[0] == top:
                layer_of(name, LAYERS[top])  # every module has a layer
    bad = upward_imports(modules)
    assert not bad, "upward imports (docs/design.md, Layout):\n" + "\n".join(bad)


def test_no_sub_package_holds_more_than_12_modules() -> None:
    crowded = []
    for top in ("pardnn", "launcher"):
        for folder in sorted({p.parent for p in (ROOT / top).rglob("*.py")}):
            count = sum(1 for p in folder.glob("*.py") if p.name != "__init__.py")
            if count > 12:
                crowded.append(f"{folder.relative_to(ROOT)}: {count} modules")
    assert not crowded, "folders over 12 modules (split them by idea):\n" + "\n".join(crowded)


def test_every_sub_package_says_what_it_owns_and_may_import() -> None:
    silent = []
    for top in ("pardnn", "launcher"):
        for init in sorted((ROOT / top).rglob("__init__.py")):
            doc = ast.get_docstring(ast.parse(init.read_text())) or ""
            if init.parent != ROOT / top and "May import" not in doc:
                silent.append(str(init.relative_to(ROOT)))
    assert not silent, "sub-packages whose docstring does not say what they may import:\n" + "\n".join(silent)


def test_no_import_cycle_in_the_library() -> None:
    cycles = _cycles(import_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"a"}}) == [["a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_relative_and_from_imports_resolve_to_modules(tmp_path: Path) -> None:
    modules = library_modules()
    path = LIBRARY / "partitioner.py"
    targets = {target for _, target in imports_of(path, modules)}
    assert "pardnn.steps.slicing" in targets and "pardnn.costs.graph" in targets


@pytest.mark.parametrize("folder", ["pardnn", "launcher"])
def test_no_file_over_400_lines(folder: str) -> None:
    long = [f"{path.relative_to(ROOT)}: {n} lines"
            for path in sorted((ROOT / folder).rglob("*.py"))
            if (n := len(path.read_text().splitlines())) > MAX_LINES]
    assert not long, f"files over {MAX_LINES} lines (split them by idea):\n" + "\n".join(long)


def function_lengths(path: Path) -> list[tuple[int, str, int]]:
    """``(line, name, lines)`` of every function in ``path``, nested ones and methods too, by line;
    ``lines`` runs from the ``def`` line through the last line of the body."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return sorted((node.lineno, node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(tree)
                  if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None)


def test_the_function_counter_counts_def_through_body(tmp_path: Path) -> None:
    """``top`` spans lines 3-9 (its decorator on line 2 does not count): 7 lines; ``inner`` 5-7: 3;
    ``method`` 12-13: 2; the async one-liner on line 15: 1."""
    path = tmp_path / "example.py"
    path.write_text("import functools\n"
                    "@functools.cache\n"
                    "def top() -> int:\n"
                    '    """Doc."""\n'
                    "    def inner() -> int:\n"
                    "        x = 1\n"
                    "        return x\n"
                    "\n"
                    "    return inner()\n"
                    "\n"
                    "class Holder:\n"
                    "    def method(self) -> None:\n"
                    "        pass\n"
                    "\n"
                    "async def quick() -> None: pass\n")
    assert function_lengths(path) == [(3, "top", 7), (5, "inner", 3), (12, "method", 2), (15, "quick", 1)]


def test_no_function_over_80_lines() -> None:
    long = [f"{path.relative_to(ROOT)}:{line} {name}: {lines} lines"
            for path in sorted(LIBRARY.rglob("*.py"))
            for line, name, lines in function_lengths(path) if lines > MAX_FUNCTION_LINES]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them into named steps):\n" + "\n".join(long)


def test_no_test_module_imports_another() -> None:
    """Shared test code lives in conftest.py or the ``tests/helpers`` package, never in a test module
    (importing one runs its tests' module-level set-up and hides what is shared)."""
    tests = ROOT / "tests"
    bad = []
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            bad += [f"{path.relative_to(ROOT)}:{node.lineno} imports {name}" for name in names
                    if name.startswith("tests.") and name.rpartition(".")[2].startswith("test_")]
    assert not bad, "test modules imported by others (move what they share to tests/helpers):\n" + "\n".join(bad)


def test_the_tests_mirror_the_packages() -> None:
    """``tests/pardnn/steps/`` tests ``pardnn/steps/``, and so on: every folder of tests under
    ``tests/pardnn`` and ``tests/launcher`` names a package of the same path."""
    strays = [str(folder.relative_to(ROOT)) for top in ("pardnn", "launcher")
              for folder in sorted((ROOT / "tests" / top).rglob("*")) if folder.is_dir()
              and folder.name != "__pycache__" and not (ROOT / folder.relative_to(ROOT / "tests")).is_dir()]
    assert not strays, "test folders with no package of the same path:\n" + "\n".join(strays)
