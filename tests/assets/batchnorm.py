"""A small classifier with or without one BatchNorm layer (`norm`), on fixed data: the
network where accumulation is exact, and the one where it is not."""

from __future__ import annotations

from typing import Any

import numpy as np

from msexp.experiment import Workload

DEFAULTS = {"epochs": 1, "batch_size": 16, "lr": 0.1, "optimizer": "momentum"}
PARAMS = {"norm": True}
FEATURES, HIDDEN, CLASSES, SAMPLES = 8, 16, 3, 48

_rng = np.random.default_rng(0)
X = _rng.normal(1.0, 2.0, size=(SAMPLES, FEATURES)).astype(np.float32)
Y = ((X[:, 0] > 1).astype(np.int32) + (X[:, 1] > 2).astype(np.int32))
WEIGHTS = {"first": _rng.normal(0, 0.3, (HIDDEN, FEATURES)).astype(np.float32),
           "last": _rng.normal(0, 0.3, (CLASSES, HIDDEN)).astype(np.float32)}


def network(norm: bool) -> Any:
    """Dense, [BatchNorm1d], ReLU, Dense, with the same initial weights every time."""
    from mindspore import Tensor, nn

    first, last = nn.Dense(FEATURES, HIDDEN), nn.Dense(HIDDEN, CLASSES)
    for dense, weights in ((first, WEIGHTS["first"]), (last, WEIGHTS["last"])):
        dense.weight.set_data(Tensor(weights))
        dense.bias.set_data(Tensor(np.zeros(weights.shape[0], np.float32)))
    layers = [first, *([nn.BatchNorm1d(HIDDEN)] if norm else []), nn.ReLU(), last]
    return nn.SequentialCell(*layers)


def build(params: dict[str, Any]) -> Workload:
    from mindspore import nn

    return Workload(network(params["norm"]), nn.CrossEntropyLoss(), (X, Y), (X, Y),
                    data_source="fixed normal features")
