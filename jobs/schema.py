"""The keys of a job file: one :class:`~pardnn.settings.Param` per key, by table.

``TOP``, ``TRAIN``, ``RUN_TABLE`` and ``PLACEMENT_TABLE`` (keys of the library's one settings schema,
:data:`pardnn.settings.PLACEMENT` and :data:`pardnn.settings.RUN`, never defined twice), ``DATASETS``
(the ``[data]`` sources), ``MODEL_PARAMS`` (each zoo model's hyperparameters) and ``ENTRY`` (the user's
own ``[model] entry`` / ``[data] entry``, checked in form by :func:`is_entry`); :func:`check_model`
checks the rules between a model's keys, :func:`normalise` the other spellings. :mod:`jobs.config` and
:mod:`launcher.settings` read with them. This module does not import TensorFlow.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pardnn.cli.options import positive_int  # also jobs.schema.positive_int, as the zoo's commands import it
from pardnn.costs.presets import preset
from pardnn.errors import InvalidMachineError
from pardnn.settings import PLACEMENT as SHARED_PLACEMENT
from pardnn.settings import REQUIRED, Param
from pardnn.settings import RUN as SHARED_RUN

__all__ = [
    "AUTO",
    "COMMAND_LINE",
    "DATASETS",
    "DEFAULT",
    "ENTRY",
    "JOB_FILE",
    "KERAS_LOSSES",
    "MODEL_PARAMS",
    "PLACEMENT_KEYS",
    "PLACEMENT_TABLE",
    "PRECISIONS",
    "RUN_TABLE",
    "TOP",
    "TRAIN",
    "BadOutput",
    "IntOrAuto",
    "Param",
    "PerOutput",
    "check_model",
    "is_entry",
    "micro_batches_arg",
    "micro_batches_number",
    "normalise",
    "positive_int",
    "window_fits",
]

_DERIVED = None  # default of a key whose value follows from others (documented per key)

# Where a setting came from, as logs and summaries say it (the command line: the launcher's flags).
JOB_FILE, DEFAULT, COMMAND_LINE = "job file", "default", "command line"


def _int(default: Any = REQUIRED, low: float | None = 1, high: float | None = None, help: str = "") -> Param:
    return Param("int", default, low, high, help=help)


def _float(default: Any = REQUIRED, low: float | None = None, high: float | None = None, *,
           low_open: bool = False, help: str = "") -> Param:
    return Param("float", default, low, high, low_open, help=help)


def _choice(default: Any, *choices: str, help: str = "") -> Param:
    return Param("str", default, choices=choices, help=help)


class BadOutput(ValueError):
    """A :class:`PerOutput` table's entry is bad: ``output`` names it, ``value`` is what it holds."""

    def __init__(self, output: str, value: Any) -> None:
        super().__init__(output)
        self.output, self.value = output, value


@dataclass(frozen=True)
class PerOutput(Param):
    """A key of a Keras model with several outputs: one value for every output, or a table
    ``{output name = value}`` (only the table when ``table_only``). Each value is checked as the
    :class:`Param` would check it; a bad one raises :class:`BadOutput` naming its output."""

    table_only: bool = False

    def expected(self) -> str:
        each = super().expected()
        return f"a table by output name, each value {each}" if self.table_only else \
            f"{each}; or a table of them by output name"

    def check(self, value: Any) -> Any:
        if not isinstance(value, dict):
            if self.table_only:
                raise ValueError
            return super().check(value)
        if not value:
            raise ValueError
        checked = {}
        for output, item in value.items():
            try:
                checked[output] = super().check(item)
            except ValueError:
                raise BadOutput(output, item) from None
        return checked


AUTO = "auto"  # [train] micro_batches / --micro-batches: choose M by emulating each (pardnn.plan.search)


@dataclass(frozen=True)
class IntOrAuto(Param):
    """A whole number as :class:`Param` checks it, or ``'auto'`` (any case; kept as ``"auto"``)."""

    def expected(self) -> str:
        return f"{super().expected()}, or 'auto'"

    def check(self, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() == AUTO:
            return AUTO
        return super().check(value)

    def parse(self, text: str) -> Any:
        return AUTO if text.strip().lower() == AUTO else super().parse(text)


# Keras' dtype policies a model entry can be made under (train.precision; auto: the model's own).
PRECISIONS = ("auto", "float32", "mixed_float16", "mixed_bfloat16")

TOP: dict[str, Param] = {"name": Param("str", _DERIVED, help="job name (default: the file's stem)")}

# The names tf.keras.losses.get accepts (Keras 2.15), aliases included: train.loss of a Keras model entry.
KERAS_LOSSES = ("sparse_categorical_crossentropy", "categorical_crossentropy", "binary_crossentropy",
                "binary_focal_crossentropy", "categorical_focal_crossentropy", "mean_squared_error", "mse",
                "mean_absolute_error", "mae", "mean_absolute_percentage_error", "mape",
                "mean_squared_logarithmic_error", "msle", "huber", "log_cosh", "logcosh", "hinge", "squared_hinge",
                "categorical_hinge", "kl_divergence", "kld", "kullback_leibler_divergence", "poisson",
                "cosine_similarity")

TRAIN: dict[str, Param] = {
    "batch_size": _int(help="samples per step on one node (the launcher may override it)"),
    "micro_batches": IntOrAuto("int", 1, 1, help="split the node's batch into M micro-batches, gradients summed into "
                                                 "one update (M must divide the batch; 1 = the whole batch at once; "
                                                 "'auto': pardnn-launch and pardnn max-batch try M = 1, 2, 4, 8, 16)"),
    "optimizer": _choice("adam", "adam", "momentum", "sgd", "adamw", "adamax", "nadam", "rmsprop", "adagrad",
                         "adadelta", "ftrl", "lion",
                         help="adam and momentum: TensorFlow's fused ones; the others (or a schedule, or weight "
                              "decay): the Keras optimizer of that name"),
    "learning_rate": _float(1e-3, 0.0, low_open=True, help="the rate (a schedule's peak or start)"),
    "momentum": _float(0.9, 0.0, 1.0, help="momentum optimizer's momentum"),
    "weight_decay": _float(0.0, 0.0, help="decoupled weight decay (AdamW's); 0 = off"),
    "schedule": _choice("constant", "constant", "cosine", "cosine_restarts", "step", "exponential", "polynomial",
                        "inverse_time", help="the learning rate over the steps (Keras' schedules)"),
    "warmup_steps": _int(0, 0, help="cosine: steps of linear warmup from 0 to learning_rate"),
    "decay_steps": _int(_DERIVED, 1, help="steps of the schedule's decay (default: run.iterations)"),
    "decay_rate": _float(0.1, 0.0, low_open=True, help="step, exponential, inverse_time: the factor per "
                                                       "decay_steps"),
    "min_learning_rate": _float(0.0, 0.0, help="cosine: the floor; polynomial: the end rate"),
    "precision": _choice("auto", *PRECISIONS,
                         help="Keras' dtype policy the model is made under (auto: the model's own); float16 "
                              "trains with dynamic loss scaling"),
    "grad_clip": _float(0.0, 0.0, help="clip gradients by their global norm; 0 = off"),
    "seed": _int(0, 0, help="graph-level random seed: weights, dropout and synthetic data"),
    "loss": PerOutput("str", "sparse_categorical_crossentropy", choices=KERAS_LOSSES,
                      help="Keras loss of a [model] entry returning a tf.keras.Model (mean over the batch): "
                           "one for every output, or a table by output name"),
    "loss_weights": PerOutput("float", None, 0.0, table_only=True,
                              help="weight of each output's loss in the total, by output name (default 1)"),
}


def micro_batches_arg(text: str) -> int | str:
    """``--micro-batches M|auto`` of ``pardnn-launch`` and ``pardnn max-batch``: a whole number >= 1, or
    ``"auto"``."""
    if text.strip().lower() == AUTO:
        return AUTO
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 1, or 'auto'") from None


def micro_batches_number(text: str) -> int:
    """``pardnn capture --micro-batches M``: a whole number >= 1 (a graph file holds one M)."""
    if text.strip().lower() == AUTO:
        raise argparse.ArgumentTypeError("'auto' chooses M in pardnn-launch and pardnn max-batch; capture writes one "
                                          "graph: give a whole number M >= 1 that divides the batch")
    return positive_int(text)


# [model] entry / [data] entry: the user's own code, "package.module:function" (imported by jobs.build).
ENTRY = "'module:function' (e.g. 'mypkg.net:build')"
_ENTRY = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


def is_entry(value: object) -> bool:
    """Whether ``value`` has the form of an entry point: ``"package.module:function"``."""
    return isinstance(value, str) and _ENTRY.fullmatch(value) is not None

RUN_TABLE: dict[str, Param] = {
    "iterations": _int(150, 1, help="training iterations"),
    "window": Param("int_pair", (100, 150), help="measured iterations [start, end): inclusive start, exclusive end"),
    **SHARED_RUN,
}

# The [placement] table: the keys of the shared schema (pardnn.settings.PLACEMENT) a job file has.
# ``placer`` is pardnn-launch's (``pardnn place`` calls it ``--algorithm``).
PLACEMENT_KEYS = ("devices_per_node", "memory", "reserve", "memory_heuristic", "run_order", "costs", "device_preset",
                  "profile_steps", "placer")
PLACEMENT_TABLE: dict[str, Param] = {key: SHARED_PLACEMENT[key] for key in PLACEMENT_KEYS}

# dataset name -> (models it feeds, extra [data] keys besides ``source`` and ``path``)
DATASETS: dict[str, tuple[tuple[str, ...], dict[str, Param]]] = {
    "tiny_shakespeare": (("word_rnn", "char_crn"), {}),
    "ptb": (("word_rnn", "char_crn"), {}),
    "cifar100": (("wrn",), {}),
    "moving_mnist": (("e3d_lstm",), {}),
    "iwslt16": (("transformer",), {
        "source_lang": Param("str", "de", help="source file suffix: <path>.<source_lang>"),
        "target_lang": Param("str", "en", help="target file suffix: <path>.<target_lang>"),
    }),
}

_LSTM = {
    "layers": _int(2),
    "hidden_size": _int(256),
    "seq_length": _int(25, help="unrolled time steps"),
    "dropout": _float(0.0, 0.0, 0.95, help="dropout rate on each LSTM layer's output"),
    "forget_bias": _float(1.0),
}

MODEL_PARAMS: dict[str, dict[str, Param]] = {
    # Defaults follow the original code of each model (see the model modules).
    "word_rnn": {
        "vocab_size": _int(25_000, 2, help="words; a real dataset keeps its vocab_size - 1 most frequent + <unk>"),
        "embedding_size": _int(_DERIVED, help="default: hidden_size"),
        **_LSTM,
    },
    "char_crn": {
        "word_vocab_size": _int(10_000, 2),
        "char_vocab_size": _int(51, 5, help="characters incl. padding, start/end of word and unknown"),
        "max_word_length": _int(21, 3, help="characters per word incl. start and end markers"),
        "char_embed_size": _int(15),
        "kernel_widths": Param("int_list", (1, 2, 3, 4, 5, 6, 7), 1),
        "kernel_features": Param("int_list", (50, 100, 150, 200, 200, 200, 200), 1),
        "highway_layers": _int(2, 0),
        **_LSTM,
        "hidden_size": _int(650),
        "seq_length": _int(35, help="unrolled time steps"),
        "dropout": _float(0.5, 0.0, 0.95, help="dropout rate on each LSTM layer's output"),
        "forget_bias": _float(0.0),
    },
    "wrn": {
        "units": _int(4, help="residual units per group; depth = 6 * units + 4"),
        "widen_factor": _int(10),
        "num_classes": _int(100, 2),
        "image_size": _int(32, 4),
        "dropout": _float(0.0, 0.0, 0.95, help="dropout rate between a unit's two convolutions"),
        "weight_decay": _float(5e-4, 0.0),
        "bn_momentum": _float(0.9, 0.0, 1.0, help="decay of the batch-norm moving averages"),
    },
    "transformer": {
        "encoder_layers": _int(6),
        "decoder_layers": _int(6),
        "model_dim": _int(512),
        "inner_dim": _int(2048, help="feed-forward inner dimension"),
        "heads": _int(8),
        "vocab_size": _int(32_000, 4, help="shared source/target vocabulary incl. <pad>, <unk>, <eos>"),
        "source_length": _int(64),
        "target_length": _int(64),
        "dropout": _float(0.1, 0.0, 0.95),
        "share_embeddings": Param("bool", True, help="one matrix for source, target embedding and softmax"),
    },
    "e3d_lstm": {
        "layers": _int(4),
        "hidden": _int(64, help="hidden state channels of every layer"),
        "filter_size": _int(5, help="spatial kernel size; the temporal kernel is window_length"),
        "window_length": _int(2, 2, help="frames per 3D input window (stride 1)"),
        "patch_size": _int(4, help="frames are cut into patch_size x patch_size patches stacked as channels"),
        "image_size": _int(64),
        "image_channels": _int(1),
        "input_length": _int(10, help="observed frames"),
        "total_length": _int(20, 2, help="observed + predicted frames"),
        "layer_norm": Param("bool", True),
        "forget_bias": _float(1.0),
        "sampling_decay": _float(2e-5, 0.0, 1.0, help="scheduled sampling: P(true frame) = 1 - decay * step"),
    },
}


def check_model(model: str, params: dict[str, Any], fail: Callable[[str, Any, str], None]) -> None:
    """Rules between keys of one model."""
    if model == "word_rnn" and params["embedding_size"] is None:
        params["embedding_size"] = params["hidden_size"]
    elif model == "char_crn":
        if len(params["kernel_widths"]) != len(params["kernel_features"]):
            fail("kernel_features", list(params["kernel_features"]),
                 f"one count per kernel width ({len(params['kernel_widths'])} widths)")
        if max(params["kernel_widths"]) > params["max_word_length"]:
            fail("kernel_widths", list(params["kernel_widths"]),
                 f"widths <= max_word_length = {params['max_word_length']}")
    elif model == "transformer" and params["model_dim"] % params["heads"]:
        fail("heads", params["heads"], f"a divisor of model_dim = {params['model_dim']}")
    elif model == "e3d_lstm":
        if params["image_size"] % params["patch_size"]:
            fail("patch_size", params["patch_size"], f"a divisor of image_size = {params['image_size']}")
        if not 1 <= params["input_length"] < params["total_length"]:
            fail("input_length", params["input_length"], f"1 <= input_length < total_length = {params['total_length']}")


def normalise(key: str, value: Any) -> Any:
    """``value`` in the spelling the schema checks: a device preset's alias or capitals become its name
    (``'A100'`` → ``'a100-80gb'``); anything else is returned as it is (then checked by the key's Param)."""
    if key == "device_preset" and isinstance(value, str):
        try:
            return preset(value).name
        except InvalidMachineError:
            return value
    return value


def window_fits(window: tuple[int, int], iterations: int) -> bool:
    """Whether the measured iterations ``[start, end)`` lie within the run: ``0 <= start < end <= iterations``."""
    start, end = window
    return 0 <= start < end <= iterations
