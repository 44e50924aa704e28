"""Every `nn.BatchNorm2d` of a network switched between its own construct and the two
remedies `batch_statistics.py` measures (PyNative only: each layer's construct is
replaced on the instance, so the Parameters and their names stay as they are).

- `collect`: the layer's own construct (train mode: the moving statistics move once),
  keeping the mean and biased variance of the batch it sees, per channel.
- `fixed`: normalise with the kept statistics as constants (remedy a: whole-batch
  statistics for every micro-batch), by MindSpore's fused inference-mode BatchNorm. With
  `correct(grads)` it also restores the gradient
  terms through the statistics (remedy b): the full-batch backward of BatchNorm is
  dx = gamma / sigma * (dy - mean(dy) - xhat * mean(dy * xhat)), and mean(dy) and
  mean(dy * xhat) over the whole batch are the layer's beta and gamma gradients divided by
  the values per channel. Each layer adds T - stop_gradient(T) to the loss, T = sum(x * w)
  with w = -gamma / sigma * (mean(dy) + xhat * mean(dy * xhat)) held constant: zero in
  value, w in the gradient of x.
"""

from __future__ import annotations

import types
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import nn, ops

CHANNELS = (1, -1, 1, 1)


class BatchNormModes:
    """The network's BatchNorm layers and the statistics and corrections they use."""

    def __init__(self, network: nn.Cell):
        self.layers = [cell for _, cell in network.cells_and_names()
                       if isinstance(cell, nn.BatchNorm2d)]
        self.stats: dict[int, tuple[Any, Any, int]] = {}
        self.corrections: dict[int, tuple[Any, Any]] = {}
        self.injections: list[Any] = []
        self.inference: dict[int, Any] = {}

    def native(self) -> None:
        """Each layer's own construct: the statistics of the batch it sees."""
        for layer in self.layers:
            if "construct" in vars(layer):
                del layer.construct

    def collect(self) -> None:
        self._use(_collect)

    def fixed(self) -> None:
        self.corrections.clear()
        self._use(_fixed)

    def correct(self, grads: dict[str, np.ndarray]) -> None:
        """Restore the gradient through the statistics from `grads` (name -> the summed
        gradient of the whole batch), from the last pass."""
        self.corrections = {
            id(layer): (ms.Tensor(grads[layer.beta.name] / count),
                        ms.Tensor(grads[layer.gamma.name] / count))
            for layer in self.layers for count in [self.stats[id(layer)][2]]}

    def injected(self) -> Any:
        """The corrections' terms of the pass just run: zero in value."""
        terms = [term - ops.stop_gradient(term) for term in self.injections]
        self.injections.clear()
        return sum(terms)

    def _use(self, construct: Any) -> None:
        for layer in self.layers:
            layer.construct = types.MethodType(
                lambda cell, x, fn=construct: fn(self, cell, x), layer)


def _collect(modes: BatchNormModes, layer: nn.BatchNorm2d, x: Any) -> Any:
    mean = ops.mean(x, (0, 2, 3), keep_dims=True)
    variance = ops.mean(ops.square(x - mean), (0, 2, 3))
    modes.stats[id(layer)] = (mean.reshape(-1), variance, x.shape[0] * x.shape[2] * x.shape[3])
    return type(layer).construct(layer, x)


def _fixed(modes: BatchNormModes, layer: nn.BatchNorm2d, x: Any) -> Any:
    mean, variance, _ = modes.stats[id(layer)]
    normalise = modes.inference.setdefault(id(layer), ops.BatchNorm(is_training=False,
                                                                     epsilon=layer.eps))
    out = normalise(x, layer.gamma, layer.beta, mean, variance)[0]
    correction = modes.corrections.get(id(layer))
    if correction is not None:  # sum(x * w) = sum_c(-scale * (mean_dy * sum(x) + ...))
        mean_dy, mean_dy_xhat = correction
        inverse_sigma = ops.rsqrt(variance + layer.eps)
        scale = ops.stop_gradient(-layer.gamma * inverse_sigma)
        centred = ops.stop_gradient(x - mean.reshape(CHANNELS))
        modes.injections.append(ops.sum(
            scale * (mean_dy * ops.sum(x, (0, 2, 3))
                     + mean_dy_xhat * inverse_sigma * ops.sum(x * centred, (0, 2, 3)))))
    return out
