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
    ({"devices_per_node": 0}, r"devices_per_node \(command line\): 0: expected a whole number in \[1, 64\]"),
    ({"iterations": 2.5}, r"iterations \(command line\): 2\.5: expected a whole number >= 1"),
    ({"costs": "guess"}, r"costs \(command line\): 'guess': expected one of 'profile', 'estimate'"),
    ({"memory": "lots"}, r"memory \(command line\): 'lots': expected a size > 0 such as '32GiB'"),
    ({"memory": "0"}, r"memory \(command line\): '0': expected a size > 0 such as '32GiB' \(or 'unlimited'\)"),
    ({"reserve": 1.0}, r"reserve \(command line\): 1\.0: expected a number in \[0, 1\)"),
    ({"memory_heuristic": "magic"},
     r"memory_heuristic \(command line\): 'magic': expected one of 'overflow', 'balance', 'none'"),
    ({"device_preset": "k80"}, r"device_preset \(command line\): 'k80': expected one of 'v100-32gb'"),
    ({"profile_steps": 0}, r"profile_steps \(command line\): 0: expected a whole number >= 1"),
    ({"batch_size": -1}, r"batch_size \(command line\): -1: expected a whole number >= 1"),
    ({"window": "150:100"}, "0 <= start < end"),
    ({"colour": "blue"}, "unknown setting colour"),
    ({"save_model": "model.npz"}, r"--save-model model\.npz: expected a file name ending in \.weights\.h5, \.h5, "),
    ({"save_model": "/dev/null/m.keras"}, r"--save-model /dev/null/m\.keras: cannot write into /dev/null"),
    ({"save_model": "m.weights.h5", "compare": "pardnn,metis"},
     r"--save-model m\.weights\.h5: saves the model of one run; --compare trains several"),
])
def test_bad_values_name_the_setting_and_what_is_allowed(overrides, message):
    with pytest.raises(LaunchError, match=message):
        resolve(Job(), overrides)


def test_values_from_the_job_file_are_checked_and_named_as_such():
    with pytest.raises(LaunchError, match=r"reserve \(job file\): 1\.5: expected a number in \[0, 1\)"):
        resolve(Job(reserve=1.5))


def test_settings_use_the_job_schemas_params():
    """One owner per rule: the launcher's defaults, ranges and choices are the job schema's (pardnn.settings)."""
    from jobs.schema import PLACEMENT_TABLE, RUN_TABLE, TRAIN
    from launcher.settings import SCHEMA
    from pardnn import settings

    assert SCHEMA == {"batch_size": TRAIN["batch_size"], "micro_batches": TRAIN["micro_batches"], **settings.RUN,
                      **RUN_TABLE, **PLACEMENT_TABLE}
    assert all(SCHEMA[key] is settings.PLACEMENT[key] for key in PLACEMENT_TABLE)
    assert SCHEMA["stall_timeout"] is settings.RUN["stall_timeout"]
    table = PLACEMENT_TABLE
    assert {key: DEFAULTS[key] for key in table} == {key: param.default for key, param in table.items()}
    assert resolve(Job(), {"reserve": 0.995}).reserve == 0.995  # [0, 1), as job files and the Machine


def test_command_line_text_is_parsed_by_the_schema():
    settings = resolve(Job(), {"iterations": "40", "window": "10:20", "reserve": "0.2", "costs": "Estimate",
                               "device_preset": "A100", "memory_heuristic": "balance"})
    assert (settings.iterations, settings.window, settings.reserve) == (40, (10, 20), 0.2)
    assert (settings.costs, settings.device_preset, settings.memory_heuristic) == ("estimate", "a100-80gb", "balance")


def test_memory_unlimited_spellings():
    assert resolve(Job(memory="8GiB"), {"memory": "unlimited"}).memory is None


@pytest.mark.parametrize(("text", "window"), [("100:150", (100, 150)), (" 5 : 9 ", (5, 9)), ([1, 2], (1, 2))])
def test_parse_window(text, window):
    assert parse_window(text) == window


@pytest.mark.parametrize("text", ["100", "a:b", "1:2:3", [1]])
def test_parse_window_rejects_bad_text(text):
    with pytest.raises(LaunchError, match="window"):
        parse_window(text)


def test_stall_timeout_unset_given_or_from_the_job():
    assert resolve(Job()).stall_timeout is None  # derived from the measured step time
    assert resolve(Job(), {"stall_timeout": "20"}).stall_timeout == 20.0
    assert resolve(Job(), {"stall_timeout": 0}).stall_timeout == 0.0  # never
    settings = resolve(Job(stall_timeout=90))  # a job file's [run] stall_timeout
    assert (settings.stall_timeout, settings.sources["stall_timeout"]) == (90.0, "job file")
    with pytest.raises(LaunchError, match=r"stall_timeout \(command line\): '-1': expected a number >= 0"):
        resolve(Job(), {"stall_timeout": "-1"})
