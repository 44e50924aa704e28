"""What a study found: trials, the best trial or Pareto set, importances, Optuna's plots."""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from msexp.errors import MsexpError
from msexp.keys import RunTag, StudyKey, TrialKey
from msexp.library_warnings import warnings_to_log
from msexp.secrets.redaction import redact
from msexp.tracking.effects import KnobEffects, knob_effects, short
from msexp.tracking.replicates import (
    SEED,
    Configuration,
    Effect,
    configurations,
    effects,
    markdown,
)
from msexp.tracking.runs import CHECKPOINT_ARTIFACTS, Tracker

UNRANKED = "will be equal"  # Optuna's warning when it cannot rank the params


@dataclass
class Report:
    """A study's results, ready to print or log."""

    study: optuna.Study
    best: list[FrozenTrial]
    importances: dict[str, float] = field(default_factory=dict)
    importance_note: str | None = None  # why there is no ranking, where there could be one
    plots: list[Path] = field(default_factory=list)
    configurations: list[Configuration] = field(default_factory=list)  # with repeats
    effects: list[Effect] = field(default_factory=list)
    knob_effects: KnobEffects | None = None

    @property
    def multi_objective(self) -> bool:
        return len(self.study.directions) > 1

    def objective_names(self) -> list[str]:
        names = self.study.user_attrs.get(StudyKey.OBJECTIVES)
        return names or [f"value{i}" for i in range(len(self.study.directions))]


def best_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The best feasible trial, or the feasible Pareto set of a multi-objective study; []
    before any. Feasible as Optuna judges it: every constraint it was told is <= 0 (a
    trial that breaks a sweep's constraint is never best). One objective: Optuna's own
    `best_trial`; several: the front here (Optuna's `best_trials` copies every trial:
    0.41 s against 0.01 s on 3,000)."""
    if len(study.directions) == 1:
        try:
            return [study.best_trial]
        except ValueError:  # no feasible trial completed yet
            return []
    complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if all(value <= 0.0 for value in t.constraints.values())]
    return _pareto_front(complete, study.directions) if complete else []


def _pareto_front(trials: list[FrozenTrial], directions: list[optuna.study.StudyDirection]
                  ) -> list[FrozenTrial]:
    """The trials no other trial dominates, in their order. (Optuna's `best_trials` ranks
    every trial, so an infeasible one could hide the feasible front; its own filter is
    private.) Best first, a trial can be dominated only by one before it."""
    signs = [1 if d == optuna.study.StudyDirection.MAXIMIZE else -1 for d in directions]
    scored = sorted(((tuple(s * v for s, v in zip(signs, t.values)), i)
                     for i, t in enumerate(trials)), reverse=True)
    front = _front_of_two(scored) if len(signs) == 2 else _front_of_many(scored)
    return [trials[i] for i in sorted(front)]


def _front_of_two(scored: list[tuple[tuple[float, ...], int]]) -> list[int]:
    """Two objectives in one pass (n log n with the sort): a trial stands where its second
    value beats every second value of the trials before it, its equals left out."""
    front, best = [], -math.inf
    for values, equal in itertools.groupby(scored, key=lambda found: found[0]):
        if values[1] > best:
            front += [i for _, i in equal]
        best = max(best, values[1])
    return front


def _front_of_many(scored: list[tuple[tuple[float, ...], int]]) -> list[int]:
    """Any number of objectives: a trial dominated by another is dominated by one on the
    front, so each is compared with the front only."""
    front: list[tuple[tuple[float, ...], int]] = []
    for values, i in scored:
        if not any(other != values and all(o >= v for o, v in zip(other, values))
                   for other, _ in front):
            front.append((values, i))
    return [i for _, i in front]


def build_report(study: optuna.Study, plots_dir: Path | None = None,
                 baselines: dict[str, str] | None = None, color_by: str | None = None
                 ) -> Report:
    """Collect the best trial(s), importances, each knob's effects against its baseline
    value (`baselines`: knob -> value, default each knob's first) and, if `plots_dir`,
    Optuna's HTML plots and the knob-effects PNGs (learning curves coloured by `color_by`,
    default the most important knob)."""
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    report = Report(study, best_trials(study))
    metrics = report.objective_names()
    report.importances, report.importance_note = importances(study, complete, metrics[0])
    groups = configurations(study, metrics)
    if any(len(v) > 1 for c in groups for v in c.values.values()):
        report.configurations = groups
        report.effects = [e for m in metrics for e in effects(groups, m)]
    report.knob_effects = knob_effects(study, baselines)
    swept = [k.name for k in report.knob_effects.knobs]
    if color_by is not None and color_by not in swept:
        raise MsexpError(f"--color-by {color_by}: not a swept knob of {study.study_name}; "
                         f"swept: {', '.join(swept) or 'none'}")
    if plots_dir is not None and complete:
        report.plots = _write_plots(report, plots_dir)
        from msexp.tracking.effect_plots import write_effects  # lazy: matplotlib

        report.plots += write_effects(study, report.knob_effects, plots_dir,
                                      color_by or next(iter(report.importances), None))
        if report.configurations:
            table = plots_dir / "replicates.md"
            table.write_text(markdown(groups, metrics, report.effects), encoding="utf-8")
            report.plots.append(table)
    return report


def importances(study: optuna.Study, complete: list[FrozenTrial], objective: str
                ) -> tuple[dict[str, float], str | None]:
    """Optuna's importance of each varied param but the replicate seed, for the first
    objective; or none and the reason, when no ranking can mean anything."""
    varied = _varied_params(complete)
    if len(complete) < 2 or not varied:
        return {}, None
    values = {t.values[0] for t in complete}
    if len(values) == 1:
        return {}, (f"importance: none, every complete trial has {objective} = "
                    f"{short(values.pop())}")
    ranked = [name for name in varied if name != SEED]
    if not ranked:
        return {}, "importance: none, only the replicate seed varies"
    target = (lambda t: t.values[0]) if len(study.directions) > 1 else None
    with warnings_to_log() as caught:
        try:
            found = dict(optuna.importance.get_param_importances(study, params=ranked,
                                                                 target=target))
        except (RuntimeError, ValueError):
            found = {}
    unranked = next((str(w.message) for w in caught if UNRANKED in str(w.message)), None)
    if unranked:
        return {}, f"importance: none ({unranked.split('. ')[0].lower()})"
    return found, None


def _varied_params(trials: list[FrozenTrial]) -> list[str]:
    names = sorted({name for t in trials for name in t.params})
    return [n for n in names if len({repr(t.params.get(n)) for t in trials}) > 1]


def _write_plots(report: Report, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    with warnings_to_log():
        figures = _figures(report)
    paths = []
    for name, figure in figures.items():
        path = folder / f"{name}.html"
        figure.write_html(str(path), include_plotlyjs=True)  # viewable offline
        paths.append(path)
    return paths


def _figures(report: Report) -> dict[str, Any]:
    from optuna import visualization as vis  # lazy: plotly takes a second to import

    study, names = report.study, report.objective_names()
    figures: dict[str, Any] = {}
    if report.multi_objective:
        figures["pareto_front"] = vis.plot_pareto_front(study, target_names=names)
        for i, name in enumerate(names):
            figures[f"history_{name}"] = vis.plot_optimization_history(
                study, target=lambda t, i=i: t.values[i], target_name=name)
    else:
        figures["optimization_history"] = vis.plot_optimization_history(
            study, target_name=names[0])
        if report.importances:
            figures["param_importances"] = vis.plot_param_importances(
                study, params=list(report.importances))
    if report.importances or len(study.get_trials(deepcopy=False)) > 1:
        target = (lambda t: t.values[0]) if report.multi_objective else None
        figures["parallel_coordinate"] = vis.plot_parallel_coordinate(
            study, target=target, target_name=names[0])
    return figures


def log_report(report: Report, tracker: Tracker) -> str | None:
    """Attach the plots and the best metrics to the study's MLflow parent run."""
    run_id = log_best(report.study, tracker)
    if run_id:
        for path in report.plots:
            tracker.client.log_artifact(run_id, str(path), "report")
    return run_id


def log_best(study: optuna.Study, tracker: Tracker) -> str | None:
    """Log the best trial's metrics (best_*) and number on the study's parent run."""
    run_id = study.user_attrs.get(StudyKey.PARENT_RUN)
    if not run_id or not tracker.has_run(run_id):
        return None
    chosen = best_trials(study)
    if len(study.directions) == 1 and chosen:
        from mlflow.entities import Metric, RunTag  # lazy: MLflow takes ~1.4 s to import

        best = chosen[0]
        now = int(time.time() * 1000)
        params = best.user_attrs.get(TrialKey.PARAMS) or best.params
        tracker.client.log_batch(run_id, metrics=[
            Metric(f"best_{k}", float(v), now, 0)
            for k, v in best.user_attrs.get(TrialKey.METRICS, {}).items()
            if isinstance(v, (int, float)) and math.isfinite(v)], tags=[
            RunTag("best_trial", str(best.number)),
            *(RunTag(f"best.{k}", redact(str(v))[:5000]) for k, v in params.items())])
    return run_id


def log_best_checkpoint(study: optuna.Study, tracker: Tracker) -> str | None:
    """Attach the best trial's kept model to its child run and link it from the parent run
    (tag `best_checkpoint`); returns the artifact URI, or None when there is none."""
    parent = study.user_attrs.get(StudyKey.PARENT_RUN)
    chosen = best_trials(study)
    if not parent or not chosen or len(study.directions) > 1:
        return None
    best = chosen[0]
    checkpoint = best.user_attrs.get(TrialKey.CHECKPOINT)
    run_id = best.user_attrs.get(TrialKey.RUN_ID)
    if not checkpoint or not Path(checkpoint).is_file() or run_id in (None, "spooled"):
        return None
    names = {a.path for a in tracker.client.list_artifacts(run_id, CHECKPOINT_ARTIFACTS)}
    name = f"{CHECKPOINT_ARTIFACTS}/{Path(checkpoint).name}"
    if name not in names:
        tracker.client.log_artifact(run_id, checkpoint, CHECKPOINT_ARTIFACTS)
    uri = f"runs:/{run_id}/{name}"
    tracker.client.set_tag(parent, RunTag.BEST_CHECKPOINT, uri)
    return uri


def state_counts(study: optuna.Study) -> dict[str, int]:
    """Trials per state, with msexp's statuses (TIMEOUT) where the trial has one."""
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        name = t.state.name
        if t.state.is_finished():
            name = t.user_attrs.get(TrialKey.STATUS, name)
        counts[name] = counts.get(name, 0) + 1
    return counts
