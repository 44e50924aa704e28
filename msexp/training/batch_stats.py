"""The layers that make a micro-batch's gradients depend on how the batch is split, so
that accumulation gives the full-batch update only where they are absent:

- batch statistics: BatchNorm of every kind, and any Cell with `use_batch_statistics` or
  a training-mode BatchNorm primitive. Under accumulation each normalises one micro-batch
  by that micro-batch's own mean and variance, so the update is not the full-batch one.
- random masks: Dropout of other kinds than `nn.Dropout` (`Dropout1d/2d/3d`,
  `mint.nn.Dropout`, a Cell named `DropPath`, `DropBlock`, ... that does not draw through an
  `nn.Dropout`), `nn.RReLU` (random slopes), and any Cell holding a random primitive. Each
  call draws its own mask, so micro-batches get masks other than the full batch's: the
  update equals the full-batch one only in distribution. A rate of 0 draws none.
  `ops.dropout` called inside a Cell's `construct` cannot be seen without running it.
- seeded masks: `nn.Dropout`, whose masks msexp draws (`training/dropout`): each
  micro-batch draws its rows of the batch's mask, so they leave the update whole.
"""

from __future__ import annotations

import re

from mindspore import nn

from msexp.training.dropout import SeededMask, seeded
from msexp.training.records import BatchStatistics

_DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.DropoutExt,
             nn.Dropout2dExt)
_DROP_NAME = re.compile(r"Drop(?:out|Path|Block|Connect)", re.IGNORECASE)
_RANDOM = frozenset({"Dropout", "Dropout2D", "Dropout3D", "DropoutGenMask",
                     "StatelessDropOutGenMask", "UniformReal", "StandardNormal", "Bernoulli",
                     "RandomChoiceWithMask", "Multinomial", "Gamma", "Poisson", "UniformInt"})
_RATES = ("p", "prob", "drop_prob", "drop_rate", "rate")  # a drop probability, by its name


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


def random_mask_layers(network: nn.Cell) -> list[str]:
    """The names of `network`'s cells that draw a random mask per call in train mode (the
    outermost of nested ones: mindcv's DropPath holds a Dropout)."""
    found: list[str] = []
    for name, cell in network.cells_and_names():
        if any(name.startswith(f"{outer}.") for outer in found):
            continue
        if draws_random_masks(cell):
            found.append(name or type(cell).__name__)
    return found


def draws_random_masks(cell: nn.Cell) -> bool:
    """Whether `cell` draws a random mask (or random values) per call in train mode that
    does not split with the batch: msexp's seeded Dropout masks do (`training/dropout`),
    and so does a cell that draws only through them (mindcv's DropPath)."""
    if seeded(cell) or isinstance(cell, SeededMask):
        return False
    if isinstance(cell, nn.RReLU):
        return cell.lower.asnumpy() != cell.upper.asnumpy()  # equal bounds: one slope
    kind = type(cell).__name__
    primitives = getattr(cell, "_primitives", {}) or {}
    random = any(type(p).__name__ in _RANDOM for p in primitives.values())
    if not (isinstance(cell, _DROPOUTS) or _DROP_NAME.search(kind) or random):
        return False
    if not random and any(seeded(inner) for _, inner in cell.cells_and_names()):
        return False
    rate = drop_rate(cell)
    return rate is None or rate > 0


def drop_rate(cell: nn.Cell) -> float | None:
    """The probability that `cell` drops a value, as its attributes say (`p`, `prob`,
    `drop_prob`, `1 - keep_prob`); None where none does."""
    for name in _RATES:
        value = getattr(cell, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    keep = getattr(cell, "keep_prob", None)
    if isinstance(keep, (int, float)) and not isinstance(keep, bool):
        return 1.0 - float(keep)
    return None


def split_layers(network: nn.Cell, micro_batch: int, batch: int) -> BatchStatistics | None:
    """What `network`'s layers make of a batch of `batch` split into micro-batches of
    `micro_batch` (see the module's text), or None for a network with none of them."""
    layers, masks = batch_statistic_layers(network), random_mask_layers(network)
    ours = seeded_dropout_layers(network)
    if not (layers or masks or ours):
        return None
    return BatchStatistics(len(layers), micro_batch, batch, len(masks), len(ours))


def seeded_dropout_layers(network: nn.Cell) -> list[str]:
    """The names of `network`'s Dropout layers whose masks msexp draws (`training/dropout`):
    they repeat, and split with the batch."""
    return [name for name, cell in network.cells_and_names() if seeded(cell)]
