"""Checkpoints: saved state loads anywhere, a resumed trial equals an uninterrupted one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, nn

from msexp.experiment import Workload
from msexp.training.checkpoint import CheckpointPlan, latest
from msexp.training.loop import train
from msexp.training.records import Stopped, Target

_rng = np.random.default_rng(3)
X = _rng.normal(size=(192, 8)).astype(np.float32)
Y = ((X[:, 0] + X[:, 1]) > 0).astype(np.int32) + (X[:, 2] > 1).astype(np.int32)
INITIAL = {"0.weight": _rng.normal(0, 0.3, (16, 8)), "0.bias": np.zeros(16),
           "2.weight": _rng.normal(0, 0.3, (3, 16)), "2.bias": np.zeros(3)}


def mlp() -> nn.Cell:
    network = nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 3))
    for param in network.get_parameters():
        param.set_data(Tensor(INITIAL[param.name].astype(np.float32)))
    return network


def workload() -> Workload:
    return Workload(mlp(), nn.CrossEntropyLoss(), (X[:128], Y[:128]), (X[128:], Y[128:]))


def params(**overrides: Any) -> dict[str, Any]:
    values = {"epochs": 6, "batch_size": 32, "micro_size": 2, "seed": 0, "lr": 0.05,
              "optimizer": "adam", "weight_decay": 0.0, "lr_schedule": "cosine",
              "warmup_epochs": 1, "amp_level": "O0", "loss_scale": "dynamic",
              "loss_scale_value": 1024.0, "loss_scale_factor": 2, "loss_scale_window": 3,
              "momentum": 0.9}
    return {**values, **overrides}


def stop_after(epochs: int):
    """A stop request that comes once `epochs` epochs were reported."""
    seen: list[Any] = []
    return seen.append, lambda: len(seen) >= epochs


# mutation: resume loads the oldest epoch-*.ckpt instead of the record's newest (keep: all)
@pytest.mark.parametrize("keep", ["last", "all"])
def test_a_resumed_trial_equals_an_uninterrupted_one(tmp_path: Path, keep: str) -> None:
    whole: list[Any] = []
    uninterrupted = train(workload(), params(), whole.append).metrics
    plan = CheckpointPlan(tmp_path / "ckpt", every=1, keep=keep)
    on_epoch, stop = stop_after(3)
    with pytest.raises(Stopped):
        train(workload(), params(), on_epoch, stop, plan=plan)
    assert latest(plan.folder).epoch == 3
    kept = sorted(p.name for p in plan.folder.glob("epoch-*.ckpt"))
    assert kept == (["epoch-0003.ckpt"] if keep == "last" else
                    ["epoch-0001.ckpt", "epoch-0002.ckpt", "epoch-0003.ckpt"])
    resumed_epochs: list[Any] = []
    resumed = train(workload(), params(), resumed_epochs.append, plan=plan)
    assert [e.epoch for e in resumed_epochs] == [1, 2, 3, 4, 5, 6]
    assert resumed.metrics["eval_loss"] == pytest.approx(uninterrupted["eval_loss"], abs=1e-6)
    for got, want in zip(resumed_epochs, whole):
        assert got.metrics["eval_loss"] == pytest.approx(want.metrics["eval_loss"], abs=1e-6)
        assert got.step == want.step
    assert resumed.metrics["loss_scale"] == uninterrupted["loss_scale"]


def test_the_checkpoint_loads_into_a_fresh_network(tmp_path: Path) -> None:
    plan = CheckpointPlan(tmp_path / "ckpt", every=2, keep="last")
    outcome = train(workload(), params(epochs=4), lambda e: None, plan=plan)
    assert outcome.checkpoint == plan.folder / "epoch-0004.ckpt"
    assert sorted(p.name for p in plan.folder.glob("*.ckpt")) == ["epoch-0004.ckpt"]
    fresh = nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 3))
    ms.load_param_into_net(fresh, ms.load_checkpoint(str(outcome.checkpoint)))
    fresh.set_train(False)
    logits = fresh(Tensor(X[128:])).asnumpy()
    accuracy = float((logits.argmax(axis=1) == Y[128:]).mean())
    assert accuracy == pytest.approx(outcome.metrics["eval_accuracy"])


def test_keep_best_keeps_the_best_epoch(tmp_path: Path) -> None:
    plan = CheckpointPlan(tmp_path / "ckpt", keep="best", metric="eval_loss", maximize=False)
    epochs: list[Any] = []
    outcome = train(workload(), params(lr=0.3, optimizer="sgd", lr_schedule="constant",
                                       warmup_epochs=0), epochs.append, plan=plan)
    best = min(epochs, key=lambda e: e.metrics["eval_loss"])
    assert outcome.checkpoint == plan.folder / f"epoch-{best.epoch:04d}.ckpt"
    assert [p.name for p in plan.folder.glob("*.ckpt")] == [outcome.checkpoint.name]
    record = json.loads((plan.folder / "state.json").read_text())
    assert record["best"]["epoch"] == best.epoch


def test_keep_none_leaves_nothing_at_the_end(tmp_path: Path) -> None:
    plan = CheckpointPlan(tmp_path / "ckpt", keep="none")
    outcome = train(workload(), params(epochs=2), lambda e: None, plan=plan)
    assert outcome.checkpoint is None and list(plan.folder.iterdir()) == []


def test_init_from_a_checkpoint_continues_training_it(tmp_path: Path) -> None:
    plan = CheckpointPlan(tmp_path / "ckpt")
    first = train(workload(), params(epochs=2), lambda e: None, plan=plan)
    evaluated = train(workload(), params(epochs=0), lambda e: None,
                      init_from=first.checkpoint).metrics
    assert evaluated["eval_loss"] == pytest.approx(first.metrics["eval_loss"], abs=1e-6)
    more = train(workload(), params(epochs=2), lambda e: None, init_from=first.checkpoint)
    assert more.metrics["eval_loss"] != pytest.approx(first.metrics["eval_loss"], abs=1e-4)


def test_a_metric_exactly_on_its_target_has_reached_it(tmp_path: Path) -> None:
    """Every eval sample is predicted as class 0 and 270 of 300 are: accuracy 0.9 exactly."""
    # mutation: the target counts as reached only above it, not at it
    eval_y = np.array([0] * 270 + [1] * 30, dtype=np.int32)
    eval_x = np.zeros((300, 8), np.float32)
    trained = Workload(mlp(), nn.CrossEntropyLoss(), (X[:64], np.zeros(64, np.int32)),
                       (eval_x, eval_y))
    epochs: list[Any] = []
    at = train(trained, params(epochs=2, loss_scale="none"), epochs.append,
               target=Target("eval_accuracy", 0.9, maximize=True)).metrics
    assert [e.metrics["eval_accuracy"] for e in epochs] == [270 / 300] * 2
    assert at["epochs_to_target"] == 1
    low = epochs[0].metrics["eval_loss"]
    on_loss = Target("eval_loss", low, maximize=False)
    assert on_loss.reached({"eval_loss": low}) and not on_loss.reached({"eval_loss": low * 1.01})
