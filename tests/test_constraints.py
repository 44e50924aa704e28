"""Constraints: a budget a trial must keep; the best trial is the best feasible one."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from msexp.cli import app
from msexp.search.storage import open_storage
from msexp.spec import parse_spec
from msexp.tracking.report import best_trials
from tests.conftest import child_runs, write


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


@pytest.mark.slow  # over 3 s: the fast tier stays under 5 min
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
    assert best.output.startswith(f"trial {slow.number}: eval_accuracy="), best.output


@pytest.mark.slow  # over 3 s: the fast tier stays under 5 min
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
    assert all(list(t.constraints) == ["0:eval_accuracy"] for t in study.trials), \
        "TPE saw them"
    for t in best_trials(study):
        assert t.user_attrs["metrics"]["eval_accuracy"] <= 0.5


def test_a_violation_is_how_far_a_metric_is_outside_its_bounds() -> None:
    from msexp.spec.file import Constraint

    mem = Constraint(metric="peak_mem_mb", max=100.0)
    acc = Constraint(metric="eval_accuracy", min=0.5, max=0.9)
    assert mem.violation({"peak_mem_mb": 120.0}) == 20.0
    assert mem.violation({"peak_mem_mb": 80.0}) == -20.0
    assert acc.violation({"eval_accuracy": 0.4}) == pytest.approx(0.1)
    assert acc.violation({"eval_accuracy": 0.95}) == pytest.approx(0.05)
    assert acc.violation({"eval_accuracy": 0.8}) == pytest.approx(-0.1)
    assert Constraint(metric="eval_accuracy", min=0.5).violation({"eval_accuracy": 0.7}) == \
        pytest.approx(-0.2)
    assert mem.violation({}) == mem.violation({"peak_mem_mb": math.nan}) == 1.0, \
        "a missing metric violates"


def test_optuna_gets_each_constraints_violation_of_a_trial(workdir) -> None:
    from msexp.execution.result import Status, TrialResult
    from msexp.execution.subscribers import TrialInfo
    from msexp.search.study import open_study
    from msexp.search.tell import tell

    spec = parse_spec("name: c\nexperiment: mlp_digits\nmethod: tpe\nparams: {lr: {low: 0.01, "
                      "high: 0.1}}\nconstraints: [{metric: peak_mem_mb, max: 100}, "
                      "{metric: eval_accuracy, min: 0.5}]\n", "c.yaml")
    study, _ = open_study(spec, None)
    for metrics in ({"peak_mem_mb": 150.0, "eval_accuracy": 0.75}, {}):
        tell(study, spec, study.ask(), TrialInfo(0, "#0", {}, {}, 0.0),
             TrialResult(Status.COMPLETE, metrics))
    kept, missing = study.get_trials()
    assert kept.constraints == {"0:peak_mem_mb": 50.0, "1:eval_accuracy": -0.25}
    assert missing.constraints == {"0:peak_mem_mb": 1.0, "1:eval_accuracy": 1.0}
    assert kept.user_attrs["feasible"] is False and missing.user_attrs["feasible"] is False
    assert not spec.feasible({"peak_mem_mb": 150.0, "eval_accuracy": 0.75})
    assert spec.feasible({"peak_mem_mb": 100.0, "eval_accuracy": 0.5}), "bounds are kept"
    assert not spec.feasible({"eval_accuracy": 0.75}), "a missing metric is not kept"


def test_feasible_is_judged_on_the_metrics_optuna_is_told_wall_s_included(workdir) -> None:
    """A trial of wall_s 10 under `wall_s max 600` is feasible to Optuna, in its
    `feasible` attribute and in the report; one of 900 s is none of these, although more
    accurate (wall_s is no metric the trial reports: msexp measures it)."""
    from msexp.execution.result import Status, TrialResult
    from msexp.execution.subscribers import TrialInfo
    from msexp.search.study import open_study
    from msexp.search.tell import tell

    spec = parse_spec("name: w\nexperiment: mlp_digits\nmethod: tpe\nparams: {lr: {low: 0.01, "
                      "high: 0.1}}\nconstraints: [{metric: wall_s, max: 600}]\n", "w.yaml")
    study, _ = open_study(spec, None)
    for accuracy, wall_s in ((0.8, 10.0), (0.9, 900.0)):
        tell(study, spec, study.ask(), TrialInfo(0, "#0", {}, {}, 0.0),
             TrialResult(Status.COMPLETE, {"eval_accuracy": accuracy}, wall_s=wall_s))
    quick, slow = study.trials
    assert quick.constraints == {"0:wall_s": -590.0} and slow.constraints == {"0:wall_s": 300.0}
    # mutation: feasible judged on the reported metrics, which hold no wall_s
    assert quick.user_attrs["feasible"] is True and slow.user_attrs["feasible"] is False
    assert [t.number for t in best_trials(study)] == [quick.number] == \
        [t.number for t in study.best_trials], "the report's best is Optuna's"


@pytest.mark.slow  # a sweep of two trials
def test_a_wall_s_constraint_gives_the_same_feasible_in_mlflow_optuna_and_the_report(
        workdir: Path) -> None:
    sweep = write(workdir / "w.yaml", """
        name: walled
        experiment: broken:build
        objective: {metric: eval_accuracy, direction: maximize}
        constraints: [{metric: wall_s, max: 600}]
        fixed: {hidden: 16, epochs: 1}
        params: {lr: [0.1, 0.0001]}
    """)
    result = invoke("sweep", str(sweep))
    assert result.exit_code == 0, result.output
    study = optuna.load_study(study_name="walled", storage=open_storage(None))
    assert all(t.constraints["0:wall_s"] < 0 for t in study.trials), "well inside 600 s"
    # mutation: the tag and the attribute judged on the reported metrics (no wall_s)
    assert [t.user_attrs["feasible"] for t in study.trials] == [True, True]
    assert {r.data.tags["feasible"] for r in child_runs("walled")} == {"true"}
    best = max(study.trials, key=lambda t: t.value)
    assert [t.number for t in best_trials(study)] == [best.number]
    assert invoke("best", str(sweep)).output.startswith(f"trial {best.number}: ")
