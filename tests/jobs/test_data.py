"""Data: synthetic batches, and each real-dataset loader on a tiny file in the dataset's format."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from jobs import JobError, load_job
from jobs.data import batches
from jobs.data.images import reshape_patch
from jobs.data.sampling import sample_indices, scheduled_sampling_flags
from jobs.data.synthetic import moving_squares, spellings
from jobs.data.text import vocabulary

TINY = ["word-rnn-tiny", "char-crn-tiny", "wrn-tiny", "trn-tiny", "e3d-tiny"]
SHAKESPEARE = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 3
PTB = " aer banknote berlitz calloway \n pierre <unk> N years old will join the board \n the board will join \n"


def data_job(name: str, source: str, path: Path, **extra):
    return load_job(name, overrides={"data.source": source, "data.path": str(path), **extra})


# ------------------------------------------------------------------------------------ synthetic
EXPECTED = {
    "word-rnn-tiny": {"tokens": ((16, 10), np.int32), "targets": ((16, 10), np.int32)},
    "char-crn-tiny": {"chars": ((16, 8, 10), np.int32), "targets": ((16, 8), np.int32)},
    "wrn-tiny": {"images": ((16, 16, 16, 3), np.float32), "labels": ((16,), np.int32)},
    "trn-tiny": {"source": ((16, 12), np.int32), "target": ((16, 12), np.int32)},
    "e3d-tiny": {"frames": ((4, 6, 4, 4, 16), np.float32), "real_input_flag": ((4, 2, 4, 4, 16), np.float32)},
}


@pytest.mark.parametrize("name", TINY)
def test_synthetic_batches_have_the_models_shapes_and_are_deterministic(name):
    job = load_job(name)
    batch = batches(job)(0)
    assert {key: (value.shape, value.dtype) for key, value in batch.items()} == EXPECTED[name]
    again = batches(job)(0)
    assert all(np.array_equal(batch[key], again[key]) for key in batch)
    later = batches(job)(1)
    assert not all(np.array_equal(batch[key], later[key]) for key in batch)
    other_rank = batches(job, shard=(1, 2))(0)
    assert not all(np.array_equal(batch[key], other_rank[key]) for key in batch)
    assert batches(job, 3)(0)[next(iter(batch))].shape[0] == 3


def test_synthetic_text_is_within_the_vocabulary_and_shifted():
    job = load_job("word-rnn-tiny")
    batch = batches(job)(5)
    assert batch["tokens"].min() >= 0 and batch["tokens"].max() < 200
    np.testing.assert_array_equal(batch["tokens"][:, 1:], batch["targets"][:, :-1])
    chars = batches(load_job("char-crn-tiny"))(0)["chars"]
    assert (chars[..., 0] == 1).all() and chars.max() < 30
    assert ((chars == 2).sum(axis=-1) == 1).all()  # one end marker per word


def test_spellings_by_hand():
    table = spellings(3, 10, 5, np.random.default_rng(0))
    for row in table:
        end = int(np.flatnonzero(row == 2)[0])
        assert row[0] == 1 and 2 <= end <= 4 and (row[1:end] >= 4).all() and (row[end + 1:] == 0).all()


def test_synthetic_translation_is_a_word_for_word_mapping():
    batch = batches(load_job("trn-tiny"))(0)
    source, target = batch["source"], batch["target"]
    np.testing.assert_array_equal(source == 0, target == 0)
    np.testing.assert_array_equal(source == 2, target == 2)  # <eos> in the same place
    mapping = {}
    for s, t in zip(source[source > 2], target[source > 2]):
        assert mapping.setdefault(s, t) == t


def test_moving_squares_bounce_inside_the_frame():
    videos = moving_squares(3, 40, 16, np.random.default_rng(1))
    assert set(np.unique(videos)) <= {0.0, 1.0}
    lit = (videos > 0).sum(axis=(2, 3))
    assert (lit >= 16).all() and (lit <= 32).all()  # two 4x4 squares, overlapping or not


def test_scheduled_sampling_decays_to_generated_frames():
    shape = (64, 5, 2, 2, 3)
    assert scheduled_sampling_flags(shape, 0, 0.1, 0, (0, 1)).min() == 1.0
    assert scheduled_sampling_flags(shape, 10, 0.1, 0, (0, 1)).max() == 0.0
    half = scheduled_sampling_flags(shape, 5, 0.1, 0, (0, 1))
    assert 0.3 < half.mean() < 0.7 and (half == half[:, :, :1, :1, :1]).all()


def test_sample_indices_cover_each_epoch_and_split_ranks():
    first = [sample_indices(10, 5, iteration, 7, (0, 1)) for iteration in range(2)]
    assert sorted(np.concatenate(first).tolist()) == list(range(10))
    ranks = [sample_indices(10, 5, 0, 7, (rank, 2)) for rank in range(2)]
    assert sorted(np.concatenate(ranks).tolist()) == list(range(10))
    assert len(sample_indices(3, 8, 0, 7, (0, 1))) == 8  # a batch larger than the dataset wraps


# ----------------------------------------------------------------------------------------- text
def test_vocabulary_keeps_most_frequent_first_seen_first():
    ids = vocabulary("b a c a b d".split(), 4, ["<unk>"])
    assert ids == {"<unk>": 0, "b": 1, "a": 2, "c": 3}


def test_tiny_shakespeare_word_batches(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text(SHAKESPEARE)
    job = data_job("word-rnn-tiny", "tiny_shakespeare", path,
                   **{"model.vocab_size": 6, "model.seq_length": 4, "train.batch_size": 2})
    batch = batches(job)(0)
    words = SHAKESPEARE.split()
    ids = vocabulary(words, 6, ["<unk>"])
    stream = np.array([ids.get(w, 0) for w in words])
    rows = stream[: len(stream) // 2 * 2].reshape(2, -1)
    np.testing.assert_array_equal(batch["tokens"], rows[:, :4])
    np.testing.assert_array_equal(batch["targets"], rows[:, 1:5])
    np.testing.assert_array_equal(batches(job)(1)["tokens"], rows[:, 4:8])
    assert batch["tokens"].max() < 6 and (stream == 0).any()  # rare words are <unk>
    assert batches(data_job("word-rnn-tiny", "tiny_shakespeare", tmp_path))(0)["tokens"].shape == (16, 10)


def test_ptb_char_batches_spell_the_words(tmp_path):
    path = tmp_path / "ptb.train.txt"
    path.write_text(PTB)
    job = data_job("char-crn-tiny", "ptb", path, **{"train.batch_size": 1, "model.seq_length": 5})
    batch = batches(job)(0)
    assert batch["chars"].shape == (1, 5, 10)
    stream = [w for line in PTB.splitlines() if line.strip() for w in (*line.split(), "<eos>")]
    ids = vocabulary(stream, 200, ["<unk>"])
    assert batch["targets"][0].tolist() == [ids[w] for w in stream[1:6]]  # ... calloway <eos> pierre
    first = batch["chars"][0, 0]  # "aer": start, a, e, r, end, padding
    assert first[0] == 1 and first[4] == 2 and (first[5:] == 0).all() and len(set(first[1:4])) == 3
    eos = batch["chars"][0, 4]  # "<eos>" is spelled as 5 characters
    assert eos[0] == 1 and eos[6] == 2 and (eos[1:6] > 3).all() and eos[5] != eos[4]
    np.testing.assert_array_equal(batches(job)(2)["chars"][0, 4], eos)  # stream[14] is the next <eos>


def test_iwslt_pairs(tmp_path):
    (tmp_path / "train.de").write_text("ein Haus\n\nzwei Häuser am See\n")
    (tmp_path / "train.en").write_text("a house\n\ntwo houses at the lake\n")
    job = data_job("trn-tiny", "iwslt16", tmp_path / "train", **{"train.batch_size": 2, "model.source_length": 4})
    batch = batches(job)(0)
    assert batch["source"].shape == (2, 4) and batch["target"].shape == (2, 12)
    rows = {tuple(row) for row in batch["target"].tolist()}
    assert len(rows) == 2  # both sentence pairs, blank line dropped
    short = batch["source"][(batch["source"] == 2).argmax(axis=1) == 2]
    assert short.shape[0] == 1 and short[0, 3] == 0  # "ein Haus <eos> <pad>"
    long = batch["source"][(batch["source"] == 2).argmax(axis=1) == 3]
    assert long.shape[0] == 1  # cut to 3 words + <eos>
    directory = data_job("trn-tiny", "iwslt16", tmp_path)
    assert batches(directory)(0)["source"].shape == (16, 12)
    (tmp_path / "train.en").write_text("a house\n")
    with pytest.raises(JobError, match=r"train.de has 3 lines but .*train.en has 1; the files must be aligned"):
        batches(job)


# --------------------------------------------------------------------------------------- images
def test_cifar100_python_batch(tmp_path):
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, (5, 3072), dtype=np.uint8)
    path = tmp_path / "train"
    path.write_bytes(pickle.dumps({b"data": data, b"fine_labels": [3, 1, 4, 1, 5], b"coarse_labels": [0] * 5}))
    job = data_job("wrn-tiny", "cifar100", tmp_path,
                   **{"model.image_size": 32, "train.batch_size": 5})
    batch = batches(job)(0)
    order = [int(np.flatnonzero((data == row).all(axis=1))[0]) for row in
             np.rint((batch["images"] * [0.2673, 0.2564, 0.2762] + [0.5071, 0.4865, 0.4409]) * 255)
             .astype(np.uint8).transpose(0, 3, 1, 2).reshape(5, 3072)]
    assert sorted(order) == list(range(5))
    assert batch["labels"].tolist() == [[3, 1, 4, 1, 5][i] for i in order]
    assert batch["images"].shape == (5, 32, 32, 3) and batch["images"].dtype == np.float32
    assert batch["images"][0, 0, 1, 2] == pytest.approx((data[order[0], 2048 + 1] / 255 - 0.4409) / 0.2762, rel=1e-5)


def test_cifar100_errors(tmp_path):
    path = tmp_path / "train"
    path.write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8)}))
    job = data_job("wrn-tiny", "cifar100", path, **{"model.image_size": 32})
    with pytest.raises(JobError, match=r"data.path = .*train.*: .*a dict with b'data' and b'fine_labels'"):
        batches(job)
    path.write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"fine_labels": [0, 1]}))
    with pytest.raises(JobError, match=r"CIFAR-100 images are 32x32, but model.image_size = 16"):
        batches(data_job("wrn-tiny", "cifar100", path))
    path.write_text("not a pickle")
    with pytest.raises(JobError, match=r"not a CIFAR-100 python batch"):
        batches(job)
    with pytest.raises(JobError, match=r"data.path = .*missing.*: no such file or directory"):
        batches(data_job("wrn-tiny", "cifar100", tmp_path / "missing"))


def test_moving_mnist_npy(tmp_path):
    rng = np.random.default_rng(0)
    videos = rng.integers(0, 256, (9, 3, 16, 16), dtype=np.uint8)  # (T, N, H, W)
    path = tmp_path / "mnist_test_seq.npy"
    np.save(path, videos)
    job = data_job("e3d-tiny", "moving_mnist", path, **{"train.batch_size": 3})
    batch = batches(job)(0)
    assert batch["frames"].shape == (3, 6, 4, 4, 16) and batch["real_input_flag"].shape == (3, 2, 4, 4, 16)
    assert batch["real_input_flag"].min() == 1.0  # iteration 0: all true frames
    # Undo the patches: each sample is one of the stored sequences, frames 0..5, scaled to [0, 1].
    frames = batch["frames"].reshape(3, 6, 4, 4, 4, 4).transpose(0, 1, 2, 4, 3, 5).reshape(3, 6, 16, 16)
    stored = videos[:6].transpose(1, 0, 2, 3) / 255.0
    assert sorted(int(np.flatnonzero([np.allclose(f, s) for s in stored])[0]) for f in frames) == [0, 1, 2]
    np.save(path, videos[:5])
    with pytest.raises(JobError, match=r"sequences of 5 frames; model.total_length = 6 needs more"):
        batches(job)
    np.save(path, videos[0])
    with pytest.raises(JobError, match=r"expected \[frames, sequences, height, width\]"):
        batches(job)


def test_reshape_patch_by_hand():
    frames = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4, 1)
    patches = reshape_patch(frames, 2)
    assert patches.shape == (1, 1, 2, 2, 4)
    assert patches[0, 0, 0, 0].tolist() == [0, 1, 4, 5] and patches[0, 0, 1, 1].tolist() == [10, 11, 14, 15]
