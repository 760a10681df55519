"""pip's package-index settings as uv's options, so that ``uv pip install`` sees what ``pip install`` would.

``python scripts/uv_options.py`` reads ``pip config list`` on stdin and prints the options one per line
(scripts/setup.sh hands them to ``uv pip install``): ``index-url``, ``extra-index-url``, ``find-links``
and ``constraint``, from pip's ``PIP_*`` variables (``:env:``) before its files' ``[install]`` section
before their ``[global]`` one, as pip ranks them; and, where there is more than one place to look,
``--index-strategy unsafe-best-match``, pip's rule: the best version from every index (uv's default takes
a package from the first index that has it).
"""

from __future__ import annotations

import shlex
import sys

RANK = {":env:": 2, "install": 1, "global": 0}
FLAGS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
         "constraint": "--constraint"}


def uv_options(pip_config_list: str) -> list[str]:
    """The uv options for the lines ``pip config list`` printed (``section.key='value'``)."""
    ranked: dict[str, tuple[int, list[str]]] = {}  # key: (the rank of its scope, its words)
    for line in pip_config_list.splitlines():
        name, _, value = line.strip().partition("=")
        scope, _, key = name.rpartition(".")
        if scope in RANK and key in FLAGS and (key not in ranked or RANK[scope] >= ranked[key][0]):
            ranked[key] = (RANK[scope], " ".join(shlex.split(value)).split())
    values = {key: words for key, (_, words) in ranked.items()}
    options = [part for key, flag in FLAGS.items() for word in values.get(key, []) for part in (flag, word)]
    if values.get("extra-index-url") or values.get("find-links"):
        options += ["--index-strategy", "unsafe-best-match"]
    return options

if __name__ == "__main__":
    sys.stdout.write("".join(f"{option}\n" for option in uv_options(sys.stdin.read())))
