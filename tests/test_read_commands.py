"""The read commands (`report`, `status`, `best`) where there is nothing to read: a sweep
file never swept, a study none of whose trials has finished. One line each, exit 1, and no
store made."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from msexp.cli import app
from msexp.search.storage import open_storage
from tests.conftest import write

SWEEP = """
    name: never
    experiment: mlp_digits
    fixed: {epochs: 1}
    params:
      micro_size: [1, 2]
"""


def cli(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


@pytest.mark.parametrize("command", ["report", "status", "best"])
def test_a_read_command_on_a_never_swept_file_says_to_sweep_it_and_makes_no_store(
        workdir: Path, command: str) -> None:
    sweep = write(workdir / "never.yaml", SWEEP)
    result = cli(command, str(sweep))
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"no study named 'never' in mlruns/optuna.journal: run `msexp sweep {sweep}` "
        "first")
    assert not (workdir / "mlruns").exists()  # mutation: the journal opened to look
    elsewhere = workdir / "db" / "optuna.db"
    result = cli(command, str(sweep), "--storage", f"sqlite:///{elsewhere}")
    assert f"run `msexp sweep {sweep} --storage sqlite:///{elsewhere}` first" in result.output
    assert not elsewhere.exists() and not (workdir / "mlruns").exists()


def test_a_study_swept_elsewhere_in_the_same_store_is_still_not_this_one(
        workdir: Path) -> None:
    optuna.create_study(study_name="other", storage=open_storage(None))
    sweep = write(workdir / "never.yaml", SWEEP)
    result = cli("report", str(sweep))
    assert result.exit_code == 1
    assert f"no study named 'never' in mlruns/optuna.journal: run `msexp sweep {sweep}` " \
        "first" in result.output
    assert "no study named 'zz' in mlruns/optuna.journal\n" in cli(
        "report", "--study", "zz").output, "no file: nothing to suggest"


def test_report_on_a_study_with_no_finished_trial_says_so_in_one_line(workdir: Path) -> None:
    sweep = write(workdir / "never.yaml", SWEEP)
    study = optuna.create_study(study_name="never", storage=open_storage(None))
    study.enqueue_trial({"micro_size": 1})
    study.enqueue_trial({"micro_size": 2})
    result = cli("report", str(sweep))
    assert result.exit_code == 1, result.output  # mutation: an empty table and exit 0
    assert result.output == ("nothing to report: no trial of study 'never' has "
                             "finished yet (2 waiting)\n")
    assert not (workdir / "mlruns" / "reports").exists()


def _trial(value: float, **attrs: object) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(
        params={"micro_size": 1}, value=value, user_attrs={"params": {"micro_size": 1}, **attrs},
        distributions={"micro_size": optuna.distributions.CategoricalDistribution([1, 2])})


def test_best_on_a_study_with_no_completed_trial_says_so_in_one_line(workdir: Path) -> None:
    """issue 53 (branches)."""
    sweep = write(workdir / "never.yaml", SWEEP)
    study = optuna.create_study(study_name="never", storage=open_storage(None),
                                direction="maximize")
    study.enqueue_trial({"micro_size": 1})
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL))
    result = cli("best", str(sweep))
    assert result.exit_code == 1, result.output
    assert result.output == f"{sweep}: no trial of study 'never' completed yet\n"


def test_best_export_of_a_trial_with_no_checkpoint_to_export_says_why_and_writes_nothing(
        workdir: Path) -> None:
    """issue 53 (branches): no checkpoint kept; kept, then deleted, with no MLflow run to
    hold a copy (its record still in the spool). The best trial's lines still show, without
    MLflow (mutation: the tracker made anyway: the store made, 10 s; an MLflow server
    that is down fails the command)."""
    sweep = write(workdir / "never.yaml", SWEEP)
    study = optuna.create_study(study_name="never", storage=open_storage(None),
                                direction="maximize")
    study.add_trial(_trial(0.5, mlflow_run_id="spooled"))
    out = workdir / "best-model"
    result = cli("best", str(sweep), "--export", str(out))
    assert (result.exit_code, result.output) == (1, "trial 0 kept no checkpoint "
                                                 "(checkpoint.keep none?); nothing to export\n")
    gone = workdir / "mlruns" / "trials" / "never" / "1" / "net-1_1.ckpt"
    study.add_trial(_trial(0.9, mlflow_run_id="spooled", checkpoint=str(gone)))
    result = cli("best", str(sweep), "--export", str(out))
    assert (result.exit_code, result.output) == (1, f"trial 1's checkpoint {gone} is gone, "
                                                 "and the trial has no MLflow run yet; "
                                                 "nothing to export\n")
    assert not out.exists()
    shown = cli("best", str(sweep))
    assert shown.exit_code == 0, shown.output
    assert shown.output.splitlines() == [
        "trial 1: eval_accuracy=0.9", "  params: micro_size=1", "  MLflow run: spooled",
        f"  checkpoint: {gone}"]
    assert not (workdir / "mlruns" / "mlflow.db").exists()


def test_an_export_after_the_sweep_file_changed_rebuilds_the_trial_as_it_ran(
        workdir: Path) -> None:
    """issue 53 (branches): `msexp best --export` and the Python API's `Trial.network`
    build the trial's network from the params it kept where the sweep file changed since
    (epochs and lr here); from the file's where it did not."""
    from msexp.search.requests import ran_request
    from msexp.secrets.redaction import redact_params
    from msexp.spec import load_spec

    sweep = write(workdir / "never.yaml", SWEEP)
    spec = load_spec(sweep)
    ran = spec.space.resolve(spec.space.assigned({"micro_size": 2}))
    trial = optuna.trial.create_trial(
        params={"micro_size": 2}, value=0.5, user_attrs={"params": redact_params(ran)},
        distributions={"micro_size": optuna.distributions.CategoricalDistribution([1, 2])})
    assert ran_request(spec, trial, workdir / "t").params == ran
    sweep.write_text(sweep.read_text().replace("fixed: {epochs: 1}", "fixed: {epochs: 3, lr: 0.5}"))
    changed = load_spec(sweep)
    assert changed.space.resolve(changed.space.assigned({"micro_size": 2})) != ran
    assert ran_request(changed, trial, workdir / "t").params == ran, "as it ran"


def test_an_export_without_a_mindir_says_why_and_one_with_it_says_nothing(monkeypatch,
                                                                          tmp_path: Path) -> None:
    """Mutation `studies._export_from` 39: the reason no MindIR was written dropped (what
    `msexp best --export` prints as `no MindIR: ...`)."""
    import sys
    from types import ModuleType, SimpleNamespace

    from msexp.cli import studies
    from msexp.search import requests

    reasons = iter(["the network takes no sample input", ""])
    export = ModuleType("msexp.execution.export")
    export.export_model = lambda request, checkpoint, folder, record: (  # type: ignore[attr-defined]
        [folder / "params.json"], next(reasons))
    monkeypatch.setitem(sys.modules, "msexp.execution.export", export)
    monkeypatch.setattr(requests, "ran_request",
                        lambda spec, chosen, folder: SimpleNamespace(params={"lr": 0.1}))
    spec = SimpleNamespace(experiment=SimpleNamespace(ref="mlp_digits"))
    loaded = SimpleNamespace(study_name="s")
    chosen = SimpleNamespace(number=2, user_attrs={})
    without = studies._export_from(spec, loaded, chosen, tmp_path, tmp_path / "c.ckpt")
    assert without == {"written": [str(tmp_path / "params.json")],
                       "no_mindir": "the network takes no sample input"}
    assert studies._export_from(spec, loaded, chosen, tmp_path, tmp_path / "c.ckpt")[
        "no_mindir"] is None


def test_best_export_of_a_command_trial_writes_its_checkpoint_and_its_params_and_metrics(
        workdir: Path) -> None:
    """`msexp best --export` of a command's trial: its checkpoint copied, params.json with
    the trial's params and the metrics it recorded, and why no MindIR; as lines, not JSON,
    without --json. (issue 53 fresh fcli: cli.studies._export_from 19 (the metrics under
    another key), studies.best 1 (--json by default))"""
    import json

    write(workdir / "train.py", "print('epoch: 1 step: 1, loss is 0.5')\n")
    sweep = write(workdir / "exported.yaml", """
        name: exported
        experiment: {command: python train.py}
        objective: {metric: train_loss, direction: minimize}
        params: {lr: [0.01, 0.1]}
    """)
    kept = workdir / "kept.ckpt"
    kept.write_bytes(b"weights")
    metrics = {"train_loss": 0.5, "wall_s": 2.0}
    study = optuna.create_study(study_name="exported", storage=open_storage(None))
    study.add_trial(optuna.trial.create_trial(
        params={"lr": 0.1}, value=0.5, user_attrs={
            "params": {"lr": 0.1}, "metrics": metrics, "checkpoint": str(kept),
            "mlflow_run_id": "spooled"},
        distributions={"lr": optuna.distributions.CategoricalDistribution([0.01, 0.1])}))
    out = workdir / "best-model"
    result = cli("best", str(sweep), "--export", str(out))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "trial 0: train_loss=0.5", "  params: lr=0.1", "  MLflow run: spooled",
        f"  checkpoint: {kept}", f"wrote {out / 'model.ckpt'}", f"wrote {out / 'params.json'}",
        "no MindIR: a command's network is its own: msexp cannot build it"]
    assert (out / "model.ckpt").read_bytes() == b"weights"
    record = json.loads((out / "params.json").read_text())
    assert (record["trial"], record["params"]["lr"], record["metrics"]) == (0, 0.1, metrics)


@pytest.fixture(scope="module")
def left_by_a_killed_tune(mlflow_db: Path) -> tuple[Path, str, str]:
    """The module's embedded MLflow store holding the RUNNING parent run of sweep `tuned`'s
    tune phase, its tune process gone: the store's path, the run's id and its maker
    (host:pid)."""
    import socket

    from mlflow import MlflowClient

    from msexp.keys import RunTag

    client = MlflowClient(f"sqlite:///{mlflow_db}")
    maker = f"{socket.gethostname()}:4194305"  # above any pid_max: no such process
    run = client.create_run(client.create_experiment("tuned"), run_name="tune-profile",
                            tags={RunTag.OWNER: maker})
    return mlflow_db, run.info.run_id, maker


def test_status_of_a_file_only_tuned_names_the_runs_a_killed_tune_left_and_the_file_to_tune(
        workdir: Path, left_by_a_killed_tune: tuple[Path, str, str]) -> None:
    """A sweep file never swept but tuned by a tune that was killed: `msexp status FILE`
    has no study to show, but lists the MLflow runs left RUNNING and the command, with
    this file, that ends them. (issue 53 fresh fcli: cli.studies.status 20, the file not
    passed on: `msexp tune FILE`)"""
    import shutil

    store, run_id, maker = left_by_a_killed_tune
    (workdir / "mlruns").mkdir()
    shutil.copyfile(store, workdir / "mlruns" / "mlflow.db")
    sweep = write(workdir / "tuned.yaml", SWEEP.replace("name: never", "name: tuned"))
    result = cli("status", str(sweep))
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [
        "MLflow runs RUNNING: 1",
        f"  tune-profile ({run_id}): left by msexp tune {maker}, which is gone; the next "
        f"`msexp tune {sweep}` ends it KILLED",
        f"no study named 'tuned' in mlruns/optuna.journal: run `msexp sweep {sweep}` first"]
