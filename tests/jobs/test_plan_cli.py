"""``pardnn plan JOB --nodes N``: every plan of a real job's replica, built in TensorFlow, and the choice."""

from __future__ import annotations

import json

import pytest

from pardnn.cli import EXIT_BAD_INPUT, EXIT_OK, main

pytestmark = [pytest.mark.tf]


def test_plan_tries_every_k_and_keeps_the_shortest_step_that_fits(capsys) -> None:
    """word-rnn-tiny (batch 16 per node) on 2 nodes of 2 devices: k = 1 (2 replicas of batch 8) and k = 2
    (one of batch 16), M = 1: two graphs built."""
    assert main(["plan", "word-rnn-tiny", "--nodes", "2", "--devices-per-node", "2", "--node", "dgx-a100",
                 "--micro-batches", "1", "--json", "-q"]) == EXIT_OK
    plan = json.loads(capsys.readouterr().out)
    assert (plan["nodes"], plan["devices_per_node"], plan["global_batch"], plan["graphs_built"]) == (2, 2, 32, 2)
    trials = {t["replica_devices"]: t for t in plan["trials"]}
    assert sorted(trials) == [1, 2]
    assert (trials[1]["replicas_per_node"], trials[1]["replica_batch"]) == (2, 8)
    assert (trials[2]["replicas_per_node"], trials[2]["replica_batch"]) == (1, 16)
    fitting = [t for t in plan["trials"] if t["status"] == "fits"]
    chosen = plan["chosen"]
    assert chosen["step_us"] == min(t["step_us"] for t in fitting)
    assert chosen["samples_per_s"] == pytest.approx(32 / (chosen["step_us"] * 1e-6))
    assert chosen["step_us"] == pytest.approx(chosen["compute_us"] + chosen["exposed_allreduce_us"])
    assert plan["why"].startswith(f"k={chosen['replica_devices']} M=1")


def test_plan_prints_the_table(capsys) -> None:
    assert main(["plan", "word-rnn-tiny", "--nodes", "1", "--devices-per-node", "2", "--micro-batches", "2",
                 "--replica-devices", "2", "-q"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "word-rnn-tiny on 1 node(s) of 2 x v100-32gb" in out and "samples/s" in out
    assert "chosen: k=2 M=2: the only plan that fits" in out


def test_a_k_that_does_not_divide_the_node_is_one_line(capsys) -> None:
    assert main(["plan", "word-rnn-tiny", "--nodes", "2", "--devices-per-node", "4", "--replica-devices", "3",
                 "-q"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "--replica-devices 3 does not divide the node's 4 devices; choose among 1, 2, 4" in err
    assert "Traceback" not in err
