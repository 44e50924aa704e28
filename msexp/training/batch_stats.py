"""The layers that normalise with the statistics of the batch they see in train mode
(BatchNorm of every kind, and any Cell with `use_batch_statistics` or a training-mode
BatchNorm primitive). Under accumulation each of them normalises one micro-batch by that
micro-batch's own mean and variance, so the update is not the full-batch one."""

from __future__ import annotations

from mindspore import nn


def batch_statistic_layers(network: nn.Cell) -> list[str]:
    """The names of `network`'s cells that compute batch statistics in train mode."""
    return [name or type(cell).__name__ for name, cell in network.cells_and_names()
            if computes_batch_statistics(cell)]


def computes_batch_statistics(cell: nn.Cell) -> bool:
    """Whether `cell` normalises with the statistics of its input batch in train mode:
    `use_batch_statistics` False means it always uses its moving statistics."""
    flag = getattr(cell, "use_batch_statistics", None)
    if flag is False:
        return False
    if hasattr(cell, "use_batch_statistics") or "BatchNorm" in type(cell).__name__:
        return True
    primitives = getattr(cell, "_primitives", {}) or {}
    return any(type(p).__name__ == "BatchNorm" and getattr(p, "is_training", False)
               for p in primitives.values())
