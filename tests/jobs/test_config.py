"""Job files: the presets, the contract's defaults, and one clear error per kind of mistake."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from jobs import JOBS_DIR, Job, JobError, job_from_dict, load_job, preset_names
from jobs.config import MODEL_PARAMS
from pardnn.errors import PardnnError

PAPER = ["word-rnn", "word-rnn-2", "char-crn", "char-crn-2", "wrn", "wrn-2", "trn", "trn-2", "e3d", "e3d-2"]
TINY = ["word-rnn-tiny", "char-crn-tiny", "wrn-tiny", "trn-tiny", "e3d-tiny"]
MINIMAL = "[model]\ntype = 'word_rnn'\n[train]\nbatch_size = 4\n"


def write(tmp_path: Path, text: str, name: str = "job.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_presets_are_the_paper_and_tiny_jobs():
    assert sorted(preset_names()) == sorted(PAPER + TINY)


@pytest.mark.parametrize("name", PAPER + TINY)
def test_every_preset_loads_by_name_and_by_path(name):
    job = load_job(name)
    assert job == load_job(JOBS_DIR / f"{name}.toml")
    assert job.name == name and job.path == JOBS_DIR / f"{name}.toml"
    assert set(job.model_params) == set(MODEL_PARAMS[job.model])
    assert job.data["source"] == "synthetic"


def test_paper_presets_take_the_papers_table():
    """Table "Specifications of Models Datasets": layers, hidden sizes, sequence lengths, RU, WF, MD, FS, P_SZ."""
    def params(name: str) -> dict:
        return load_job(name).model_params

    assert [params(n)["layers"] for n in ("word-rnn", "word-rnn-2", "char-crn", "char-crn-2")] == [8, 32, 8, 32]
    assert {params(n)["hidden_size"] for n in ("word-rnn", "word-rnn-2", "char-crn", "char-crn-2")} == {2048}
    assert (params("word-rnn")["seq_length"], params("word-rnn-2")["seq_length"]) == (28, 25)
    assert params("char-crn")["char_embed_size"] == 15
    assert [(params(n)["units"] * 6 + 4, params(n)["widen_factor"]) for n in ("wrn", "wrn-2")] == [(610, 14), (304, 28)]
    trn, trn2 = params("trn"), params("trn-2")
    assert trn["encoder_layers"] + trn["decoder_layers"] == 52 and trn2["encoder_layers"] + trn2["decoder_layers"] == 48
    assert (trn["model_dim"], trn["inner_dim"], trn2["model_dim"], trn2["inner_dim"]) == (2048, 4096, 2048, 8192)
    assert [(params(n)["hidden"], params(n)["filter_size"], params(n)["patch_size"]) for n in ("e3d", "e3d-2")] == \
        [(320, 5, 4), (512, 5, 8)]
    for name in PAPER:
        job = load_job(name)
        assert (job.iterations, job.window, job.memory_bytes, job.costs) == ((150), (100, 150), 32 * 2**30, "estimate")


def test_minimal_job_gets_the_contracts_defaults(tmp_path):
    job = load_job(write(tmp_path, MINIMAL, "minimal.toml"))
    assert job.name == "minimal"
    assert (job.batch_size, job.optimizer, job.learning_rate, job.seed) == (4, "adam", 1e-3, 0)
    assert (job.iterations, job.window) == (150, (100, 150))
    assert (job.devices_per_node, job.memory, job.reserve, job.memory_heuristic) == (4, None, 0.1, "overflow")
    assert (job.costs, job.device_preset, job.profile_steps) == ("profile", "v100-32gb", 5)
    assert job.data == {"source": "synthetic", "path": None}
    assert job.model_params["embedding_size"] == job.model_params["hidden_size"] == 256
    assert job.memory_bytes is None


def test_placement_table_is_the_shared_schema(tmp_path):
    """[placement] takes its keys, defaults, ranges and choices from pardnn.settings.PLACEMENT."""
    from jobs.config import PLACEMENT_TABLE
    from pardnn import settings

    assert PLACEMENT_TABLE == {key: settings.PLACEMENT[key] for key in PLACEMENT_TABLE}
    assert set(PLACEMENT_TABLE) == {"devices_per_node", "memory", "reserve", "memory_heuristic", "run_order", "costs",
                              "device_preset", "profile_steps", "placer"}
    defaults = Job("x", None, "wrn", {}, 1)
    table = PLACEMENT_TABLE
    assert {key: getattr(defaults, key) for key in table} == {key: p.default for key, p in table.items()}
    job = load_job(write(tmp_path, MINIMAL + "[placement]\nreserve = 0.995\nmemory = 'unlimited'\n"))
    assert (job.reserve, job.memory, job.memory_bytes) == (0.995, None, None)  # reserve in [0, 1), as the Machine's


def test_job_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        load_job("trn-tiny").batch_size = 3  # type: ignore[misc]


def test_name_key_and_normalised_values(tmp_path):
    job = load_job(write(tmp_path, "name = 'mine'\n" + MINIMAL.replace("'word_rnn'", "'char_crn'")
                         + "learning_rate = 1\n[placement]\ndevice_preset = 'A100'\nmemory = '16 GiB'\n"))
    assert job.name == "mine"
    assert job.learning_rate == 1.0 and isinstance(job.learning_rate, float)
    assert job.device_preset == "a100-80gb" and job.memory_bytes == 16 * 2**30
    assert job.model_params["kernel_widths"] == (1, 2, 3, 4, 5, 6, 7)


def test_overrides_win_over_the_file_and_are_validated():
    job = load_job("trn-tiny", overrides={"train.batch_size": 3, "model.heads": 8, "name": "x"})
    assert (job.batch_size, job.model_params["heads"], job.name) == (3, 8, "x")
    with pytest.raises(JobError, match=r"trn-tiny.toml: train.batch_size = 0 \(override\): expected a whole number"):
        load_job("trn-tiny", overrides={"train.batch_size": 0})


@pytest.mark.parametrize(("text", "message"), [
    ("extra = 1\n" + MINIMAL,
     r"unknown key extra; a job file has the key name and the tables \[data\], \[eval\], \[model\]"),
    (MINIMAL + "[training]\n", r"unknown key training"),
    (MINIMAL.replace("[train]", "layerz = 3\n[train]"),
     r"unknown key model.layerz; \[model\] of type 'word_rnn' allows: dropout, embedding_size, forget_bias, "
     r"hidden_size, layers, seq_length, type, vocab_size"),
    (MINIMAL + "batch = 2\n",
     r"unknown key train.batch; \[train\] allows: batch_size, decay_rate, decay_steps, grad_clip"),
    (MINIMAL.replace("[train]", "layers = '8'\n[train]"), r"model.layers = '8': expected a whole number >= 1"),
    (MINIMAL.replace("[train]", "layers = 0\n[train]"), r"model.layers = 0: expected a whole number >= 1"),
    (MINIMAL.replace("[train]", "layers = 2.0\n[train]"), r"model.layers = 2.0: expected a whole number >= 1"),
    (MINIMAL.replace("batch_size = 4", "batch_size = true"), r"train.batch_size = true: expected a whole number >= 1"),
    (MINIMAL + "learning_rate = 0\n", r"train.learning_rate = 0: expected a number > 0"),
    (MINIMAL + "learning_rate = nan\n", r"train.learning_rate = nan: expected a number > 0"),
    (MINIMAL + "optimizer = 'lamb'\n", r"train.optimizer = 'lamb': expected one of 'adam', 'momentum', 'sgd', 'adamw'"),
    (MINIMAL + "schedule = 'linear'\n", r"train.schedule = 'linear': expected one of 'constant', 'cosine'"),
    (MINIMAL + "weight_decay = -0.1\n", r"train.weight_decay = -0.1: expected a number >= 0"),
    (MINIMAL + "momentum = 1.5\n", r"train.momentum = 1.5: expected a number in \[0, 1\]"),
    (MINIMAL + "[placement]\nreserve = 1\n", r"placement.reserve = 1: expected a number in \[0, 1\)"),
    (MINIMAL + "[placement]\nmemory_heuristic = 'greedy'\n",
     r"placement.memory_heuristic = 'greedy': expected one of 'overflow', 'balance', 'none'"),
    (MINIMAL + "[placement]\ncosts = 'measure'\n",
     r"placement.costs = 'measure': expected one of 'profile', 'estimate'"),
    (MINIMAL + "[placement]\nmemory = 'lots'\n",
     r"placement.memory = 'lots': expected a size > 0 such as '32GiB' \(or 'unlimited'\)"),
    (MINIMAL + "[placement]\nmemory = '0GiB'\n",
     r"placement.memory = '0GiB': expected a size > 0 such as '32GiB' \(or 'unlimited'\)"),
    (MINIMAL + "[placement]\ndevice_preset = 'k80'\n",
     r"placement.device_preset = 'k80': expected one of 'v100-32gb', 'a100-80gb', 'h100-80gb', 'h200-141gb', "
     r"'cpu-2core'"),
    (MINIMAL + "[run]\niterations = 50\n",
     r"run.window = \[100, 150\] \(the default\) does not fit run.iterations = 50: expected 0 <= start < end <= 50"),
    (MINIMAL + "[run]\nwindow = [20, 10]\n", r"run.window = \[20, 10\] does not fit run.iterations = 150"),
    (MINIMAL + "[run]\nwindow = [1, 2, 3]\n", r"run.window = \[1, 2, 3\]: expected a pair \[start, end\]"),
    ("[train]\nbatch_size = 1\n", r"missing table \[model\]: give type = 'word_rnn' \| 'char_crn' \| 'wrn'"),
    ("[model]\nlayers = 1\n[train]\nbatch_size = 1\n", r"missing key model.type: expected one of 'word_rnn'"),
    ("[model]\ntype = 'resnet'\n[train]\nbatch_size = 1\n",
     r"model.type = 'resnet': expected one of 'word_rnn', 'char_crn', 'wrn', 'transformer', 'e3d_lstm'"),
    ("[model]\ntype = 'wrn'\n", r"missing key train.batch_size: expected a whole number >= 1"),
    ("model = 3\n", r"missing table \[model\]"),
    (MINIMAL + "[data]\nsource = 'cifar100'\npath = 'x'\n",
     r"data.source = 'cifar100': expected for model type 'word_rnn' one of 'synthetic', 'tiny_shakespeare', 'ptb'"),
    (MINIMAL + "[data]\nsource = 'ptb'\n", r"missing key data.path: the local path of the ptb files"),
    (MINIMAL + "[data]\nsource = 'ptb'\npath = 'x'\nsource_lang = 'de'\n",
     r"unknown key data.source_lang; \[data\] with source 'ptb' allows: path, source"),
    ("[model]\ntype = 'transformer'\nmodel_dim = 30\nheads = 4\n[train]\nbatch_size = 1\n",
     r"model.heads = 4: expected a divisor of model_dim = 30"),
    ("[model]\ntype = 'char_crn'\nkernel_widths = [1, 2]\nkernel_features = [3]\n[train]\nbatch_size = 1\n",
     r"model.kernel_features = \[3\]: expected one count per kernel width \(2 widths\)"),
    ("[model]\ntype = 'char_crn'\nkernel_widths = [1, 0]\nkernel_features = [3, 3]\n[train]\nbatch_size = 1\n",
     r"model.kernel_widths = \[1, 0\]: expected a non-empty list of whole numbers >= 1"),
    ("[model]\ntype = 'char_crn'\nmax_word_length = 5\n[train]\nbatch_size = 1\n",
     r"model.kernel_widths = \[1, 2, 3, 4, 5, 6, 7\]: expected widths <= max_word_length = 5"),
    ("[model]\ntype = 'e3d_lstm'\npatch_size = 5\n[train]\nbatch_size = 1\n",
     r"model.patch_size = 5: expected a divisor of image_size = 64"),
    ("[model]\ntype = 'e3d_lstm'\ninput_length = 20\n[train]\nbatch_size = 1\n",
     r"model.input_length = 20: expected 1 <= input_length < total_length = 20"),
    ("[model]\ntype = 'e3d_lstm'\nlayer_norm = 1\n[train]\nbatch_size = 1\n",
     r"model.layer_norm = 1: expected true or false"),
])
def test_bad_job_names_file_key_value_and_allowed(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(JobError, match=re.escape(path.as_posix()) + ": " + message) as caught:
        load_job(path)
    assert isinstance(caught.value, PardnnError) and isinstance(caught.value, ValueError)
    assert "\n" not in str(caught.value)


def test_unreadable_files_and_unknown_presets(tmp_path):
    with pytest.raises(JobError, match=r"invalid TOML"):
        load_job(write(tmp_path, "[model\ntype = 1"))
    with pytest.raises(JobError, match=r"no-such.toml: no such job file"):
        load_job(tmp_path / "no-such.toml")
    with pytest.raises(JobError, match=r"no job file 'trn-3': not a file, and not a preset; presets are char-crn, "):
        load_job("trn-3")


def test_job_from_dict_without_a_file():
    job = job_from_dict({"model": {"type": "wrn"}, "train": {"batch_size": 2}}, name="inline")
    assert isinstance(job, Job) and job.name == "inline" and job.path is None
    with pytest.raises(JobError, match=r"<job inline>: train.batch_size = -2"):
        job_from_dict({"model": {"type": "wrn"}, "train": {"batch_size": -2}}, name="inline")
