"""Every third-party module the code imports is declared, so a fresh install has it.

Read with :mod:`ast` (nothing is imported), every import counts, a function-local one too: a
lazily imported module that nobody declared fails only on a user's machine, at the moment they
need it (issue: README command 2 failed on a fresh machine for want of ``scipy``).

A module is first-party (a package or module of this checkout, or a sibling module of the file
that imports it, as ``examples/*/net.py`` are), from the standard library
(:data:`sys.stdlib_module_names`), or third-party; a third-party module must be declared in
``pyproject.toml`` (the core dependencies or any extra), through :data:`DISTRIBUTIONS` where the
import name and the distribution differ, or be installed by one of the project's scripts
(:data:`INSTALLED_BY_SCRIPT`).
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("pardnn", "launcher", "jobs", "benchmarks", "examples")  # what users install and run
FIRST_PARTY = frozenset({"pardnn", "launcher", "jobs", "benchmarks", "tests"})

# Import name -> the distributions that provide it, where the two differ.
DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "tensorflow": ("tensorflow-cpu", "tensorflow"),
    "yaml": ("pyyaml",),
    "sklearn": ("scikit-learn",),
    "PIL": ("pillow",),
}
# Import name -> the script that installs it (built from source there, so not in pyproject.toml).
INSTALLED_BY_SCRIPT: dict[str, str] = {"horovod": "scripts/install-horovod.sh"}


def normalize(distribution: str) -> str:
    """PEP 503 name: lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


def declared_distributions(pyproject: dict) -> set[str]:
    """Names of every requirement in ``[project] dependencies`` and every optional extra."""
    project = pyproject["project"]
    requirements = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    names = set()
    for requirement in requirements:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
        assert match, f"pyproject.toml: cannot read the requirement {requirement!r}"
        names.add(normalize(match.group(1)))
    return names


def top_level_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, top-level module)`` of every absolute import in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.partition(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.partition(".")[0]))
    return found


def undeclared(pyproject: dict, root: Path = ROOT) -> list[str]:
    """One line per import of a third-party module that nothing declares: file, line, module."""
    declared = declared_distributions(pyproject)
    problems = []
    for folder in SCANNED:
        for path in sorted((root / folder).rglob("*.py")):
            siblings = {p.stem for p in path.parent.glob("*.py")} | {
                p.name for p in path.parent.iterdir() if (p / "__init__.py").exists()
            }
            for line, module in top_level_imports(path):
                if module in FIRST_PARTY or module in siblings or module in sys.stdlib_module_names:
                    continue
                if module in INSTALLED_BY_SCRIPT:
                    continue
                wanted = DISTRIBUTIONS.get(module, (module,))
                if not any(normalize(name) in declared for name in wanted):
                    problems.append(
                        f"{path.relative_to(root)}:{line} imports {module!r}, which pyproject.toml does not "
                        f"declare (add {wanted[0]!r} to the dependencies or the extra that needs it)"
                    )
    return problems


def read_pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_third_party_import_is_declared() -> None:
    problems = undeclared(read_pyproject())
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("extra", "distribution", "module"), [("dev", "scipy", "scipy"), ("dist", "tqdm", "tqdm")])
def test_removing_a_declaration_names_the_module_and_the_file(extra: str, distribution: str, module: str) -> None:
    pyproject = read_pyproject()
    requirements = pyproject["project"]["optional-dependencies"][extra]
    kept = [r for r in requirements if normalize(re.split(r"[<>=!~;\[ ]", r)[0]) != distribution]
    assert len(kept) == len(requirements) - 1, f"{distribution} is not in the {extra!r} extra"
    pyproject["project"]["optional-dependencies"][extra] = kept
    problems = undeclared(pyproject)
    assert problems and all(f"imports {module!r}" in problem for problem in problems), problems
    assert all(problem.split(":")[0].endswith(".py") for problem in problems)


def test_the_script_installed_modules_are_installed_by_their_script() -> None:
    for module, script in INSTALLED_BY_SCRIPT.items():
        assert f"{module}==" in (ROOT / script).read_text(), f"{script} does not install {module}"


def test_an_undeclared_import_is_found_in_a_function_body(tmp_path: Path) -> None:
    (tmp_path / "pardnn").mkdir()
    (tmp_path / "pardnn" / "lazy.py").write_text("def f():\n    import numpy\n    from sortedcontainers import x\n")
    for folder in SCANNED[1:]:
        (tmp_path / folder).mkdir()
    problems = undeclared({"project": {"dependencies": ["numpy<2"]}}, root=tmp_path)
    assert problems == [
        "pardnn/lazy.py:3 imports 'sortedcontainers', which pyproject.toml does not declare "
        "(add 'sortedcontainers' to the dependencies or the extra that needs it)"
    ]
