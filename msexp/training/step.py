"""One optimizer update from `micro_size` micro-batches, with optional loss scaling.

Standalone accumulation follows seed 000: for each micro-batch take loss / micro_size,
run `value_and_grad`, add into buffers; after `micro_size` micro-batches unscale the sum
once, check it is finite, step (or skip on overflow), adjust the scale and zero the buffers.
`nn.GradAccumulationCell` is not used: outside (semi-)auto parallel it never updates weights.
"""

from __future__ import annotations

from typing import Any, Callable

import mindspore as ms
from mindspore import amp, nn, ops


class TrainStep:
    """Callable: `step(micro_batches) -> (mean loss, grads finite)` for one update.

    Args:
        network: the (possibly AMP-cast) network.
        loss_fn: `(logits, labels) -> loss`, evaluated in float32.
        optimizer: the optimizer over the network's trainable parameters.
        micro_size: number of micro-batches per update.
        scaler: a MindSpore LossScaler, or None for no scaling.
        drop_overflow_update: skip the update when the unscaled gradients are not finite.
    """

    def __init__(self, network: nn.Cell, loss_fn: Callable, optimizer: nn.Optimizer,
                 micro_size: int, scaler: amp.LossScaler | None = None,
                 drop_overflow_update: bool = False):
        self.micro_size = micro_size
        self.scaler = scaler
        weights = optimizer.parameters
        hyper_map = ops.HyperMap()

        def forward(x, y):
            loss = loss_fn(ops.cast(network(x), ms.float32), y)
            scaled = loss / micro_size
            if scaler is not None:
                scaled = scaler.scale(scaled)
            return scaled, loss

        grad_fn = ms.value_and_grad(forward, None, weights, has_aux=True)

        def apply(grads):
            finite = ops.ones((), ms.bool_)
            if scaler is not None:
                grads = scaler.unscale(grads)
                finite = amp.all_finite(grads)
                if drop_overflow_update:
                    if finite:
                        optimizer(grads)
                else:
                    optimizer(grads)
                scaler.adjust(finite)
            else:
                optimizer(grads)
            return finite

        buffers = weights.clone(prefix="accumulated", init="zeros")

        @ms.jit
        def accumulate(x, y):
            (_, loss), grads = grad_fn(x, y)
            hyper_map(ops.partial(ops.assign_add), buffers, grads)
            return loss

        @ms.jit
        def update():
            finite = apply(buffers)
            hyper_map(ops.partial(ops.assign), buffers,
                      hyper_map(ops.zeros_like, buffers))
            return finite

        self._accumulate, self._update = accumulate, update

    def __call__(self, micro_batches: list[tuple[Any, Any]]) -> tuple[float, bool]:
        losses = [self._accumulate(x, y) for x, y in micro_batches]
        finite = self._update()
        return sum(float(loss.asnumpy()) for loss in losses) / len(losses), bool(finite.asnumpy())

    @property
    def loss_scale(self) -> float | None:
        """The current scale, or None without loss scaling."""
        return None if self.scaler is None else float(self.scaler.scale_value.asnumpy())
