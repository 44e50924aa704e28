"""How commands show things: value cells, tables of trials, a sweep's summary (its
progress while it runs: `cli/progress`)."""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from msexp.cli.options import console
from msexp.keys import StudyKey, TrialKey
from msexp.knobs import value_text as cell
from msexp.secrets.redaction import redact

if TYPE_CHECKING:  # Optuna and the sweep's driver: not at start-up
    import optuna

    from msexp.search.driver import SweepOutcome


def kv(values: dict[str, Any], exclude: Collection[str] = ()) -> str:
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


def finished_trials(study: optuna.Study) -> list[dict[str, Any]]:
    """Each finished trial of a study: number, status, swept params, metrics, feasibility."""
    return [{"number": t.number, "status": t.user_attrs.get(TrialKey.STATUS, t.state.name),
             "params": t.params, "metrics": t.user_attrs.get(TrialKey.METRICS, {}),
             "feasible": t.user_attrs.get(TrialKey.FEASIBLE)}
            for t in study.get_trials(deepcopy=False) if t.state.is_finished()]


def trials_table(study: optuna.Study) -> None:
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


def missing_objectives(study: optuna.Study) -> str | None:
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


def _yes_no(value: object) -> str:
    return "-" if value is None else "yes" if value else "no"


def summary(outcome: SweepOutcome) -> None:
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
