"""What the real-script tests (test_textcnn, test_dscnn) check of each trial: `train_loss` is
one number in Optuna's value, the trial's kept metrics, the MLflow run's final value and the
script's own last loss line; and each trial's per-update losses as MLflow holds them."""

from __future__ import annotations

import re
from pathlib import Path

import optuna
import pytest

from msexp.search.storage import open_storage
from tests.conftest import child_runs, mlflow_client


def trials(name: str) -> dict[int, tuple[optuna.trial.FrozenTrial, object]]:
    """Each COMPLETE trial of a study with its MLflow run, by number."""
    study = optuna.load_study(study_name=name, storage=open_storage(None))
    runs = {int(r.data.tags["msexp.trial"]): r for r in child_runs(name)}
    done = [t for t in study.trials if t.state is optuna.trial.TrialState.COMPLETE]
    return {t.number: (t, runs[t.number]) for t in done}


def update_losses(run) -> list[float]:
    """A run's `train_loss` series, by update."""
    history = mlflow_client().get_metric_history(run.info.run_id, "train_loss")
    return [m.value for m in sorted(history, key=lambda m: (m.step, m.timestamp))]


def assert_one_meaning(trial: optuna.trial.FrozenTrial, run, name: str,
                       loss_line: re.Pattern[str]) -> None:
    """`train_loss` is the same number as Optuna's value, the trial's kept metrics, the MLflow
    run's final value and the last loss `loss_line` finds in the trial's log."""
    told = trial.values[0]
    assert trial.user_attrs["metrics"]["train_loss"] == told
    assert run.data.metrics["train_loss"] == pytest.approx(told, rel=1e-6)
    log = Path(f"mlruns/trials/{name}/trial-{trial.number:04d}/trial.log").read_text()
    assert float(loss_line.findall(log)[-1]) == pytest.approx(told, rel=1e-6)
