"""scripts/uv_options.py: pip's index settings, as ``pip config list`` prints them, become the options
``uv pip install`` needs to resolve what pip would (scripts/setup.sh installs with uv)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "uv_options.py"


def options(text: str) -> list[str]:
    done = subprocess.run([sys.executable, str(SCRIPT)], input=text, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def test_no_settings_give_no_options():
    assert options("") == []
    assert options(":env:.default-timeout='180'\nglobal.cert='/etc/ssl/certs/ca.crt'\n") == []


def test_this_machines_kind_of_config_keeps_every_index_and_pips_best_match():
    text = ("global.cert='/etc/ssl/certs/ca-certificates.crt'\n"
            "global.constraint='/etc/xdg/pip/constraints.txt'\n"
            "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'\n"
            "global.find-links='/opt/wheels'\n")
    assert options(text) == ["--extra-index-url", "file:///opt/pypi/simple", "--extra-index-url",
                             "file:///opt/pypi-more/simple", "--find-links", "/opt/wheels",
                             "--constraint", "/etc/xdg/pip/constraints.txt", "--index-strategy", "unsafe-best-match"]


def test_pip_variables_come_before_the_install_section_before_the_global_one():
    text = ("global.index-url='https://mirror.a/simple'\n"
            "install.index-url='https://mirror.b/simple'\n"
            ":env:.index-url='https://mirror.c/simple'\n")
    assert options(text) == ["--index-url", "https://mirror.c/simple"]
    assert options("install.index-url='https://b/simple'\nglobal.index-url='https://a/simple'\n") == \
        ["--index-url", "https://b/simple"]


def test_one_index_alone_keeps_uvs_own_strategy():
    assert options("global.index-url='https://mirror/simple'\n") == ["--index-url", "https://mirror/simple"]
    assert options("global.find-links=''\n") == []
