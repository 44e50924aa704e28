"""What a sweep shows while it runs: the resuming line, the best on its bar from the
start, and a time left computed from the trials it finished."""

from __future__ import annotations

from types import SimpleNamespace

from rich.console import Console
from rich.progress import Progress

from msexp.cli.progress import LineProgress, Remaining, SweepProgress

SPEC = SimpleNamespace(name="accum", objectives=[SimpleNamespace(metric="eval_accuracy")])


def test_the_time_left_comes_from_the_trials_finished_in_this_run() -> None:
    """Trials of two minutes, five of eight finished before: after one more, 2 left at its
    pace. Mutation: Rich's TimeRemainingColumn (its speed forgets samples older than 30 s:
    `-:--:--` for the whole sweep)."""
    now = [0.0]
    bar = Progress(Remaining(), get_time=lambda: now[0], console=Console(file=None))
    task = bar.add_task("accum", total=8, completed=5, done_before=5)
    column = bar.columns[0]
    assert column.render(bar.tasks[task]).plain == "-:--:--"
    now[0] = 120.0
    bar.update(task, advance=1)
    now[0] = 125.0
    assert column.render(bar.tasks[task]).plain == "0:04:10"  # 125 s a trial, 2 to go
    bar.update(task, advance=2)
    assert column.render(bar.tasks[task]).plain == "0:00:00"


def test_a_resumed_sweep_says_so_and_shows_its_best_at_once() -> None:
    """Mutation: the bar starts at `best -` (the best of the earlier run not looked up)."""
    screen = Console(width=120, force_terminal=False)
    with screen.capture() as captured:
        progress = SweepProgress(SPEC, screen)
        progress.on_sweep_start(8, 8, "eval_accuracy=0.9722 (#3)")
    assert captured.get() == ("resuming accum: 8 of 8 trials already finished; best "
                              "eval_accuracy=0.9722 (#3)\n")
    assert progress.bar.tasks[0].fields["info"] == "best eval_accuracy=0.9722 (#3)"


def test_a_fresh_sweep_says_nothing_of_resuming(capsys) -> None:
    screen = Console(width=120, force_terminal=False)
    with screen.capture() as captured:
        SweepProgress(SPEC, screen).on_sweep_start(8, 0)
    assert captured.get() == ""
    LineProgress(SPEC).on_sweep_start(8, 0)
    LineProgress(SPEC).on_sweep_start(8, 5, "eval_accuracy=0.5 (#1)")
    assert capsys.readouterr().out.splitlines() == [
        "accum: 0/8 trials done",
        "resuming accum: 5 of 8 trials already finished; best eval_accuracy=0.5 (#1)"]


def test_the_bar_shows_each_trials_epoch_and_loss_and_its_end_says_what_split_the_batch() -> None:
    """A trial's row: its epoch and last loss (the loss only where the trial reports one),
    the time left from this run's trials; its end: its line and, the first time a trial
    reports BatchNorm layers in a split batch, the warning. Mutations (issue 53):
    `SweepProgress.__init__` 23 (the info column's text wrapped), 31 (no notice: the end
    raises), `on_sweep_start` 20 (`done_before` None: the time left raises),
    `on_trial_epoch` 9, 12 (the loss's text), `on_trial_end` 31 (the warning printed as an
    empty line)."""
    import io
    from pathlib import Path

    from msexp.execution import Epoch, Status, TrialInfo, TrialResult
    from msexp.spec import parse_spec
    from msexp.training.records import BatchStatistics

    spec = parse_spec("name: k\nexperiment: lenet_digits\nparams:\n  micro_size: [1, 2]\n",
                      "k.yaml", Path("k.yaml"))
    metric = spec.objectives[0].metric
    screen = Console(file=io.StringIO(), width=200, force_terminal=False)
    progress = SweepProgress(spec, screen)
    progress.on_sweep_start(4, 1, "-")
    trial = TrialInfo(2, "#2 micro_size=2", {"epochs": 3, "micro_size": 2}, {}, 0.0)
    progress.on_trial_start(trial)

    def shown() -> list[str]:
        table = Console(file=io.StringIO(), width=200, force_terminal=False)
        with table.capture() as captured:
            table.print(progress.bar.make_tasks_table(progress.bar.tasks))
        return [" ".join(line.split()) for line in captured.get().splitlines()]

    progress.on_trial_epoch(trial, Epoch(1, 10, 1.0, {"train_loss": 0.123456}))
    assert shown()[1].startswith("#2 micro_size=2") and " 1/3 epoch 1, loss 0.1235 " in shown()[1]
    assert shown()[0].split()[-1] == "-:--:--"
    progress.on_trial_epoch(trial, Epoch(2, 20, 2.0, {}))
    assert " 2/3 epoch 2 " in shown()[1]
    split = BatchStatistics(layers=1, micro_batch=16, batch=32)
    with screen.capture() as captured:
        progress.on_trial_end(trial, TrialResult(Status.COMPLETE, metrics={metric: 0.5},
                                                 wall_s=3.0, batch_statistics=split))
        progress.on_trial_end(TrialInfo(3, "#3", {}, {}, 0.0),
                              TrialResult(Status.COMPLETE, metrics={metric: 0.25},
                                          batch_statistics=split))
    ended = captured.get().splitlines()
    assert ended[0] == f"trial 2: COMPLETE {metric}=0.5 (3.0 s)"
    assert ended[1].startswith("k.yaml: batch statistics: the network has 1 BatchNorm layer(s)")
    assert ended[2:] == [f"trial 3: COMPLETE {metric}=0.25 (0.0 s)"], "said once"
    assert shown()[0].split()[-1] != "-:--:--"


def test_the_mlflow_links_are_printed_as_plain_text_on_a_color_terminal(monkeypatch) -> None:
    """A terminal shows the links as they are, copyable, with no color codes inside.
    Mutations (issue 53): `SweepProgress.on_mlflow_open` 6 and `LineProgress.on_mlflow_open`
    11 (Rich's highlighting on: escape codes around the URL's parts)."""
    import io

    from msexp.cli import progress

    def terminal() -> Console:
        return Console(file=io.StringIO(), width=200, force_terminal=True,
                       color_system="truecolor")

    links = ["serve the store:  msexp ui --port 5001",
             "compare trials:   http://127.0.0.1:5001/#/experiments/1/runs"]
    screen = terminal()
    SweepProgress(SPEC, screen).on_mlflow_open(
        "http://127.0.0.1:5001/#/experiments/1/runs", "p", "msexp ui --port 5001")
    assert screen.file.getvalue().splitlines() == links
    lines = terminal()
    monkeypatch.setattr(progress, "console", lines)
    LineProgress(SPEC).on_mlflow_open("http://127.0.0.1:5001/#/experiments/1/runs", "p",
                                      "msexp ui --port 5001")
    assert lines.file.getvalue().splitlines() == links


def test_a_sweeps_warnings_are_printed_as_plain_text_on_a_color_terminal(monkeypatch) -> None:
    """What the sweep warns of while it runs (a path, a number, a URL) on stderr as it is.
    Mutation (issue 53): `sweeps._run` 25 (Rich's highlighting on)."""
    import io

    from msexp.cli import sweeps

    screen = Console(file=io.StringIO(), width=200, force_terminal=True,
                     color_system="truecolor")
    monkeypatch.setattr(sweeps, "err_console", screen)
    line = "trial 3: MLflow at http://127.0.0.1:5001 unreachable; kept in mlruns/spool (2 runs)"

    def run_in_slots(*args):
        args[-1](line)
        return "outcome"

    monkeypatch.setattr(sweeps, "run_in_slots", run_in_slots)
    assert sweeps._run(SPEC, 1, LineProgress(SPEC), None, None, None) == "outcome"
    assert screen.file.getvalue() == line + "\n"


def test_a_trials_end_says_its_status_then_its_error_or_objective_then_its_time() -> None:
    from msexp.execution.protocol import Epoch
    from msexp.execution.result import Status, TrialResult

    assert TrialResult(Status.COMPLETE, {"acc": 0.91234}, wall_s=3.04).ended("acc") == (
        "COMPLETE acc=0.9123 (3.0 s)")
    pruned = TrialResult(Status.PRUNED, epochs=[Epoch(1, 1, 0.1, {"acc": 0.5})], wall_s=1)
    assert pruned.ended("acc") == "PRUNED acc=0.5 (1.0 s)"  # its last epoch's
    assert TrialResult(Status.FAILED, {"acc": 0.5}, error="boom", wall_s=2).ended("acc") == (
        "FAILED boom (2.0 s)")
    assert TrialResult(Status.COMPLETE, {}, wall_s=0).ended("acc") == "COMPLETE (0.0 s)"


def test_the_time_left_reads_hours_minutes_seconds_and_waits_for_time_to_pass() -> None:
    """A trial finished in no measured time gives no estimate (not 0:00:00); 100 trials
    left at 37.25 s each read 1:02:05. (issue 53 fresh: Remaining.render 18, 43)"""
    now = [0.0]
    bar = Progress(Remaining(), get_time=lambda: now[0], console=Console(file=None))
    task = bar.add_task("accum", total=101, completed=0, done_before=0)
    bar.update(task, advance=1)
    column = bar.columns[0]
    assert column.render(bar.tasks[task]).plain == "-:--:--"
    now[0] = 37.25
    assert column.render(bar.tasks[task]).plain == "1:02:05"


def test_the_bar_counts_the_trials_done_of_the_sweeps_total() -> None:
    """(issue 53 fresh: SweepProgress.on_sweep_start 22)"""
    screen = Console(width=160, force_terminal=False)
    progress = SweepProgress(SPEC, screen)
    progress.on_sweep_start(8, 2, "eval_accuracy=0.9 (#1)")
    with screen.capture() as captured:
        screen.print(progress.bar.get_renderable())
    assert "2/8 best eval_accuracy=0.9 (#1)" in captured.get(), captured.get()
