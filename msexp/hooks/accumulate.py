"""`AccumulatingTrainStep`: one optimizer update per `Model.train` step, from micro-batches.

`Model.train` feeds it the full batch; it splits the batch into `micro_size` micro-batches,
adds their gradients into buffers and updates once, with loss scaling, through msexp's
`TrainStep` (the built-in loop's step, so the same exactness holds). A step of
`Model.train` is therefore one update: its step count, `LossMonitor` and `TimeMonitor`
count updates.

A batch smaller than the others (the last one of an epoch whose size does not divide)
is split into micro-batches of the usual size, each weighted by its real size, so its
update is the full-batch update on those samples whatever `micro_size` is. THOR, whose
factor buffers have the micro-batch's shape, refuses such a batch (drop_remainder=True).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mindspore as ms
from mindspore import Parameter, Tensor, nn

from msexp.hooks.channel import tell
from msexp.knobs import KNOBS
from msexp.training.batch_stats import split_layers
from msexp.training.loss_scale import make_scaler
from msexp.training.step import TrainStep, batch_inputs

Params = Any  # a dict, an argparse Namespace or a config object with attributes


def settings(params: Params) -> dict[str, Any]:
    """msexp's knobs as `params` set them, its defaults for the rest. A value that breaks
    msexp's rule for a knob of that name is the script's own (`loss_scale: 1024`), not
    msexp's: the default stands."""
    given = params if isinstance(params, Mapping) else vars(params)
    return {name: given[name] if name in given and knob.check(given[name]) is None
            else knob.default for name, knob in KNOBS.items()}


class _WeightedLoss(nn.Cell):
    """`loss_fn` times a weight that the step sets per micro-batch (1 for equal ones)."""

    def __init__(self, loss_fn: Any):
        super().__init__(auto_prefix=False)
        self.loss_fn = loss_fn
        self.weight = Parameter(Tensor(1.0, ms.float32), name="msexp.micro_batch_weight",
                                requires_grad=False)
        self.value = 1.0

    def construct(self, logits, labels):
        return self.loss_fn(logits, labels) * self.weight


    def set(self, value: float) -> None:
        if value != self.value:
            self.weight.set_data(Tensor(value, ms.float32))
            self.value = value


class _OutputIsLoss(nn.Cell):
    """The loss of a network that computes its own (`Model(net_with_loss, optimizer=...)`):
    its output, given every column of the batch."""

    def construct(self, output, labels):
        return output


class AccumulatingTrainStep(nn.Cell):
    """The train network `Model(train_step)` drives: one full batch per call, split into
    `micro_size` micro-batches, one update, with loss scaling as `params` say (see
    `settings`).

    Model calls it eagerly (its own graphs are compiled inside), in any mode. It keeps
    the counts the trial reports: `overflow_steps`, `skipped_updates`, `loss_scale`.
    """

    def __init__(self, network: nn.Cell, loss_fn: Any, optimizer: nn.Optimizer,
                 params: Params):
        super().__init__(auto_prefix=False)
        values = settings(params)
        self.network, self.optimizer = network, optimizer
        self.micro_size = values["micro_size"]
        self.own_loss = loss_fn is None  # the network takes every column, labels included
        scaler, drop = make_scaler(values)
        loss = _WeightedLoss(_OutputIsLoss() if loss_fn is None else loss_fn)
        object.__setattr__(self, "loss", loss)  # not a part of the model's checkpoints
        object.__setattr__(self, "step", TrainStep(network, loss, optimizer, self.micro_size,
                                                   scaler, drop, None,
                                                   values["clip_grad_norm"]))
        self.drop_overflow_update = drop
        self.micro = 0  # the micro-batch size, from the largest batch seen
        self.overflow_steps = self.skipped_updates = 0

    def __call__(self, *columns: Any) -> Tensor:
        *inputs, labels = columns
        if self.own_loss:
            inputs = list(columns)
        size = int(labels.shape[0])
        if not self.micro:
            self._tell_batch_statistics(size)
        self.micro = max(self.micro, -(-size // self.micro_size))
        if self.step.thor is not None and size % self.micro:
            raise ValueError(f"THOR needs micro-batches of one size ({self.micro}), but a batch "
                             f"of {size} leaves {size % self.micro}: batch the training "
                             "dataset with drop_remainder=True")
        losses = []
        for start in range(0, size, self.micro):
            end = min(start + self.micro, size)
            self.loss.set((end - start) * self.micro_size / size)
            whole = end - start == size  # no slice: each is an op of its own out of a graph
            part = inputs if whole else [column[start:end] for column in inputs]
            losses.append(self.step.accumulate(batch_inputs(part),
                                               labels if whole else labels[start:end]))
        _, finite = self.step.update(losses)
        if not finite:
            self.overflow_steps += 1
            self.skipped_updates += self.drop_overflow_update
        return losses[0] if self.micro_size == 1 else sum(losses[1:], losses[0]) / self.micro_size

    def _tell_batch_statistics(self, batch: int) -> None:
        """At the first batch: msexp learns of the network's BatchNorm and Dropout layers;
        the log says what they change where each sees a part of the batch."""
        stats = split_layers(self.network, -(-batch // self.micro_size), batch)
        if stats is None:
            return
        tell(stats)
        if not stats.exact:
            print(f"msexp: {stats.line()}", flush=True)

    @property
    def loss_scale(self) -> float | None:
        """The current loss scale, or None without loss scaling."""
        return self.step.loss_scale

    @property
    def thor_inverse_s(self) -> float | None:
        """Seconds THOR spent on its factors and inverses (None without THOR)."""
        return None if self.step.thor is None else self.step.thor.inverse_s

    @property
    def accumulation_buffers(self) -> tuple[Parameter, ...]:
        """The accumulation buffers (their bytes count in train_mem_mb)."""
        return self.step.buffers
