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
