"""The ``pardnn`` command: thin over the library (parse, call, print); :func:`main` is the entry point.

Built-in sub-commands are in :mod:`pardnn.cli.commands`; other packages add theirs through the
entry-point group ``pardnn.commands`` (:mod:`pardnn.cli.plugins`). Exit codes: 0 success, 1 bad input,
2 bad command line, 3 infeasible.

May import: all of pardnn except :mod:`pardnn.tf` (commands from other packages are plugins).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import sys
from collections.abc import Iterator, Sequence

from pardnn.errors import InfeasibleError, PardnnError
from pardnn.heap import reuse_freed_memory

from .commands import BUILTIN
from .options import EPILOG, EXIT_BAD_INPUT, EXIT_INFEASIBLE, EXIT_OK, EXIT_USAGE, StageProgress
from .plugins import PluginError, add_plugins
from .reports import format_evaluation, format_report

__all__ = ["EPILOG", "EXIT_BAD_INPUT", "EXIT_INFEASIBLE", "EXIT_OK", "EXIT_USAGE", "StageProgress", "build_parser",
           "format_evaluation", "format_report", "main", "run"]

EXIT_INTERRUPTED = 130


def _version() -> str:
    from pardnn import __version__

    return __version__


def _parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """The top-level parser with the built-in sub-commands; the sub-parsers for plugins to join."""
    parser = argparse.ArgumentParser(
        prog="pardnn",
        description="ParDNN: place the ops of a DNN training graph across K devices for a short step "
                    "within each device's memory, and evaluate placements.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in BUILTIN.values():
        add(sub)
    return parser, sub


def _command_word(argv: Sequence[str]) -> str | None:
    """The sub-command argv names: its first word that is not an option (the top level takes no values)."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The full parser: built-in commands, then every plugin command (unavailable ones listed as such).

    With ``command`` a built-in name, no plugin is looked up; with a plugin's name, only that plugin
    is loaded, and :class:`~pardnn.cli.plugins.PluginError` says why it cannot be.
    """
    parser, sub = _parser()
    if command not in BUILTIN:
        add_plugins(sub, command, BUILTIN)
    return parser


class _WarningLine(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"pardnn: {record.levelname.lower()}: {record.getMessage()}"


@contextlib.contextmanager
def _warnings_on_stderr() -> Iterator[None]:
    """The library's logged warnings (``pardnn.*`` loggers) as ``pardnn: warning: ...`` lines on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(_WarningLine())
    library = logging.getLogger("pardnn")
    library.addHandler(handler)
    try:
        yield
    finally:
        library.removeHandler(handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``pardnn`` with ``argv`` (default: ``sys.argv[1:]``); return the exit code.

    Raises ``SystemExit`` for ``--help``, ``--version`` and bad command lines (code 2), as argparse does.
    The library's warnings are printed on stderr as ``pardnn: warning: ...`` lines.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser(_command_word(argv))
    except PluginError as exc:
        print(f"pardnn: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    args = parser.parse_args(argv)
    try:
        with _warnings_on_stderr():
            return int(args.func(args))
    except InfeasibleError as exc:  # exit 3 either way; "infeasible" only with a proof
        print(f"pardnn: infeasible: {exc}" if exc.proven else f"pardnn: {exc}", file=sys.stderr)
        if getattr(args, "command", None) == "place":
            print("pardnn: no placement was written", file=sys.stderr)
        return EXIT_INFEASIBLE
    except (PardnnError, OSError) as exc:
        message = str(exc) if not isinstance(exc, OSError) or not exc.filename else \
            f"{exc.filename}: {exc.strerror or exc}"
        print(f"pardnn: error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("pardnn: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def run() -> None:
    """The ``pardnn`` console command: :func:`main`, then a fast exit.

    Once the command is done (files written and closed, output flushed) the interpreter's own
    teardown is skipped: unloading numba's compiled code takes 0.1-0.2 s, a tenth of a 200,000-op
    ``pardnn place``. Library callers use :func:`main`, which returns normally.
    """
    reuse_freed_memory()  # fewer page faults on large graphs (pardnn.heap)
    # Python's cyclic collector every 50,000 allocations, not 700: numba's first calls create tens of
    # thousands of objects, and on a 1M-op placement 263 collections took 0.10 s of both threads' time
    # holding the GIL (121 collections, 0.04 s, this way). A command's process of its own, as above.
    gc.set_threshold(50_000, 20, 10)
    code = main()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # the reader went away (``pardnn info g.json | head``); nothing left to say
        pass
    os._exit(code)
