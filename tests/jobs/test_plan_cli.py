"""``pardnn plan JOB --nodes N``: every plan of a real job's replica, built in TensorFlow, and the choice."""

from __future__ import annotations

import json

import pytest

from pardnn.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_USAGE, main

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
    k = chosen["replica_devices"]
    assert plan["commands"]["mpirun"] == (f"mpirun -np {2 * 2 // k} --map-by ppr:{2 // k}:node --bind-to none "
                                          f"pardnn-launch word-rnn-tiny --devices-per-node 2 --replica-devices {k} "
                                          "--micro-batches 1")


def test_plan_prints_the_table(capsys) -> None:
    assert main(["plan", "word-rnn-tiny", "--nodes", "1", "--devices-per-node", "2", "--micro-batches", "2",
                 "--replica-devices", "2", "--batch-size", "16", "--reserve", "0.2", "-q"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "word-rnn-tiny on 1 node(s) of 2 x v100-32gb" in out and "samples/s" in out
    assert "chosen: k=2 M=2: the only plan that fits" in out
    assert "building and costing 1 graphs took" in out and "beside this one" not in out  # a tiny job: no workers
    # One node of 2 GPUs, one replica of k = 2 on it: 1 task per node of 16 cores; the batch and reserve planned for.
    assert out.endswith(
        "train it:\n"
        "  sbatch --nodes=1 --ntasks-per-node=1 --gpus-per-node=2 --cpus-per-task=16 slurm/pardnn.sbatch "
        "word-rnn-tiny --devices-per-node 2 --replica-devices 2 --micro-batches 2 --batch-size 16 --reserve 0.2\n"
        "  mpirun -np 1 --map-by ppr:1:node --bind-to none pardnn-launch word-rnn-tiny --devices-per-node 2 "
        "--replica-devices 2 --micro-batches 2 --batch-size 16 --reserve 0.2\n")


def test_the_commands_that_train_a_plan() -> None:
    """By hand: 2 nodes of G = 8 GPUs, k = 2 devices per replica: G/k = 4 tasks per node, 8 in all, each
    of 8 cores per GPU it drives (16); M = 4. The batch the plan was made for goes with it."""
    from jobs.plan import train_commands
    from pardnn.plan.search import Plan

    commands = train_commands("jobs/my job.toml", Plan(replica_devices=2, micro_batches=4, node_devices=8), nodes=2,
                              options=["--batch-size", "64", "--memory", "16GiB"])
    launch = ("'jobs/my job.toml' --devices-per-node 8 --replica-devices 2 --micro-batches 4 --batch-size 64 "
              "--memory 16GiB")
    assert commands == {
        "sbatch": "sbatch --nodes=2 --ntasks-per-node=4 --gpus-per-node=8 --cpus-per-task=16 slurm/pardnn.sbatch "
                  + launch,
        "mpirun": f"mpirun -np 8 --map-by ppr:4:node --bind-to none pardnn-launch {launch}"}
    one = train_commands("trn", Plan(replica_devices=8, micro_batches=1, node_devices=8), nodes=3)
    assert one["sbatch"].startswith("sbatch --nodes=3 --ntasks-per-node=1 --gpus-per-node=8 --cpus-per-task=64 ")
    assert one["mpirun"].startswith("mpirun -np 3 --map-by ppr:1:node ")


@pytest.mark.parametrize("value", ["-1", "two"])
def test_bad_build_workers_are_one_line(capsys, value: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "word-rnn-tiny", "--nodes", "1", "--build-workers", value])
    assert exit_.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"--build-workers: {value!r}: expected auto or a whole number >= 0" in err


def test_a_k_that_does_not_divide_the_node_is_one_line(capsys) -> None:
    assert main(["plan", "word-rnn-tiny", "--nodes", "2", "--devices-per-node", "4", "--replica-devices", "3",
                 "-q"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "--replica-devices 3 does not divide the node's 4 devices; choose among 1, 2, 4" in err
    assert "Traceback" not in err


def test_the_graphs_planned_are_the_ones_built_whole_and_cached_across_clusters_and_presets() -> None:
    """M = 4 is written down from the M = 2 step (the same graph op for op as built at M = 4); a second
    cluster size builds nothing; another preset's costs equal an estimate on that preset."""
    from jobs.config import load_job
    from jobs.plan import job_plan
    from jobs.training import build
    from pardnn.batch.replicate import difference
    from pardnn.costs.presets import preset
    from pardnn.tf.estimate import estimate_parts

    job = load_job("word-rnn-tiny")
    cache: dict = {}
    first, described = job_plan(job, nodes=2, node="dgx-a100", devices_per_node=2, micro_batches=4,
                                replica_devices=[2], cache=cache)
    assert described["graphs_built"] == 1  # the M = 2 step at batch 8, the template of M = 4 at batch 16
    [trial] = first.trials
    assert (trial.replica_batch, trial.plan.micro_batches, trial.status) == (16, 4, "fits")
    made = cache[("graphs", "a100-80gb")].graph_for(16, 4)
    whole = build(job, batch_size=16, micro_batches=4)
    assert difference(estimate_parts(whole.graph, whole.fetches, preset("dgx-a100")).graph, made) is None

    again, described = job_plan(job, nodes=8, node="dgx-a100", devices_per_node=2, micro_batches=4,
                                replica_devices=[2], cache=cache)
    assert described["graphs_built"] == 0
    assert again.trials[0].compute_us == trial.compute_us  # the same placement; only the allreduce differs
    assert again.trials[0].exposed_us != trial.exposed_us

    other, described = job_plan(job, nodes=2, node="dgx-2", devices_per_node=2, micro_batches=4,
                                replica_devices=[2], cache=cache)
    assert described["graphs_built"] == 0  # costed again for the V100, not built again
    template = build(job, batch_size=8, micro_batches=2)
    on_v100 = estimate_parts(template.graph, template.fetches, preset("dgx-2")).graph
    assert difference(on_v100, cache["parts"][("v100-32gb", 8, 2)].graph) is None
    assert other.trials[0].compute_us != trial.compute_us


def test_the_search_seconds_count_every_build_made_in_this_process(monkeypatch) -> None:
    """The first step is built before the plans are tried (its pace decides on workers); a tiny job
    starts none, so every build ran in this process during the search: its seconds are at least theirs.
    The pace is wall time: on a starved core (the latest stack's tests run at nice 19 in CI) the tiny
    job's first build once took over PARALLEL_AFTER_S and started a worker, so the test sets the bar out
    of reach instead of relying on the machine's speed."""
    import jobs.plansteps
    from jobs.plan import job_plan

    monkeypatch.setattr(jobs.plansteps, "PARALLEL_AFTER_S", 1e6)  # no first build takes 11 days: no workers
    search, described = job_plan("word-rnn-tiny", nodes=1, node="dgx-a100", devices_per_node=2, micro_batches=1)
    assert described["build_workers"] == 0 and described["graphs_built"] == 2
    assert search.seconds >= described["build_seconds"]
