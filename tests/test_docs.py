"""The docs: a README a newcomer can read through, links that lead somewhere, a site that builds.

- README.md stays at most :data:`README_MAX_LINES` lines (the two commands, a library example, the
  commands, the layout, what to read next); the rest lives in ``docs/``.
- Every relative link in README.md names a file of the checkout.
- ``mkdocs build --strict`` builds ``docs/`` (with benchmarks/*.md linked in) without a warning: a
  broken link or anchor fails it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, (f"README.md has {lines} lines; move detail into docs/ "
                                       f"(at most {README_MAX_LINES})")


def test_the_readme_opens_with_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    first_blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)[:2]
    assert "scripts/setup.sh" in first_blocks[0] and "pardnn-launch" in first_blocks[0]
    assert first_blocks[1].strip() == "bash .ci/run"


def test_every_relative_link_in_the_readme_exists() -> None:
    text = (ROOT / "README.md").read_text()
    missing = [target for target in LINK.findall(text)
               if "://" not in target and not target.startswith("#")
               and not (ROOT / target.split("#")[0]).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


@pytest.mark.slow
def test_mkdocs_builds_the_docs_strictly(tmp_path: Path) -> None:
    if shutil.which("mkdocs") is None and not _importable("mkdocs"):
        pytest.fail("mkdocs is not installed (pip install -e '.[dev]' brings it)")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True)
    warnings = [line for line in proc.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert proc.returncode == 0 and not warnings, "\n".join(warnings) or proc.stderr[-2000:]


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True
