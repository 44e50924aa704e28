"""msexp.hooks: msexp's techniques inside a user's `Model.train`, and reporting to msexp."""

from __future__ import annotations

import numpy as np
import pytest
from mindspore import Tensor, nn
from mindspore.dataset import NumpySlicesDataset
from mindspore.train import Accuracy

from msexp import hooks

FEATURES, CLASSES, SAMPLES, BATCH = 8, 3, 64, 16
_rng = np.random.default_rng(0)
X = _rng.normal(size=(SAMPLES, FEATURES)).astype(np.float32)
Y = (X[:, 0] > 0).astype(np.int32) + (X[:, 1] > 1).astype(np.int32)
INITIAL = {"0.weight": _rng.normal(0, 0.3, (16, FEATURES)), "0.bias": np.zeros(16),
           "2.weight": _rng.normal(0, 0.3, (CLASSES, 16)), "2.bias": np.zeros(CLASSES)}


def mlp() -> nn.Cell:
    network = nn.SequentialCell(nn.Dense(FEATURES, 16), nn.ReLU(), nn.Dense(16, CLASSES))
    for param in network.get_parameters():
        param.set_data(Tensor(INITIAL[param.name].astype(np.float32)))
    return network


def train_with_model(params: dict) -> dict[str, np.ndarray]:
    """Two epochs of `Model.train` through msexp's train step; the weights after it."""
    network, loss = mlp(), nn.CrossEntropyLoss()
    steps = SAMPLES // params["batch_size"]
    opt = hooks.optimizer(network, params, steps)
    model = hooks.model(network, loss, opt, params, metrics={"Accuracy": Accuracy()})
    data = NumpySlicesDataset((X, Y), ["x", "y"], shuffle=False)
    model.train(2, data.batch(hooks.micro_batch(params)), dataset_sink_mode=False)
    return {p.name: p.asnumpy() for p in network.trainable_params()}


@pytest.mark.parametrize("loss_scale", ["none", "dynamic"])
@pytest.mark.parametrize("micro_size", [2, 4])
def test_accumulation_through_model_train_equals_the_full_batch(micro_size: int,
                                                                loss_scale: str) -> None:
    base = {"batch_size": BATCH, "optimizer": "momentum", "lr": 0.1, "epochs": 2,
            "loss_scale": loss_scale, "loss_scale_value": 1024.0}
    full = train_with_model({**base, "micro_size": 1})
    accumulated = train_with_model({**base, "micro_size": micro_size})
    assert not np.allclose(full["0.weight"], INITIAL["0.weight"]), "the weights never moved"
    for name, want in full.items():
        np.testing.assert_allclose(accumulated[name], want, rtol=1e-5, atol=1e-5, err_msg=name)


def test_hooks_do_nothing_outside_msexp(monkeypatch, tmp_path) -> None:
    for name in ("MSEXP_EVENTS", "MSEXP_TRIAL", "MSEXP_OUTPUT_DIR", "MSEXP_RESUME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    hooks.report(1, eval_accuracy=0.5)
    assert not hooks.should_stop() and hooks.params() == {} and hooks.resume_dir() is None
    assert list(tmp_path.iterdir()) == []
    callback = hooks.MsexpCallback()
    assert not callback.enabled
