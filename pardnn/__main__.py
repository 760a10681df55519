"""``python -m pardnn``: the ``pardnn`` command (:func:`pardnn.cli.run`)."""

from pardnn.cli import run

if __name__ == "__main__":
    run()
