"""scikit-learn's bundled handwritten digits, upsampled and normalised (no download)."""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from scipy.ndimage import zoom

from msexp import datasets

EVAL_SIZE = 360
SPLIT_SEED = 0


@lru_cache(maxsize=4)
def digits(size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return (x_train, y_train, x_eval, y_eval): images (N, 1, size, size) float32, labels int32.

    The 1797 8x8 images are upsampled bilinearly to size x size and normalised with
    the training set's mean and std. The split is fixed: 360 images for evaluation.
    """
    pixels, labels = _load_digits()
    images = pixels.reshape(-1, 8, 8).astype(np.float32) / 16.0
    images = zoom(images, (1, size / 8, size / 8), order=1).astype(np.float32)
    labels = labels.astype(np.int32)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(labels))
    train, held = order[EVAL_SIZE:], order[:EVAL_SIZE]
    mean, std = images[train].mean(), images[train].std()
    images = ((images - mean) / std)[:, None, :, :]
    return images[train], labels[train], images[held], labels[held]


def _load_digits() -> tuple[np.ndarray, np.ndarray]:
    """(pixels (1797, 64), labels), read from scikit-learn's bundled file.

    Reading the file directly skips importing scikit-learn (about 1 s per trial process).
    """
    spec = importlib.util.find_spec("sklearn")
    bundled = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz" if spec else None
    if bundled is not None and bundled.is_file():
        table = np.loadtxt(bundled, delimiter=",", dtype=np.float64)
        return table[:, :-1], table[:, -1]
    from sklearn.datasets import load_digits  # lazy: about 1 s, only without the file

    raw = load_digits()
    return raw.data, raw.target


def source(size: int) -> str:
    """How the data is described in MLflow."""
    return f"sklearn digits (1797 images, 8x8 upsampled to {size}x{size}, {EVAL_SIZE} held out)"


def train_and_eval(data: dict[str, Any] | None, size: int) -> tuple[Any, Any, str]:
    """(train, eval, description): the sweep's `data` folder as 1 x size x size images
    if it names one, else the built-in digits."""
    def builtin() -> tuple[Any, Any, str]:
        x_train, y_train, x_eval, y_eval = digits(size)
        return (x_train, y_train), (x_eval, y_eval), source(size)

    return datasets.train_and_eval(data, size, 1, builtin)
