"""mkdocs hook (mkdocs.yml ``hooks:``): the benchmarks' own Markdown files are pages of the site.

``benchmarks/RESULTS.md``, ``MODELS.md`` and ``PAPER_GRAPHS.md`` are written by the benchmarks where
they live; the docs cite them by link (``RESULTS.md``, section names). A copy under ``docs/`` would go
stale at the next benchmark run, so the site reads them from ``benchmarks/`` at build time instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
PAGES = ("RESULTS.md", "MODELS.md", "PAPER_GRAPHS.md")


def on_files(files: Files, config: Any) -> Files:
    """Add each of :data:`PAGES` to the site under its own name, read from ``benchmarks/``."""
    for name in PAGES:
        files.append(File.generated(config, name, abs_src_path=str(BENCHMARKS / name)))
    return files
