"""Import TensorFlow for a ``pardnn`` command without its INFO lines on the console.

``TF_CPP_MIN_LOG_LEVEL=1`` (a level the user set stays) hides the INFO lines TensorFlow logs once its
logging is set up, keeping its warnings and errors. The lines it writes while it loads ignore that
level (the oneDNN notice; TensorFlow 2.21's CUDA probe and absl's notice that it writes to stderr
before it is set up), so :func:`quiet` runs the import with the process's stderr (fd 2) caught and
writes every other line back; :func:`hushed` does the same around a profiling run, which also drops
TensorFlow's "GPU trace was not collected" warning on CPUs (one per profiled step). ``pardnn-launch``
does not use them: each rank's log keeps everything, and its console filters (:mod:`launcher.reporting.console`).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["hushed", "quiet"]

# TensorFlow's INFO lines: tsl's "2026-01-01 12:00:00.123456: I tensorflow/..." and absl's "I0000 00:00:...",
# and absl's own notice that it writes to stderr before it is set up.
_INFO = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: I |I\d{4} \d\d:\d\d:\d+\.\d+ +\d+ |"
                   r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR)")
# Profiling on CPU devices: there is no GPU trace to collect (the launcher's console hides it too).
_NO_GPU_TRACE = re.compile(r".*GPU trace was not collected")


def quiet() -> None:
    """Import TensorFlow without its INFO lines on stderr, and keep them off from then on (module
    docstring). Nothing is caught when TensorFlow is already imported, or when the user asked for
    every line (``TF_CPP_MIN_LOG_LEVEL=0``); an import that fails is left to the caller to report."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    if "tensorflow" in sys.modules or os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0":
        return
    with _dropping(_INFO):
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            pass


@contextmanager
def hushed() -> Iterator[None]:
    """Run the block with TensorFlow's INFO lines and its "GPU trace was not collected" warnings caught
    off stderr (every other line is written back at the end, also when the block raises); nothing is
    caught when the user asked for every line (``TF_CPP_MIN_LOG_LEVEL=0``)."""
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0":
        yield
        return
    with _dropping(_INFO, _NO_GPU_TRACE):
        yield


@contextmanager
def _dropping(*patterns: re.Pattern[str]) -> Iterator[None]:
    """The process's stderr (fd 2) caught during the block; its lines that match none of ``patterns``
    are written back afterwards, whatever the block raised (a traceback comes after them)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            text = caught.read().decode("utf-8", errors="replace")
            kept = "".join(line for line in text.splitlines(keepends=True)
                           if not any(pattern.match(line) for pattern in patterns))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()
