"""The package structure of DESIGN.md "Layout", checked from the source.

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
    assert not bad, "the library must stay closed (DESIGN.md, Layout):\n" + "\n".join(bad)


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


def test_no_import_cycle_in_the_library() -> None:
    cycles = _cycles(import_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"a"}}) == [["a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_relative_and_from_imports_resolve_to_modules(tmp_path: Path) -> None:
    modules = library_modules()
    path = LIBRARY / "pipeline.py"
    targets = {target for _, target in imports_of(path, modules)}
    assert "pardnn.slicing" in targets and "pardnn.graph" in targets


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
