"""The built-in loop's train_loss is comparable across a swept micro_size: each update's loss
is its batch's mean loss, whatever number of micro-batches it was split into."""

from __future__ import annotations

import numpy as np
import pytest
from mindspore import Tensor, amp, nn

from msexp.training import data
from msexp.training.records import loss_metrics
from msexp.training.step import TrainStep

FEATURES, CLASSES, BATCH = 8, 3, 16
_rng = np.random.default_rng(1)
X = _rng.normal(size=(4 * BATCH, FEATURES)).astype(np.float32)
Y = (X[:, 0] > 0).astype(np.int32) + (X[:, 1] > 1).astype(np.int32)
INITIAL = [_rng.normal(0, 0.5, (16, FEATURES)), np.zeros(16), _rng.normal(0, 0.5, (CLASSES, 16)),
           np.zeros(CLASSES)]


@pytest.mark.parametrize("micro_size", [2, 4])  # 1: one micro-batch is the batch
def test_each_updates_loss_is_its_batchs_mean_loss_at_every_micro_size(micro_size: int) -> None:
    """Two updates, with a dynamic loss scale: the loss the loop reports for each is the
    network's loss on the whole batch at the weights the update starts from (not the sum of
    the micro-batches' losses, not one of them, not a scaled one)."""
    # the loop (training/loop.py) reports the last of these as train_loss, their mean as
    # train_loss_epoch (records.loss_metrics)
    network = nn.SequentialCell(nn.Dense(FEATURES, 16), nn.ReLU(), nn.Dense(16, CLASSES))
    for param, value in zip(network.trainable_params(), INITIAL):
        param.set_data(Tensor(value.astype(np.float32)))
    loss_fn = nn.CrossEntropyLoss()
    step = TrainStep(network, loss_fn, nn.Momentum(network.trainable_params(), 0.1, 0.9),
                     micro_size, amp.DynamicLossScaler(1024.0, 2, 1000), True)
    updates = data.updates((X, Y), BATCH, micro_size, seed=7)
    for micro_batches in (next(updates), next(updates)):
        assert len(micro_batches) == micro_size
        x = Tensor(np.concatenate([x for x, _ in micro_batches]))
        y = Tensor(np.concatenate([y for _, y in micro_batches]))
        whole = float(loss_fn(network(x), y).asnumpy())
        parts = [float(loss_fn(network(Tensor(x)), Tensor(y)).asnumpy())
                 for x, y in micro_batches]
        loss, finite = step([(Tensor(x), Tensor(y)) for x, y in micro_batches])
        assert finite and loss == pytest.approx(whole, rel=1e-5)
        assert micro_size == 1 or max(parts) - min(parts) > 0.01, "the micro-batches differ"


@pytest.mark.parametrize(("losses", "last", "mean"), [
    ([1.2, 0.3, 0.6], 0.6, 0.7),  # the last update: neither the first, the smallest nor the mean
    ([0.4, float("inf"), 0.8, float("nan")], 0.8, 0.6),  # skipped updates are left out
    ([3.0], 3.0, 3.0),
])
def test_an_epochs_two_losses_are_its_last_finite_update_and_the_mean(
        losses: list[float], last: float, mean: float) -> None:
    """One name, one meaning (issue 49): `train_loss` is the last finite update's loss (the
    series' last point in MLflow), `train_loss_epoch` their mean."""
    found = loss_metrics(losses)
    assert found == {"train_loss": last, "train_loss_epoch": pytest.approx(mean)}


def test_an_epoch_without_a_finite_update_has_no_loss() -> None:
    found = loss_metrics([float("inf"), float("nan")])
    assert all(np.isnan(v) for v in found.values()) and set(found) == {
        "train_loss", "train_loss_epoch"}
