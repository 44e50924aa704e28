"""Gradient accumulation is exact: k micro-batches give the full-batch update."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest

from msexp.experiment import load_experiment
from msexp.spec.params import parse_params
from msexp.training import data
from msexp.training.amp import apply_amp
from msexp.training.loss_scale import make_scaler
from msexp.training.optim import make_optimizer
from msexp.training.step import TrainStep
from tests.conftest import builtin

BATCH = 64
mlp_digits = builtin("mlp_digits")


def params(**overrides):
    exp = load_experiment("mlp_digits")
    return parse_params("test", exp.knobs, {"batch_size": BATCH, **overrides}, {}).resolve({})


def weights_after_updates(micro_size: int, updates: int = 1, fused: bool = False,
                          **overrides) -> list[np.ndarray]:
    p = params(micro_size=micro_size, **overrides)
    ms.set_seed(p["seed"])
    workload = mlp_digits.build(p)
    network = apply_amp(workload.network, p)
    optimizer = make_optimizer(p, network.trainable_params(), steps_per_epoch=10)
    scaler, drop = make_scaler(p)
    step = TrainStep(network, workload.loss_fn, optimizer, micro_size, scaler, drop,
                     fused=fused)
    assert (step.buffers == ()) == fused
    batches = data.updates(workload.train, BATCH, micro_size, seed=7)
    for _ in range(updates):
        micro_batches = next(batches)
        assert len(micro_batches) == micro_size
        assert all(len(x) == BATCH // micro_size for x, _ in micro_batches)
        step([(ms.Tensor(x), ms.Tensor(y)) for x, y in micro_batches])
    return [w.asnumpy().copy() for w in workload.network.trainable_params()]


@pytest.mark.parametrize("micro_size", [2, 4])
def test_one_update_equals_the_full_batch_update(micro_size: int) -> None:
    full = weights_after_updates(1)
    accumulated = weights_after_updates(micro_size)
    initial = weights_after_updates(1, updates=0)
    for f, a, i in zip(full, accumulated, initial):
        assert not np.allclose(f, i), "the update must move the weights"
        np.testing.assert_allclose(a, f, atol=1e-5, rtol=0)


@pytest.mark.parametrize("settings", [{}, {"amp_level": "O2", "loss_scale": "dynamic",
                                           "loss_scale_window": 2}], ids=["O0", "O2 dynamic"])
def test_the_fused_step_makes_the_buffered_steps_updates(settings) -> None:
    # micro_size 1: one graph (grad and apply) or two (into buffers, then apply) are one
    # technique; which runs is a speed choice (step.fuses), never a numerical one
    fused = weights_after_updates(1, updates=4, fused=True, **settings)
    buffered = weights_after_updates(1, updates=4, **settings)
    for f, b in zip(fused, buffered):
        np.testing.assert_array_equal(f, b)


def test_buffers_are_cleared_between_updates() -> None:
    # three updates in a row stay equal: a buffer that was not zeroed would double-count
    full = weights_after_updates(1, updates=3)
    accumulated = weights_after_updates(4, updates=3)
    for f, a in zip(full, accumulated):
        np.testing.assert_allclose(a, f, atol=1e-5, rtol=0)


def test_adam_accumulates_exactly_too() -> None:
    full = weights_after_updates(1, optimizer="adam", lr=0.001)
    accumulated = weights_after_updates(2, optimizer="adam", lr=0.001)
    for f, a in zip(full, accumulated):
        np.testing.assert_allclose(a, f, atol=1e-5, rtol=0)


def test_micro_batches_cover_the_batch_in_order() -> None:
    x = np.arange(20, dtype=np.float32)[:, None]
    y = np.arange(20, dtype=np.int32)
    (first, *_) = data.updates((x, y), batch_size=8, micro_size=4, seed=0)
    assert [len(b[1]) for b in first] == [2, 2, 2, 2]
    labels = np.concatenate([b[1] for b in first])
    # mutation (issue 18): micro-batches reversed; they must follow the shuffled order
    order = np.random.default_rng(0).permutation(20)[:8]
    assert labels.tolist() == order.tolist()
    assert all((b[0][:, 0] == b[1]).all() for b in first), "inputs stay with their labels"
    updates = list(data.updates((x, y), batch_size=8, micro_size=4, seed=0))
    assert len(updates) == 2  # 20 samples, batch 8: the remainder is dropped
