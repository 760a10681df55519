"""Settings: command line over job file over defaults, ranges checked in one place, sources named."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.errors import LaunchError
from launcher.settings import DEFAULTS, parse_window, resolve
from tests.launcher.standin import Job


def test_job_file_values_are_used_when_the_command_line_is_silent():
    settings = resolve(Job(iterations=200, devices_per_node=3), {"iterations": None})
    assert settings.iterations == 200
    assert settings.devices_per_node == 3
    assert settings.sources["iterations"] == "job file"


def test_command_line_wins_over_the_job_file():
    settings = resolve(Job(iterations=200), {"iterations": 160, "window": "10:20", "memory": "1GiB"})
    assert (settings.iterations, settings.window, settings.memory) == (160, (10, 20), "1GiB")
    assert settings.memory_bytes == 2**30
    assert settings.sources["window"] == "command line"


def test_defaults_fill_what_neither_sets():
    class Bare:
        batch_size = 4

    settings = resolve(Bare())
    assert settings.iterations == DEFAULTS["iterations"]
    assert settings.window == (100, 150)
    assert settings.out == Path("runs")
    assert settings.sources["out"] == "default"


def test_window_from_job_must_fit_iterations_from_command_line_and_names_both():
    with pytest.raises(LaunchError, match=r"window 100:150 \(job file\).*iterations = 50 \(command line\)"):
        resolve(Job(), {"iterations": 50})


@pytest.mark.parametrize(("overrides", "message"), [
    ({"devices_per_node": 0}, r"devices_per_node \(command line\): 0 must be in 1\.\.64"),
    ({"iterations": 2.5}, "must be a whole number"),
    ({"costs": "guess"}, "expected one of profile, estimate"),
    ({"memory": "lots"}, "memory"),
    ({"memory": "0"}, "must be > 0"),
    ({"reserve": 1.0}, r"fraction in \[0, 1\)"),
    ({"memory_heuristic": "magic"}, "expected one of overflow, balance, none"),
    ({"device_preset": "k80"}, "expected one of"),
    ({"window": "150:100"}, "0 <= start < end"),
    ({"colour": "blue"}, "unknown setting colour"),
])
def test_bad_values_name_the_setting_and_what_is_allowed(overrides, message):
    with pytest.raises(LaunchError, match=message):
        resolve(Job(), overrides)


def test_memory_unlimited_spellings():
    assert resolve(Job(memory="8GiB"), {"memory": "unlimited"}).memory is None


@pytest.mark.parametrize(("text", "window"), [("100:150", (100, 150)), (" 5 : 9 ", (5, 9)), ([1, 2], (1, 2))])
def test_parse_window(text, window):
    assert parse_window(text) == window


@pytest.mark.parametrize("text", ["100", "a:b", "1:2:3", [1]])
def test_parse_window_rejects_bad_text(text):
    with pytest.raises(LaunchError, match="window"):
        parse_window(text)
