"""Import TensorFlow for a ``pardnn`` command without its INFO lines on the console.

``TF_CPP_MIN_LOG_LEVEL=1`` (a level the user set stays) hides the INFO lines TensorFlow logs once its
logging is set up, keeping its warnings and errors. The lines it writes while it loads ignore that
level (the oneDNN notice; TensorFlow 2.21's CUDA probe and absl's notice that it writes to stderr
before it is set up), so :func:`quiet` runs the import with the process's stderr (fd 2) caught and
writes every other line back. ``pardnn-launch`` does not use it: each rank's log keeps everything,
and its console filters (:mod:`launcher.reporting.console`).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile

__all__ = ["quiet"]

# TensorFlow's INFO lines: tsl's "2026-01-01 12:00:00.123456: I tensorflow/..." and absl's "I0000 00:00:...",
# and absl's own notice that it writes to stderr before it is set up.
_INFO = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: I |I\d{4} \d\d:\d\d:\d+\.\d+ +\d+ |"
                   r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR)")


def quiet() -> None:
    """Import TensorFlow without its INFO lines on stderr, and keep them off from then on (module
    docstring). Nothing is caught when TensorFlow is already imported, or when the user asked for
    every line (``TF_CPP_MIN_LOG_LEVEL=0``); an import that fails is left to the caller to report."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    if "tensorflow" in sys.modules or os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0":
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            pass
        finally:  # whatever the import raised, its lines go back to stderr (a traceback after them)
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            text = caught.read().decode("utf-8", errors="replace")
            kept = "".join(line for line in text.splitlines(keepends=True) if not _INFO.match(line))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()
