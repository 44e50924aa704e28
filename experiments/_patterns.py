"""Seeded synthetic 32x32x3 images: one smooth colour pattern per class, shifted, plus noise.

Learnable by a small conv net in a few epochs, never downloaded, identical in every trial.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

NUM_CLASSES = 10
TRAIN_SIZE = 1024
EVAL_SIZE = 256
SIZE = 32
NOISE = 1.5
MAX_SHIFT = 4
DATA_SEED = 0


@lru_cache(maxsize=1)
def patterns() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    """(x_train, y_train, x_eval, y_eval, description); images (N, 3, 32, 32) float32."""
    rng = np.random.default_rng(DATA_SEED)
    coarse = rng.standard_normal((NUM_CLASSES, 3, 4, 4)).astype(np.float32)
    templates = np.kron(coarse, np.ones((1, 1, SIZE // 4, SIZE // 4), np.float32))
    templates = _blur(templates)
    templates /= templates.std(axis=(1, 2, 3), keepdims=True)
    total = TRAIN_SIZE + EVAL_SIZE
    labels = rng.integers(0, NUM_CLASSES, total).astype(np.int32)
    images = np.empty((total, 3, SIZE, SIZE), np.float32)
    shifts = rng.integers(-MAX_SHIFT, MAX_SHIFT + 1, (total, 2))
    contrast = rng.uniform(0.7, 1.3, total).astype(np.float32)
    for i, (label, (dy, dx)) in enumerate(zip(labels, shifts)):
        images[i] = np.roll(templates[label], (dy, dx), axis=(1, 2)) * contrast[i]
    images += NOISE * rng.standard_normal(images.shape).astype(np.float32)
    mean = images[:TRAIN_SIZE].mean(axis=(0, 2, 3), keepdims=True)
    std = images[:TRAIN_SIZE].std(axis=(0, 2, 3), keepdims=True)
    images = (images - mean) / std
    description = (f"synthetic 32x32x3 class patterns (seed {DATA_SEED}, {NUM_CLASSES} classes, "
                   f"{TRAIN_SIZE} train, {EVAL_SIZE} eval, shift <= {MAX_SHIFT} px, "
                   f"noise std {NOISE})")
    return (images[:TRAIN_SIZE], labels[:TRAIN_SIZE], images[TRAIN_SIZE:], labels[TRAIN_SIZE:],
            description)


def _blur(images: np.ndarray, passes: int = 3) -> np.ndarray:
    """Box-blur the last two axes (wrapping around), so the blocky patterns become smooth."""
    for _ in range(passes):
        images = sum(np.roll(images, (dy, dx), axis=(-2, -1))
                     for dy in (-1, 0, 1) for dx in (-1, 0, 1)) / 9
    return images
