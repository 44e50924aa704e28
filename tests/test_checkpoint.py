"""Checkpoints: saved state loads anywhere, a resumed trial equals an uninterrupted one."""

from __future__ import annotations

import json
import os
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
@pytest.mark.slow  # over 4 s: the fast tier stays quick
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


@pytest.mark.slow  # over 3 s: the fast tier stays under 5 min
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


# -- the checkpoint folder's rules, exact (mutation profile "hosts") ------------------

def epoch(number: int, **metrics: float):
    from msexp.training.records import Epoch

    return Epoch(number, number, 0.0, metrics)


def saver(tmp_path: Path, **plan: Any):
    from msexp.training.checkpoint import Checkpoints

    weight = ms.Parameter(Tensor(np.ones(3, np.float32)), name="w")
    return Checkpoints(CheckpointPlan(tmp_path / "ckpt", **plan), {"w": weight}), weight


def saved_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("epoch-*.ckpt"))


def save_epochs(checkpoints, values: list[float]):
    saved, history = None, []
    for number, value in enumerate(values, 1):
        history.append(epoch(number, eval_loss=value))
        saved = checkpoints.save(number, number * 10, history, {"overflow": number}, saved)
    return saved


def test_keep_last_keeps_the_latest_and_its_record(tmp_path: Path) -> None:
    checkpoints, _ = saver(tmp_path)
    saved = save_epochs(checkpoints, [0.5, 0.4, 0.6])
    assert saved_files(tmp_path / "ckpt") == ["epoch-0003.ckpt"]
    assert (saved.epoch, saved.step, saved.file, saved.counters) == (3, 30, "epoch-0003.ckpt",
                                                                      {"overflow": 3})
    assert latest(tmp_path / "ckpt") == saved
    assert checkpoints.finish(saved) == tmp_path / "ckpt" / "epoch-0003.ckpt"
    assert not list((tmp_path / "ckpt").glob(".partial-*"))


def test_keep_best_holds_the_best_and_the_latest_until_the_end(tmp_path: Path) -> None:
    checkpoints, _ = saver(tmp_path, keep="best", metric="eval_loss", maximize=False)
    saved = save_epochs(checkpoints, [0.5, 0.4, 0.6])
    assert saved.best == {"epoch": 2, "value": 0.4, "file": "epoch-0002.ckpt"}
    assert saved_files(tmp_path / "ckpt") == ["epoch-0002.ckpt", "epoch-0003.ckpt"]
    assert checkpoints.finish(saved) == tmp_path / "ckpt" / "epoch-0002.ckpt"
    assert saved_files(tmp_path / "ckpt") == ["epoch-0002.ckpt"]
    assert latest(tmp_path / "ckpt").best["epoch"] == 2


def test_keep_best_when_maximizing_and_on_a_tie_keeps_the_first(tmp_path: Path) -> None:
    checkpoints, _ = saver(tmp_path, keep="best", metric="eval_loss", maximize=True)
    saved = save_epochs(checkpoints, [0.5, 0.7, 0.7, 0.6])
    assert saved.best == {"epoch": 2, "value": 0.7, "file": "epoch-0002.ckpt"}


def test_keep_all_and_keep_none(tmp_path: Path) -> None:
    every, _ = saver(tmp_path / "all", keep="all")
    saved = save_epochs(every, [0.5, 0.4])
    assert every.finish(saved) == tmp_path / "all" / "ckpt" / "epoch-0002.ckpt"
    assert saved_files(tmp_path / "all" / "ckpt") == ["epoch-0001.ckpt", "epoch-0002.ckpt"]
    nothing, _ = saver(tmp_path / "none", keep="none")
    saved = save_epochs(nothing, [0.5, 0.4])
    assert saved_files(tmp_path / "none" / "ckpt") == ["epoch-0002.ckpt"], "until the end"
    assert nothing.finish(saved) is None and list((tmp_path / "none" / "ckpt").iterdir()) == []
    assert nothing.finish(None) is None


def test_a_checkpoint_is_due_every_n_epochs_and_after_the_last(tmp_path: Path) -> None:
    checkpoints, _ = saver(tmp_path, every=2)
    assert [n for n in range(1, 6) if checkpoints.due(n, 5)] == [2, 4, 5]


def test_restore_loads_the_latest_into_the_parameters(tmp_path: Path) -> None:
    checkpoints, weight = saver(tmp_path)
    saved = save_epochs(checkpoints, [0.5])
    weight.set_data(Tensor(np.zeros(3, np.float32)))
    assert checkpoints.restore() == saved
    assert weight.asnumpy().tolist() == [1.0, 1.0, 1.0]


def test_load_into_names_what_the_file_lacks(tmp_path: Path) -> None:
    from msexp.training.checkpoint import load_into

    checkpoints, _ = saver(tmp_path)
    save_epochs(checkpoints, [0.5])
    fresh = ms.Parameter(Tensor(np.zeros(3, np.float32)), name="w")
    extra = ms.Parameter(Tensor(np.zeros(2, np.float32)), name="v")
    written = {}
    missing = load_into({"w": fresh, "v": extra}, tmp_path / "ckpt" / "epoch-0001.ckpt",
                        written.update)
    assert missing == ["v"] and list(written) == [fresh]
    assert written[fresh].asnumpy().tolist() == [1.0, 1.0, 1.0]


def test_a_checkpoint_of_another_trial_or_params_is_moved_aside(tmp_path: Path, capsys) -> None:
    from msexp.training.checkpoint import Checkpoints, owner, resumable

    mine = owner("study/1", {"lr": 0.1, "seed": 0})
    weight = ms.Parameter(Tensor(np.ones(3, np.float32)), name="w")
    folder = tmp_path / "ckpt"
    theirs = Checkpoints(CheckpointPlan(folder, owner=owner("study/0", {"lr": 0.1})),
                         {"w": weight})
    save_epochs(theirs, [0.5])
    assert resumable(CheckpointPlan(folder, owner=mine)) is None
    assert capsys.readouterr().out == (
        f"msexp: starting afresh, not resuming: {folder / 'epoch-0001.ckpt'} was saved by "
        f"study/0, not by study/1; its files are now in {tmp_path / 'ckpt.replaced-1'}\n")
    assert list(folder.iterdir()) == [] and (tmp_path / "ckpt.replaced-1" / "state.json").exists()
    other = Checkpoints(CheckpointPlan(folder, owner=owner("study/1", {"lr": 0.2, "b": 1})),
                        {"w": weight})
    save_epochs(other, [0.5])
    assert resumable(CheckpointPlan(folder, owner=mine)) is None
    assert "was trained with other params (b, lr, seed); its files are now in " \
           f"{tmp_path / 'ckpt.replaced-2'}" in capsys.readouterr().out
    same = Checkpoints(CheckpointPlan(folder, owner=mine), {"w": weight})
    saved = save_epochs(same, [0.5])
    assert resumable(CheckpointPlan(folder, owner=mine)) == saved


def test_only_the_same_secret_values_resume_and_none_is_recorded(tmp_path: Path,
                                                                 capsys) -> None:
    """Params that differ only in a secret (redacted alike) are other params: a salted
    digest of the real values tells them apart, and no file holds a value in clear."""
    from msexp.training.checkpoint import Checkpoints, owner, resumable

    def plan(password: str) -> CheckpointPlan:
        params = {"lr": 0.1, "data_url": f"postgresql://u:{password}@h/db",
                  "api_token": f"tok-{password}"}
        return CheckpointPlan(folder, owner=owner("study/1", params), params=params)

    folder = tmp_path / "ckpt"
    weight = ms.Parameter(Tensor(np.ones(3, np.float32)), name="w")
    saved = save_epochs(Checkpoints(plan("S3CRET-a"), {"w": weight}), [0.5])
    state = (folder / "state.json").read_text()
    assert "S3CRET" not in state and '"digest"' in state
    assert resumable(plan("S3CRET-a")) == saved, "the same real values resume"
    assert capsys.readouterr().out == ""
    assert resumable(plan("S3CRET-b")) is None
    assert "was trained with other values of its secret params; its files are now in " \
           f"{tmp_path / 'ckpt.replaced-1'}" in capsys.readouterr().out
    assert owner("study/1", {"lr": 0.1}) == {"trial": "study/1", "params": {"lr": 0.1}}


def test_a_checkpoint_without_its_file_or_owner_is_not_resumed(tmp_path: Path, capsys) -> None:
    from msexp.training.checkpoint import resumable

    checkpoints, _ = saver(tmp_path)
    save_epochs(checkpoints, [0.5])
    folder = tmp_path / "ckpt"
    assert resumable(CheckpointPlan(folder, owner={"trial": "study/0"})) is None
    assert "was saved by an unrecorded trial, not by study/0" in capsys.readouterr().out
    save_epochs(checkpoints, [0.5])
    (folder / "epoch-0001.ckpt").write_bytes(b"")
    assert resumable(CheckpointPlan(folder)) is None
    assert f"{folder / 'epoch-0001.ckpt'} is empty (0 bytes)" in capsys.readouterr().out
    save_epochs(checkpoints, [0.5])
    (folder / "epoch-0001.ckpt").unlink()
    assert resumable(CheckpointPlan(folder, owner={"trial": "x"})) is None
    assert f"{folder / 'epoch-0001.ckpt'}, which state.json names, is gone" in \
           capsys.readouterr().out
    assert resumable(CheckpointPlan(tmp_path / "nothing")) is None
    assert capsys.readouterr().out == "", "nothing saved: nothing to say"


def test_a_torn_record_is_no_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text("{not json")
    assert latest(tmp_path) is None and latest(tmp_path / "absent") is None


def test_the_training_state_holds_each_parameter_once_with_the_loss_scale(tmp_path) -> None:
    from msexp.training.checkpoint import scaler_parameters, state_parameters
    from msexp.training.loss_scale import make_scaler

    network = mlp()
    scaler, _ = make_scaler(params())
    names = [name for name, _ in scaler_parameters(scaler)]
    assert names == ["loss_scale.scale_value", "loss_scale.counter"]
    found = state_parameters(network, None, scaler, network)
    assert list(found) == ["0.weight", "0.bias", "2.weight", "2.bias", *names]
    assert found["0.weight"] is network[0].weight
    assert scaler_parameters(object()) == []


def test_a_failed_save_names_the_file_it_wrote(tmp_path: Path) -> None:
    import shutil

    checkpoints, _ = saver(tmp_path)
    shutil.rmtree(tmp_path / "ckpt")  # e.g. a disk that went away
    with pytest.raises(OSError) as raised:
        save_epochs(checkpoints, [0.5])
    partial = tmp_path / "ckpt" / f".partial-{os.getpid()}-epoch-0001.ckpt"
    error = raised.value
    assert (error.errno, error.strerror, error.filename) == (2, "No such file or directory",
                                                             str(partial))


# mutation: the digest of secret params taken in the order the params came (not sorted)
def test_the_same_secret_params_in_another_order_resume(tmp_path: Path) -> None:
    from msexp.training.checkpoint import Checkpoints, owner, resumable

    params = {"lr": 0.1, "data_url": "postgresql://u:S3CRET@h/db", "seed": 0}
    reordered = dict(reversed(params.items()))
    assert list(reordered) != list(params)
    folder = tmp_path / "ckpt"
    weight = ms.Parameter(Tensor(np.ones(3, np.float32)), name="w")
    saved = save_epochs(Checkpoints(CheckpointPlan(folder, owner=owner("s/1", params),
                                                   params=params), {"w": weight}), [0.5])
    assert resumable(CheckpointPlan(folder, owner=owner("s/1", reordered),
                                    params=reordered)) == saved


# mutation: a record without params read as None (a TypeError, not a reason)
def test_a_record_without_params_is_not_resumed_and_says_why(tmp_path: Path, capsys) -> None:
    from msexp.training.checkpoint import Checkpoints, owner, resumable

    folder = tmp_path / "ckpt"
    weight = ms.Parameter(Tensor(np.ones(3, np.float32)), name="w")
    save_epochs(Checkpoints(CheckpointPlan(folder, owner=owner("s/1", {"lr": 0.1})),
                            {"w": weight}), [0.5])
    assert resumable(CheckpointPlan(folder, owner={"trial": "s/1"})) is None
    assert "was trained with other params (lr)" in capsys.readouterr().out
