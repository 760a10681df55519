"""pardnn max-batch on a tiny job: the search against brute force, data parallelism by definition.

Each step (job, batch, micro-batches) is built and costed once per test run (:func:`built_once`): the brute
force, the searches that build every probe and those that scale two builds read the same TensorFlow build.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tensorflow")

from jobs import load_job, maxbatch
from jobs.maxbatch import job_machine, job_max_batch
from pardnn import InfeasibleError, partition
from pardnn.batch.maxbatch import data_parallel_fits
from pardnn.cli import main
from tests.helpers.builds import costed

pytestmark = [pytest.mark.tf, pytest.mark.slow]

MEMORY = "12MiB"


@pytest.fixture(scope="module")
def tiny():
    return load_job("wrn-tiny")


@pytest.fixture(autouse=True)
def built_once(monkeypatch):
    """Every search's builds come from :func:`tests.helpers.builds.costed`: its notes and counts of builds are
    its own, the TensorFlow work is shared with the brute force and the other searches."""
    monkeypatch.setattr(maxbatch, "build_parts", lambda job, batch, micro, preset: costed(job, batch, micro, preset))


def test_search_equals_brute_force_and_data_parallel_is_k_replicas(tiny, tmp_path):
    rows = job_max_batch(tiny, [1, 2], memory=MEMORY, cache=tmp_path / "cache.json")
    one, two = rows
    machine2 = job_machine(tiny.device_preset, 2, MEMORY, tiny.reserve)
    def graph(b):
        return costed(tiny, b).graph

    def pardnn_fits(b):
        try:
            partition(graph(b), machine2, memory_heuristic="overflow")
        except InfeasibleError:
            return False
        return True

    # Brute force over every batch up to the answer + 2 gives the same answer. (The greedy heuristic
    # is not exactly monotone near its limit — here it fails at 40 and fits at 41 — which is why the
    # search scans upward after bisecting; far below the limit every size fits.)
    answer = two.pardnn_batch
    assert answer >= 1
    fitting = [b for b in range(1, answer + 3) if pardnn_fits(b)]
    assert max(fitting) == answer
    assert set(range(1, int(0.9 * answer) + 1)) <= set(fitting)
    # Data parallelism: each of K replicas holds the whole step at its own batch; the answer is the
    # largest batch one device holds, times K.
    per_replica = one.data_parallel_batch
    assert all(data_parallel_fits(graph(b), machine2)[0] for b in range(1, per_replica + 1))
    assert not data_parallel_fits(graph(per_replica + 1), machine2)[0]
    assert two.data_parallel_batch == 2 * per_replica
    assert one.pardnn_batch == per_replica  # on one device ParDNN is data parallelism of one


def test_cli_table_json_and_instant_rerun(tmp_path, capsys):
    cache = tmp_path / "cache.json"
    argv = ["max-batch", "wrn-tiny", "--devices", "1,2", "--memory", MEMORY, "--cache", str(cache), "--json",
            "--csv", str(tmp_path / "t.csv"), "--plot", str(tmp_path / "t.png")]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert [r["devices"] for r in first["rows"]] == [1, 2]
    assert (tmp_path / "t.png").stat().st_size > 0 and "pardnn_batch" in (tmp_path / "t.csv").read_text()
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["rows"][1]["pardnn_batch"] == first["rows"][1]["pardnn_batch"]
    assert "cached" in err and " s)" not in err.replace("cached)", "")


def test_model_too_big_even_at_batch_one(capsys):
    assert main(["max-batch", "wrn-tiny", "--devices", "1,2", "--memory", "64KiB", "--cache", "",
                 "-q"]) == 3
    assert "does not fit even at batch 1" in capsys.readouterr().err


def test_bad_job_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[model]\ntype = 'resnet'\n")
    assert main(["max-batch", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "bad.toml" in err and err.count("\n") == 1


@pytest.mark.parametrize("name", ["wrn-tiny", "trn-tiny", "e3d-tiny", "word-rnn-tiny", "char-crn-tiny"])
def test_scaled_graphs_equal_built_ones_for_every_model(name):
    """What makes max-batch fast is exact for the five models: the graph computed from batches 2 and 3
    equals the graph TensorFlow builds, also past a max switch (TRN's embedding gradient)."""
    from pardnn.batch.batchscale import BatchScaling
    from pardnn.costs.presets import preset

    job = load_job(name)
    scaling = BatchScaling(costed(job, 2), costed(job, 3), 2, preset(job.device_preset))
    for batch in (5, 300):
        built = costed(job, batch)
        assert scaling.mismatch(built, batch) is None
        assert scaling.graph_at(batch, name=built.graph.name) == built.graph


def test_rebuilding_every_probe_gives_the_same_answers(tiny, tmp_path):
    notes = []
    scaled = job_max_batch(tiny, [1, 2, 4], memory=MEMORY, cache=tmp_path / "a.json", on_note=notes.append)
    rebuilt = job_max_batch(tiny, [1, 2, 4], memory=MEMORY, cache=tmp_path / "b.json", rebuild=True)
    assert [(r.pardnn_batch, r.data_parallel_batch) for r in scaled] == \
        [(r.pardnn_batch, r.data_parallel_batch) for r in rebuilt]
    assert any("equals the built one" in note for note in notes)
    assert sum("built and costed" in note for note in notes) == 4  # batches 1, 2, 3 and the check


def test_a_failed_check_falls_back_to_building_every_probe(tiny, tmp_path, monkeypatch):
    from pardnn.batch.batchscale import BatchScaling

    monkeypatch.setattr(BatchScaling, "mismatch", lambda self, built, batch: "op 'x' (Foo): made up")
    notes = []
    cache = tmp_path / "cache.json"
    rows = job_max_batch(tiny, [1, 2], memory=MEMORY, cache=cache, on_note=notes.append)
    assert any("is not the built one (op 'x' (Foo): made up); building every probe" in note for note in notes)
    rebuilt = job_max_batch(tiny, [1, 2], memory=MEMORY, cache=tmp_path / "other.json", rebuild=True)
    assert [r.pardnn_batch for r in rows] == [r.pardnn_batch for r in rebuilt]
    # Only probes of built graphs entered the cache: it holds exactly what the rebuilding search computed.
    assert json.loads(cache.read_text()).keys() == json.loads((tmp_path / "other.json").read_text()).keys()


def test_benchmark_section_sets_ours_beside_the_papers(tmp_path):
    from benchmarks.maxbatch import main as bench_main
    from benchmarks.maxbatch import render
    from pardnn.batch.maxbatch import BatchRow

    rows = [BatchRow(k, 2 * k if k > 1 else 2, 2 * k) for k in (1, 2, 4, 8, 16)]
    text = render([("trn", rows, 123.4, "exact (built at 40); 4 builds"), ("e3d", None, 10.0, "x")], 2000.0, "cmd")
    assert "| trn | 4 | 8 | 8 | 1.00 | 32 (8x) |" in text
    assert "| e3d | 1 | 0 | 0 | - | 1 (1x) |" in text  # infeasible even at batch 1
    assert "| trn | 123 s | yes | 0 | exact (built at 40); 4 builds |" in text
    assert "The whole table: 2000 s (target < 1800 s: **missed**)." in text
    with pytest.raises(SystemExit):
        bench_main(["--models", "resnet"])


# ------------------------------------------------------------------------------- micro-batches
@pytest.mark.parametrize("name", ["wrn-tiny", "word-rnn-tiny"])
def test_scaled_micro_batched_graphs_equal_built_ones(name):
    """The M-copy graph at micro-batch b, computed from micro-batches 2 and 3 (batches 2M, 3M), is the one
    TensorFlow builds at batch M b: batchscale's lines hold in b."""
    from pardnn.batch.batchscale import BatchScaling
    from pardnn.costs.presets import preset

    job, micro = load_job(name), 2
    scaling = BatchScaling(costed(job, 2 * micro, micro), costed(job, 3 * micro, micro), 2, preset(job.device_preset))
    built = costed(job, 7 * micro, micro)
    assert scaling.mismatch(built, 7) is None
    assert scaling.graph_at(7, name=built.graph.name) == built.graph


def test_with_m_every_probe_is_a_multiple_of_m_and_the_scaling_is_checked(tiny, tmp_path):
    notes, probes = [], []
    rows = job_max_batch(tiny, [1, 2], memory=MEMORY, cache=tmp_path / "c.json", micro_batches=2,
                         on_note=notes.append, on_probe=lambda kind, probe: probes.append(probe.batch))
    assert probes and all(batch % 2 == 0 for batch in probes)
    assert all(row.micro_batches == 2 and row.pardnn_batch % 2 == 0 and row.pardnn_batch > 0 for row in rows)
    assert any("(2 micro-batches of 1)" in note for note in notes)
    assert any("equals the built one, so every probe up to it was exact" in note for note in notes)
    rebuilt = job_max_batch(tiny, [1, 2], memory=MEMORY, cache=tmp_path / "r.json", micro_batches=2, rebuild=True)
    assert [r.pardnn_batch for r in rows] == [r.pardnn_batch for r in rebuilt]


def test_auto_keeps_per_k_the_m_with_the_largest_batch(tiny, tmp_path):
    from jobs.maxbatch import format_tried, job_max_batch_auto

    best, tried = job_max_batch_auto(tiny, [1, 2], memory=MEMORY, cache=tmp_path / "c.json", micro_options=(1, 2))
    assert sorted(tried) == [1, 2]
    for position, row in enumerate(best):
        batches = {m: rows[position].pardnn_batch for m, rows in tried.items()}
        assert row.pardnn_batch == max(batches.values())
        assert row.micro_batches == min(m for m, b in batches.items() if b == row.pardnn_batch)
    table = format_tried(tried, best)
    assert "M=1" in table and "M=2" in table and table.count("*") == len(best) + 1  # and the legend


def test_cli_micro_batches_column_and_one_line_errors(tmp_path, capsys):
    argv = ["max-batch", "wrn-tiny", "--devices", "2", "--memory", MEMORY, "--cache", str(tmp_path / "c.json"),
            "--micro-batches", "2", "-q"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    header, row = out.splitlines()[1:3]
    assert header.split()[-1] == "M" and row.split()[-1] == "2" and int(row.split()[1]) % 2 == 0
    for bad in ("0", "two"):
        with pytest.raises(SystemExit) as stop:
            main(["max-batch", "wrn-tiny", "--micro-batches", bad])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert f"argument --micro-batches: {bad!r}: expected a whole number >= 1, or 'auto'" in err
