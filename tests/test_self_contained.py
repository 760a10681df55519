"""The repository explains itself: no file names a file outside it, or work notes a user never sees.

A user who clones the repository has its files and nothing else, so a comment, docstring or page
that points to a design note kept beside the repository, into a sibling folder, or answers "the
issue" sends them nowhere.
Design notes live in docs/design.md; the paper is cited by its title and arXiv number.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Each pattern, and what the text should say instead.
OUTSIDE = {
    r"(?-i:\b(?:DESIGN|PLACERS|PIPELINES|STYLE)\.md\b)": "docs/design.md, or the content itself",
    r"(?:\.\./|\b)shared/": "a path inside the repository",
    r"\bpardnn-paper\.tex\b|\bpaper\.tex\b": "the paper's title and arXiv:2008.08636",
    r"\bthe issue\b|\bissues? #?\d+\b|\bthe task\b": "what was asked, in the project's own words",
}
PATTERN = re.compile("|".join(f"(?:{p})" for p in OUTSIDE), re.IGNORECASE)
# Public links are fine: a project's own issue tracker on the web is reachable by anyone.
URL = re.compile(r"https?://\S+")
BINARY = {".png", ".gz", ".pardnn", ".npz", ".whl"}


def tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    files = [ROOT / name for name in out.split("\0") if name]
    return [f for f in files if f.is_file() and f.suffix not in BINARY and f != Path(__file__).resolve()]


def outside_references(text: str) -> list[tuple[int, str]]:
    """``(line number, the text matched)`` of every reference to something outside the repository."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in PATTERN.finditer(URL.sub("", line)):
            found.append((number, match.group(0)))
    return found


# Names outside the repository, spelled in parts so that this file does not name them itself.
NOTE, PLACERS_NOTE, SIBLING = "DESIGN" + ".md", "PLACERS" + ".md", "../" + "shared/"
SHARED, PAPER = "shared" + "/", "pardnn-paper" + ".tex"


@pytest.mark.parametrize("text, expected", [
    (f"see {NOTE}, Layout", [NOTE]),
    (f"read {SIBLING}{PLACERS_NOTE}", [SIBLING, PLACERS_NOTE]),
    (f"the paper ({SHARED}paper/{PAPER})", [SHARED, PAPER]),
    ("targets (issue 26, item 5)", ["issue 26"]),
    ("where the issue is silent", ["the issue"]),
    ("(pymetis issue #45)", ["issue #45"]),
    ("https://github.com/inducer/pymetis/issues/45", []),
    ("docs/design.md; arXiv:2008.08636; the tasks of an srun step; a shared folder", []),
])
def test_the_checker_finds_what_points_outside(text: str, expected: list[str]) -> None:
    assert [found for _, found in outside_references(text)] == expected


def test_no_file_names_a_file_outside_the_repository() -> None:
    files = tracked_text_files()
    assert len(files) > 200, "git ls-files found too few files: is this a git checkout?"
    bad = []
    for path in files:
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        bad += [f"{path.relative_to(ROOT)}:{line}: {found!r}" for line, found in outside_references(text)]
    hint = "; ".join(f"{p} -> {instead}" for p, instead in OUTSIDE.items())
    assert not bad, f"text that points outside the repository ({hint}):\n" + "\n".join(bad)
