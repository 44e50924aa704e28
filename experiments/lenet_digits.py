"""Seed 001/002's LeNet5 on digits upsampled to 32x32."""

from __future__ import annotations

from typing import Any

from _digits import train_and_eval

from msexp.experiment import Workload

DATA_FORMATS = ("mnist", "imagefolder")
DEFAULTS = {"epochs": 5, "batch_size": 32, "lr": 0.02, "optimizer": "momentum"}


def lenet5(num_classes: int = 10, channels: int = 1) -> Any:
    """LeNet5 as in the MindSpore tutorials: two 5x5 convolutions and three Dense layers."""
    from mindspore import nn  # lazy: plans read this module without MindSpore

    return nn.SequentialCell(
        nn.Conv2d(channels, 6, 5, pad_mode="valid"), nn.ReLU(),
        nn.MaxPool2d(kernel_size=2, stride=2),
        nn.Conv2d(6, 16, 5, pad_mode="valid"), nn.ReLU(),
        nn.MaxPool2d(kernel_size=2, stride=2),
        nn.Flatten(),
        nn.Dense(16 * 5 * 5, 120), nn.ReLU(),
        nn.Dense(120, 84), nn.ReLU(),
        nn.Dense(84, num_classes),
    )


def build(params: dict[str, Any]) -> Workload:
    from mindspore import nn  # lazy: plans read this module without MindSpore

    train, held, description = train_and_eval(params.get("data"), 32)
    return Workload(lenet5(), nn.CrossEntropyLoss(), train, held, data_source=description)
