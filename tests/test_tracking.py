"""MLflow recording in-process, on a real embedded store: parent and child runs, metrics on
the update axis, tags, the spool while the store refuses a trial, and redaction."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from msexp.errors import MsexpError, Suggestion
from msexp.execution.result import Status, TrialResult
from msexp.keys import RunTag
from msexp.paths import DEFAULT_TRACKING_URI
from msexp.tracking.delivery import flush_spool, record_trial
from msexp.tracking.runs import Tracker, tracking_uri
from msexp.tracking.spool import Spool, store_key
from msexp.training.records import Epoch
from tests.conftest import ROOT

SECRET = "hunter2"


@pytest.fixture
def experiment(tracker: Tracker, request) -> str:
    """An MLflow experiment of this test's own."""
    return tracker.experiment_id(request.node.name)


@pytest.fixture
def workdir(tracker: Tracker) -> Path:
    return Path.cwd()


def finished(**fields) -> TrialResult:
    epochs = [Epoch(1, 2, 1.0, {"eval_accuracy": 0.5, "train_loss": 0.7},
                    {"train_loss": [0.9, 0.7]}),
              Epoch(2, 4, 2.0, {"eval_accuracy": 0.75, "train_loss": float("nan")},
                    {"train_loss": [0.6, 0.4]})]
    return TrialResult(**{"status": Status.COMPLETE, "epochs": epochs, "wall_s": 3.0,
                          "metrics": {"eval_accuracy": 0.75, "samples_per_s": 100.0},
                          **fields})


def history(tracker: Tracker, run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in tracker.client.get_metric_history(run_id, key)]


def test_the_tracking_uri_is_the_option_then_the_environment_then_the_embedded_store(
        monkeypatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking_uri() == DEFAULT_TRACKING_URI
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://env:5000")
    assert tracking_uri() == "http://env:5000"
    assert tracking_uri("http://option:5000") == "http://option:5000"


def test_a_parent_run_carries_every_param_the_sweep_file_and_redacted_tags(
        tracker: Tracker, experiment: str, workdir: Path) -> None:
    assert tracker.experiment_id(tracker.client.get_experiment(experiment).name) == experiment
    sweep = workdir / "sweep.yaml"
    sweep.write_text("name: exp\n")
    params = {f"knob{i:03d}": i for i in range(150)} | {"lr": [0.1, 0.2]}
    parent = tracker.parent_run(experiment, "study-1",
                                {"storage": f"postgresql://u:{SECRET}@db/x"}, sweep, params)
    run = tracker.client.get_run(parent)
    assert run.info.run_name == "study-1"
    assert run.data.tags[RunTag.ROLE] == "sweep" and run.data.tags[RunTag.STUDY] == "study-1"
    assert SECRET not in run.data.tags["storage"] and "***" in run.data.tags["storage"]
    assert len(run.data.params) == 151 and run.data.params["lr"] == "[0.1, 0.2]"
    assert [a.path for a in tracker.client.list_artifacts(parent)] == ["sweep.yaml"]
    assert tracker.has_run(parent) and not tracker.has_run("0" * 32)
    assert tracker.client.get_experiment(experiment).tags["mlflow.experimentKind"] == (
        "custom_model_development")


def test_a_trial_run_logs_series_epochs_and_final_metrics_on_the_update_axis(
        tracker: Tracker, experiment: str, workdir: Path) -> None:
    parent = tracker.parent_run(experiment, "s", {}, workdir / "none.yaml")
    log = workdir / "trial.log"
    log.write_text(f"password={SECRET}\n")
    started = time.time() - 10
    run_id = record_trial(tracker, experiment, parent, 3, {"lr": 0.1, "split": [0, 2]},
                          finished(log_path=log, impl={"thor": "msexp"},
                                           data_source="digits", pid=7, warm=True,
                                           resumed_from=1), started,
                          name="#3 lr=0.1", tags={"extra": "x"})
    run = tracker.client.get_run(run_id)
    assert run.info.run_name == "#3 lr=0.1" and run.info.status == "FINISHED"
    assert run.info.end_time - run.info.start_time == 3000
    assert run.data.tags[RunTag.PARENT] == parent and run.data.tags[RunTag.TRIAL] == "3"
    assert run.data.tags[RunTag.STATUS] == "COMPLETE" and run.data.tags["extra"] == "x"
    assert run.data.tags[RunTag.WARM] == "true" and run.data.tags[RunTag.RESUMED_FROM] == "1"
    assert RunTag.ERROR not in run.data.tags
    assert run.data.params == {"lr": "0.1", "split": "[0, 2]", "thor": "msexp",
                               "data_source": "digits"}
    assert history(tracker, run_id, "train_loss") == [(1, 0.9), (2, 0.7), (3, 0.6), (4, 0.4)]
    assert history(tracker, run_id, "eval_accuracy") == [(2, 0.5), (4, 0.75)]
    assert history(tracker, run_id, "epoch") == [(2, 1.0), (4, 2.0)]
    assert history(tracker, run_id, "samples_per_s") == [(4, 100.0)]
    assert history(tracker, run_id, "wall_s") == [(4, 3.0)]
    assert [a.path for a in tracker.client.list_artifacts(run_id)] == ["trial.log"]


def test_a_trial_past_mlflows_per_call_limits_logs_every_param_and_value(
        tracker: Tracker, experiment: str, workdir: Path) -> None:
    # params and metrics share log_batch calls: at most 100 params, 1000 entries each
    parent = tracker.parent_run(experiment, "s", {}, workdir / "none.yaml")
    params = {f"p{i:03d}": i for i in range(150)}
    series = [float(i) for i in range(1200)]
    result = finished(epochs=[Epoch(1, 1200, 1.0, {"eval_accuracy": 0.75},
                                    {"train_loss": series})])
    run_id = record_trial(tracker, experiment, parent, 0, params, result, time.time())
    run = tracker.client.get_run(run_id)
    assert run.data.params == {k: str(v) for k, v in params.items()}
    assert history(tracker, run_id, "train_loss") == [(i + 1, v) for i, v in enumerate(series)]
    assert history(tracker, run_id, "eval_accuracy") == [(1200, 0.75)]


@pytest.mark.parametrize(("status", "run_status"), [(Status.PRUNED, "KILLED"),
                                                    (Status.FAILED, "FAILED"),
                                                    (Status.TIMEOUT, "FAILED")])
def test_an_unfinished_trial_keeps_its_error_and_last_epoch(
        tracker: Tracker, experiment: str, workdir: Path, status: Status, run_status: str
) -> None:
    parent = tracker.parent_run(experiment, "s", {}, workdir / "none.yaml")
    result = finished(status=status, metrics={}, error=f"boom url=http://u:{SECRET}@h")
    run_id = record_trial(tracker, experiment, parent, 0, {}, result, time.time())
    run = tracker.client.get_run(run_id)
    assert run.info.status == run_status and run.info.run_name == "trial-0000"
    assert run.data.tags[RunTag.STATUS] == status.value
    assert "boom" in run.data.tags[RunTag.ERROR] and SECRET not in run.data.tags[RunTag.ERROR]
    assert RunTag.WARM not in run.data.tags  # it never started (pid 0)
    assert run.data.metrics["eval_accuracy"] == 0.75 and run.data.metrics["wall_s"] == 3.0


def test_a_trial_recorded_again_leaves_one_run(tracker: Tracker, experiment: str,
                                               workdir: Path) -> None:
    parent = tracker.parent_run(experiment, "s", {}, workdir / "none.yaml")
    first = record_trial(tracker, experiment, parent, 0, {}, finished(), time.time())
    other = record_trial(tracker, experiment, parent, 1, {}, finished(), time.time())
    again = record_trial(tracker, experiment, parent, 0, {}, finished(), time.time())
    alive = {r.info.run_id for r in tracker.client.search_runs([experiment])}
    assert alive == {parent, other, again} and first not in alive


def test_every_trial_is_in_the_spool_before_mlflow_has_it(
        tracker: Tracker, experiment: str, workdir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The one path (tune's and the tests' `record_trial`, the recorder's `deliver`): the
    record on disk first, gone once its run is finished."""
    parent = tracker.parent_run(experiment, "s", {}, workdir / "none.yaml")
    seen: list[list[str]] = []
    finish = Tracker.finish_trial

    def finish_trial(self, *args, **kwargs):
        seen.append([f.name for f in self.spool.files()])
        return finish(self, *args, **kwargs)

    monkeypatch.setattr(Tracker, "finish_trial", finish_trial)
    run_id = record_trial(tracker, experiment, parent, 7, {}, finished(), time.time())
    assert seen == [[f"{parent}-00007.json"]]  # mutation: delivered without the record
    assert tracker.spool.files() == [] and tracker.client.get_run(run_id).info.status == \
        "FINISHED"


def test_a_refused_trial_waits_in_the_spool_and_is_delivered_first_next_time(
        tracker: Tracker, experiment: str, workdir: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    parent = tracker.parent_run(experiment, "s", {}, workdir / "none.yaml")
    tracker.client.delete_experiment(experiment)  # the store now refuses new runs in it
    assert record_trial(tracker, experiment, parent, 0, {"lr": 0.1, "url": f"postgresql://u:{SECRET}@h/db"},
                        finished(), time.time()) is None
    assert record_trial(tracker, experiment, parent, 1, {"lr": 0.2}, finished(),
                        time.time()) is None
    files = tracker.spool.files()
    assert [f.name for f in files] == [f"{parent}-00000.json", f"{parent}-00001.json"]
    assert all(SECRET not in f.read_text() for f in files)
    suggested = [arg for r in caplog.records for arg in r.args if isinstance(arg, Suggestion)]
    assert suggested == [Suggestion(("sync",), tracking_uri=tracker.uri)] * 2, "as data"
    assert flush_spool(tracker) == 0 and len(tracker.spool.files()) == 2
    tracker.client.restore_experiment(experiment)
    run_id = record_trial(tracker, experiment, parent, 2, {"lr": 0.3}, finished(), time.time())
    assert run_id is not None and tracker.spool.files() == []
    runs = tracker.client.search_runs([experiment], f"tags.`{RunTag.PARENT}` = '{parent}'")
    assert sorted(r.data.tags[RunTag.TRIAL] for r in runs) == ["0", "1", "2"]
    spooled = next(r for r in runs if r.data.tags[RunTag.TRIAL] == "1")
    assert spooled.data.params["lr"] == "0.2" and spooled.data.metrics["eval_accuracy"] == 0.75


def test_a_spool_record_names_its_store_without_credentials(tmp_path: Path) -> None:
    assert store_key(f"http://user:{SECRET}@host:5000/?a=1") == "http://host:5000"
    assert store_key("http://host:5000/") == "http://host:5000"
    assert store_key("sqlite:///mlruns/mlflow.db") == "sqlite:///mlruns/mlflow.db"
    spool = Spool(tmp_path / "mlruns" / "spool")  # neither folder exists yet
    assert spool.files() == []
    spool.hold(f"http://user:{SECRET}@host:5000", "1", "p", 4, {"lr": 0.1, "dir": Path("d")},
               finished(), 12.0).release()
    spool.hold("http://other:5000", "1", "p", 5, {}, finished(), 13.0).release()
    (path, record), = spool.pending("http://host:5000")
    assert path.name == "p-00004.json" and SECRET not in path.read_text()
    assert (record.number, record.params, record.started) == (4, {"lr": 0.1, "dir": "d"}, 12.0)
    assert json.dumps(record.trial_result.to_json()) == json.dumps(finished().to_json())  # NaN
    legacy = tmp_path / "mlruns" / "spool" / "p-00006.json"  # 0.1 wrote the URI itself
    data = json.loads(path.read_text())
    del data["store"]
    legacy.write_text(json.dumps({**data, "uri": "http://host:5000/", "number": 6}))
    assert [r.number for _, r in spool.pending("http://u:p@host:5000")] == [4, 6]


@pytest.mark.parametrize("free", [4096, None], ids=["disk-says-full", "write-says-full"])
def test_a_full_disk_while_spooling_a_trial_is_one_line_and_leaves_no_partial_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, free: int | None) -> None:
    """issue 53 (branches): the spool's full disk, in-process (tests/fault/test_causes.py
    fills a real tmpfs where `unshare -m` is allowed)."""
    import errno
    import shutil

    from msexp.tracking import spool as spooling

    def full(handle, *args, **kwargs) -> None:  # the disk fills as the record is written
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(spooling, "lock_file", full)
    folder = tmp_path / "spool"
    if free is not None:  # the disk's own figures say it is full: they are shown
        usage = shutil.disk_usage(tmp_path)._replace(free=free)
        monkeypatch.setattr(shutil, "disk_usage", lambda path: usage)
    with pytest.raises(MsexpError) as error:
        Spool(folder).hold("http://host:5000", "1", "p", 3, {"lr": 0.1}, finished(), 12.0)
    figures = f" ({free} bytes free)" if free is not None else ""
    assert str(error.value) == (f"cannot keep trial 3's result in the spool; no space left on "
                                f"the device of {folder.resolve()}{figures}")
    assert list(folder.iterdir()) == [], "no partial record is left"


def test_a_spool_write_that_fails_otherwise_names_the_record_it_could_not_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from msexp.tracking import spool as spooling

    def refused(handle, *args, **kwargs) -> None:
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(spooling, "lock_file", refused)
    folder = tmp_path / "spool"
    with pytest.raises(PermissionError) as error:
        Spool(folder).hold("http://host:5000", "1", "p", 3, {}, finished(), 12.0)
    assert error.value.filename == str(folder / "p-00003.json")
    assert list(folder.iterdir()) == []


def test_ui_links_open_the_training_view(tracker: Tracker) -> None:
    runs, parent, command = tracker.ui_links("1", "abc")
    assert runs == "http://127.0.0.1:5000/#/experiments/1/runs?workflowType=machine_learning"
    assert parent.endswith("/experiments/1/runs/abc?workflowType=machine_learning")
    assert command == "msexp ui"  # mutation: the `mlflow ui ...` command (not on PATH)
    assert tracker.ui_links("1", "abc", Path("sweeps/a b.yaml"))[2] == "msexp ui 'sweeps/a b.yaml'"
    elsewhere = Tracker(f"sqlite:///{Path('other.db').resolve()}")
    assert elsewhere.ui_links("1", "abc")[2] == (
        f"msexp ui --tracking-uri sqlite:///{Path('other.db').resolve()}")


def test_msexp_sync_delivers_what_waits_and_says_what_is_left(
        tracker: Tracker, experiment: str, workdir: Path) -> None:
    from typer.testing import CliRunner

    from msexp.cli import app

    parent = tracker.parent_run(experiment, "s", {}, workdir / "none.yaml")
    tracker.client.delete_experiment(experiment)
    for number in (0, 1):
        assert record_trial(tracker, experiment, parent, number, {}, finished(),
                            time.time()) is None
    tracker.spool.keep_ending(tracker.uri, parent, "FINISHED")  # as a sweep that ended
    waiting = CliRunner().invoke(app, ["sync"])
    assert waiting.exit_code == 1
    assert waiting.output.strip() == (f"delivered 0 trial(s) to {DEFAULT_TRACKING_URI}; "
                                      "3 still waiting")
    assert tracker.client.get_run(parent).info.status == "RUNNING"
    tracker.client.restore_experiment(experiment)
    done = CliRunner().invoke(app, ["sync"])
    assert done.exit_code == 0, done.output
    assert done.output.strip() == (f"delivered 2 trial(s) to {DEFAULT_TRACKING_URI}; "
                                   "0 still waiting")
    runs = tracker.client.search_runs([experiment], f"tags.`{RunTag.PARENT}` = '{parent}'")
    assert sorted(r.data.tags[RunTag.TRIAL] for r in runs) == ["0", "1"]
    assert tracker.client.get_run(parent).info.status == "FINISHED", "sync ends the sweep's run"


def test_a_trials_model_is_attached_only_when_asked(tracker: Tracker, experiment: str,
                                                    workdir: Path) -> None:
    parent = tracker.parent_run(experiment, "s", {}, workdir / "none.yaml")
    model = workdir / "model.ckpt"
    model.write_bytes(b"weights")
    kept = finished(checkpoint=model)
    plain = record_trial(tracker, experiment, parent, 0, {}, kept, time.time())
    attached = record_trial(tracker, experiment, parent, 1, {}, kept, time.time(),
                            log_checkpoint=True)
    assert tracker.client.list_artifacts(plain, "checkpoint") == []
    assert [a.path for a in tracker.client.list_artifacts(attached, "checkpoint")] == [
        "checkpoint/model.ckpt"]
    gone = record_trial(tracker, experiment, parent, 2, {}, finished(checkpoint=workdir / "x"),
                        time.time(), log_checkpoint=True)
    assert tracker.client.list_artifacts(gone, "checkpoint") == []
    tracker.client.delete_experiment(experiment)  # refused: it waits in the spool
    assert record_trial(tracker, experiment, parent, 3, {}, kept, time.time(),
                        log_checkpoint=True) is None
    tracker.client.restore_experiment(experiment)
    assert flush_spool(tracker) == 1  # mutation: the spooled record forgets the model
    (late,) = tracker.client.search_runs([experiment], f"tags.`{RunTag.TRIAL}` = '3'")
    assert [a.path for a in tracker.client.list_artifacts(late.info.run_id, "checkpoint")] == [
        "checkpoint/model.ckpt"]


def test_a_trial_run_names_its_data_as_a_dataset_input(tracker: Tracker, experiment: str,
                                                       workdir: Path) -> None:
    """The runs table's Dataset column shows it; different data get different digests."""
    parent = tracker.parent_run(experiment, "s", {}, workdir / "none.yaml")
    described = {
        0: "sklearn digits (1797 images, 8x8 upsampled to 28x28, 360 held out)",
        1: "image folder /data/pets (800 train, 200 eval)",
        2: "",
    }
    inputs = {}
    for number, description in described.items():
        run_id = record_trial(tracker, experiment, parent, number, {},
                              finished(data_source=description), time.time())
        inputs[number] = tracker.client.get_run(run_id).inputs.dataset_inputs
    (digits,), (pets,) = inputs[0], inputs[1]
    assert (digits.dataset.name, pets.dataset.name) == ("sklearn digits",
                                                         "image folder /data/pets")
    assert digits.dataset.digest != pets.dataset.digest
    assert json.loads(pets.dataset.source) == {"tags": {"description": described[1]}}
    assert {(t.key, t.value) for t in digits.tags} == {("mlflow.data.context", "training")}
    assert inputs[2] == [], "a trial that never started has no data to name"


def test_a_run_made_as_its_trial_starts_is_finished_in_place_and_logged_again_unchanged(
        tracker: Tracker, experiment: str, workdir: Path) -> None:
    parent = tracker.parent_run(experiment, "s", {}, workdir / "none.yaml")
    started = time.time() - 10
    run_id = tracker.start_trial(experiment, parent, 0, {"lr": 0.1}, started, "#0 lr=0.1")
    running = tracker.client.get_run(run_id)
    assert running.info.status == "RUNNING" and running.data.params == {"lr": "0.1"}
    assert running.data.tags[RunTag.TRIAL] == "0" and not running.data.metrics
    for _ in range(2):  # a delivery that failed midway is made again
        tracker.finish_trial(run_id, finished(impl={"thor": "msexp"}), started, {"extra": "x"})
    run = tracker.client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "#0 lr=0.1"
    assert run.data.params == {"lr": "0.1", "thor": "msexp"}
    assert run.data.tags[RunTag.STATUS] == "COMPLETE" and run.data.tags["extra"] == "x"
    assert history(tracker, run_id, "train_loss") == [(1, 0.9), (2, 0.7), (3, 0.6), (4, 0.4)]
    assert history(tracker, run_id, "eval_accuracy") == [(2, 0.5), (4, 0.75)]


def test_a_knob_the_trial_resolves_is_logged_as_it_ran_not_as_asked(
        tracker: Tracker, experiment: str, workdir: Path) -> None:
    parent = tracker.parent_run(experiment, "s", {}, workdir / "none.yaml")
    asked = {"lr": 0.1, "optimizer": "thor", "thor_impl": "auto"}
    for impl, logged in (({"thor_impl": "msexp"}, "msexp"), ({}, "auto")):
        run_id = tracker.start_trial(experiment, parent, 0, asked, time.time(), replace=True)
        assert "thor_impl" not in tracker.client.get_run(run_id).data.params, "not yet known"
        tracker.finish_trial(run_id, finished(impl=impl), time.time(), params=asked)
        assert tracker.client.get_run(run_id).data.params["thor_impl"] == logged


def test_a_spooled_trial_finishes_the_run_it_started_or_else_gets_one_new_run(
        tracker: Tracker, experiment: str, workdir: Path) -> None:
    parent = tracker.parent_run(experiment, "s", {}, workdir / "none.yaml")
    began = tracker.start_trial(experiment, parent, 0, {"lr": 0.1}, time.time())
    stray = tracker.start_trial(experiment, parent, 0, {"lr": 0.1}, time.time())  # a rival
    gone = tracker.start_trial(experiment, parent, 1, {"lr": 0.2}, time.time())
    tracker.client.delete_run(gone)
    for number, run_id in ((0, began), (1, gone)):
        tracker.spool.hold(tracker.uri, experiment, parent, number, {"lr": 0.1 + number / 10},
                           finished(), time.time(), run_id=run_id, name=f"#{number}").release()
    assert flush_spool(tracker) == 2 and tracker.spool.files() == []
    runs = tracker.client.search_runs([experiment], f"tags.`{RunTag.PARENT}` = '{parent}'")
    by_trial = {r.data.tags[RunTag.TRIAL]: r for r in runs}
    assert len(runs) == 2 and by_trial["0"].info.run_id == began
    assert stray not in {r.info.run_id for r in runs}
    assert by_trial["1"].info.run_id != gone and by_trial["1"].info.run_name == "#1"
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert {r.data.metrics["eval_accuracy"] for r in runs} == {0.75}


def test_a_held_spool_record_is_passed_by_until_released_or_its_writer_dies(
        tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    held = spool.hold("http://host:5000", "1", "p", 0, {"lr": 0.1}, finished(), 1.0,
                      run_id="r0")
    assert [f.name for f in spool.files()] == ["p-00000.json"]
    # mutation: the lock taken blocking (no LOCK_NB): this process waits on the lock it
    # holds itself, so the listing runs in a thread that must end within seconds
    listed: list = []
    lister = threading.Thread(target=lambda: listed.extend(spool.pending("http://host:5000")),
                              daemon=True)
    lister.start()
    lister.join(timeout=10)
    assert not lister.is_alive(), "the listing waited for the record's lock"
    assert listed == [], "its writer delivers it"
    held.release()
    ((path, record),) = spool.pending("http://host:5000")
    assert (path, record.run_id, record.number) == (held.path, "r0", 0)
    code = ("import os, signal, sys; from pathlib import Path\n"
            "from msexp.tracking.spool import Spool\n"
            "from msexp.execution.result import Status, TrialResult\n"
            f"Spool(Path({str(tmp_path / 'spool')!r})).hold('http://host:5000', '1', 'p', 1, "
            "{}, TrialResult(Status.COMPLETE), 2.0)\n"
            "os.kill(os.getpid(), signal.SIGKILL)")
    died = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True)
    assert died.returncode == -signal.SIGKILL, died.stderr
    assert [r.number for _, r in spool.pending("http://host:5000")] == [0, 1]
    held.delivered()
    assert not held.path.exists()


@pytest.mark.parametrize("meanwhile", ["delivered", "replaced"])
def test_a_record_that_changed_between_a_listings_open_and_its_lock_is_passed_by(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, meanwhile: str) -> None:
    """A listing (a flush, `msexp sync`) opens a record, then takes its lock. Between the
    two, its writer delivered it and let go (`delivered`), or the trial's next attempt
    put its own record in its place (`replaced`): the file the listing has open is no
    longer the spool's, and its record is not delivered again."""
    # mutation: `Spool.pending` without its `_same_file` check: the delivered record is
    # listed (delivered twice), or the old attempt's FAILED record over the new one
    from msexp.tracking import spool as spool_module

    spool, uri = Spool(tmp_path / "spool"), "http://host:5000"
    first = spool.hold(uri, "1", "p", 0, {"lr": 0.1},
                       finished(status=Status.FAILED, error="killed"), 1.0)
    if meanwhile == "replaced":
        first.release()  # MLflow refused it: it waits
    later: list = []
    lock_file = spool_module.lock_file

    def writer_first(handle, **how):  # runs the other process's step, then the lock
        if how.get("blocking", True) or later:
            return lock_file(handle, **how)
        later.append(None)
        if meanwhile == "delivered":
            first.delivered()
        else:
            later[0] = spool.hold(uri, "1", "p", 0, {"lr": 0.1}, finished(), 2.0)
        return lock_file(handle, **how)

    monkeypatch.setattr(spool_module, "lock_file", writer_first)
    assert list(spool.pending(uri)) == [], "the record the listing opened is gone"
    assert later, "the other step ran between the open and the lock"
    if meanwhile == "replaced":
        later[0].release()
        ((_, record),) = spool.pending(uri)
        assert (record.started, record.trial_result.status) == (2.0, Status.COMPLETE)


def test_a_tracking_servers_links_name_the_sweeps_run_and_no_command() -> None:
    """A tracking server's UI serves itself: no command; the parent run's own link.
    Mutation (issue 53): `Tracker.ui_links` 14 (the runs table for the parent run)."""
    from types import SimpleNamespace

    server = SimpleNamespace(uri="http://mlflow:5000")  # Tracker() would connect to it
    runs, parent, command = Tracker.ui_links(server, "1", "abc")  # type: ignore[arg-type]
    assert parent == "http://mlflow:5000/#/experiments/1/runs/abc?workflowType=machine_learning"
    assert runs == "http://mlflow:5000/#/experiments/1/runs?workflowType=machine_learning"
    assert command is None
