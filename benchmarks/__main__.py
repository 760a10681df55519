"""``python -m benchmarks``: the partitioner benchmark suite (:func:`benchmarks.cli.main`), the same as
``pardnn bench``; ``python -m benchmarks --help`` lists the options."""

from benchmarks.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
