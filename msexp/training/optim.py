"""Optimizers and the warm-up + cosine learning-rate schedule (THOR: seed 004's schedules)."""

from __future__ import annotations

import math
from typing import Any

import mindspore as ms
from mindspore import nn

from msexp.training.thor import Thor, resolve_impl, thor_damping, thor_lr


def learning_rates(params: dict[str, Any], steps_per_epoch: int) -> float | list[float]:
    """The learning rate: a float if constant, else one value per optimizer update."""
    lr, epochs = params["lr"], params["epochs"]
    warmup = params["warmup_epochs"] * steps_per_epoch
    total = epochs * steps_per_epoch
    if (params["lr_schedule"] == "constant" and not warmup) or not total:
        return lr
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


def make_optimizer(params: dict[str, Any], weights: list, steps_per_epoch: int,
                   network: nn.Cell | None = None, learning_rate: Any = None) -> nn.Optimizer:
    """Build the optimizer named by `params["optimizer"]` over `weights`.

    THOR needs the `network` (it wraps its Dense/Conv2d layers) and uses all its
    trainable parameters. `learning_rate` (a list per update or a MindSpore
    `LearningRateSchedule`) replaces the schedule that the lr knobs describe.
    """
    lr = learning_rates(params, steps_per_epoch) if learning_rate is None else learning_rate
    name, decay = params["optimizer"], params["weight_decay"]
    if name == "thor":
        if network is None:
            raise ValueError("optimizer thor needs the network")
        return _make_thor(params, network, steps_per_epoch)
    if name == "sgd":
        return nn.SGD(weights, learning_rate=lr, weight_decay=decay)
    if name == "momentum":
        return nn.Momentum(weights, lr, params["momentum"], weight_decay=decay)
    if name == "adam":
        return nn.Adam(weights, learning_rate=lr, weight_decay=decay)
    if name == "adamw":
        return nn.AdamWeightDecay(weights, learning_rate=lr, weight_decay=decay)
    raise ValueError(f"unknown optimizer {name!r}")


def thor_learning_rates(params: dict[str, Any], steps_per_epoch: int) -> float | list[float]:
    """THOR's learning rate: seed 004's polynomial decay when `thor.lr_decay` > 0.

    The decay reaches zero one epoch after the run ends (the seed ends its schedule past
    its last epoch too); warm-up still applies. With `thor.lr_decay` 0, as `learning_rates`.
    """
    decay = params.get("thor.lr_decay", 0.0)
    if not decay:
        return learning_rates(params, steps_per_epoch)
    epochs, lr = params["epochs"], params["lr"]
    rates = thor_lr(lr, decay, epochs + 1, steps_per_epoch)[:epochs * steps_per_epoch]
    warmup = params["warmup_epochs"] * steps_per_epoch
    return [lr * (step + 1) / warmup if step < warmup else rate
            for step, rate in enumerate(rates)]


def _make_thor(params: dict[str, Any], network: nn.Cell, steps_per_epoch: int) -> nn.Optimizer:
    lr = thor_learning_rates(params, steps_per_epoch)
    damping = thor_damping(params["thor.damping_init"], params["thor.damping_decay"],
                           params["epochs"], steps_per_epoch)
    impl = resolve_impl(params["thor_impl"], ms.get_context("device_target"))
    if impl == "mindspore":
        return _mindspore_thor(params, network, lr, damping)
    return Thor(network, lr, damping, params["momentum"], params["weight_decay"],
                params["thor.frequency"], params["thor.split_indices"])


def _mindspore_thor(params: dict[str, Any], network: nn.Cell, lr: float | list[float],
                    damping: list[float]) -> nn.Optimizer:
    """MindSpore's `nn.thor` (Ascend): its layers compute A/G in every forward pass."""
    rates = lr if isinstance(lr, list) else [lr] * len(damping)
    return nn.thor(network, ms.Tensor(rates, ms.float32), ms.Tensor(damping, ms.float32),
                   params["momentum"], params["weight_decay"],
                   batch_size=params["batch_size"] // params["micro_size"],
                   split_indices=params["thor.split_indices"] or None,
                   frequency=params["thor.frequency"])
