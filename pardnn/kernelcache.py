"""Where numba keeps pardnn's compiled kernels: one folder per source tree, shared by every checkout and
virtual environment of the user that holds the same sources.

:func:`install` (run when :mod:`pardnn` is imported, before any kernel is defined) puts a locator first in
numba's list that keeps every kernel of this package under ``cache_root()/numba/<tag>/<tree>/<folder>``:
:func:`cache_root` is ``$PARDNN_CACHE_DIR``, else ``$XDG_CACHE_HOME/pardnn``, else ``~/.cache/pardnn``; the
tag names Python, numba and NumPy; ``<tree>`` digests the package's files that import numba.
``NUMBA_CACHE_DIR``, when set, wins; an unwritable folder or a numba without the locator interface leaves
numba's default. :func:`prune` (``pardnn warmup`` calls it) keeps the newest :data:`KEEP` trees of a tag;
:func:`location` says where this process's kernels go. Why and what no stamp sees:
docs/notes-partitioner.md.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
from functools import cache
from pathlib import Path

__all__ = ["KEEP", "cache_root", "install", "location", "prune", "tree_folder"]

PACKAGE = Path(__file__).resolve().parent
KEEP = 4  # source trees kept per tag by prune()


def cache_root() -> Path:
    """``$PARDNN_CACHE_DIR``, else ``$XDG_CACHE_HOME/pardnn``, else ``~/.cache/pardnn``."""
    explicit = os.environ.get("PARDNN_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "pardnn"


def _tag() -> str:
    import numba
    import numpy

    return f"py{sys.version_info.major}.{sys.version_info.minor}-numba{numba.__version__}-numpy{numpy.__version__}"


_IMPORTS_NUMBA = re.compile(rb"^[ \t]*(?:from|import)[ \t]+numba\b", re.MULTILINE)


@cache
def _tree_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_bytes()
        if _IMPORTS_NUMBA.search(text):
            digest.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0" + text + b"\0")
    return digest.hexdigest()[:16]


def tree_folder() -> Path:
    """The folder of this source tree's kernels (for this Python, numba and NumPy)."""
    return cache_root() / "numba" / _tag() / _tree_digest()


def prune(keep: int = KEEP) -> list[Path]:
    """Remove all but the ``keep`` most recently used source trees of this tag (never this one); returns
    the folders removed."""
    current = tree_folder()
    trees = [p for p in current.parent.glob("*") if p.is_dir() and p != current]
    trees.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    removed = []
    for old in trees[max(keep - 1, 0):]:
        shutil.rmtree(old, ignore_errors=True)
        removed.append(old)
    return removed


def location() -> str:
    """Where this process's kernels are cached, in words."""
    from numba.core import config

    if config.CACHE_DIR:
        return f"{config.CACHE_DIR} (NUMBA_CACHE_DIR)"
    folder = tree_folder()
    return str(folder) if _installed() and folder.is_dir() else "__pycache__ beside pardnn's modules"


def _locators() -> list | None:
    """numba's list of cache locator classes, tried in order (None where this numba has none)."""
    from numba.core import caching

    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    return getattr(impl, "_locator_classes", None)


def _installed() -> bool:
    return any(getattr(k, "_pardnn_tree", False) for k in _locators() or ())


def install() -> bool:
    """Put the tree locator first in numba's list (once); False where this numba lacks the interface."""
    try:
        from numba.core import caching, config
        base, mixin = caching._CacheLocator, caching._SourceFileBackedLocatorMixin
    except (ImportError, AttributeError):
        return False
    locators = _locators()
    if locators is None:
        return False
    if _installed():
        return True

    class TreeLocator(mixin, base):  # the mixin: numba's content stamp of the kernel's own file
        _pardnn_tree = True

        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            inside = Path(py_file).resolve().parent.relative_to(PACKAGE)
            self._cache_path = str(tree_folder() / inside)

        def get_cache_path(self):
            return self._cache_path

        @classmethod
        def from_function(cls, py_func, py_file):
            if config.CACHE_DIR or not Path(py_file).resolve().is_relative_to(PACKAGE):
                return None
            try:
                return super().from_function(py_func, py_file)  # None where the folder cannot be written
            except (OSError, RuntimeError):  # no home directory, unreadable sources
                return None

    locators.insert(0, TreeLocator)
    return True
