"""What a run trains: --placer, --parallelism data, --recompute and --compare, checked against each other;
placing with any placer of the registry; the batch of a data-parallel replica; a step that does not fit."""

from __future__ import annotations

import numpy as np
import pytest

from launcher.errors import DoesNotFit, LaunchError
from launcher.settings import resolve
from launcher.training.recompute import check_wrappable
from launcher.variants import Variant, check_fits, place, ranks_per_node, ranks_why, replica_batch, slug, variants_of
from pardnn.costs.machine import Machine
from pardnn.costs.synthetic import dnn_graph
from pardnn.partitioner import partition
from pardnn.registry import PLACERS
from tests.launcher.standin import Job


def test_a_run_trains_the_placer_the_job_or_command_line_names():
    assert variants_of(resolve(Job())) == (Variant("pardnn"),)
    settings = resolve(Job(), {"placer": "metis"})
    assert variants_of(settings) == (Variant("metis"),) and settings.sources["placer"] == "command line"
    assert ranks_per_node(settings) == 1


def test_data_parallelism_runs_one_rank_per_device():
    settings = resolve(Job(devices_per_node=2), {"parallelism": "data", "recompute": True})
    assert variants_of(settings) == (Variant(None, recompute=True),)
    assert ranks_per_node(settings) == 2 and variants_of(settings)[0].label == "data+recompute"


def test_compare_lists_placers_and_data_in_order():
    settings = resolve(Job(devices_per_node=2), {"compare": "pardnn, metis,data,data+recompute"})
    assert [v.label for v in variants_of(settings)] == ["pardnn", "metis", "data", "data+recompute"]
    assert [v.parallelism for v in variants_of(settings)] == ["model", "model", "data", "data"]
    assert ranks_per_node(settings) == 2
    assert ranks_per_node(resolve(Job(devices_per_node=2), {"compare": ["pardnn", "single"]})) == 1


@pytest.mark.parametrize(("overrides", "message"), [
    ({"placer": "fastest"}, r"placer \(command line\): 'fastest': expected one of 'pardnn'"),
    ({"parallelism": "pipeline"}, r"parallelism: 'pipeline': expected one of model, data"),
    ({"recompute": True}, "--recompute is gradient checkpointing for --parallelism data"),
    ({"compare": "pardnn,magic"}, r"compare: 'pardnn,magic': expected .* \('magic' is not one\)"),
    ({"compare": "metis,data,metis"}, "metis listed twice"),
    ({"compare": "pardnn,"}, "expected a comma-separated list"),
    ({"compare": "pardnn,data", "recompute": True}, "in --compare list data\\+recompute"),
    ({"compare": "pardnn,data", "parallelism": "data"}, "list data in --compare instead"),
    ({"compare": "pardnn,data", "resume": "latest"}, "no checkpoints or --resume"),
])
def test_bad_combinations_name_the_rule(overrides, message):
    with pytest.raises(LaunchError, match=message):
        resolve(Job(), overrides)


def test_every_registry_placer_is_a_choice():
    from launcher.settings import SCHEMA

    assert SCHEMA["placer"].choices == tuple(PLACERS) and "pardnn-paper" in PLACERS


def test_a_replica_trains_the_global_batch_split_over_the_devices_unless_the_command_line_says():
    """A job of batch 8 per node on 4 devices: 2 per data-parallel replica, the same 8 per node; --batch-size 3
    on the command line of a data-parallel run is per device; in a comparison it stays per node."""
    job = Job(batch_size=8, devices_per_node=4)
    data = Variant(None)
    assert replica_batch(resolve(job, {"parallelism": "data"}), data, 4) == 2
    assert replica_batch(resolve(job, {"parallelism": "data", "batch_size": 3}), data, 4) == 3
    assert replica_batch(resolve(job, {"compare": "pardnn,data", "batch_size": 12}), data, 4) == 3
    assert replica_batch(resolve(job), Variant("metis"), 4) == 8
    with pytest.raises(LaunchError, match=r"batch_size 8 per node .* does not split over 3 devices"):
        replica_batch(resolve(job, {"parallelism": "data"}), data, 3)


def test_recompute_wraps_the_lstm_models_and_says_why_not_the_others():
    assert "LSTM" in check_wrappable(Job(model="word_rnn"))
    with pytest.raises(LaunchError, match=r"cannot wrap .*wrn.*batch-norm moving-average updates"):
        check_wrappable(Job(model="wrn"))
    assert "Keras layer" in check_wrappable(Job(model="mypkg.net:build"))  # found after building: check_blocks


GRAPH = dnn_graph(120, seed=3)


def test_pardnn_paper_is_the_papers_algorithm_alone():
    machine = Machine(3)
    ours = place("pardnn-paper", GRAPH, machine, None)
    paper = partition(GRAPH, machine, memory_heuristic=None, guarded=False, ordered=False, refine_seconds=0)
    assert np.array_equal(ours.placement, paper.placement) and ours.order is None


@pytest.mark.parametrize("name", [name for name in PLACERS if name != "exact"])
def test_every_placer_places_on_a_machine_with_memory_without_a_heuristic_of_its_own(name):
    """The run's memory heuristic goes to ParDNN; a baseline gets none (it would refuse one)."""
    machine = Machine(2, memory="1TiB")
    result = place(name, GRAPH, machine, "overflow")
    assert result.placement.shape == (GRAPH.n,) and set(result.placement.tolist()) <= {0, 1}


def test_run_order_false_turns_the_run_order_off():
    assert place("pardnn", GRAPH, Machine(3), None, ordered=False).order is None


def test_a_step_over_a_devices_limit_does_not_fit_naming_it():
    machine = Machine(2, memory="1MiB", reserve=0.0)
    check_fits("metis", [900_000, 1_000_000], [1_048_576, 1_048_576], machine)
    with pytest.raises(DoesNotFit, match=r"metis: device 1 needs 1\.91 MiB .* over its limit of 1\.00 MiB") as caught:
        check_fits("metis", [900_000, 2_000_000], [1_048_576, 1_048_576], machine)
    assert (caught.value.status, caught.value.exit_code) == ("does_not_fit", 3)
    check_fits("metis", [10**12], None, Machine(1))  # unlimited memory: everything fits


def test_compare_takes_plans_of_k_devices_per_replica_on_one_rank_per_device():
    settings = resolve(Job(devices_per_node=4, batch_size=8), {"compare": "k=4,k=2,k=1,metis"})
    variants = variants_of(settings)
    assert [v.label for v in variants] == ["k=4", "k=2", "k=1", "metis"]
    assert [v.replica_devices for v in variants] == [4, 2, 1, None]
    assert {v.placer for v in variants} == {"pardnn", "metis"}  # a plan trains the run's placer
    assert [v.slug for v in variants] == ["k4", "k2", "k1", "metis"]
    assert ranks_per_node(settings) == 4  # a plan's ranks wait where it needs fewer


@pytest.mark.parametrize(("overrides", "message"), [
    ({"compare": "k=3"}, "--compare k=3 does not divide the node's 4 devices .* choose one of 1, 2, 4"),
    ({"compare": "k=0"}, r"'k=0' is not one"),
    ({"compare": "k=1", "batch_size": 6}, "batch_size 6 per node does not split over its 4 replicas"),
    ({"compare": "k=2", "micro_batches": 3}, r"each replica's 4 samples .* do not split into --micro-batches 3"),
    ({"replica_devices": "auto", "parallelism": "data"}, "does not combine with --parallelism data"),
    ({"replica_devices": "auto", "compare": "k=1,k=2"}, "list plans there: --compare k=1,k=2"),
    ({"replica_devices": "most"}, r"--replica-devices 'most': expected a whole number >= 1 .* or auto"),
])
def test_bad_plans_name_the_rule(overrides, message):
    with pytest.raises(LaunchError, match=message):
        resolve(Job(devices_per_node=4, batch_size=8), overrides)


def test_auto_runs_one_rank_per_device_and_has_no_replicas_until_planned():
    settings = resolve(Job(devices_per_node=4, batch_size=8), {"replica_devices": "auto"})
    assert settings.replica_devices == "auto" and ranks_per_node(settings) == 4
    with pytest.raises(LaunchError, match="no plan was chosen yet"):
        settings.replicas_per_node  # noqa: B018


@pytest.mark.parametrize(("overrides", "ranks", "why"), [
    ({"replica_devices": 2}, 2, "--replica-devices 2 runs one rank per replica of 2 devices, 2 per node of 4 devices"),
    ({"replica_devices": 1}, 4, "--replica-devices 1 runs one rank per replica of 1 device, 4 per node of 4 devices"),
    ({"replica_devices": "auto"}, 4,
     "--replica-devices auto runs one rank per device, 4 per node (the plan chosen trains on every k-th)"),
    ({"compare": "k=4,k=2"}, 4, "--compare k=4,k=2 runs one rank per device, 4 per node"),
    ({"compare": "k=2,data"}, 4, None),  # data parallelism: the topology's own words
    ({"parallelism": "data"}, 4, None),
    ({}, 1, None),
])
def test_the_ranks_a_run_asks_for_per_node_and_why(overrides, ranks, why):
    settings = resolve(Job(devices_per_node=4, batch_size=8), overrides)
    assert (ranks_per_node(settings), ranks_why(settings)) == (ranks, why)


def test_variant_file_names_have_no_spaces():
    assert [slug(label) for label in ("data+recompute", "k=2", "pardnn k=1")] == ["data-recompute", "k2", "pardnn-k1"]
