"""Seed 000's network, Dense 784-512-512-10, on digits upsampled to 28x28."""

from __future__ import annotations

from typing import Any

from _digits import train_and_eval

from msexp.experiment import Workload

DATA_FORMATS = ("mnist", "imagefolder")
DEFAULTS = {"epochs": 5, "batch_size": 64, "lr": 0.02, "optimizer": "momentum"}
PARAMS = {"hidden": 512}


def build(params: dict[str, Any]) -> Workload:
    from mindspore import nn  # lazy: plans read this module without MindSpore

    hidden = params["hidden"]
    network = nn.SequentialCell(
        nn.Flatten(),
        nn.Dense(28 * 28, hidden), nn.ReLU(),
        nn.Dense(hidden, hidden), nn.ReLU(),
        nn.Dense(hidden, 10),
    )
    train, held, description = train_and_eval(params.get("data"), 28)
    return Workload(network, nn.CrossEntropyLoss(), train, held, data_source=description)
