"""Replicates: budget.repeats runs each configuration with several seeds; the report gives
mean and spread and says whether each knob's effect stands out from the seed spread."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from typer.testing import CliRunner

from msexp.cli import app
from msexp.errors import SpecError
from msexp.execution.arguments import arguments
from msexp.search.storage import open_storage
from msexp.spec import parse_spec
from msexp.tracking.replicates import configurations, effects, markdown
from tests.conftest import mlflow_client, write


def study_of(values: dict[tuple[int, int], float]) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    dists = {"micro_size": CategoricalDistribution([1, 8]), "seed": CategoricalDistribution([0, 1])}
    for (micro, seed), value in values.items():
        study.add_trial(optuna.trial.create_trial(
            params={"micro_size": micro, "seed": seed}, distributions=dists, value=value,
            user_attrs={"metrics": {"eval_accuracy": value}}))
    return study


def test_mean_spread_and_a_real_effect() -> None:
    groups = configurations(study_of({(1, 0): 0.90, (1, 1): 0.92, (8, 0): 0.70, (8, 1): 0.74}),
                            ["eval_accuracy"])
    assert [g.params for g in groups] == [{"micro_size": 1}, {"micro_size": 8}]
    assert groups[0].mean("eval_accuracy") == pytest.approx(0.91)
    assert groups[1].std("eval_accuracy") == pytest.approx(0.0282843, rel=1e-4)
    (effect,) = effects(groups, "eval_accuracy")
    assert effect.effect == pytest.approx(0.19) and effect.real
    assert effect.spread == pytest.approx(((0.02 ** 2 / 2 + 0.04 ** 2 / 2) / 2) ** 0.5)


def test_an_effect_within_the_seed_spread_is_noise() -> None:
    groups = configurations(study_of({(1, 0): 0.90, (1, 1): 0.96, (8, 0): 0.92, (8, 1): 0.95}),
                            ["eval_accuracy"])
    (effect,) = effects(groups, "eval_accuracy")
    assert not effect.real and "within the seed-to-seed spread" in effect.line()


def test_repeats_sweep_seeds_last_and_need_a_grid() -> None:
    spec = parse_spec("name: r\nexperiment: mlp_digits\nbudget: {repeats: 2}\nfixed: {seed: 5}\n"
                      "params: {micro_size: [1, 2]}\n", "r.yaml")
    assert list(spec.space.grid()) == [{"micro_size": 1, "seed": 5}, {"micro_size": 1, "seed": 6},
                                       {"micro_size": 2, "seed": 5}, {"micro_size": 2, "seed": 6}]
    with pytest.raises(SpecError, match="repeats need method grid"):
        parse_spec("name: r\nexperiment: mlp_digits\nmethod: tpe\nbudget: {repeats: 2}\n"
                   "params: {lr: {low: 0.01, high: 0.1}}\n", "r.yaml")
    with pytest.raises(SpecError, match="params.seed: budget.repeats sweeps the seed itself"):
        parse_spec("name: r\nexperiment: mlp_digits\nbudget: {repeats: 2}\n"
                   "params: {seed: [1, 2]}\n", "r.yaml")


def test_a_command_sweep_repeats_with_the_scripts_own_seed(tmp_path: Path) -> None:
    write(tmp_path / "train.py", "print('eval_acc: 0.5')\n")
    text = ("name: r\nexperiment: {command: python3 train.py}\nbudget: {repeats: 2}\n"
            "objective: {metric: eval_acc, direction: maximize}\nfixed: {seed: 7}\n"
            "params: {lr: [0.1, 0.2]}\n")
    spec = parse_spec(text, "r.yaml", tmp_path / "r.yaml")
    assert list(spec.space.grid()) == [{"lr": 0.1, "seed": 7}, {"lr": 0.1, "seed": 8},
                                       {"lr": 0.2, "seed": 7}, {"lr": 0.2, "seed": 8}]
    assert arguments(spec.space.resolve({"lr": 0.2, "seed": 8}), "flags") == [
        "--lr=0.2", "--seed=8"]


@pytest.mark.slow
def test_the_report_of_a_repeated_sweep(workdir: Path) -> None:
    sweep = write(workdir / "rep.yaml", """
        name: repeated
        experiment: mlp_digits
        budget: {repeats: 2}
        fixed: {epochs: 1, hidden: 16}
        params: {lr: [0.1, 0.0001]}
    """)
    assert CliRunner().invoke(app, ["sweep", str(sweep)]).exit_code == 0
    result = CliRunner().invoke(app, ["report", str(sweep)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "mean ± std over seeds" in result.output and "0.1 │" in result.output
    assert "lr: eval_accuracy moves by" in result.output
    assert "larger than the seed-to-seed spread" in result.output  # lr 1e-4 barely learns
    table = Path("mlruns/reports/repeated/replicates.md").read_text()
    assert table.count("| 2 |") == 2, table
    client = mlflow_client()
    parent = next(r for r in client.search_runs(
        [client.get_experiment_by_name("repeated").experiment_id])
        if r.data.tags["msexp.role"] == "sweep")
    assert "report/replicates.md" in {a.path for a in client.list_artifacts(
        parent.info.run_id, "report")}
    assert "importance: lr=1.00" in result.output, "an effect beyond the spread is ranked"
    study = optuna.load_study(study_name="repeated", storage=open_storage(None))
    assert all(len(t.user_attrs["epoch_metrics"]["updates"]["train_loss"]) > 1
               for t in study.trials), "one epoch: the loss by update is kept"
    assert Path("mlruns/reports/repeated/learning_curves.png").stat().st_size > 5000
    logged = client.get_metric_history(parent.info.run_id, "best_eval_accuracy")
    again = CliRunner().invoke(app, ["report", str(sweep)], env={"COLUMNS": "200"})
    assert again.exit_code == 0 and "importance: lr=1.00" in again.output
    assert client.get_metric_history(parent.info.run_id, "best_eval_accuracy") == logged


def test_groups_ignore_param_order_unfinished_trials_and_missing_metrics() -> None:
    """Mutations: unsorted keys split a configuration; other states or a trial without
    recorded metrics break the grouping."""
    study = optuna.create_study()
    dists = {"a": CategoricalDistribution([1, 2]), "b": CategoricalDistribution([3, 4]),
             "seed": CategoricalDistribution([0, 1])}
    for params, metrics in [({"a": 1, "b": 3, "seed": 0}, {"eval_loss": 0.5}),
                            ({"b": 3, "a": 1, "seed": 1}, None)]:
        study.add_trial(optuna.trial.create_trial(
            params=params, distributions=dists, value=0.5,
            user_attrs={} if metrics is None else {"metrics": metrics}))
    study.add_trial(optuna.trial.create_trial(
        params={"a": 2, "b": 4, "seed": 0}, distributions=dists,
        state=optuna.trial.TrialState.FAIL))
    (group,) = configurations(study, ["eval_loss"])
    assert group.params == {"a": 1, "b": 3} and group.values == {"eval_loss": [0.5]}


def test_one_seed_has_no_spread_and_a_knob_needs_two_values() -> None:
    from msexp.tracking.replicates import Configuration, Effect

    one = Configuration({"micro_size": 1, "lr": 0.1}, {"m": [0.5]})
    two = Configuration({"micro_size": 8, "lr": 0.1}, {"m": [0.7, 0.9]})
    other = Configuration({"optimizer": "sgd"}, {"m": [0.6, 0.6]})
    assert math.isnan(one.std("m")) and math.isnan(one.std("missing"))
    assert math.isnan(Configuration({}, {"m": []}).mean("m"))
    assert math.isnan(one.mean("missing"))
    # the spread pools only configurations with 2+ seeds; lr has one value: no effect
    (effect,) = effects([one, two, other], "m")
    assert (effect.knob, effect.metric) == ("micro_size", "m")
    assert effect.effect == pytest.approx(0.3)
    assert effect.spread == pytest.approx(math.sqrt((0.02 + 0.0) / 2))
    assert Effect("micro_size", "m", 0.3, 0.1).line() == (
        "micro_size: m moves by 0.3 across its values, larger than the seed-to-seed "
        "spread (0.1)")


def test_the_replicates_table_is_markdown_with_mean_spread_and_seeds() -> None:
    groups = configurations(study_of({(1, 0): 0.90, (1, 1): 0.92, (8, 0): 0.70}),
                            ["eval_accuracy"])
    found = effects(groups, "eval_accuracy")
    assert markdown(groups, ["eval_accuracy"], found) == (
        "| micro_size | eval_accuracy | seeds |\n"
        "|---|---|---|\n"
        "| 1 | 0.91 ± 0.014 | 2 |\n"
        "| 8 | 0.7 ± nan | 1 |\n"
        "\n"
        "- micro_size: eval_accuracy moves by 0.21 across its values, larger than the "
        "seed-to-seed spread (0.01414)\n")
