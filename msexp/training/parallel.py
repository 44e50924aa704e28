"""Data-parallel gradient averaging: one reduction per optimizer update over every rank.

Seed 003 accumulates under SEMI_AUTO_PARALLEL with `nn.GradAccumulationCell`, which
the CPU backend does not run. msexp accumulates micro-batch gradients into its own
buffers (seed 000) on every device and averages the buffers here, once per update,
never per micro-batch; a GradAccumulationCell path for Ascend/GPU is not written yet.
"""

from __future__ import annotations

from typing import Callable

from mindspore import ops


def mean_over_ranks(size: int) -> Callable:
    """A graph-mode function `(grads, loss) -> (grads, loss)` averaged over `size` ranks.

    Each tensor is all-reduced in place in the update graph: on CPU, packing them into
    one flat vector first measured slower (concatenation and slicing copy every gradient).
    """
    all_reduce = ops.AllReduce(ops.ReduceOp.SUM)
    hyper_map = ops.HyperMap()

    def reduce(grads, loss):
        sums = hyper_map(ops.partial(all_reduce), grads)
        return tuple(g / size for g in sums), all_reduce(loss) / size

    return reduce
