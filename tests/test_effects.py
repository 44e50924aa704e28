"""The knob-effects report: each swept knob against each metric, ratios to a baseline value,
a summary line per knob, learning curves, as PNG files readable at 4 and at 100+ trials."""

from __future__ import annotations

import math
import random
import statistics
import struct
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution
from typer.testing import CliRunner

from msexp.cli import app
from msexp.cli.options import parse_baselines
from msexp.errors import MsexpError
from msexp.keys import StudyKey, TrialKey
from msexp.tracking.curves import (
    MAX_UPDATE_POINTS,
    UPDATES,
    curves_of,
    epoch_table,
    update_curves_of,
)
from msexp.tracking.effects import (
    MAX_CATEGORIES,
    is_fraction_name,
    knob_effects,
)
from msexp.tracking.report import build_report
from msexp.training.records import Epoch
from tests.conftest import mlflow_client, write

GRID = {  # (micro_size, amp_level) -> metrics
    (1, "O0"): {"eval_accuracy": 0.90, "samples_per_s": 1000.0, "train_mem_mb": 100.0},
    (1, "O2"): {"eval_accuracy": 0.88, "samples_per_s": 800.0, "train_mem_mb": 80.0},
    (8, "O0"): {"eval_accuracy": 0.89, "samples_per_s": 300.0, "train_mem_mb": 60.0},
    (8, "O2"): {"eval_accuracy": 0.86, "samples_per_s": 260.0, "train_mem_mb": 50.0},
}


def grid_study() -> optuna.Study:
    study = optuna.create_study(study_name="grid", direction="maximize")
    study.set_user_attr(StudyKey.OBJECTIVES, ["eval_accuracy"])
    dists = {"micro_size": CategoricalDistribution([1, 8]),
             "amp_level": CategoricalDistribution(["O0", "O2"])}
    for (micro, amp), metrics in GRID.items():
        curve = {"epoch": [1, 2, 3], "eval_accuracy": [0.5, 0.8, metrics["eval_accuracy"]],
                 "eval_loss": [1.2, 0.6, 0.4]}
        study.add_trial(optuna.trial.create_trial(
            params={"micro_size": micro, "amp_level": amp}, distributions=dists,
            value=metrics["eval_accuracy"],
            user_attrs={TrialKey.METRICS: {**metrics, "overflow_steps": 0, "wall_s": 3.0},
                        TrialKey.EPOCHS: curve}))
    return study


def tpe_like_study(n: int = 100) -> optuna.Study:
    """A log-sampled lr, a categorical optimizer, per-epoch objective only as intermediate
    values (what the pruner gets), and peak_mem_mb instead of train_mem_mb."""
    rng = random.Random(0)
    study = optuna.create_study(study_name="tpe", direction="maximize")
    dists = {"lr": FloatDistribution(1e-4, 1e-1, log=True),
             "optimizer": CategoricalDistribution(["sgd", "momentum", "adam"])}
    for _ in range(n):
        lr = 10 ** rng.uniform(-4, -1)
        optimizer = rng.choice(["sgd", "momentum", "adam"])
        accuracy = 0.5 + 0.1 * (math.log10(lr) + 4) + rng.uniform(-0.05, 0.05)
        metrics = {"eval_accuracy": accuracy, "step_ms": 5 + 10 * lr + rng.random(),
                   "peak_mem_mb": 400 + (50 if optimizer == "adam" else 0)}
        study.add_trial(optuna.trial.create_trial(
            params={"lr": lr, "optimizer": optimizer}, distributions=dists, value=accuracy,
            intermediate_values={1: accuracy - 0.2, 2: accuracy - 0.05, 3: accuracy},
            user_attrs={TrialKey.METRICS: metrics}))
    return study


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's header; fails on anything that is not a PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", path
    assert data[-8:-4] == b"IEND", f"{path} is truncated"
    return struct.unpack(">II", data[16:24])


def assert_sensible_png(path: Path) -> tuple[int, int]:
    width, height = png_size(path)
    assert 300 <= width <= 3000 and 200 <= height <= 3000, (path, width, height)
    assert path.stat().st_size > 5000, f"{path} is nearly empty"
    return width, height


def test_grid_summary_ratios_are_the_means_ratios(tmp_path: Path) -> None:
    report = build_report(grid_study(), tmp_path)
    found = report.knob_effects
    assert [k.name for k in found.knobs] == ["amp_level", "micro_size"]
    assert found.metrics == ["eval_accuracy", "samples_per_s", "train_mem_mb"]  # 0 overflows
    changes = {c.metric: c for c in found.summary["micro_size"]}
    assert changes["samples_per_s"].ratio == pytest.approx((300 + 260) / (1000 + 800))
    assert changes["train_mem_mb"].ratio == pytest.approx((60 + 50) / (100 + 80))
    accuracy_pp = 100 * ((0.89 + 0.86) / 2 - (0.90 + 0.88) / 2)
    assert changes["eval_accuracy"].text() == f"eval_accuracy {accuracy_pp:+.1f} pp"
    assert found.lines()[1] == ("micro_size 1 -> 8: eval_accuracy -1.5 pp, "
                                "samples_per_s x0.311, train_mem_mb x0.611")
    assert found.lines()[0].startswith("amp_level O0 -> O2: eval_accuracy -2.5 pp")
    assert "| micro_size | 1 -> 8 | -1.5 pp | x0.311 | x0.611 |" in \
        (tmp_path / "effects.md").read_text()


def test_the_baseline_option_changes_the_ratios(tmp_path: Path) -> None:
    found = knob_effects(grid_study(), parse_baselines(["micro_size=8", "amp_level=O2"]))
    changes = {c.metric: c for c in found.summary["micro_size"]}
    assert changes["samples_per_s"].ratio == pytest.approx((1000 + 800) / (300 + 260))
    assert found.lines()[1].startswith("micro_size 8 -> 1: eval_accuracy +1.5 pp, "
                                       "samples_per_s x3.21")
    assert found.lines()[0].startswith("amp_level O2 -> O0:")
    with pytest.raises(MsexpError, match=r"micro_size=3: micro_size took 1, 8"):
        knob_effects(grid_study(), {"micro_size": "3"})
    with pytest.raises(MsexpError, match="not a swept knob"):
        knob_effects(grid_study(), {"batch_size": "64"})
    with pytest.raises(MsexpError, match="KNOB=VALUE"):
        parse_baselines(["micro_size"])


def test_repeats_give_the_seed_spread() -> None:
    study = optuna.create_study(direction="maximize")
    dists = {"micro_size": CategoricalDistribution([1, 8]), "seed": CategoricalDistribution([0, 1])}
    measured = {(1, 0): (0.90, 1000.0), (1, 1): (0.92, 1100.0),
                (8, 0): (0.70, 300.0), (8, 1): (0.74, 330.0)}
    for (micro, seed), (accuracy, speed) in measured.items():
        study.add_trial(optuna.trial.create_trial(
            params={"micro_size": micro, "seed": seed}, distributions=dists, value=accuracy,
            user_attrs={TrialKey.METRICS: {"eval_accuracy": accuracy, "samples_per_s": speed}}))
    found = knob_effects(study)
    assert [k.name for k in found.knobs] == ["micro_size"]  # the seed is no knob
    accuracy_spread = statistics.fmean([statistics.variance([0.90, 0.92]),
                                        statistics.variance([0.70, 0.74])]) ** 0.5
    speed_spread = statistics.fmean([statistics.variance([1000, 1100]),
                                     statistics.variance([300, 330])]) ** 0.5
    assert found.lines() == [f"micro_size 1 -> 8: eval_accuracy -19.0 pp +/- "
                             f"{100 * accuracy_spread:.1f}, samples_per_s x0.3 +/- "
                             f"{speed_spread / 1050:.2g}"]
    assert found.lines()[0].endswith("pp +/- 2.2, samples_per_s x0.3 +/- 0.05")


def test_grid_pngs_html_and_learning_curves(tmp_path: Path) -> None:
    report = build_report(grid_study(), tmp_path, color_by="micro_size")
    names = {p.name for p in report.plots}
    assert {"effects_micro_size.png", "effects_amp_level.png", "learning_curves.png",
            "effects.md", "report.html", "history.png", "parallel_coordinates.png",
            "importances.png"} <= names
    assert "tradeoffs.html" not in names
    for name in ("effects_micro_size.png", "effects_amp_level.png", "learning_curves.png",
                 "history.png", "parallel_coordinates.png", "importances.png"):
        assert_sensible_png(tmp_path / name)
    page = (tmp_path / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 6
    assert "micro_size 1 -&gt; 8: eval_accuracy -1.5 pp" in page
    with pytest.raises(MsexpError, match="--color-by seed: not a swept knob"):
        build_report(grid_study(), tmp_path, color_by="seed")


def test_a_100_trial_tpe_study_bins_ranges_on_a_log_axis(tmp_path: Path) -> None:
    study = tpe_like_study(100)
    report = build_report(study, tmp_path)
    found = report.knob_effects
    lr = next(k for k in found.knobs if k.name == "lr")
    assert lr.is_range and lr.log and len(lr.levels) == 5
    assert all(len(level.trials) == 20 for level in lr.levels)
    assert found.metrics == ["eval_accuracy", "step_ms", "peak_mem_mb"]  # the fallback
    ordered = sorted(study.trials, key=lambda t: t.params["lr"])
    low = statistics.fmean(t.user_attrs["metrics"]["step_ms"] for t in ordered[:20])
    high = statistics.fmean(t.user_attrs["metrics"]["step_ms"] for t in ordered[-20:])
    changes = {c.metric: c for c in found.summary["lr"]}
    assert changes["step_ms"].ratio == pytest.approx(high / low)
    assert found.lines()[0].startswith(
        f"lr {ordered[0].params['lr']:.3g}-{ordered[19].params['lr']:.3g} -> ")
    optimizer = {c.metric: c for c in found.summary["optimizer"]}
    assert optimizer["peak_mem_mb"].ratio == pytest.approx(450 / 400)  # sgd -> adam
    shapes = {p.name: assert_sensible_png(p) for p in report.plots if p.suffix == ".png"}
    assert set(shapes) == {"effects_lr.png", "effects_optimizer.png", "learning_curves.png",
                           "history.png", "parallel_coordinates.png", "importances.png"}
    moved = knob_effects(study, {"lr": "0.05"})
    lr_moved = next(k for k in moved.knobs if k.name == "lr")
    assert lr_moved.baseline == 4 and lr_moved.compared is lr_moved.levels[0]


def networks_study(names: list[str], trials: int) -> optuna.Study:
    """A categorical knob whose first five values ran more often than the rest."""
    study = optuna.create_study(study_name="networks")
    dists = {"network": CategoricalDistribution(names)}
    for i in range(trials):
        name = names[i % len(names) if i < 0.75 * trials else i % min(5, len(names))]
        study.add_trial(optuna.trial.create_trial(
            params={"network": name}, distributions=dists, value=float(i),
            user_attrs={TrialKey.METRICS: {"step_ms": 1.0 + i % 7}}))
    return study


def test_many_categories_are_capped_and_the_figure_widens(tmp_path: Path) -> None:
    names = [f"net{i:02d}" for i in range(30)]
    report = build_report(networks_study(names, 200), tmp_path / "many")
    (knob,) = report.knob_effects.knobs
    assert len(knob.levels) == MAX_CATEGORIES and knob.hidden == 30 - MAX_CATEGORIES
    assert [level.label for level in knob.levels[:6]] == [f"net{i:02d}" for i in range(6)]
    wide, _ = assert_sensible_png(tmp_path / "many" / "effects_network.png")
    build_report(networks_study(names[:2], 4), tmp_path / "two")
    narrow, _ = assert_sensible_png(tmp_path / "two" / "effects_network.png")
    assert wide > 1.5 * narrow


def test_epoch_table_is_what_curves_read() -> None:
    epochs = [Epoch(1, 22, 0.5, {"eval_accuracy": 0.81234567, "train_loss": 0.4}),
              Epoch(2, 44, 1.0, {"eval_accuracy": 0.9, "eval_loss": float("nan")})]
    table = epoch_table(epochs)
    assert table == {"epoch": [1, 2], "eval_accuracy": [0.812346, 0.9],
                     "eval_loss": [None, None]}
    trial = optuna.trial.create_trial(value=0.9, user_attrs={TrialKey.EPOCHS: table})
    assert curves_of(trial, "eval_accuracy") == {"eval_accuracy": [(1, 0.812346), (2, 0.9)],
                                                 "eval_loss": []}
    pruned_only = optuna.trial.create_trial(value=0.9, intermediate_values={1: 0.5, 2: 0.7})
    assert curves_of(pruned_only, "eval_loss") == {"eval_loss": [(1, 0.5), (2, 0.7)]}


@pytest.mark.slow
def test_report_of_a_real_sweep_logs_the_pngs_on_the_parent_run(workdir: Path) -> None:
    sweep = write(workdir / "fx.yaml", """
        name: fx
        experiment: mlp_digits
        fixed: {epochs: 2, batch_size: 64, hidden: 32}
        params:
          micro_size: [1, 2]
    """)
    assert CliRunner().invoke(app, ["sweep", str(sweep)]).exit_code == 0
    result = CliRunner().invoke(app, ["report", str(sweep), "--baseline", "micro_size=2"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "micro_size 2 -> 1: eval_accuracy " in result.output
    study = optuna.load_study(study_name="fx", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend("mlruns/optuna.journal")))
    assert [t.user_attrs[TrialKey.EPOCHS]["epoch"] for t in study.trials] == [[1, 2], [1, 2]]
    client = mlflow_client()
    artifacts = {a.path for a in client.list_artifacts(
        study.user_attrs[StudyKey.PARENT_RUN], "report")}
    assert {"report/effects_micro_size.png", "report/learning_curves.png",
            "report/report.html", "report/effects.md"} <= artifacts
    assert_sensible_png(Path("mlruns/reports/fx/learning_curves.png"))


def command_study(accuracy: dict[tuple[float, int], float], *, name: str = "cmd",
                  storage: optuna.storages.BaseStorage | None = None) -> optuna.Study:
    """A command experiment's study: the script's own metric names, an objective of its
    own, a constant metric, `epoch`, and the replicate seed beside the swept lr."""
    study = optuna.create_study(study_name=name, direction="maximize", storage=storage)
    study.set_user_attr(StudyKey.OBJECTIVES, ["eval_acc"])
    dists = {"lr": CategoricalDistribution([0.01, 0.1]), "seed": CategoricalDistribution([0, 1])}
    for (lr, seed), value in accuracy.items():
        metrics = {"eval_acc": value, "train_loss": 2.0 - 10 * lr + seed / 100,
                   "Top_1_Accuracy": value / 2, "epoch_time": 14.0 + lr, "epoch": 3,
                   "device_count": 1, "wall_s": 3.0 + seed}
        study.add_trial(optuna.trial.create_trial(
            params={"lr": lr, "seed": seed}, distributions=dists, value=value,
            user_attrs={TrialKey.METRICS: metrics}))
    return study


def test_effects_cover_the_objective_and_every_metric_the_script_printed(
        tmp_path: Path) -> None:
    study = command_study({(0.01, 0): 0.50, (0.01, 1): 0.52, (0.1, 0): 0.70, (0.1, 1): 0.74})
    report = build_report(study, tmp_path)
    found = report.knob_effects
    assert found.metrics == ["eval_acc", "Top_1_Accuracy", "epoch_time", "train_loss",
                             "wall_s"], "objective first; constants and `epoch` left out"
    assert found.points == {"eval_acc", "Top_1_Accuracy"}
    changes = {c.metric: c.text() for c in found.summary["lr"]}
    assert changes["eval_acc"].startswith("eval_acc +21.0 pp +/- ")
    assert changes["train_loss"].startswith(f"train_loss x{(2.0 - 1 + 0.005) / 1.905:.3g}")
    assert found.notes == []
    assert "| lr | 0.01 -> 0.1 | +21.0 pp" in (tmp_path / "effects.md").read_text()
    assert_sensible_png(tmp_path / "effects_lr.png")
    assert set(report.importances) == {"lr"}, "the replicate seed is not ranked"


def test_fractions_are_known_by_a_word_of_their_name() -> None:
    assert all(map(is_fraction_name, ["eval_acc", "Top_1_Accuracy", "val_top5", "best_acc",
                                      "eval_accuracy", "f1", "val_mIoU", "auc"]))
    assert not any(map(is_fraction_name, ["accum_ms", "train_loss", "step_ms", "topology",
                                          "eval_loss", "epoch_time"]))


def test_a_percent_recorded_as_a_number_is_a_ratio_with_a_note() -> None:
    study = command_study({(0.01, 0): 10.0, (0.01, 1): 10.0, (0.1, 0): 5.0, (0.1, 1): 5.0})
    found = knob_effects(study)
    assert "eval_acc" not in found.points
    changes = {c.metric: c.text() for c in found.summary["lr"]}
    assert changes["eval_acc"] == "eval_acc x0.5 +/- 0"
    assert not any("pp" in line for line in found.lines())
    assert found.notes == [
        "eval_acc is named as a fraction but runs from 5 to 10, outside [0, 1] (a percent "
        "printed without %?): shown as ratios",
        "Top_1_Accuracy is named as a fraction but runs from 2.5 to 5, outside [0, 1] (a "
        "percent printed without %?): shown as ratios"]


def test_a_constant_objective_ranks_nothing_and_says_so(workdir: Path) -> None:
    from msexp.search.storage import open_storage

    command_study({(0.01, 0): 0.1, (0.01, 1): 0.1, (0.1, 0): 0.1, (0.1, 1): 0.1},
                  name="flat", storage=open_storage(None))
    report = build_report(optuna.load_study(study_name="flat", storage=open_storage(None)))
    assert report.importances == {}
    assert report.importance_note == "importance: none, every complete trial has eval_acc = 0.1"
    result = CliRunner().invoke(app, ["report", "--study", "flat"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "importance: none, every complete trial has eval_acc = 0.1" in result.output
    assert "0.50" not in result.output and "Warning" not in result.output
    seed_only = optuna.create_study(direction="maximize")
    for seed, value in ((0, 0.5), (1, 0.6)):
        seed_only.add_trial(optuna.trial.create_trial(
            params={"seed": seed}, distributions={"seed": CategoricalDistribution([0, 1])},
            value=value))
    assert build_report(seed_only).importance_note == \
        "importance: none, only the replicate seed varies"


def test_a_one_epoch_trial_keeps_its_training_loss_by_update() -> None:
    one = [Epoch(1, 4, 0.5, {"eval_accuracy": 0.5},
                 {"train_loss": [2.0, 1.5, float("nan"), 1.25]})]
    table = epoch_table(one)
    assert table[UPDATES] == {"train_loss": [[1, 2.0], [2, 1.5], [4, 1.25]]}
    trial = optuna.trial.create_trial(value=0.6, user_attrs={TrialKey.EPOCHS: table})
    assert curves_of(trial, "eval_accuracy") == {"eval_accuracy": [(1, 0.5)]}
    assert update_curves_of(trial) == {"train_loss": [(1, 2.0), (2, 1.5), (4, 1.25)]}
    # two epochs make a curve of their own: no per-update series in the study's storage
    two = epoch_table([*one, Epoch(2, 8, 1.0, {"eval_accuracy": 0.6}, {"train_loss": [1.0]})])
    assert UPDATES not in two  # mutation: every trial's series kept
    long = epoch_table([Epoch(1, 1000, 9.0, {}, {"train_loss": [1 / (i + 1) for i in
                                                                 range(1000)]})])
    kept = long[UPDATES]["train_loss"]
    assert len(kept) == MAX_UPDATE_POINTS and kept[0] == [1, 1.0] and kept[-1] == [1000, 0.001]
    assert all(a[0] < b[0] for a, b in zip(kept, kept[1:]))


def one_epoch_study(series: bool) -> optuna.Study:
    """micro_size 1 and 4, one epoch of 6 updates each, with or without the loss by update."""
    study = optuna.create_study(study_name="one", direction="maximize")
    study.set_user_attr(StudyKey.OBJECTIVES, ["eval_accuracy"])
    dists = {"micro_size": CategoricalDistribution([1, 4])}
    for micro in (1, 4):
        losses = {"train_loss": [2.3 - 0.3 * i - 0.01 * micro for i in range(6)]}
        epoch = Epoch(1, 6, 1.0, {"eval_accuracy": 0.8 + micro / 100},
                      losses if series else {})
        study.add_trial(optuna.trial.create_trial(
            params={"micro_size": micro}, distributions=dists, value=0.8 + micro / 100,
            user_attrs={TrialKey.METRICS: {"eval_accuracy": 0.8 + micro / 100},
                        TrialKey.EPOCHS: epoch_table([epoch])}))
    return study


def test_a_one_epoch_sweep_draws_its_learning_curves_by_update(tmp_path: Path) -> None:
    from msexp.tracking.effect_plots import _curves_figure

    study = one_epoch_study(series=True)
    knob = knob_effects(study).knobs[0]
    figure = _curves_figure(study, knob)
    (ax,) = [a for a in figure.axes if a.get_lines()]
    # mutation: the epoch curves kept where every trial has one point -> xlabel "epoch"
    assert ax.get_xlabel() == "update" and ax.get_title() == "train_loss"
    assert [list(line.get_xdata()) for line in ax.get_lines()] == [[1, 2, 3, 4, 5, 6]] * 2
    assert "by update (one epoch each)" in figure.texts[0].get_text()
    report = build_report(study, tmp_path / "with")
    assert_sensible_png(tmp_path / "with" / "learning_curves.png")
    assert "learning_curves.png" in {p.name for p in report.plots}
    before = build_report(one_epoch_study(series=False), tmp_path / "without")
    assert "learning_curves.png" not in {p.name for p in before.plots}, "no dots on an axis"
    assert _curves_figure(grid_study(), None).axes[0].get_xlabel() == "epoch"


def test_a_micro_size_effect_on_a_network_with_dropout_is_labelled_so() -> None:
    """Trials that reported Dropout layers (and no BatchNorm): the micro_size effect is
    labelled as dropout's, with its note. (issue 53 fresh: batch_statistics.inexact_layers
    34)"""
    study = optuna.create_study(study_name="dropout", direction="maximize")
    study.set_user_attr(StudyKey.OBJECTIVES, ["eval_accuracy"])
    dists = {"micro_size": CategoricalDistribution([1, 4]),
             "seed": CategoricalDistribution([0, 1])}
    for micro, seed, accuracy in ((1, 0, 0.9), (1, 1, 0.8), (4, 0, 0.7), (4, 1, 0.6)):
        told = {"layers": 0, "dropout": 2, "micro_batch": 16 // micro, "batch": 16}
        study.add_trial(optuna.trial.create_trial(
            params={"micro_size": micro, "seed": seed}, distributions=dists, value=accuracy,
            user_attrs={TrialKey.METRICS: {"eval_accuracy": accuracy},
                        TrialKey.BATCH_STATISTICS: told}))
    found = knob_effects(study)
    (line,) = found.lines()
    assert line.startswith("micro_size 1 -> 4 (dropout): eval_accuracy -20.0 pp"), line
    assert any(n.startswith("micro_size: the network has 2 Dropout layer(s)")
               for n in found.notes), found.notes
