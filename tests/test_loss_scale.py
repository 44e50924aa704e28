"""Loss scaling in TrainStep: underflow, overflow, accumulation and the fixed-scale trap."""

from __future__ import annotations

from typing import Any

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn

from msexp.experiment import Workload
from msexp.training.amp import apply_amp
from msexp.training.loop import train
from msexp.training.loss_scale import make_scaler
from msexp.training.optim import make_optimizer
from msexp.training.step import TrainStep

FEATURES, CLASSES = 8, 4
RNG = np.random.default_rng(7)
INITIAL = {"0.weight": RNG.standard_normal((16, FEATURES)) * 0.3, "0.bias": np.zeros(16),
           "2.weight": RNG.standard_normal((CLASSES, 16)) * 0.3, "2.bias": np.zeros(CLASSES)}
X = RNG.standard_normal((16, FEATURES)).astype(np.float32)
Y = RNG.integers(0, CLASSES, 16).astype(np.int32)


def mlp(amp_level: str = "O0") -> nn.Cell:
    """The same small MLP every time (weights from INITIAL), cast for `amp_level`."""
    network = nn.SequentialCell(nn.Dense(FEATURES, 16), nn.ReLU(), nn.Dense(16, CLASSES))
    for param in network.get_parameters():
        param.set_data(ms.Tensor(INITIAL[param.name].astype(np.float32)))
    return apply_amp(network, {"amp_level": amp_level, "amp_dtype": "float16",
                               "keep_batchnorm_fp32": True})


def settings(**overrides: Any) -> dict[str, Any]:
    values = {"loss_scale": "none", "loss_scale_value": 1024.0, "loss_scale_factor": 2,
              "loss_scale_window": 1000, "drop_overflow_update": True, "optimizer": "sgd",
              "lr": 0.05, "momentum": 0.9, "weight_decay": 0.0, "epochs": 1,
              "lr_schedule": "constant", "warmup_epochs": 0}
    values.update(overrides)
    return values


def make_step(network: nn.Cell, micro_size: int = 1, loss_fn: Any = None,
              **overrides: Any) -> TrainStep:
    params = settings(**overrides)
    optimizer = make_optimizer(params, network.trainable_params(), steps_per_epoch=10)
    scaler, drop = make_scaler(params)
    return TrainStep(network, loss_fn or nn.CrossEntropyLoss(), optimizer, micro_size,
                     scaler, drop)


def batches(x: np.ndarray, y: np.ndarray, micro_size: int = 1) -> list[tuple[Any, Any]]:
    return [(ms.Tensor(xs), ms.Tensor(ys))
            for xs, ys in zip(np.split(x, micro_size), np.split(y, micro_size))]


def weights(network: nn.Cell) -> dict[str, np.ndarray]:
    return {p.name: p.asnumpy().copy() for p in network.trainable_params()}


def change(before: dict[str, np.ndarray], after: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([(after[k] - before[k]).ravel() for k in sorted(before)])


def tiny_loss(scale: float):
    """Cross-entropy multiplied by `scale`, small enough to underflow in FP16."""
    cross_entropy = nn.CrossEntropyLoss()

    def loss(logits, labels):
        return cross_entropy(logits, labels) * scale

    return loss


@pytest.mark.slow  # over 3 s: the fast tier stays under 5 min
def test_underflow_is_recovered_by_dynamic_scaling() -> None:
    lr, tiny = 2.0 ** 20, 2.0 ** -24  # a huge lr makes the tiny gradients visible in the weights

    def gradient(amp_level: str, loss_scale: str) -> np.ndarray:
        network = mlp(amp_level)
        before = weights(network)
        step = make_step(network, loss_fn=tiny_loss(tiny), loss_scale=loss_scale, lr=lr,
                         loss_scale_value=2.0 ** 20)
        _, finite = step(batches(X, Y))
        assert finite
        return -change(before, weights(network)) / lr

    fp32 = gradient("O0", "none")
    unscaled_fp16 = gradient("O2", "none")
    scaled_fp16 = gradient("O2", "dynamic")
    assert np.abs(fp32).max() > 0
    assert np.abs(fp32).max() < 1e-7  # below FP16's smallest subnormal (6e-8) once per sample
    assert not unscaled_fp16.any(), "without scaling every FP16 gradient flushes to zero"
    assert np.count_nonzero(scaled_fp16) == np.count_nonzero(fp32)
    np.testing.assert_allclose(scaled_fp16, fp32, rtol=2e-2, atol=2e-2 * np.abs(fp32).max())


@pytest.mark.slow  # over 3 s: the fast tier stays under 5 min
def test_overflow_skips_the_update_then_the_scale_backs_off_and_regrows() -> None:
    window, factor, initial = 3, 2, 1024.0
    network = mlp("O2")
    step = make_step(network, loss_scale="dynamic", loss_scale_value=initial,
                     loss_scale_factor=factor, loss_scale_window=window, optimizer="momentum")
    poisoned = X.copy()
    poisoned[3, 0] = np.inf  # one sample's input: its gradients become inf/nan
    before = weights(network)
    _, finite = step(batches(poisoned, Y))
    assert not finite
    assert step.loss_scale == initial / factor
    for name, value in weights(network).items():
        np.testing.assert_array_equal(value, before[name], err_msg=f"{name} was updated")

    reference = mlp("O2")  # a fresh step: a skipped update must leave no trace
    make_step(reference, loss_scale="dynamic", loss_scale_value=initial / factor,
              optimizer="momentum")(batches(X, Y))
    scales = []
    for _ in range(window):
        _, finite = step(batches(X, Y))
        assert finite
        scales.append(step.loss_scale)
        if len(scales) == 1:
            for name, value in weights(reference).items():
                np.testing.assert_allclose(weights(network)[name], value, rtol=1e-6, atol=1e-7)
    assert scales == [initial / factor] * (window - 1) + [initial]


@pytest.mark.slow  # over 3 s: the fast tier stays under 5 min
def test_accumulation_with_loss_scaling_matches_one_big_batch() -> None:
    def trained(micro_size: int) -> dict[str, np.ndarray]:
        network = mlp("O2")
        step = make_step(network, micro_size, loss_scale="dynamic", loss_scale_value=4096.0,
                         optimizer="momentum")
        for _ in range(3):
            _, finite = step(batches(X, Y, micro_size))
            assert finite
        return weights(network)

    whole, accumulated = trained(1), trained(4)
    moved = change(weights(mlp()), whole)
    assert np.abs(moved).max() > 1e-2
    for name, value in whole.items():
        np.testing.assert_allclose(accumulated[name], value, rtol=5e-3, atol=2e-3)


@pytest.mark.parametrize("optimizer", ["momentum", "adamw"])
def test_fixed_scale_without_dropping_updates_like_no_scaling(optimizer: str) -> None:
    """Seed 002's trap: the scaled gradients must be unscaled before the optimizer."""
    def trained(loss_scale: str) -> dict[str, np.ndarray]:
        network = mlp()
        step = make_step(network, 2, loss_scale=loss_scale, loss_scale_value=1024.0,
                         drop_overflow_update=False, optimizer=optimizer)
        for _ in range(3):
            step(batches(X, Y, 2))
        assert step.loss_scale == (1024.0 if loss_scale == "fixed" else None)
        return weights(network)

    plain, scaled = trained("none"), trained("fixed")
    assert np.abs(change(weights(mlp()), plain)).max() > 1e-3
    for name, value in plain.items():
        np.testing.assert_allclose(scaled[name], value, rtol=1e-5, atol=1e-6)


def test_training_reports_overflows_skips_and_the_scale_series() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, FEATURES)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    workload = Workload(mlp(), nn.CrossEntropyLoss(), (x, y), (x, y))
    events: list[Any] = []
    params = settings(amp_level="O2", amp_dtype="float16", keep_batchnorm_fp32=True,
                      loss_scale="dynamic", loss_scale_value=2.0 ** 40, loss_scale_window=2,
                      batch_size=16, micro_size=1, seed=0, epochs=2)
    final = train(workload, params, events.append).metrics
    series = [scale for e in events for scale in e.series["loss_scale"]]
    assert len(series) == 8 and len(events) == 2
    assert final["overflow_steps"] >= 1  # 2**40 overflows FP16 gradients
    assert final["skipped_updates"] == final["overflow_steps"]
    assert series[0] == 2.0 ** 39
    assert final["loss_scale"] == series[-1] < 2.0 ** 40
    assert all("eval_accuracy" in e.metrics for e in events)
