"""The paper's ten configurations build at full size (graph mode: nothing is allocated), have the
parameter counts their architectures give by hand, and fit 4 V100s at the paper's 4-GPU batch sizes
once ParDNN places them. Each takes 5-40 s on 2 cores (about 3 minutes for all ten); set
PARDNN_PAPER_GRAPHS=0 to skip them. ``python -m jobs.paper`` prints the comparison with the paper."""

from __future__ import annotations

import os

import pytest

tf = pytest.importorskip("tensorflow")

from jobs import build, cost_graph, load_job  # noqa: E402
from jobs.paper import PAPER, PAPER_JOBS  # noqa: E402
from pardnn import partition  # noqa: E402
from pardnn.costs.info import graph_info  # noqa: E402
from pardnn.costs.presets import machine_for  # noqa: E402

pytestmark = [
    pytest.mark.tf,
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("PARDNN_PAPER_GRAPHS") == "0", reason="PARDNN_PAPER_GRAPHS=0"),
]


def lstm(inputs: int, hidden: int) -> int:
    return (inputs + hidden) * 4 * hidden + 4 * hidden


def word_rnn(p: dict) -> int:
    v, e, h = p["vocab_size"], p["embedding_size"], p["hidden_size"]
    return v * e + lstm(e, h) + (p["layers"] - 1) * lstm(h, h) + h * v + v


def char_crn(p: dict) -> int:
    e, h, features = p["char_embed_size"], p["hidden_size"], sum(p["kernel_features"])
    cnn = sum(w * e * f + f for w, f in zip(p["kernel_widths"], p["kernel_features"]))
    highway = p["highway_layers"] * 2 * (features * features + features)
    lstms = lstm(features, h) + (p["layers"] - 1) * lstm(h, h)
    return p["char_vocab_size"] * e + cnn + highway + lstms + h * p["word_vocab_size"] + p["word_vocab_size"]


def wrn(p: dict) -> int:
    k, total, channels = p["widen_factor"], 3 * 3 * 3 * 16, 16
    for group, width in enumerate((16 * k, 32 * k, 64 * k)):
        for unit in range(p["units"]):
            inputs = channels if unit == 0 else width
            total += 2 * inputs + 9 * inputs * width + 2 * width + 9 * width * width
            if unit == 0 and (inputs != width or group > 0):  # a 1x1 shortcut where shape or stride change
                total += inputs * width
        channels = width
    return total + 2 * channels + channels * p["num_classes"] + p["num_classes"]


def transformer(p: dict) -> int:
    d, f = p["model_dim"], p["inner_dim"]
    norm, attention, ffn = 2 * d, 4 * d * d, d * f + f + f * d + d
    encoder = p["encoder_layers"] * (2 * norm + attention + ffn) + norm
    decoder = p["decoder_layers"] * (3 * norm + 2 * attention + ffn) + norm
    embeddings = p["vocab_size"] * d * (1 if p["share_embeddings"] else 3)
    return embeddings + encoder + decoder


def e3d_lstm(p: dict) -> int:
    c, kernel = p["hidden"], p["window_length"] * p["filter_size"] ** 2
    channels = p["patch_size"] ** 2 * p["image_channels"]
    total = p["window_length"] * c * channels + channels  # the generating convolution
    for layer in range(p["layers"]):
        inputs = channels if layer == 0 else c
        convs = (kernel * c * 4 * c + 4 * c) * 2 + kernel * inputs * 7 * c + 7 * c + 2 * (kernel * c * c + c)
        convs += 2 * c * c + c  # the 1x1x1 convolution of [cell, memory]
        norms = 2 * (4 * c + 7 * c + 4 * c) + 2 * c
        total += convs + norms
    return total


FORMULAS = {"word_rnn": word_rnn, "char_crn": char_crn, "wrn": wrn, "transformer": transformer, "e3d_lstm": e3d_lstm}


@pytest.mark.parametrize("name", PAPER_JOBS)
def test_paper_size_graph_builds_with_the_architectures_parameter_count(name):
    job = load_job(name)
    trained = build(job)
    assert trained.parameters == FORMULAS[job.model](job.model_params)
    assert 0.5 < trained.parameters / 1e9 / PAPER[name].parameters_billion < 1.5 or job.model == "e3d_lstm"
    cost = cost_graph(trained, "estimate")
    assert 5_000 < cost.n < 250_000  # the paper's graphs: 10,578 to 204,792 nodes
    assert cost.memory_limit_bytes == 32 * 2**30
    machine = machine_for(job.device_preset, job.devices_per_node)
    info = graph_info(cost, machine)
    assert info["dop"] > 1.2 and info["ccr"] > 0
    # The batch sizes are the paper's largest on 4 GPUs (Table "Maximum batch sizes"): ParDNN fits them.
    assert partition(cost, machine, memory_heuristic=job.memory_heuristic).report.evaluation.memory_fits
    # The paper's E3D parameter figures count Adam's two slots too (0.95 B, 2.4 B).
    slots = sum(int(v.shape.num_elements()) for v in trained.variables) / 1e9
    if job.model == "e3d_lstm":
        assert slots == pytest.approx(PAPER[name].parameters_billion, rel=0.03)
