"""msexp's techniques in a `Model.train` script: accumulation, AMP, loss scaling, THOR.

A script keeps its dataset, `Model.train` and its callbacks; these replace its optimizer
(optional) and its `Model(...)` line, and read msexp's knobs from the script's own
arguments or config (`micro_size`, `amp_level`, `loss_scale`, ...):

    opt = msexp.hooks.optimizer(net, config, steps_per_epoch)    # or the script's own
    model = msexp.hooks.model(net, loss, opt, config, metrics={"Accuracy": Accuracy()})

`hooks.model` takes every other argument of `Model` too (`eval_network`, `amp_level`,
`loss_scale_manager`, ...): see `model_arguments` for which of a knob's values applies.
The dataset stays batched by `batch_size`: each step of `Model.train` is one update, split
into micro-batches inside (see `AccumulatingTrainStep`).
"""

from __future__ import annotations

from typing import Any

import mindspore as ms
from mindspore import Tensor, nn, ops
from mindspore.train import LossScaleManager, Model

from msexp.hooks.accumulate import AccumulatingTrainStep, Params, settings
from msexp.hooks.callback import MsexpCallback
from msexp.hooks.channel import active
from msexp.hooks.model_arguments import knob_values, named, refuse_boost
from msexp.training.amp import apply_amp
from msexp.training.dropout import seed_dropouts
from msexp.training.optim import make_optimizer


def optimizer(network: nn.Cell, params: Params, steps_per_epoch: int) -> nn.Optimizer:
    """The optimizer `params["optimizer"]` names (sgd, momentum, adam, adamw, thor), with
    the lr schedule, over `network`'s weights; `steps_per_epoch` counts updates."""
    return make_optimizer(settings(params), network.trainable_params(), steps_per_epoch,
                          network)


def train_network(network: nn.Cell, loss_fn: Any, optimizer: nn.Optimizer,
                  params: Params) -> AccumulatingTrainStep:
    """`network` cast for `params["amp_level"]`, wrapped in msexp's accumulating train step.

    An optimizer built with `loss_scale=L` divides every gradient it gets by L (MindSpore
    pairs it with `FixedLossScaleManager(L, drop_overflow_update=False)`); msexp's step
    unscales the gradients itself, so they reach that optimizer times L (`own_scale`)."""
    values = settings(params)
    seed_dropouts(network, named(params).get("seed", ms.get_seed() or 0))
    if own_scale(optimizer) != 1.0:
        optimizer = _ScaledFor(optimizer)
    return AccumulatingTrainStep(apply_amp(network, values), loss_fn, optimizer, values)


def own_scale(optimizer: nn.Cell) -> float:
    """What `optimizer` divides the gradients it gets by: its `reciprocal_scale`'s inverse
    (`nn.Optimizer`, and optimizers that keep only that, as mindcv's AdamW and Lion, whose
    `loss_scale` stays 1), else its `loss_scale`; 1.0 for none."""
    reciprocal = getattr(optimizer, "reciprocal_scale", None)
    if reciprocal is None:
        return float(getattr(optimizer, "loss_scale", 1.0))
    value = reciprocal.asnumpy() if isinstance(reciprocal, Tensor) else reciprocal
    return 1.0 / float(value)


class _ScaledFor(nn.Cell):
    """`optimizer`, given the true gradients times its own `loss_scale`, which it divides
    them by: its update is the one for the true gradients, its weight decay included."""

    def __init__(self, optimizer: nn.Optimizer):
        super().__init__(auto_prefix=False)  # its parameters keep their names
        self.optimizer = optimizer
        self.scale = Tensor(own_scale(optimizer), ms.float32)
        self.map = ops.HyperMap()

    @property
    def parameters(self) -> Any:
        """The weights the optimizer updates."""
        return self.optimizer.parameters

    def construct(self, gradients):
        return self.optimizer(self.map(ops.partial(ops.mul, self.scale), gradients))


class HookedModel(Model):
    """A `Model` whose training runs msexp's train step: always step by step (the step
    is Python around compiled graphs, which dataset sink mode cannot take), and, in an
    msexp trial, reporting each epoch (an `MsexpCallback` is added if none is given).

    Callbacks get what `Model.train` gives them: `cb_params.network` (the script's
    network), `loss_fn`, `optimizer` (the script's) and `train_network` (the train step,
    whose `optimizer` that is too); `predict` runs the script's network."""

    def keep(self, network: nn.Cell, loss_fn: Any, optimizer: nn.Optimizer) -> HookedModel:
        """Hold the script's network, loss and optimizer where `Model` holds them."""
        self._network, self._loss_fn, self._optimizer = network, loss_fn, optimizer
        self._predict_network = network
        return self

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
          metrics: Any = None, eval_network: nn.Cell | None = None,
          eval_indexes: list[int] | None = None, amp_level: str | None = None,
          boost_level: str = "O0", *, loss_scale_manager: LossScaleManager | None = None,
          keep_batchnorm_fp32: bool | None = None, boost_config_dict: Any = "",
          acc_level: str | None = None) -> HookedModel:
    """`Model(network, loss_fn, optimizer, metrics, ...)` that trains with msexp's techniques,
    as `params` and `Model`'s own arguments set them (`model_arguments`: the sweep's knobs
    first; None: not given), and evaluates `metrics` as usual, with `eval_network` and
    `eval_indexes` where given. `loss_fn=None`, as in `Model(net_with_loss,
    optimizer=opt)`: `network` takes every column of a batch and returns the loss.

    Raises:
        ValueError: an argument clashes with a knob the sweep sets, or asks for boost;
            `metrics` without a loss function or an `eval_network` (as `Model` refuses).
    """
    del boost_config_dict  # read only by boost "O1"/"O2", which msexp refuses
    refuse_boost(boost_level, acc_level)
    values = knob_values(params, amp_level, keep_batchnorm_fp32, loss_scale_manager)
    if loss_fn is None and metrics and eval_network is None:
        raise ValueError("msexp.hooks.model: metrics need an eval_network where loss_fn is "
                         "None (the network computes its own loss), as in Model")
    train = train_network(network, loss_fn, optimizer, values)
    if eval_network is None and metrics:  # as Model builds it: float32 outputs under O2, O3
        eval_network = nn.WithEvalCell(train.network, loss_fn,
                                       values["amp_level"] in ("O2", "O3"))
        eval_indexes = [0, 1, 2]
    return HookedModel(train, metrics=metrics, eval_network=eval_network,
                       eval_indexes=eval_indexes).keep(train.network, loss_fn, optimizer)
