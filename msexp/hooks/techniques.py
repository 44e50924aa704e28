"""msexp's techniques in a `Model.train` script: accumulation, AMP, loss scaling, THOR.

A script keeps its dataset, `Model.train` and its callbacks; these replace its optimizer
(optional) and its `Model(...)` line, and read msexp's knobs from the script's own
arguments or config (`micro_size`, `amp_level`, `loss_scale`, ...):

    opt = msexp.hooks.optimizer(net, config, steps_per_epoch)    # or the script's own
    model = msexp.hooks.model(net, loss, opt, config, metrics={"Accuracy": Accuracy()})

The dataset stays batched by `batch_size`: each step of `Model.train` is one update, split
into micro-batches inside (see `AccumulatingTrainStep`).
"""

from __future__ import annotations

from typing import Any

from mindspore import nn
from mindspore.train import Model

from msexp.hooks.accumulate import AccumulatingTrainStep, Params, settings
from msexp.hooks.callback import MsexpCallback
from msexp.hooks.channel import active
from msexp.training.amp import apply_amp
from msexp.training.optim import make_optimizer


def optimizer(network: nn.Cell, params: Params, steps_per_epoch: int) -> nn.Optimizer:
    """The optimizer `params["optimizer"]` names (sgd, momentum, adam, adamw, thor), with
    the lr schedule, over `network`'s weights; `steps_per_epoch` counts updates."""
    return make_optimizer(settings(params), network.trainable_params(), steps_per_epoch,
                          network)


def train_network(network: nn.Cell, loss_fn: Any, optimizer: nn.Optimizer,
                  params: Params) -> AccumulatingTrainStep:
    """`network` cast for `params["amp_level"]`, wrapped in msexp's accumulating train step."""
    values = settings(params)
    return AccumulatingTrainStep(apply_amp(network, values), loss_fn, optimizer, values)


class HookedModel(Model):
    """A `Model` whose training runs msexp's train step: always step by step (the step
    is Python around compiled graphs, which dataset sink mode cannot take), and, in an
    msexp trial, reporting each epoch (an `MsexpCallback` is added if none is given)."""

    def train(self, epoch: int, train_dataset: Any, callbacks: Any = None,
              dataset_sink_mode: bool = False, sink_size: int = -1,
              initial_epoch: int = 0) -> Any:
        given = [] if callbacks is None else (
            list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks])
        if active() and not any(isinstance(c, MsexpCallback) for c in given):
            given.insert(0, MsexpCallback(self))  # first: its step clock leaves out the
            # others' step ends (printing, saving checkpoints)
        return super().train(epoch, train_dataset, callbacks=given, dataset_sink_mode=False,
                             initial_epoch=initial_epoch)


def model(network: nn.Cell, loss_fn: Any, optimizer: nn.Optimizer, params: Params,
          metrics: Any = None) -> HookedModel:
    """A `Model` that trains with msexp's techniques and evaluates `metrics` as usual."""
    train = train_network(network, loss_fn, optimizer, params)
    evaluate = nn.WithEvalCell(train.network, loss_fn)
    return HookedModel(train, eval_network=evaluate if metrics else None, metrics=metrics,
                       eval_indexes=[0, 1, 2] if metrics else None)
