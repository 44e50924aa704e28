"""`hooks.model` keeps `Model`'s contract: what the network returns reaches the loss as
`Model` gives it, callbacks get what `Model.train` gives them, and at micro_size 1 a
hooked script trains as the unhooked one does, its loss scale manager included."""

from __future__ import annotations

import numpy as np
import pytest
from mindcv.optim.adamw import AdamW
from mindspore import Tensor, nn
from mindspore.dataset import NumpySlicesDataset
from mindspore.train import Callback, FixedLossScaleManager, Model

from msexp import hooks

_rng = np.random.default_rng(3)
X = _rng.normal(size=(32, 8)).astype(np.float32)
Y = (X[:, 0] > 0).astype(np.int32)
INITIAL = {name: _rng.normal(0, 0.3, shape).astype(np.float32) for name, shape in
           (("a.weight", (16, 8)), ("a.bias", (16,)), ("b.weight", (2, 16)),
            ("b.bias", (2,)), ("aux.weight", (2, 16)), ("aux.bias", (2,)))}


class TwoHeads(nn.Cell):
    """Logits and auxiliary logits, in the structure `kind` names (Inception-v3 returns
    the tuple in training)."""

    def __init__(self, kind: str = "tensor"):
        super().__init__()
        self.a, self.relu = nn.Dense(8, 16), nn.ReLU()
        self.b, self.aux = nn.Dense(16, 2), nn.Dense(16, 2)
        self.kind = kind
        for param in self.get_parameters():
            param.set_data(Tensor(INITIAL[param.name]))

    def construct(self, x):
        hidden = self.relu(self.a(x))
        if self.kind == "tuple":
            return self.b(hidden), self.aux(hidden)
        if self.kind == "list":
            return [self.b(hidden), self.aux(hidden)]
        if self.kind == "dict":
            return {"logits": self.b(hidden), "aux": self.aux(hidden)}
        return self.b(hidden)


class HeadsLoss(nn.Cell):
    """Inception-v3's own loss shape: the logits' loss plus 0.4 times the auxiliary's."""

    def __init__(self, kind: str = "tensor"):
        super().__init__()
        self.ce, self.kind = nn.CrossEntropyLoss(), kind

    def construct(self, out, labels):
        if self.kind == "tensor":
            return self.ce(out, labels)
        if self.kind == "dict":
            return self.ce(out["logits"], labels) + 0.4 * self.ce(out["aux"], labels)
        return self.ce(out[0], labels) + 0.4 * self.ce(out[1], labels)


class Seen(Callback):
    """Each step's loss, and what the callbacks' params held at the first step."""

    def __init__(self) -> None:
        super().__init__()
        self.losses: list[float] = []
        self.params: dict[str, object] = {}

    def on_train_step_end(self, run_context) -> None:
        args = run_context.original_args()
        self.losses.append(float(args.net_outputs.asnumpy()))
        if not self.params:
            self.params = {k: args.get(k) for k in ("network", "optimizer", "loss_fn",
                                                    "train_network")}


def data() -> NumpySlicesDataset:
    return NumpySlicesDataset((X, Y), ["x", "y"], shuffle=False).batch(8)


def losses(hooked: bool, kind: str = "tensor", micro_size: int = 1,
           optimizer=lambda weights: nn.Momentum(weights, 0.1, 0.9), **model: object
           ) -> tuple[list[float], Seen, nn.Cell, nn.Cell]:
    """Two epochs of `Model.train`, unhooked or through `hooks.model`: each update's loss,
    the callback, the network and the optimizer."""
    network, loss = TwoHeads(kind), HeadsLoss(kind)
    opt = optimizer(network.trainable_params())
    trains = hooks.model(network, loss, opt, {"micro_size": micro_size}, **model) \
        if hooked else Model(network, loss, opt, **model)
    seen = Seen()
    trains.train(2, data(), callbacks=[seen])
    return seen.losses, seen, network, opt


@pytest.mark.parametrize("kind", ["tuple", "list", "dict"])
def test_any_output_structure_reaches_the_loss_as_model_gives_it(kind: str) -> None:
    """(logits, aux_logits) reach the loss as a pair; at micro_size 1 the losses are
    Model's to the bit, at micro_size 2 the same to float rounding."""
    # mutation: step.py's `ops.cast(call(network, x), ms.float32)` (fails: Cast of a Tuple)
    want = losses(False, kind)[0]
    assert losses(True, kind)[0] == want
    np.testing.assert_allclose(losses(True, kind, micro_size=2)[0], want, rtol=1e-6)
    assert len(set(want)) == len(want) == 8, "the weights never moved"


def test_callbacks_get_what_model_train_gives_them() -> None:
    """mindcv's StateMonitor reads `cb_params.optimizer` (its global_step, its lr)."""
    # mutation: hooks.model without HookedModel.keep (cb_params.optimizer None)
    _, seen, network, opt = losses(True)
    assert seen.params["optimizer"] is opt
    assert seen.params["network"] is network
    assert isinstance(seen.params["loss_fn"], HeadsLoss)
    train_network = seen.params["train_network"]
    assert isinstance(train_network, hooks.AccumulatingTrainStep)
    assert train_network.network is network
    assert int(opt.global_step.asnumpy()[0]) == 8, "one optimizer step per update"


def test_predict_runs_the_scripts_network() -> None:
    network = TwoHeads()
    model = hooks.model(network, HeadsLoss(), nn.Momentum(network.trainable_params(), 0.1,
                                                          0.9), {})
    # mutation: without `_predict_network = network` it runs the train step (TypeError)
    got = model.predict(Tensor(X[:4])).asnumpy()
    np.testing.assert_array_equal(got, network(Tensor(X[:4])).asnumpy())


def mindcv_adamw(weights) -> nn.Cell:
    """mindcv's AdamW as mindcv's train.py builds it under a fixed loss scale: it divides
    the gradients by 1024 through its `reciprocal_scale`, its `loss_scale` stays 1."""
    return AdamW(weights, learning_rate=0.01, weight_decay=0.05, loss_scale=1024.0)


@pytest.mark.parametrize("optimizer", [
    mindcv_adamw,
    lambda weights: nn.Momentum(weights, 0.1, 0.9, weight_decay=0.01, loss_scale=1024.0),
], ids=["mindcv_adamw", "momentum"])
def test_at_micro_size_1_a_hooked_script_trains_as_model_with_its_loss_scale_manager(
        optimizer) -> None:
    """mindcv's pair (AdamW(loss_scale=1024), FixedLossScaleManager(1024,
    drop_overflow_update=False)) ended 2.246405 hooked against 2.243966 unhooked on
    EdgeNeXt: the hooks unscaled the gradients and the optimizer divided them again."""
    # mutation: own_scale reading only `loss_scale` (mindcv's AdamW: 1.0): from update 2 on
    manager = FixedLossScaleManager(1024.0, drop_overflow_update=False)
    want = losses(False, optimizer=optimizer, loss_scale_manager=manager)[0]
    assert losses(True, optimizer=optimizer, loss_scale_manager=manager)[0] == want
    assert len(set(want)) == len(want) == 8, "the weights never moved"


@pytest.mark.parametrize("drop", [True, False])
def test_a_fixed_managers_drop_overflow_update_is_honoured_on_a_real_overflow(
        drop: bool) -> None:
    """A scale of 2**127 on inputs 1000 times larger overflows float32 in the backward
    pass: with drop_overflow_update the update is skipped (the weights stay), without it
    applied."""
    # mutation: make_scaler's fixed branch returning drop_overflow_update True always
    network = TwoHeads()
    model = hooks.model(network, HeadsLoss(), nn.SGD(network.trainable_params(), 0.1), {},
                        loss_scale_manager=FixedLossScaleManager(2.0**127, drop))
    step = model.train_network
    loss = step(Tensor(1000 * X[:8]), Tensor(Y[:8]))
    assert np.isfinite(loss.asnumpy()), "the loss itself is unscaled"
    after = network.b.weight.asnumpy()
    assert step.overflow_steps == 1
    assert step.skipped_updates == int(drop)
    if drop:
        np.testing.assert_array_equal(after, INITIAL["b.weight"])
    else:
        assert not np.array_equal(after, INITIAL["b.weight"]), "the update was skipped"


def test_the_optimizers_own_scale_is_read_where_it_keeps_it() -> None:
    from msexp.hooks.techniques import own_scale

    weights = TwoHeads().trainable_params()
    assert own_scale(mindcv_adamw(weights)) == 1024.0
    assert own_scale(nn.Momentum(weights, 0.1, 0.9, loss_scale=8.0)) == 8.0
    assert own_scale(nn.SGD(weights, 0.1)) == 1.0


def own_loss_losses(hooked: bool, micro_size: int = 1) -> list[float]:
    """Two epochs of a network that computes its own loss from every column (`Model(
    net_with_loss, optimizer=opt)`, as the model zoo's recommendation and audio scripts)."""
    network = nn.WithLossCell(TwoHeads(), nn.CrossEntropyLoss())
    opt = nn.Momentum(network.trainable_params(), 0.1, 0.9)
    trains = hooks.model(network, None, opt, {"micro_size": micro_size}) if hooked \
        else Model(network, optimizer=opt)
    seen = Seen()
    trains.train(2, data(), callbacks=[seen])
    return seen.losses


def test_a_network_with_its_own_loss_trains_as_model_trains_it() -> None:
    # mutation: AccumulatingTrainStep passing the network every column but the last
    want = own_loss_losses(False)
    assert own_loss_losses(True) == want
    np.testing.assert_allclose(own_loss_losses(True, micro_size=4), want, rtol=1e-6)
    assert len(set(want)) == len(want) == 8, "the weights never moved"


def test_metrics_without_a_loss_or_an_eval_network_are_refused_as_model_refuses() -> None:
    network = nn.WithLossCell(TwoHeads(), nn.CrossEntropyLoss())
    opt = nn.Momentum(network.trainable_params(), 0.1, 0.9)
    with pytest.raises(ValueError, match="eval_network"):
        hooks.model(network, None, opt, {}, metrics={"acc": nn.Accuracy()})



class MaskedLoss(nn.Cell):
    """A network that computes its own loss from three columns (input, mask, labels), as
    an NLP script's `net_with_loss` does."""

    def __init__(self):
        super().__init__()
        self.net, self.ce = TwoHeads(), nn.CrossEntropyLoss()

    def construct(self, x, mask, y):
        return self.ce(self.net(x * mask), y)


@pytest.mark.parametrize("columns", [2, 3])
def test_a_micro_batchs_columns_compile_each_graph_once(columns: int) -> None:
    """A tuple of tensors is a constant to a compiled graph: each micro-batch compiled
    anew (this network at micro_size 4 took 38 s for 16 updates; 1.6 s once)."""
    import logging

    from mindspore import log as ms_log

    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    ms_log._get_logger().addHandler(handler)
    network = MaskedLoss() if columns == 3 else nn.WithLossCell(TwoHeads(),
                                                                   nn.CrossEntropyLoss())
    data, names = ((X, Y), ["x", "y"]) if columns == 2 else \
        ((X, np.ones_like(X), Y), ["x", "mask", "y"])
    try:
        opt = nn.Momentum(network.trainable_params(), 0.1, 0.9)
        hooks.model(network, None, opt, {"micro_size": 4}).train(
            1, NumpySlicesDataset(data, names, shuffle=False).batch(8))
    finally:
        ms_log._get_logger().removeHandler(handler)
    assert not [line for line in said if "recompil" in line]
