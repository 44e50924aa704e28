"""`hooks.model` takes every argument of `mindspore.train.Model`: one the sweep leaves alone
is the script's, one that gives a swept knob another value is refused in one line."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pytest
from mindspore import Tensor, nn
from mindspore.dataset import NumpySlicesDataset
from mindspore.train import (
    Accuracy,
    DynamicLossScaleManager,
    FixedLossScaleManager,
    LossScaleManager,
    Model,
)
from mindspore.train import Loss as LossMetric

from msexp import hooks
from msexp.hooks.model_arguments import knob_values

_rng = np.random.default_rng(7)
X = _rng.normal(size=(48, 8)).astype(np.float32)
Y = (X[:, 0] > 0).astype(np.int32) + (X[:, 1] > 0.5).astype(np.int32)
INITIAL = {"0.weight": _rng.normal(0, 0.3, (16, 8)), "0.bias": np.zeros(16),
           "2.weight": _rng.normal(0, 0.3, (3, 16)), "2.bias": np.zeros(3)}
# Model's **kwargs, as Model._check_kwargs lists them (the test below checks Model takes
# them), each with a value that changes nothing
MODEL_KWARGS = {"loss_scale_manager": None, "keep_batchnorm_fp32": None,
                "boost_config_dict": "", "acc_level": "O0"}


def mlp() -> nn.Cell:
    network = nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 3))
    for param in network.get_parameters():
        param.set_data(Tensor(INITIAL[param.name].astype(np.float32)))
    return network


def data() -> NumpySlicesDataset:
    return NumpySlicesDataset((X, Y), ["x", "y"], shuffle=False).batch(16)


@pytest.fixture
def swept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Makes this process a trial whose sweep file sets the given params (the file msexp
    writes for a command trial, `hooks.params()`)."""
    def sweep_sets(**params: object) -> None:
        path = tmp_path / "params.json"
        path.write_text(json.dumps(params), encoding="utf-8")
        monkeypatch.setenv("MSEXP_TRIAL", str(path))
    monkeypatch.delenv("MSEXP_TRIAL", raising=False)
    return sweep_sets


def test_every_argument_of_model_is_an_argument_of_hooks_model() -> None:
    network = mlp()
    for name, value in MODEL_KWARGS.items():  # MindSpore's own list: Model takes each,
        Model(network, nn.CrossEntropyLoss(),  # and no other
              nn.Momentum(network.trainable_params(), 0.1, 0.9), **{name: value})
    with pytest.raises(ValueError, match="'kwargs' should be 'loss_scale_manager'"):
        Model(network, nn.CrossEntropyLoss(), eval_net=None)
    ours = inspect.signature(hooks.model).parameters
    theirs = [n for n in inspect.signature(Model.__init__).parameters
              if n not in ("self", "kwargs")]
    assert [n for n in ours if n != "params"][:len(theirs)] == theirs, "positions as Model's"
    assert set(MODEL_KWARGS) <= set(ours)


def test_the_scripts_eval_network_and_eval_indexes_are_used_for_evaluation() -> None:
    """The script's eval network returns (logits, label, loss): only eval_indexes [2, 0, 1]
    hands each metric its part, and its loss is twice the plain one."""
    class Doubled(nn.Cell):
        def __init__(self, network: nn.Cell):
            super().__init__()
            self.network, self.loss = network, nn.CrossEntropyLoss()

        def construct(self, x, y):
            logits = self.network(x)
            return logits, y, 2 * self.loss(logits, y)

    network, loss = mlp(), nn.CrossEntropyLoss()
    opt = nn.Momentum(network.trainable_params(), 0.1, 0.9)
    metrics = {"acc": Accuracy(), "loss": LossMetric()}
    model = hooks.model(network, loss, opt, {}, metrics, eval_network=Doubled(network),
                        eval_indexes=[2, 0, 1])
    got = model.eval(data())
    plain = hooks.model(network, loss, opt, {}, {"acc": Accuracy(), "loss": LossMetric()})
    want = plain.eval(data())
    logits = network(Tensor(X)).asnumpy()
    assert got["acc"] == want["acc"] == pytest.approx(np.mean(logits.argmax(1) == Y))
    assert got["loss"] == pytest.approx(2 * want["loss"], rel=1e-6)


def test_the_scripts_amp_level_applies_where_the_sweep_leaves_it_alone(swept) -> None:
    """`Model(amp_level="O2")` means float16 with BatchNorm in float32 and dynamic loss
    scaling from 2**24: so it does here, over the script's own config (amp_level O0)."""
    swept(micro_size=2)
    values = knob_values({"amp_level": "O0", "micro_size": 2}, "O2", None, None)
    assert {k: values[k] for k in ("amp_level", "keep_batchnorm_fp32", "loss_scale",
                                   "loss_scale_value", "loss_scale_factor",
                                   "loss_scale_window", "micro_size")} == {
        "amp_level": "O2", "keep_batchnorm_fp32": True, "loss_scale": "dynamic",
        "loss_scale_value": 2.0**24, "loss_scale_factor": 2, "loss_scale_window": 2000,
        "micro_size": 2}
    assert knob_values({}, "O3", None, None)["keep_batchnorm_fp32"] is False
    network = mlp()
    model = hooks.model(network, nn.CrossEntropyLoss(),
                        nn.Momentum(network.trainable_params(), 0.1, 0.9), {"amp_level": "O0"},
                        amp_level="O3")
    dense = model.train_network.network
    assert model.train_network.loss_scale is None, "O3 brings no loss scaling"
    assert any(c.get_flags().get("fp16") for _, c in dense.cells_and_names()), "not cast"


def test_the_sweeps_knob_wins_and_its_own_loss_scaling_stays(swept) -> None:
    """The sweep sets amp_level O2 and loss_scale none: the script's equal amp_level is
    no clash, and O2's implied dynamic scaling gives way to the sweep's none."""
    swept(amp_level="O2", loss_scale="none")
    values = knob_values({"amp_level": "O2", "loss_scale": "none"}, "O2", False, None)
    assert (values["amp_level"], values["loss_scale"], values["keep_batchnorm_fp32"]) == (
        "O2", "none", False)


@pytest.mark.parametrize(("sweep", "want"), [
    ({"loss_scale": "fixed"}, {"loss_scale": "fixed", "loss_scale_value": 65536.0,
                               "keep_batchnorm_fp32": True}),
    ({"loss_scale": "none", "keep_batchnorm_fp32": False},
     {"loss_scale": "none", "keep_batchnorm_fp32": False}),
])
def test_the_scripts_amp_level_o2_brings_no_default_over_what_the_sweep_sets(
        swept, sweep: dict, want: dict) -> None:
    """The sweep sets loss scaling or BatchNorm's precision, not amp_level; the script
    passes amp_level="O2": its O2 keeps the sweep's values, and a fixed scale the sweep
    asks for is msexp's 65536, not O2's dynamic 2**24 turned fixed."""
    # mutation: `if knob not in swept and knob not in given` (knob by knob, not the group)
    swept(**sweep)
    network = mlp()
    model = hooks.model(network, nn.CrossEntropyLoss(),
                        nn.Momentum(network.trainable_params(), 0.1, 0.9), sweep,
                        amp_level="O2")
    values = knob_values(sweep, "O2", None, None)
    assert {k: values[k] for k in want} == want
    assert values["amp_level"] == "O2"
    step = model.train_network
    scale = want["loss_scale_value"] if want["loss_scale"] == "fixed" else None
    assert step.loss_scale == scale
    model.train(1, data())
    assert step.loss_scale == scale, "the scale the sweep set, as it trained"
    dense = [c for _, c in step.network.cells_and_names() if isinstance(c, nn.Dense)]
    assert dense and all(c.get_flags().get("fp16") for c in dense), "O2 casts"


@pytest.mark.parametrize(("argument", "line"), [
    ({"amp_level": "O2"}, "msexp.hooks.model: amp_level= gives amp_level O2, but the sweep "
     "sets amp_level to O0: drop amp_level= from hooks.model (the sweep then decides "
     "amp_level) or amp_level from the sweep file"),
    ({"loss_scale_manager": FixedLossScaleManager(1024, drop_overflow_update=False)},
     "msexp.hooks.model: loss_scale_manager= gives loss_scale fixed, but the sweep sets "
     "loss_scale to dynamic: drop loss_scale_manager= from hooks.model (the sweep then "
     "decides loss_scale) or loss_scale from the sweep file"),
    ({"keep_batchnorm_fp32": False}, "msexp.hooks.model: keep_batchnorm_fp32= gives "
     "keep_batchnorm_fp32 False, but the sweep sets keep_batchnorm_fp32 to True: drop "
     "keep_batchnorm_fp32= from hooks.model (the sweep then decides keep_batchnorm_fp32) "
     "or keep_batchnorm_fp32 from the sweep file"),
])
def test_an_argument_that_clashes_with_a_swept_knob_is_refused_in_one_line(
        swept, argument: dict, line: str) -> None:
    swept(amp_level="O0", loss_scale="dynamic", keep_batchnorm_fp32=True, micro_size=4)
    network = mlp()
    with pytest.raises(ValueError) as refused:
        hooks.model(network, nn.CrossEntropyLoss(),
                    nn.Momentum(network.trainable_params(), 0.1, 0.9),
                    {"amp_level": "O0", "loss_scale": "dynamic"}, **argument)
    assert str(refused.value) == line


@pytest.mark.parametrize(("argument", "line"), [
    ({"boost_level": "O1"}, "msexp.hooks.model: boost_level='O1' rewrites Model's train "
     "step, which msexp's (micro_size, amp_level, loss_scale) replaces: pass "
     "boost_level='O0' or leave it out"),
    ({"acc_level": "O2"}, "msexp.hooks.model: acc_level='O2' rewrites Model's train step, "
     "which msexp's (micro_size, amp_level, loss_scale) replaces: pass acc_level='O0' or "
     "leave it out"),
    ({"amp_level": "auto"}, "msexp.hooks.model: amp_level= gives amp_level 'auto', which "
     "msexp's knob does not take: amp_level must be one of O0, O1, O2, O3"),
    ({"loss_scale_manager": DynamicLossScaleManager(1024, 3, 10)}, None),
    ({"loss_scale_manager": LossScaleManager()}, "msexp.hooks.model: "
     "loss_scale_manager=LossScaleManager: msexp's train step applies a "
     "FixedLossScaleManager or a DynamicLossScaleManager"),
    ({"boost_level": "O0", "boost_config_dict": {"grad_freeze": {"total_steps": 9}}}, None),
])
def test_boost_and_values_msexp_cannot_apply_are_refused(swept, argument: dict,
                                                          line: str | None) -> None:
    network = mlp()
    make = lambda: hooks.model(network, nn.CrossEntropyLoss(),  # noqa: E731
                               nn.Momentum(network.trainable_params(), 0.1, 0.9), {},
                               **argument)
    if line is None:
        model = make()
        manager = argument.get("loss_scale_manager")
        assert model.train_network.loss_scale == (manager.get_loss_scale() if manager else None)
        return
    with pytest.raises(ValueError) as refused:
        make()
    assert str(refused.value) == line


def trained(loss_scale: float, micro_size: int, **arguments: object) -> dict[str, np.ndarray]:
    """Two epochs through `Model.train` with a weight-decaying Momentum built with
    `loss_scale`, as the model zoo builds it; the weights after."""
    network = mlp()
    opt = nn.Momentum(network.trainable_params(), 0.1, 0.9, weight_decay=0.01,
                      loss_scale=loss_scale)
    model = hooks.model(network, nn.CrossEntropyLoss(), opt, {"micro_size": micro_size},
                        **arguments)
    model.train(2, data())
    return {p.name: p.asnumpy() for p in network.trainable_params()}


def test_the_scripts_loss_scale_manager_and_optimizer_scale_give_the_true_update(
        swept) -> None:
    """The model zoo's pair, `nn.Momentum(loss_scale=1024)` with
    `FixedLossScaleManager(1024, drop_overflow_update=False)`, at micro_size 2: the weights
    of a plain unscaled run, not ones moved 1024 times less."""
    plain = trained(1.0, 1)
    zoo = trained(1024.0, 2, loss_scale_manager=FixedLossScaleManager(1024.0, False))
    assert not np.allclose(plain["2.weight"], INITIAL["2.weight"], atol=1e-3)
    for name, want in plain.items():
        np.testing.assert_allclose(zoo[name], want, rtol=1e-5, atol=1e-6, err_msg=name)



def test_a_scripts_namespace_names_the_knobs_it_sets_with_values_msexp_takes() -> None:
    import argparse

    from msexp.hooks.model_arguments import named

    # mutation: only a dict read (an argparse Namespace, a config object refused)
    args = argparse.Namespace(lr=0.05, batch_size=32, micro_size=0, data_dir="/data")
    assert named(args) == {"lr": 0.05, "batch_size": 32}  # micro_size 0 breaks its rule
    assert named(vars(args)) == named(args)


@pytest.mark.parametrize(("sweep", "amp_level", "want"), [
    ({"loss_scale": "none"}, "O3", {"amp_level": "O3", "keep_batchnorm_fp32": False,
                                    "loss_scale": "none"}),
    ({"amp_level": "O2"}, "O2", {"amp_level": "O2", "keep_batchnorm_fp32": True,
                                 "loss_scale": "none"}),
])
def test_the_scripts_amp_level_brings_its_defaults_only_where_the_sweep_leaves_the_level_alone(
        swept, sweep: dict, amp_level: str, want: dict) -> None:
    """O3's fp16 BatchNorm applies beside the sweep's loss scaling (another group of
    knobs); a script's amp_level equal to the sweep's brings nothing of Model's (no O2
    dynamic scaling over the sweep's none). Mutations (issue 53): `model_arguments._group`
    2 (every knob in loss scaling's group), `knob_values` 21 (the sweep's level not seen)."""
    swept(**sweep)
    values = knob_values(sweep, amp_level, None, None)
    assert {k: values[k] for k in want} == want
