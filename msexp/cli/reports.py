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
from msexp.errors import MsexpError
from msexp.paths import REPORTS_DIR


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

    Writes mlruns/reports/STUDY/report.html, one page that holds it all, beside its PNGs
    (the objective by trial, a PNG per swept knob with each metric against the knob's
    values and as a ratio to its baseline value, learning curves, and where they apply the
    Pareto front, importances and parallel coordinates) and effects.md; logs them under
    report/ on the sweep's MLflow parent run, once per state of the study. A study with no
    finished trial has nothing to report (exit 1).

    --json prints {"study", "trials": [{"number", "status", "params", "metrics",
    "feasible"}], "best": [{"number", "values", "params"}], "multi_objective",
    "replicates": [{"params", "mean", "std", "seeds"}], "replicate_effects",
    "knob_effects", "importances", "importance_note", "notes", "plots", "run_id"}.

    Example: msexp report sweeps/accum.yaml --baseline micro_size=1
    """
    from msexp.tracking.report import build_report, log_report  # lazy: Optuna, matplotlib

    loaded = existing_study(file, study, storage)
    _require_finished(loaded)
    rep = build_report(loaded, REPORTS_DIR / loaded.study_name,
                       parse_baselines(baseline or []), color_by)
    if as_json:
        print_json(_report_document(rep, log_report(rep, tracking_uri)))
        return
    trials_table(loaded)
    _best_table(rep)
    if rep.configurations:
        _replicates_table(rep)
    _findings(rep)
    run_id = log_report(rep, tracking_uri)
    if run_id:
        console.print(f"logged on MLflow run {run_id}", highlight=False)


def _require_finished(loaded: Any) -> None:
    """A study none of whose trials has finished has nothing to report: one line, exit 1."""
    from msexp.tracking.report import state_counts  # lazy: as above

    if any(t.state.is_finished() for t in loaded.get_trials(deepcopy=False)):
        return
    counts = state_counts(loaded)
    now = ", ".join(f"{n} {state.lower()}" for state, n in sorted(counts.items()))
    raise MsexpError(f"nothing to report: no trial of study {loaded.study_name!r} has "
                     f"finished yet ({now or 'no trials'})")


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
    """The replicates' and knobs' effects, notes and importances, then the report's files:
    its page first (one file that holds them all)."""
    for line in rep.findings()[len(rep.effects):]:  # the replicates' effects are shown
        console.print(line, highlight=False, soft_wrap=True)
    if rep.plots:
        console.print(f"report: {rep.plots[0]} (one page; beside it: "
                      + ", ".join(p.name for p in rep.plots[1:]) + ")", highlight=False,
                      soft_wrap=True)


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


