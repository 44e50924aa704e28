"""msexp.hooks: msexp's techniques inside a user's `Model.train`, and reporting to msexp."""

from __future__ import annotations

import json
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, nn
from mindspore.dataset import NumpySlicesDataset
from mindspore.train import Accuracy, Callback

from msexp import hooks

FEATURES, CLASSES, SAMPLES, BATCH = 8, 3, 64, 16
UNEVEN = 70  # 4 full batches of 16 and a last one of 6
_rng = np.random.default_rng(0)
X = _rng.normal(size=(UNEVEN, FEATURES)).astype(np.float32)
Y = (X[:, 0] > 0).astype(np.int32) + (X[:, 1] > 1).astype(np.int32)
INITIAL = {"0.weight": _rng.normal(0, 0.3, (16, FEATURES)), "0.bias": np.zeros(16),
           "2.weight": _rng.normal(0, 0.3, (CLASSES, 16)), "2.bias": np.zeros(CLASSES)}


def mlp() -> nn.Cell:
    network = nn.SequentialCell(nn.Dense(FEATURES, 16), nn.ReLU(), nn.Dense(16, CLASSES))
    for param in network.get_parameters():
        param.set_data(Tensor(INITIAL[param.name].astype(np.float32)))
    return network


def train_with_model(params: dict, samples: int = SAMPLES, **train: object
                     ) -> dict[str, np.ndarray]:
    """Two epochs of `Model.train` through msexp's train step; the weights after it."""
    network, loss = mlp(), nn.CrossEntropyLoss()
    steps = -(-samples // params["batch_size"])
    opt = hooks.optimizer(network, params, steps)
    model = hooks.model(network, loss, opt, params, metrics={"Accuracy": Accuracy()})
    data = NumpySlicesDataset((X[:samples], Y[:samples]), ["x", "y"], shuffle=False)
    model.train(2, data.batch(params["batch_size"]), **train)
    return {p.name: p.asnumpy() for p in network.trainable_params()}


BASE = {"batch_size": BATCH, "optimizer": "momentum", "lr": 0.1, "epochs": 2}


class StepLosses(Callback):
    """Each step's loss, as `Model.train`'s callbacks get it (what LossMonitor prints)."""

    def __init__(self) -> None:
        super().__init__()
        self.losses: list[float] = []

    def on_train_step_end(self, run_context) -> None:
        self.losses.append(float(run_context.original_args().net_outputs.asnumpy()))


@pytest.mark.parametrize("loss_scale", ["none", "dynamic"])
@pytest.mark.parametrize("micro_size", [2, 4])
def test_accumulation_through_model_train_equals_the_full_batch(micro_size: int,
                                                                loss_scale: str) -> None:
    base = {**BASE, "loss_scale": loss_scale, "loss_scale_value": 1024.0}
    full_losses, accumulated_losses = StepLosses(), StepLosses()
    full = train_with_model({**base, "micro_size": 1}, callbacks=full_losses)
    accumulated = train_with_model({**base, "micro_size": micro_size},
                                   callbacks=accumulated_losses)
    assert not np.allclose(full["0.weight"], INITIAL["0.weight"]), "the weights never moved"
    for name, want in full.items():
        np.testing.assert_allclose(accumulated[name], want, rtol=1e-5, atol=1e-5, err_msg=name)
    assert len(set(full_losses.losses)) == len(full_losses.losses) == 8
    np.testing.assert_allclose(accumulated_losses.losses, full_losses.losses, rtol=1e-5)


@pytest.mark.slow  # over 5 s: the fast tier stays quick
def test_a_partial_last_update_is_the_same_at_every_micro_size() -> None:
    """70 samples in batches of 16: each epoch ends with an update of 6, which micro_size
    2 and 4 split into micro-batches of 8 and 4 weighted by their real sizes: the same
    weights, and the same loss reported at each step."""
    losses = {m: StepLosses() for m in (1, 2, 4)}
    runs = {m: train_with_model({**BASE, "micro_size": m}, UNEVEN, callbacks=losses[m])
            for m in (1, 2, 4)}
    dropped = train_with_model({**BASE, "micro_size": 1}, UNEVEN - 6)
    assert not np.allclose(runs[1]["0.weight"], dropped["0.weight"], atol=1e-4), \
        "the partial update changed nothing"
    assert len(losses[1].losses) == 10
    for micro_size in (2, 4):
        for name, want in runs[1].items():
            np.testing.assert_allclose(runs[micro_size][name], want, rtol=1e-6, atol=1e-6,
                                       err_msg=f"micro_size {micro_size}: {name}")
        np.testing.assert_allclose(losses[micro_size].losses, losses[1].losses, rtol=1e-5,
                                   err_msg=f"micro_size {micro_size}: the step losses")


@pytest.mark.parametrize("micro_size", [1, 2, 4])
def test_the_loss_of_a_partial_last_batch_is_its_mean_loss_at_every_micro_size(
        micro_size: int) -> None:
    """A batch of 16, then an epoch's last one of 6, which micro_size 2 splits into one
    micro-batch of 6 and micro_size 4 into two of 4 and 2: each step's loss is its batch's
    mean loss as the network computes it (twice that if divided by the micro-batches'
    count, the mean of 4 and 2 samples' means if they were not weighted by size)."""
    # mutation (issue 40): the loss of a partial batch divided by its number of micro-batches
    network, loss_fn = mlp(), nn.CrossEntropyLoss()
    params = {**BASE, "micro_size": micro_size}
    step = hooks.train_network(network, loss_fn, hooks.optimizer(network, params, 5), params)
    for x, y in ((X[:BATCH], Y[:BATCH]), (X[UNEVEN - 6:], Y[UNEVEN - 6:])):
        x, y = Tensor(x), Tensor(y)
        before = float(loss_fn(network(x), y).asnumpy())  # the weights this step starts at
        parts = [float(loss_fn(network(x[i:j]), y[i:j]).asnumpy()) for i, j in ((0, 4), (4, 6))]
        assert float(step(x, y).asnumpy()) == pytest.approx(before, rel=1e-5)
    assert abs(parts[0] - parts[1]) > 0.05, "the micro-batches' sizes tell in this batch"


@pytest.fixture
def trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process as an msexp trial: its events file."""
    events = tmp_path / "events.jsonl"
    monkeypatch.setenv("MSEXP_EVENTS", str(events))
    monkeypatch.delenv("RANK_ID", raising=False)
    monkeypatch.setattr(hooks.channel, "_state", {**hooks.channel._state, "writer": None})
    return events


def epochs_of(events: Path) -> list[dict]:
    return [e for e in map(json.loads, events.read_text().splitlines()) if e["event"] == "epoch"]


@pytest.mark.parametrize("micro_size", [1, 4])
def test_a_hooked_model_reports_each_epoch_by_updates(trial: Path, micro_size: int) -> None:
    """No callback given and sink mode asked for: `hooks.model` still trains step by step
    and reports, one step and one series point per update, whatever micro_size is."""
    train_with_model({**BASE, "micro_size": micro_size, "loss_scale": "dynamic"}, UNEVEN,
                     dataset_sink_mode=True)
    first, second = epochs_of(trial)
    assert (first["epoch"], first["step"], second["step"]) == (1, 5, 10)
    for epoch in (first, second):
        assert len(epoch["series"]["train_loss"]) == len(epoch["series"]["loss_scale"]) == 5
        metrics = epoch["metrics"]
        assert metrics["train_loss"] == epoch["series"]["train_loss"][-1]
        assert metrics["train_loss_epoch"] == pytest.approx(
            np.mean(epoch["series"]["train_loss"]))
        assert metrics["step_ms"] > 0 and metrics["samples_per_s"] == pytest.approx(
            BATCH * 1000 / metrics["step_ms"])
        assert metrics["train_mem_mb"] > 0 and metrics["peak_mem_mb"] > metrics["train_mem_mb"]
        assert metrics["overflow_steps"] == metrics["skipped_updates"] == 0
        assert metrics["loss_scale"] == epoch["series"]["loss_scale"][-1] == 65536.0


def test_overflows_and_the_loss_scale_series_are_reported(trial: Path) -> None:
    """float16 gradients scaled by 2**24 overflow: the dynamic scale falls update by update
    until they fit, each overflow counted and its update skipped."""
    params = {**BASE, "micro_size": 2, "amp_level": "O3", "loss_scale": "dynamic",
              "loss_scale_value": float(2**24), "loss_scale_factor": 2.0}
    train_with_model(params, UNEVEN)
    events = epochs_of(trial)
    scales = [s for e in events for s in e["series"]["loss_scale"]]
    overflows = events[-1]["metrics"]["overflow_steps"]
    assert overflows >= 1 and events[-1]["metrics"]["skipped_updates"] == overflows
    assert scales[0] < 2**24 and all(a >= b for a, b in zip(scales, scales[1:]))
    assert scales[-1] == 2**24 / 2**overflows


@pytest.fixture
def graph_mode():
    mode = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE)
    yield
    ms.set_context(mode=mode)


@pytest.mark.slow  # over 5 s: the fast tier stays quick
def test_thor_trains_through_model_train_in_graph_mode(graph_mode: None) -> None:
    params = {**BASE, "optimizer": "thor", "lr": 0.05, "thor.frequency": 2}
    full = train_with_model({**params, "micro_size": 1})
    accumulated = train_with_model({**params, "micro_size": 2})
    assert ms.get_context("mode") == ms.GRAPH_MODE
    assert not np.allclose(full["0.weight"], INITIAL["0.weight"]), "the weights never moved"
    for name, want in full.items():
        np.testing.assert_allclose(accumulated[name], want, rtol=1e-5, atol=1e-5, err_msg=name)


def test_thor_refuses_a_partial_batch_in_one_line() -> None:
    params = {**BASE, "optimizer": "thor", "lr": 0.05, "thor.frequency": 2, "micro_size": 2}
    with pytest.raises(ValueError) as refused:
        train_with_model(params, UNEVEN)
    assert str(refused.value) == (
        "THOR needs micro-batches of one size (8), but a batch of 6 leaves 6: batch the "
        "training dataset with drop_remainder=True")


def test_settings_take_the_scripts_config_but_not_its_own_meanings() -> None:
    class Config:  # a model-zoo config: attributes, msexp's knobs among the script's own
        def __init__(self) -> None:
            self.micro_size, self.lr, self.loss_scale, self.epoch_size = 4, 0.05, 1024, 3

    values = hooks.settings(Config())
    assert (values["micro_size"], values["lr"], values["loss_scale"]) == (4, 0.05, "none")
    assert values["amp_level"] == "O0" and "epoch_size" not in values


def test_hooks_do_nothing_outside_msexp(monkeypatch, tmp_path) -> None:
    for name in ("MSEXP_EVENTS", "MSEXP_TRIAL", "MSEXP_OUTPUT_DIR", "MSEXP_RESUME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    hooks.report(1, eval_accuracy=0.5)
    assert not hooks.should_stop() and hooks.params() == {} and hooks.resume_dir() is None
    assert list(tmp_path.iterdir()) == []
    callback = hooks.MsexpCallback()
    assert not callback.enabled


@pytest.mark.slow  # two trainings of LeNet5 on digits
def test_train_mem_mb_is_the_built_in_loops_figure(trial: Path) -> None:
    from msexp.execution.host.running import run
    from msexp.execution.protocol import TrialRequest
    from msexp.spec import trial_params
    from tests.conftest import builtin

    lenet_digits = builtin("lenet_digits")
    build, lenet5 = lenet_digits.build, lenet_digits.lenet5
    params = trial_params("lenet_digits", {"epochs": 1, "batch_size": 64, "micro_size": 4})
    built_in = run(TrialRequest("lenet_digits", params), lambda event: None)
    x, y = build(params).train
    network = lenet5()
    opt = hooks.optimizer(network, params, len(y) // 64)
    model = hooks.model(network, nn.CrossEntropyLoss(), opt, params)
    model.train(1, NumpySlicesDataset((x, y), ["x", "y"], shuffle=False).batch(64))
    [epoch] = epochs_of(trial)
    assert epoch["metrics"]["train_mem_mb"] == pytest.approx(built_in["train_mem_mb"], rel=0.05)


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
    data = NumpySlicesDataset((X[:SAMPLES], Y[:SAMPLES]), ["x", "y"], shuffle=False).batch(BATCH)
    callback, steps = hooks.MsexpCallback(model, data), StepLosses()
    assert callback.enabled
    model.train(2, data, callbacks=[callback, steps], dataset_sink_mode=False)
    epochs = reported(in_a_trial)
    assert [(e, s) for e, s, _ in epochs] == [(1, 4), (2, 8)]
    assert len(set(steps.losses)) == 8  # each epoch's mean differs from any one of its steps
    for (_, _, metrics), losses in zip(epochs, (steps.losses[:4], steps.losses[4:])):
        assert metrics["train_loss"] == pytest.approx(losses[-1], rel=1e-6)
        assert metrics["train_loss_epoch"] == pytest.approx(np.mean(losses), rel=1e-6)
    for _, _, metrics in epochs:
        assert set(metrics) == {"train_loss", "train_loss_epoch", "step_ms", "samples_per_s",
                                "peak_mem_mb", "eval_accuracy", "train_mem_mb", "compile_s",
                                "overflow_steps", "skipped_updates"}
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


def test_each_train_step_call_is_one_update_and_counts_overflows() -> None:
    network, loss = mlp(), nn.CrossEntropyLoss()
    params = {"batch_size": BATCH, "micro_size": 2, "optimizer": "sgd", "lr": 0.1,
              "loss_scale": "fixed", "loss_scale_value": 1024.0}
    step = hooks.train_network(network, loss, hooks.optimizer(network, params, 2), params)
    assert step.loss_scale == 1024.0
    x, y = Tensor(X[:BATCH]), Tensor(Y[:BATCH])
    before = network[0].weight.asnumpy().copy()
    step(x, y)
    assert step.micro == BATCH // 2 and step.overflow_steps == 0
    after = network[0].weight.asnumpy().copy()
    assert not np.array_equal(before, after), "one call updates the weights"
    step(Tensor(np.full((BATCH, FEATURES), np.inf, np.float32)), y)
    assert step.overflow_steps == 1, "an inf gradient overflows"
    step(x, y)
    assert step.overflow_steps == 1
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


class _Batched:
    def get_batch_size(self) -> int:
        return 32


# mutation: callback.MsexpCallback._timing leaves out the first two updates, not one
def test_the_callbacks_timing_leaves_out_only_the_compiling_update() -> None:
    callback = hooks.MsexpCallback()
    callback._update_s = [5.0, 0.1, 0.2, 0.3, 10.0]  # the first compiles
    timing = callback._timing({"train_dataset": _Batched()})
    # by hand: the median of 0.1, 0.2, 0.3, 10.0 is 0.25 s; 5.0 - 0.25 compiles
    assert timing == pytest.approx({"step_ms": 250.0, "compile_s": 4.75,
                                    "samples_per_s": 32 / 0.25})
    assert callback._timing({}) == pytest.approx({"step_ms": 250.0, "compile_s": 4.75})
    callback._update_s = [0.4]  # one update: it is the only one
    assert callback._timing({}) == pytest.approx({"step_ms": 400.0, "compile_s": 0.0})


class CallbackParams(dict):
    """What `Model.train` hands its callbacks: a dict whose keys read as attributes."""

    __getattr__ = dict.__getitem__


def feed_steps(callback, args: dict, overflows: list[bool]) -> None:
    """Call `callback` as `Model.train` does for one epoch whose steps returned (loss,
    overflow, scale), the outputs of MindSpore's loss-scaling cell (GPU and Ascend only:
    its overflow check has no CPU kernel)."""
    from mindspore.train.callback import RunContext

    context = RunContext(CallbackParams(args, cur_step_num=0, cur_epoch_num=1))
    callback.on_train_begin(context)
    for number, overflow in enumerate(overflows, 1):
        outputs = (Tensor(0.5, ms.float32), Tensor(overflow), Tensor(8.0, ms.float32))
        context.original_args().update(cur_step_num=number, net_outputs=outputs)
        callback.on_train_step_begin(context)
        callback.on_train_step_end(context)
    callback.on_train_epoch_end(context)


# mutations: overflows counted from 1; the step's overflow ignored, or read from its scale;
# the step looked up under a misspelt "train_network", or "network" misspelt where a loop
# names only that
def test_the_callback_counts_the_overflows_mindspores_loss_scaling_cell_returns(
        in_a_trial) -> None:
    network = mlp()
    opt = nn.Momentum(network.trainable_params(), 0.01, 0.9)
    step = nn.TrainOneStepWithLossScaleCell(nn.WithLossCell(network, nn.CrossEntropyLoss()),
                                            opt, scale_sense=Tensor(8.0, ms.float32))
    feed_steps(hooks.MsexpCallback(), {"train_network": step, "network": network},
               [False, True, False])
    feed_steps(hooks.MsexpCallback(), {"network": step}, [True, True])
    (_, _, model_train), (_, _, own_loop) = reported(in_a_trial)
    assert model_train["overflow_steps"] == 1 and model_train["loss_scale"] == 8.0
    assert own_loop["overflow_steps"] == 2


# mutations: overflows counted from 1; a step's time taken as the clock plus its start
def test_a_plain_model_reports_its_updates(in_a_trial) -> None:
    import time

    from msexp.execution.protocol import read_events

    network = mlp()
    model = ms.train.Model(network, nn.CrossEntropyLoss(),
                           nn.Momentum(network.trainable_params(), 0.01, 0.9))
    data = NumpySlicesDataset((X[:SAMPLES], Y[:SAMPLES]), ["x", "y"], shuffle=False)
    began = time.perf_counter()
    model.train(1, data.batch(BATCH), callbacks=[hooks.MsexpCallback()],
                dataset_sink_mode=False)
    took_ms = 1000 * (time.perf_counter() - began)
    (epoch,) = read_events(in_a_trial)
    assert epoch.step == SAMPLES // BATCH and epoch.metrics["overflow_steps"] == 0
    assert 0 < epoch.metrics["step_ms"] < took_ms and "loss_scale" not in epoch.metrics
    assert len(epoch.series["train_loss"]) == SAMPLES // BATCH


# mutation: the hooked model drops `initial_epoch` (a resumed script trains from epoch 1)
def test_a_hooked_model_resumes_at_its_initial_epoch(in_a_trial) -> None:
    params = {"batch_size": BATCH, "optimizer": "sgd", "lr": 0.1}
    network, loss = mlp(), nn.CrossEntropyLoss()
    model = hooks.model(network, loss, hooks.optimizer(network, params, 4), params)
    data = NumpySlicesDataset((X[:SAMPLES], Y[:SAMPLES]), ["x", "y"], shuffle=False)
    model.train(3, data.batch(BATCH), initial_epoch=2)  # epochs 1 and 2 were trained before
    assert [epoch for epoch, _, _ in reported(in_a_trial)] == [3]


# mutation: a single callback (not in a list) taken for a list of them
def test_a_hooked_model_takes_one_callback_as_model_train_does(in_a_trial) -> None:
    from mindspore.train import LossMonitor

    params = {"batch_size": BATCH, "optimizer": "sgd", "lr": 0.1}
    network, loss = mlp(), nn.CrossEntropyLoss()
    model = hooks.model(network, loss, hooks.optimizer(network, params, 4), params)
    data = NumpySlicesDataset((X[:SAMPLES], Y[:SAMPLES]), ["x", "y"], shuffle=False)
    model.train(1, data.batch(BATCH), callbacks=LossMonitor(100))
    assert [epoch for epoch, _, _ in reported(in_a_trial)] == [1], "msexp's callback added"
