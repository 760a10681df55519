"""``python -m pardnn``: the ``pardnn`` command (:func:`pardnn.cli.main`)."""

from pardnn.cli import main

raise SystemExit(main())
