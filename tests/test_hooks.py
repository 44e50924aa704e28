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


# -- reporting to msexp, in a script msexp runs (mutation profile "hosts") -------------

@pytest.fixture
def in_a_trial(monkeypatch, tmp_path):
    """The environment msexp gives a trial's script; its events file."""
    from msexp.hooks import channel

    events = tmp_path / "events.jsonl"
    monkeypatch.setenv("MSEXP_EVENTS", str(events))
    monkeypatch.delenv("RANK_ID", raising=False)
    monkeypatch.setitem(channel._state, "writer", None)
    monkeypatch.setitem(channel._state, "stop", False)
    yield events
    if channel._state["writer"] is not None:
        channel._state["writer"].stream.close()


def reported(events) -> list:
    from msexp.execution.protocol import read_events

    return [(e.epoch, e.step, e.metrics) for e in read_events(events)]


def test_report_writes_each_epoch_for_rank_0_only(in_a_trial, monkeypatch) -> None:
    hooks.report(1, eval_accuracy=np.float32(0.5))
    hooks.report(2, 7, eval_accuracy=1)
    monkeypatch.setenv("RANK_ID", "1")
    assert not hooks.active()
    hooks.report(3, eval_accuracy=0.25)
    monkeypatch.setenv("RANK_ID", "0")
    assert hooks.active()
    epochs = reported(in_a_trial)
    assert epochs == [(1, 1, {"eval_accuracy": 0.5}), (2, 7, {"eval_accuracy": 1.0})]
    assert all(type(v) is float for _, _, m in epochs for v in m.values())


def test_a_trial_reads_its_params_and_folders(monkeypatch, tmp_path) -> None:
    (tmp_path / "params.json").write_text('{"lr": 0.1}')
    monkeypatch.setenv("MSEXP_TRIAL", str(tmp_path / "params.json"))
    monkeypatch.setenv("MSEXP_OUTPUT_DIR", str(tmp_path / "out" / "deep"))
    monkeypatch.setenv("MSEXP_RESUME", str(tmp_path / "out"))
    assert hooks.params() == {"lr": 0.1}
    assert hooks.output_dir("elsewhere") == tmp_path / "out" / "deep"
    assert (tmp_path / "out" / "deep").is_dir() and not (tmp_path / "elsewhere").exists()
    assert hooks.resume_dir() == tmp_path / "out"
    monkeypatch.delenv("MSEXP_OUTPUT_DIR")
    monkeypatch.chdir(tmp_path)
    assert hooks.output_dir("elsewhere") == __import__("pathlib").Path("elsewhere")
    assert (tmp_path / "elsewhere").is_dir()


def test_the_stop_signal_sets_should_stop(in_a_trial) -> None:
    import signal

    from msexp.hooks import channel

    assert not hooks.should_stop()
    channel._request_stop(signal.SIGUSR1, None)
    assert hooks.should_stop()


def test_the_callback_reports_each_epoch_and_stops_when_told(in_a_trial) -> None:
    from msexp.hooks import channel

    params = {"batch_size": BATCH, "optimizer": "momentum", "lr": 0.1}
    network, loss = mlp(), nn.CrossEntropyLoss()
    opt = hooks.optimizer(network, params, SAMPLES // BATCH)
    model = hooks.model(network, loss, opt, params, metrics={"Accuracy": Accuracy()})
    data = NumpySlicesDataset((X, Y), ["x", "y"], shuffle=False).batch(BATCH)
    callback = hooks.MsexpCallback(model, data)
    assert callback.enabled
    model.train(2, data, callbacks=[callback], dataset_sink_mode=False)
    epochs = reported(in_a_trial)
    assert [(e, s) for e, s, _ in epochs] == [(1, 4), (2, 8)]
    for _, _, metrics in epochs:
        assert set(metrics) == {"train_loss", "step_ms", "samples_per_s", "peak_mem_mb",
                                "eval_accuracy"}
        assert 0 <= metrics["eval_accuracy"] <= 1 and metrics["peak_mem_mb"] > 0
        assert metrics["samples_per_s"] > 0 and metrics["step_ms"] > 0
    assert epochs[1][2]["train_loss"] < epochs[0][2]["train_loss"]
    channel._state["stop"] = True
    stopped = hooks.MsexpCallback()
    model.train(3, data, callbacks=[stopped], dataset_sink_mode=False)
    assert [(e, s) for e, s, _ in reported(in_a_trial)[2:]] == [(1, 1)], "stops after a step"


def save_like_model_checkpoint(folder, name: str, network, **extra):
    import mindspore as ms

    folder.mkdir(parents=True, exist_ok=True)
    ms.save_checkpoint(network, str(folder / name), append_dict=extra or None)


def test_resume_loads_the_newest_checkpoint_and_says_its_epoch(tmp_path, capsys) -> None:
    trained = mlp()
    trained[0].bias.set_data(Tensor(np.full(16, 0.5, np.float32)))
    save_like_model_checkpoint(tmp_path / "out", "net-3_12.ckpt", trained)
    fresh = mlp()
    assert hooks.resume(fresh, folder=tmp_path / "out") == 3
    assert fresh[0].bias.asnumpy().tolist() == [0.5] * 16
    assert capsys.readouterr().out == f"msexp: resuming from {tmp_path / 'out' / 'net-3_12.ckpt'}\n"
    save_like_model_checkpoint(tmp_path / "out", "own.ckpt", trained, epoch_num=5)
    assert hooks.resume(mlp(), folder=tmp_path / "out") == 5
    save_like_model_checkpoint(tmp_path / "out", "unnamed.ckpt", trained)
    assert hooks.resume(mlp(), folder=tmp_path / "out") == 0
    assert hooks.resume(mlp(), folder=tmp_path / "empty") == 0


def test_resume_loads_the_optimizer_too(tmp_path) -> None:
    import mindspore as ms

    network = mlp()
    opt = nn.Momentum(network.trainable_params(), 0.1, 0.9)
    opt.moments[0].set_data(Tensor(np.ones((16, FEATURES), np.float32)))
    ms.save_checkpoint(opt, str(tmp_path / "net-2_4.ckpt"))
    fresh = mlp()
    fresh_opt = nn.Momentum(fresh.trainable_params(), 0.1, 0.9)
    assert hooks.resume(fresh, fresh_opt, tmp_path) == 2
    assert fresh_opt.moments[0].asnumpy().min() == 1.0


def test_settings_fill_msexp_defaults_and_split_the_batch() -> None:
    from msexp.knobs import KNOBS

    values = hooks.settings({"lr": 0.5})
    assert values["lr"] == 0.5 and set(values) == set(KNOBS)
    assert values["micro_size"] == KNOBS["micro_size"].default
    assert hooks.micro_batch({"batch_size": 64, "micro_size": 4}) == 16
    assert hooks.micro_batch({"batch_size": 48, "micro_size": 2}) == 24


def test_the_train_step_updates_every_micro_size_calls_and_counts_overflows() -> None:
    network, loss = mlp(), nn.CrossEntropyLoss()
    params = {"batch_size": BATCH, "micro_size": 2, "optimizer": "sgd", "lr": 0.1,
              "loss_scale": "fixed", "loss_scale_value": 1024.0}
    step = hooks.train_network(network, loss, hooks.optimizer(network, params, 2), params)
    assert step.loss_scale == 1024.0
    x, y = Tensor(X[:8]), Tensor(Y[:8])
    for _ in range(2):
        step(x, y)
    assert step.pending == [] and step.overflow_steps == 0
    step(Tensor(np.full((8, FEATURES), np.inf, np.float32)), y)
    assert len(step.pending) == 1 and step.overflow_steps == 0
    step(x, y)
    assert step.pending == [] and step.overflow_steps == 1, "an inf gradient overflows"
    plain = hooks.train_network(mlp(), loss, hooks.optimizer(mlp(), {}, 2), {})
    assert plain.loss_scale is None and plain.micro_size == 1
    evaluating = hooks.model(mlp(), loss, hooks.optimizer(mlp(), {}, 2), {})
    assert evaluating._eval_network is None


def test_the_callback_without_an_eval_dataset_reports_no_eval_metric(in_a_trial) -> None:
    params = {"batch_size": BATCH, "optimizer": "sgd", "lr": 0.1}
    network, loss = mlp(), nn.CrossEntropyLoss()
    model = hooks.model(network, loss, hooks.optimizer(network, params, 4), params,
                        metrics={"Accuracy": Accuracy()})
    data = NumpySlicesDataset((X, Y), ["x", "y"], shuffle=False).batch(BATCH)
    model.train(1, data, callbacks=[hooks.MsexpCallback(model)], dataset_sink_mode=False)
    ((_, _, metrics),) = reported(in_a_trial)
    assert not any(name.startswith("eval_") for name in metrics) and "train_loss" in metrics


def test_output_dir_may_be_asked_for_again(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("MSEXP_OUTPUT_DIR", str(tmp_path / "out"))
    assert hooks.output_dir() == hooks.output_dir() == tmp_path / "out"
