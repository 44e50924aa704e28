"""Dropout that repeats and splits: msexp's seeded mask in place of MindSpore's.

MindSpore's CPU `Dropout` kernel does not repeat across processes with a fixed seed (of 12
masks drawn in a row, the 6th on differ from run to run), and gives every layer of a
network the same seeds. `seed_dropouts` gives each `nn.Dropout` of a network its own
seeded `UniformReal` stream instead (the same Bernoulli(1 - p) mask, scaled by 1/(1 - p)).
That stream continues from call to call of a compiled graph, so micro-batches of rows
taken in order draw exactly the rows of the whole batch's mask: with the batch first in a
layer's input, accumulation equals the full-batch update with Dropout too.
"""

from __future__ import annotations

from mindspore import nn, ops

_STREAMS = 1 << 20  # a layer's second seed: its place in the network, past MindSpore's own


class SeededMask(nn.Cell):
    """What `ops.Dropout` returns, `(x * mask / keep, mask)`, from a seeded uniform stream."""

    def __init__(self, keep_prob: float, seed: int, stream: int):
        super().__init__()
        self.keep_prob = keep_prob
        self.uniform = ops.UniformReal(seed=seed, seed2=stream)

    def construct(self, x):
        mask = ops.cast(self.uniform(ops.shape(x)) < self.keep_prob, ops.dtype(x))
        return x * mask / self.keep_prob, mask


def seeded(cell: nn.Cell) -> bool:
    """Whether msexp draws `cell`'s masks: an `nn.Dropout` (or a subclass that keeps its
    `construct`, as mindcv's) with a rate above 0. Other kinds (Dropout2d's channel masks,
    RReLU, a random primitive of a Cell's own) keep MindSpore's."""
    drawn = getattr(cell, "dropout", None)
    return (isinstance(cell, nn.Dropout) and type(cell).construct is nn.Dropout.construct
            and (isinstance(drawn, SeededMask)
                 or (isinstance(drawn, ops.Dropout) and drawn.keep_prob < 1)))


def seed_dropouts(network: nn.Cell, seed: int) -> int:
    """Give each `nn.Dropout` in `network` its own seeded mask stream, from `seed` and the
    layer's place; returns how many it holds (a rate of 0 draws no mask: left alone)."""
    count = 0
    for _, cell in network.cells_and_names():
        if seeded(cell):
            count += 1
            if not isinstance(cell.dropout, SeededMask):
                cell.dropout = SeededMask(float(cell.dropout.keep_prob), seed, _STREAMS + count)
    return count

