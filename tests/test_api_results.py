"""The Python API's results of one real sweep (a command trial per knob value): the trials,
their DataFrame, the knobs' effects and the figures; and the MLflow recorder in-process
(the parent run, its links, its end while MLflow is unreachable) and a data-parallel
trial's rank logs in its run."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import msexp
from msexp import api
from msexp.api.results import SweepResults
from msexp.errors import MsexpError, Suggestion
from msexp.execution.result import Status, TrialResult
from msexp.execution.subscribers import Subscriber
from msexp.keys import RunTag, StudyKey
from msexp.search.storage import storage_label
from msexp.search.study import open_study
from msexp.tracking import recorder
from msexp.tracking.delivery import flush_spool, record_trial
from msexp.tracking.recorder import MlflowRecorder
from msexp.tracking.runs import Tracker

# each trial prints its loss (0.1 * lr), a metric named like its knob (read by the sweep's
# regex: 10 * lr) and writes a checkpoint into its outputs folder
CODE = ("import sys; a = dict(w.lstrip('-').split('=', 1) for w in sys.argv[1:]); "
        "lr = float(a['lr']); open('net.ckpt', 'w').write('w'); "
        "print('epoch: 1 step: 1, loss is', 0.1 * lr); print('scaled lr', 10 * lr)")
SWEEP = {"name": "tiny",
         "experiment": {"command": f'python -c "{CODE}"',
                        "metrics": ["scaled lr (?P<lr>[0-9.]+)"]},
         "objective": {"metric": "train_loss", "direction": "minimize"},
         "fixed": {"seed": 7},
         "params": {"lr": [1.0, 2.0, 3.0]}}


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SweepResults]:
    """The sweep, run once for the module in a current directory of its own (its stores
    under mlruns/, which the recorder's tests share)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path_factory.mktemp("api_results"))
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        patch.delenv("MSEXP_STORAGE", raising=False)
        yield msexp.sweep(SWEEP, progress=False)


def test_the_trials_frame_has_each_knob_then_the_metrics_objective_first_and_a_knobs_name_renamed(
        swept: SweepResults) -> None:
    """One column per knob, the objective's metric first, then the rest by name; the metric
    printed under the knob's name is `metric_lr`, the others keep theirs. (issue 53
    survivors: trials.trials_frame 18, _metric_order 4, _metric_column 3)"""
    frame = swept.trials_dataframe()
    assert list(frame.columns) == [
        "number", "status", "lr", "seed", "value", "train_loss", "metric_lr", "wall_s",
        "feasible", "run_id", "folder", "checkpoint", "error"]
    assert list(frame["lr"]) == [1.0, 2.0, 3.0]
    assert list(frame["metric_lr"]) == [10.0, 20.0, 30.0]
    assert list(frame["train_loss"]) == pytest.approx([0.1, 0.2, 0.3])
    assert list(frame["status"]) == ["COMPLETE"] * 3


def test_a_trial_gives_the_seed_it_ran_with_and_the_checkpoint_it_kept(
        swept: SweepResults) -> None:
    """The seed fixed in the sweep (not swept) is each trial's, as MLflow logged it; the
    checkpoint the command wrote is the trial's. (issue 53 survivors: trials.trial_of 10,
    70)"""
    from tests.conftest import mlflow_client

    trials = swept.trials()
    assert [t.seed for t in trials] == [7, 7, 7]
    assert [t.params for t in trials] == [{"lr": 1.0}, {"lr": 2.0}, {"lr": 3.0}]
    client = mlflow_client()
    for trial in trials:
        assert client.get_run(trial.run_id).data.params["seed"] == str(trial.seed)
        assert trial.folder is not None and trial.checkpoint == (
            trial.folder / "outputs" / "net.ckpt")
        assert trial.checkpoint.read_text() == "w"
    assert swept.best_trial.checkpoint == trials[0].checkpoint
    assert list(swept.trials_dataframe()["seed"]) == [7, 7, 7]


def test_knob_effects_are_told_against_the_baseline_asked_for(swept: SweepResults) -> None:
    """(issue 53 survivor: results.SweepResults.knob_effects 4)"""
    assert swept.knob_effects().lines()[0].startswith("lr 1 -> 3: train_loss x3, lr x3")
    against_3 = swept.knob_effects({"lr": "3.0"}).lines()[0]
    assert against_3.startswith("lr 3 -> 1: train_loss x0.333, lr x0.333")
    with pytest.raises(MsexpError, match="--baseline momentum: not a swept knob of tiny; "
                                         "swept: lr"):
        swept.knob_effects({"momentum": "0.9"})


def test_the_figures_draw_each_knobs_effects_and_refuse_to_colour_by_no_knob(
        swept: SweepResults) -> None:
    """(issue 53 survivors: figures.report_figures 11, 28)"""
    from matplotlib.figure import Figure

    figures = swept.figures(color_by="lr")
    assert {"history", "effects_lr"} <= set(figures)
    assert all(isinstance(f, Figure) for f in figures.values())
    with pytest.raises(MsexpError, match="--color-by momentum: not a swept knob of tiny; "
                                         "swept: lr"):
        swept.figures(color_by="momentum")


def opened_recorder(name: str, watchers: list[Subscriber] | None = None,
                    tracking_uri: str | None = None) -> MlflowRecorder:
    """The recorder of a new study of a sweep `name` (a command of one knob), once MLflow
    opened."""
    spec = api.sources.load({**SWEEP, "name": name})
    study, created = open_study(spec, None)
    assert created
    made = MlflowRecorder(spec, study, created, tracking_uri, storage_label(None),
                          Suggestion(("report",), study=name), watchers or [])
    made.opened.result(timeout=60)
    return made


def test_a_new_studys_recorder_makes_its_parent_run_at_once_and_links_to_it(
        swept: SweepResults, monkeypatch: pytest.MonkeyPatch) -> None:
    """The study's creator waits for no other's parent run: it makes its own, with the
    sweep's tags and search space, and the parent's UI link names it. (issue 53
    survivors: recorder.MlflowRecorder._parent_run 21, 27, ui_links 3)"""
    waited: list[float] = []
    wait_until = recorder.wait_until

    def timed(*args: object, **kwargs: object) -> bool:
        start = time.monotonic()
        try:
            return wait_until(*args, **kwargs)
        finally:
            waited.append(time.monotonic() - start)

    monkeypatch.setattr(recorder, "wait_until", timed)
    made = opened_recorder("parent")
    assert len(waited) == 1 and waited[0] < 0.5  # a joining process waits up to 30 s
    tracker, experiment_id, parent_id = made.opened.result()
    assert made.study.user_attrs[StudyKey.PARENT_RUN] == parent_id
    (parent,) = tracker.client.search_runs([experiment_id], f"tags.`{RunTag.ROLE}` = 'sweep'")
    assert parent.info.run_id == parent_id and parent.info.run_name == "parent"
    tags = parent.data.tags
    assert (tags["msexp.sweep"], tags["msexp.method"], tags["msexp.storage"]) == (
        "parent", "grid", storage_label(None))
    assert tags["msexp.experiment"] == made.spec.experiment.ref
    assert parent.data.params["lr"] == "1.0, 2.0, 3.0" and parent.data.params["seed"] == "7"
    runs, parent_link, serve = made.ui_links()
    assert parent_link == (f"http://127.0.0.1:5000/#/experiments/{experiment_id}/runs/"
                           f"{parent_id}?workflowType=machine_learning")
    assert runs == (f"http://127.0.0.1:5000/#/experiments/{experiment_id}/runs"
                    "?workflowType=machine_learning") and serve == "msexp ui"
    made.close("FINISHED")
    assert tracker.client.get_run(parent_id).info.status == "FINISHED"


class NoScreen(Subscriber):
    def on_mlflow_open(self, runs: str, parent: str, serve: str | None) -> None:
        raise RuntimeError("no screen")


def test_ui_links_a_watcher_cannot_show_are_logged_with_the_errors_type(
        swept: SweepResults, caplog: pytest.LogCaptureFixture) -> None:
    """The sweep goes on without its links; the log says why. (issue 53 survivor:
    recorder.MlflowRecorder._tell_links 2)"""
    caplog.set_level(logging.DEBUG, logger="msexp")
    made = opened_recorder("links", [NoScreen()])
    assert "UI links not shown (RuntimeError: no screen)" in caplog.messages
    made.close("FINISHED")


def test_mlflow_unreachable_at_the_sweeps_end_says_how_to_sync_its_end_later(
        swept: SweepResults, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The end waits in the spool and the warning line gives the command that delivers it,
    to the store the sweep used. (issue 53 survivor: recorder.MlflowRecorder.close 35)"""
    from mlflow import MlflowClient

    from msexp.api.quiet import route_library_logs

    route_library_logs()  # msexp's warnings on stderr, as the Python API shows them
    uri = f"sqlite:///{Path('mlruns/mlflow.db').resolve()}"  # not the default's spelling
    made = opened_recorder("unreachable", tracking_uri=uri)
    tracker, _, parent_id = made.opened.result()
    reachable = tracker.client
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    monkeypatch.setattr(tracker, "client", MlflowClient("http://127.0.0.1:9"))  # a closed port
    capsys.readouterr()
    made.close("FINISHED")
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("MLflow unreachable at the end of the sweep (")
    assert line.endswith(f"); when it is back, run: msexp sync --tracking-uri {uri} && "
                         "msexp report --study unreachable")
    monkeypatch.setattr(tracker, "client", reachable)
    assert reachable.get_run(parent_id).info.status == "RUNNING"
    flush_spool(tracker)  # what `msexp sync` does
    assert reachable.get_run(parent_id).info.status == "FINISHED"


def test_a_data_parallel_trials_rank_logs_are_logged_under_their_folders_name(
        swept: SweepResults, tmp_path: Path) -> None:
    """(issue 53 survivor: runs.Tracker.finish_trial 47)"""
    tracker = Tracker()
    experiment_id = tracker.experiment_id("ranks")
    parent = tracker.parent_run(experiment_id, "ranks", {}, tmp_path / "none.yaml")
    ranks = tmp_path / "trial.ranks"
    ranks.mkdir()
    for rank in (0, 1):
        (ranks / f"rank-{rank}.log").write_text(f"rank {rank}\n")
    result = TrialResult(Status.COMPLETE, {"eval_accuracy": 0.5}, wall_s=1.0,
                         rank_logs=ranks)
    run_id = record_trial(tracker, experiment_id, parent, 0, {}, result, time.time())
    assert run_id is not None
    assert [a.path for a in tracker.client.list_artifacts(run_id)] == ["trial.ranks"]
    assert [a.path for a in tracker.client.list_artifacts(run_id, "trial.ranks")] == [
        "trial.ranks/rank-0.log", "trial.ranks/rank-1.log"]


class Links(Subscriber):
    def __init__(self) -> None:
        self.shown: list[tuple[str, str, str | None]] = []

    def on_mlflow_open(self, runs: str, parent: str, serve: str | None) -> None:
        self.shown.append((runs, parent, serve))


def test_the_links_shown_as_mlflow_opens_serve_the_store_for_the_sweep_file(
        swept: SweepResults) -> None:
    """The sweep's first lines (a worker's log, the bar) name the file in the command that
    serves the store, `msexp ui FILE`, which opens that sweep's runs (issue 53 fresh late:
    recorder.MlflowRecorder._open 24)."""
    import yaml

    path = Path("linked sweep.yaml")
    path.write_text(yaml.safe_dump({**SWEEP, "name": "linked"}))
    spec = api.sources.load(path)
    study, created = open_study(spec, None)
    links = Links()
    made = MlflowRecorder(spec, study, created, None, storage_label(None),
                          Suggestion(("report",), study="linked"), [links])
    made.opened.result(timeout=60)
    ((runs, parent, serve),) = links.shown
    assert serve == "msexp ui 'linked sweep.yaml'"
    assert (runs, parent, serve) == made.ui_links()
    made.close("FINISHED")
