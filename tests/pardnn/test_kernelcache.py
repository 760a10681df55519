"""numba's cache per source tree (pardnn.kernelcache): a second checkout of the same sources loads the
first one's kernels, a change to a file with kernels compiles them afresh in a folder of its own, a change
elsewhere does not, NUMBA_CACHE_DIR still wins, and old trees are pruned."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pardnn import kernelcache

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ("import numpy as np, pardnn\n"
          "from pardnn.steps.fenwick import fenwick_add\n"
          "fenwick_add(np.zeros((9, 2)), 0, 3, 1.0)\n"
          "print('package', pardnn.__file__)\n")


def checkout(where: Path) -> Path:
    """A copy of the package, as a fresh clone has it (no __pycache__)."""
    shutil.copytree(ROOT / "pardnn", where / "pardnn", ignore=shutil.ignore_patterns("__pycache__"))
    return where


def fenwick_add_cache(tree: Path, cache: Path, numba_dir: Path | None = None) -> set[tuple[str, Path]]:
    """Run fenwick_add from the checkout ``tree`` in a fresh interpreter; ``(saved|loaded, file)`` of its
    cache entries, by numba's cache log."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "PYTHONPATH")}
    env.update(PARDNN_CACHE_DIR=str(cache), NUMBA_DEBUG_CACHE="1", PYTHONPATH=str(tree))
    if numba_dir is not None:
        env["NUMBA_CACHE_DIR"] = str(numba_dir)
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"package {tree / 'pardnn' / '__init__.py'}" in done.stdout  # the copy, not the installed checkout
    said = re.findall(r"\[cache\] data (saved to|loaded from) '([^']+)'", done.stdout)
    return {(how.split()[0], Path(path)) for how, path in said if "fenwick_add" in path}


@pytest.mark.slow
def test_a_second_checkout_loads_the_first_ones_kernels_until_a_file_with_kernels_changes(tmp_path):
    cache = tmp_path / "cache"
    first = fenwick_add_cache(checkout(tmp_path / "a"), cache)
    [(how, saved)] = first
    assert how == "saved"
    tag = saved.relative_to(cache / "numba").parts[0]
    assert tag.startswith(f"py{sys.version_info.major}.{sys.version_info.minor}-numba")
    assert saved.parent.name == "steps" and saved.is_file()  # <tag>/<tree>/steps/fenwick.fenwick_add-...
    # Another checkout of the same kernels, its command line edited: numba's content stamp and the tree
    # digest agree, so it loads what the first compiled.
    other = checkout(tmp_path / "b")
    with (other / "pardnn" / "cli" / "commands.py").open("a") as stream:
        stream.write("\n# edited\n")
    assert fenwick_add_cache(other, cache) == {("loaded", saved)}
    # A file with kernels edited: a new tree, compiled there; the first tree's entry is left alone.
    with (other / "pardnn" / "steps" / "fenwick.py").open("a") as stream:
        stream.write("\n# edited\n")
    [(how, fresh)] = fenwick_add_cache(other, cache)
    assert how == "saved" and fresh.parent.parent.parent == saved.parent.parent.parent
    assert fresh.parent.parent != saved.parent.parent and saved.is_file()
    # NUMBA_CACHE_DIR, when set, is where numba keeps them (as before).
    [(how, there)] = fenwick_add_cache(other, cache, numba_dir=tmp_path / "numba-dir")
    assert how == "saved" and there.is_relative_to(tmp_path / "numba-dir")


def test_prune_keeps_the_newest_trees_and_never_this_one(tmp_path, monkeypatch):
    monkeypatch.setenv("PARDNN_CACHE_DIR", str(tmp_path))
    current = kernelcache.tree_folder()
    assert current.is_relative_to(tmp_path / "numba")
    current.mkdir(parents=True)
    now = time.time()
    older = []
    for age in range(6):  # tree 0 the newest, 5 the oldest
        tree = current.parent / f"old{age}"
        tree.mkdir()
        (tree / "kernel.nbi").write_text("x")
        os.utime(tree, (now - 100 * (age + 1), now - 100 * (age + 1)))
        older.append(tree)
    os.utime(current, (now - 10_000, now - 10_000))  # the oldest of all, and still kept
    elsewhere = current.parent.parent / "py0.0-numba0-numpy0" / "ancient"  # another tag's tree
    elsewhere.mkdir(parents=True)
    os.utime(elsewhere, (now - 99_999, now - 99_999))
    removed = kernelcache.prune(keep=3)
    assert sorted(removed) == sorted(older[2:])
    assert {p.name for p in current.parent.iterdir()} == {current.name, "old0", "old1"}
    assert elsewhere.is_dir()  # another Python, numba or NumPy's trees are its own to prune


def test_the_cache_root_follows_pardnn_cache_dir_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.delenv("PARDNN_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kernelcache.cache_root() == tmp_path / "xdg" / "pardnn"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert kernelcache.cache_root() == tmp_path / "home" / ".cache" / "pardnn"
    monkeypatch.setenv("PARDNN_CACHE_DIR", str(tmp_path / "mine"))
    assert kernelcache.cache_root() == tmp_path / "mine"
