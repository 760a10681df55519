"""``python -m benchmarks``: the partitioner benchmark suite, the same as ``pardnn bench``.

    python -m benchmarks            # full suite (minutes): benchmarks/RESULTS.md, benchmarks/out/
    python -m benchmarks --quick    # CI suite (seconds): benchmarks/out/quick/
    python -m benchmarks --help     # every option

The suite lives in :mod:`pardnn.bench` so that the installed ``pardnn bench`` command has it too.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from pardnn.bench import add_bench_arguments, run_bench
from pardnn.errors import PardnnError

EXIT_OK, EXIT_BAD_INPUT = 0, 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bench_arguments(parser)
    args = parser.parse_args(argv)

    def progress(message: str) -> None:
        print(f"benchmarks: {message}", file=sys.stderr, flush=True)

    try:
        written = run_bench(args, "python -m benchmarks", progress)
    except (PardnnError, OSError) as exc:
        print(f"benchmarks: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for path in written:
        print(f"wrote {path}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
