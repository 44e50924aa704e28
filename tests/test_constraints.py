"""Constraints: a budget a trial must keep; the best trial is the best feasible one."""

from __future__ import annotations

from pathlib import Path

import optuna
from typer.testing import CliRunner

from msexp.cli import app
from msexp.search.storage import open_storage
from msexp.tracking.report import best_trials
from tests.conftest import child_runs, write


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


def test_the_best_trial_of_a_constrained_grid_is_feasible(workdir: Path) -> None:
    sweep = write(workdir / "g.yaml", """
        name: capped
        experiment: broken:build
        objective: {metric: eval_accuracy, direction: maximize}
        constraints: [{metric: eval_accuracy, max: 0.5}]
        fixed: {hidden: 16, epochs: 1}
        params: {lr: [0.1, 0.0001]}
    """)
    result = invoke("sweep", str(sweep))
    assert result.exit_code == 0, result.output
    study = optuna.load_study(study_name="capped", storage=open_storage(None))
    fast, slow = study.trials
    assert fast.value > 0.5 > slow.value, "lr 0.1 learns, lr 1e-4 does not"
    assert fast.user_attrs["feasible"] is False and slow.user_attrs["feasible"] is True
    assert [t.number for t in best_trials(study)] == [slow.number]
    assert "feasible" in result.output and " no " in result.output
    tags = {r.data.params["lr"]: r.data.tags["feasible"] for r in child_runs("capped")}
    assert tags == {"0.1": "false", "0.0001": "true"}
    best = invoke("best", str(sweep))
    assert f"\ntrial {slow.number}: eval_accuracy=" in best.output, best.output


def test_a_constrained_tpe_study_gives_optuna_the_constraints(workdir: Path) -> None:
    sweep = write(workdir / "t.yaml", """
        name: tpe-capped
        experiment: broken:build
        method: tpe
        budget: {trials: 4}
        constraints: [{metric: eval_accuracy, max: 0.5}]
        fixed: {hidden: 16, epochs: 1}
        params: {lr: {low: 0.00001, high: 0.3, log: true}}
    """)
    assert invoke("sweep", str(sweep)).exit_code == 0
    study = optuna.load_study(study_name="tpe-capped", storage=open_storage(None))
    assert all("constraints" in t.system_attrs for t in study.trials), "TPE saw them"
    for t in best_trials(study):
        assert t.user_attrs["metrics"]["eval_accuracy"] <= 0.5
