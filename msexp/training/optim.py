"""Optimizers and the warm-up + cosine learning-rate schedule."""

from __future__ import annotations

import math
from typing import Any

from mindspore import nn


def learning_rates(params: dict[str, Any], steps_per_epoch: int) -> float | list[float]:
    """The learning rate: a float if constant, else one value per optimizer update."""
    lr, epochs = params["lr"], params["epochs"]
    warmup = params["warmup_epochs"] * steps_per_epoch
    if params["lr_schedule"] == "constant" and not warmup:
        return lr
    total = epochs * steps_per_epoch
    rates = []
    for step in range(total):
        if step < warmup:
            rates.append(lr * (step + 1) / warmup)
        elif params["lr_schedule"] == "cosine":
            progress = (step - warmup) / max(1, total - warmup)
            rates.append(0.5 * lr * (1 + math.cos(math.pi * progress)))
        else:
            rates.append(lr)
    return rates


def make_optimizer(params: dict[str, Any], weights: list, steps_per_epoch: int) -> nn.Optimizer:
    """Build the optimizer named by `params["optimizer"]` over `weights`."""
    lr = learning_rates(params, steps_per_epoch)
    name, decay = params["optimizer"], params["weight_decay"]
    if name == "sgd":
        return nn.SGD(weights, learning_rate=lr, weight_decay=decay)
    if name == "momentum":
        return nn.Momentum(weights, lr, params["momentum"], weight_decay=decay)
    if name == "adam":
        return nn.Adam(weights, learning_rate=lr, weight_decay=decay)
    if name == "adamw":
        return nn.AdamWeightDecay(weights, learning_rate=lr, weight_decay=decay)
    raise ValueError(f"unknown optimizer {name!r}")
