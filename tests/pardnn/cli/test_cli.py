"""The pardnn command: outputs, exit codes, and one clear line on bad input."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pardnn.cli import EXIT_BAD_INPUT, EXIT_INFEASIBLE, EXIT_OK, main
from pardnn.costs.graph import CostGraph
from pardnn.io import read_placement, write_graph, write_placement

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "mlp-train.json"


@pytest.fixture
def diamond(tmp_path: Path) -> Path:
    """a(1) -> b(2), a -> c(3), b -> d(4), c -> d; 1000-byte outputs, d none."""
    g = CostGraph(["a", "b", "c", "d"], [1, 2, 3, 4], [1000, 1000, 1000, 0], [0, 0, 1, 2], [1, 2, 3, 3], name="diamond")
    path = tmp_path / "diamond.json"
    write_graph(g, path)
    return path


def test_info_json_by_hand(diamond, capsys):
    """Work 10, critical path a-c-d = 8, DoP 1.25; at 1 GB/s and 1 us each edge costs 1 + 1 us
    (1000 B), the d-bound ones the same: CCR = 4 × 2 / 10 = 0.8."""
    assert main(["info", str(diamond), "--json", "--bandwidth", "1GB/s", "--latency", "1us"]) == EXIT_OK
    info = json.loads(capsys.readouterr().out)
    assert info["ops"] == 4 and info["edges"] == 4
    assert info["total_work_us"] == 10 and info["critical_path_us"] == 8
    assert info["dop"] == pytest.approx(1.25) and info["ccr"] == pytest.approx(0.8)
    assert info["critical_path_with_comm_us"] == pytest.approx(12)


def test_info_text_names_dop_and_ccr(capsys):
    assert main(["info", str(EXAMPLE)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "degree of parallelism" in out and "CCR" in out and "35 ops" in out


def test_simulate_json_by_hand(diamond, tmp_path, capsys):
    """b and d on device 0, a and c on device 1 at 1 GB/s, 1 us: a 0-1; b waits for a's 1000 B
    (1 + 1 us): 3-5; c 1-4; d waits for c (4 + 2 = 6): 6-10."""
    placement = tmp_path / "p.txt"
    placement.write_text("a 1\nb 0\nc 1\nd 0\n")
    assert main(["simulate", str(diamond), str(placement), "--bandwidth", "1GB/s", "--latency", "1us",
                 "--json"]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert report["makespan_us"] == pytest.approx(10)
    assert report["lower_bound_us"] == 8 and report["cut_edges"] == 2 and report["cut_bytes"] == 2000
    assert report["load_us"] == [6, 4] and report["memory_fits"] is True


def test_place_writes_a_placement_and_reports(tmp_path, capsys):
    out = tmp_path / "placement.txt"
    assert main(["place", str(EXAMPLE), "-k", "2", "--memory", "400MiB", "-o", str(out)]) == EXIT_OK
    text = capsys.readouterr().out
    assert "makespan" in text and "heuristic overflow" in text and f"wrote {out}" in text
    from pardnn.io import read_any_graph

    graph = read_any_graph(EXAMPLE)
    assert read_placement(out, graph, devices=2).shape == (graph.n,)


def test_place_writes_a_run_order_and_simulate_honours_it(tmp_path, capsys):
    """a -> {b, c}, c -> d (1000 B at 1 GB/s, no latency), a, b, c in one group: in order of readiness
    every placement takes >= 121 us; with c before b and d on the other device, 112 us. place writes
    the positions as a third column; simulate emulates them (112), or not with --ignore-order (122)."""
    graph_path, out = tmp_path / "fork.json", tmp_path / "p.txt"
    write_graph(CostGraph(["a", "b", "c", "d"], [1.0, 10.0, 10.0, 100.0], [0, 0, 1000, 0], [0, 0, 2], [1, 2, 3],
                          colocation=["g", "g", "g", None], name="fork"), graph_path)
    link = ["--bandwidth", "1GB/s", "--latency", "0us"]
    assert main(["place", str(graph_path), "-k", "2", *link, "-o", str(out)]) == EXIT_OK
    assert "order           each device runs in upward-rank order" in capsys.readouterr().out
    lines = out.read_text().splitlines()
    assert all(len(line.split()) == 3 for line in lines) and lines[1].split()[2] == "2"  # b after c
    assert main(["simulate", str(graph_path), str(out), *link, "--json"]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert report["ordered"] is True and report["makespan_us"] == pytest.approx(112.0)
    assert main(["simulate", str(graph_path), str(out), *link, "--ignore-order", "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["makespan_us"] == pytest.approx(122.0)
    assert main(["place", str(graph_path), "-k", "2", *link, "--no-run-order", "-o", str(out)]) == EXIT_OK
    assert "\norder " not in capsys.readouterr().out  # no ordering stage, no order line
    assert all(len(line.split()) == 2 for line in out.read_text().splitlines())
    pytest.importorskip("ortools")
    for flags, columns in (([], 3), (["--no-run-order"], 2)):  # the exact placer: its model's order, or none
        assert main(["place", str(graph_path), "-k", "2", *link, "-a", "exact", *flags, "-o", str(out)]) == EXIT_OK
        assert {len(line.split()) for line in out.read_text().splitlines()} == {columns}


def test_place_json_report(tmp_path, capsys):
    out = tmp_path / "placement.json"
    assert main(["place", str(EXAMPLE), "-k", "3", "-o", str(out), "--json"]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert report["devices"] == 3 and set(report["stage_seconds"]) >= {"slicing", "mapping", "evaluation"}
    assert json.loads(out.read_text()).keys() == {n["name"] for n in json.loads(EXAMPLE.read_text())["nodes"]}


@pytest.mark.parametrize("algorithm", ["round_robin", "topological", "critical_path", "single"])
def test_place_with_a_baseline(tmp_path, capsys, algorithm):
    out = tmp_path / "p.txt"
    assert main(["place", str(EXAMPLE), "-k", "2", "-a", algorithm, "-o", str(out)]) == EXIT_OK
    assert capsys.readouterr().out.startswith(f"{algorithm}:")


def test_infeasible_memory_exits_3_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "p.txt"
    assert main(["place", str(EXAMPLE), "-k", "2", "--memory", "40MiB", "-o", str(out)]) == EXIT_INFEASIBLE
    err = capsys.readouterr().err
    assert "infeasible" in err and "Options:" in err and "no placement was written" in err
    assert not out.exists()


def test_bad_inputs_give_one_line_and_exit_1(tmp_path, diamond, capsys):
    missing = tmp_path / "nope.json"
    assert main(["info", str(missing)]) == EXIT_BAD_INPUT
    assert "nope.json" in capsys.readouterr().err
    placement = tmp_path / "p.txt"
    placement.write_text("a 0\nb 0\nc 0\nzz 0\n")
    assert main(["simulate", str(diamond), str(placement)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "p.txt" in err and "zz" in err and err.count("\n") == 1
    assert main(["place", str(diamond), "-k", "2", "--memory", "lots", "-o", str(placement)]) == EXIT_BAD_INPUT
    assert "cannot read 'lots'" in capsys.readouterr().err


def test_no_traceback_from_the_console_script(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "pardnn-graph", "version": 1, "nodes": [{"name": "a", "comp_us": -1, '
                   '"out_bytes": 0}], "edges": []}')
    done = subprocess.run([sys.executable, "-m", "pardnn.cli", "info", str(bad)], capture_output=True, text=True)
    assert done.returncode == EXIT_BAD_INPUT
    assert "Traceback" not in done.stderr and "comp_us" in done.stderr and "bad.json" in done.stderr


def test_generate_then_convert_round_trip(tmp_path, capsys):
    from pardnn.io import read_any_graph, write_reference

    graph_path = tmp_path / "g.json.gz"
    assert main(["generate", "--ops", "300", "--seed", "2", "-o", str(graph_path)]) == EXIT_OK
    graph = read_any_graph(graph_path)
    files = write_reference(graph, tmp_path, "ref")
    back = tmp_path / "back.json"
    argv = ["convert", "--dot", str(files["graph"]), "--times", str(files["times"]), "--sizes", str(files["sizes"]),
            "-o", str(back)]
    for key in ("variables", "references", "noops"):
        if key in files:
            argv += [f"--{key}", str(files[key])]
    assert main(argv) == EXIT_OK
    converted = read_any_graph(back)
    assert converted.n == graph.n and converted.m == graph.m
    assert (converted.comp_us == graph.comp_us).all()
    write_placement(tmp_path / "p.txt", graph, [0] * graph.n)
    assert main(["simulate", str(back), str(tmp_path / "p.txt")]) == EXIT_OK


def test_help_teaches(capsys):
    with pytest.raises(SystemExit):
        main(["place", "--help"])
    out = capsys.readouterr().out
    assert "--memory-heuristic" in out and "exit codes" in out and "32GiB" in out


# ------------------------------------------------------------------------------ plugin commands
PLUGIN = """\
import sys

from pardnn.errors import InfeasibleError, PardnnError


def fail(args):
    if args.how == "infeasible":
        raise InfeasibleError("device 0 needs 2 GiB of its 1 GiB")
    if args.how == "oserror":
        open(args.path)
    if args.how == "pardnn":
        raise PardnnError("plugin says no")
    print("plugin ran")
    return 0


def register(sub):
    parser = sub.add_parser("fake", help="a test plugin")
    parser.add_argument("how")
    parser.add_argument("--path", default="")
    parser.set_defaults(func=fail)
"""


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """Install (on sys.path) a distribution whose ``pardnn.commands`` entry points are ``fake`` (works),
    ``broken`` (its module is missing) and ``needy`` (its module imports a package that is not
    installed, which its extra ``needs`` requires)."""
    (tmp_path / "fake_pardnn_plugin.py").write_text(PLUGIN)
    (tmp_path / "needy_pardnn_plugin.py").write_text("import no_such_package_xyz\n\ndef register(sub):\n    pass\n")
    info = tmp_path / "fake_pardnn_plugins-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-pardnn-plugins\nVersion: 1.0\n"
                                   "Provides-Extra: needs\n"
                                   "Requires-Dist: no-such-package-xyz>=1; extra == \"needs\"\n")
    (info / "entry_points.txt").write_text("[pardnn.commands]\nfake = fake_pardnn_plugin:register\n"
                                           "broken = no_such_pardnn_plugin.cli:register\n"
                                           "needy = needy_pardnn_plugin:register\n")
    monkeypatch.syspath_prepend(str(tmp_path))


def test_help_lists_the_plugin_commands(capsys):
    """The installed checkout registers the zoo's and the benchmarks' commands."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == EXIT_OK
    commands = capsys.readouterr().out.split("options:")[0]
    for name in ("info", "simulate", "place", "convert", "generate", "capture", "max-batch", "bench"):
        assert f"\n    {name}" in commands, name


def test_plugin_commands_help(capsys):
    for name in ("capture", "max-batch"):
        with pytest.raises(SystemExit):
            main([name, "--help"])
        assert f"usage: pardnn {name}" in capsys.readouterr().out


def test_builtin_commands_do_not_read_entry_points(monkeypatch, capsys):
    """Only plugin commands pay for reading the installed packages' metadata."""
    import importlib.metadata

    from numba.core.entrypoints import init_all

    init_all()  # numba reads its own extensions' entry points once per process, on its first compile
    def metadata(*args, **params):
        raise AssertionError("a built-in command read the package metadata")

    for name in ("entry_points", "distributions", "distribution"):
        monkeypatch.setattr(importlib.metadata, name, metadata)
    assert main(["info", str(EXAMPLE)]) == EXIT_OK
    with pytest.raises(SystemExit) as exit_info:
        main(["place", "--help"])
    assert exit_info.value.code == EXIT_OK
    capsys.readouterr()


def test_a_plugin_that_cannot_be_imported_is_one_line_and_exit_1(plugins, capsys):
    assert main(["broken", "--whatever"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "command 'broken' is unavailable" in err and "no_such_pardnn_plugin" in err and "pip install" in err
    assert main(["needy"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "command 'needy' is unavailable" in err
    assert "needs no_such_package_xyz, which is not installed" in err
    assert "pip install 'fake-pardnn-plugins[needs]'" in err


def test_help_still_works_with_a_broken_plugin(plugins, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == EXIT_OK
    out = capsys.readouterr().out
    assert "a test plugin" in out and "(unavailable) its module no_such_pardnn_plugin.cli" in out
    assert main(["fake", "ok"]) == EXIT_OK and capsys.readouterr().out == "plugin ran\n"
    with pytest.raises(SystemExit) as exit_info:
        main(["nonsense"])
    assert exit_info.value.code == 2 and "'fake'" in capsys.readouterr().err


def test_plugin_errors_are_handled_like_builtin_ones(plugins, tmp_path, capsys):
    assert main(["fake", "infeasible"]) == EXIT_INFEASIBLE
    assert capsys.readouterr().err == "pardnn: infeasible: device 0 needs 2 GiB of its 1 GiB\n"
    assert main(["fake", "pardnn"]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err == "pardnn: error: plugin says no\n"
    assert main(["fake", "oserror", "--path", str(tmp_path / "gone.txt")]) == EXIT_BAD_INPUT
    assert capsys.readouterr().err == f"pardnn: error: {tmp_path / 'gone.txt'}: No such file or directory\n"


def test_zoo_commands_fail_on_a_bad_job_before_tensorflow(tmp_path, capsys):
    """capture and max-batch come from jobs.cli; a bad job is one line and exit 1 (no TensorFlow needed)."""
    assert main(["capture", "no-such-job", "-o", str(tmp_path / "x.json")]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "no-such-job" in err and err.count("\n") == 1
    assert main(["max-batch", "no-such-job"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "no-such-job" in err and err.count("\n") == 1


def test_options_use_the_settings_words(tmp_path, capsys):
    out = str(tmp_path / "p.txt")
    for argv, words in [
        (["--reserve", "1"], "argument --reserve: '1': expected a number in [0, 1)"),
        (["--memory-heuristic", "fast"], "'fast': expected one of 'overflow', 'balance', 'none'"),
        (["-a", "magic"], "'magic': expected one of 'pardnn', "),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            main(["place", str(EXAMPLE), "-k", "2", "-o", out, *argv])
        assert exit_info.value.code == 2 and words in capsys.readouterr().err


@pytest.mark.slow
def test_warmup_completes_the_numba_cache_a_first_placement_began(cold_first_run, tmp_path):
    """`python -m pardnn warmup` in a fresh interpreter, its NUMBA_CACHE_DIR holding what a cold `pardnn place`
    compiled (the benchmark's first run: ParDNN's sweeps and the baselines it compares with), reaches every
    kernel: it loads those and compiles the rest (the refinement's compiled kicks, which a first run on that
    graph does not reach) into the cache, so that the emulator's, the memory tracker's, slicing's, mapping's
    and the kicks' are all there; a second warm-up then compiles nothing."""
    _, _, work = cold_first_run
    cache = tmp_path / "numba-cache"
    shutil.copytree(work / "numba-cache-0", cache)
    began = kernels(cache.rglob("*.nbc"))
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "NUMBA_DEBUG_CACHE": "1"}

    def warm_up() -> tuple[set[str], set[str]]:
        done = subprocess.run([sys.executable, "-m", "pardnn", "warmup"], env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr
        assert "numba kernels ready" in done.stdout and str(cache) in done.stdout
        said = re.findall(r"\[cache\] data (saved to|loaded from) '([^']+)'", done.stdout)
        return (kernels(Path(path) for how, path in said if how == "saved to"),
                kernels(Path(path) for how, path in said if how == "loaded from"))

    compiled, loaded = warm_up()
    wanted = {"emulator", "memory", "mapping", "slicing", "levels", "linear_clustering", "kicks"}
    assert wanted <= {name.split(".")[0] for name in compiled | loaded}, (compiled, loaded)
    # The first run's, loaded (ParDNN's sweeps, and the baselines its guard compares with) ...
    assert {"emulator.emulate_sweep", "slicing._walk", "linear_clustering._extract_paths"} <= loaded & began
    assert {"kicks.iterate_compiled", "memory.tracked_peaks"} <= compiled - began  # ... the rest, compiled now
    assert wanted <= {name.split(".")[0] for name in kernels(cache.rglob("*.nbc"))}
    compiled_again, loaded_again = warm_up()
    assert not compiled_again and loaded | {"kicks.iterate_compiled"} <= loaded_again


def kernels(paths) -> set[str]:
    """``module.function`` of numba's cache files (``emulator.emulate_sweep-86.py311.1.nbc``)."""
    return {path.name.split("-")[0] for path in paths}
