"""msexp's THOR: the update against a NumPy reference, refresh frequency, groups, plan checks."""

from __future__ import annotations

import textwrap

import mindspore as ms
import numpy as np
import pytest
from mindspore import amp, nn

from msexp.errors import SpecError
from msexp.execution.host import running
from msexp.execution.protocol import Start, TrialRequest
from msexp.experiment import load_experiment
from msexp.spec import parse_spec
from msexp.spec.params import parse_params
from msexp.training.optim import thor_learning_rates
from msexp.training.step import TrainStep
from msexp.training.thor import Thor, resolve_impl, thor_damping, thor_lr
from msexp.training.thor_factors import layer_groups

LR, DAMPING, MOMENTUM = 0.1, 0.05, 0.9


def mse(out, target):
    return ((out - target) ** 2).mean()


def run_thor(network, batches, micro_size=1, frequency=2, split=(), scaler=None,
             weight_decay=0.0):
    """Train `network` with THOR on (x, target) batches; return it and the optimizer."""
    optimizer = Thor(network, LR, DAMPING, MOMENTUM, weight_decay, frequency, split)
    step = TrainStep(network, mse, optimizer, micro_size, scaler)
    for x, target in batches:
        size = len(x) // micro_size
        step([(ms.Tensor(x[i:i + size]), ms.Tensor(target[i:i + size]))
              for i in range(0, len(x), size)])
    return network, optimizer


# ---- NumPy reference -------------------------------------------------------------------

def im2col(x: np.ndarray, k: int, stride: int, pads: tuple[int, int, int, int]) -> np.ndarray:
    """(N, C, H, W) -> rows (N*Ho*Wo, C*k*k), channel-major like a (out, C, k, k) weight;
    pads = (top, bottom, left, right)."""
    top, bottom, left, right = pads
    x = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    n, c, h, w = x.shape
    rows = [x[i, :, r:r + k, s:s + k].reshape(-1)
            for i in range(n)
            for r in range(0, h - k + 1, stride)
            for s in range(0, w - k + 1, stride)]
    return np.array(rows)


def reference(weights: np.ndarray, bias: np.ndarray, batches, rows_of, out_of,
              frequency: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """THOR steps in NumPy for one layer with an MSE loss; `rows_of(x)` gives input rows,
    `out_of(rows, n)` lays (rows, out) outputs out as the layer does."""
    w, b = weights.astype(np.float64), bias.astype(np.float64)
    vw, vb = np.zeros_like(w), np.zeros_like(b)
    a_inv = g_inv = None
    for step, (x, target) in enumerate(batches):
        n = len(x)
        a = rows_of(x)
        out = a @ w.reshape(len(w), -1).T + b
        ds_layout = 2 * (out_of(out, n) - target) / target.size
        ds = out_of(ds_layout, n, back=True)
        grad_w = (ds.T @ a).reshape(w.shape)
        grad_b = ds.sum(axis=0)
        if step % frequency == 0:
            root = np.sqrt(DAMPING)
            a_inv = np.linalg.inv(a.T @ a / len(a) + root * np.eye(a.shape[1]))
            g_inv = np.linalg.inv(n * ds.T @ ds + root * np.eye(ds.shape[1]))
        pre = (g_inv @ grad_w.reshape(len(w), -1) @ a_inv).reshape(w.shape)
        vw, vb = MOMENTUM * vw + pre, MOMENTUM * vb + grad_b
        w, b = w - LR * vw, b - LR * vb
    return w, b


def dense_layout(out, n, back=False):
    return out


def conv_layout(channels: int, side: int):
    def layout(values, n, back=False):
        if back:  # (N, C, H, W) -> rows (N*H*W, C)
            return values.transpose(0, 2, 3, 1).reshape(-1, channels)
        return values.reshape(n, side, side, channels).transpose(0, 3, 1, 2)
    return layout


def random_batches(shape_x, shape_y, count=3, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(shape_x).astype(np.float32),
             rng.standard_normal(shape_y).astype(np.float32)) for _ in range(count)]


@pytest.mark.parametrize("micro_size", [1, 2])
def test_dense_steps_match_numpy(micro_size: int) -> None:
    ms.set_seed(1)
    layer = nn.Dense(5, 3)
    w0, b0 = layer.weight.asnumpy().copy(), layer.bias.asnumpy().copy()
    batches = random_batches((8, 5), (8, 3))
    run_thor(nn.SequentialCell(layer), batches, micro_size)
    w, b = reference(w0, b0, batches, lambda x: x.astype(np.float64), dense_layout)
    assert not np.allclose(w, w0, atol=1e-3)
    np.testing.assert_allclose(layer.weight.asnumpy(), w, atol=1e-4, rtol=0)
    np.testing.assert_allclose(layer.bias.asnumpy(), b, atol=1e-4, rtol=0)


@pytest.mark.parametrize(("micro_size", "conv", "pads", "side"), [
    (1, {"stride": 2, "pad_mode": "same"}, (1, 1, 1, 1), 4),  # 7x7, stride 2: pad 1 each side
    (2, {"stride": 2, "pad_mode": "same"}, (1, 1, 1, 1), 4),
    (1, {"pad_mode": "pad", "padding": (0, 1, 1, 0)}, (0, 1, 1, 0), 6),
])
def test_conv_steps_match_numpy(micro_size: int, conv: dict, pads: tuple, side: int) -> None:
    ms.set_seed(2)
    layer = nn.Conv2d(2, 3, 3, has_bias=True, **conv)
    w0, b0 = layer.weight.asnumpy().copy(), layer.bias.asnumpy().copy()
    batches = random_batches((4, 2, 7, 7), (4, 3, side, side))
    run_thor(nn.SequentialCell(layer), batches, micro_size)
    w, b = reference(w0, b0, batches, lambda x: im2col(x.astype(np.float64), 3, conv.get(
        "stride", 1), pads), conv_layout(3, side))
    assert not np.allclose(w, w0, atol=1e-3)
    np.testing.assert_allclose(layer.weight.asnumpy(), w, atol=1e-4, rtol=0)
    np.testing.assert_allclose(layer.bias.asnumpy(), b, atol=1e-4, rtol=0)


def small_net(seed: int = 3) -> nn.Cell:
    ms.set_seed(seed)
    return nn.SequentialCell(
        nn.Conv2d(1, 4, 3, pad_mode="valid"), nn.ReLU(), nn.Flatten(),
        nn.Dense(4 * 6 * 6, 16, activation="relu"), nn.Dense(16, 5))


def net_batches(count: int) -> list:
    return random_batches((8, 1, 8, 8), (8, 5), count, seed=4)


def weights(network: nn.Cell) -> list[np.ndarray]:
    return [p.asnumpy().copy() for p in network.trainable_params()]


def test_taps_keep_the_forward_pass_and_the_weight_names() -> None:
    network = small_net()
    x = ms.Tensor(net_batches(1)[0][0])
    before, names = network(x).asnumpy(), [p.name for p in network.trainable_params()]
    optimizer = Thor(network, LR, DAMPING, MOMENTUM)
    np.testing.assert_array_equal(network(x).asnumpy(), before)
    assert [p.name for p in network.trainable_params()] == names
    assert [p.name for p in optimizer.parameters] == names
    assert optimizer.layer_of == (0, 1, -1, 2, -1)  # conv (no bias), 2 Dense; biases plain


def test_inverses_change_exactly_every_frequency_steps() -> None:
    network = small_net()
    optimizer = Thor(network, LR, DAMPING, MOMENTUM, frequency=3)
    step = TrainStep(network, mse, optimizer, 1)
    inverses = list(optimizer.state.a_inv) + list(optimizer.state.g_inv)
    before = [p.asnumpy().copy() for p in inverses]
    changed_at = []
    for i, (x, target) in enumerate(net_batches(8)):
        step([(ms.Tensor(x), ms.Tensor(target))])
        after = [p.asnumpy().copy() for p in inverses]
        changes = [not np.array_equal(a, b) for a, b in zip(before, after)]
        assert all(changes) or not any(changes), f"step {i}: only some inverses changed"
        if any(changes):
            changed_at.append(i)
        before = after
    assert changed_at == [0, 3, 6]


@pytest.mark.slow  # over 5 s: the fast tier stays quick
def test_split_groups_give_the_same_update() -> None:
    updates = []
    for split in ([], [0], [0, 1]):
        network, optimizer = run_thor(small_net(), net_batches(3), split=split)
        assert optimizer.groups == layer_groups(split, 3)
        updates.append(weights(network))
    assert [len(g) for g in layer_groups([0], 3)] == [1, 2]
    for other in updates[1:]:
        for a, b in zip(updates[0], other):
            np.testing.assert_allclose(b, a, atol=1e-6, rtol=0)


@pytest.mark.slow  # over 5 s: the fast tier stays quick
def test_same_seed_gives_identical_weights() -> None:
    first = weights(run_thor(small_net(), net_batches(3), weight_decay=0.01)[0])
    second = weights(run_thor(small_net(), net_batches(3), weight_decay=0.01)[0])
    initial = weights(small_net())
    for a, b, i in zip(first, second, initial):
        assert not np.array_equal(a, i)
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow  # over 5 s: the fast tier stays quick
def test_loss_scale_is_taken_out_of_the_factors() -> None:
    plain = weights(run_thor(small_net(), net_batches(2))[0])
    scaled = weights(run_thor(small_net(), net_batches(2), scaler=amp.StaticLossScaler(1024.0))[0])
    for a, b in zip(plain, scaled):
        np.testing.assert_allclose(b, a, atol=1e-5, rtol=0)


@pytest.mark.slow  # over 5 s: the fast tier stays quick
def test_amp_o2_keeps_factors_in_float32() -> None:
    initial = weights(small_net())
    full = weights(run_thor(small_net(), net_batches(2))[0])
    network = amp.auto_mixed_precision(small_net(), "O2", dtype=ms.float16)
    network, optimizer = run_thor(network, net_batches(2))
    for p in (*optimizer.state.a_inv, *optimizer.state.g_inv, *optimizer.state.a_sum):
        assert p.dtype == ms.float32
    # mutation (issue 18): atol 2e-2 on the weights let a 1.5e-2 update go unchecked;
    # compare each parameter's update instead (measured: at most 8.2% apart, mostly < 0.5%)
    for start, a, b in zip(initial, full, weights(network)):
        assert np.isfinite(b).all()
        want, got = a - start, b - start
        assert np.linalg.norm(got - want) <= 0.15 * np.linalg.norm(want)


def test_schedules_follow_seed_004() -> None:
    damping = thor_damping(0.03, 0.5, epochs := 20, 10)
    assert len(damping) == epochs * 10
    assert damping[99] == pytest.approx(0.03 * 0.5)  # end of epoch 10
    rates = thor_lr(0.1, 2.0, 4, 5, decay_epochs=3)
    assert rates[4] == pytest.approx(0.1 * 0.75 ** 2)  # end of epoch 1
    assert rates[14] == pytest.approx(0.1 * 0.25 ** 2 * 0.5)  # epoch 3: halved once
    assert rates[-1] == 0.0
    knobs = load_experiment("lenet_digits").knobs
    fixed = {"optimizer": "thor", "epochs": 3, "lr": 0.1, "thor.lr_decay": 2.0}
    run_rates = thor_learning_rates(parse_params("x", knobs, fixed, {}).resolve({}), 5)
    assert run_rates == pytest.approx(thor_lr(0.1, 2.0, 4, 5)[:15])  # zero one epoch later


def test_implementation_dispatch() -> None:
    assert resolve_impl("auto", "CPU") == "msexp"
    assert resolve_impl("auto", "GPU") == "msexp"
    assert resolve_impl("auto", "Ascend") == "mindspore"
    assert resolve_impl("msexp", "Ascend") == "msexp"
    with pytest.raises(ValueError, match="thor_impl=mindspore cannot run on CPU"):
        resolve_impl("mindspore", "CPU")


SWEEP = """
name: thor
experiment: lenet_digits
fixed: {{epochs: 1, optimizer: thor}}
params:
  thor.split_indices: {values}
"""


@pytest.mark.parametrize(("values", "key", "got"), [
    ("[[], [7]]", "params.thor.split_indices.1", "[7]"),
    ("[[3, 1]]", "params.thor.split_indices.0", "[3, 1]"),
    ("[[2, 2]]", "params.thor.split_indices.0", "[2, 2]"),
    ("{values: [[0], [-1]], when: {optimizer: thor}}", "params.thor.split_indices.values.1",
     "[-1]"),
])
def test_split_indices_are_checked_at_plan_time(values: str, key: str, got: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(SWEEP.format(values=values), "x.yaml")
    assert str(info.value) == (f"x.yaml: {key}: indices must be sorted, distinct and < 5 "
                               f"(lenet_digits has 5 THOR layers), got {got}")


def test_split_indices_in_fixed_are_checked_too() -> None:
    text = textwrap.dedent("""
        name: thor
        experiment: lenet_digits
        fixed: {optimizer: thor, thor.split_indices: [1, 5]}
    """)
    with pytest.raises(SpecError, match=r"x.yaml: fixed.thor.split_indices: indices must be "
                                        r"sorted, distinct and < 5 .*got \[1, 5\]"):
        parse_spec(text, "x.yaml")


def test_valid_split_indices_plan() -> None:
    spec = parse_spec(SWEEP.format(values="[[], [1], [0, 4]]"), "x.yaml")
    assert [p.get("thor.split_indices") for p in spec.space.grid()] == [[], [1], [0, 4]]


@pytest.mark.slow
def test_lenet_trains_with_thor_end_to_end() -> None:
    exp = load_experiment("lenet_digits")
    params = parse_params("--set", exp.knobs, {"optimizer": "thor", "epochs": 1}, {}).resolve({})
    events: list = []
    metrics = running.run(TrialRequest("lenet_digits", params), events.append)
    assert metrics["eval_accuracy"] > 0.5  # chance is 0.1
    assert metrics["thor_inverse_s"] > 0
    start = next(e for e in events if isinstance(e, Start))
    assert start.impl == {"thor_impl": "msexp"}


@pytest.mark.slow  # over 3 s: the fast tier stays under 5 min
def test_the_implementation_used_is_logged_as_a_param(workdir) -> None:
    """Through the trial path: the sweep asks for `auto`, the run records what ran."""
    from typer.testing import CliRunner

    from msexp.cli import app
    from tests.conftest import mlflow_client, write

    sweep = write(workdir / "impl.yaml", """
        name: thor-impl
        experiment: mlp_digits
        fixed: {optimizer: thor, epochs: 1, hidden: 16, thor_impl: auto}
        params: {lr: [0.05]}
    """)
    result = CliRunner().invoke(app, ["sweep", str(sweep)])
    assert result.exit_code == 0, result.output
    client = mlflow_client()
    (run,) = [r for r in client.search_runs([client.get_experiment_by_name(
        "thor-impl").experiment_id]) if r.data.tags.get("msexp.role") == "trial"]
    assert run.data.params["thor_impl"] == "msexp"
