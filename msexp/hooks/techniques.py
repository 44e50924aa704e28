"""msexp's techniques in a `Model.train` script: accumulation, AMP, loss scaling, THOR.

A script keeps `Model.train` and its callbacks; these replace its optimizer and the
`Model(...)` line, and the dataset is batched by `micro_batch(params)`:

    opt = msexp.hooks.optimizer(net, params, steps_per_epoch)
    model = msexp.hooks.model(net, loss, opt, params, metrics={"Accuracy": Accuracy()})
    train_ds = train_ds.batch(msexp.hooks.micro_batch(params))

Accumulation follows seed 001's shape: `Model.train` feeds one micro-batch per step, the
gradients add into buffers, and every `micro_size`-th step unscales them once, checks
they are finite, updates (or skips) and adjusts the loss scale. It is the same
`TrainStep` as msexp's own loop, so the same exactness holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mindspore import Tensor, nn
from mindspore.train import Model

from msexp.knobs import KNOBS
from msexp.training.amp import apply_amp
from msexp.training.loss_scale import make_scaler
from msexp.training.optim import make_optimizer
from msexp.training.step import TrainStep


def settings(params: Mapping[str, Any]) -> dict[str, Any]:
    """`params` completed with msexp's defaults for every knob it does not set."""
    return {**{name: knob.default for name, knob in KNOBS.items()}, **params}


def micro_batch(params: Mapping[str, Any]) -> int:
    """The batch size to batch the training dataset by: batch_size / micro_size."""
    values = settings(params)
    return values["batch_size"] // values["micro_size"]


def optimizer(network: nn.Cell, params: Mapping[str, Any], steps_per_epoch: int
              ) -> nn.Optimizer:
    """The optimizer `params["optimizer"]` names (sgd, momentum, adam, adamw, thor), with
    the lr schedule, over `network`'s weights; `steps_per_epoch` counts updates."""
    return make_optimizer(settings(params), network.trainable_params(), steps_per_epoch,
                          network)


class AccumulatingTrainStep(nn.Cell):
    """The train network `Model(train_step)` drives: one micro-batch per call, one update
    every `micro_size` calls, with AMP and loss scaling as `params` say.

    Model calls it eagerly (its own graphs are compiled inside), in any mode.
    """

    def __init__(self, network: nn.Cell, loss_fn: Any, optimizer: nn.Optimizer,
                 params: Mapping[str, Any]):
        super().__init__(auto_prefix=False)
        values = settings(params)
        self.network = network
        scaler, drop = make_scaler(values)
        self.micro_size = values["micro_size"]
        object.__setattr__(self, "step", TrainStep(network, loss_fn, optimizer,
                                                   self.micro_size, scaler, drop, None,
                                                   values["clip_grad_norm"]))
        self.pending: list[Any] = []
        self.overflow_steps = 0

    def __call__(self, x: Any, y: Any) -> Tensor:
        loss = self.step.accumulate(x, y)
        self.pending.append(loss)
        if len(self.pending) == self.micro_size:
            _, finite = self.step.update(self.pending)
            self.overflow_steps += not finite
            self.pending = []
        return loss

    @property
    def loss_scale(self) -> float | None:
        """The current loss scale, or None without loss scaling."""
        return self.step.loss_scale


def train_network(network: nn.Cell, loss_fn: Any, optimizer: nn.Optimizer,
                  params: Mapping[str, Any]) -> AccumulatingTrainStep:
    """`network` cast for `params["amp_level"]`, wrapped in msexp's accumulating train step."""
    return AccumulatingTrainStep(apply_amp(network, settings(params)), loss_fn, optimizer,
                                 params)


def model(network: nn.Cell, loss_fn: Any, optimizer: nn.Optimizer, params: Mapping[str, Any],
          metrics: Any = None) -> Model:
    """A `Model` that trains with msexp's techniques and evaluates `metrics` as usual."""
    train = train_network(network, loss_fn, optimizer, params)
    evaluate = nn.WithEvalCell(train.network, loss_fn)
    return Model(train, eval_network=evaluate if metrics else None, metrics=metrics,
                 eval_indexes=[0, 1, 2] if metrics else None)
