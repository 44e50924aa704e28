"""Batch statistics under accumulation (docs/how-a-trial-runs.md#batch-statistics): the
layers that normalise with the statistics of their batch are found in any network; a
network with BatchNorm trains at micro_size 1 exactly as MindSpore's own `Model` trains it,
and differently at micro_size 4, and msexp says so in the trial's log and events."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import optuna
import pytest
from mindspore import mint, nn, ops
from mindspore.dataset import NumpySlicesDataset
from mindspore.train import Callback, Model
from optuna.distributions import CategoricalDistribution
from typer.testing import CliRunner

from msexp import hooks
from msexp.cli import app
from msexp.execution.local import train_request
from msexp.execution.protocol import Epoch, TrialRequest
from msexp.keys import StudyKey, TrialKey
from msexp.spec import trial_params
from msexp.tracking.effects import knob_effects
from msexp.training.batch_stats import batch_statistic_layers
from msexp.training.records import BatchStatistics
from tests.assets import batchnorm
from tests.conftest import ASSETS, child_runs, write

EXPERIMENT = "tests.assets.batchnorm"
LINE = "batch statistics: 1 BatchNorm layer(s) normalise each micro-batch of 4 samples"


class _OwnNorm(nn.Cell):
    """A Cell of a user's own that calls MindSpore's BatchNorm primitive in train mode."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = ops.BatchNorm(is_training=True)


class _Mixed(nn.Cell):
    def __init__(self) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm1d(4)
        self.bn2 = nn.BatchNorm2d(4)
        self.frozen = nn.BatchNorm2d(4, use_batch_statistics=False)
        self.mint_bn = mint.nn.BatchNorm2d(4)
        self.own = _OwnNorm()
        self.layer = nn.LayerNorm((4,))
        self.group = nn.GroupNorm(2, 4)
        self.instance = nn.InstanceNorm2d(4)
        self.dense = nn.Dense(4, 4)


def test_every_kind_of_batch_norm_is_found_and_per_sample_norms_are_not() -> None:
    assert batch_statistic_layers(_Mixed()) == ["bn1", "bn2", "mint_bn", "own"]
    assert batch_statistic_layers(batchnorm.network(norm=False)) == []


class _Losses(Callback):
    def __init__(self) -> None:
        self.values: list[float] = []

    def on_train_step_end(self, run_context) -> None:
        self.values.append(float(run_context.original_args().net_outputs.asnumpy()))


def _train(micro_size: int | None, norm: bool = True) -> tuple[dict[str, np.ndarray], list]:
    """Two updates of batch 16 with `Model.train`: MindSpore's own `Model` (micro_size None)
    or msexp's hooked one; every parameter after (moving statistics included), each loss."""
    network, loss = batchnorm.network(norm), nn.CrossEntropyLoss()
    opt = nn.Momentum(network.trainable_params(), 0.1, 0.9)
    if micro_size is None:
        model = Model(network, loss, opt)
    else:
        model = hooks.model(network, loss, opt, {"batch_size": 16, "micro_size": micro_size})
    data = NumpySlicesDataset((batchnorm.X[:32], batchnorm.Y[:32]), ["x", "y"], shuffle=False)
    losses = _Losses()
    model.train(1, data.batch(16), callbacks=[losses], dataset_sink_mode=False)
    return {p.name: p.asnumpy() for p in network.get_parameters()}, losses.values


def test_micro_size_1_trains_a_batch_norm_network_as_mindspores_model_does(capsys) -> None:
    plain, plain_losses = _train(None)
    ours, our_losses = _train(1)
    assert any("moving_mean" in name for name in plain)
    for name, want in plain.items():
        np.testing.assert_allclose(ours[name], want, rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(our_losses, plain_losses, rtol=1e-5)
    assert "batch statistics" not in capsys.readouterr().out


def test_micro_size_4_changes_a_batch_norm_network_and_says_so(capsys) -> None:
    whole, whole_losses = _train(1)
    split, split_losses = _train(4)
    assert LINE in capsys.readouterr().out
    assert abs(split_losses[0] - whole_losses[0]) > 1e-3, "the first loss, from equal weights"
    assert not np.allclose(split["0.weight"], whole["0.weight"], atol=1e-4)
    moving = next(name for name in whole if "moving_mean" in name)
    assert not np.allclose(split[moving], whole[moving], atol=1e-4)


def test_without_batch_norm_micro_size_4_stays_exact(capsys) -> None:
    whole, whole_losses = _train(1, norm=False)
    split, split_losses = _train(4, norm=False)
    for name, want in whole.items():
        np.testing.assert_allclose(split[name], want, rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(split_losses, whole_losses, rtol=1e-5)
    assert "batch statistics" not in capsys.readouterr().out


def test_a_hooked_trial_reports_its_batch_norm_layers(monkeypatch, tmp_path: Path) -> None:
    events = tmp_path / "reports.jsonl"
    events.write_text("")
    monkeypatch.setenv("MSEXP_EVENTS", str(events))
    _train(4)
    told = [json.loads(line) for line in events.read_text().splitlines()]
    assert [e for e in told if e["event"] == "batch_statistics"] == [
        {"event": "batch_statistics", "layers": 1, "micro_batch": 4, "batch": 16,
         "dropout": 0, "seeded": 0, "t": told[0]["t"]}]


def _built_in(micro_size: int, norm: bool, capsys) -> tuple[list, float, str]:
    params = trial_params(EXPERIMENT, {"micro_size": micro_size, "norm": norm})
    events: list = []
    metrics, _ = train_request(TrialRequest(EXPERIMENT, params), events.append, lambda: False)
    return ([e for e in events if isinstance(e, BatchStatistics)], metrics["train_loss"],
            capsys.readouterr().out)


@pytest.mark.parametrize("norm", [True, False])
def test_the_built_in_loop_reports_batch_norm_and_its_effect(norm: bool, capsys) -> None:
    whole, whole_loss, whole_log = _built_in(1, norm, capsys)
    split, split_loss, split_log = _built_in(4, norm, capsys)
    assert "batch statistics" not in whole_log
    if norm:
        assert whole == [BatchStatistics(1, 16, 16)] and whole[0].exact
        assert split == [BatchStatistics(1, 4, 16)] and not split[0].exact
        assert LINE in split_log
        assert abs(split_loss - whole_loss) > 1e-4
    else:
        assert whole == split == []
        assert "batch statistics" not in split_log
        assert split_loss == pytest.approx(whole_loss, rel=1e-5)


def test_a_batch_statistics_event_survives_the_result_record() -> None:
    from msexp.execution.result import Status, TrialResult

    result = TrialResult(Status.COMPLETE)
    result.absorb(BatchStatistics(3, 8, 32))
    result.absorb(Epoch(1, 2, 0.1, {"eval_loss": 1.0}))
    again = TrialResult.from_json(json.loads(json.dumps(result.to_json())))
    assert again.batch_statistics == BatchStatistics(3, 8, 32)
    assert "micro-batch of 8 samples" in again.batch_statistics.line()
    assert "batch of 32" in again.batch_statistics.line()


@pytest.mark.parametrize("norm", [True, False])
def test_validate_check_says_where_trials_split_a_batch_norm_networks_batch(
        norm: bool, tmp_path: Path) -> None:
    sweep = write(tmp_path / "bn.yaml", f"""
        name: bn
        experiment: {EXPERIMENT}
        method: grid
        objective: [{{metric: eval_accuracy, direction: maximize}}]
        fixed: {{norm: {str(norm).lower()}, batch_size: 16}}
        params: {{micro_size: [1, 2, 4]}}
        """)
    done = CliRunner().invoke(app, ["validate", str(sweep), "--check"],
                              env={"COLUMNS": "300"})
    assert done.exit_code == 0, done.output
    warned = [line for line in done.output.splitlines() if "batch statistics" in line]
    if norm:
        assert warned == [f"{sweep}: batch statistics: the network has 1 BatchNorm layer(s), "
                          "which normalise each micro-batch by its own mean and variance "
                          "(micro-batches: 4 of 16, 8 of 16): where the batch is split, the "
                          "update is not the full-batch one, and loss and accuracy move with "
                          "micro_size (docs/how-a-trial-runs.md#batch-statistics)"]
    else:
        assert warned == []


def _micro_size_study(layers: int, told_at: tuple[int, ...] = (1, 4)) -> optuna.Study:
    """micro_size 1 and 4 over two seeds; accuracy falls at 4; the trials' network holds
    `layers` BatchNorm layers, as the trials at the micro sizes `told_at` reported it."""
    study = optuna.create_study(study_name="bn", direction="maximize")
    study.set_user_attr(StudyKey.OBJECTIVES, ["eval_accuracy"])
    dists = {"micro_size": CategoricalDistribution([1, 4]),
             "seed": CategoricalDistribution([0, 1])}
    for micro, seed, accuracy in ((1, 0, 0.9), (1, 1, 0.8), (4, 0, 0.7), (4, 1, 0.6)):
        stats = {"batch_statistics": {"layers": layers, "micro_batch": 16 // micro,
                                      "batch": 16}} if layers and micro in told_at else {}
        study.add_trial(optuna.trial.create_trial(
            params={"micro_size": micro, "seed": seed}, distributions=dists, value=accuracy,
            user_attrs={TrialKey.METRICS: {"eval_accuracy": accuracy}, **stats}))
    return study


@pytest.mark.parametrize("layers", [0, 20])
def test_report_calls_a_micro_size_effect_on_batch_norm_batch_statistics(layers: int) -> None:
    found = knob_effects(_micro_size_study(layers))
    (line,) = found.lines()
    labelled = "micro_size 1 -> 4 (batch statistics): eval_accuracy -20.0 pp"
    if layers:
        assert line.startswith(labelled)
        assert any(note.startswith("micro_size: the network has 20 BatchNorm layer(s)")
                   for note in found.notes)
    else:
        assert line.startswith("micro_size 1 -> 4: eval_accuracy -20.0 pp")
        assert not any("BatchNorm" in note for note in found.notes)


def test_the_report_counts_the_batch_norm_layers_the_trials_reported_most() -> None:
    """Only the split trials (micro_size 4) told their statistics, as a trial resumed
    from a checkpoint or a command's script may leave them out: the network still has its
    20 BatchNorm layers, and the micro_size effect is still theirs."""
    # mutation: `min` for `max` over the trials' BatchNorm counts (the unsplit trials' 0
    # wins: no "(batch statistics)" label, no note)
    found = knob_effects(_micro_size_study(20, told_at=(4,)))
    (line,) = found.lines()
    assert line.startswith("micro_size 1 -> 4 (batch statistics): eval_accuracy -20.0 pp")
    assert any(note.startswith("micro_size: the network has 20 BatchNorm layer(s)")
               for note in found.notes)


def test_tune_says_a_candidate_lost_accuracy_to_batch_statistics() -> None:
    from msexp.tune.candidates import Candidate
    from msexp.tune.measure import Profile
    from msexp.tune.phases import Verdict, _judge

    def verdict(micro: int, accuracy: list[float], layers: int) -> Verdict:
        stats = BatchStatistics(layers, 64 // micro, 64) if layers else None
        return Verdict(Profile(Candidate({"micro_size": micro}, {"micro_size": micro})),
                       accuracy, 100.0, 1.0, batch_statistics=stats)

    for layers, cause in ((4, " (batch statistics: its 4 BatchNorm layer(s) normalise "
                               "micro-batches of 16, the baseline's 64; not an accumulation "
                               "defect)"), (0, "")):
        base, split = verdict(1, [0.9, 0.8], layers), verdict(4, [0.6, 0.5], layers)
        _judge(split, base, "eval_accuracy", True, 0.0)
        assert split.rejected == ("eval_accuracy 0.55 is worse than the baseline's 0.85 by "
                                  "more than 0.07071 (the baseline's seed spread over 2 "
                                  f"seeds){cause}")


@pytest.mark.slow  # two trials in host processes
def test_a_sweep_tells_batch_statistics_in_the_log_mlflow_optuna_and_report(
        workdir: Path) -> None:
    sweep = write(workdir / "bn.yaml", f"""
        name: bn
        experiment: {ASSETS / "batchnorm.py"}
        method: grid
        objective: [{{metric: eval_accuracy, direction: maximize}}]
        budget: {{trial_timeout: 600}}
        fixed: {{batch_size: 16}}
        params: {{micro_size: [1, 4]}}
        """)
    done = CliRunner().invoke(app, ["sweep", str(sweep)], env={"COLUMNS": "300"})
    assert done.exit_code == 0, done.output
    runs = {int(r.data.params["micro_size"]): r.data.tags for r in child_runs("bn")}
    assert runs[1]["batch_stat_layers"] == runs[4]["batch_stat_layers"] == "1"
    assert "batch_statistics" not in runs[1]
    assert runs[4]["batch_statistics"].startswith(LINE)
    logs = {p.parent.name: p.read_text() for p in workdir.glob("mlruns/trials/bn/*/trial.log")}
    assert sorted(LINE in text for text in logs.values()) == [False, True]
    report = CliRunner().invoke(app, ["report", str(sweep), "--json"])
    document = json.loads(report.output)
    assert any(line.startswith("micro_size 1 -> 4 (batch statistics):")
               for line in document["knob_effects"])
