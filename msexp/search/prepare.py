"""A claimed trial made ready to run: its params sampled and resolved, its folder, its
name, and its request."""

from __future__ import annotations

import time
import uuid
from typing import Any

import optuna

from msexp.execution.protocol import TrialRequest
from msexp.execution.result import Status, TrialResult
from msexp.execution.subscribers import TrialInfo
from msexp.keys import StudyKey
from msexp.knobs import value_text
from msexp.search.claims import is_later_attempt
from msexp.search.requests import trial_request
from msexp.secrets.redaction import redact_value
from msexp.spec import SweepSpec
from msexp.spec.space import derived
from msexp.trial_folder import EVENTS, LOG, trial_folder


def prepare_trial(spec: SweepSpec, study: optuna.Study, handle: optuna.Trial
                  ) -> tuple[TrialInfo, TrialRequest]:
    """Sample the trial's params and say what it runs and where."""
    trial = _described(spec, handle.number, spec.space.suggest(handle), time.time(),
                       later_attempt=is_later_attempt(handle), handle=handle)
    folder = trial_folder(study.study_name, handle.number).resolve()
    identity = f"{study.user_attrs.get(StudyKey.UID, study.study_name)}/{handle.number}"
    return trial, trial_request(spec, trial.params, folder, identity, uuid.uuid4().hex)


def _described(spec: SweepSpec, number: int, assigned: dict[str, Any], started: float,
               later_attempt: bool = False, handle: optuna.Trial | None = None) -> TrialInfo:
    """A trial of these assigned values: its name, its resolved params, what MLflow logs."""
    params = spec.space.resolve(assigned)
    name = " ".join([f"#{number}",
                     *(f"{k}={value_text(redact_value(k, v))}" for k, v in assigned.items())])
    logged = {**params, **derived(params), "experiment": spec.experiment.ref}
    return TrialInfo(number, name, params, logged, started, later_attempt, handle)


def unprepared(spec: SweepSpec, handle: optuna.Trial) -> TrialInfo:
    """A trial whose params could not be sampled: it fails with what it has."""
    return TrialInfo(handle.number, f"#{handle.number}", dict(handle.params),
                     {**handle.params, "experiment": spec.experiment.ref}, time.time(),
                     handle=handle)


def stale(spec: SweepSpec, study: optuna.Study, frozen: optuna.trial.FrozenTrial,
          error: str) -> tuple[TrialInfo, TrialResult]:
    """A trial whose orchestrator died, failed out of `budget.retries` without running again: what
    it is recorded with (its params as a run of it logs them, a secret's value redacted;
    the log and events its last attempt left)."""
    started = frozen.datetime_start.timestamp() if frozen.datetime_start else time.time()
    trial = _described(spec, frozen.number, spec.space.assigned(frozen.params), started,
                       later_attempt=True)
    folder = trial_folder(study.study_name, frozen.number)
    result = TrialResult(Status.FAILED, error=error, log_path=folder / LOG,
                         events_path=folder / EVENTS,
                         wall_s=max(0.0, time.time() - started))
    return trial, result
