"""How commands show things: value cells, tables of trials, progress while a sweep runs."""

from __future__ import annotations

import json
import math
from typing import Any

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from msexp.cli.options import console
from msexp.execution.subscribers import Subscriber, TrialInfo
from msexp.interrupts import stopping_line
from msexp.keys import StudyKey, TrialKey
from msexp.knobs import value_text as cell
from msexp.secrets.redaction import redact
from msexp.spec.checks import batch_statistics_warning


def kv(values: dict[str, Any], exclude: Any = ()) -> str:
    """`key=value, ...` of `values`, leaving out `exclude`."""
    return ", ".join(f"{k}={cell(v)}" for k, v in values.items() if k not in exclude)


def when_text(when: Any) -> str:
    """A knob's or param's condition, e.g. `loss_scale in ['dynamic']`."""
    return ", ".join(f"{k} in {list(v)}" for k, v in (when or {}).items())


SHOWN_METRICS = ("eval_accuracy", "samples_per_s", "train_mem_mb", "peak_mem_mb", "wall_s")
TABLE_ROWS = 200  # the trials table's newest rows; `msexp report --json` lists every trial


def print_json(document: Any) -> None:
    """One JSON document on stdout, for scripts: NaN and infinities as null (JSON has
    none), other values JSON lacks as text."""
    typer.echo(json.dumps(_finite(document), indent=2, default=str, allow_nan=False))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def finished_trials(study: Any) -> list[dict[str, Any]]:
    """Each finished trial of a study: number, status, swept params, metrics, feasibility."""
    return [{"number": t.number, "status": t.user_attrs.get(TrialKey.STATUS, t.state.name),
             "params": t.params, "metrics": t.user_attrs.get(TrialKey.METRICS, {}),
             "feasible": t.user_attrs.get(TrialKey.FEASIBLE)}
            for t in study.get_trials(deepcopy=False) if t.state.is_finished()]


def trials_table(study: Any) -> None:
    """Print the newest `TABLE_ROWS` finished trials of a study: status, swept params,
    the objectives and those of the main metrics that a trial reported (a script's own
    loop reports none); a line counts those left out. On a narrow terminal the status,
    swept knobs and objectives stay whole; the other metrics that do not fit are left out,
    and a line names them."""
    names = study.user_attrs.get(StudyKey.OBJECTIVES, [])
    every = finished_trials(study)
    rows = every[-TABLE_ROWS:]
    reported = {name for row in rows for name in row["metrics"]}
    others = [m for m in SHOWN_METRICS if m not in names and m in reported]
    swept = sorted({k for row in rows for k in row["params"]})
    cells = {"#": [str(row["number"]) for row in rows], "status": [row["status"] for row in rows]}
    cells.update({n: [cell(row["params"].get(n, "-")) for row in rows] for n in swept})
    cells.update({c: [cell(row["metrics"].get(c, "-")) for row in rows] for c in [*names, *others]})
    if any(row["feasible"] is not None for row in rows):
        others.append("feasible")
        cells["feasible"] = [_yes_no(row["feasible"]) for row in rows]
    kept = ["#", "status", *swept, *names]
    shown = _fitting(cells, kept, others, console.size.width)
    table = Table(title=f"{study.study_name}: trials")
    for name in [*kept, *shown]:
        table.add_column(name, justify="left" if name == "status" else "right",
                         no_wrap=name in kept, min_width=_width(name, cells[name]))
    for i in range(len(rows)):
        table.add_row(*(cells[name][i] for name in [*kept, *shown]))
    console.print(table)
    left_out = [name for name in others if name not in shown]
    if left_out:
        console.print(f"not shown at {console.size.width} columns: {', '.join(left_out)} "
                      "(`msexp report --json` has every metric)", highlight=False)
    if len(every) > len(rows):
        console.print(f"{len(every) - len(rows)} earlier trials not shown; `msexp report "
                      "--json` lists every trial", highlight=False)


def _width(name: str, values: list[str]) -> int:
    return max([len(name), *map(len, values)])


def _fitting(cells: dict[str, list[str]], kept: list[str], others: list[str], width: int
             ) -> list[str]:
    """Those of `others`, in order, that fit `width` columns beside the `kept` ones (a
    column takes its widest cell, its padding and a rule)."""
    used = 1 + sum(_width(name, cells[name]) + 3 for name in kept)
    shown = []
    for name in others:
        used += _width(name, cells[name]) + 3
        if used > width:
            break
        shown.append(name)
    return shown


def missing_objectives(study: Any) -> str | None:
    """One line naming the objectives that trials which ran to the end did not report."""
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        for name in t.user_attrs.get(TrialKey.MISSING, []):
            counts[name] = counts.get(name, 0) + 1
    if not counts:
        return None
    names = ", ".join(f"{name} (missing in {n} trial{'s' * (n > 1)})"
                      for name, n in counts.items())
    return (f"objective not reported by trials that ran to the end: {names}; Optuna "
            "failed those trials, so none of them can be best")


def _yes_no(value: Any) -> str:
    return "-" if value is None else "yes" if value else "no"


def summary(outcome: Any) -> None:
    """The trials table and the MLflow links that end a sweep."""
    trials_table(outcome.study)
    missing = missing_objectives(outcome.study)
    if missing:
        console.print(missing, markup=False, highlight=False)
    if not outcome.recorder.ready() or outcome.recorder.failure() is not None:
        return  # a second stop left MLflow opening: no links to give
    runs, parent, command = outcome.recorder.ui_links()
    for line in link_lines(runs, command):
        console.print(line, highlight=False, soft_wrap=True)
    console.print(f"sweep run:        {redact(parent)}", highlight=False, soft_wrap=True)


def link_lines(runs: str, serve: str | None) -> list[str]:
    """The command that serves the MLflow store (none for a server) and the runs table's
    link: what a sweep prints as it starts and as it ends."""
    return [*([f"serve the store:  {serve}"] if serve else []),
            f"compare trials:   {redact(runs)}"]


class SplitNotice:
    """The sweep's one line on its network's BatchNorm and Dropout layers, where its
    trials split the batch: said when the first trial that reports them ends."""

    def __init__(self, spec: Any):
        self.spec, self.told = spec, False

    def line(self, result: Any) -> str | None:
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

    def __init__(self, spec: Any, screen: Any = None):
        self.spec = spec
        self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                            MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                            TimeElapsedColumn(), TextColumn("eta"), Remaining(),
                            console=screen or console)
        self.task: Any = None
        self.running: dict[int, Any] = {}  # trial number -> its row
        self.notice = SplitNotice(spec)

    def __enter__(self) -> SweepProgress:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> Any:
        return self.bar.__exit__(*exc)

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

    def on_trial_epoch(self, trial: TrialInfo, epoch: Any) -> None:
        row = self.running.get(trial.number)
        if row is not None:
            loss = epoch.metrics.get("train_loss")
            info = f"epoch {epoch.epoch}" + (f", loss {loss:.4g}" if loss is not None else "")
            self.bar.update(row, completed=epoch.epoch, info=info)

    def on_trial_end(self, trial: TrialInfo, result: Any) -> None:
        row = self.running.pop(trial.number, None)
        if row is not None:
            self.bar.remove_task(row)
        metric = self.spec.objectives[0].metric
        value = (result.metrics or result.last_epoch_metrics()).get(metric)
        shown = result.error if result.error or value is None else f"{metric}={value:.4g}"
        self.bar.console.print(f"trial {trial.number}: {result.status.value} {shown} "
                               f"({result.wall_s:.1f} s)", markup=False, highlight=False)
        notice = self.notice.line(result)
        if notice:
            self.bar.console.print(notice, markup=False, highlight=False, soft_wrap=True)
        self.bar.update(self.task, advance=1, info=f"best {trial.best}")


class LineProgress(Subscriber):
    """One plain line per trial, for logs of workers that no one watches."""

    def __init__(self, spec: Any):
        self.spec = spec
        self.notice = SplitNotice(spec)

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def on_sweep_start(self, total: int, done: int, best: str = "-") -> None:
        console.print(resuming(self.spec.name, total, done, best) if done else
                      f"{self.spec.name}: 0/{total} trials done", highlight=False)

    def on_mlflow_open(self, runs: str, parent: str, serve: str | None) -> None:
        for line in link_lines(runs, serve):
            console.print(line, highlight=False, soft_wrap=True)

    def on_sweep_stopping(self, running: list[int], opening: bool, hurried: bool) -> None:
        console.print(stopping(running, opening, hurried), markup=False, highlight=False)

    def on_trial_end(self, trial: TrialInfo, result: Any) -> None:
        console.print(f"trial {trial.number}: {result.status.value} ({result.wall_s:.1f} s); "
                      f"best {trial.best}", markup=False, highlight=False)
        notice = self.notice.line(result)
        if notice:
            console.print(notice, markup=False, highlight=False, soft_wrap=True)
