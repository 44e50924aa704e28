"""Progress while a sweep runs: a bar with a row per running trial (`msexp sweep`), or a
line per trial (`msexp worker`); each is a `Subscriber`, the sweep's watcher."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from msexp.cli.options import console
from msexp.cli.render import link_lines
from msexp.console.interrupts import stopping_line
from msexp.execution.subscribers import Subscriber, TrialInfo
from msexp.spec.checks import batch_statistics_warning

if TYPE_CHECKING:
    from msexp.execution import Epoch, TrialResult
    from msexp.spec import SweepSpec


class SplitNotice:
    """The sweep's one line on its network's BatchNorm and Dropout layers, where its
    trials split the batch: said when the first trial that reports them ends."""

    def __init__(self, spec: SweepSpec):
        self.spec, self.told = spec, False

    def line(self, result: TrialResult) -> str | None:
        stats = result.batch_statistics
        if self.told or stats is None:
            return None
        self.told = True
        return batch_statistics_warning(str(self.spec.path), stats.layers, self.spec.space,
                                        stats.dropout, stats.seeded)


def stopping(running: list[int], opening: bool, hurried: bool) -> str:
    """The line a stop signal gets at once: the first names the trials that go back to
    the queue (and says where MLflow still opens), a second says the sweep waits for
    MLflow no more."""
    if hurried:
        return "stopping now, without waiting for MLflow (the next run records what waits)"
    line = stopping_line(running)
    return f"{line}; MLflow is still opening (Ctrl-C again not to wait)" if opening else line


def resuming(name: str, total: int, done: int, best: str) -> str:
    """The line that starts a resumed sweep."""
    return f"resuming {name}: {done} of {total} trials already finished; best {best}"


class Remaining(ProgressColumn):
    """The time left, from the trials (or epochs) finished since the bar started: Rich's own
    column forgets a speed after 30 s, so trials longer than that never showed one."""

    def render(self, task: Task) -> Text:
        finished = task.completed - task.fields.get("done_before", 0)
        if task.finished:
            return Text("0:00:00", style="progress.remaining")
        if task.total is None or not task.elapsed or finished <= 0:
            return Text("-:--:--", style="progress.remaining")
        left = int(task.elapsed * (task.total - task.completed) / finished)
        return Text(f"{left // 3600}:{left // 60 % 60:02d}:{left % 60:02d}",
                    style="progress.remaining")


class SweepProgress(Subscriber):
    """Rich progress bar: trials done out of total and the best value so far."""

    def __init__(self, spec: SweepSpec, screen: Console | None = None):
        self.spec = spec
        self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                            MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                            TimeElapsedColumn(), TextColumn("eta"), Remaining(),
                            console=screen or console)
        self.task: TaskID | None = None
        self.running: dict[int, TaskID] = {}  # trial number -> its row
        self.notice = SplitNotice(spec)

    def __enter__(self) -> SweepProgress:
        self.bar.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.bar.__exit__(kind, error, trace)

    def on_sweep_start(self, total: int, done: int, best: str = "-") -> None:
        if done:
            self.bar.console.print(resuming(self.spec.name, total, done, best), highlight=False)
        self.task = self.bar.add_task(self.spec.name, total=total, completed=done,
                                      info=f"best {best}", done_before=done)

    def on_mlflow_open(self, runs: str, parent: str, serve: str | None) -> None:
        for line in link_lines(runs, serve):
            self.bar.console.print(line, highlight=False, soft_wrap=True)

    def on_sweep_stopping(self, running: list[int], opening: bool, hurried: bool) -> None:
        self.bar.console.print(stopping(running, opening, hurried), markup=False, highlight=False)

    def on_trial_start(self, trial: TrialInfo) -> None:
        """A row per running trial: its params, epoch of epochs, last loss, ETA."""
        self.running[trial.number] = self.bar.add_task(
            f"  {escape(trial.name)}", total=trial.params.get("epochs") or None,
            info="starting")

    def on_trial_epoch(self, trial: TrialInfo, epoch: Epoch) -> None:
        row = self.running.get(trial.number)
        if row is not None:
            loss = epoch.metrics.get("train_loss")
            info = f"epoch {epoch.epoch}" + (f", loss {loss:.4g}" if loss is not None else "")
            self.bar.update(row, completed=epoch.epoch, info=info)

    def on_trial_end(self, trial: TrialInfo, result: TrialResult) -> None:
        row = self.running.pop(trial.number, None)
        if row is not None:
            self.bar.remove_task(row)
        self.bar.console.print(f"trial {trial.number}: "
                               f"{result.ended(self.spec.objectives[0].metric)}",
                               markup=False, highlight=False)
        notice = self.notice.line(result)
        if notice:
            self.bar.console.print(notice, markup=False, highlight=False, soft_wrap=True)
        if self.task is not None:  # the sweep's row, made as it starts
            self.bar.update(self.task, advance=1, info=f"best {trial.best}")


class LineProgress(Subscriber):
    """One plain line per trial, for logs of workers that no one watches."""

    def __init__(self, spec: SweepSpec):
        self.spec = spec
        self.notice = SplitNotice(spec)

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        """Nothing to end: each line is printed whole."""

    def on_sweep_start(self, total: int, done: int, best: str = "-") -> None:
        console.print(resuming(self.spec.name, total, done, best) if done else
                      f"{self.spec.name}: 0/{total} trials done", highlight=False)

    def on_mlflow_open(self, runs: str, parent: str, serve: str | None) -> None:
        for line in link_lines(runs, serve):
            console.print(line, highlight=False, soft_wrap=True)

    def on_sweep_stopping(self, running: list[int], opening: bool, hurried: bool) -> None:
        console.print(stopping(running, opening, hurried), markup=False, highlight=False)

    def on_trial_end(self, trial: TrialInfo, result: TrialResult) -> None:
        console.print(f"trial {trial.number}: {result.status.value} ({result.wall_s:.1f} s); "
                      f"best {trial.best}", markup=False, highlight=False)
        notice = self.notice.line(result)
        if notice:
            console.print(notice, markup=False, highlight=False, soft_wrap=True)
