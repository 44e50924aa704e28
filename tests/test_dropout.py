"""Dropout under accumulation (docs/how-a-trial-runs.md#dropout): msexp draws the masks of
every `nn.Dropout` (seeded, split with the batch), so micro_size 4 trains as micro_size 1;
every other kind of layer that draws at random is found, and there each micro-batch draws
its own mask (equal only in distribution); msexp says which in the trial's log and events,
`validate --check`, the sweep's console, MLflow's tags, the report and tune."""

from __future__ import annotations

import json
from pathlib import Path

import mindspore as ms
import numpy as np
import optuna
import pytest
from mindcv.models.layers.drop_path import DropPath
from mindspore import mint, nn, ops
from mindspore.dataset import NumpySlicesDataset
from mindspore.train import Callback, Model
from optuna.distributions import CategoricalDistribution
from typer.testing import CliRunner

from msexp import hooks
from msexp.cli import app
from msexp.execution.local import train_request
from msexp.execution.protocol import TrialRequest
from msexp.keys import StudyKey, TrialKey
from msexp.spec import trial_params
from msexp.tracking.batch_statistics import split_cause
from msexp.tracking.effects import knob_effects
from msexp.training.batch_stats import random_mask_layers, seeded_dropout_layers
from msexp.training.records import BatchStatistics
from tests.assets import dropout
from tests.conftest import ASSETS, child_runs, write

EXPERIMENT = "tests.assets.dropout"
LINE = ("dropout: 1 Dropout layer(s) draw a mask per micro-batch of 3 samples, not one for "
        "the batch of 12: equal to the full-batch update only in distribution: the update "
        "is not the full-batch one")
SEEDED = ("dropout: 1 nn.Dropout layer(s) draw msexp's seeded masks (a seeded trial "
          "repeats; MindSpore's CPU Dropout does not), each micro-batch of 3 samples the rows "
          "of the batch of 12's mask: the update is the full-batch one where a layer's input "
          "has the batch first")


class _OwnNoise(nn.Cell):
    """A user's Cell that holds a random primitive."""

    def __init__(self) -> None:
        super().__init__()
        self.noise = ops.StandardNormal()


class _Block(nn.Cell):
    """mindcv's stochastic depth (a DropPath holding a Dropout) around a Dense."""

    def __init__(self) -> None:
        super().__init__()
        self.dense = nn.Dense(4, 4)
        self.drop_path = DropPath(0.1)


class _Every(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p=0.5)
        self.legacy = nn.Dropout(keep_prob=0.9)
        self.off = nn.Dropout(p=0.0)
        self.d1 = nn.Dropout1d(0.2)
        self.d2 = nn.Dropout2d(0.3)
        self.d3 = nn.Dropout3d(0.3)
        self.mint_dropout = mint.nn.Dropout(0.1)
        self.mint_off = mint.nn.Dropout(0.0)
        self.rrelu = nn.RReLU()
        self.one_slope = nn.RReLU(0.2, 0.2)
        self.own = _OwnNoise()
        self.block = _Block()
        self.norm = nn.LayerNorm((4,))
        self.dense = nn.Dense(4, 4)


def test_every_kind_of_random_mask_is_found_and_rate_0_is_not() -> None:
    # mutation: only isinstance(cell, _DROPOUTS) (no RReLU, random primitive)
    # mutation: seeded() without its subclass case (mindcv's DropPath counted unseeded)
    every = _Every()
    assert random_mask_layers(every) == ["d1", "d2", "d3", "mint_dropout", "rrelu", "own"]
    assert seeded_dropout_layers(every) == ["dropout", "legacy", "block.drop_path.dropout"]
    assert random_mask_layers(dropout.network(0.0)) == []
    assert seeded_dropout_layers(dropout.network(0.0)) == []


class _Losses(Callback):
    def __init__(self) -> None:
        super().__init__()
        self.values: list[float] = []

    def on_train_step_end(self, run_context) -> None:
        self.values.append(float(run_context.original_args().net_outputs.asnumpy()))


def _train(micro_size: int | None, rate: float, noise: float = 0.0) -> list[float]:
    """Two epochs of 4 updates of batch 12 with `Model.train`, from seed 1: MindSpore's own
    `Model` (micro_size None) or msexp's hooked one; each update's loss."""
    ms.set_seed(1)
    network, loss = dropout.network(rate, noise), nn.CrossEntropyLoss()
    opt = nn.Momentum(network.trainable_params(), 0.1, 0.9)
    model = Model(network, loss, opt) if micro_size is None else hooks.model(
        network, loss, opt, {"batch_size": 12, "micro_size": micro_size})
    data = NumpySlicesDataset((dropout.X, dropout.Y), ["x", "y"], shuffle=False)
    losses = _Losses()
    model.train(2, data.batch(12), callbacks=[losses], dataset_sink_mode=False)
    return losses.values


@pytest.mark.slow  # 17 s: the fast tier stays under 5 min
def test_seeded_dropout_keeps_accumulation_exact_and_other_noise_does_not(capsys) -> None:
    """Measured: with msexp's seeded masks micro_size 4 equals micro_size 1 at rate 0.5 in
    all 8 losses (each micro-batch draws its rows of the batch's mask); a noise layer of the
    user's own draws per micro-batch, so there micro_size 4 leaves micro_size 1; at rate 0
    micro_size 1's losses are Model's."""
    whole, split = _train(1, 0.5), _train(4, 0.5)
    assert len(split) == len(whole) == 8 and len(set(whole)) == 8
    # mutation: SeededMask drawing a fresh stream per call (a seed per micro-batch)
    np.testing.assert_allclose(split, whole, rtol=1e-5)
    assert _train(1, 0.5) == whole, "the same seed draws the same masks"
    assert max(abs(a - b) for a, b in zip(whole, _train(1, 0.0))) > 1e-3, "masks applied"
    assert SEEDED in capsys.readouterr().out
    noisy, noisy_split = _train(1, 0.5, noise=1.0), _train(4, 0.5, noise=1.0)
    assert max(abs(a - b) for a, b in zip(noisy, noisy_split)) > 1e-3
    assert LINE in capsys.readouterr().out
    model, whole = _train(None, 0.0), _train(1, 0.0)
    np.testing.assert_allclose(whole, model, rtol=1e-6)
    assert "dropout" not in capsys.readouterr().out


def test_a_hooked_trial_reports_its_dropout_layers(monkeypatch, tmp_path: Path) -> None:
    # mutation: accumulate's split_layers without random_mask_layers (dropout 0, no event)
    events = tmp_path / "reports.jsonl"
    events.write_text("")
    monkeypatch.setenv("MSEXP_EVENTS", str(events))
    _train(4, 0.5)
    told = [json.loads(line) for line in events.read_text().splitlines()]
    assert [e for e in told if e["event"] == "batch_statistics"] == [
        {"event": "batch_statistics", "layers": 0, "micro_batch": 3, "batch": 12,
         "dropout": 0, "seeded": 1, "t": told[0]["t"]}]


@pytest.mark.parametrize("rate", [0.5, 0.0])
def test_the_built_in_loop_reports_dropout_and_its_effect(rate: float, capsys) -> None:
    """The built-in loop seeds `nn.Dropout` too: micro_size 4 equals 1 at either rate."""
    def run(micro_size: int) -> tuple[list, float]:
        params = trial_params(EXPERIMENT, {"micro_size": micro_size, "dropout": rate})
        events: list = []
        metrics, _ = train_request(TrialRequest(EXPERIMENT, params), events.append,
                                   lambda: False)
        return [e for e in events if isinstance(e, BatchStatistics)], metrics["train_loss"]

    (whole, whole_loss), (split, split_loss) = run(1), run(4)
    if rate:
        assert whole == [BatchStatistics(0, 12, 12, 0, 1)] and whole[0].exact
        assert split == [BatchStatistics(0, 3, 12, 0, 1)] and not split[0].exact
        assert SEEDED in capsys.readouterr().out
    else:
        assert whole == split == []
    assert split_loss == pytest.approx(whole_loss, rel=1e-5)


@pytest.mark.parametrize("noise", [0.0, 1.0])
def test_validate_check_says_where_trials_split_a_dropout_networks_batch(
        tmp_path: Path, noise: float) -> None:
    # mutation: cli/sweeps.py passing no random_mask_layers count (no line)
    sweep = write(tmp_path / "dropout.yaml", f"""
        name: dropout
        experiment: {EXPERIMENT}
        method: grid
        objective: [{{metric: eval_accuracy, direction: maximize}}]
        fixed: {{noise: {noise}}}
        params: {{micro_size: [1, 4]}}
        """)
    done = CliRunner().invoke(app, ["validate", str(sweep), "--check"],
                              env={"COLUMNS": "300"})
    assert done.exit_code == 0, done.output
    ours = ("dropout: the network's 1 nn.Dropout layer(s) draw msexp's seeded masks, each "
            "micro-batch the rows of the batch's mask: they leave the update the full-batch "
            "one where a layer's input has the batch first, and a seeded trial repeats "
            "(docs/how-a-trial-runs.md#dropout)")
    expected = f"{sweep}: {ours} (micro-batches: 3 of 12)" if not noise else (
        f"{sweep}: dropout: the network has 1 Dropout layer(s), which draw a mask per "
        "micro-batch, so the update equals the full-batch one only in distribution "
        "(micro-batches: 3 of 12): where the batch is split, the update is not the "
        "full-batch one, and loss and accuracy move with micro_size "
        f"(docs/how-a-trial-runs.md#dropout); {ours}")
    assert expected in done.output.splitlines()


def _micro_size_study(told: dict) -> optuna.Study:
    """micro_size 1 and 4 over two seeds; accuracy falls at 4; the trials told `told`."""
    study = optuna.create_study(study_name="dropout", direction="maximize")
    study.set_user_attr(StudyKey.OBJECTIVES, ["eval_accuracy"])
    dists = {"micro_size": CategoricalDistribution([1, 4]),
             "seed": CategoricalDistribution([0, 1])}
    for micro, seed, accuracy in ((1, 0, 0.9), (1, 1, 0.8), (4, 0, 0.7), (4, 1, 0.6)):
        stats = {"batch_statistics": {**told, "micro_batch": 16 // micro, "batch": 16}}
        study.add_trial(optuna.trial.create_trial(
            params={"micro_size": micro, "seed": seed}, distributions=dists, value=accuracy,
            user_attrs={TrialKey.METRICS: {"eval_accuracy": accuracy}, **stats}))
    return study


@pytest.mark.parametrize(("told", "label", "note"), [
    ({"layers": 0, "dropout": 2}, " (dropout)", "micro_size: the network has 2 Dropout "
     "layer(s), which draw a mask per micro-batch"),
    ({"layers": 3, "dropout": 2}, " (batch statistics, dropout)", "micro_size: the network "
     "has 3 BatchNorm layer(s), which normalise each micro-batch by its own mean and "
     "variance and 2 Dropout layer(s)"),
    ({"layers": 0, "dropout": 0}, "", None),
])
def test_report_discounts_a_micro_size_effect_on_dropout(told: dict, label: str,
                                                          note: str | None) -> None:
    # mutation: inexact_layers reading only "layers" (Dropout unknown to the report)
    found = knob_effects(_micro_size_study(told))
    (line,) = found.lines()
    assert line.startswith(f"micro_size 1 -> 4{label}: eval_accuracy -20.0 pp")
    said = [n for n in found.notes if n.startswith("micro_size: the network")]
    assert (said[0].startswith(note) and "not an accumulation defect" in said[0]) if note \
        else said == []


def test_tune_says_a_candidate_moved_by_dropout() -> None:
    assert split_cause(BatchStatistics(0, 16, 64, 2), BatchStatistics(0, 64, 64, 2)) == (
        " (dropout: its 2 Dropout layer(s) draw a mask per micro-batch of 16, the "
        "baseline's 64; not an accumulation defect)")
    assert split_cause(BatchStatistics(0, 64, 64, 2), BatchStatistics(0, 64, 64, 2)) == ""


def test_tune_says_both_causes_of_a_network_with_batch_norm_and_dropout() -> None:
    """Mutation (issue 53): the two causes joined by `XX; XX`."""
    assert split_cause(BatchStatistics(1, 16, 64, 2), BatchStatistics(1, 64, 64, 2)) == (
        " (batch statistics: its 1 BatchNorm layer(s) normalise micro-batches of 16, the "
        "baseline's 64; dropout: its 2 Dropout layer(s) draw a mask per micro-batch of 16, "
        "the baseline's 64; not an accumulation defect)")


@pytest.mark.slow  # two trials in host processes
def test_a_sweep_tells_dropout_on_its_console_in_mlflow_and_the_report(
        workdir: Path) -> None:
    sweep = write(workdir / "dropout.yaml", f"""
        name: dropout
        experiment: {ASSETS / "dropout.py"}
        method: grid
        objective: [{{metric: eval_accuracy, direction: maximize}}]
        budget: {{trial_timeout: 600}}
        params: {{micro_size: [1, 4]}}
        """)
    done = CliRunner().invoke(app, ["sweep", str(sweep)], env={"COLUMNS": "300"})
    assert done.exit_code == 0, done.output
    said = [line for line in done.output.splitlines() if "Dropout layer(s)" in line]
    assert len(said) == 1 and said[0].startswith(f"{sweep}: dropout: the network's 1 "
                                                 "nn.Dropout layer(s)"), done.output
    runs = {int(r.data.params["micro_size"]): r.data for r in child_runs("dropout")}
    assert runs[1].tags["dropout_layers"] == runs[4].tags["dropout_layers"] == "1"
    assert runs[1].tags["seeded_dropout_layers"] == "1"
    assert runs[1].tags["batch_stat_layers"] == "0"
    assert "batch_statistics" not in runs[1].tags
    assert runs[4].tags["batch_statistics"] == SEEDED
    assert runs[4].metrics["train_loss"] == pytest.approx(runs[1].metrics["train_loss"],
                                                          rel=1e-5)
    report = CliRunner().invoke(app, ["report", str(sweep), "--json"])
    document = json.loads(report.output)
    assert not any("(dropout)" in line for line in document["knob_effects"]), \
        "seeded dropout is no cause to discount micro_size"
