"""End to end: a sweep file becomes trial processes, an Optuna study and MLflow runs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import optuna
import psutil
import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

from msexp.cli import app
from msexp.search.driver import AHEAD
from msexp.tracking import recorder
from tests.conftest import mlflow_client, msexp_cmd, write
from tests.fault.conftest import DEADLINE_S, MARK, assert_no_process_left, wait_for

pytestmark = pytest.mark.slow  # trials in worker processes (tests/README.md: tiers)

URI = "sqlite:///mlruns/mlflow.db"


def runs_of(name: str):
    client = mlflow_client()
    experiment = client.get_experiment_by_name(name)
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if r.data.tags.get("msexp.role") == "sweep"]
    children = [r for r in runs if r.data.tags.get("msexp.role") == "trial"]
    return client, parents, children


def test_tiny_sweep_lands_in_mlflow_and_resumes(workdir: Path) -> None:
    sweep = write(workdir / "tiny.yaml", """
        name: tiny
        experiment: mlp_digits
        fixed: {epochs: 2, batch_size: 64, hidden: 32}
        params:
          micro_size: [1, 2]
    """)
    result = CliRunner().invoke(app, ["sweep", str(sweep)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "2/2" in result.output and "compare trials:" in result.output
    assert f"serve the store:  msexp ui {sweep}" in result.output

    client, parents, children = runs_of("tiny")
    assert len(parents) == 1 and len(children) == 2
    parent = parents[0]
    assert parent.data.tags["msexp.sweep"] == "tiny"
    assert parent.data.tags["msexp.method"] == "grid"
    assert [a.path for a in client.list_artifacts(parent.info.run_id)] == ["images", "tiny.yaml"]
    assert client.list_artifacts(parent.info.run_id, "images"), "the trade-off picture"
    assert CliRunner().invoke(app, ["report", str(sweep)]).exit_code == 0
    assert {"report/report.html", "report/effects_micro_size.png"} <= {
        a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert parent.info.status == "FINISHED"
    assert "best_eval_accuracy" in parent.data.metrics

    by_micro = {c.data.params["micro_size"]: c for c in children}
    assert set(by_micro) == {"1", "2"}
    for micro, child in by_micro.items():
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.data.tags["status"] == "COMPLETE"
        assert child.info.status == "FINISHED"
        p = child.data.params
        assert p["micro_batch"] == str(64 // int(micro)) and p["effective_batch"] == "64"
        assert p["optimizer"] == "momentum" and p["amp_level"] == "O0"
        assert "sklearn digits" in p["data_source"]
        m = child.data.metrics
        for name in ("eval_accuracy", "train_loss", "samples_per_s", "step_ms", "compile_s",
                     "peak_mem_mb", "wall_s", "eval_loss"):
            assert name in m, name
        assert m["eval_accuracy"] > 0.5 and m["peak_mem_mb"] > 50
        losses = client.get_metric_history(child.info.run_id, "train_loss")
        assert len(losses) == 2 * (1437 // 64)  # every update, one point a step
        accuracy = client.get_metric_history(child.info.run_id, "eval_accuracy")
        assert [a.step for a in accuracy] == [22, 44]  # per epoch, on the update axis
        artifacts = {a.path for a in client.list_artifacts(child.info.run_id)}
        assert {"trial.log", "events.jsonl"} <= artifacts

    again = CliRunner().invoke(app, ["sweep", str(sweep)], env={"COLUMNS": "200"})
    assert again.exit_code == 0, again.output
    assert "trial 0:" not in again.output, "a finished trial must not run again"
    _, parents, children = runs_of("tiny")
    assert len(parents) == 1 and len(children) == 2


def test_failing_trials_are_recorded_and_the_sweep_goes_on(workdir: Path) -> None:
    sweep = write(workdir / "broken.yaml", """
        name: broken
        experiment: broken:build
        budget: {trial_timeout: 20}
        params:
          mode: [raises, exits, nan, works, hangs]
    """)
    # hangs last: the worker that replaces the timed-out one imports MindSpore inside the
    # next trial's trial_timeout, which a loaded machine can spend on the import alone
    result = CliRunner().invoke(app, ["sweep", str(sweep)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    client, _, children = runs_of("broken")
    by_mode = {c.data.params["mode"]: c for c in children}
    assert {m: c.data.tags["status"] for m, c in by_mode.items()} == {
        "raises": "FAILED", "exits": "FAILED", "hangs": "TIMEOUT", "nan": "FAILED",
        "works": "COMPLETE"}
    assert "the experiment is broken on purpose" in by_mode["raises"].data.tags["error"]
    assert by_mode["exits"].data.tags["error"] == "trial process exited with code 3"
    assert "trial_timeout of 20 s" in by_mode["hangs"].data.tags["error"]
    assert "Diverged" in by_mode["nan"].data.tags["error"]
    log = Path(client.download_artifacts(by_mode["raises"].info.run_id, "trial.log", "dl"))
    assert "RuntimeError: the experiment is broken on purpose" in log.read_text()
    hung_pid = int(Path(client.download_artifacts(by_mode["hangs"].info.run_id, "trial.log",
                                                  "dl2")).read_text().split("pid ")[1].split()[0])
    # the timed-out process group must be killed: wait for it to go (TimeoutExpired if not)
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(hung_pid).wait(timeout=DEADLINE_S)

    study = optuna.load_study(study_name="broken", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend("mlruns/optuna.journal")))
    states = sorted(t.state.name for t in study.trials)
    assert states == ["COMPLETE", "FAIL", "FAIL", "FAIL", "FAIL"]


def test_ctrl_c_stops_cleanly_and_leaves_no_process(workdir: Path) -> None:
    sweep = write(workdir / "slow.yaml", """
        name: slow
        experiment: broken:build
        params:
          mode: [hangs, works]
    """)
    proc = subprocess.Popen(msexp_cmd("sweep", str(sweep)), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=os.environ)

    def trial_started() -> bool:
        log = next(Path("mlruns/trials/slow").glob("trial-*/trial.log"), None) \
            if Path("mlruns/trials/slow").exists() else None
        return bool(log) and "mode hangs in pid" in log.read_text()

    assert wait_for("the hanging trial starts", trial_started, proc), "the sweep ended early"
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 130, output
    assert "interrupted: run the same command again to resume" in output
    assert "Traceback" not in output
    _, alive = psutil.wait_procs(children, timeout=DEADLINE_S)  # returns once they are gone
    assert alive == [], "no trial process may outlive the sweep"
    study = optuna.load_study(study_name="slow", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend("mlruns/optuna.journal")))
    waiting = [t for t in study.trials if t.state.name == "WAITING"]
    assert {t.system_attrs["fixed_params"]["mode"] for t in waiting} == {"hangs", "works"}, \
        "the interrupted and the unstarted point are left to resume"


@pytest.mark.parametrize("uri_source", ["option", "env"])
def test_tracking_uri_overrides_the_embedded_store(workdir: Path, uri_source: str) -> None:
    sweep = write(workdir / "one.yaml", """
        name: one
        experiment: broken:build
        params: {mode: [raises, works]}
    """)
    uri = f"sqlite:///{workdir / 'other.db'}"
    args, env = ["sweep", str(sweep)], {"COLUMNS": "200"}
    if uri_source == "option":
        args += ["--tracking-uri", uri]
    else:
        env["MLFLOW_TRACKING_URI"] = uri
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 0, result.output
    assert (workdir / "other.db").exists() and not (workdir / "mlruns" / "mlflow.db").exists()
    runs = MlflowClient(uri).search_runs(
        [MlflowClient(uri).get_experiment_by_name("one").experiment_id])
    assert len(runs) == 3  # the parent and two trials


def test_unreachable_mlflow_stops_the_sweep_and_loses_no_trial(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sweep = write(workdir / "nowhere.yaml", """
        name: nowhere
        experiment: broken:build
        fixed: {epochs: 2}
        params: {hidden: [16, 32]}
    """)
    mark = uuid.uuid4().hex  # carried by every process this sweep starts
    monkeypatch.setenv(MARK, mark)
    result = subprocess.run(msexp_cmd("sweep", str(sweep), "--tracking-uri",
                                      "http://127.0.0.1:9"), capture_output=True, text=True,
                            timeout=DEADLINE_S)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "cannot reach the MLflow tracking store http://127.0.0.1:9" in result.stderr
    study = optuna.load_study(study_name="nowhere", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend("mlruns/optuna.journal")))
    assert not [t for t in study.trials if t.state.name == "COMPLETE"], \
        "no result may be told to Optuna that MLflow never got"
    assert_no_process_left(mark)  # this sweep's trial processes, not anyone else's

    result = CliRunner().invoke(app, ["sweep", str(sweep)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    study = optuna.load_study(study_name="nowhere", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend("mlruns/optuna.journal")))
    assert len([t for t in study.trials if t.state.name == "COMPLETE"]) == 2
    _, parents, children = runs_of("nowhere")
    assert len(parents) == 1 and len(children) == 2


def test_mlflow_shows_the_sweep_as_model_training_with_readable_runs(workdir: Path) -> None:
    sweep = write(workdir / "ui.yaml", """
        name: ui
        experiment: broken:build
        fixed: {hidden: 16, epochs: 1}
        params:
          micro_size: [1, 2]
          lr: [0.05]
    """)
    assert CliRunner().invoke(app, ["sweep", str(sweep)]).exit_code == 0
    client = mlflow_client()
    experiment = client.get_experiment_by_name("ui")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if r.data.tags["msexp.role"] == "sweep"]
    assert parent.data.params["micro_size"] == "1, 2"
    assert parent.data.params["hidden"] == "16" and parent.data.params["epochs"] == "1"
    best = parent.data.tags["best_trial"]
    assert parent.data.tags["best.micro_size"] in ("1", "2")
    assert "best_eval_accuracy" in parent.data.metrics
    names = sorted(r.info.run_name for r in runs if r.data.tags["msexp.role"] == "trial")
    assert names == ["#0 micro_size=1 lr=0.05", "#1 micro_size=2 lr=0.05"]
    assert best in ("0", "1")


def test_the_progress_bar_shows_each_running_trial(workdir: Path) -> None:
    """On a terminal: a row per running trial with its params, epoch of epochs and loss."""
    from rich.console import Console

    from msexp.cli import progress as shown_progress
    from msexp.execution.result import Status, TrialResult
    from msexp.execution.subscribers import TrialInfo
    from msexp.spec import parse_spec
    from msexp.training.records import Epoch

    spec = parse_spec("name: bar\nexperiment: mlp_digits\nparams: {micro_size: [1, 2]}\n",
                      "bar.yaml")
    screen = Console(record=True, force_terminal=True, width=160)
    progress = shown_progress.SweepProgress(spec, screen)
    trial = TrialInfo(0, "#0 micro_size=2", {"epochs": 5}, {}, 0.0, best="0.9")
    with progress:
        progress.on_sweep_start(2, 0)
        progress.on_trial_start(trial)
        progress.on_trial_epoch(trial, Epoch(3, 30, 1.0, {"train_loss": 0.4321}))
        progress.bar.refresh()
        shown = screen.export_text()
        progress.on_trial_end(trial, TrialResult(Status.COMPLETE, {"eval_accuracy": 0.9}))
        progress.bar.refresh()
    assert "#0 micro_size=2" in shown and "3/5" in shown and "epoch 3, loss 0.4321" in shown
    assert "eta" in shown
    assert "trial 0: COMPLETE eval_accuracy=0.9" in screen.export_text()
    assert progress.running == {}


def test_a_worker_runs_budget_workers_trials_at_once(workdir: Path) -> None:
    """Two trials of one graph signature: one worker process would run the second warm in
    the first's process; budget.workers 2 runs each cold in a process of its own."""
    sweep = write(workdir / "two.yaml", """
        name: two-workers
        experiment: mlp_digits
        budget: {workers: 2}
        fixed: {epochs: 1, hidden: 16}
        params: {lr: [0.01, 0.02]}
    """)
    result = CliRunner().invoke(app, ["worker", str(sweep)])
    assert result.exit_code == 0, result.output
    starts = [json.loads(next(line for line in path.read_text().splitlines()
                              if '"event": "start"' in line))
              for path in sorted(Path("mlruns/trials/two-workers").glob("*/events.jsonl"))]
    assert len(starts) == 2
    assert [s["warm"] for s in starts] == [False, False], starts
    assert starts[0]["pid"] != starts[1]["pid"]


def command_sweep(workdir: Path, name: str, job: str, points: list[int],
                  method: str = "grid", pruner: str = "none") -> Path:
    """A one-worker sweep of `python job.py -x POINT` (`job`: the script), maximizing the
    `score` it prints."""
    (workdir / "job.py").write_text(job)
    return write(workdir / f"{name}.yaml", f"""
        name: {name}
        method: {method}
        experiment: {{command: python job.py}}
        objective: {{metric: score, direction: maximize}}
        budget: {{workers: 1, trials: {len(points)}}}
        params: {{x: {points}}}
        pruner: {{type: {pruner}}}
    """)


# mutation: driver._may_wait answers False (every end waits for MLflow's opening: a slot
# runs one trial until it opens), True for a failure or for a sampler that reads earlier
# results (TPE), or lets ends wait past AHEAD; `Sweep.blind` without its pruner check (a
# grid with a median pruner runs on: the pruner then judges the next trials against
# ends Optuna was not told; 11 trials ended, not 1)
@pytest.mark.parametrize(("method", "pruner", "failing", "ended"), [
    ("grid", "none", False, AHEAD + 1), ("grid", "none", True, 1), ("tpe", "none", False, 1),
    ("grid", "median", False, 1)],
    ids=["ahead", "failing", "tpe", "pruner"])
def test_a_slot_runs_on_while_mlflow_opens_but_not_past_a_failure_or_ahead(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, method: str, pruner: str,
        failing: bool, ended: int) -> None:
    gate = threading.Event()

    class SlowToOpen(recorder.Tracker):
        def __init__(self, *args, **kwargs):
            gate.wait(DEADLINE_S)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(recorder, "Tracker", SlowToOpen)
    points = list(range(0 if failing else 1, AHEAD + 3))
    sweep = command_sweep(workdir, "opens", "import sys\nsys.exit(3) if sys.argv[1:] == "
                          "['-x', '0'] else print('score: 1')\n", points, method, pruner)
    outcome: list = []
    thread = threading.Thread(target=lambda: outcome.append(CliRunner().invoke(
        app, ["sweep", str(sweep)], env={"COLUMNS": "200"})))
    thread.start()
    try:
        assert _ended_while_shut("opens") == ended, "trials ended before MLflow opened"
    finally:
        gate.set()
        thread.join(DEADLINE_S)
    _, parents, children = runs_of("opens")
    assert len(parents) == 1 and len(children) == len(points), outcome[0].output
    study = optuna.load_study(study_name="opens", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend("mlruns/optuna.journal")))
    assert sorted(t.state.name for t in study.trials) == \
        ["COMPLETE"] * (len(points) - failing) + ["FAIL"] * failing


def _ended_while_shut(name: str) -> int:
    """How many trials of the sweep `name` ended, once no more end for 3 s."""
    def ended() -> int:
        return sum('"end"' in p.read_text()
                   for p in Path("mlruns/trials", name).glob("*/events.jsonl"))
    count, since = -1, time.monotonic()
    while time.monotonic() - since < 3:
        if ended() != count:
            count, since = ended(), time.monotonic()
        time.sleep(0.1)
    return count


# mutation: MlflowRecorder._start looks at the spool at every start (a look at each of its
# files: with short trials 6,000 records waited at once and each start read them all), or
# not again after a record was kept
@pytest.mark.parametrize("refused", [0, 1], ids=["delivered", "one-refused"])
def test_a_sweep_looks_at_the_spool_as_it_starts_and_after_a_record_is_kept(
        workdir: Path, monkeypatch: pytest.MonkeyPatch, refused: int) -> None:
    looks: list[int] = []
    flush = recorder.flush_spool
    monkeypatch.setattr(recorder, "flush_spool",
                        lambda tracker: looks.append(1) or flush(tracker))
    finish = recorder.Tracker.finish_trial
    left = [refused]

    def finish_trial(self, *args, **kwargs):
        if left[0]:
            left[0] -= 1
            raise ConnectionError("MLflow went away")
        return finish(self, *args, **kwargs)

    monkeypatch.setattr(recorder.Tracker, "finish_trial", finish_trial)
    recorder.Tracker(None)  # the store, made: MLflow opens before the first trial ends
    sweep = command_sweep(workdir, "looks", "import time\ntime.sleep(0.3)\nprint('score: 1')\n",
                          [1, 2, 3, 4, 5, 6])
    result = CliRunner().invoke(app, ["sweep", str(sweep)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert len(looks) == 2 + refused, "as the first trial starts, after a kept one, at the end"
    _, _, children = runs_of("looks")
    assert len(children) == 6 and not list(Path("mlruns/spool").glob("*.json"))


# mutation: MlflowRecorder.on_trial_ending holds records without waiting on the backlog
# (trials that end faster than MLflow logs them held a file open each: 6,585 at once)
def test_trials_that_end_faster_than_mlflow_logs_them_wait_for_it(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recorder, "BACKLOG", 2)
    finish = recorder.Tracker.finish_trial

    def slow_finish(self, *args, **kwargs):
        time.sleep(0.4)
        return finish(self, *args, **kwargs)

    monkeypatch.setattr(recorder.Tracker, "finish_trial", slow_finish)
    sweep = command_sweep(workdir, "fast", "print('score: 1')\n", [1, 2, 3, 4, 5, 6, 7, 8])
    held, done = [0], threading.Event()

    def watch() -> None:
        while not done.is_set():
            held[0] = max(held[0], len(list(Path("mlruns/spool").glob("*.json"))))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = CliRunner().invoke(app, ["sweep", str(sweep)], env={"COLUMNS": "200"})
    finally:
        done.set()
        watcher.join()
    assert result.exit_code == 0, result.output
    assert 1 <= held[0] <= 2, "records held at once"
    _, _, children = runs_of("fast")
    assert len(children) == 8 and all(r.info.status == "FINISHED" for r in children)


# mutation: Sweep._end looks the best up at every trial's end (a read of every trial of
# the study: a third of a slot's time at 5,000 trials of a command that exits at once)
def test_the_shown_best_is_looked_up_at_most_once_a_period(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from msexp.search import driver

    looks: list[str] = []
    best_so_far = driver.best_so_far
    monkeypatch.setattr(driver, "BEST_EVERY_S", 600.0)
    monkeypatch.setattr(driver, "best_so_far",
                        lambda *args: looks.append(best_so_far(*args)) or looks[-1])
    sweep = command_sweep(workdir, "best", "import sys\nprint('score:', sys.argv[-1])\n",
                          [1, 2, 3, 4])
    result = CliRunner().invoke(app, ["sweep", str(sweep)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    # one look in the period, at the first end the sweep shows (trials that end while MLflow
    # opens are shown once it is open, each in a thread of its own: which trial is first
    # depends on the machine's speed)
    # (Sweep._best without its lock looked three times in two runs of this test on a loaded
    # machine, once in two idle: ends that waited for MLflow looked at once)
    assert len(looks) == 1 and looks[0].startswith("score="), looks
