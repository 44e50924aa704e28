"""Turning a workload's data (NumPy arrays or a MindSpore dataset) into batches."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import mindspore.dataset as ds
import numpy as np

Batch = tuple[np.ndarray, np.ndarray]


def num_samples(data: Any) -> int:
    """Number of samples in arrays or an unbatched dataset."""
    return len(data[0]) if isinstance(data, (tuple, list)) else data.get_dataset_size()


def updates(data: Any, batch_size: int, micro_size: int, seed: int,
            shard: tuple[int, int] = (0, 1)) -> Iterator[list[Batch]]:
    """One epoch of updates, each a list of `micro_size` micro-batches (remainder dropped).

    Arrays are shuffled by `seed`; `shard=(rank, size)` gives each data-parallel rank
    its slice of every global batch.
    """
    rank, size = shard
    micro = batch_size // micro_size // size
    if isinstance(data, (tuple, list)):
        x, y = data
        order = np.random.default_rng(seed).permutation(len(x))
        for start in range(0, len(order) - batch_size + 1, batch_size):
            ids = order[start:start + batch_size]
            ids = ids[rank * len(ids) // size:(rank + 1) * len(ids) // size]
            yield [(x[ids[i:i + micro]], y[ids[i:i + micro]])
                   for i in range(0, micro * micro_size, micro)]
        return
    ds.config.set_seed(seed)
    stream = data.shuffle(buffer_size=4096).batch(micro, drop_remainder=True)
    left = data.get_dataset_size() // batch_size if size > 1 else -1  # equal on every rank
    group: list[Batch] = []
    for i, (x, y) in enumerate(stream.create_tuple_iterator(num_epochs=1, output_numpy=True)):
        if left == 0:
            return
        if i % size == rank:  # each rank keeps every size-th micro-batch
            group.append((x, y))
        if len(group) == micro_size:
            yield group
            group = []
            left -= 1


def eval_batches(data: Any, batch_size: int = 512) -> Iterator[Batch]:
    """The evaluation set in order, in batches of at most `batch_size`."""
    if isinstance(data, (tuple, list)):
        x, y = data
        for start in range(0, len(x), batch_size):
            yield x[start:start + batch_size], y[start:start + batch_size]
        return
    yield from data.batch(batch_size).create_tuple_iterator(num_epochs=1, output_numpy=True)
