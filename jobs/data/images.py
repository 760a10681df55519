"""Image and video datasets: CIFAR-100 (WRN) and Moving MNIST (E3D-LSTM).

- **CIFAR-100**, "python version": a pickled dict with ``b"data"`` (uint8 ``[N, 3072]``, each row
  1024 red, 1024 green, 1024 blue values of a 32×32 image, row-major) and ``b"fine_labels"``
  (N ints in 0..99). ``path`` is the ``train`` file or the ``cifar-100-python`` directory. Images
  are scaled to [0, 1] and standardised per channel with the training set's mean and deviation.
- **Moving MNIST** (``mnist_test_seq.npy`` of Srivastava et al.): uint8 ``[T, N, 64, 64]``, T frames
  of N sequences. ``path`` is the ``.npy`` file (memory-mapped). Frames are scaled to [0, 1] and cut
  into patches (:func:`reshape_patch`) as in the E3D-LSTM code.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from jobs.data.sampling import DataError, sample_indices, scheduled_sampling_flags

Batch = dict[str, np.ndarray]
CIFAR_MEAN = np.array([0.5071, 0.4865, 0.4409], np.float32)
CIFAR_STD = np.array([0.2673, 0.2564, 0.2762], np.float32)


def read_cifar100(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(images uint8 [N, 32, 32, 3], fine labels int32 [N])`` of a CIFAR-100 python batch."""
    if path.is_dir():
        path = path / "train"
    try:
        with path.open("rb") as stream:
            batch = pickle.load(stream, encoding="bytes")
    except (OSError, pickle.UnpicklingError, EOFError, ValueError) as error:
        raise DataError(f"{path}: not a CIFAR-100 python batch (pickle): {error}") from None
    if not isinstance(batch, dict) or b"data" not in batch or b"fine_labels" not in batch:
        keys = sorted(batch) if isinstance(batch, dict) else type(batch).__name__
        raise DataError(f"{path}: a CIFAR-100 batch is a dict with b'data' and b'fine_labels'; found {keys}")
    data = np.asarray(batch[b"data"], dtype=np.uint8)
    labels = np.asarray(batch[b"fine_labels"], dtype=np.int32)
    if data.ndim != 2 or data.shape[1] != 3072 or labels.shape != (data.shape[0],):
        raise DataError(f"{path}: b'data' has shape {data.shape} and b'fine_labels' {labels.shape}; "
                        "expected [N, 3072] and [N]")
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), labels


def cifar_batches(dataset: tuple[np.ndarray, np.ndarray], params: dict[str, Any], batch: int, seed: int,
                  shard: tuple[int, int]) -> Callable[[int], Batch]:
    images, labels = dataset
    if params["image_size"] != 32:
        raise DataError(f"CIFAR-100 images are 32x32, but model.image_size = {params['image_size']}")
    if labels.size and labels.max() >= params["num_classes"]:
        raise DataError(f"labels go up to {labels.max()}, but model.num_classes = {params['num_classes']}")

    def make(iteration: int) -> Batch:
        rows = sample_indices(len(labels), batch, iteration, seed, shard)
        pixels = (images[rows].astype(np.float32) / 255.0 - CIFAR_MEAN) / CIFAR_STD
        return {"images": pixels, "labels": labels[rows]}

    return make


def read_moving_mnist(path: Path) -> np.ndarray:
    """The ``[T, N, 64, 64]`` uint8 array of a Moving MNIST ``.npy`` file, memory-mapped."""
    try:
        videos = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as error:
        raise DataError(f"{path}: not a .npy array: {error}") from None
    if videos.ndim != 4:
        raise DataError(f"{path}: array of shape {videos.shape}; expected [frames, sequences, height, width]")
    return videos


def reshape_patch(frames: np.ndarray, patch: int) -> np.ndarray:
    """``[B, T, H, W, C]`` → ``[B, T, H/p, W/p, p·p·C]`` (``reshape_patch`` of the E3D-LSTM code)."""
    b, t, h, w, c = frames.shape
    cut = frames.reshape(b, t, h // patch, patch, w // patch, patch, c).transpose(0, 1, 2, 4, 3, 5, 6)
    return np.ascontiguousarray(cut.reshape(b, t, h // patch, w // patch, patch * patch * c))


def video_batches(videos: np.ndarray, params: dict[str, Any], batch: int, seed: int,
                  shard: tuple[int, int]) -> Callable[[int], Batch]:
    frames_needed, size = params["total_length"], params["image_size"]
    if videos.shape[0] < frames_needed:
        raise DataError(f"sequences of {videos.shape[0]} frames; model.total_length = {frames_needed} needs more")
    if videos.shape[2:] != (size, size) or params["image_channels"] != 1:
        raise DataError(f"frames of {videos.shape[2]}x{videos.shape[3]} with 1 channel, but the model expects "
                        f"{size}x{size} with {params['image_channels']} (model.image_size, model.image_channels)")
    observed = params["input_length"]

    def make(iteration: int) -> Batch:
        rows = sample_indices(videos.shape[1], batch, iteration, seed, shard)
        clips = np.asarray(videos[:frames_needed, rows], dtype=np.float32).transpose(1, 0, 2, 3) / 255.0
        frames = reshape_patch(clips[..., None], params["patch_size"])
        flags = scheduled_sampling_flags((batch, frames_needed - observed - 1, *frames.shape[2:]), iteration,
                                         params["sampling_decay"], seed, shard)
        return {"frames": frames, "real_input_flag": flags}

    return make
