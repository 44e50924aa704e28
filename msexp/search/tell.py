"""How a trial ended, told to Optuna: its state, its objectives' values, what it kept."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from msexp.execution.protocol import Epoch
from msexp.execution.result import Status, TrialResult
from msexp.execution.subscribers import TrialInfo
from msexp.keys import TrialKey
from msexp.search.unreported import listing
from msexp.secrets.redaction import known_secrets, redact_known, redact_params
from msexp.spec import Objective, SweepSpec
from msexp.tracking.curves import epoch_table
from msexp.tracking.report import best_trials

_OPTUNA_STATE = {Status.COMPLETE: TrialState.COMPLETE, Status.PRUNED: TrialState.PRUNED,
                 Status.FAILED: TrialState.FAIL, Status.TIMEOUT: TrialState.FAIL}


@dataclass(frozen=True)
class Judged:
    """A trial's result as it is recorded and told (a new value: the raw result it was
    judged from is left as the trial reported it), and what Optuna is to keep of the
    judgement (the objectives missing)."""

    result: TrialResult
    kept: dict[str, Any] = field(default_factory=dict)


def judge(spec: SweepSpec, trial: TrialInfo, raw: TrialResult,
          unreported: str | None = None) -> Judged:
    """A trial that ran to the end without reporting its objectives is FAILED, with the
    reason and what it did report, before anyone records it; so is one stopped at an
    epoch that showed it would not report them (`unreported`: why), unless it completed
    with them meanwhile. Its error is redacted."""
    result = dataclasses.replace(raw, error=redact_known(raw.error, known_secrets(
        trial.params)) if raw.error else raw.error)
    values = objective_values(spec, result)
    missing = [o.metric for o, v in zip(spec.objectives, values) if not math.isfinite(v)]
    if unreported and (missing or result.status is not Status.COMPLETE):
        return Judged(dataclasses.replace(result, status=Status.FAILED, error=unreported))
    if result.status is Status.COMPLETE and missing:
        reported = {*result.final_metrics(), *(n for e in result.epochs for n in e.metrics)}
        error = (f"objective not available: {', '.join(missing)} "
                 f"({listing(reported, missing[0])})")
        return Judged(dataclasses.replace(result, status=Status.FAILED, error=error),
                      {TrialKey.MISSING: missing})
    return Judged(result)


def tell(study: optuna.Study, spec: SweepSpec, handle: optuna.Trial, trial: TrialInfo,
         result: TrialResult, kept: dict[str, Any] | None = None) -> None:
    """Write what the trial (`handle`, the study's) kept (and `kept`: what its judge and
    subscribers keep of it) as user attributes, and its constraints, then tell it."""
    metrics = result.final_metrics()
    attrs = {TrialKey.PARAMS: redact_params(trial.params), TrialKey.STATUS: result.status.value,
             TrialKey.METRICS: {k: v for k, v in metrics.items() if math.isfinite(v)},
             TrialKey.EPOCHS: epoch_table(result.epochs), **(kept or {})}
    if result.error:
        attrs[TrialKey.ERROR] = kept_error(result.error)
    elif trial.later_attempt:  # why an earlier attempt stopped (`claims.put_back`) is over
        attrs[TrialKey.ERROR] = None
    if result.checkpoint:
        attrs[TrialKey.CHECKPOINT] = str(result.checkpoint)
    if result.batch_statistics:
        attrs[TrialKey.BATCH_STATISTICS] = dataclasses.asdict(result.batch_statistics)
    if spec.constraints:
        attrs[TrialKey.FEASIBLE] = spec.feasible(metrics)  # the constraints' own metrics
        for i, constraint in enumerate(spec.constraints):
            handle.set_constraint(f"{i}:{constraint.metric}", constraint.violation(metrics))
    for key, value in attrs.items():
        handle.set_user_attr(key, value)
    if result.status is Status.COMPLETE:
        study.tell(handle, objective_values(spec, result))
    else:
        study.tell(handle, state=_OPTUNA_STATE[result.status])


# an RDB storage keeps a user attribute as JSON in a TEXT column (65,535 bytes on MySQL):
# 1000 characters take at most 12,000 bytes, escaped
ERROR_CHARS = 1000
CUT = "\n[...]\n"


def kept_error(error: str) -> str:
    """`error` as Optuna keeps it: whole, or, past ERROR_CHARS, its head (what failed) and
    its tail (a traceback's or a log's last lines: what caused it) around a cut."""
    if len(error) <= ERROR_CHARS:
        return error
    head = ERROR_CHARS // 5
    return error[:head] + CUT + error[len(error) - (ERROR_CHARS - head - len(CUT)):]


def objective_values(spec: SweepSpec, result: TrialResult) -> list[float]:
    metrics = result.final_metrics()
    return [objective_value(o, metrics, result.epochs) for o in spec.objectives]


def objective_value(objective: Objective, metrics: dict[str, float], epochs: list[Epoch]
                    ) -> float:
    """The value told to Optuna: the final one, or with `reduce: best` the best epoch's."""
    if objective.reduce == "best":
        values = [e.metrics[objective.metric] for e in epochs
                  if math.isfinite(e.metrics.get(objective.metric, math.nan))]
        if values:
            return max(values) if objective.direction == "maximize" else min(values)
    return metrics.get(objective.metric, math.nan)


def best_so_far(study: optuna.Study, spec: SweepSpec) -> str:
    """The study's best trial as one short text (the size of the Pareto set for several
    objectives)."""
    chosen = best_trials(study)
    if len(spec.objectives) > 1:
        return f"pareto {len(chosen)}"
    if not chosen:
        return "-"
    return f"{spec.objectives[0].metric}={chosen[0].value:.4g} (#{chosen[0].number})"
