"""`msexp report`: what a study found, in the terminal (or as JSON) and on its MLflow
parent run."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from msexp.cli.options import (
    OptionalSweepFileArg,
    ReadStudyOpt,
    StorageOpt,
    TrackingOpt,
    console,
    parse_baselines,
)
from msexp.cli.render import cell, finished_trials, kv, print_json, trials_table
from msexp.cli.studies import JsonOpt, existing_study
from msexp.paths import REPORTS_DIR
from msexp.tracking.runs import Tracker


def report(
    file: OptionalSweepFileArg = None,
    study: ReadStudyOpt = None,
    storage: StorageOpt = None,
    tracking_uri: TrackingOpt = None,
    baseline: Annotated[Optional[list[str]], typer.Option(
        help="KNOB=VALUE the knob effects are relative to (repeatable).",
        show_default="each knob's first value")] = None,
    color_by: Annotated[Optional[str], typer.Option(
        help="The knob that colours the learning curves.",
        show_default="the most important knob")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a study's trials, best trial, importances and knob effects.

    Optuna's plots (optimization history, parallel coordinates, importances, Pareto front)
    are saved as HTML under mlruns/reports/, with a PNG per swept knob (each metric against
    the knob's values, and as a ratio to its baseline value), learning curves, and
    effects.md/effects.html; all are logged under report/ on the sweep's MLflow parent run.

    --json prints {"study", "trials": [{"number", "status", "params", "metrics",
    "feasible"}], "best": [{"number", "values", "params"}], "multi_objective",
    "replicates": [{"params", "mean", "std", "seeds"}], "replicate_effects",
    "knob_effects", "importances", "importance_note", "notes", "plots", "run_id"}.

    Example: msexp report sweeps/accum.yaml --baseline micro_size=1
    """
    from msexp.tracking.report import build_report, log_report  # lazy: Optuna's plots

    loaded = existing_study(file, study, storage)
    rep = build_report(loaded, REPORTS_DIR / loaded.study_name,
                       parse_baselines(baseline or []), color_by)
    if as_json:
        print_json(_report_document(rep, log_report(rep, Tracker(tracking_uri))))
        return
    trials_table(loaded)
    _best_table(rep)
    if rep.configurations:
        _replicates_table(rep)
    _findings(rep)
    run_id = log_report(rep, Tracker(tracking_uri))
    if run_id:
        console.print(f"logged on MLflow run {run_id}")


def _best_table(rep: Any) -> None:
    """The best trial, or the Pareto set: its objective values and params."""
    if not rep.best:
        return
    table = Table(title="Pareto set" if rep.multi_objective else "best trial")
    for column in ("#", *rep.objective_names(), "params"):
        table.add_column(column)
    for t in rep.best:
        table.add_row(str(t.number), *(cell(v) for v in t.values), kv(t.params))
    console.print(table)


def _findings(rep: Any) -> None:
    """Each knob's effect and its notes, the importances, and the plots written."""
    if rep.knob_effects and rep.knob_effects.lines():
        console.print("knob effects (baseline -> value):")
        for line in rep.knob_effects.lines():
            console.print(f"  {line}", highlight=False, soft_wrap=True)
    for note in rep.knob_effects.notes if rep.knob_effects else []:
        console.print(f"note: {note}", highlight=False, soft_wrap=True)
    if rep.importances:
        of = f" for {rep.objective_names()[0]}" if rep.multi_objective else ""
        console.print(f"importance{of}: " + ", ".join(f"{k}={v:.2f}" for k, v in
                                                       rep.importances.items()))
    elif rep.importance_note:
        console.print(rep.importance_note, highlight=False)
    for path in rep.plots:
        console.print(f"plot: {path}")


def _report_document(rep: Any, run_id: str | None) -> dict[str, Any]:
    names = rep.objective_names()
    return {
        "study": rep.study.study_name,
        "trials": finished_trials(rep.study),
        "best": [{"number": t.number, "values": dict(zip(names, t.values)), "params": t.params}
                 for t in rep.best],
        "multi_objective": rep.multi_objective,
        "replicates": [{"params": c.params, "mean": {m: c.mean(m) for m in names},
                        "std": {m: c.std(m) for m in names},
                        "seeds": max(map(len, c.values.values()))}
                       for c in rep.configurations],
        "replicate_effects": [effect.line() for effect in rep.effects],
        "knob_effects": rep.knob_effects.lines() if rep.knob_effects else [],
        "importances": rep.importances,
        "importance_note": rep.importance_note,
        "notes": rep.knob_effects.notes if rep.knob_effects else [],
        "plots": [str(path) for path in rep.plots],
        "run_id": run_id,
    }


def _replicates_table(rep: Any) -> None:
    """Each configuration's mean ± std over its seeds, then each knob's effect."""
    metrics = rep.objective_names()
    knobs = sorted({k for c in rep.configurations for k in c.params})
    table = Table(title="mean ± std over seeds")
    for column in (*knobs, *metrics, "seeds"):
        table.add_column(column, justify="right")
    for c in rep.configurations:
        table.add_row(*(cell(c.params.get(k, "-")) for k in knobs),
                      *(f"{c.mean(m):.4g} ± {c.std(m):.2g}" for m in metrics),
                      str(max(map(len, c.values.values()))))
    console.print(table)
    for effect in rep.effects:
        console.print(effect.line(), highlight=False)


