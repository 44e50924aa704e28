"""A small classifier with one Dropout layer of rate `dropout` (0: it drops nothing), on
fixed data: the network where accumulation is exact only in distribution, and at rate 0
exact."""

from __future__ import annotations

from typing import Any

import numpy as np

from msexp.experiment import Workload

DEFAULTS = {"epochs": 2, "batch_size": 12, "lr": 0.1, "optimizer": "momentum"}
PARAMS = {"dropout": 0.5}
# 54 samples: 4 batches of 12 and one of 6. MindSpore's CPU Dropout kernel continues one
# random stream from launch to launch, so the masks of a batch split evenly happen to be
# the full batch's; the last batch, split 3 + 3 against 6 at once, leaves that stream
FEATURES, HIDDEN, CLASSES, SAMPLES = 8, 7, 3, 54

_rng = np.random.default_rng(0)
X = _rng.normal(1.0, 2.0, size=(SAMPLES, FEATURES)).astype(np.float32)
Y = ((X[:, 0] > 1).astype(np.int32) + (X[:, 1] > 2).astype(np.int32))
WEIGHTS = {"first": _rng.normal(0, 0.3, (HIDDEN, FEATURES)).astype(np.float32),
           "last": _rng.normal(0, 0.3, (CLASSES, HIDDEN)).astype(np.float32)}


def network(dropout: float) -> Any:
    """Dense, ReLU, Dropout(p=dropout), Dense, with the same initial weights every time."""
    from mindspore import Tensor, nn

    first, last = nn.Dense(FEATURES, HIDDEN), nn.Dense(HIDDEN, CLASSES)
    for dense, weights in ((first, WEIGHTS["first"]), (last, WEIGHTS["last"])):
        dense.weight.set_data(Tensor(weights))
        dense.bias.set_data(Tensor(np.zeros(weights.shape[0], np.float32)))
    return nn.SequentialCell(first, nn.ReLU(), nn.Dropout(p=dropout), last)


def build(params: dict[str, Any]) -> Workload:
    from mindspore import nn

    return Workload(network(params["dropout"]), nn.CrossEntropyLoss(), (X, Y), (X, Y),
                    data_source="fixed normal features")
