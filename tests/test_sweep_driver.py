"""The sweep driver in-process (search/driver.py, search/sweep.py, api/running.py): real
command trials through `msexp.sweep` and `msexp worker`, seen in their progress lines,
Optuna states and MLflow runs: a trial that cannot start, a stale trial out of retries, a
named study in another storage whose MLflow record cannot be ended, stop signals while a
trial runs and while the sweep's MLflow record closes; and the request of a trial that
ran, after its sweep changed (search/requests.py).

The MLflow store is the module's own (creating one takes seconds): each test's sweep has
an MLflow experiment of its own name in it, and its Optuna journal in its `workdir`."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import optuna
import pytest
import yaml
from mlflow import MlflowClient
from mlflow.entities import Run
from optuna.trial import TrialState
from typer.testing import CliRunner

import msexp
from msexp.api.sources import load
from msexp.cli import app
from msexp.console import interrupts
from msexp.keys import TrialKey
from msexp.os_tools.locking import flock
from msexp.search.requests import ran_request
from msexp.search.storage import open_storage
from tests.conftest import write

# A command trial: a line per epoch (loss lr * scale / epoch), each epoch reported as
# `msexp.hooks.report` reports it (through the protocol's writer: the hooks import
# MindSpore, seconds). `block`: a file where that trial's folder goes (the trial cannot
# start); `wait_at`: the trial of that lr waits for a stop; `drop_parent`: the MLflow
# store (a path) whose parent run of the sweep named `sweep` goes once the trial's run is
# made (the sweep's record cannot be ended).
TRAIN = """
import os, sqlite3, sys, time
from pathlib import Path
if "--help" in sys.argv:
    print("usage: train.py [--lr LR] [--epochs EPOCHS] [--scale SCALE] [--block BLOCK] "
          "[--wait_at WAIT_AT] [--drop_parent DROP_PARENT] [--sweep SWEEP]")
    sys.exit(0)
from msexp.execution.protocol import EventWriter
from msexp.training.records import Epoch
args = dict(a[2:].split("=", 1) for a in sys.argv[1:])
lr = float(args["lr"])
with EventWriter.open(Path(os.environ["MSEXP_EVENTS"])) as tell:
    for epoch in range(1, int(args.get("epochs", 1)) + 1):
        loss = lr * float(args.get("scale", 1)) / epoch
        print(f"epoch: {epoch} step: 1, loss is {loss}", flush=True)
        tell(Epoch(epoch, epoch, 0.0, {"train_loss": loss}))
if "block" in args:  # the command runs in trial-NNNN/outputs
    open(f"../../trial-{int(args['block']):04d}", "w").close()
if "drop_parent" in args:
    store = sqlite3.connect(args["drop_parent"], timeout=30)
    parent = ("select t.value from runs r join experiments e using (experiment_id) "
              "join tags t using (run_uuid) where e.name = ? and t.key = 'mlflow.parentRunId'")
    deadline = time.time() + 60  # this trial's run: made once the sweep's MLflow opened
    while not (row := store.execute(parent, (args["sweep"],)).fetchone()):
        assert time.time() < deadline, "no trial run"
        time.sleep(0.05)
    store.execute("update runs set lifecycle_stage = 'deleted' where run_uuid = ?", row)
    store.commit()
if lr == float(args.get("wait_at", -1)):
    time.sleep(60)
"""

DEADLINE_S = 60.0


def sweep_of(name: str, lrs: tuple[float, ...] = (1.0, 2.0, 3.0), **fixed: object) -> dict:
    """A grid over `lr` of the command trial, two epochs each; `fixed` its other flags."""
    return {"name": name, "experiment": {"command": "python train.py"},
            "objective": {"metric": "train_loss", "direction": "minimize"},
            "fixed": {"epochs": 2, **fixed}, "params": {"lr": list(lrs)}}


@pytest.fixture
def uri(mlflow_db: Path) -> str:
    return f"sqlite:///{mlflow_db}"


@pytest.fixture
def trained(workdir: Path) -> Path:
    """A workdir with the command's script."""
    write(workdir / "train.py", TRAIN)
    return workdir


@pytest.fixture
def stops(stop_handlers_restored: None) -> None:
    """The stop signals a test sends reach only the sweep's handlers: any other is dropped
    (never pytest's KeyboardInterrupt); the handlers and the stops noted are undone after."""
    for sig in interrupts.STOPS:  # a handler, not SIG_IGN: the trials must not inherit it
        signal.signal(sig, lambda signum, frame: None)


def trial_runs(uri: str, experiment: str) -> dict[int, Run]:
    """The trial (child) runs of an MLflow experiment, by trial number."""
    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no MLflow experiment {experiment}"
    return {int(r.data.tags["msexp.trial"]): r for r in client.search_runs([found.experiment_id])
            if r.data.tags.get("msexp.role") == "trial"}


def states(name: str, storage: str | None = None) -> list[str]:
    study = optuna.load_study(study_name=name, storage=open_storage(storage))
    return [t.state.name for t in study.get_trials(deepcopy=False)]


def wait_for(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def interrupt() -> None:
    """A Ctrl-C to this process (its sweep)."""
    os.kill(os.getpid(), signal.SIGINT)


@contextlib.contextmanager
def ends_within(seconds: float) -> Iterator[None]:
    """A sweep still running after `seconds` is stopped: the test fails, not hangs."""
    ended = threading.Event()
    threading.Thread(target=lambda: ended.wait(seconds) or interrupt(), daemon=True).start()
    try:
        yield
    except KeyboardInterrupt:
        pytest.fail(f"the sweep was still running after {seconds:g} s")
    finally:
        ended.set()


def test_each_trial_runs_its_epochs_and_its_line_shows_the_best_so_far(
        trained: Path, uri: str, stops: None, capsys: pytest.CaptureFixture[str]) -> None:
    """Each trial's line says its result and the best so far, looked up as the first ended;
    every trial is told COMPLETE with its last epoch's loss, its epochs' losses reach
    Optuna (the pruner's intermediate values), and it is recorded in MLflow (issue 53
    survivors: driver.Sweep._best 4, _close 5, _end 33, _on_epoch 6, _run_trial 37,
    _run_trials 10; sweep._run 61; api.running.sweep 26)."""
    # with a pruner (which prunes none of these), each end waits for MLflow in its turn
    swept = {**sweep_of("driven", (2.0, 1.0, 3.0)),
             "pruner": {"type": "median", "startup_trials": 5}}
    with ends_within(30):  # mutation: each trial put back at its end runs again, forever
        results = msexp.sweep(swept, tracking_uri=uri)
    lines = capsys.readouterr().out.splitlines()
    trials = results.trials()
    assert [(t.number, t.status, t.values) for t in trials] == [
        (0, "COMPLETE", (1.0,)), (1, "COMPLETE", (0.5,)), (2, "COMPLETE", (1.5,))]
    assert [t.intermediate_values for t in results.study.get_trials(deepcopy=False)] == [
        {1: 2.0, 2: 1.0}, {1: 1.0, 2: 0.5}, {1: 3.0, 2: 1.5}]
    assert lines[0] == "driven: 3 trials"
    assert lines[-3] == (f"trial 0: COMPLETE train_loss=1 ({trials[0].metrics['wall_s']:.1f} s);"
                         " best train_loss=1 (#0)")
    assert [line.split(" (")[0] for line in lines[-2:]] == [
        "trial 1: COMPLETE train_loss=0.5", "trial 2: COMPLETE train_loss=1.5"]
    runs = trial_runs(uri, "driven")
    assert {n: (r.data.tags["status"], r.data.metrics["train_loss"]) for n, r in runs.items()} \
        == {0: ("COMPLETE", 1.0), 1: ("COMPLETE", 0.5), 2: ("COMPLETE", 1.5)}
    assert {t.run_id for t in trials} == {r.info.run_id for r in runs.values()}


def test_a_trial_that_cannot_start_fails_alone_naming_why(
        trained: Path, uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Trial 0 leaves a file where trial 1's folder goes: trial 1 fails with the error
    (FAILED in Optuna, the progress line and MLflow), the sweep goes on to trial 2
    (issue 53 survivors: driver.Sweep._run_trial 37, 52, 55)."""
    results = msexp.sweep(sweep_of("unstartable", block=1), tracking_uri=uri)
    error = (f"FileExistsError: [Errno 17] File exists: "
             f"'{trained / 'mlruns' / 'trials' / 'unstartable' / 'trial-0001'}'")
    assert [(t.number, t.status, t.error) for t in results.trials()] == [
        (0, "COMPLETE", None), (1, "FAILED", error), (2, "COMPLETE", None)]
    assert states("unstartable") == ["COMPLETE", "FAIL", "COMPLETE"]
    line = next(line for line in capsys.readouterr().out.splitlines()
                if line.startswith("trial 1: "))
    assert line.startswith(f"trial 1: FAILED {error} (")
    failed = trial_runs(uri, "unstartable")[1]
    assert (failed.info.status, failed.data.tags["error"]) == ("FAILED", error)


def test_a_named_study_in_another_storage_whose_record_cannot_end_suggests_its_report(
        trained: Path, mlflow_db: Path, uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`study=` and `storage=` name where the study is; when MLflow cannot end the sweep's
    record (its parent run went), the warning's `msexp report` reaches that study in that
    storage (issue 53 survivors: sweep._run 8, 17)."""
    swept = write(trained / "elsewhere.yaml", yaml.safe_dump(
        sweep_of("elsewhere", (2.0,), drop_parent=str(mlflow_db), sweep="elsewhere")))
    results = msexp.sweep(swept, tracking_uri=uri, storage="mlruns/other.journal",
                          study="other")
    assert results.study_name == "other"
    assert optuna.get_all_study_names(open_storage("mlruns/other.journal")) == ["other"]
    assert states("other", "mlruns/other.journal") == ["COMPLETE"]
    assert (trained / "mlruns" / "trials" / "other" / "trial-0000").is_dir()
    err = capsys.readouterr().err
    assert (f"run: msexp sync --tracking-uri {uri} && msexp report {swept} --study other "
            f"--storage mlruns/other.journal --tracking-uri {uri}") in err, err


def test_a_stale_trial_out_of_retries_is_failed_with_an_mlflow_run_as_the_sweep_resumes(
        trained: Path, uri: str) -> None:
    """A trial whose orchestrator went silent an hour ago, with `budget.retries: 0`, is
    failed as the next run of the sweep starts, and recorded first: an MLflow run of its
    params, FAILED with the error, which the trial names (issue 53 survivors:
    driver.Sweep._record_failed 3)."""
    swept = {**sweep_of("orphaned", (1.0, 2.0)), "budget": {"retries": 0}}
    msexp.sweep(swept, tracking_uri=uri, progress=False)
    study = optuna.load_study(study_name="orphaned", storage=open_storage(None))
    study.enqueue_trial({"lr": 2.0})
    orphan = study.ask()
    load(swept).space.suggest(orphan)
    orphan.set_user_attr(TrialKey.OWNER, "elsewhere:4242")
    orphan.set_user_attr(TrialKey.HEARTBEAT, time.time() - 3600)

    msexp.sweep(swept, tracking_uri=uri, progress=False)
    failed = study.get_trials(deepcopy=False)[2]
    assert failed.state is TrialState.FAIL
    assert failed.user_attrs[TrialKey.ERROR].startswith(
        "orchestrator elsewhere:4242 went silent")
    run = trial_runs(uri, "orphaned")[2]
    assert run.info.run_id == failed.user_attrs[TrialKey.RUN_ID]
    assert (run.info.status, run.data.tags["error"]) == (
        "FAILED", failed.user_attrs[TrialKey.ERROR])
    assert run.data.params["lr"] == "2.0"


def test_a_workers_stop_names_the_trial_that_resumes_and_queues_it_again(
        trained: Path, uri: str, stops: None) -> None:
    """A Ctrl-C while trial 0 runs: `msexp worker` says at once that trial 0 resumes (a
    first stop, not a second's "stopping now"), puts it back and exits 130 (issue 53
    survivors: driver.Sweep._interrupt 16)."""
    swept = write(trained / "stopped.yaml", yaml.safe_dump(sweep_of("stopped", wait_at=1.0)))
    folder = trained / "mlruns" / "trials" / "stopped" / "trial-0000"

    def stop() -> None:
        wait_for(folder.exists, "trial 0 started")
        interrupt()

    threading.Thread(target=stop, daemon=True).start()
    result = CliRunner().invoke(app, ["worker", str(swept), "--tracking-uri", uri],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 130, result.output
    said = [line for line in result.output.splitlines() if line.startswith("stopping")]
    assert len(said) == 1 and said[0].startswith(
        "stopping: trial 0 will resume from its last checkpoint"), result.output
    assert states("stopped") == ["WAITING", "WAITING", "WAITING"]


def test_a_second_stop_while_the_sweeps_mlflow_record_closes_leaves_at_once(
        trained: Path, mlflow_db: Path, uri: str, stops: None) -> None:
    """A Ctrl-C while trial 0 runs puts it back; MLflow's writes wait meanwhile (another
    process holds the store's writer lock), so the sweep's end waits for them. A second
    Ctrl-C then leaves at once: a bare KeyboardInterrupt, not the sweep's end (issue 53
    survivors: driver.Sweep.run 15, _interrupt 4)."""
    leave = threading.Event()

    def trial_0_recorded() -> bool:  # its run is made once MLflow has opened
        with contextlib.closing(sqlite3.connect(mlflow_db, timeout=30)) as db:
            return db.execute(
                "select 1 from runs r join experiments e using (experiment_id) join tags t "
                "using (run_uuid) where e.name = 'closing' and t.key = 'msexp.trial' and "
                "t.value = '0'").fetchone() is not None

    def stop_twice() -> None:
        wait_for((trained / "mlruns" / "trials" / "closing" / "trial-0000").exists,
                 "trial 0 started")
        wait_for(trial_0_recorded, "MLflow opened")
        with flock(mlflow_db.with_suffix(".lock")):  # as `tracking.runs.Tracker.writing` takes it
            interrupt()
            wait_for(lambda: states("closing")[0] == "WAITING", "trial 0 put back")
            time.sleep(0.5)  # the sweep is past its trials, ending its MLflow record
            interrupt()
            leave.wait(5)  # (a sweep that waits for MLflow after all ends then)

    threading.Thread(target=stop_twice, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt) as stopped:
            msexp.sweep(sweep_of("closing", wait_at=1.0), tracking_uri=uri, progress=False)
    finally:
        leave.set()
    assert stopped.value.args == (), "left at once, not through the sweep's end"
    assert states("closing") == ["WAITING", "WAITING", "WAITING"]


def test_the_request_of_a_trial_that_ran_has_its_params_as_it_ran(
        trained: Path, uri: str) -> None:
    """`msexp best --export` and `load_model` rebuild a trial's request: its params
    resolved from the sweep, or after the sweep changed, those the trial kept (issue 53
    survivors: requests.ran_request 4, 9)."""
    swept = sweep_of("rebuilt", (2.0,), scale=3)
    results = msexp.sweep(swept, tracking_uri=uri, progress=False)
    (frozen,) = results.study.get_trials(deepcopy=False)
    folder = trained / "rebuilt"
    request = ran_request(load(swept), frozen, folder)
    assert (request.params, request.folder) == ({"epochs": 2, "scale": 3, "lr": 2.0}, folder)
    changed = ran_request(load(sweep_of("rebuilt", (2.0,), scale=5)), frozen, folder)
    assert changed.params == {"epochs": 2, "scale": 3, "lr": 2.0}


def test_a_sweep_stopped_by_a_storage_error_queues_its_trial_again_saying_why(
        trained: Path, uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Optuna cannot be told of trial 0's end (its storage fails): the sweep stops with one
    line, trial 0 goes back to the queue with the reason on it (as `msexp status` shows),
    and the sweep's MLflow parent run ends FAILED (issue 53 fresh late:
    driver.Sweep._close_sweep 2, 11)."""
    from msexp.search import driver

    def storage_gone(*args: object) -> None:
        raise OSError("the storage is gone")

    monkeypatch.setattr(driver, "tell", storage_gone)
    with pytest.raises(msexp.MsexpError) as stopped:
        msexp.sweep(sweep_of("untold", (1.0,)), tracking_uri=uri, progress=False)
    assert str(stopped.value) == ("sweep untold stopped: OSError: the storage is gone "
                                  "(finished trials are kept; run the same command to resume)")
    study = optuna.load_study(study_name="untold", storage=open_storage(None))
    (trial,) = study.get_trials(deepcopy=False)
    assert trial.state is TrialState.WAITING
    assert trial.user_attrs[TrialKey.ERROR] == "sweep stopped: OSError: the storage is gone"
    parent = MlflowClient(uri).get_run(study.user_attrs["mlflow_parent_run_id"])
    assert parent.info.status == "FAILED"


def test_a_sweep_whose_first_trials_fail_alike_says_why_it_started_no_more(
        trained: Path, uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`budget.fail_fast: 2`: trials 0 and 1 fail with the same error, trial 2 is never
    started, and the sweep's last word on stderr says why (issue 53 fresh late:
    driver.Sweep._run_trials 12, _close_sweep 25)."""
    swept = {**sweep_of("alike", (1.0, 2.0, 3.0), scale="x"), "budget": {"fail_fast": 2}}
    msexp.sweep(swept, tracking_uri=uri, progress=False)
    assert states("alike") == ["FAIL", "FAIL", "WAITING"]
    assert capsys.readouterr().err.splitlines() == [
        "fail fast: 2 trials failed with the same error and none completed (the command "
        "exited with code 1: ValueError: could not convert string to float: 'x'); 1 trial "
        "not started (budget.fail_fast: 2)"]
