"""``python -m pardnn.cli``: the ``pardnn`` command."""

from pardnn.cli import run

if __name__ == "__main__":
    run()
