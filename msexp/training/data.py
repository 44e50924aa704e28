"""Turning a workload's data (NumPy arrays or a MindSpore dataset) into batches."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import mindspore.dataset as ds
import numpy as np

Batch = tuple[Any, np.ndarray]
"""(inputs, labels): inputs one array, or a tuple of arrays for a multi-input network."""


def num_samples(data: Any) -> int:
    """Number of samples in arrays or an unbatched dataset."""
    if isinstance(data, (tuple, list)):
        return len(data[1])
    return data.get_dataset_size()


def _take(inputs: Any, ids: Any) -> Any:
    if isinstance(inputs, (tuple, list)):
        return tuple(a[ids] for a in inputs)
    return inputs[ids]


def _split(item: Any) -> Batch:
    """A dataset row or batch as (inputs, labels): the last column is the labels."""
    *inputs, labels = item
    return (inputs[0] if len(inputs) == 1 else tuple(inputs)), labels


class TrainBatches:
    """A trial's training batches, epoch after epoch.

    Arrays are shuffled by `seed * 1000 + epoch`. A MindSpore dataset is wrapped
    (shuffle, batch) once per trial and read through one iterator: a dataset node takes
    one consumer only, so wrapping it again each epoch breaks the pipeline.
    `shard=(rank, size)` gives each data-parallel rank its slice of every global batch.
    """

    def __init__(self, data: Any, batch_size: int, micro_size: int, seed: int,
                 shard: tuple[int, int] = (0, 1)):
        self.data, self.batch_size, self.micro_size, self.seed = data, batch_size, micro_size, seed
        self.shard = shard
        self._stream: Any = None

    def per_epoch(self) -> int:
        """Updates in one epoch (the remainder dropped)."""
        samples = (len(self.data[1]) if isinstance(self.data, (tuple, list))
                   else self.data.get_dataset_size())
        return samples // self.batch_size

    def epoch(self, epoch: int) -> Iterator[list[Batch]]:
        """One epoch of updates, each a list of `micro_size` micro-batches (remainder dropped)."""
        if isinstance(self.data, (tuple, list)):
            return updates(self.data, self.batch_size, self.micro_size,
                           self.seed * 1000 + epoch, self.shard)
        return self._dataset_epoch()

    def _dataset_epoch(self) -> Iterator[list[Batch]]:
        rank, size = self.shard
        micro = self.batch_size // self.micro_size // size
        if self._stream is None:
            ds.config.set_seed(self.seed)
            self._stream = self.data.shuffle(buffer_size=4096).batch(
                micro, drop_remainder=True).create_tuple_iterator(num_epochs=-1,
                                                                  output_numpy=True)
        left = self.data.get_dataset_size() // self.batch_size if size > 1 else -1
        group: list[Batch] = []
        for i, item in enumerate(self._stream):  # always to the epoch's end: see above
            if left == 0:
                continue
            if i % size == rank:  # each rank keeps every size-th micro-batch
                group.append(_split(item))
            if len(group) == self.micro_size:
                yield group
                group = []
                left -= 1


def updates(data: Any, batch_size: int, micro_size: int, seed: int,
            shard: tuple[int, int] = (0, 1)) -> Iterator[list[Batch]]:
    """One epoch of updates from (inputs, labels) arrays shuffled by `seed`, each a list of
    `micro_size` micro-batches (remainder dropped)."""
    rank, size = shard
    micro = batch_size // micro_size // size
    x, y = data
    order = np.random.default_rng(seed).permutation(len(y))
    for start in range(0, len(order) - batch_size + 1, batch_size):
        ids = order[start:start + batch_size]
        ids = ids[rank * len(ids) // size:(rank + 1) * len(ids) // size]
        yield [(_take(x, ids[i:i + micro]), y[ids[i:i + micro]])
               for i in range(0, micro * micro_size, micro)]


class EvalBatches:
    """The evaluation set in order, in batches of at most `batch_size`, as often as asked
    (a dataset is wrapped once, as in `TrainBatches`)."""

    def __init__(self, data: Any, batch_size: int = 512):
        self.data, self.batch_size = data, batch_size
        self._stream: Any = None

    def __iter__(self) -> Iterator[Batch]:
        if isinstance(self.data, (tuple, list)):
            x, y = self.data
            for start in range(0, len(y), self.batch_size):
                rows = slice(start, start + self.batch_size)
                yield _take(x, rows), y[rows]
            return
        if self._stream is None:
            self._stream = self.data.batch(self.batch_size).create_tuple_iterator(
                num_epochs=-1, output_numpy=True)
        for item in self._stream:
            yield _split(item)
