"""A small classifier with one `nn.Dropout` layer of rate `dropout` (msexp draws its masks:
accumulation exact) and, with `noise` above 0, a Gaussian-noise layer of the user's own
(a random primitive msexp leaves to MindSpore: accumulation exact only in distribution),
on fixed data; at rate 0 and no noise it draws nothing."""

from __future__ import annotations

from typing import Any

import numpy as np

from msexp.experiment import Workload

DEFAULTS = {"epochs": 2, "batch_size": 12, "lr": 0.1, "optimizer": "momentum"}
PARAMS = {"dropout": 0.5, "noise": 0.0}
# 48 samples: 4 batches of 12 (a last batch of another size compiles a graph of its own,
# whose mask stream starts afresh: docs/how-a-trial-runs.md#dropout)
FEATURES, HIDDEN, CLASSES, SAMPLES = 8, 7, 3, 48

_rng = np.random.default_rng(0)
X = _rng.normal(1.0, 2.0, size=(SAMPLES, FEATURES)).astype(np.float32)
Y = ((X[:, 0] > 1).astype(np.int32) + (X[:, 1] > 2).astype(np.int32))
WEIGHTS = {"first": _rng.normal(0, 0.3, (HIDDEN, FEATURES)).astype(np.float32),
           "last": _rng.normal(0, 0.3, (CLASSES, HIDDEN)).astype(np.float32)}


def network(dropout: float, noise: float = 0.0) -> Any:
    """Dense, ReLU, Dropout(p=dropout), [noise,] Dense, with the same initial weights every
    time."""
    from mindspore import Tensor, nn

    first, last = nn.Dense(FEATURES, HIDDEN), nn.Dense(HIDDEN, CLASSES)
    for dense, weights in ((first, WEIGHTS["first"]), (last, WEIGHTS["last"])):
        dense.weight.set_data(Tensor(weights))
        dense.bias.set_data(Tensor(np.zeros(weights.shape[0], np.float32)))
    noisy = [_noise(noise)] if noise else []
    return nn.SequentialCell(first, nn.ReLU(), nn.Dropout(p=dropout), *noisy, last)


def _noise(scale: float) -> Any:
    """A user's layer that adds Gaussian noise in training, from its own random primitive."""
    from mindspore import nn, ops

    class GaussianNoise(nn.Cell):
        def __init__(self) -> None:
            super().__init__()
            self.normal, self.scale = ops.StandardNormal(seed=1, seed2=2), scale

        def construct(self, x):
            if not self.training:
                return x
            return x + self.normal(ops.shape(x)) * self.scale

    return GaussianNoise()


def build(params: dict[str, Any]) -> Workload:
    from mindspore import nn

    return Workload(network(params["dropout"], params["noise"]), nn.CrossEntropyLoss(),
                    (X, Y), (X, Y), data_source="fixed normal features")
