"""What a sweep says as a stop comes and as it ends stopped: the stopping line (the
trials that go back to the queue, MLflow still opening, a second stop), a worker's and
the Python API's line per trial, the study's table of a sweep stopped before it could show
it, and the study options its printed commands carry. Events are driven in-process; a
stopped study is a real journal store's."""

from __future__ import annotations

import io
import signal
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import typer
from rich.console import Console

from msexp.cli import progress
from msexp.cli.progress import LineProgress, SweepProgress
from msexp.console import interrupts
from msexp.execution import Status, TrialInfo, TrialResult
from msexp.spec import parse_spec
from msexp.training.records import BatchStatistics
from tests.conftest import write

SPEC = parse_spec("name: accum\nexperiment: lenet_digits\nparams:\n  micro_size: [1, 2]\n",
                  "accum.yaml", Path("accum.yaml"))
STOPS = [
    (([3], False, False), "stopping: trial 3 will resume from its last checkpoint"),
    (([1, 4, 6], True, False), "stopping: trials 1, 4 and 6 will resume from their last "
                               "checkpoints; MLflow is still opening (Ctrl-C again not to "
                               "wait)"),
    (([], False, False), "stopping: no trial running"),
    (([2], True, True), "stopping now, without waiting for MLflow (the next run records "
                        "what waits)"),
]


def terminal() -> Console:
    """A color terminal: any markup or highlighting would show as escape codes."""
    return Console(file=io.StringIO(), width=200, force_terminal=True,
                   color_system="truecolor")


def test_the_bar_says_at_once_which_trials_a_stop_sends_back_and_whether_mlflow_waits(
        ) -> None:
    """The first stop names the running trials (they resume from their checkpoints) and
    says MLflow is still opening where it is; the second stops without waiting for it;
    plain text on a color terminal. (survivors: cli.progress.stopping,
    SweepProgress.on_sweep_stopping)"""
    screen = terminal()
    bar = SweepProgress(SPEC, screen)
    for args, _ in STOPS:
        bar.on_sweep_stopping(*args)
    assert screen.file.getvalue().splitlines() == [line for _, line in STOPS]


def test_a_workers_lines_say_the_stop_and_each_trials_end_and_the_best(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's log: the stopping lines as the bar's; a line per trial with its status,
    time and the study's best so far; the batch statistics warning once, after the first
    trial that reports a split batch. (survivors: cli.progress.LineProgress.
    on_sweep_stopping, on_trial_end)"""
    lines = terminal()
    monkeypatch.setattr(progress, "console", lines)
    worker = LineProgress(SPEC)
    for args, _ in STOPS:
        worker.on_sweep_stopping(*args)
    split = BatchStatistics(layers=1, micro_batch=16, batch=32)
    worker.on_trial_end(TrialInfo(2, "#2 micro_size=2", {}, {}, 0.0, best="eval_accuracy=0.5 (#2)"),
                        TrialResult(Status.COMPLETE, metrics={"eval_accuracy": 0.5},
                                    wall_s=3.04, batch_statistics=split))
    worker.on_trial_end(TrialInfo(3, "#3 micro_size=1", {}, {}, 0.0, best="eval_accuracy=0.5 (#2)"),
                        TrialResult(Status.FAILED, error="exit code 1", wall_s=12.0,
                                    batch_statistics=split))
    shown = lines.file.getvalue().splitlines()
    assert shown[:4] == [line for _, line in STOPS]
    assert shown[4] == "trial 2: COMPLETE (3.0 s); best eval_accuracy=0.5 (#2)"
    assert shown[5].startswith("accum.yaml: batch statistics: the network has 1 BatchNorm "
                               "layer(s)"), shown
    assert shown[6:] == ["trial 3: FAILED (12.0 s); best eval_accuracy=0.5 (#2)"], "said once"


def test_the_python_apis_lines_say_the_start_each_trial_and_a_stop(
        capfd: pytest.CaptureFixture[str]) -> None:
    """A notebook's cell: the start (or the resume), the runs table's link, per trial its
    status, objective (its last epoch's where it reported none at the end; the error of
    one that failed), time and the best; a stop's line names the running trials; `shown`
    False says nothing. (survivors: api.progress.Lines)"""
    from msexp.api.progress import Lines
    from msexp.execution import Epoch

    for shown in (True, False):
        lines = Lines(SPEC, shown)
        with lines:
            lines.on_sweep_start(4, 0)
            lines.on_sweep_start(4, 3, "eval_accuracy=0.9 (#1)")
            lines.on_mlflow_open("http://127.0.0.1:5001/#/experiments/1/runs", "p", "msexp ui")
            lines.on_trial_end(TrialInfo(0, "#0", {}, {}, 0.0, best="eval_accuracy=0.9 (#0)"),
                               TrialResult(Status.COMPLETE, metrics={"eval_accuracy": 0.91234},
                                           wall_s=2.26))
            lines.on_trial_end(TrialInfo(1, "#1", {}, {}, 0.0, best="eval_accuracy=0.9 (#0)"),
                               TrialResult(Status.PRUNED, wall_s=1.0, epochs=[
                                   Epoch(1, 10, 1.0, {"eval_accuracy": 0.5})]))
            lines.on_trial_end(TrialInfo(2, "#2", {}, {}, 0.0, best="eval_accuracy=0.9 (#0)"),
                               TrialResult(Status.FAILED, metrics={"eval_accuracy": 0.7},
                                           error="exit code 1", wall_s=0.5))
            lines.on_sweep_stopping([2, 3], True, False)
        out = capfd.readouterr().out.splitlines()
        assert out == ([
            "accum: 4 trials",
            "resuming accum: 3 of 4 trials already finished; best eval_accuracy=0.9 (#1)",
            "compare trials: http://127.0.0.1:5001/#/experiments/1/runs",
            "trial 0: COMPLETE eval_accuracy=0.9123 (2.3 s); best eval_accuracy=0.9 (#0)",
            "trial 1: PRUNED eval_accuracy=0.5 (1.0 s); best eval_accuracy=0.9 (#0)",
            "trial 2: FAILED exit code 1 (0.5 s); best eval_accuracy=0.9 (#0)",
            "stopping: trials 2 and 3 will resume from their last checkpoints",
        ] if shown else [])


@pytest.fixture(autouse=True)
def stops_of_this_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stops a test's Ctrl-C leaves are forgotten after it."""
    monkeypatch.setattr(interrupts, "received", [])


def _stopped(file: Path, study: str | None = None, storage: str | None = None) -> int:
    """A Ctrl-C that ends `msexp sweep FILE` before it could show its study: the exit
    code (`sweeps._stops`, which prints the study's table and the resume line)."""
    from msexp.cli.sweeps import _stops

    with pytest.raises(typer.Exit) as ended, _stops(file, study, storage):
        signal.raise_signal(signal.SIGINT)
    return ended.value.exit_code


def test_a_sweep_stopped_before_its_store_exists_says_no_trial_finished(
        workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """(survivors: cli.sweeps._stopped_table: never swept)"""
    write(workdir / "accum.yaml", "name: accum\nexperiment: lenet_digits\n")
    assert _stopped(workdir / "accum.yaml") == 130
    out = capsys.readouterr()
    assert out.out == "no trial has finished yet\n"
    assert out.err.startswith("interrupted: run the same command again to resume")


def test_a_stopped_sweep_shows_its_studys_table_or_says_none_finished(
        workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """In the storage and study given (--storage, --study): a study whose trials are still
    running, its name and that none finished; the sweep's own, whose trial finished, its
    trials table with that trial's row. (survivors: cli.sweeps._stopped_table)"""
    from msexp.search.storage import open_storage

    write(workdir / "accum.yaml", "name: accum\nexperiment: lenet_digits\n")
    storage = str(workdir / "runs.journal")
    optuna.create_study(study_name="accum-try", storage=open_storage(storage)).ask()
    sweep = optuna.create_study(study_name="accum", storage=open_storage(storage))
    sweep.add_trial(optuna.trial.create_trial(
        params={"micro_size": 2}, value=0.75,
        distributions={"micro_size": optuna.distributions.CategoricalDistribution([1, 2])}))
    assert _stopped(workdir / "accum.yaml", "accum-try", storage) == 130
    assert capsys.readouterr().out == "accum-try: no trial has finished yet\n"
    assert _stopped(workdir / "accum.yaml", None, storage) == 130
    out = capsys.readouterr().out
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines()]
    assert out.splitlines()[0].strip() == "accum: trials", out
    assert ["0", "COMPLETE", "2"] in cells, out


@pytest.mark.parametrize(("study", "storage", "options"), [
    ("accum", "sweeps.journal", " --study accum-v2 --storage sweeps.journal"),
    (None, "sweeps.journal", " --storage sweeps.journal"),
    (None, None, ""),
])
def test_a_sweeps_printed_commands_carry_the_study_version_that_ran_only_where_one_was_given(
        capsys: pytest.CaptureFixture[str], study: str | None, storage: str | None,
        options: str) -> None:
    """--study NAME ran its newest version, accum-v2: the rerun command names that version;
    without --study the commands find the newest version themselves. (survivors:
    cli.sweeps._where)"""
    from msexp.cli.sweeps import _finish, _where

    ran = optuna.create_study(study_name="accum-v2")
    ran.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL))
    ran.add_trial(optuna.trial.create_trial(value=0.5))
    outcome = SimpleNamespace(study=ran, fail_fast=None)
    _finish(outcome, Path("accum.yaml"), _where(outcome, study, storage))
    assert capsys.readouterr().err == (
        "1 trial(s) failed or timed out; after fixing the experiment: msexp sweep "
        f"accum.yaml --retry-failed{options}\n")
