"""Keep what trials learn: resume after kill -9 and SIGTERM, retry failed trials, the best
model one command away."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import optuna
import psutil
import pytest
from typer.testing import CliRunner

from msexp.cli import app
from msexp.execution.host import running
from msexp.execution.protocol import TrialRequest
from msexp.search.storage import open_storage
from tests.conftest import ASSETS, child_runs, mlflow_client, msexp_cmd, write

pytestmark = pytest.mark.slow  # trials in worker processes (tests/README.md: tiers)

DEADLINE_S = 240  # for a hang, on a loaded 2-core machine


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


def load(name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=open_storage(None))




def wait_for_epoch(state: Path, epoch: int, proc: subprocess.Popen) -> int:
    """Wait until the trial's latest checkpoint is of `epoch` or later; return its epoch."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the sweep ended before the checkpoint"
        try:
            saved = json.loads(state.read_text())["epoch"]
        except (OSError, ValueError):
            saved = 0
        if saved >= epoch:
            return saved
        time.sleep(0.05)
    pytest.fail(f"no checkpoint of epoch {epoch} within {DEADLINE_S} s")


SLOW = """
    name: {name}
    experiment: broken:build
    fixed: {{epochs: 6, hidden: 32, lr: 0.05, pause_s: 1.0}}
    params: {{seed: [0]}}
"""


def test_kill_9_at_epoch_3_of_6_resumes_at_epoch_4(workdir: Path) -> None:
    sweep = write(workdir / "r.yaml", SLOW.format(name="resume"))
    proc = subprocess.Popen(msexp_cmd("sweep", str(sweep)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    state = workdir / "mlruns/trials/resume/trial-0000/checkpoints/state.json"
    wait_for_epoch(state, 3, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = json.loads(state.read_text())["epoch"]
    assert killed_at in (3, 4)  # epochs take over a second: the kill lands in epoch 4

    resumed = invoke("sweep", str(sweep))
    assert resumed.exit_code == 0, resumed.output
    (trial,) = load("resume").trials
    assert trial.state.name == "COMPLETE" and trial.user_attrs["attempt"] == 1
    (run,) = child_runs("resume")
    assert run.data.tags["resumed_from_epoch"] == str(killed_at)
    history = mlflow_client().get_metric_history(run.info.run_id, "epoch")
    assert [m.value for m in history] == [1, 2, 3, 4, 5, 6]
    steps = [m.step for m in history]
    assert steps == sorted(set(steps)), "one continuous series, no step twice"
    log = (workdir / "mlruns/trials/resume/trial-0000/trial.log").read_text()
    assert f"resuming from epoch {killed_at}" in log

    reference = write(workdir / "ref.yaml", SLOW.format(name="reference").replace(
        "pause_s: 1.0", "pause_s: 0.0"))
    assert invoke("sweep", str(reference)).exit_code == 0
    (whole,) = child_runs("reference")
    assert run.data.metrics["eval_loss"] == pytest.approx(whole.data.metrics["eval_loss"],
                                                          abs=1e-6)


def test_sigterm_to_a_worker_queues_its_trial_and_the_next_worker_resumes_it(
        workdir: Path) -> None:
    sweep = write(workdir / "t.yaml", SLOW.format(name="term"))
    proc = subprocess.Popen(msexp_cmd("worker", str(sweep)), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    state = workdir / "mlruns/trials/term/trial-0000/checkpoints/state.json"
    wait_for_epoch(state, 2, proc)
    family = psutil.Process(proc.pid).children(recursive=True)
    assert family, "the worker runs its trial in child processes"
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, output
    gone, alive = psutil.wait_procs(family, timeout=10)
    assert alive == [], "no process of the worker may outlive it"
    (trial,) = load("term").trials
    assert trial.state.name == "WAITING", "stopped, not failed"
    assert trial.user_attrs.get("attempt", 0) == 0, "a stop by signal costs no retry"

    again = subprocess.run(msexp_cmd("worker", str(sweep)), capture_output=True, text=True,
                           timeout=DEADLINE_S)
    assert again.returncode == 0, again.stdout + again.stderr
    (trial,) = load("term").trials
    assert trial.state.name == "COMPLETE"
    (run,) = child_runs("term")
    assert int(run.data.tags["resumed_from_epoch"]) >= 2


def test_retry_failed_after_fixing_the_experiment(workdir: Path) -> None:
    experiment = workdir / "fixme.py"
    shutil.copy(ASSETS / "broken.py", experiment)
    sweep = write(workdir / "f.yaml", """
        name: fixme
        experiment: fixme.py
        fixed: {mode: nan, hidden: 16}
        params: {micro_size: [1, 2]}
    """)
    failed = invoke("sweep", str(sweep))
    assert failed.exit_code == 1, failed.output
    assert "every trial failed" in failed.output
    assert f"msexp sweep {sweep} --retry-failed" in failed.output
    again = invoke("sweep", str(sweep))
    assert again.exit_code == 1 and "2 trial(s) failed" in again.output, "nothing re-runs alone"
    experiment.write_text(experiment.read_text().replace('* float("nan")', "* 1.0"))
    fixed = invoke("sweep", str(sweep), "--retry-failed")
    assert fixed.exit_code == 0, fixed.output
    states = [t.state.name for t in load("fixme").trials]
    assert states == ["FAIL", "FAIL", "COMPLETE", "COMPLETE"]
    status = invoke("status", str(sweep))
    assert status.output.startswith("fixme: 2 finished of 2;"), status.output


def test_best_export_then_evaluate_the_exported_checkpoint(workdir: Path) -> None:
    sweep = write(workdir / "b.yaml", """
        name: best
        experiment: mlp_digits
        objective: {metric: eval_accuracy, reduce: best}
        fixed: {epochs: 3, hidden: 16}
        params: {lr: [0.1, 0.001]}
        checkpoint: {keep: best}
    """)
    assert invoke("sweep", str(sweep)).exit_code == 0
    study = load("best")
    best = study.best_trial
    epochs = mlflow_client().get_metric_history(best.user_attrs["mlflow_run_id"],
                                                "eval_accuracy")
    assert best.value == max(m.value for m in epochs[:3]), "reduce: best takes the best epoch"
    shown = invoke("best", str(sweep), "--export", "out")
    assert shown.exit_code == 0, shown.output
    assert f"trial {best.number}: eval_accuracy=" in shown.output
    assert {p.name for p in Path("out").iterdir()} == {"model.ckpt", "params.json",
                                                       "model.mindir"}
    record = json.loads(Path("out/params.json").read_text())
    assert record["trial"] == best.number and record["params"]["hidden"] == 16
    parent = mlflow_client().get_run(study.user_attrs["mlflow_parent_run_id"])
    assert parent.data.tags["best_checkpoint"].startswith(
        f"runs:/{best.user_attrs['mlflow_run_id']}/checkpoint/")
    params = {**record["params"], "epochs": 0}
    metrics = running.run(TrialRequest("mlp_digits", params,
                                             init_from=str(Path("out/model.ckpt").resolve())),
                                lambda event: None)
    kept = json.loads(Path(best.user_attrs["checkpoint"]).with_name("state.json").read_text())
    kept_epoch = next(e for e in kept["history"] if e["epoch"] == kept["best"]["epoch"])
    assert metrics["eval_loss"] == pytest.approx(kept_epoch["metrics"]["eval_loss"], abs=1e-6)
    ran = invoke("run", "mlp_digits", "--from-checkpoint", "out/model.ckpt",
                 "--set", "epochs=0", "--set", "hidden=16")
    assert ran.exit_code == 0 and "eval_accuracy=" in ran.output, ran.output
    exported = Path("out/model.ckpt").read_bytes()
    Path(best.user_attrs["checkpoint"]).unlink()  # the trial folder's copy is gone
    again = invoke("best", str(sweep), "--export", "out-again")
    assert again.exit_code == 0, again.output
    assert Path("out-again/model.ckpt").read_bytes() == exported, "the MLflow run's copy"


def test_a_script_with_model_checkpoint_resumes_after_a_kill(workdir: Path) -> None:
    project = workdir / "project"
    shutil.copytree(ASSETS / "scripts", project)
    sweep = write(project / "s.yaml", """
        name: script-resume
        experiment: {command: python train_resumable.py}
        objective: {metric: trained_epochs}
        fixed: {epochs: 6, pause_s: 1.0}
    """)
    proc = subprocess.Popen(msexp_cmd("sweep", str(sweep)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    log = workdir / "mlruns/trials/script-resume/trial-0000/trial.log"
    deadline = time.monotonic() + DEADLINE_S
    while "finished epoch 2" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    resumed = invoke("sweep", str(sweep))
    assert resumed.exit_code == 0, resumed.output
    (run,) = child_runs("script-resume")
    assert run.data.tags["status"] == "COMPLETE"
    assert run.data.metrics["started_at_epoch"] >= 2
    assert run.data.metrics["trained_epochs"] == 6 - run.data.metrics["started_at_epoch"]
